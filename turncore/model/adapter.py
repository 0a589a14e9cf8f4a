"""What an HTTP provider adapter is written with, gathered in one module.

An adapter (``openai_chat``, ``openai_responses``, ``anthropic``) imports
this module once (``from turncore.model import adapter``) and names what it
uses through it: the base classes (``HttpModel``, ``StreamDecoder``), the
attempt it reports to (``Attempt``, ``Assembler``), the port's types, the
bounded readers of untrusted JSON (``as_dict``, ``as_int``,
``bounded_token``), mid-stream errors, and ``settled``, the outcome of a
stream that ended well. A new adapter starts from the same list, and the
list is written here only.
"""

from __future__ import annotations

from typing import Any

import orjson

from turncore.events import TurnUsage
from turncore.model._attempt import Assembler, Attempt
from turncore.model._http import (
    HttpModel,
    Secret,
    StreamDecoder,
    as_dict,
    as_int,
    bounded_token,
    error_token,
    parse_json_event,
    stream_error,
    usage_total,
)
from turncore.model.binding import Binding, bound_options
from turncore.model.failures import FailureKind, invalid, unsupported
from turncore.model.port import (
    FinishReason,
    ModelCallRequest,
    ModelOutcome,
    NamedToolChoice,
    Observation,
    OpaqueView,
    check_usage,
)
from turncore.model.sse import SseEvent

STREAM_HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}
"""The headers of every adapter's request: a JSON body, an SSE answer."""


def bearer_headers(api_key: Secret | None) -> dict[str, str]:
    """``STREAM_HEADERS`` with ``authorization: Bearer KEY`` when there is a key (OpenAI's wire)."""
    headers = dict(STREAM_HEADERS)
    if api_key is not None:
        headers["authorization"] = "Bearer " + api_key.reveal()
    return headers


def tool_result_text(kind: str, value: Any) -> str:
    """A tool result as the text a provider's tool-result slot takes; error results
    are wrapped so the model can tell them apart where the wire has no error flag."""
    if kind == "error-json":
        value = {"error": value}
    return value if isinstance(value, str) and kind == "json" else orjson.dumps(value).decode()


def arguments_text(value: Any) -> str:
    """Tool-call input back to an argument string (unparsed text stays verbatim)."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def settled(
    attempt: Attempt,
    parts: Assembler,
    *,
    binding: Binding,
    usage: TurnUsage,
    final_usage: bool,
    finish_reason: FinishReason,
    raw_stop_reason: str | None,
    upstream_model: str | None,
    response_id: str | None,
) -> ModelOutcome:
    """The outcome of a stream that ended well: its usage checked (contradictory
    counts are a protocol failure), its parts bound to the binding's options."""
    if check_usage(usage) is not None:
        raise attempt.failure(FailureKind.PROTOCOL, "the provider reported contradictory usage")
    return ModelOutcome(
        parts=parts.parts(lambda state: bound_options(binding, state)),
        finish_reason=finish_reason,
        usage=usage,
        observation=Observation(
            binding=binding,
            upstream_model=upstream_model,
            response_id=response_id,
            final_usage=final_usage,
        ),
        raw_stop_reason=raw_stop_reason,
    )


__all__ = [
    "Assembler",
    "Attempt",
    "FailureKind",
    "FinishReason",
    "HttpModel",
    "ModelCallRequest",
    "ModelOutcome",
    "NamedToolChoice",
    "OpaqueView",
    "SseEvent",
    "StreamDecoder",
    "STREAM_HEADERS",
    "arguments_text",
    "bearer_headers",
    "as_dict",
    "as_int",
    "bounded_token",
    "error_token",
    "invalid",
    "parse_json_event",
    "settled",
    "stream_error",
    "tool_result_text",
    "unsupported",
    "usage_total",
]
