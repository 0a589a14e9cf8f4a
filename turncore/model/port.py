"""The provider-neutral model port (seed 003, DESIGN §6).

``Model.turn(request, sink, cancel)`` performs exactly one attempt:

- ``request`` is a :class:`ModelCallRequest` in turncore's message vocabulary;
  it is validated against the selected :class:`~turncore.model.binding.Binding`
  before any network I/O (:func:`validate_request`).
- ``sink`` is the caller's async callable; every :data:`StreamEvent` is awaited
  before the adapter reads on, so a slow sink holds the stream back and a
  failing sink ends the attempt.
- ``cancel`` is a :class:`CancellationToken`: monotonic, cloneable, it wakes the
  pending read, and a cancellation observed together with a completion wins.

The result is a :class:`ModelOutcome` (complete parts, stop reason, usage,
observation) or a raised :class:`~turncore.model.failures.ModelFailure`.
Routing (retries, fallbacks, alternate accounts) is the caller's business.
"""

from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

import orjson

from turncore.events import TurnUsage
from turncore.jsonvalue import JsonValue, json_problem
from turncore.messages import (
    AssistantMessage,
    AudioPart,
    FilePart,
    ImagePart,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolMessage,
    UserMessage,
)
from turncore.model.binding import Binding, opaque_state
from turncore.model.failures import check_usage as check_usage
from turncore.model.failures import invalid, too_large, unsupported

# ---------------------------------------------------------------- request

ReasoningEffort: TypeAlias = Literal["low", "medium", "high"]
PortMessage: TypeAlias = UserMessage | AssistantMessage | ToolMessage


@dataclass(frozen=True)
class ToolDefinition:
    """A name, a description and a JSON Schema. It confers no permission to execute."""

    name: str
    description: str
    input_schema: JsonValue


@dataclass(frozen=True)
class NamedToolChoice:
    """Force the model to call this published tool."""

    name: str


ToolChoice: TypeAlias = Literal["auto", "none", "required"] | NamedToolChoice


@dataclass(frozen=True)
class OutputFormat:
    """Ask for a final answer that is one JSON document matching ``schema``
    (``turncore.output``): natively where the wire has structured output, else
    through a final-result tool the adapter turns back into answer text."""

    name: str
    schema: JsonValue
    strict: bool = False
    """The provider may enforce the schema while decoding (OpenAI's strict mode)."""


@dataclass(frozen=True)
class ModelCallRequest:
    """One provider-neutral request. Absent optional fields stay absent on the wire."""

    model: str
    """Must equal the selected binding's model."""
    system: str
    messages: Sequence[PortMessage]
    tools: Sequence[ToolDefinition] = ()
    tool_choice: ToolChoice | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    output: OutputFormat | None = None
    """The shape of the final answer; None: free text."""
    deadline_seconds: float | None = None
    """Local time budget for the whole attempt; exceeding it fails with kind deadline."""


# ---------------------------------------------------------------- stream events


@dataclass(frozen=True)
class TextDeltaEvent:
    text: str
    kind: Literal["text-delta"] = "text-delta"


@dataclass(frozen=True)
class ReasoningDeltaEvent:
    text: str
    kind: Literal["reasoning-delta"] = "reasoning-delta"


@dataclass(frozen=True)
class ToolCallStartEvent:
    """Announced once per call, with the provider's id and name, before any fragment."""

    tool_call_id: str
    tool_name: str
    kind: Literal["tool-call-start"] = "tool-call-start"


@dataclass(frozen=True)
class ToolCallArgsDeltaEvent:
    tool_call_id: str
    fragment: str
    kind: Literal["tool-call-args-delta"] = "tool-call-args-delta"


StreamEvent: TypeAlias = (
    TextDeltaEvent | ReasoningDeltaEvent | ToolCallStartEvent | ToolCallArgsDeltaEvent
)
Sink: TypeAlias = Callable[[StreamEvent], Awaitable[None]]


async def discard_sink(event: StreamEvent) -> None:
    """A sink that ignores every event."""


# ---------------------------------------------------------------- outcome

FinishReason: TypeAlias = Literal[
    "stop", "length", "content-filter", "tool-calls", "error", "other"
]
OutcomePart: TypeAlias = TextPart | ReasoningPart | ToolCallPart


@dataclass(frozen=True)
class Observation:
    """Evidence pinned to the selected binding. ``upstream_model`` and
    ``response_id`` are present only when the provider reported them."""

    binding: Binding
    upstream_model: str | None = None
    response_id: str | None = None
    final_usage: bool = False
    """The usage counters came from the provider's terminal report."""


@dataclass(frozen=True)
class ModelOutcome:
    parts: tuple[OutcomePart, ...]
    """Complete items, ready to persist as an AssistantMessage."""
    finish_reason: FinishReason
    usage: TurnUsage
    observation: Observation
    raw_stop_reason: str | None = None
    """The provider's own stop token (bounded), when it sent one."""

    def message(self) -> AssistantMessage:
        return AssistantMessage(content=list(self.parts))

    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]


