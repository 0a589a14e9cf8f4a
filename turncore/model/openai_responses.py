"""OpenAI Responses over SSE, stateless (``store: false``).

Wire notes:

- Output arrives as items: ``response.output_item.added`` announces a
  ``function_call`` (with ``call_id`` and ``name``) before its
  ``response.function_call_arguments.delta`` fragments (keyed by the item id);
  text streams as ``response.output_text.delta`` (a delta without
  ``content_index``, as some compatible servers send, is part 0); reasoning summaries as
  ``response.reasoning_summary_text.delta`` (raw reasoning text, where a model
  exposes it, as ``response.reasoning_text.delta``).
- ``response.completed`` / ``response.incomplete`` end the stream with usage,
  the response id and the upstream model; ``response.failed`` and ``error``
  events are failures whose message text is dropped.
- With a reasoning effort the request asks for ``reasoning.encrypted_content``;
  each finished reasoning item (id, summary, encrypted content) becomes the
  opaque state of a ReasoningPart, bound to the binding, and is sent back
  verbatim — only to the same binding.
"""

from __future__ import annotations

from typing import Any

from turncore.events import TurnUsage
from turncore.messages import AssistantMessage, ReasoningPart, TextPart, ToolCallPart, ToolMessage
from turncore.model import adapter

_INCOMPLETE: dict[str, adapter.FinishReason] = {
    "max_output_tokens": "length",
    "content_filter": "content-filter",
}


class OpenAIResponsesModel(adapter.HttpModel):
    path = "/responses"
    protocol = "openai-responses"

    def headers(self) -> dict[str, str]:
        return adapter.bearer_headers(self._api_key)

    def encode(
        self, request: adapter.ModelCallRequest, opaque: adapter.OpaqueView
    ) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        for message in request.messages:
            items.extend(self._items(message, opaque))
        body: dict[str, Any] = {
            "model": request.model,
            "input": items,
            "stream": True,
            "store": False,
        }
        if request.system:
            body["instructions"] = request.system
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                    "strict": False,
                }
                for t in request.tools
            ]
        choice = request.tool_choice
        if isinstance(choice, adapter.NamedToolChoice):
            body["tool_choice"] = {"type": "function", "name": choice.name}
        elif choice is not None:
            body["tool_choice"] = choice
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
        if request.max_output_tokens is not None:
            body["max_output_tokens"] = request.max_output_tokens
        if request.reasoning_effort is not None:
            body["reasoning"] = {"effort": request.reasoning_effort, "summary": "auto"}
            body["include"] = ["reasoning.encrypted_content"]
        if request.output is not None:
            # Native structured output: the final answer is JSON of this schema.
            body["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": request.output.name,
                    "schema": request.output.schema,
                    "strict": request.output.strict,
                }
            }
        return body

    def _items(self, message: Any, opaque: adapter.OpaqueView) -> list[dict[str, Any]]:
        if isinstance(message, ToolMessage):
            return [
                {
                    "type": "function_call_output",
                    "call_id": r.tool_call_id,
                    "output": adapter.tool_result_text(r.output.type, r.output.value),
                }
                for r in message.content
            ]
        if isinstance(message, AssistantMessage):
            if isinstance(message.content, str):
                return [_assistant_text(message.content)] if message.content else []
            out: list[dict[str, Any]] = []
            texts: list[str] = []

            def flush() -> None:
                if texts:
                    out.append(_assistant_text("".join(texts)))
                    texts.clear()

            for part in message.content:
                if isinstance(part, TextPart):
                    texts.append(part.text)
                    continue
                flush()
                if isinstance(part, ToolCallPart):
                    out.append(
                        {
                            "type": "function_call",
                            "call_id": part.tool_call_id,
                            "name": part.tool_name,
                            "arguments": adapter.arguments_text(part.input),
                        }
                    )
                elif isinstance(part, ReasoningPart):
                    state = opaque.of(part)
                    if state is None:
                        continue  # plain reasoning text has no slot; it is not re-sent
                    item = adapter.as_dict(state).get("item")
                    if not isinstance(item, dict) or item.get("type") != "reasoning":
                        raise adapter.invalid(
                            "opaque reasoning state is not a Responses reasoning item"
                        )
                    out.append(item)
            flush()
            return out
        content = message.content
        texts_in = (
            [content]
            if isinstance(content, str)
            else [p.text for p in content if isinstance(p, TextPart)]
        )
        return [{"role": "user", "content": [{"type": "input_text", "text": t} for t in texts_in]}]

    def decoder(
        self, attempt: adapter.Attempt, request: adapter.ModelCallRequest
    ) -> adapter.StreamDecoder:
        return _ResponsesDecoder(self, attempt)


def _assistant_text(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "output_text", "text": text}]}


