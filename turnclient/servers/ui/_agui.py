"""A turn as AG-UI events (``GET /api/turns/{id}/events?format=ag-ui``).

The projection, from the turn's durable events and its live deltas, typed
with the ``ag-ui-protocol`` package's own models:

- **runs.** A turn is one AG-UI thread (its session, or the turn id when it
  has none). Each stretch of work is a run: the first opens at
  ``turn_created``; a turn that suspends ends its run with ``RUN_FINISHED``
  whose outcome is ``interrupt``, and the input that resumes it opens the
  next run. A run's id is ``TURN_ID:LINE`` (the line that opened it), so a
  resumed stream names the same runs.
- **text.** A model call's answer is one assistant message (id
  ``TURN_ID:m<call index>``): ``TEXT_MESSAGE_START`` at its first text, a
  ``TEXT_MESSAGE_CONTENT`` per live delta, and at ``model_call_completed``
  whatever of the final text the deltas did not carry, then
  ``TEXT_MESSAGE_END``. Read from the file alone (a late watcher), the whole
  text comes in one content event.
- **tools.** Each tool call of a completed model call is ``TOOL_CALL_START``
  (parent: the call's message), one ``TOOL_CALL_ARGS`` with its input as
  JSON, ``TOOL_CALL_END``; its ``tool_result`` is ``TOOL_CALL_RESULT`` with
  the output as JSON text (id ``TURN_ID:r<tool call id>``).
- **approvals.** A suspension's interrupts are its pending approvals (id
  ``permission:<tool call id>``, reason ``tool_approval``, the tool call id,
  a message such as "approve write_file", and a response schema
  ``{"decision": "allow" | "deny", "reason"?}``) and pending async tools (id
  ``async:<tool call id>``, reason ``tool_result``). Answer them through the
  approve/deny/complete endpoints. The decision itself is a ``CUSTOM`` event
  ``turncore.permission_resolved`` (tool call id, decision, source, reason
  and the decision's ``via``/``by``/``at``).
- **ends.** ``turn_completed`` is ``RUN_FINISHED`` (outcome success, the
  answer's text as result, the turn's usage); ``turn_cancelled`` is
  ``RUN_FINISHED`` with outcome ``cancelled``; ``turn_failed`` is
  ``RUN_ERROR`` with the error and its code.

Reasoning, media parts and step events are not projected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from ag_ui.core import AssistantMessage as AgUiAssistantMessage
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    FunctionCall,
    Interrupt,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
)
from ag_ui.core import UserMessage as AgUiUserMessage

from turncore.events import (
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallRequested,
    TextDelta,
    ToolInvocationRequested,
    ToolPermissionResolved,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnCreated,
    TurnFailed,
    TurnSuspended,
    TurnUsage,
)
from turncore.messages import TextPart, ToolCallPart

_DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["allow", "deny"]},
        "reason": {"type": "string", "description": "shown to the model when denying"},
    },
    "required": ["decision"],
}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


@dataclass
class AgUiProjector:
    """Feeds on a turn's durable events and deltas in order; makes AG-UI events."""

    turn_id: str = ""
    thread_id: str = ""
    run_id: str | None = None
    model: str | None = None
    provider: str | None = None
    streamed: dict[int, str] = field(default_factory=dict)
    """Text sent so far per model call whose message is open."""
    owed: dict[int, int] = field(default_factory=dict)
    """Deltas a resuming client has of a call that were not replayed (yet)."""
    messages: list[Any] = field(default_factory=list)
    """The thread's messages so far, for a ``MESSAGES_SNAPSHOT`` when one is needed."""

    def feed(self, item: Any, line: int | None = None) -> list[BaseEvent]:
        """``item``: a durable event (``line``: its line number) or a delta."""
        match item:
            case TurnCreated():
                self.turn_id = item.turn_id
                self.messages.append(
                    AgUiUserMessage(id=f"{item.turn_id}:u", content=_user_text(item.input))
                )
                self.thread_id = item.session_id or item.turn_id
                resolved = item.agent.resolved
                self.model, self.provider = resolved.model.model, resolved.model.provider
                return self._run(line or 1)
            case TextDelta():
                return self._delta(item.model_call_index, item.delta)
            case ModelCallCompleted():
                return self._completed(item)
            case ModelCallFailed():
                return self._close(item.model_call_index)
            case ToolResult():
                made = self._resume(line)
                self.messages.append(
                    ToolMessage(
                        id=f"{self.turn_id}:r{item.tool_call_id}",
                        tool_call_id=item.tool_call_id,
                        content=_text(item.result.output),
                    )
                )
                return [
                    *made,
                    ToolCallResultEvent(
                        message_id=f"{self.turn_id}:r{item.tool_call_id}",
                        tool_call_id=item.tool_call_id,
                        content=_text(item.result.output),
                        role="tool",
                    ),
                ]
            case ToolPermissionResolved():
                decided = item.metadata if isinstance(item.metadata, dict) else {}
                value: dict[str, Any] = {
                    "toolCallId": item.tool_call_id,
                    "decision": item.decision,
                    "source": item.source,
                    "reason": item.reason,
                    **{k: decided[k] for k in ("via", "by", "at") if k in decided},
                }
                made = self._resume(line)
                return [*made, CustomEvent(name="turncore.permission_resolved", value=value)]
            case TurnSuspended():
                return self._suspended(item)
            case TurnCompleted():
                return self._end(
                    RunFinishedEvent(
                        thread_id=self.thread_id,
                        run_id=self._current(line),
                        outcome=RunFinishedSuccessOutcome(),
                        result=_answer(item.output.content),
                        usage=self._usage(item.usage),
                    )
                )
            case TurnCancelled():
                return self._end(
                    RunFinishedEvent(
                        thread_id=self.thread_id,
                        run_id=self._current(line),
                        outcome=RunFinishedCancelledOutcome(),
                        usage=self._usage(item.usage),
                    )
                )
            case TurnFailed():
                made = self._resume(line)
                return [
                    *made,
                    *self._end(
                        RunErrorEvent(
                            message=item.error, code=item.code, usage=self._usage(item.usage)
                        )
                    ),
                ]
            case _:
                return self._resume(line) if _resumes(item) else []

    def reopen(self, index: int, seq: int) -> None:
        """A client resumes inside model call ``index``'s message, holding its first
        ``seq`` deltas: the message is open already; ``replay`` them to know its text."""
        self.streamed.setdefault(index, "")
        self.owed[index] = seq

    def replay(self, delta: TextDelta | Any) -> None:
        """A delta the resuming client has: its text joins what was sent, silently."""
        self.feed(delta)
        index = delta.model_call_index
        if index in self.owed:
            self.owed[index] -= 1

    # -- runs ------------------------------------------------------------------------

    def _run(self, line: int) -> list[BaseEvent]:
        self.run_id = f"{self.turn_id}:{line}"
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id)]

    def _resume(self, line: int | None) -> list[BaseEvent]:
        """A new run, if the last one ended in a suspension and work goes on."""
        if self.run_id is not None or not self.turn_id:
            return []
        return self._run(line or 0)

    def _current(self, line: int | None) -> str:
        if self.run_id is None:  # the turn ends straight from a suspension (a cancel)
            self._run(line or 0)
        assert self.run_id is not None
        return self.run_id

    def _end(self, event: BaseEvent) -> list[BaseEvent]:
        made: list[BaseEvent] = []
        for index in list(self.streamed):
            made += self._close(index)
        self.run_id = None
        return [*made, event]

    def _usage(self, usage: TurnUsage) -> list[TokenUsage] | None:
        if usage.input_tokens is None and usage.output_tokens is None:
            return None
        return [
            TokenUsage(
                provider=self.provider,
                model=self.model,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
                reasoning_tokens=usage.reasoning_tokens,
                cached_input_tokens=usage.cached_input_tokens,
            )
        ]

    # -- messages --------------------------------------------------------------------

    def _message_id(self, index: int) -> str:
        return f"{self.turn_id}:m{index}"

    def _delta(self, index: int, text: str) -> list[BaseEvent]:
        if not text:
            return []
        made: list[BaseEvent] = self._resume(None)
        if index not in self.streamed:
            self.streamed[index] = ""
            made.append(TextMessageStartEvent(message_id=self._message_id(index), role="assistant"))
        self.streamed[index] += text
        made.append(TextMessageContentEvent(message_id=self._message_id(index), delta=text))
        return made

    def _close(self, index: int) -> list[BaseEvent]:
        if self.streamed.pop(index, None) is None:
            return []
        return [TextMessageEndEvent(message_id=self._message_id(index))]

    def _completed(self, event: ModelCallCompleted) -> list[BaseEvent]:
        index = event.model_call_index
        content = event.message.content
        parts: Sequence[Any] = [TextPart(text=content)] if isinstance(content, str) else content
        text = "".join(p.text for p in parts if isinstance(p, TextPart))
        sent = self.streamed.get(index)
        calls = [p for p in parts if isinstance(p, ToolCallPart)]
        self.messages.append(
            AgUiAssistantMessage(
                id=self._message_id(index),
                content=text or None,
                tool_calls=[
                    ToolCall(
                        id=c.tool_call_id,
                        function=FunctionCall(name=c.tool_name, arguments=_text(c.input)),
                    )
                    for c in calls
                ]
                or None,
            )
        )
        made: list[BaseEvent] = []
        heal = self.owed.pop(index, 0) > 0
        if sent is None:
            made += self._delta(index, text)
        elif not heal and text.startswith(sent):
            made += self._delta(index, text[len(sent) :])
        # (Deltas that disagree with the final text cannot be taken back: the message
        # keeps what was streamed, as any live view does.)
        made += self._close(index)
        if heal:
            # The client resumed inside this message after its deltas were gone (the
            # call closed first): what it holds of the text is unknown here, so it gets
            # the thread as it now is, which replaces what it has.
            made.append(MessagesSnapshotEvent(messages=list(self.messages)))
        for part in calls:
            made += [
                ToolCallStartEvent(
                    tool_call_id=part.tool_call_id,
                    tool_call_name=part.tool_name,
                    parent_message_id=self._message_id(index) if text else None,
                ),
                ToolCallArgsEvent(tool_call_id=part.tool_call_id, delta=_text(part.input)),
                ToolCallEndEvent(tool_call_id=part.tool_call_id),
            ]
        return made

    def _suspended(self, event: TurnSuspended) -> list[BaseEvent]:
        interrupts = [
            Interrupt(
                id=f"permission:{p.tool_call_id}",
                reason="tool_approval",
                message=f"approve {p.tool_name}",
                tool_call_id=p.tool_call_id,
                response_schema=_DECISION_SCHEMA,
            )
            for p in event.pending_permissions
        ] + [
            Interrupt(
                id=f"async:{a.tool_call_id}",
                reason="tool_result",
                message=_question(a.input) or f"answer {a.tool_name}",
                tool_call_id=a.tool_call_id,
            )
            for a in event.pending_async_tools
        ]
        if not interrupts or self.run_id is None:
            return []
        return self._end(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
                usage=self._usage(event.usage),
            )
        )


def _user_text(message: Any) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, TextPart))


def _answer(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, TextPart))


def _question(value: Any) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("question"), str):
        return str(value["question"])
    return None


def _resumes(event: Any) -> bool:
    """Durable events that mean the turn is working again after a suspension."""
    return isinstance(event, ModelCallRequested | ToolInvocationRequested)


def to_sse(event: BaseEvent, id: str | None) -> bytes:
    """One AG-UI event as the protocol's SSE framing: ``data:`` only (its own ``type``
    names it), with this server's resume id."""
    head = f"id: {id}\n" if id is not None else ""
    return head.encode() + b"data: " + event.model_dump_json(by_alias=True).encode() + b"\n\n"


__all__ = ["AgUiProjector", "to_sse"]
