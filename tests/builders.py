"""Builders of valid turn events and histories, for tests and benchmarks.

Import as ``from tests.builders import ...`` (scripts outside pytest put the
repository root on ``sys.path`` first, as ``bench/replay.py`` does).

Two layers:

- Event factories (``turn_created``, ``model_call_requested``, ``tool_result``,
  …) build one event from explicit arguments and know nothing about history.
  Use them to hand-craft an illegal event for a gate or reducer test.
- ``TurnBuilder`` keeps a history valid as it grows: it numbers model calls,
  writes the request refs the reducer demands (§8.3), remembers each tool
  call's name, input and execution, sums usage, and stamps increasing
  timestamps. Each method appends the event(s) it returns to ``.events``.

Ready-made histories: ``completed_turn`` (a full round with a sync and an
async tool, a suspension and a completion) and ``open_sync_calls`` (a turn
left with invoked sync tools that have no result yet, the state concurrent
progress and result appends start from). Every history here passes
``reduce_turn``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar, cast

from pydantic import BaseModel

from turncore.events import (
    AgentSnapshot,
    ContextRef,
    DurableLlmStepStreamEvent,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallRequested,
    ModelDescriptor,
    ModelRequest,
    ModelStepEvent,
    PendingAsyncTool,
    PendingPermission,
    RequestedAgent,
    ResolvedAgent,
    StepFinish,
    StepTextEnd,
    StepTextStart,
    StepToolCall,
    ToolDescriptor,
    ToolInvocationRequested,
    ToolProgress,
    ToolResult,
    ToolResultData,
    TurnCompleted,
    TurnConfig,
    TurnCreated,
    TurnEvent,
    TurnSuspended,
    TurnUsage,
)
from turncore.messages import (
    AssistantMessage,
    ConversationMessage,
    TextPart,
    ToolCallPart,
    UserMessage,
)

TURN_ID = "2025-11-11T04-36-29Z-0001234-000"
"""The spec's example id (§5.1)."""

OTHER_TURN_ID = "2025-11-12T09-15-00Z-0000001-000"

BASE_TIME = datetime(2025, 11, 11, 4, 36, 29, tzinfo=UTC)

READ_FILE = ToolDescriptor(
    tool_id="builtin:read_file",
    name="read_file",
    description="Read a UTF-8 text file from the workspace.",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
    execution="sync",
    requires_human=False,
)
"""A sync tool: executed in-process, reports ``sync`` progress and results."""

ASK_HUMAN = ToolDescriptor(
    tool_id="builtin:ask_human",
    name="ask_human",
    description="Ask the user a question and wait for the answer.",
    input_schema={
        "type": "object",
        "properties": {"question": {"type": "string"}},
        "required": ["question"],
    },
    execution="async",
    requires_human=True,
)
"""An async tool: resolved from outside, so the turn suspends until its result arrives."""

TOOLS: tuple[ToolDescriptor, ...] = (READ_FILE, ASK_HUMAN)

MODEL = ModelDescriptor(provider="openai", model="gpt-4.1")

INLINE_CONTEXT: tuple[ConversationMessage, ...] = (
    UserMessage(content="What does this repository do?"),
    AssistantMessage(content="It runs agent turns as durable workflows."),
)

USAGE = TurnUsage(input_tokens=120, output_tokens=30, total_tokens=150)