# ---------------------------------------------------------------- cancellation


class _CancelState:
    __slots__ = ("cancelled", "waiters")

    def __init__(self) -> None:
        self.cancelled = False
        self.waiters: list[asyncio.Future[None]] = []


class CancellationToken:
    """Monotonic cancellation shared by every clone.

    ``cancel()`` may be called from the event loop's thread at any time (also
    before the attempt starts); it wakes every pending :meth:`wait`. Once
    cancelled a token stays cancelled.
    """

    __slots__ = ("_state",)

    def __init__(self, _state: _CancelState | None = None) -> None:
        self._state = _state or _CancelState()

    def clone(self) -> CancellationToken:
        return CancellationToken(self._state)

    @property
    def cancelled(self) -> bool:
        return self._state.cancelled

    def cancel(self) -> None:
        state = self._state
        if state.cancelled:
            return
        state.cancelled = True
        waiters, state.waiters = state.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self) -> None:
        """Return once the token is cancelled."""
        if self._state.cancelled:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._state.waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self._state.waiters:
                self._state.waiters.remove(fut)


# ---------------------------------------------------------------- the port


class Model(ABC):
    """One selected binding; ``turn`` performs one attempt."""

    @property
    @abstractmethod
    def binding(self) -> Binding: ...

    @abstractmethod
    async def turn(
        self, request: ModelCallRequest, sink: Sink, cancel: CancellationToken
    ) -> ModelOutcome:
        """Run one attempt; raise :class:`~turncore.model.failures.ModelFailure`."""


# ---------------------------------------------------------------- validation


@dataclass(frozen=True)
class Limits:
    """Bounds checked before the network (and on what comes back)."""

    max_identifier: int = 256
    max_field_bytes: int = 1 << 20
    max_request_bytes: int = 8 << 20
    max_messages: int = 10_000
    max_tools: int = 128
    max_response_bytes: int = 32 << 20
    max_sse_event_bytes: int = 4 << 20
    tool_name_pattern: str = r"[A-Za-z0-9_-]{1,64}"


DEFAULT_LIMITS = Limits()


@dataclass
class OpaqueView:
    """Opaque payloads of the request's parts, checked against the binding:
    ``payloads[id(part)]`` is the payload of a part that carries bound state."""

    payloads: dict[int, JsonValue] = field(default_factory=dict)

    def of(self, part: object) -> JsonValue:
        return self.payloads.get(id(part))


def _bounded_text(value: str, what: str, limits: Limits) -> None:
    if len(value) > limits.max_field_bytes:
        raise too_large(f"{what} exceeds {limits.max_field_bytes} bytes")
    # Failures are raised outside the except block, so none chains the text.
    size = -1
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        pass
    if size < 0:
        raise invalid(f"{what} is not valid Unicode text (it holds a lone surrogate)")
    if size > limits.max_field_bytes:
        raise too_large(f"{what} exceeds {limits.max_field_bytes} bytes")


def _identifier(value: str, what: str, limits: Limits) -> None:
    if not value or len(value) > limits.max_identifier or not value.isprintable():
        raise invalid(f"{what} must be 1..{limits.max_identifier} printable characters")


def _json_field(value: JsonValue, what: str, limits: Limits) -> None:
    problem = json_problem(value)
    if problem is not None:
        raise invalid(f"{what} is not JSON")
    size = -1
    try:
        size = len(orjson.dumps(value))
    except orjson.JSONEncodeError:  # a lone surrogate in a string
        pass
    if size < 0:
        raise invalid(f"{what} is not JSON (it holds text that is not valid Unicode)")
    if size > limits.max_field_bytes:
        raise too_large(f"{what} exceeds {limits.max_field_bytes} bytes")


