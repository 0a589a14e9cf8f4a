"""Spans and metrics recorded where turncore acts: the client's advance and the activities.

Spans use the OpenTelemetry API when it is installed (``turncore[otel]``);
without a configured tracer provider they are the API's non-recording
spans, and attributes are only computed for a recording span, so tracing
that is off costs a context lookup. Without the package every helper here
is a no-op. Nothing here runs in workflow code: the workflow's own spans
come from Temporal's ``TracingInterceptor``, which never emits them again
on replay; the spans below are made by activities and the client, which
replay does not re-run.

Span names and attributes follow the OpenTelemetry GenAI semantic
conventions: ``chat {model}`` per model call (``gen_ai.operation.name``,
``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.response.model``, ``gen_ai.usage.*``,
``gen_ai.response.finish_reasons``; on failure ``error.type`` with
turncore's failure kind and dispatch), ``execute_tool {name}`` per tool
execution (``gen_ai.tool.name``, ``gen_ai.tool.call.id``). Prompts,
completions, tool inputs and outputs are recorded only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` is set in the
process that makes the span.

Metrics go through Temporal's metric meter (``activity.metric_meter()``),
so they share the worker runtime's exporter with Temporal's own metrics and
cost nothing when the runtime has none.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import orjson
from temporalio import activity

from turncore.events import TurnEvent, TurnUsage

if TYPE_CHECKING:
    from turncore.model import ModelFailure

try:
    from opentelemetry import trace as _trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # the otel extra is not installed: every helper is a no-op
    _trace = None  # type: ignore[assignment]

TRACER = "turncore"
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CONTENT_LIMIT = 16 * 1024
"""Longest captured content value, in characters (when capture is on)."""

_PROVIDER_NAMES = {
    "openai-chat": "openai",
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "scripted": "scripted",
}


def capture_content() -> bool:
    return os.environ.get(CAPTURE_ENV, "").strip().lower() in ("true", "1")


class _NoSpan:
    """Stands in for a span when OpenTelemetry is not installed."""

    def is_recording(self) -> bool:
        return False

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        pass

    def add_event(self, name: str, attributes: dict[str, Any] | None = None) -> None:
        pass

    def set_status(self, *args: Any) -> None:
        pass

    def record_exception(self, exc: BaseException) -> None:
        pass


@contextlib.contextmanager
def span(name: str, *, client: bool = False) -> Iterator[Any]:
    """A span as the current one for the block (a no-op stand-in without OpenTelemetry)."""
    if _trace is None:
        yield _NoSpan()
        return
    tracer = _trace.get_tracer(TRACER)
    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    with tracer.start_as_current_span(name, kind=kind, record_exception=True) as s:
        yield s


def start_span(name: str, *, client: bool = False) -> Any:
    """A span under the current one, not made current (end it with ``end_span``).

    For spans nothing nests under: the activity keeps its own control flow.
    """
    if _trace is None:
        return _NoSpan()
    kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
    return _trace.get_tracer(TRACER).start_span(name, kind=kind)


@contextlib.contextmanager
def current(s: Any) -> Iterator[None]:
    """Make ``s`` the current span for the block (tasks created in it inherit it)."""
    if _trace is None or isinstance(s, _NoSpan):
        yield
        return
    with _trace.use_span(s, end_on_exit=False):
        yield


def end_span(s: Any) -> None:
    if _trace is not None and not isinstance(s, _NoSpan):
        s.end()


def current_span() -> Any:
    return _NoSpan() if _trace is None else _trace.get_current_span()


def _clip(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=_plain).decode()
    return text[:CONTENT_LIMIT]


def _plain(value: Any) -> Any:
    to_wire = getattr(value, "to_wire", None)
    return to_wire() if callable(to_wire) else str(value)


def _error(s: Any, kind: str, message: str) -> None:
    s.set_attribute("error.type", kind)
    if _trace is not None:
        s.set_status(Status(StatusCode.ERROR, message))


# ---------------------------------------------------------------- the client's advance


def turn_attributes(s: Any, turn_id: str, agent: str, model_label: str) -> None:
    if s.is_recording():
        provider, _, model = model_label.partition("/")
        s.set_attributes(
            {
                "turncore.turn.id": turn_id,
                "gen_ai.agent.name": agent,
                "gen_ai.request.model": model,
                "turncore.provider": provider,
            }
        )


def turn_status(s: Any, status: str, pending: Sequence[str] = ()) -> None:
    if not s.is_recording():
        return
    s.set_attribute("turncore.turn.status", status)
    if status == "suspended":
        s.add_event("turn suspended", {"turncore.pending": list(pending)})
    if status == "failed":
        _error(s, "turn_failed", "the turn failed")


# ---------------------------------------------------------------- model calls


def chat_started(s: Any, protocol: str, provider: str, model: str, index: int) -> None:
    if s.is_recording():
        name = _PROVIDER_NAMES.get(protocol, provider)
        s.set_attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": name,
                "gen_ai.system": name,
                "gen_ai.request.model": model,
                "turncore.provider": provider,
                "turncore.model_call.index": index,
            }
        )


def chat_request_content(s: Any, system: str | None, messages: Any) -> None:
    if s.is_recording() and capture_content():
        if system:
            s.set_attribute("gen_ai.system_instructions", _clip(system))
        s.set_attribute("gen_ai.input.messages", _clip(messages))


def chat_finished(
    s: Any,
    *,
    response_model: str | None,
    finish_reason: str,
    usage: TurnUsage,
    response_id: str | None,
    output: Any,
) -> None:
    if not s.is_recording():
        return
    attributes: dict[str, Any] = {"gen_ai.response.finish_reasons": [finish_reason]}
    if response_model:
        attributes["gen_ai.response.model"] = response_model
    if response_id:
        attributes["gen_ai.response.id"] = response_id
    if usage.input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
    if usage.output_tokens is not None:
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
    s.set_attributes(attributes)
    if capture_content():
        s.set_attribute("gen_ai.output.messages", _clip(output))


def chat_failed(s: Any, failure: ModelFailure) -> None:
    if s.is_recording():
        s.set_attributes(
            {
                "turncore.failure.kind": failure.kind.value,
                "turncore.failure.dispatch": failure.dispatch.value,
            }
        )
        # The failure's message names kind, dispatch and a bounded detail, never content.
        _error(s, failure.kind.value, f"{failure.kind.value} ({failure.dispatch.value})")


def chat_cancelled(s: Any) -> None:
    if s.is_recording():
        _error(s, "cancelled", "the model call was cancelled")


# ---------------------------------------------------------------- tools


def tool_started(s: Any, name: str, call_id: str, tool_id: str, input: Any) -> None:
    if s.is_recording():
        s.set_attributes(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": "function",
                "turncore.tool.id": tool_id,
            }
        )
        if capture_content():
            s.set_attribute("gen_ai.tool.call.arguments", _clip(input))


def tool_finished(s: Any, is_error: bool, output: Any) -> None:
    if not s.is_recording():
        return
    if is_error:
        _error(s, "tool_error", "the tool returned an error result")
    if capture_content():
        s.set_attribute("gen_ai.tool.call.result", _clip(output))


# ---------------------------------------------------------------- decisions


def decision_events(events: Sequence[TurnEvent]) -> None:
    """Permission decisions and suspensions the workflow appended, as events on the current span.

    Reasons are free text (a person may type anything), so they stay out unless
    content capture is on.
    """
    s = current_span()
    if not s.is_recording():
        return
    content = capture_content()
    for e in events:
        match e.type:
            case "tool_permission_required":
                s.add_event("permission required", {"gen_ai.tool.call.id": e.tool_call_id})
            case "tool_permission_classified":
                attributes = {"gen_ai.tool.call.id": e.tool_call_id, "decision": e.decision}
                if content:
                    attributes["reason"] = e.reason
                s.add_event("permission classified", attributes)
            case "tool_permission_resolved":
                attributes = {
                    "gen_ai.tool.call.id": e.tool_call_id,
                    "decision": e.decision,
                    "source": e.source,
                }
                if content and e.reason:
                    attributes["reason"] = e.reason
                s.add_event("permission resolved", attributes)
            case "turn_suspended":
                s.add_event(
                    "turn suspended",
                    {
                        "turncore.pending_permissions": [
                            p.tool_call_id for p in e.pending_permissions
                        ],
                        "turncore.pending_async_tools": [
                            p.tool_call_id for p in e.pending_async_tools
                        ],
                    },
                )
            case _:
                pass


# ---------------------------------------------------------------- metrics


def record_model_call(
    provider: str, model: str, outcome: str, elapsed: timedelta, usage: TurnUsage | None
) -> None:
    meter = activity.metric_meter()
    attributes = {"provider": provider, "model": model}
    meter.create_histogram_timedelta(
        "turncore_model_call_duration", "Model call latency", "duration"
    ).record(elapsed, {**attributes, "outcome": outcome})
    if usage is not None:
        tokens = meter.create_counter("turncore_model_tokens", "Model tokens", "tokens")
        if usage.input_tokens:
            tokens.add(usage.input_tokens, {**attributes, "token_type": "input"})
        if usage.output_tokens:
            tokens.add(usage.output_tokens, {**attributes, "token_type": "output"})


def record_tool(tool: str, outcome: str, elapsed: timedelta) -> None:
    activity.metric_meter().create_histogram_timedelta(
        "turncore_tool_duration", "Tool execution latency", "duration"
    ).record(elapsed, {"tool": tool, "outcome": outcome})


__all__ = [
    "CAPTURE_ENV",
    "capture_content",
    "chat_cancelled",
    "chat_failed",
    "chat_finished",
    "chat_request_content",
    "chat_started",
    "current",
    "current_span",
    "decision_events",
    "end_span",
    "record_model_call",
    "record_tool",
    "span",
    "start_span",
    "tool_finished",
    "tool_started",
    "turn_attributes",
    "turn_status",
]
