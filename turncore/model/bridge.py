"""From the turn's durable vocabulary to the port, and back.

- :func:`build_request` turns a resolved agent's system prompt and tool
  descriptors, the composed conversation and the persisted ``parameters``
  (``temperature``, ``topP``, ``maxOutputTokens``, ``reasoningEffort``; an
  empty ``providerOptions``) into a :class:`ModelCallRequest`. Unknown
  parameters refuse before the network.
- :class:`StepRecorder` turns the live stream into durable step events
  (text/reasoning start and end as they happen; completed tool calls and the
  finish step once the outcome is known; an error step on failure).
- :func:`completion_fields` gives ``model_call_completed``'s message, finish
  reason, usage and provider metadata; :func:`failure_message` gives
  ``model_call_failed.error``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, assert_never, get_args

from turncore.events import (
    DurableLlmStepStreamEvent,
    ModelDescriptor,
    StepError,
    StepFinish,
    StepReasoningEnd,
    StepReasoningStart,
    StepTextEnd,
    StepTextStart,
    StepToolCall,
    ToolDescriptor,
    TurnUsage,
)
from turncore.jsonvalue import JsonValue
from turncore.messages import AssistantMessage, ReasoningPart, TextPart, ToolCallPart
from turncore.model.binding import Binding, strip_foreign_state
from turncore.model.failures import Dispatch, FailureKind, ModelFailure, invalid, unsupported
from turncore.model.port import (
    FinishReason,
    ModelCallRequest,
    ModelOutcome,
    OutputFormat,
    PortMessage,
    ReasoningDeltaEvent,
    StreamEvent,
    TextDeltaEvent,
    ToolChoice,
    ToolDefinition,
)
from turncore.output import OutputSpec, strict_compatible

FINISH_REASONS: tuple[str, ...] = get_args(FinishReason)
PARAMETER_NAMES = ("temperature", "topP", "maxOutputTokens", "reasoningEffort", "providerOptions")


def _number(value: JsonValue, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(f"parameter {name} must be a number")
    return float(value)


def build_request(
    *,
    model: ModelDescriptor | str,
    system_prompt: str,
    tools: Sequence[ToolDescriptor],
    messages: Sequence[PortMessage],
    parameters: Mapping[str, JsonValue] | None = None,
    tool_choice: ToolChoice | None = None,
    deadline_seconds: float | None = None,
    binding: Binding | None = None,
    output_schema: Mapping[str, JsonValue] | None = None,
) -> ModelCallRequest:
    """A port request from the turn's values (``model`` is the descriptor or its model id).

    Given the ``binding`` the request is for, opaque state that earlier calls
    produced under any other binding is stripped (:func:`strip_foreign_state`).
    """
    params = dict(parameters or {})
    unknown = sorted(set(params) - set(PARAMETER_NAMES))
    if unknown:
        raise unsupported(f"unsupported model parameters: {', '.join(unknown)}")
    if params.get("providerOptions") not in (None, {}):
        raise unsupported("providerOptions are outside this contract revision")
    temperature = params.get("temperature")
    top_p = params.get("topP")
    max_out = params.get("maxOutputTokens")
    effort = params.get("reasoningEffort")
    if max_out is not None and (isinstance(max_out, bool) or not isinstance(max_out, int)):
        raise invalid("parameter maxOutputTokens must be an integer")
    if effort is not None and effort not in ("low", "medium", "high"):
        raise invalid("parameter reasoningEffort must be low, medium or high")
    return ModelCallRequest(
        model=model.model if isinstance(model, ModelDescriptor) else model,
        system=system_prompt,
        messages=[
            strip_foreign_state(m, binding)
            if binding is not None and isinstance(m, AssistantMessage)
            else m
            for m in messages
        ],
        tools=[ToolDefinition(t.name, t.description, t.input_schema) for t in tools],
        tool_choice=tool_choice,
        temperature=None if temperature is None else _number(temperature, "temperature"),
        top_p=None if top_p is None else _number(top_p, "topP"),
        max_output_tokens=max_out,
        reasoning_effort=effort,
        output=None if output_schema is None else _output_format(dict(output_schema)),
        deadline_seconds=deadline_seconds,
    )


def _output_format(schema: dict[str, Any]) -> OutputFormat:
    return OutputFormat(
        name=OutputSpec(schema).name, schema=schema, strict=strict_compatible(schema)
    )


# ---------------------------------------------------------------- outcome side


@dataclass(frozen=True)
class CompletedCall:
    """The fields of ``model_call_completed`` (besides index and timestamp)."""

    message: AssistantMessage
    finish_reason: FinishReason
    usage: TurnUsage
    provider_metadata: dict[str, Any]


def provider_metadata(outcome: ModelOutcome) -> dict[str, Any]:
    """The observation as JSON: the binding it is pinned to, plus only what the
    provider itself reported (upstream model, response id, stop token)."""
    obs = outcome.observation
    meta: dict[str, Any] = {"binding": obs.binding.coordinates(), "finalUsage": obs.final_usage}
    if obs.upstream_model is not None:
        meta["upstreamModel"] = obs.upstream_model
    if obs.response_id is not None:
        meta["responseId"] = obs.response_id
    if outcome.raw_stop_reason is not None:
        meta["stopReason"] = outcome.raw_stop_reason
    return {"turncore": meta}


def completion_fields(outcome: ModelOutcome) -> CompletedCall:
    return CompletedCall(
        message=outcome.message(),
        finish_reason=outcome.finish_reason,
        usage=outcome.usage,
        provider_metadata=provider_metadata(outcome),
    )


MODEL_FAILURE_CODE_PREFIX = "model-call-failed"

_WHAT_WAS_SENT: dict[Dispatch, str] = {
    Dispatch.NOT_SENT: "nothing was sent",
    Dispatch.REJECTED: "the provider refused it before doing any work",
    Dispatch.UNKNOWN: "the provider may have received it and may bill it",
    Dispatch.ACCEPTED: "the provider accepted it",
}


def failure_code(failure: ModelFailure) -> str:
    """``turn_failed.code`` for a model failure: ``model-call-failed:<kind>:<dispatch>``,
    so callers tell failures apart without parsing the sentence (spec §12: code is
    the machine-readable discriminator)."""
    return f"{MODEL_FAILURE_CODE_PREFIX}:{failure.kind.value}:{failure.dispatch.value}"


def parse_failure_code(code: str | None) -> tuple[FailureKind, Dispatch] | None:
    """The kind and dispatch in a :func:`failure_code`; None for any other code."""
    prefix, _, rest = (code or "").partition(":")
    kind, _, dispatch = rest.partition(":")
    if prefix != MODEL_FAILURE_CODE_PREFIX:
        return None
    try:
        return FailureKind(kind), Dispatch(dispatch)
    except ValueError:
        return None


def _advice(failure: ModelFailure, binding: Binding) -> str:
    """What the user can do about it, from the failure's kind and evidence."""
    match failure.kind:
        case FailureKind.AUTHENTICATION:
            if binding.auth_ref is None:
                return "The provider wants a key: name its variable with api_key_env in turns.toml."
            return f"Check the API key in the environment variable {binding.auth_ref}."
        case FailureKind.TRANSPORT | FailureKind.DEADLINE:
            if failure.dispatch is Dispatch.NOT_SENT:
                return "Check that the server at that base_url is running and reachable."
            return "Check the server at that base_url and the network between."
        case FailureKind.RATE_LIMIT:
            return (
                "Wait and try again, or raise max_retries / retry_max_wait for this provider "
                "in turns.toml."
            )
        case FailureKind.PROTOCOL:
            return f"Check that base_url points at a {binding.protocol} API."
        case FailureKind.INVALID_INPUT | FailureKind.UNSUPPORTED | FailureKind.BOUNDS:
            return "Check the model id and the provider's settings in turns.toml."
        case FailureKind.REFUSAL:
            return "The model declined; rephrase the request."
        case FailureKind.CANCELLED:
            return "The call was cancelled."
        case FailureKind.CONTEXT_BUDGET:
            return "Nothing was sent to the provider."
        case _:
            assert_never(failure.kind)


