"""How the ``turns`` commands show turns to people: live streams, outcomes, transcripts.

``StreamRenderer`` prints a turn as it happens — streamed text, tool calls,
approvals, progress, results — from ``TurnStreamEvent`` values in any
interleaving: a model call's deltas may arrive before or after its durable
``model_call_requested``, and its text is never printed twice (the
canonical ``model_call_completed`` only adds what the deltas did not show).

``outcome_block`` ends a command: the outcome and, for a suspended turn, the
exact commands that continue it. ``transcript`` is ``turns show``: what one
turn said and did, readable in a terminal.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Mapping
from typing import Any, TextIO

import orjson

from turnclient.lib import turnview
from turnclient.lib.summary import clip, decided_text, usage_text
from turnclient.lib.terminal import command_line, continue_prefix, control, visible
from turncore.events import (
    CancelledOutcome,
    CompletedOutcome,
    FailedOutcome,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallRequested,
    ReasoningDelta,
    SuspendedOutcome,
    TextDelta,
    ToolInvocationRequested,
    ToolPermissionClassificationFailed,
    ToolPermissionClassified,
    ToolPermissionRequired,
    ToolPermissionResolved,
    ToolProgress,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnCreated,
    TurnFailed,
    TurnOutcome,
    TurnSuspended,
)
from turncore.messages import (
    AssistantMessage,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    UserMessage,
    describe_part,
)
from turncore.reducer import ToolCallState, TurnState

__all__ = ["command_line", "continue_prefix", "visible"]


def preview(value: Any, limit: int = 160) -> str:
    return clip(value if isinstance(value, str) else orjson.dumps(value).decode(), limit)


def message_text(message: AssistantMessage | UserMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(p.text for p in message.content if isinstance(p, TextPart))


# ---------------------------------------------------------------- colour

_ANSI = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}
_MARKS = {
    "✔": "green",
    "✓": "green",
    "✗": "red",
    "‖": "yellow",
    "?": "yellow",
    "→": "cyan",
    "←": "dim",
    "…": "dim",
    "──": "bold",
}


def wants_color(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` (no-color.org) or ``TERM=dumb``."""
    env = os.environ if env is None else env
    if "NO_COLOR" in env or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def write_painted(out: TextIO, line: str, color: bool) -> None:
    """``line`` (shown visibly) and a newline, coloured by its leading mark if ``color``."""
    style = _style(line) if color else None
    if style is not None:
        control(out, f"\033[{_ANSI[style]}m")
    out.write(visible(line))
    if style is not None:
        control(out, "\033[0m")
    out.write("\n")


def _style(line: str) -> str | None:
    """The colour of a line by its leading mark (``✔``, ``✗``, ``‖``, ``→``, …)."""
    for mark, style in _MARKS.items():
        if line.startswith(mark):
            return style
    return None


# ---------------------------------------------------------------- live stream


