"""OpenAI Chat Completions over SSE — also any OpenAI-compatible server
(Ollama, vLLM, llama.cpp server) pointed at by base URL.

Wire notes:

- ``stream: true`` with ``stream_options.include_usage`` so the final chunk
  (``choices: []``) carries usage; ``data: [DONE]`` ends the stream.
- Tool calls arrive as ``delta.tool_calls[{index, id?, function{name?, arguments?}}]``;
  the first fragment of an index must carry the id and name.
- Reasoning text from compatible servers arrives as ``delta.reasoning_content``
  (DeepSeek, older vLLM) or ``delta.reasoning`` (Ollama, newer vLLM), or as
  both with the same text (servers in the middle of the rename): it is taken
  once per delta, ``reasoning_content`` first. Chat Completions has no
  way to send reasoning back, so reasoning parts are not re-sent.
- ``delta.refusal`` is a refusal; its text is not kept.
- The token limit field is ``max_completion_tokens``; servers that only know
  ``max_tokens`` declare ``max_tokens_field = "max_tokens"``.
"""

from __future__ import annotations

from typing import Any

import orjson

from turncore.events import TurnUsage
from turncore.messages import AssistantMessage, TextPart, ToolCallPart, ToolMessage
from turncore.model import adapter

_FINISH: dict[str, adapter.FinishReason] = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content-filter",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
}


class OpenAIChatModel(adapter.HttpModel):
    path = "/chat/completions"
    protocol = "openai-chat"

    def headers(self) -> dict[str, str]:
        return adapter.bearer_headers(self._api_key)

    def encode(
        self, request: adapter.ModelCallRequest, opaque: adapter.OpaqueView
    ) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        for message in request.messages:
            messages.extend(self._message(message))
        body: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                }
                for t in request.tools
            ]
        choice = request.tool_choice
        if isinstance(choice, adapter.NamedToolChoice):
            body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        elif choice is not None:
            body["tool_choice"] = choice
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.top_p is not None:
            body["top_p"] = request.top_p
        if request.max_output_tokens is not None:
            field = self._binding.option("max_tokens_field", "max_completion_tokens")
            body[str(field)] = request.max_output_tokens
        if request.reasoning_effort is not None:
            body["reasoning_effort"] = request.reasoning_effort
        if request.output is not None:
            # Native structured output: the final answer is JSON of this schema.
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.output.name,
                    "schema": request.output.schema,
                    "strict": request.output.strict,
                },
            }
        return body

    def _message(self, message: Any) -> list[dict[str, Any]]:
        if isinstance(message, ToolMessage):
            return [
                {
                    "role": "tool",
                    "tool_call_id": r.tool_call_id,
                    "content": adapter.tool_result_text(r.output.type, r.output.value),
                }
                for r in message.content
            ]
        if isinstance(message, AssistantMessage):
            if isinstance(message.content, str):
                return [{"role": "assistant", "content": message.content}]
            text = "".join(p.text for p in message.content if isinstance(p, TextPart))
            calls = [
                {
                    "id": p.tool_call_id,
                    "type": "function",
                    "function": {"name": p.tool_name, "arguments": adapter.arguments_text(p.input)},
                }
                for p in message.content
                if isinstance(p, ToolCallPart)
            ]
            out: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
            if calls:
                out["tool_calls"] = calls
            # Reasoning parts have no slot in Chat Completions and are not re-sent.
            return [out]
        # user
        if isinstance(message.content, str):
            return [{"role": "user", "content": message.content}]
        texts = [p.text for p in message.content if isinstance(p, TextPart)]
        if len(texts) == 1:
            return [{"role": "user", "content": texts[0]}]
        return [{"role": "user", "content": [{"type": "text", "text": t} for t in texts]}]

    def decoder(
        self, attempt: adapter.Attempt, request: adapter.ModelCallRequest
    ) -> adapter.StreamDecoder:
        return _ChatDecoder(self, attempt)


