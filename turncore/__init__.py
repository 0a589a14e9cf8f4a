"""turncore: the turn runtime without Temporal.

Schemas of the durable turn log, the reducer, the loop's decisions, the
request composer, context resolution, turn storage (``turncore.storage``:
the file, in-memory and PostgreSQL repositories) and the provider-neutral
model port with its HTTP adapters (``turncore.model``).

Its one rule is that nothing here imports ``temporalio`` (ruff's ``TID251``
ban enforces it), so the workflow sandbox can pass the package through and
any program can read and validate turn files without the Temporal SDK. It is
not free of I/O: the repositories read and write files and PostgreSQL, and
the adapters speak HTTP; the pure parts (events, reducer, decisions,
composer) are the modules that do neither.
"""

from __future__ import annotations

# Names load on first use (PEP 562): a command that only reads a file, or code
# that needs one error class, does not pay for the composer, the adapters or
# httpx. Type checkers see ordinary imports.
from typing import TYPE_CHECKING

from turncore.lazy import lazy_exports

if TYPE_CHECKING:
    from .compose import (
        ComposedRequest,
        closed_transcript,
        compose_model_request,
        next_model_request,
    )
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
    from .reducer import TurnReducer, TurnState, reduce_turn
    from .storage.repository import (
        FileTurnRepository,
        InMemoryTurnRepository,
        TurnRepository,
        read_path,
    )

_LAZY: dict[str, str] = {
    "ComposedRequest": ".compose",
    "closed_transcript": ".compose",
    "compose_model_request": ".compose",
    "next_model_request": ".compose",
    "ContextResolver": ".context",
    "ElisionPolicy": ".context",
    "ContextResolutionError": ".errors",
    "CorruptTurnError": ".errors",
    "DependencyError": ".errors",
    "InfrastructureError": ".errors",
    "InvalidInputError": ".errors",
    "InvalidTurnIdError": ".errors",
    "RejectedInputError": ".errors",
    "TurnError": ".errors",
    "TurnExistsError": ".errors",
    "TurnFailure": ".errors",
    "TurnNotFoundError": ".errors",
    "SCHEMA_VERSION": ".events",
    "ModelDescriptor": ".events",
    "RequestedAgent": ".events",
    "ResolvedAgent": ".events",
    "ToolDescriptor": ".events",
    "ToolResultData": ".events",
    "TurnCreated": ".events",
    "TurnEvent": ".events",
    "TurnExternalInput": ".events",
    "TurnOutcome": ".events",
    "TurnStreamEvent": ".events",
    "TurnUsage": ".events",
    "parse_event": ".events",
    "parse_input": ".events",
    "TurnIdGenerator": ".ids",
    "turn_path": ".ids",
    "validate_turn_id": ".ids",
    "AssistantMessage": ".messages",
    "ConversationMessage": ".messages",
    "ToolMessage": ".messages",
    "UserMessage": ".messages",
    "TurnReducer": ".reducer",
    "TurnState": ".reducer",
    "reduce_turn": ".reducer",
    "FileTurnRepository": ".storage.repository",
    "InMemoryTurnRepository": ".storage.repository",
    "TurnRepository": ".storage.repository",
    "read_path": ".storage.repository",
}


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

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