def ts(ms: int = 0) -> str:
    """An ISO-8601 UTC timestamp ``ms`` milliseconds after ``BASE_TIME``."""
    t = BASE_TIME + timedelta(milliseconds=ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


# ---------------------------------------------------------------- event factories


def turn_created(
    turn_id: str = TURN_ID,
    *,
    tools: Sequence[ToolDescriptor] = TOOLS,
    context: Sequence[ConversationMessage] | ContextRef = INLINE_CONTEXT,
    input_text: str = "Summarise README.md and ask me before changing anything.",
    max_model_calls: int = 20,
    auto_permission: bool = False,
    human_available: bool = True,
    session_id: str | None = None,
    at: int = 0,
) -> TurnCreated:
    """A ``turn_created`` with a resolved agent offering ``tools`` (default: one sync, one async)."""
    return TurnCreated(
        turn_id=turn_id,
        ts=ts(at),
        schema_version=1,
        session_id=session_id,
        agent=AgentSnapshot(
            requested=RequestedAgent(agent_id="assistant"),
            resolved=ResolvedAgent(
                agent_id="assistant",
                system_prompt="You are a careful assistant working in a code repository.",
                model=MODEL,
                tools=list(tools),
            ),
        ),
        context=context if isinstance(context, ContextRef) else list(context),
        input=UserMessage(content=input_text),
        config=TurnConfig(
            auto_permission=auto_permission,
            human_available=human_available,
            max_model_calls=max_model_calls,
        ),
    )


def model_call_requested(
    turn_id: str,
    index: int,
    messages: Sequence[str],
    *,
    context_ref: ContextRef | None = None,
    parameters: dict[str, Any] | None = None,
    at: int = 0,
) -> ModelCallRequested:
    return ModelCallRequested(
        turn_id=turn_id,
        ts=ts(at),
        model_call_index=index,
        request=ModelRequest(
            context_ref=context_ref,
            messages=list(messages),
            parameters=parameters if parameters is not None else {"temperature": 0},
        ),
    )


def model_step(
    turn_id: str, index: int, event: DurableLlmStepStreamEvent, *, at: int = 0
) -> ModelStepEvent:
    return ModelStepEvent(turn_id=turn_id, ts=ts(at), model_call_index=index, event=event)


@dataclass(frozen=True)
class Call:
    """A tool call the model makes: its id, the tool it names and the input it passes."""

    tool_call_id: str
    tool: ToolDescriptor
    input: Any


def assistant_message(text: str, calls: Sequence[Call] = ()) -> AssistantMessage:
    """An assistant message: plain text, or text followed by tool-call parts in source order."""
    if not calls:
        return AssistantMessage(content=text)
    parts: list[TextPart | ToolCallPart] = [TextPart(text=text)]
    parts.extend(
        ToolCallPart(tool_call_id=c.tool_call_id, tool_name=c.tool.name, input=c.input)
        for c in calls
    )
    return AssistantMessage(content=list(parts))


def model_call_completed(
    turn_id: str,
    index: int,
    message: AssistantMessage,
    *,
    finish_reason: str | None = None,
    usage: TurnUsage = USAGE,
    at: int = 0,
) -> ModelCallCompleted:
    if finish_reason is None:
        finish_reason = "tool-calls" if message.tool_calls() else "stop"
    return ModelCallCompleted(
        turn_id=turn_id,
        ts=ts(at),
        model_call_index=index,
        message=message,
        finish_reason=finish_reason,
        usage=usage,
    )


def tool_invocation_requested(turn_id: str, call: Call, *, at: int = 0) -> ToolInvocationRequested:
    return ToolInvocationRequested(
        turn_id=turn_id,
        ts=ts(at),
        tool_call_id=call.tool_call_id,
        tool_id=call.tool.tool_id,
        tool_name=call.tool.name,
        execution=call.tool.execution,
        input=call.input,
    )


def tool_progress(
    turn_id: str,
    tool_call_id: str,
    *,
    source: Literal["sync", "async"] = "sync",
    progress: Any = None,
    at: int = 0,
) -> ToolProgress:
    return ToolProgress(
        turn_id=turn_id,
        ts=ts(at),
        tool_call_id=tool_call_id,
        source=source,
        progress=progress if progress is not None else {"status": "working"},
    )


def tool_result(
    turn_id: str,
    tool_call_id: str,
    tool_name: str,
    *,
    source: Literal["sync", "async", "runtime"] = "sync",
    output: Any = "ok",
    is_error: bool = False,
    at: int = 0,
) -> ToolResult:
    return ToolResult(
        turn_id=turn_id,
        ts=ts(at),
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        source=source,
        result=ToolResultData(output=output, is_error=is_error),
    )


# ---------------------------------------------------------------- histories

_E = TypeVar("_E", bound=BaseModel)


@dataclass
class _Open:
    call: Call
    invoked: bool = False
    done: bool = False


class TurnBuilder:
    """Grows a valid history one fact at a time; ``.events`` is the log so far.

    Timestamps advance by one millisecond per event. Model-call request refs
    follow §8.3: call 0 is ``["context"?, "input"]``, call N is the previous
    response plus its tool results in the model's call order.
    """

    def __init__(self, turn_id: str = TURN_ID, **created: Any) -> None:
        self.turn_id = turn_id
        self._clock = 0
        self.created = turn_created(turn_id, at=self._tick(), **created)
        self.events: list[TurnEvent] = [self.created]
        self._next_index = 0
        self._open_index: int | None = None
        self._reported: TurnUsage | None = None
        self._last_calls: list[Call] = []
        self._calls: dict[str, _Open] = {}
        self.usage = TurnUsage()
        self.last_message: AssistantMessage | None = None

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _add(self, event: _E) -> _E:
        self.events.append(cast(TurnEvent, event))
        return event

    # -- model calls --------------------------------------------------------

    def request(self, *, parameters: dict[str, Any] | None = None) -> ModelCallRequested:
        """The next ``model_call_requested``, with the refs the transcript requires."""
        index = self._next_index
        context = self.created.context
        context_ref: ContextRef | None = None
        if index == 0:
            if isinstance(context, ContextRef):
                context_ref, refs = context, ["input"]
            else:
                refs = ["context", "input"] if context else ["input"]
        elif self.last_message is None:
            refs = []  # re-issue after a failed or interrupted call
        else:
            refs = [f"assistant:{index - 1}"]
            refs += [f"toolResult:{c.tool_call_id}" for c in self._last_calls]
        self._next_index += 1
        self._open_index = index
        self._reported = None
        self.last_message = None
        self._last_calls = []
        return self._add(
            model_call_requested(
                self.turn_id,
                index,
                refs,
                context_ref=context_ref,
                parameters=parameters,
                at=self._tick(),
            )
        )

    def step(self, event: DurableLlmStepStreamEvent) -> ModelStepEvent:
        assert self._open_index is not None, "no model call is open"
        if isinstance(event, StepFinish):
            self._reported = event.usage
        return self._add(model_step(self.turn_id, self._open_index, event, at=self._tick()))

    def complete(
        self, text: str = "Done.", calls: Sequence[Call] = (), *, usage: TurnUsage = USAGE
    ) -> ModelCallCompleted:
        """Complete the open model call with ``text`` and (optionally) tool calls."""
        assert self._open_index is not None, "no model call is open"
        message = assistant_message(text, calls)
        event = model_call_completed(
            self.turn_id, self._open_index, message, usage=usage, at=self._tick()
        )
        self._open_index = None
        self.last_message = message
        self._last_calls = list(calls)
        self._calls.update((c.tool_call_id, _Open(c)) for c in calls)
        self.usage = self.usage + usage
        return self._add(event)

    def fail(self, error: str = "Model call was interrupted.") -> ModelCallFailed:
        assert self._open_index is not None, "no model call is open"
        event = ModelCallFailed(
            turn_id=self.turn_id,
            ts=ts(self._tick()),
            model_call_index=self._open_index,
            error=error,
        )
        self._open_index = None
        if self._reported is not None:  # a failed call's reported usage still counts
            self.usage = self.usage + self._reported
        return self._add(event)

    def model_call(
        self, text: str = "Done.", calls: Sequence[Call] = (), *, steps: bool = True
    ) -> list[TurnEvent]:
        """Request, stream (text and tool-call steps, finish) and complete one model call."""
        start = len(self.events)
        self.request()
        if steps:
            self.step(StepTextStart())
            self.step(StepTextEnd())
            for c in calls:
                self.step(
                    StepToolCall(tool_call_id=c.tool_call_id, tool_name=c.tool.name, input=c.input)
                )
            self.step(StepFinish(finish_reason="tool-calls" if calls else "stop", usage=USAGE))
        self.complete(text, calls)
        return self.events[start:]

    # -- tools --------------------------------------------------------------

    def invoke(self, tool_call_id: str) -> ToolInvocationRequested:
        entry = self._calls[tool_call_id]
        entry.invoked = True
        return self._add(tool_invocation_requested(self.turn_id, entry.call, at=self._tick()))

    def progress(self, tool_call_id: str, progress: Any = None) -> ToolProgress:
        entry = self._calls[tool_call_id]
        return self._add(
            tool_progress(
                self.turn_id,
                tool_call_id,
                source=entry.call.tool.execution,
                progress=progress,
                at=self._tick(),
            )
        )

    def result(
        self, tool_call_id: str, output: Any = "ok", *, is_error: bool = False
    ) -> ToolResult:
        """The terminal result, from the tool's own side (``sync`` or ``async``)."""
        entry = self._calls[tool_call_id]
        entry.done = True
        return self._add(
            tool_result(
                self.turn_id,
                tool_call_id,
                entry.call.tool.name,
                source=entry.call.tool.execution,
                output=output,
                is_error=is_error,
                at=self._tick(),
            )
        )

    # -- settle points ------------------------------------------------------

    def suspend(self) -> TurnSuspended:
        """A snapshot of the invoked async tools still waiting for a result.

        (This builder does not model permissions, so no permission is ever pending.)
        """
        pending = [
            PendingAsyncTool(
                tool_call_id=e.call.tool_call_id,
                tool_id=e.call.tool.tool_id,
                tool_name=e.call.tool.name,
                input=e.call.input,
            )
            for e in self._calls.values()
            if e.invoked and not e.done and e.call.tool.execution == "async"
        ]
        no_permissions: list[PendingPermission] = []
        return self._add(
            TurnSuspended(
                turn_id=self.turn_id,
                ts=ts(self._tick()),
                pending_permissions=no_permissions,
                pending_async_tools=pending,
                usage=self.usage,
            )
        )

    def finish(self) -> TurnCompleted:
        """``turn_completed`` repeating the final response (it must have no tool calls)."""
        assert self.last_message is not None, "the last model call did not complete"
        return self._add(
            TurnCompleted(
                turn_id=self.turn_id,
                ts=ts(self._tick()),
                output=self.last_message,
                finish_reason="stop",
                usage=self.usage,
            )
        )


def read_call(tool_call_id: str, path: str = "README.md") -> Call:
    return Call(tool_call_id, READ_FILE, {"path": path})


def ask_call(tool_call_id: str, question: str = "May I edit README.md?") -> Call:
    return Call(tool_call_id, ASK_HUMAN, {"question": question})


def completed_turn(turn_id: str = TURN_ID) -> list[TurnEvent]:
    """A whole turn: one sync and one async tool, a suspension, then a final answer.

    created · call 0 (steps, calls read_file and ask_human) · both invoked ·
    read_file progress and result · suspended on ask_human · async progress
    and result · call 1 (steps, text) · turn_completed. 17 events.
    """
    b = TurnBuilder(turn_id)
    b.model_call("Let me look first.", [read_call("call_1"), ask_call("call_2")])
    b.invoke("call_1")
    b.invoke("call_2")
    b.progress("call_1", {"bytesRead": 512})
    b.result("call_1", "# turncore\nDurable agent turns.")
    b.suspend()
    b.progress("call_2", {"status": "delivered"})
    b.result("call_2", "Yes, go ahead.")
    b.model_call("README.md describes durable agent turns.")
    b.finish()
    return b.events


def open_sync_calls(turn_id: str = TURN_ID, n: int = 3) -> TurnBuilder:
    """A builder whose history ends with ``n`` invoked read_file calls and no results.

    Call ids are ``call_0`` … ``call_{n-1}``. From here any number of sync
    progress events is legal, and exactly one result per call.
    """
    b = TurnBuilder(turn_id)
    calls = [read_call(f"call_{i}", f"src/file_{i}.py") for i in range(n)]
    b.model_call("Reading the files.", calls)
    for c in calls:
        b.invoke(c.tool_call_id)
    return b


def nested(depth: int) -> Any:
    """``[[…[]…]]``: ``depth`` levels of arrays."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value
