"""The model port and its adapters (seed 003, DESIGN §6).

The workflow's model activity builds a request with :func:`build_request`,
resolves a :class:`Model` from the :class:`ModelRegistry`, runs
``await model.turn(request, sink, cancel)``, and records the outcome with
:func:`completion_fields` and a :class:`StepRecorder` — or, on a
:class:`ModelFailure`, :func:`failure_message`. This package never imports
Temporal.
"""

from __future__ import annotations

# Names load on first use (PEP 562): reading a turn file or a config resolves
# provider declarations without importing httpx or every adapter. Type
# checkers see ordinary imports.
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_LAZY: dict[str, str] = {
    "HttpModel": "_http",
    "Secret": "_http",
    "AnthropicModel": "anthropic",
    "Binding": "binding",
    "Capabilities": "binding",
    "Protocol": "binding",
    "bind_unattributed_message": "binding",
    "bound_options": "binding",
    "opaque_state": "binding",
    "strip_foreign_state": "binding",
    "strip_opaque_message": "binding",
    "unattributed_options": "binding",
    "CompletedCall": "bridge",
    "StepRecorder": "bridge",
    "build_request": "bridge",
    "completion_fields": "bridge",
    "failure_code": "bridge",
    "failure_message": "bridge",
    "normalise_finish_reason": "bridge",
    "parse_failure_code": "bridge",
    "provider_metadata": "bridge",
    "step_events": "bridge",
    "UNATTRIBUTED_REFUSAL": "failures",
    "Dispatch": "failures",
    "FailureKind": "failures",
    "ModelFailure": "failures",
    "ModelRequestError": "failures",
    "SinkFailure": "failures",
    "OpenAIChatModel": "openai_chat",
    "OpenAIResponsesModel": "openai_responses",
    "DEFAULT_LIMITS": "port",
    "CancellationToken": "port",
    "FinishReason": "port",
    "Limits": "port",
    "Model": "port",
    "ModelCallRequest": "port",
    "ModelOutcome": "port",
    "NamedToolChoice": "port",
    "Observation": "port",
    "ReasoningDeltaEvent": "port",
    "ReasoningEffort": "port",
    "Sink": "port",
    "StreamEvent": "port",
    "TextDeltaEvent": "port",
    "ToolCallArgsDeltaEvent": "port",
    "ToolCallStartEvent": "port",
    "ToolChoice": "port",
    "ToolDefinition": "port",
    "discard_sink": "port",
    "validate_request": "port",
    "ModelRegistry": "registry",
    "ProviderConfig": "registry",
    "ProviderConfigError": "registry",
    "default_client": "registry",
    "load_providers": "registry",
    "parse_model_ref": "registry",
    "RetryingModel": "routing",
    "RetryPolicy": "routing",
    "retry_delay": "routing",
    "retryable": "routing",
    "ScriptedModel": "scripted",
    "ScriptedResponse": "scripted",
    "ScriptedToolCall": "scripted",
    "call_index": "scripted",
    "load_script": "scripted",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'turncore.model' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


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