class StreamRenderer:
    """Prints stream events as lines; text deltas as they come, never twice.

    Output keeps the file's order: a model call's deltas come from the process
    running it and may overtake the durable events before its
    ``model_call_requested`` (say, the denial the call answers), so they wait
    until that event has been shown.
    """

    def __init__(self, out: TextIO, *, model: str | None = None, color: bool = False) -> None:
        self._out = out
        self._color = color
        self._spinning = False
        self._last_output = time.monotonic()
        self._activity = "working…"
        self._requested: set[int] = set()
        self._early: dict[int, list[TextDelta | ReasoningDelta]] = {}
        self._model = model
        self._headed: set[int] = set()
        self._shown: dict[int, str] = {}
        """Per model call: the answer text already printed."""
        self._closed: set[int] = set()
        self._thinking: set[int] = set()
        self._midline = False
        self._tools: dict[str, str] = {}
        self.failures: set[str] = set()
        """The model-call errors printed, so the outcome need not say them again."""

    def prime(self, state: TurnState) -> None:
        """Start from a turn's current state: tool names, and model calls already shown."""
        for t in state.tool_calls:
            self._tools[t.tool_call_id] = t.tool_name
        for call in state.model_calls:
            self._headed.add(call.index)
            self._requested.add(call.index)
            if call.response is not None or call.error is not None:
                self._closed.add(call.index)
        self._model = self._model or state.definition.agent.resolved.model.label()

    _FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

    def tick(self, now: float) -> None:
        """On a terminal: show a spinner while nothing has been printed for a moment."""
        if not self._color or self._midline or now - self._last_output < 0.4:
            return
        frame = self._FRAMES[int(now * 10) % len(self._FRAMES)]
        control(self._out, f"\r\033[K\033[2m{frame} {visible(self._activity)}\033[0m")
        self._out.flush()
        self._spinning = True

    def _unspin(self) -> None:
        if self._spinning:
            control(self._out, "\r\033[K")
            self._spinning = False

    def _line(self, text: str) -> None:
        self._unspin()
        self._last_output = time.monotonic()
        if self._midline:
            self._out.write("\n")
            self._midline = False
        write_painted(self._out, text, self._color)
        self._out.flush()

    def _write(self, text: str) -> None:
        self._unspin()
        self._last_output = time.monotonic()
        if text:
            self._out.write(visible(text))
            self._midline = not text.endswith("\n")
            self._out.flush()

    def _head(self, index: int) -> None:
        if index not in self._headed:
            self._headed.add(index)
            model = f" · {self._model}" if self._model else ""
            self._line(f"── model call {index}{model}")

    def _text(self, index: int, text: str) -> None:
        """Print what of the call's answer ``text`` has not been printed yet."""
        shown = self._shown.get(index, "")
        if index in self._thinking and not shown and text:
            self._line("")
        if text.startswith(shown):
            self._write(text[len(shown) :])
        else:  # deltas and the final text disagree: the durable text wins, whole
            self._line("")
            self._write(text)
        self._shown[index] = text

    def close(self) -> None:
        self._unspin()
        if self._midline:
            self._out.write("\n")
            self._midline = False
            self._out.flush()

    def feed(self, event: Any) -> None:
        if isinstance(event, TextDelta | ReasoningDelta):
            if event.model_call_index not in self._requested:
                self._early.setdefault(event.model_call_index, []).append(event)
                return
        match event:
            case TextDelta():
                if event.model_call_index in self._closed:
                    return
                self._head(event.model_call_index)
                self._text(
                    event.model_call_index,
                    self._shown.get(event.model_call_index, "") + event.delta,
                )
            case ReasoningDelta():
                i = event.model_call_index
                if i in self._closed or self._shown.get(i):
                    return
                self._head(i)
                if i not in self._thinking:
                    self._thinking.add(i)
                    self._write("(thinking) ")
                self._write(event.delta)
            case TurnCreated():
                self._model = event.agent.resolved.model.label()
                self._line(f"── user: {clip(message_text(event.input), 200)}")
            case ModelCallRequested():
                self._activity = f"waiting for model call {event.model_call_index}…"
                self._requested.add(event.model_call_index)
                self._head(event.model_call_index)
                for early in self._early.pop(event.model_call_index, []):
                    self.feed(early)
            case ModelCallCompleted():
                i = event.model_call_index
                self._head(i)
                self._text(i, message_text(event.message))
                self._closed.add(i)
                self.close()
                for part in (
                    event.message.content if not isinstance(event.message.content, str) else []
                ):
                    if isinstance(part, ToolCallPart):
                        self._tools[part.tool_call_id] = part.tool_name
            case ModelCallFailed():
                self._closed.add(event.model_call_index)
                self._line(f"✗ model call {event.model_call_index} failed: {event.error}")
                self.failures.add(event.error)
            case ToolPermissionRequired():
                self._tools[event.tool_call_id] = event.tool_name
                request = event.request
                shown = request.get("input") if isinstance(request, dict) else request
                label = turnview.permission_label(event.tool_name, request)
                self._line(f"? {label} ({event.tool_call_id}) needs approval: {preview(shown)}")
                if event.checker_error:
                    self._line(
                        f"  (the permission checker failed: {clip(event.checker_error, 120)})"
                    )
            case ToolPermissionClassified():
                self._line(f"  classifier: {event.decision} — {clip(event.reason, 120)}")
            case ToolPermissionClassificationFailed():
                self._line(f"  classifier failed: {clip(event.error, 120)}")
            case ToolPermissionResolved():
                name = self._tools.get(event.tool_call_id, "tool")
                mark = "✓" if event.decision == "allow" else "✗"
                verb = "allowed" if event.decision == "allow" else "denied"
                why = f": {clip(event.reason, 120)}" if event.reason else ""
                self._line(
                    f"{mark} {name} ({event.tool_call_id}) {verb} {_DECIDED_BY[event.source]}{why}"
                )
            case ToolInvocationRequested():
                self._activity = f"running {event.tool_name}…"
                self._tools[event.tool_call_id] = event.tool_name
                waits = " · async, waiting for its result" if event.execution == "async" else ""
                self._line(
                    f"→ {event.tool_name} ({event.tool_call_id}) {preview(event.input)}{waits}"
                )
            case ToolProgress():
                self._line(f"… {event.tool_call_id} progress: {preview(event.progress)}")
            case ToolResult():
                status = "error" if event.result.is_error else "ok"
                self._line(
                    f"← {event.tool_name} ({event.tool_call_id}) {status}: "
                    f"{preview(event.result.output)}"
                )
            case TurnSuspended():
                waiting = [
                    f"approval of {p.tool_name} ({p.tool_call_id})"
                    for p in event.pending_permissions
                ]
                waiting += [
                    f"result of {a.tool_name} ({a.tool_call_id})" for a in event.pending_async_tools
                ]
                self._line(f"‖ suspended, awaiting {', '.join(waiting) or 'nothing'}")
            case TurnCompleted() | TurnFailed() | TurnCancelled():
                self.close()
            case _:
                pass  # step events: the completed call carries what they say


