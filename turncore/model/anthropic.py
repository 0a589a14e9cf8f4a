"""Anthropic Messages over SSE.

Wire notes:

- Events: ``message_start`` (id, model, input usage), ``content_block_start``
  / ``content_block_delta`` / ``content_block_stop`` per indexed block,
  ``message_delta`` (stop reason, cumulative output usage), ``message_stop``;
  ``ping`` is ignored; ``error`` (e.g. ``overloaded_error``) is a failure whose
  message text is dropped.
- A ``tool_use`` block announces id and name before its ``input_json_delta``
  fragments.
- ``thinking`` blocks carry a ``signature``; ``redacted_thinking`` blocks carry
  encrypted ``data``. Both become the opaque state of a ReasoningPart bound to
  the binding, and are sent back only to the same binding. Reasoning without
  such state cannot be sent to Anthropic and is not re-sent.
- ``max_tokens`` is required by the API: when the request leaves
  ``max_output_tokens`` absent, the binding's declared ``max_output_tokens``
  (default 4096) is sent. Reasoning effort maps to an extended-thinking budget
  (low 1024, medium 4096, high 16384 tokens) added on top of that default;
  extended thinking refuses a caller-set temperature or top_p, and a tool
  choice that forces a call (``required`` or a named tool).
- Usage: ``input_tokens`` is normalised to include cache reads and writes, and
  ``cached_input_tokens`` is the cache reads.
"""

from __future__ import annotations

from typing import Any

import orjson

from turncore.events import TurnUsage
from turncore.messages import AssistantMessage, ReasoningPart, TextPart, ToolCallPart, ToolMessage
from turncore.model import adapter
from turncore.output import FINAL_RESULT_TOOL

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
THINKING_BUDGET = {"low": 1024, "medium": 4096, "high": 16384}

_FINISH: dict[str, adapter.FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool-calls",
}