def validate_request(
    request: ModelCallRequest, binding: Binding, limits: Limits = DEFAULT_LIMITS
) -> OpaqueView:
    """Refuse, before any I/O, what the selected binding cannot be sent.

    Checks the model against the binding, declared capabilities, bounds on
    identifiers and fields, tool choice against published tools, unsupported
    media, and every part's opaque state against the binding's six
    coordinates. Returns the checked opaque payloads for the encoder.
    """
    if request.model != binding.model:
        raise invalid("the request's model does not match the selected binding")
    _bounded_text(request.system, "the system prompt", limits)
    caps = binding.capabilities

    if request.temperature is not None or request.top_p is not None:
        if not caps.sampling:
            raise unsupported("this binding does not accept temperature or top_p")
    if request.temperature is not None and not (0.0 <= request.temperature <= 2.0):
        raise invalid("temperature must be between 0 and 2")
    if request.top_p is not None and not (0.0 < request.top_p <= 1.0):
        raise invalid("top_p must be in (0, 1]")
    if request.max_output_tokens is not None and not (
        isinstance(request.max_output_tokens, int) and 0 < request.max_output_tokens <= 10_000_000
    ):
        raise invalid("max_output_tokens must be a positive integer")
    if request.reasoning_effort is not None:
        if request.reasoning_effort not in ("low", "medium", "high"):
            raise invalid("reasoning_effort must be low, medium or high")
        if not caps.reasoning:
            raise unsupported("this binding does not declare reasoning support")
    if request.deadline_seconds is not None and not request.deadline_seconds > 0:
        raise invalid("deadline_seconds must be positive")

    if request.tools and not caps.tools:
        raise unsupported("this binding does not declare tool support")
    if len(request.tools) > limits.max_tools:
        raise too_large(f"more than {limits.max_tools} tools")
    if request.output is not None:
        _json_field(request.output.schema, "the output schema", limits)
        if not isinstance(request.output.schema, dict):
            raise invalid("the output schema must be a JSON object")
    names: set[str] = set()
    name_re = re.compile(limits.tool_name_pattern)
    for tool in request.tools:
        if not name_re.fullmatch(tool.name):
            raise invalid("a tool name does not match the provider's identifier rules")
        if tool.name in names:
            raise invalid("two tools share a name")
        names.add(tool.name)
        _bounded_text(tool.description, "a tool description", limits)
        if not isinstance(tool.input_schema, dict):
            raise invalid("a tool's input schema must be a JSON object")
        _json_field(tool.input_schema, "a tool's input schema", limits)

    choice = request.tool_choice
    if isinstance(choice, NamedToolChoice):
        if choice.name not in names:
            raise invalid("the tool choice names a tool that is not published")
    elif choice == "required" and not names:
        raise invalid("tool choice 'required' needs at least one published tool")
    elif choice is not None and choice not in ("auto", "none", "required"):
        raise invalid("unknown tool choice")

    if len(request.messages) > limits.max_messages:
        raise too_large(f"more than {limits.max_messages} messages")
    view = OpaqueView()
    for message in request.messages:
        if _VALIDATED.seen(message, limits):
            continue
        before = len(view.payloads)
        _validate_message(message, binding, limits, view)
        if len(view.payloads) == before:  # nothing binding-specific to remember
            _VALIDATED.add(message, limits)
    return view


class _Validated:
    """Messages that passed ``_validate_message`` under given limits, by identity.

    A turn's request repeats every earlier message, and so do the turns of a
    conversation (the same message objects: the composer and the context
    resolver keep them). Checking each once per process keeps validation
    O(new messages) per call. Only messages whose check depends on nothing but
    the message and the limits are kept (none with opaque provider state).
    """

    def __init__(self, size: int = 200_000) -> None:
        self._known: OrderedDict[int, tuple[object, Limits]] = OrderedDict()
        self._size = size

    def seen(self, message: object, limits: Limits) -> bool:
        known = self._known.get(id(message))
        return known is not None and known[0] is message and known[1] == limits

    def add(self, message: object, limits: Limits) -> None:
        self._known[id(message)] = (message, limits)  # holding it keeps its id unique
        while len(self._known) > self._size:
            try:
                self._known.popitem(last=False)
            except KeyError:  # emptied meanwhile by another thread
                break


_VALIDATED = _Validated()


def _validate_message(
    message: PortMessage, binding: Binding, limits: Limits, view: OpaqueView
) -> None:
    if isinstance(message, ToolMessage):
        for result in message.content:
            _identifier(result.tool_call_id, "a tool call id", limits)
            _identifier(result.tool_name, "a tool name", limits)
            _json_field(result.output.value, "a tool result", limits)
        return
    if isinstance(message.content, str):
        _bounded_text(message.content, "a message", limits)
        return
    for part in message.content:
        if isinstance(part, (ImagePart, AudioPart, FilePart)):
            raise unsupported(_media_refusal(part))
        if isinstance(part, (TextPart, ReasoningPart)):
            _bounded_text(part.text, "a message part", limits)
        else:
            _identifier(part.tool_call_id, "a tool call id", limits)
            _identifier(part.tool_name, "a tool name", limits)
            _json_field(part.input, "a tool call input", limits)
        if part.provider_options is not None:
            _json_field(part.provider_options, "provider options", limits)
            view.payloads[id(part)] = opaque_state(part.provider_options, binding)


def _media_refusal(part: ImagePart | AudioPart | FilePart) -> str:
    return f"{part.type} input is not supported by this contract revision"


def unsendable_media(
    messages: Sequence[UserMessage | AssistantMessage | ToolMessage],
) -> str | None:
    """Why no adapter can send the media parts in ``messages``, or None if there are none.

    This contract revision refuses image, audio and file input in every
    adapter (``validate_request``), so a turn carrying any is refused where
    it is created instead of failing at its first model call.
    """
    for message in messages:
        if isinstance(message.content, str):
            continue
        for part in message.content:
            if isinstance(part, (ImagePart, AudioPart, FilePart)):
                return (
                    f"{_media_refusal(part)} ({part.media_type}): no configured model adapter "
                    "can send image, audio or file parts"
                )
    return None


def check_request_size(body: bytes, limits: Limits) -> None:
    if len(body) > limits.max_request_bytes:
        raise too_large(f"the serialised request exceeds {limits.max_request_bytes} bytes")