_DECIDED_BY = {
    "human": "by a human",
    "classifier": "by the permission classifier",
    "human_unavailable": "because no human was available to approve it",
}


def running_tools_note(state: TurnState, heartbeat_seconds: float = 30.0) -> str | None:
    """What a command that joins a turn mid-tool waits for, and for how long.

    A sync tool whose worker went away (Ctrl-C on the command that ran it) is
    only recorded as interrupted once Temporal misses its heartbeat; until
    then the turn is silent, so the command says so rather than nothing.
    """
    running = [
        t
        for t in state.tool_calls
        if t.execution == "sync" and t.invocation is not None and t.result is None
    ]
    if not running or state.terminal is not None:
        return None
    calls = ", ".join(f"{t.tool_name} ({t.tool_call_id})" for t in running)
    since = running[0].invocation.ts if running[0].invocation is not None else "?"
    return (
        f"… waiting for {calls}, running since {since}: if the process that ran it "
        f"stopped, it is recorded as interrupted once its heartbeat is missed "
        f"(within {heartbeat_seconds:g} s of the last one)"
    )


# ---------------------------------------------------------------- outcomes


def output_lines(output: dict[str, Any] | None) -> list[str]:
    """``turns show``'s lines for a structured answer (``turnview.structured_output``)."""
    if output is None:
        return []
    head = f"structured output ({output['schema']}"
    if output["valid"] is None:
        return [f"{head}): no answer yet"]
    tries = f", {output['answers']} answers" if output["answers"] > 1 else ""
    if output["valid"]:
        value = orjson.dumps(output["value"], option=orjson.OPT_INDENT_2).decode()
        return [f"{head}, valid{tries}):", *[f"  {line}" for line in visible(value).splitlines()]]
    return [
        f"{head}, invalid{tries}):",
        *[f"  - {visible(e)}" for e in output["errors"]],
    ]


def outcome_json(turn_id: str, outcome: TurnOutcome) -> dict[str, Any]:
    return {"turnId": turn_id, **outcome.to_wire()}


