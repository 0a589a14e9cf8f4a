"""The model port and its adapters (seed 003, DESIGN §6).

The workflow's model activity builds a request with :func:`build_request`,
resolves a :class:`Model` from the :class:`ModelRegistry`, runs
``await model.turn(request, sink, cancel)``, and records the outcome with
:func:`completion_fields` and a :class:`StepRecorder` — or, on a
:class:`ModelFailure`, :func:`failure_message`. This package never imports
Temporal.
"""

from __future__ import annotations

from turncore.model._http import HttpModel, Secret
from turncore.model.anthropic import AnthropicModel
from turncore.model.binding import (
    Binding,
    Capabilities,
    Protocol,
    bind_unattributed_message,
    bound_options,
    opaque_state,
    strip_foreign_state,
    strip_opaque_message,
    unattributed_options,
)
from turncore.model.bridge import (
    CompletedCall,
    StepRecorder,
    build_request,
    completion_fields,
    failure_code,
    failure_message,
    normalise_finish_reason,
    parse_failure_code,
    provider_metadata,
    step_events,
)
from turncore.model.failures import (
    UNATTRIBUTED_REFUSAL,
    Dispatch,
    FailureKind,
    ModelFailure,
    ModelRequestError,
    SinkFailure,
)
from turncore.model.openai_chat import OpenAIChatModel
from turncore.model.openai_responses import OpenAIResponsesModel
from turncore.model.port import (
    DEFAULT_LIMITS,
    CancellationToken,
    FinishReason,
    Limits,
    Model,
    ModelCallRequest,
    ModelOutcome,
    NamedToolChoice,
    Observation,
    ReasoningDeltaEvent,
    ReasoningEffort,
    Sink,
    StreamEvent,
    TextDeltaEvent,
    ToolCallArgsDeltaEvent,
    ToolCallStartEvent,
    ToolChoice,
    ToolDefinition,
    discard_sink,
    validate_request,
)
from turncore.model.registry import (
    ModelRegistry,
    ProviderConfig,
    ProviderConfigError,
    default_client,
    load_providers,
    parse_model_ref,
)
from turncore.model.routing import RetryingModel, RetryPolicy, retry_delay, retryable
from turncore.model.scripted import (
    ScriptedModel,
    ScriptedResponse,
    ScriptedToolCall,
    call_index,
    load_script,
)

__all__ = [
    "DEFAULT_LIMITS",
    "UNATTRIBUTED_REFUSAL",
    "AnthropicModel",
    "Binding",
    "CancellationToken",
    "Capabilities",
    "CompletedCall",
    "Dispatch",
    "FailureKind",
    "FinishReason",
    "HttpModel",
    "Limits",
    "Model",
    "ModelCallRequest",
    "ModelFailure",
    "ModelOutcome",
    "ModelRegistry",
    "ModelRequestError",
    "NamedToolChoice",
    "Observation",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "Protocol",
    "ProviderConfig",
    "ProviderConfigError",
    "ReasoningDeltaEvent",
    "ReasoningEffort",
    "RetryPolicy",
    "RetryingModel",
    "ScriptedModel",
    "ScriptedResponse",
    "ScriptedToolCall",
    "Secret",
    "Sink",
    "SinkFailure",
    "StepRecorder",
    "StreamEvent",
    "TextDeltaEvent",
    "ToolCallArgsDeltaEvent",
    "ToolCallStartEvent",
    "ToolChoice",
    "ToolDefinition",
    "bind_unattributed_message",
    "bound_options",
    "build_request",
    "call_index",
    "completion_fields",
    "default_client",
    "discard_sink",
    "failure_code",
    "failure_message",
    "load_providers",
    "load_script",
    "normalise_finish_reason",
    "opaque_state",
    "parse_failure_code",
    "parse_model_ref",
    "provider_metadata",
    "retry_delay",
    "retryable",
    "step_events",
    "strip_foreign_state",
    "strip_opaque_message",
    "unattributed_options",
    "validate_request",
]