class AnthropicModel(adapter.HttpModel):
    path = "/messages"
    protocol = "anthropic"

    def headers(self) -> dict[str, str]:
        headers = {
            **adapter.STREAM_HEADERS,
            "anthropic-version": str(self._binding.option("anthropic_version", ANTHROPIC_VERSION)),
        }
        if self._api_key is not None:
            headers["x-api-key"] = self._api_key.reveal()
        return headers

    def encode(
        self, request: adapter.ModelCallRequest, opaque: adapter.OpaqueView
    ) -> dict[str, Any]:
        default_max = int(self._binding.option("max_output_tokens", DEFAULT_MAX_TOKENS))
        body: dict[str, Any] = {"model": request.model}
        if request.reasoning_effort is not None:
            if request.temperature is not None or request.top_p is not None:
                raise adapter.unsupported("extended thinking does not accept temperature or top_p")
            if request.tool_choice == "required" or isinstance(
                request.tool_choice, adapter.NamedToolChoice
            ):
                raise adapter.unsupported(
                    "extended thinking does not accept a tool choice that forces a call"
                )
            budget = THINKING_BUDGET[request.reasoning_effort]
            if request.max_output_tokens is not None and request.max_output_tokens <= budget:
                raise adapter.invalid(
                    "max_output_tokens must exceed the thinking budget of the reasoning effort"
                )
            body["max_tokens"] = request.max_output_tokens or budget + default_max
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        else:
            body["max_tokens"] = request.max_output_tokens or default_max
        if request.system:
            body["system"] = request.system
        body["messages"] = self._messages(request, opaque)
        body["stream"] = True
        tools = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
        if request.output is not None:
            # No native structured output here: a final-result tool whose input is
            # the answer. tool_choice stays as asked, so the other tools stay usable.
            if not isinstance(request.output.schema, dict) or request.output.schema.get(
                "type"
            ) not in ("object", None):
                raise adapter.unsupported(
                    "Anthropic takes structured output through a tool, whose input must be "
                    "a JSON object: give the agent an object schema (a model, a dataclass "
                    "or a TypedDict)"
                )
            if any(t.name == FINAL_RESULT_TOOL for t in request.tools):
                raise adapter.invalid(
                    f"a tool named {FINAL_RESULT_TOOL!r} clashes with the final-result tool "
                    "of structured output; rename the tool"
                )
            tools.append(
                {
                    "name": FINAL_RESULT_TOOL,
                    "description": (
                        "Give your final answer by calling this tool once, with the answer "
                        "as its input."
                    ),
                    "input_schema": request.output.schema,
                }
            )
        if tools:
            body["tools"] = tools
        choice = request.tool_choice
        if isinstance(choice, adapter.NamedToolChoice):
            body["tool_choice"] = {"type": "tool", "name": choice.name}
        elif choice is not None:
            body["tool_choice"] = {
                "type": {"auto": "auto", "none": "none", "required": "any"}[choice]
            }
        if request.temperature is not None:
            if request.temperature > 1.0:
                raise adapter.unsupported("Anthropic accepts a temperature between 0 and 1")
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
        return body

    def _messages(
        self, request: adapter.ModelCallRequest, opaque: adapter.OpaqueView
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []

        def add(role: str, blocks: list[dict[str, Any]]) -> None:
            if not blocks:
                return
            if out and out[-1]["role"] == role:  # roles must alternate: merge
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": role, "content": blocks})

        for message in request.messages:
            if isinstance(message, ToolMessage):
                blocks = []
                for r in message.content:
                    block: dict[str, Any] = {
                        "type": "tool_result",
                        "tool_use_id": r.tool_call_id,
                        "content": adapter.tool_result_text(r.output.type, r.output.value),
                    }
                    if r.output.type == "error-json":
                        block["is_error"] = True
                    blocks.append(block)
                add("user", blocks)
            elif isinstance(message, AssistantMessage):
                add("assistant", self._assistant(message, opaque))
            elif isinstance(message.content, str):
                add("user", [{"type": "text", "text": message.content}] if message.content else [])
            else:
                add(
                    "user",
                    [
                        {"type": "text", "text": p.text}
                        for p in message.content
                        if isinstance(p, TextPart) and p.text
                    ],
                )
        return out

    def _assistant(
        self, message: AssistantMessage, opaque: adapter.OpaqueView
    ) -> list[dict[str, Any]]:
        if isinstance(message.content, str):
            return [{"type": "text", "text": message.content}] if message.content else []
        blocks: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, TextPart):
                if part.text:
                    blocks.append({"type": "text", "text": part.text})
            elif isinstance(part, ToolCallPart):
                value = part.input if isinstance(part.input, dict) else {"value": part.input}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": part.tool_call_id,
                        "name": part.tool_name,
                        "input": value,
                    }
                )
            elif isinstance(part, ReasoningPart):
                state = adapter.as_dict(opaque.of(part))
                if not state:
                    continue  # unsigned reasoning cannot be sent to Anthropic
                if state.get("type") == "thinking" and isinstance(state.get("signature"), str):
                    blocks.append(
                        {"type": "thinking", "thinking": part.text, "signature": state["signature"]}
                    )
                elif state.get("type") == "redacted_thinking" and isinstance(
                    state.get("data"), str
                ):
                    blocks.append({"type": "redacted_thinking", "data": state["data"]})
                else:
                    raise adapter.invalid(
                        "opaque reasoning state is not an Anthropic thinking block"
                    )
        return blocks

    def decoder(
        self, attempt: adapter.Attempt, request: adapter.ModelCallRequest
    ) -> adapter.StreamDecoder:
        return _AnthropicDecoder(self, attempt, final_result=request.output is not None)