def continue_commands(
    turn_id: str, outcome: SuspendedOutcome, env: Mapping[str, str] | None = None
) -> list[tuple[str, list[str]]]:
    """For each pending item: a description and the exact commands that answer it."""
    out: list[tuple[str, list[str]]] = []
    for p in outcome.pending_permissions:
        request = p.request
        shown = request.get("input") if isinstance(request, dict) else request
        label = turnview.permission_label(p.tool_name, request)
        out.append(
            (
                f"approval: {label} ({p.tool_call_id}) {preview(shown, 100)}",
                [
                    command_line("approve", turn_id, p.tool_call_id, env=env),
                    command_line("deny", turn_id, p.tool_call_id, "--reason", "not now", env=env),
                ],
            )
        )
    for a in outcome.pending_async_tools:
        out.append(
            (
                f"result: {a.tool_name} ({a.tool_call_id}) {preview(a.input, 100)}",
                [
                    command_line(
                        "complete", turn_id, a.tool_call_id, "--text", "your answer", env=env
                    ),
                    command_line(
                        "progress", turn_id, a.tool_call_id, "--data", '{"percent": 50}', env=env
                    ),
                ],
            )
        )
    return out


def outcome_block(
    turn_id: str,
    outcome: TurnOutcome,
    env: Mapping[str, str] | None = None,
    shown: Collection[str] = (),
) -> list[str]:
    """The outcome's lines; an error in ``shown`` (printed above, as a model call's
    failure) is referred to rather than said twice."""
    usage = f"usage {usage_text(outcome.usage)}"
    match outcome:
        case CompletedOutcome():
            return [f"✔ completed · finish {outcome.finish_reason} · {usage} · turn {turn_id}"]
        case FailedOutcome():
            code = f" [{outcome.code}]" if outcome.code else ""
            error = "the model call's error above" if outcome.error in shown else outcome.error
            lines = [f"✗ failed{code}: {error} · {usage} · turn {turn_id}"]
            # imported here: the model package (httpx, adapters) stays out of quick commands
            from turncore.model.bridge import parse_failure_code

            if parse_failure_code(outcome.code) is not None:
                # The error already says what to check; a failed turn is final, so
                # the conversation goes on in a new turn that continues this one.
                lines.append(
                    "  once fixed, continue the conversation: "
                    + command_line("run", "--continue", turn_id, "PROMPT", env=env)
                )
            return lines
        case CancelledOutcome():
            why = f": {outcome.reason}" if outcome.reason else ""
            return [f"✗ cancelled{why} · {usage} · turn {turn_id}"]
        case SuspendedOutcome():
            lines = [f"‖ suspended · {usage} · turn {turn_id}", "  waiting for:"]
            for what, commands in continue_commands(turn_id, outcome, env):
                lines.append(f"  - {what}")
                lines += [f"      {c}" for c in commands]
            lines.append(f"  or give up: {command_line('cancel', turn_id, env=env)}")
            return lines


# ---------------------------------------------------------------- transcript


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines()) or prefix


