"""Each provider's documented streaming wire format, as replayable fixtures.

One :class:`Wire` per protocol renders the same logical scenarios (plain text,
reasoning, parallel tool calls with fragmented arguments, a mid-stream error,
error bodies) in that provider's own SSE shapes, so the adapter tests can be
written once and run against all three.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from turncore.model import (
    AnthropicModel,
    Binding,
    FailureKind,
    HttpModel,
    OpenAIChatModel,
    OpenAIResponsesModel,
    Protocol,
    Secret,
)

from .conftest import API_KEY, UPSTREAM_TEXT, sse

USAGE = {"input": 12, "output": 3, "total": 15, "cached": 4}

Args = tuple[str, str]
CITY: Args = ('{"ci', 'ty": "Paris"}')
TZ: Args = ('{"tz"', ': "CET"}')


@dataclass(frozen=True)
class MidStreamError:
    chunks: list[bytes]
    kind: FailureKind
    code: str


class Wire:
    protocol: Protocol
    model_id: str
    adapter: type[HttpModel]
    reports_reasoning_tokens = True

    def binding(self, endpoint: str, **overrides: Any) -> Binding:
        fields: dict[str, Any] = {
            "protocol": self.protocol,
            "provider": "acme",
            "endpoint": endpoint,
            "model": self.model_id,
            "auth_ref": "ACME_API_KEY",
        }
        fields.update(overrides)
        return Binding(**fields)

    def make(self, binding: Binding, client: httpx.AsyncClient) -> HttpModel:
        return self.adapter(binding, client, Secret(API_KEY))

    # scenarios -------------------------------------------------------
    def text_head(self) -> list[bytes]:
        """Everything up to and including the first text delta ("Hello")."""
        raise NotImplementedError

    def text_tail(self) -> list[bytes]:
        """The second delta (", world"), the finish, the usage and the end marker."""
        raise NotImplementedError

    def text(self) -> list[bytes]:
        return self.text_head() + self.text_tail()

    def reasoning(self) -> list[bytes]:
        raise NotImplementedError

    def tools(self, a: Args = CITY, b: Args = TZ) -> list[bytes]:
        """Two parallel calls, ``call_a`` (get_weather) and ``call_b`` (get_time),
        whose arguments arrive in the two fragments ``a`` and ``b``, interleaved."""
        raise NotImplementedError

    def mid_stream_error(self) -> MidStreamError:
        raise NotImplementedError

    def error_body(self, status: int) -> bytes:
        raise NotImplementedError

    def auth_header(self) -> tuple[str, str]:
        raise NotImplementedError


def _j(obj: Any) -> bytes:
    return orjson.dumps(obj)


# ---------------------------------------------------------------- chat


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-abc123",
        "object": "chat.completion.chunk",
        "created": 1730000000,
        "model": "gpt-4.1-2025-04-14",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }
    body.update(extra)
    return sse(body)


_CHAT_USAGE = sse(
    {
        "id": "chatcmpl-abc123",
        "object": "chat.completion.chunk",
        "created": 1730000000,
        "model": "gpt-4.1-2025-04-14",
        "choices": [],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 1},
        },
    }
)


class ChatWire(Wire):
    protocol = "openai-chat"
    model_id = "gpt-4.1"
    adapter = OpenAIChatModel

    def text_head(self) -> list[bytes]:
        return [
            _chunk({"role": "assistant", "content": ""}),
            _chunk({"content": "Hello"}),
        ]

    def text_tail(self) -> list[bytes]:
        return [_chunk({"content": ", world"}), _chunk({}, "stop"), _CHAT_USAGE, sse("[DONE]")]

    def reasoning(self) -> list[bytes]:
        # vLLM / DeepSeek style reasoning_content, then Ollama style reasoning
        return [
            _chunk({"role": "assistant", "reasoning_content": "Let me"}),
            _chunk({"reasoning": " think."}),
            _chunk({"content": "42"}),
            _chunk({}, "stop"),
            _CHAT_USAGE,
            sse("[DONE]"),
        ]

    def tools(self, a: Args = CITY, b: Args = TZ) -> list[bytes]:
        def call(index: int, **fn: Any) -> dict[str, Any]:
            return {"tool_calls": [{"index": index, "function": fn}]}

        return [
            _chunk({"role": "assistant", "content": None}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            ),
            _chunk(call(0, arguments=a[0])),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "get_time", "arguments": b[0]},
                        }
                    ]
                }
            ),
            _chunk(call(0, arguments=a[1])),
            _chunk(call(1, arguments=b[1])),
            _chunk({}, "tool_calls"),
            _CHAT_USAGE,
            sse("[DONE]"),
        ]

    def mid_stream_error(self) -> MidStreamError:
        return MidStreamError(
            self.text_head()
            + [sse({"error": {"message": f"{UPSTREAM_TEXT} {API_KEY}", "type": "server_error"}})],
            FailureKind.TRANSPORT,
            "server_error",
        )

    def error_body(self, status: int) -> bytes:
        code = {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(status)
        return _j(
            {
                "error": {
                    "message": f"Incorrect API key provided: {API_KEY}. {UPSTREAM_TEXT}",
                    "type": "invalid_request_error" if status < 500 else "server_error",
                    "param": None,
                    "code": code,
                }
            }
        )

    def auth_header(self) -> tuple[str, str]:
        return "authorization", f"Bearer {API_KEY}"


# ---------------------------------------------------------------- responses


def _ev(kind: str, **body: Any) -> bytes:
    return sse({"type": kind, **body}, event=kind)


_RESP = {"id": "resp_123", "object": "response", "model": "gpt-5-2025-08-07"}
_RESP_USAGE = {
    "input_tokens": 12,
    "input_tokens_details": {"cached_tokens": 4},
    "output_tokens": 3,
    "output_tokens_details": {"reasoning_tokens": 1},
    "total_tokens": 15,
}


def _completed(output: list[Any]) -> bytes:
    return _ev(
        "response.completed",
        sequence_number=99,
        response={**_RESP, "status": "completed", "output": output, "usage": _RESP_USAGE},
    )


_MSG = {"id": "msg_1", "type": "message", "role": "assistant"}


class ResponsesWire(Wire):
    protocol = "openai-responses"
    model_id = "gpt-5"
    adapter = OpenAIResponsesModel

    def text_head(self) -> list[bytes]:
        return [
            _ev("response.created", response={**_RESP, "status": "in_progress", "output": []}),
            _ev("response.in_progress", response={**_RESP, "status": "in_progress", "output": []}),
            _ev(
                "response.output_item.added",
                output_index=0,
                item={**_MSG, "status": "in_progress", "content": []},
            ),
            _ev(
                "response.content_part.added",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            ),
            _ev(
                "response.output_text.delta",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                delta="Hello",
            ),
        ]

    def _message_done(self, text: str) -> list[bytes]:
        item = {
            **_MSG,
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        return [
            _ev(
                "response.output_text.done",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                text=text,
            ),
            _ev("response.output_item.done", output_index=0, item=item),
        ]

    def text_tail(self) -> list[bytes]:
        done = self._message_done("Hello, world")
        item = {
            **_MSG,
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hello, world", "annotations": []}],
        }
        return [
            _ev(
                "response.output_text.delta",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                delta=", world",
            ),
            *done,
            _completed([item]),
        ]

    def reasoning(self) -> list[bytes]:
        reasoning_item = {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Let me think."}],
            "encrypted_content": "gAAAA-opaque-encrypted-blob",
        }
        return [
            _ev("response.created", response={**_RESP, "status": "in_progress", "output": []}),
            _ev(
                "response.output_item.added",
                output_index=0,
                item={"id": "rs_1", "type": "reasoning", "summary": []},
            ),
            _ev(
                "response.reasoning_summary_part.added",
                item_id="rs_1",
                output_index=0,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            ),
            _ev(
                "response.reasoning_summary_text.delta",
                item_id="rs_1",
                output_index=0,
                summary_index=0,
                delta="Let me",
            ),
            _ev(
                "response.reasoning_summary_text.delta",
                item_id="rs_1",
                output_index=0,
                summary_index=0,
                delta=" think.",
            ),
            _ev("response.output_item.done", output_index=0, item=reasoning_item),
            _ev(
                "response.output_item.added",
                output_index=1,
                item={**_MSG, "status": "in_progress", "content": []},
            ),
            _ev(
                "response.output_text.delta",
                item_id="msg_1",
                output_index=1,
                content_index=0,
                delta="42",
            ),
            *self._message_done("42"),
            _completed([reasoning_item]),
        ]

    def tools(self, a: Args = CITY, b: Args = TZ) -> list[bytes]:
        def added(index: int, item_id: str, call_id: str, name: str) -> bytes:
            return _ev(
                "response.output_item.added",
                output_index=index,
                item={
                    "id": item_id,
                    "type": "function_call",
                    "status": "in_progress",
                    "call_id": call_id,
                    "name": name,
                    "arguments": "",
                },
            )

        def delta(index: int, item_id: str, text: str) -> bytes:
            return _ev(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=text,
            )

        def done(index: int, item_id: str, call_id: str, name: str, args: str) -> list[bytes]:
            return [
                _ev(
                    "response.function_call_arguments.done",
                    item_id=item_id,
                    output_index=index,
                    arguments=args,
                ),
                _ev(
                    "response.output_item.done",
                    output_index=index,
                    item={
                        "id": item_id,
                        "type": "function_call",
                        "status": "completed",
                        "call_id": call_id,
                        "name": name,
                        "arguments": args,
                    },
                ),
            ]

        return [
            _ev("response.created", response={**_RESP, "status": "in_progress", "output": []}),
            added(0, "fc_1", "call_a", "get_weather"),
            delta(0, "fc_1", a[0]),
            added(1, "fc_2", "call_b", "get_time"),
            delta(1, "fc_2", b[0]),
            delta(0, "fc_1", a[1]),
            delta(1, "fc_2", b[1]),
            *done(0, "fc_1", "call_a", "get_weather", "".join(a)),
            *done(1, "fc_2", "call_b", "get_time", "".join(b)),
            _completed([]),
        ]

    def mid_stream_error(self) -> MidStreamError:
        return MidStreamError(
            self.text_head()
            + [
                _ev(
                    "error",
                    code="rate_limit_exceeded",
                    message=f"{UPSTREAM_TEXT} {API_KEY}",
                    param=None,
                )
            ],
            FailureKind.RATE_LIMIT,
            "rate_limit_exceeded",
        )

    error_body = ChatWire.error_body
    auth_header = ChatWire.auth_header


# ---------------------------------------------------------------- anthropic


def _a(kind: str, **body: Any) -> bytes:
    return sse({"type": kind, **body}, event=kind)


def _block_delta(index: int, **delta: Any) -> bytes:
    return _a("content_block_delta", index=index, delta=delta)


_MESSAGE_START = _a(
    "message_start",
    message={
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-5-20250929",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 8,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 4,
            "output_tokens": 1,
        },
    },
)


def _a_end(stop: str) -> list[bytes]:
    return [
        _a(
            "message_delta",
            delta={"stop_reason": stop, "stop_sequence": None},
            usage={"output_tokens": 3},
        ),
        _a("message_stop"),
    ]


class AnthropicWire(Wire):
    protocol = "anthropic"
    model_id = "claude-sonnet-4-5"
    adapter = AnthropicModel
    reports_reasoning_tokens = False

    def text_head(self) -> list[bytes]:
        return [
            _MESSAGE_START,
            _a("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            _a("ping"),
            _block_delta(0, type="text_delta", text="Hello"),
        ]

    def text_tail(self) -> list[bytes]:
        return [
            _block_delta(0, type="text_delta", text=", world"),
            _a("content_block_stop", index=0),
            *_a_end("end_turn"),
        ]

    def reasoning(self) -> list[bytes]:
        return [
            _MESSAGE_START,
            _a("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
            _block_delta(0, type="thinking_delta", thinking="Let me"),
            _block_delta(0, type="thinking_delta", thinking=" think."),
            _block_delta(0, type="signature_delta", signature="EqQBCgIYAhIM-sig"),
            _a("content_block_stop", index=0),
            _a(
                "content_block_start",
                index=1,
                content_block={"type": "redacted_thinking", "data": "EmwKAhgBEgy-redacted"},
            ),
            _a("content_block_stop", index=1),
            _a("content_block_start", index=2, content_block={"type": "text", "text": ""}),
            _block_delta(2, type="text_delta", text="42"),
            _a("content_block_stop", index=2),
            *_a_end("end_turn"),
        ]

    def tools(self, a: Args = CITY, b: Args = TZ) -> list[bytes]:
        def start(index: int, call_id: str, name: str) -> bytes:
            return _a(
                "content_block_start",
                index=index,
                content_block={"type": "tool_use", "id": call_id, "name": name, "input": {}},
            )

        def frag(index: int, text: str) -> bytes:
            return _block_delta(index, type="input_json_delta", partial_json=text)

        return [
            _MESSAGE_START,
            start(0, "call_a", "get_weather"),
            frag(0, ""),
            frag(0, a[0]),
            frag(0, a[1]),
            _a("content_block_stop", index=0),
            start(1, "call_b", "get_time"),
            frag(1, b[0]),
            frag(1, b[1]),
            _a("content_block_stop", index=1),
            *_a_end("tool_use"),
        ]

    def mid_stream_error(self) -> MidStreamError:
        return MidStreamError(
            self.text_head()
            + [
                _a(
                    "error",
                    error={
                        "type": "overloaded_error",
                        "message": f"Overloaded {UPSTREAM_TEXT} {API_KEY}",
                    },
                )
            ],
            FailureKind.RATE_LIMIT,
            "overloaded_error",
        )

    def error_body(self, status: int) -> bytes:
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            429: "rate_limit_error",
            500: "api_error",
            529: "overloaded_error",
        }.get(status, "api_error")
        return _j(
            {
                "type": "error",
                "error": {"type": kind, "message": f"invalid x-api-key {API_KEY} {UPSTREAM_TEXT}"},
            }
        )

    def auth_header(self) -> tuple[str, str]:
        return "x-api-key", API_KEY


WIRES: dict[str, Wire] = {
    "openai-chat": ChatWire(),
    "openai-responses": ResponsesWire(),
    "anthropic": AnthropicWire(),
}