def failure_message(error: BaseException, binding: Binding | None = None) -> str:
    """One line for ``model_call_failed.error``. A ModelFailure says what it knows —
    and, given the binding, which provider, model and base_url it was for, whether
    anything was sent, and what to do. Anything else is reduced to its type name
    (its text could carry anything). No secret, header or body ever appears: the
    base_url is validated to carry no credentials and the key only by its name."""
    if not isinstance(error, ModelFailure):
        return f"model call failed: unexpected {type(error).__name__}"
    if binding is None:
        return error.summary()
    return (
        f"{error.summary()}; provider {binding.provider}, model {binding.model}, "
        f"base_url {binding.endpoint}; {_WHAT_WAS_SENT[error.dispatch]}. "
        f"{_advice(error, binding)}"
    )


class StepRecorder:
    """Durable step events for one model call, fed by the live stream.

    ``on_event`` returns the events to append now (starts and ends of text and
    reasoning runs); ``finish`` the closing ones plus each completed tool call
    and the finish step; ``fail`` the closing ones plus an error step.
    """

    def __init__(self) -> None:
        self._open: Literal["text", "reasoning"] | None = None

    def _close(self) -> list[DurableLlmStepStreamEvent]:
        was, self._open = self._open, None
        if was == "text":
            return [StepTextEnd()]
        if was == "reasoning":
            return [StepReasoningEnd()]
        return []

    def _enter(self, kind: Literal["text", "reasoning"]) -> list[DurableLlmStepStreamEvent]:
        if self._open == kind:
            return []
        out = self._close()
        self._open = kind
        out.append(StepTextStart() if kind == "text" else StepReasoningStart())
        return out

    def on_event(self, event: StreamEvent) -> list[DurableLlmStepStreamEvent]:
        if isinstance(event, TextDeltaEvent):
            return self._enter("text")
        if isinstance(event, ReasoningDeltaEvent):
            return self._enter("reasoning")
        return self._close()

    def finish(self, outcome: ModelOutcome) -> list[DurableLlmStepStreamEvent]:
        out = self._close()
        out.extend(
            StepToolCall(tool_call_id=p.tool_call_id, tool_name=p.tool_name, input=p.input)
            for p in outcome.tool_calls()
        )
        out.append(StepFinish(finish_reason=outcome.finish_reason, usage=outcome.usage))
        return out

    def fail(
        self, error: BaseException, binding: Binding | None = None
    ) -> list[DurableLlmStepStreamEvent]:
        """Close what is open; record the usage the provider reported before the
        failure as a ``finish-step`` (finish reason ``error``) so it counts in the
        turn's usage; then the error step."""
        out = self._close()
        if isinstance(error, ModelFailure) and error.usage is not None:
            out.append(StepFinish(finish_reason="error", usage=error.usage))
        out.append(StepError(error=failure_message(error, binding)))
        return out


def step_events(outcome: ModelOutcome) -> list[DurableLlmStepStreamEvent]:
    """All step events of an outcome at once (when nothing was recorded live)."""
    recorder = StepRecorder()
    out: list[DurableLlmStepStreamEvent] = []
    for part in outcome.parts:
        if isinstance(part, TextPart):
            out.extend(recorder.on_event(TextDeltaEvent(part.text)))
        elif isinstance(part, ReasoningPart):
            out.extend(recorder.on_event(ReasoningDeltaEvent(part.text)))
        elif isinstance(part, ToolCallPart):
            out.extend(recorder._close())
    out.extend(recorder.finish(outcome))
    return out


def normalise_finish_reason(token: str | None) -> FinishReason:
    """Any finish token to the spec's normalised set (unknown → ``other``)."""
    if token in FINISH_REASONS:
        return token  # type: ignore[return-value]
    aliases: dict[str, FinishReason] = {
        "content_filter": "content-filter",
        "tool_calls": "tool-calls",
        "tool_use": "tool-calls",
        "end_turn": "stop",
        "max_tokens": "length",
    }
    return aliases.get(token or "", "other")