def _user_text(message: UserMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    bits = [p.text if isinstance(p, TextPart) else f"[{describe_part(p)}]" for p in message.content]
    return "\n".join(bits)


def _tool_lines(t: ToolCallState, ended: bool = False) -> list[str]:
    """One tool call's lines; ``ended``: the turn has ended, so nothing still awaits."""
    kind = t.execution or "not run"
    lines = [f"  ▸ tool {t.tool_name} ({t.tool_call_id}) · {kind}"]
    lines.append(f"      input       {preview(t.input, 300)}")
    p = t.permission
    if p is None:
        lines.append("      permission  not required")
    else:
        text = "required"
        if p.required.checker_error:
            text += f" (checker failed: {clip(p.required.checker_error, 80)})"
        if p.classification is not None:
            text += (
                f" · classifier {p.classification.decision} ({clip(p.classification.reason, 60)})"
            )
        if p.resolved is not None:
            by = p.resolved.source.replace("_", " ")
            text += f" · {'allowed' if p.resolved.decision == 'allow' else 'denied'} by {by}"
            who = decided_text(p.resolved.metadata)
            if who:
                text += f" [{who}]"
            if p.resolved.reason:
                text += f": {clip(p.resolved.reason, 80)}"
        elif ended or t.result is not None:
            text += " · never decided (the turn ended first)"
        else:
            text += " · awaiting a decision"
        lines.append(f"      permission  {text}")
    for progress in t.progress:
        lines.append(f"      progress    {preview(progress.progress, 200)} ({progress.source})")
    if t.result is not None:
        r = t.result
        status = "error" if r.result.is_error else "ok"
        lines.append(f"      result      {status} ({r.source}): {preview(r.result.output, 400)}")
        who = decided_text(r.result.metadata) if r.source == "async" else None
        if who:
            lines.append(f"      answered    {who}")
    elif t.invocation is not None and t.invocation.execution == "async":
        lines.append("      result      awaiting the external result")
    else:
        lines.append("      result      none yet")
    return lines


def transcript(state: TurnState, env: Mapping[str, str] | None = None) -> str:
    """``turns show``: the turn's messages, tool calls and outcome, in order."""
    d = state.definition
    resolved = d.agent.resolved
    status = _status(state)
    c = d.config
    lines = [
        f"turn {d.turn_id} · {status}",
        f"  agent {resolved.agent_id} · model {resolved.model.label()} · "
        f"session {d.session_id or '-'} · created {d.ts}",
        f"  autoPermission={str(c.auto_permission).lower()} "
        f"humanAvailable={str(c.human_available).lower()} maxModelCalls={c.max_model_calls}"
        + (f" reasoningEffort={c.reasoning_effort}" if c.reasoning_effort else ""),
    ]
    if isinstance(d.context, list):
        if d.context:
            lines.append(f"  context: {len(d.context)} earlier message(s), not shown")
    else:
        lines.append(f"  context: continues turn {d.context.previous_turn_id}")
    lines += ["", "user", _indent(_user_text(d.input))]
    for call in state.model_calls:
        head = f"assistant · model call {call.index}"
        if call.response is not None:
            usage = usage_text(call.usage) if call.usage is not None else "none"
            head += f" · finish {call.finish_reason} · usage {usage}"
        elif call.error is not None:
            head += " · failed"
        else:
            head += " · no outcome recorded"
        lines += ["", head]
        if call.error is not None:
            lines.append(f"  ✗ {call.error}")
        if call.response is not None:
            content = call.response.content
            parts = [TextPart(text=content)] if isinstance(content, str) else content
            for part in parts:
                if isinstance(part, ReasoningPart):
                    lines.append(_indent(part.text, "  (thinking) "))
                elif isinstance(part, TextPart):
                    lines.append(_indent(part.text))
                elif isinstance(part, ToolCallPart):
                    t = state.tool_call(part.tool_call_id)
                    if t is not None:
                        lines += _tool_lines(t, ended=state.terminal is not None)
                else:
                    lines.append(f"  [{describe_part(part)}]")
    lines.append("")
    terminal = state.terminal
    if isinstance(terminal, TurnCompleted):
        lines.append(f"outcome  completed · finish {terminal.finish_reason}")
    elif isinstance(terminal, TurnFailed):
        code = f" [{terminal.code}]" if terminal.code else ""
        said = any(call.error == terminal.error for call in state.model_calls)
        error = "the model call's error above" if said else terminal.error
        lines.append(f"outcome  failed{code}: {error}")
    elif isinstance(terminal, TurnCancelled):
        lines.append(f"outcome  cancelled{': ' + terminal.reason if terminal.reason else ''}")
    elif state.suspension is not None:
        s = state.suspension
        outcome = SuspendedOutcome(
            pending_permissions=s.pending_permissions,
            pending_async_tools=s.pending_async_tools,
            usage=s.usage,
        )
        lines.append("outcome  suspended, waiting for:")
        for what, commands in continue_commands(d.turn_id, outcome, env):
            lines.append(f"  - {what}")
            lines += [f"      {c}" for c in commands]
    else:
        lines.append("outcome  none recorded yet (in progress, or interrupted: `turns recover`)")
    lines.append(f"usage    {usage_text(state.usage)}")
    return "\n".join(lines)


def _status(state: TurnState) -> str:
    status = turnview.status_of(state)
    return "in progress" if status == "running" else status


def status_of(state: TurnState) -> str:
    """completed | failed | cancelled | suspended | in-progress (from the file alone)."""
    return _status(state).replace(" ", "-")


__all__ = [
    "StreamRenderer",
    "continue_commands",
    "outcome_block",
    "outcome_json",
    "preview",
    "status_of",
    "transcript",
]
