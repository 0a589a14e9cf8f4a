"""turncore: the pure core of the turn runtime.

Schemas of the durable turn log, the reducer, the request composer, context
resolution, the file repository, and the provider-neutral model port with
its adapters (``turncore.model``). Nothing here imports Temporal.
"""

from .compose import ComposedRequest, closed_transcript, compose_model_request, next_model_request
from .context import ContextResolver, ElisionPolicy
from .errors import (
    ContextResolutionError,
    CorruptTurnError,
    DependencyError,
    InfrastructureError,
    InvalidInputError,
    InvalidTurnIdError,
    RejectedInputError,
    TurnError,
    TurnExistsError,
    TurnFailure,
    TurnNotFoundError,
)
from .events import (
    SCHEMA_VERSION,
    ModelDescriptor,
    RequestedAgent,
    ResolvedAgent,
    ToolDescriptor,
    ToolResultData,
    TurnCreated,
    TurnEvent,
    TurnExternalInput,
    TurnOutcome,
    TurnStreamEvent,
    TurnUsage,
    parse_event,
    parse_input,
)
from .ids import TurnIdGenerator, turn_path, validate_turn_id
from .messages import AssistantMessage, ConversationMessage, ToolMessage, UserMessage
from .reducer import TurnReducer, TurnState, apply, reduce_turn
from .repository import FileTurnRepository, InMemoryTurnRepository, TurnRepository, read_path

__all__ = [
    "SCHEMA_VERSION",
    "AssistantMessage",
    "ComposedRequest",
    "ContextResolutionError",
    "ContextResolver",
    "ConversationMessage",
    "CorruptTurnError",
    "DependencyError",
    "ElisionPolicy",
    "FileTurnRepository",
    "InMemoryTurnRepository",
    "InfrastructureError",
    "InvalidInputError",
    "InvalidTurnIdError",
    "ModelDescriptor",
    "RejectedInputError",
    "RequestedAgent",
    "ResolvedAgent",
    "ToolDescriptor",
    "ToolMessage",
    "ToolResultData",
    "TurnCreated",
    "TurnError",
    "TurnEvent",
    "TurnExistsError",
    "TurnExternalInput",
    "TurnFailure",
    "TurnIdGenerator",
    "TurnNotFoundError",
    "TurnOutcome",
    "TurnReducer",
    "TurnRepository",
    "TurnState",
    "TurnStreamEvent",
    "TurnUsage",
    "UserMessage",
    "apply",
    "closed_transcript",
    "compose_model_request",
    "next_model_request",
    "parse_event",
    "parse_input",
    "read_path",
    "reduce_turn",
    "turn_path",
    "validate_turn_id",
]