class _ChatDecoder(adapter.StreamDecoder):
    def __init__(self, model: OpenAIChatModel, attempt: adapter.Attempt) -> None:
        self._model = model
        self._attempt = attempt
        self._parts = adapter.Assembler(attempt)
        self._response_id: str | None = None
        self._upstream_model: str | None = None
        self._finish: str | None = None
        self._refused = False
        self._usage: TurnUsage | None = None
        self._keys: dict[object, object] = {}
        self._ids: dict[object, object] = {}

    async def feed(self, event: adapter.SseEvent) -> bool:
        if event.data.strip() == "[DONE]":
            return True
        chunk = adapter.parse_json_event(event, self._attempt)
        if "error" in chunk:
            raise adapter.stream_error(
                self._attempt,
                adapter.error_token(chunk),
                default_detail="the provider reported an error mid-stream",
            )
        self._response_id = self._response_id or adapter.bounded_token(chunk.get("id"))
        self._upstream_model = self._upstream_model or adapter.bounded_token(chunk.get("model"))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = _usage(usage)
            # The usage chunk is Chat Completions' terminal report.
            self._attempt.observe_usage(self._usage, final=True)
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            choice = adapter.as_dict(choice)
            if choice.get("index", 0) != 0:
                continue
            await self._delta(adapter.as_dict(choice.get("delta")))
            finish = choice.get("finish_reason")
            if isinstance(finish, str) and finish:
                self._finish = finish[:64]
        return False

    async def _delta(self, delta: dict[str, Any]) -> None:
        # One name or the other; servers renaming the field send the same text
        # under both for a while, so a delta's reasoning is taken once.
        reasoning = next(
            (
                value
                for value in (delta.get("reasoning_content"), delta.get("reasoning"))
                if isinstance(value, str) and value
            ),
            None,
        )
        if reasoning is not None:
            await self._parts.reasoning("reasoning", reasoning)
        content = delta.get("content")
        if isinstance(content, str):
            await self._parts.text("text", content)
        if isinstance(delta.get("refusal"), str) and delta["refusal"]:
            self._refused = True
        calls = delta.get("tool_calls")
        for position, call in enumerate(calls if isinstance(calls, list) else []):
            call = adapter.as_dict(call)
            index = call.get("index", position)
            key: object = self._keys.get(index, ("tool", index))
            fn = adapter.as_dict(call.get("function"))
            call_id = call.get("id")
            if self._parts.tool_started(key) and call_id and call_id != self._ids.get(key):
                # Some compatible servers send every complete call at index 0.
                key = ("tool", index, call_id)
            if not self._parts.tool_started(key):
                await self._parts.tool_start(key, call_id, fn.get("name"))
                self._keys[index] = key
                self._ids[key] = call_id
            args = fn.get("arguments")
            if isinstance(args, str):
                await self._parts.tool_args(key, args)
            elif isinstance(args, dict):  # some compatible servers send an object
                await self._parts.tool_args(key, orjson.dumps(args).decode())

    def finish(self, terminal: bool) -> adapter.ModelOutcome:
        if self._refused:
            raise self._attempt.failure(
                adapter.FailureKind.REFUSAL, "the model refused the request"
            )
        if self._finish is None:
            raise self._attempt.failure(
                adapter.FailureKind.PROTOCOL,
                "the stream ended before the provider reported a finish reason",
            )
        return adapter.settled(
            self._attempt,
            self._parts,
            binding=self._model.binding,
            usage=self._usage or TurnUsage(),
            final_usage=self._usage is not None,
            finish_reason=_FINISH.get(self._finish, "other"),
            raw_stop_reason=self._finish,
            upstream_model=self._upstream_model,
            response_id=self._response_id,
        )


def _usage(raw: dict[str, Any]) -> TurnUsage:
    prompt = adapter.as_dict(raw.get("prompt_tokens_details"))
    completion = adapter.as_dict(raw.get("completion_tokens_details"))
    return adapter.usage_total(
        TurnUsage(
            input_tokens=adapter.as_int(raw.get("prompt_tokens")),
            output_tokens=adapter.as_int(raw.get("completion_tokens")),
            total_tokens=adapter.as_int(raw.get("total_tokens")),
            reasoning_tokens=adapter.as_int(completion.get("reasoning_tokens")),
            cached_input_tokens=adapter.as_int(prompt.get("cached_tokens")),
        )
    )
