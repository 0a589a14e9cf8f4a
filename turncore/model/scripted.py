"""A scripted model for tests and demos; it implements the port like any adapter.

A script is (a) a list of responses, (b) a function ``request -> response``
(sync or async), or (c) a JSON file::

    {"delay": 0.5?, "responses": [
        {"text": "…"},
        {"output": {…}},      (a structured answer: the JSON value, as the text)
        {"toolCalls": [{"toolName": "…", "input": {…}, "toolCallId": "…"?}], "text": "…"?},
        {"reasoning": "…", "text": "…"},
        {"error": "…", "errorKind": "rate-limit"?}
    ]}

Optional keys on any response: ``finishReason`` and ``usage`` (TurnUsage wire
names; on an ``error`` response, the usage reported before the break). Usage
the script leaves out is estimated from word counts and marked not final.
Response *i* answers the *i*-th call of a turn, where *i* is derived
from the request alone — the number of assistant messages after the last user
message — so the model holds no mutable position and a restarted process
picks the same response. Generated tool call ids are ``call_<i>_<j>``.

Text and reasoning stream as a few deltas (and arguments as two fragments),
with an optional delay before each, so live views and cancellation can be
exercised.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias, cast, get_args

import orjson

from turncore.events import TurnUsage
from turncore.jsonvalue import JsonValue, json_problem
from turncore.messages import (
    AssistantMessage,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolMessage,
    UserMessage,
)
from turncore.model._attempt import Attempt, run_attempt
from turncore.model.binding import Binding
from turncore.model.failures import Dispatch, FailureKind, ModelFailure, check_usage, invalid
from turncore.model.port import (
    DEFAULT_LIMITS,
    CancellationToken,
    FinishReason,
    Limits,
    Model,
    ModelCallRequest,
    ModelOutcome,
    Observation,
    OutcomePart,
    ReasoningDeltaEvent,
    Sink,
    TextDeltaEvent,
    ToolCallArgsDeltaEvent,
    ToolCallStartEvent,
    validate_request,
)
from turncore.output import is_feedback


@dataclass(frozen=True)
class ScriptedToolCall:
    tool_name: str
    input: JsonValue
    tool_call_id: str | None = None


@dataclass(frozen=True)
class ScriptedResponse:
    text: str | None = None
    reasoning: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    error: str | None = None
    error_kind: FailureKind = FailureKind.TRANSPORT
    finish_reason: FinishReason | None = None
    usage: TurnUsage | None = None

    @classmethod
    def from_json(cls, obj: object) -> ScriptedResponse:
        """Parse one scripted response (wire names); raises ValueError when malformed."""
        if isinstance(obj, str):
            return cls(text=obj)
        if not isinstance(obj, dict):
            raise ValueError("a scripted response must be an object")
        known = {
            "text",
            "output",
            "reasoning",
            "toolCalls",
            "error",
            "errorKind",
            "finishReason",
            "usage",
        }
        extra = set(obj) - known
        if extra:
            raise ValueError(f"unknown scripted response keys: {sorted(extra)}")
        for key in ("text", "reasoning", "error"):
            if key in obj and not isinstance(obj[key], str):
                raise ValueError(f"{key!r} must be a string")
        text = obj.get("text")
        if "output" in obj:
            # A structured answer (turncore.output): the JSON value as the text.
            if "text" in obj:
                raise ValueError("give 'output' or 'text', not both")
            if json_problem(obj["output"]) is not None:
                raise ValueError("'output' must be JSON")
            text = orjson.dumps(obj["output"]).decode()
        calls: list[ScriptedToolCall] = []
        for raw in obj.get("toolCalls") or []:
            if not isinstance(raw, dict) or not isinstance(raw.get("toolName"), str):
                raise ValueError("each tool call needs a toolName")
            if set(raw) - {"toolName", "input", "toolCallId"}:
                raise ValueError("unknown keys in a scripted tool call")
            value = raw.get("input", {})
            if json_problem(value) is not None:
                raise ValueError("a scripted tool call input must be JSON")
            call_id = raw.get("toolCallId")
            if call_id is not None and (not isinstance(call_id, str) or not call_id):
                raise ValueError("toolCallId must be a non-empty string")
            calls.append(ScriptedToolCall(raw["toolName"], value, call_id))
        finish = obj.get("finishReason")
        if finish is not None and finish not in get_args(FinishReason):
            raise ValueError("finishReason must be a normalised finish reason")
        kind = FailureKind(obj.get("errorKind", FailureKind.TRANSPORT.value))
        usage = TurnUsage.model_validate(obj["usage"]) if "usage" in obj else None
        problem = None if usage is None else check_usage(usage)
        if problem is not None:
            raise ValueError(f"the scripted usage is contradictory: {problem}")
        return cls(
            text=text,
            reasoning=obj.get("reasoning"),
            tool_calls=tuple(calls),
            error=obj.get("error"),
            error_kind=kind,
            finish_reason=cast("FinishReason | None", finish),
            usage=usage,
        )


ScriptItem: TypeAlias = ScriptedResponse | dict[str, Any] | str
ScriptFunction: TypeAlias = Callable[[ModelCallRequest], ScriptItem | Awaitable[ScriptItem]]


def load_script(path: str | Path) -> list[ScriptedResponse]:
    """Read a JSON script file; raises ValueError (or OSError) when it is unusable."""
    return _read_script(path)[0]


_SCRIPTS: dict[tuple[str, int, int], tuple[list[ScriptedResponse], float]] = {}
"""Parsed script files by path, modification time and size: a model is resolved per
call, and a long script parsed per call would cost more with every response."""


def _read_script(path: str | Path) -> tuple[list[ScriptedResponse], float]:
    """The responses and the optional ``"delay"`` (seconds before each streamed piece)."""
    st = Path(path).stat()
    key = (str(Path(path).absolute()), st.st_mtime_ns, st.st_size)
    known = _SCRIPTS.get(key)
    if known is None:
        known = _parse_script(path)
        while len(_SCRIPTS) >= 32:
            _SCRIPTS.pop(next(iter(_SCRIPTS)))
        _SCRIPTS[key] = known
    return list(known[0]), known[1]


def _parse_script(path: str | Path) -> tuple[list[ScriptedResponse], float]:
    data = orjson.loads(Path(path).read_bytes())
    if not isinstance(data, dict) or not isinstance(data.get("responses"), list):
        raise ValueError('a script file must be {"responses": [...]}')
    unknown = sorted(set(data) - {"responses", "delay"})
    if unknown:
        raise ValueError(f"a script file has only responses and delay, not {', '.join(unknown)}")
    delay = data.get("delay", 0)
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not 0 <= delay <= 60:
        raise ValueError('a script\'s "delay" is a number of seconds from 0 to 60')
    return [ScriptedResponse.from_json(r) for r in data["responses"]], float(delay)


def call_index(messages: Sequence[UserMessage | AssistantMessage | ToolMessage]) -> int:
    """How many assistant messages follow the last user message (a message that
    sends an invalid structured answer back is the runtime's, not the user's)."""
    count = 0
    for message in reversed(messages):
        if isinstance(message, UserMessage) and not is_feedback(message):
            break
        if isinstance(message, AssistantMessage):
            count += 1
    return count


def _pieces(text: str, n: int = 3) -> list[str]:
    words = re.findall(r"\s*\S+\s*|\s+", text)
    if len(words) <= 1:
        return [text] if text else []
    size = max(1, -(-len(words) // n))
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


def _words(text: str) -> int:
    return len(text.split())


class ScriptedModel(Model):
    def __init__(
        self,
        script: Sequence[ScriptItem] | ScriptFunction | Path,
        *,
        model: str = "script",
        provider: str = "scripted",
        delay: float = 0.0,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self._fn: ScriptFunction | None = None
        self._responses: list[ScriptedResponse] = []
        if isinstance(script, Path):
            self._responses, file_delay = _read_script(script)
            delay = delay or file_delay
            source = f"script:{script}"
        elif callable(script):
            self._fn = script
            source = f"function:{getattr(script, '__qualname__', 'script')}"
        else:
            self._responses = [
                r if isinstance(r, ScriptedResponse) else ScriptedResponse.from_json(r)
                for r in script
            ]
            source = "script:inline"
        self._delay = delay
        self._limits = dataclasses.replace(limits, tool_name_pattern=r"\S{1,128}")
        self._binding = Binding(
            protocol="scripted", provider=provider, endpoint=source[:512], model=model
        )

    @property
    def binding(self) -> Binding:
        return self._binding

    def __repr__(self) -> str:
        return f"ScriptedModel({self._binding.label()!r})"

    async def turn(
        self, request: ModelCallRequest, sink: Sink, cancel: CancellationToken
    ) -> ModelOutcome:
        attempt = Attempt(sink, self._limits)
        if cancel.cancelled:
            raise attempt.failure(
                FailureKind.CANCELLED, "the attempt was cancelled before it started"
            )
        validate_request(request, self._binding, self._limits)
        index = call_index(request.messages)

        async def work() -> ModelOutcome:
            return await self._play(index, request, attempt)

        return await run_attempt(work, attempt, cancel, request.deadline_seconds)

    async def _response(self, index: int, request: ModelCallRequest) -> ScriptedResponse:
        if self._fn is not None:
            produced = self._fn(request)
            if inspect.isawaitable(produced):
                produced = await produced
            item: ScriptItem = produced
            return item if isinstance(item, ScriptedResponse) else ScriptedResponse.from_json(item)
        if index >= len(self._responses):
            raise invalid(
                f"the script has no response for call {index} (it has {len(self._responses)})"
            )
        return self._responses[index]

    async def _play(self, index: int, request: ModelCallRequest, attempt: Attempt) -> ModelOutcome:
        response = await self._response(index, request)
        attempt.dispatch = Dispatch.ACCEPTED
        if response.error is not None:
            # A scripted error happens after the "provider" accepted the call; usage
            # given with it is the snapshot reported before the break (never final).
            raise ModelFailure(
                response.error_kind, Dispatch.ACCEPTED, response.error[:500], usage=response.usage
            )
        parts: list[OutcomePart] = []
        if response.reasoning:
            for piece in _pieces(response.reasoning):
                await self._pause()
                await attempt.emit(ReasoningDeltaEvent(piece))
            parts.append(ReasoningPart(text=response.reasoning))
        if response.text:
            for piece in _pieces(response.text):
                await self._pause()
                await attempt.emit(TextDeltaEvent(piece))
            parts.append(TextPart(text=response.text))
        out_words = _words(response.reasoning or "") + _words(response.text or "")
        for j, call in enumerate(response.tool_calls):
            call_id = call.tool_call_id or f"call_{index}_{j}"
            await self._pause()
            await attempt.emit(ToolCallStartEvent(call_id, call.tool_name))
            args = orjson.dumps(call.input).decode()
            half = len(args) // 2
            for fragment in (args[:half], args[half:]):
                if fragment:
                    await attempt.emit(ToolCallArgsDeltaEvent(call_id, fragment))
            out_words += max(1, len(args) // 4)
            parts.append(
                ToolCallPart(tool_call_id=call_id, tool_name=call.tool_name, input=call.input)
            )
        usage = response.usage
        # Usage the script states is what this "provider" reports; a word count
        # invented here is an estimate and never claims to be final (seed 003).
        final_usage = usage is not None
        if usage is None:
            in_words = _words(request.system) + sum(_words(_text_of(m)) for m in request.messages)
            usage = TurnUsage(
                input_tokens=in_words, output_tokens=out_words, total_tokens=in_words + out_words
            )
        finish: FinishReason = response.finish_reason or (
            "tool-calls" if response.tool_calls else "stop"
        )
        return ModelOutcome(
            parts=tuple(parts),
            finish_reason=finish,
            usage=usage,
            observation=Observation(binding=self._binding, final_usage=final_usage),
            raw_stop_reason=None,
        )

    async def _pause(self) -> None:
        if self._delay > 0:
            await asyncio.sleep(self._delay)


def _text_of(message: UserMessage | AssistantMessage | ToolMessage) -> str:
    if isinstance(message, ToolMessage):
        return " ".join(orjson.dumps(r.output.value).decode() for r in message.content)
    if isinstance(message.content, str):
        return message.content
    return " ".join(p.text for p in message.content if isinstance(p, (TextPart, ReasoningPart)))