class _AnthropicDecoder(adapter.StreamDecoder):
    def __init__(
        self, model: AnthropicModel, attempt: adapter.Attempt, *, final_result: bool = False
    ) -> None:
        self._final_result = final_result
        """The request offered the final-result tool: its call is the answer's text."""
        self._model = model
        self._attempt = attempt
        self._parts = adapter.Assembler(attempt)
        self._kinds: dict[int, str] = {}
        self._signatures: dict[int, list[str]] = {}
        self._response_id: str | None = None
        self._upstream_model: str | None = None
        self._stop: str | None = None
        self._raw_usage: dict[str, int] = {}
        self._usage_final = False

    def _absorb_usage(self, raw: object) -> None:
        for key, value in adapter.as_dict(raw).items():
            number = adapter.as_int(value)
            if number is not None:
                self._raw_usage[key] = number
        # message_delta counts are cumulative; only message_stop makes them final.
        self._attempt.observe_usage(self._usage(), final=False)

    def _usage(self) -> TurnUsage:
        u = self._raw_usage
        fresh = u.get("input_tokens")
        reads = u.get("cache_read_input_tokens")
        writes = u.get("cache_creation_input_tokens")
        total_in = None if fresh is None else fresh + (reads or 0) + (writes or 0)
        return adapter.usage_total(
            TurnUsage(
                input_tokens=total_in,
                output_tokens=u.get("output_tokens"),
                cached_input_tokens=reads,
            )
        )

    async def feed(self, event: adapter.SseEvent) -> bool:
        data = adapter.parse_json_event(event, self._attempt)
        kind = data.get("type") or event.event
        if kind == "message_start":
            message = adapter.as_dict(data.get("message"))
            self._response_id = adapter.bounded_token(message.get("id"))
            self._upstream_model = adapter.bounded_token(message.get("model"))
            self._absorb_usage(message.get("usage"))
        elif kind == "content_block_start":
            await self._block_start(data.get("index"), adapter.as_dict(data.get("content_block")))
        elif kind == "content_block_delta":
            await self._block_delta(data.get("index"), adapter.as_dict(data.get("delta")))
        elif kind == "content_block_stop":
            self._block_stop(data.get("index"))
        elif kind == "message_delta":
            stop = adapter.as_dict(data.get("delta")).get("stop_reason")
            if isinstance(stop, str) and stop:
                self._stop = stop[:64]
            self._absorb_usage(data.get("usage"))
        elif kind == "message_stop":
            self._usage_final = True
            self._attempt.observe_usage(self._usage(), final=True)
            return True
        elif kind == "error":
            raise adapter.stream_error(
                self._attempt,
                adapter.error_token(data),
                default_detail="the provider reported an error mid-stream",
            )
        return False

    async def _block_start(self, index: object, block: dict[str, Any]) -> None:
        if not isinstance(index, int) or index in self._kinds:
            raise self._attempt.failure(
                adapter.FailureKind.PROTOCOL, "the provider sent an invalid content block"
            )
        kind = block.get("type")
        self._kinds[index] = kind if isinstance(kind, str) else ""
        if kind == "text":
            await self._parts.text(index, _str(block.get("text")))
        elif kind == "thinking":
            self._signatures[index] = []
            await self._parts.reasoning(index, _str(block.get("thinking")))
        elif kind == "redacted_thinking":
            await self._parts.reasoning(index, "")
            self._parts.reasoning_state(
                index, {"type": "redacted_thinking", "data": _str(block.get("data"))}
            )
        elif kind == "tool_use" and self._final_result and block.get("name") == FINAL_RESULT_TOOL:
            # The structured answer (turncore.output): its input is the answer,
            # kept as the message's text so every wire's answer looks the same.
            self._kinds[index] = "final_result"
            initial = block.get("input")
            if isinstance(initial, dict) and initial:
                await self._parts.text(index, orjson.dumps(initial).decode())
            else:
                await self._parts.text(index, "")
        elif kind == "tool_use":
            await self._parts.tool_start(index, block.get("id"), block.get("name"))
            initial = block.get("input")
            if isinstance(initial, dict) and initial:
                # A block may start with its complete input instead of fragments.
                await self._parts.tool_args(index, orjson.dumps(initial).decode())
        # other block kinds (vendor-side tools) are outside this contract; ignored

    async def _block_delta(self, index: object, delta: dict[str, Any]) -> None:
        if not isinstance(index, int) or index not in self._kinds:
            raise self._attempt.failure(
                adapter.FailureKind.PROTOCOL,
                "the provider sent a delta for an unknown content block",
            )
        kind = delta.get("type")
        if kind == "text_delta":
            await self._parts.text(index, _str(delta.get("text")))
        elif kind == "thinking_delta":
            await self._parts.reasoning(index, _str(delta.get("thinking")))
        elif kind == "signature_delta":
            self._signatures.setdefault(index, []).append(_str(delta.get("signature")))
        elif kind == "input_json_delta" and self._kinds[index] == "final_result":
            await self._parts.text(index, _str(delta.get("partial_json")))
        elif kind == "input_json_delta":
            await self._parts.tool_args(index, _str(delta.get("partial_json")))

    def _block_stop(self, index: object) -> None:
        if not isinstance(index, int) or index not in self._kinds:
            raise self._attempt.failure(
                adapter.FailureKind.PROTOCOL, "the provider closed an unknown content block"
            )
        if self._kinds[index] == "thinking":
            signature = "".join(self._signatures.get(index, []))
            if signature:
                self._parts.reasoning_state(index, {"type": "thinking", "signature": signature})

    def finish(self, terminal: bool) -> adapter.ModelOutcome:
        if not terminal:
            raise self._attempt.failure(
                adapter.FailureKind.PROTOCOL, "the stream ended before the message stopped"
            )
        if self._stop == "refusal":
            raise self._attempt.failure(
                adapter.FailureKind.REFUSAL, "the model refused the request"
            )
        return adapter.settled(
            self._attempt,
            self._parts,
            binding=self._model.binding,
            usage=self._usage(),
            final_usage=self._usage_final,
            finish_reason=self._finish(),
            raw_stop_reason=self._stop,
            upstream_model=self._upstream_model,
            response_id=self._response_id,
        )

    def _finish(self) -> adapter.FinishReason:
        if self._stop == "tool_use" and "tool_use" not in self._kinds.values():
            return "stop"  # only the final-result tool was called: the answer is given
        return _FINISH.get(self._stop or "", "other")


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""