class _ResponsesDecoder(adapter.StreamDecoder):
    def __init__(self, model: OpenAIResponsesModel, attempt: adapter.Attempt) -> None:
        self._model = model
        self._attempt = attempt
        self._parts = adapter.Assembler(attempt)
        self._response_id: str | None = None
        self._upstream_model: str | None = None
        self._status: str | None = None
        self._incomplete_reason: str | None = None
        self._refused = False
        self._usage: TurnUsage | None = None

    def _observe(self, response: dict[str, Any], *, terminal: bool = False) -> None:
        self._response_id = self._response_id or adapter.bounded_token(response.get("id"))
        self._upstream_model = self._upstream_model or adapter.bounded_token(response.get("model"))
        usage = response.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
            self._attempt.observe_usage(self._usage, final=terminal)

    async def feed(self, event: adapter.SseEvent) -> bool:
        data = adapter.parse_json_event(event, self._attempt)
        kind = data.get("type") or event.event
        if kind in ("response.created", "response.in_progress"):
            self._observe(adapter.as_dict(data.get("response")))
        elif kind == "response.output_item.added":
            item = adapter.as_dict(data.get("item"))
            if item.get("type") == "function_call":
                key: object = ("item", item.get("id"))
                await self._parts.tool_start(key, item.get("call_id"), item.get("name"))
                args = item.get("arguments")
                if isinstance(args, str) and args:
                    await self._parts.tool_args(key, args)
            elif item.get("type") == "reasoning":
                await self._parts.reasoning(("item", item.get("id")), "")
        elif kind == "response.output_text.delta":
            # Some compatible servers leave content_index out: it is the first part,
            # the one the message's done item names 0 (and must not repeat).
            part = adapter.as_int(data.get("content_index")) or 0
            await self._parts.text(("text", data.get("item_id"), part), _str(data.get("delta")))
        elif kind == "response.refusal.delta":
            self._refused = True
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            await self._parts.reasoning(("item", data.get("item_id")), _str(data.get("delta")))
        elif kind == "response.reasoning_summary_part.added":
            if adapter.as_int(data.get("summary_index")):
                await self._parts.reasoning(("item", data.get("item_id")), "\n\n")
        elif kind == "response.function_call_arguments.delta":
            await self._parts.tool_args(("item", data.get("item_id")), _str(data.get("delta")))
        elif kind == "response.output_item.done":
            await self._item_done(adapter.as_dict(data.get("item")))
        elif kind in ("response.completed", "response.incomplete"):
            response = adapter.as_dict(data.get("response"))
            self._observe(response, terminal=True)
            self._status = "completed" if kind == "response.completed" else "incomplete"
            reason = adapter.as_dict(response.get("incomplete_details")).get("reason")
            self._incomplete_reason = reason if isinstance(reason, str) else None
            return True
        elif kind == "response.failed":
            response = adapter.as_dict(data.get("response"))
            self._observe(response, terminal=True)
            raise adapter.stream_error(
                self._attempt,
                adapter.error_token(response),
                default_detail="the provider reported that the response failed",
            )
        elif kind == "error":
            raise adapter.stream_error(
                self._attempt,
                adapter.error_token(data),
                default_detail="the provider reported an error mid-stream",
            )
        return False

    async def _item_done(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        key = ("item", item.get("id"))
        if kind == "function_call":
            if not self._parts.tool_started(key):
                await self._parts.tool_start(key, item.get("call_id"), item.get("name"))
                await self._parts.tool_args(key, _str(item.get("arguments")))
            args = item.get("arguments")
            if isinstance(args, str):
                self._parts.tool_arguments_final(key, args)
        elif kind == "reasoning":
            summary = item.get("summary")
            summary = summary if isinstance(summary, list) else []
            if not self._parts.has(key):
                text = "\n\n".join(_str(adapter.as_dict(s).get("text")) for s in summary)
                await self._parts.reasoning(key, text)
            encrypted = item.get("encrypted_content")
            # Under store=false an item can only be replayed with its encrypted
            # content; without it the summary stays as plain reasoning text.
            if isinstance(encrypted, str) and encrypted:
                state = {
                    "type": "reasoning",
                    "id": item.get("id"),
                    "summary": summary,
                    "encrypted_content": encrypted,
                }
                self._parts.reasoning_state(key, {"item": state})
        elif kind == "message":
            content = item.get("content")
            for index, piece in enumerate(content if isinstance(content, list) else []):
                piece = adapter.as_dict(piece)
                text_key = ("text", item.get("id"), index)
                if piece.get("type") == "output_text" and not self._parts.has(text_key):
                    await self._parts.text(text_key, _str(piece.get("text")))
                elif piece.get("type") == "refusal":
                    self._refused = True

    def finish(self, terminal: bool) -> adapter.ModelOutcome:
        if self._refused:
            raise self._attempt.failure(
                adapter.FailureKind.REFUSAL, "the model refused the request"
            )
        if not terminal or self._status is None:
            raise self._attempt.failure(
                adapter.FailureKind.PROTOCOL, "the stream ended before the response completed"
            )
        finish: adapter.FinishReason
        if self._status == "completed":
            finish = "tool-calls" if self._parts.tool_count() else "stop"
            raw = "completed"
        else:
            reason = self._incomplete_reason or ""
            finish = _INCOMPLETE.get(reason, "other")
            raw = f"incomplete:{(reason or 'unknown')[:48]}"
        return adapter.settled(
            self._attempt,
            self._parts,
            binding=self._model.binding,
            usage=self._usage or TurnUsage(),
            final_usage=self._usage is not None,
            finish_reason=finish,
            raw_stop_reason=raw,
            upstream_model=self._upstream_model,
            response_id=self._response_id,
        )


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _usage(raw: dict[str, Any]) -> TurnUsage:
    inp = adapter.as_dict(raw.get("input_tokens_details"))
    out = adapter.as_dict(raw.get("output_tokens_details"))
    return adapter.usage_total(
        TurnUsage(
            input_tokens=adapter.as_int(raw.get("input_tokens")),
            output_tokens=adapter.as_int(raw.get("output_tokens")),
            total_tokens=adapter.as_int(raw.get("total_tokens")),
            reasoning_tokens=adapter.as_int(out.get("reasoning_tokens")),
            cached_input_tokens=adapter.as_int(inp.get("cached_tokens")),
        )
    )
