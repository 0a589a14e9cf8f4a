"""The one reducer: durable events in, ``TurnState`` out (spec §14, §24).

Theory of operation
-------------------
A turn log is a strict sequence: ``turn_created``; then rounds of one model
call (requested → step events → completed | failed) followed by the tool batch
of a completed response (permission records, invocations, progress, results in
any physical order); suspension snapshots whenever work waits on the outside;
and at most one terminal event, after which nothing may follow.

``TurnReducer`` folds events one at a time. ``apply`` first *checks* the event
against every invariant that concerns it and only then *mutates*, so an illegal
event raises ``CorruptTurnError`` naming the broken rule and leaves the reducer
exactly as it was (the repository's append gate relies on this). Folding is
linear in the number of events. ``reduce_turn`` is the one-liner fold that
also reports the 1-based line of the offending event.

The reducer never resolves context references, never reads clocks, and never
infers that a turn is running (§14.3): liveness is not durable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._wire import Opt, WireModel
from .errors import CorruptTurnError
from .events import (
    SCHEMA_VERSION,
    ContextRef,
    DurableLlmStepStreamEvent,
    InheritedAgentSnapshot,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallRequested,
    ModelRequest,
    ModelStepEvent,
    PendingAsyncTool,
    PendingPermission,
    ResolvedAgent,
    StepFinish,
    TerminalEvent,
    ToolDescriptor,
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
    TurnEvent,
    TurnFailed,
    TurnSuspended,
    TurnUsage,
)
from .jsonvalue import JsonValue
from .messages import AssistantMessage, ToolCallPart

# ---------------------------------------------------------------- the §14.2 projection


class PermissionState(WireModel):
    required: ToolPermissionRequired
    classification: Opt[ToolPermissionClassified] = None
    classification_failed: Opt[ToolPermissionClassificationFailed] = None
    """Set when the classifier failed or omitted this call: it is treated as defer."""
    resolved: Opt[ToolPermissionResolved] = None


class ModelCallState(WireModel):
    index: int
    request: ModelRequest
    step_events: list[DurableLlmStepStreamEvent]
    response: Opt[AssistantMessage] = None
    finish_reason: Opt[str] = None
    usage: Opt[TurnUsage] = None
    error: Opt[str] = None


class ToolCallState(WireModel):
    model_call_index: int
    order: int
    tool_call_id: str
    tool_id: Opt[str] = None
    tool_name: str
    input: JsonValue
    execution: Opt[Literal["sync", "async"]] = None
    permission: Opt[PermissionState] = None
    invocation: Opt[ToolInvocationRequested] = None
    progress: list[ToolProgress]
    result: Opt[ToolResult] = None


class TurnState(WireModel):
    """Everything durable about a turn, and nothing about whether it is running."""

    definition: TurnCreated
    model_calls: list[ModelCallState]
    tool_calls: list[ToolCallState]
    suspension: Opt[TurnSuspended] = None
    terminal: Opt[TerminalEvent] = None
    usage: TurnUsage

    # Derived views used by the runtime and by surfaces. They read the state;
    # they never add to it.

    def open_model_call(self) -> ModelCallState | None:
        if self.model_calls and _is_open(self.model_calls[-1]):
            return self.model_calls[-1]
        return None

    def unresolved_tool_calls(self) -> list[ToolCallState]:
        return [t for t in self.tool_calls if t.result is None]

    def pending_permissions(self) -> list[PendingPermission]:
        return [
            PendingPermission(
                tool_call_id=t.tool_call_id,
                tool_name=t.tool_name,
                request=t.permission.required.request,
            )
            for t in self.tool_calls
            if t.result is None
            and t.permission is not None
            and t.permission.resolved is None
            and _awaits_human(t.permission, self.definition.config.auto_permission)
        ]

    def pending_async_tools(self) -> list[PendingAsyncTool]:
        return [
            PendingAsyncTool(
                tool_call_id=t.tool_call_id,
                tool_id=t.invocation.tool_id,
                tool_name=t.tool_name,
                input=t.invocation.input,
            )
            for t in self.tool_calls
            if t.result is None and t.invocation is not None and t.invocation.execution == "async"
        ]

    def tool_call(
        self, tool_call_id: str, model_call_index: int | None = None
    ) -> ToolCallState | None:
        """The newest call with this id, or the one from model call ``model_call_index``.

        Ids are unique within one response only (§24); a model may reuse one
        in a later response. Every record and input that names an id refers
        to the newest call with it, which is the only one that can be open.
        """
        for t in reversed(self.tool_calls):
            if t.tool_call_id == tool_call_id and (
                model_call_index is None or t.model_call_index == model_call_index
            ):
                return t
        return None


def _is_open(call: ModelCallState) -> bool:
    return call.response is None and call.error is None


def _awaits_human(permission: PermissionState, auto: bool) -> bool:
    """Whether an unresolved required permission waits on a human now (§9.3).

    Without ``autoPermission``: always. With it: once the classifier deferred
    or failed, or when the checker failed (never classified). Before the
    classifier has spoken the runtime still owns the decision, so the
    suspension snapshot lists only what a human must answer.
    """
    return (
        _human_wait_reason(
            auto,
            permission.required.checker_error is not None,
            permission.classification,
            permission.classification_failed is not None,
        )
        is None
    )


def _human_wait_reason(
    auto: bool,
    checker_failed: bool,
    classification: ToolPermissionClassified | None,
    classification_failed: bool,
) -> str | None:
    """None if the permission waits on a human; else why not (one rule for state and fold)."""
    if not auto or checker_failed or classification_failed:
        return None
    if classification is None:
        return "the classifier has not decided it yet"
    if classification.decision != "defer":
        return f"the classifier decided {classification.decision}"
    return None


# ---------------------------------------------------------------- internal fold state


@dataclass(slots=True)
class _ModelCall:
    event: ModelCallRequested
    steps: list[DurableLlmStepStreamEvent] = field(default_factory=list)
    completed: ModelCallCompleted | None = None
    failed: ModelCallFailed | None = None

    @property
    def open(self) -> bool:
        return self.completed is None and self.failed is None


@dataclass(slots=True)
class _ToolCall:
    model_call_index: int
    order: int
    tool_call_id: str
    tool_name: str
    input: JsonValue
    descriptor: ToolDescriptor | None
    required: ToolPermissionRequired | None = None
    classification: ToolPermissionClassified | None = None
    classification_failed: ToolPermissionClassificationFailed | None = None
    resolved: ToolPermissionResolved | None = None
    invocation: ToolInvocationRequested | None = None
    progress: list[ToolProgress] = field(default_factory=list)
    result: ToolResult | None = None

    @property
    def execution(self) -> Literal["sync", "async"] | None:
        if self.invocation is not None:
            return self.invocation.execution
        return self.descriptor.execution if self.descriptor is not None else None


_Totals = tuple[int | None, int | None, int | None, int | None, int | None]


def _plus(a: int | None, b: int | None) -> int | None:
    """``TurnUsage.__add__`` for one counter: a counter nobody reported stays absent."""
    if a is None:
        return b
    return a if b is None else a + b


def _corrupt(rule: str) -> CorruptTurnError:
    return CorruptTurnError(rule)


def _at_least(usage: TurnUsage, aggregate: TurnUsage, kind: str) -> None:
    """``turn_failed``/``turn_cancelled`` usage covers the aggregate of completed calls.

    It may exceed it: a call that failed or was cancelled after the provider
    accepted it can have reported usage that no completed call carries.
    """
    for name in TurnUsage.model_fields:
        known, said = getattr(aggregate, name), getattr(usage, name)
        if known is not None and (said is None or said < known):
            raise _corrupt(
                f"{kind}.usage is less than the turn's aggregate usage ({name} {said} < {known})"
            )


def _tool_calls(message: AssistantMessage) -> list[ToolCallPart]:
    """``message.tool_calls()``, selected by the parts' ``type`` tag.

    Same parts (the tag is what the union dispatched on), without an
    ``isinstance`` per part, which runs Python code for pydantic classes.
    """
    content = message.content
    if isinstance(content, str):
        return []
    return [p for p in content if p.type == "tool-call"]


def _reported_usage(steps: Sequence[DurableLlmStepStreamEvent]) -> TurnUsage | None:
    """The usage of a failed call: its last ``finish-step``, if the provider
    reported any before the call broke (see docs/file-format.md, usage)."""
    for step in reversed(steps):
        if isinstance(step, StepFinish):
            return step.usage
    return None


class TurnReducer:
    """Incremental, linear fold of a turn log. ``apply`` checks, then mutates."""

    __slots__ = (
        "_created",
        "_tools_by_name",
        "_model_calls",
        "_tool_calls",
        "_tool_by_id",
        "_unresolved",
        "_suspension",
        "_terminal",
        "_totals",
        "_usage",
        "_count",
        "_state",
    )

    def __init__(self) -> None:
        self._created: TurnCreated | None = None
        self._tools_by_name: dict[str, ToolDescriptor] | None = None
        self._model_calls: list[_ModelCall] = []
        self._tool_calls: list[_ToolCall] = []
        self._tool_by_id: dict[str, _ToolCall] = {}
        # The tool calls without a terminal result, in source order. Only the
        # latest completed model call's batch can have any (a model call may
        # not start before the previous batch is resolved), so every check
        # that asks "what is still open" is O(batch), not O(turn).
        self._unresolved: dict[str, _ToolCall] = {}
        self._suspension: TurnSuspended | None = None
        self._terminal: TerminalEvent | None = None
        # The aggregate usage as plain counters (summed per completion without
        # building a model), and the TurnUsage of them, built when asked for.
        self._totals: _Totals = (None, None, None, None, None)
        self._usage: TurnUsage | None = TurnUsage()
        self._count = 0
        self._state: TurnState | None = None

    # -- public -------------------------------------------------------------

    @classmethod
    def of(cls, events: Iterable[TurnEvent]) -> TurnReducer:
        """Fold ``events``; a violation raises with the 1-based line of the offending event."""
        reducer = cls()
        for line, event in enumerate(events, start=1):
            try:
                reducer.apply(event)
            except CorruptTurnError as exc:
                raise CorruptTurnError(exc.rule, line=line) from None
        return reducer

    @property
    def event_count(self) -> int:
        return self._count

    @property
    def started(self) -> bool:
        return self._created is not None

    @property
    def state(self) -> TurnState:
        if self._created is None:
            raise _corrupt("the turn has no turn_created event")
        if self._state is None:
            self._state = self._project(self._created)
        return self._state

    def copy(self) -> TurnReducer:
        """An independent reducer at the same point (for trial appends)."""
        other = TurnReducer()
        other._created = self._created
        other._tools_by_name = self._tools_by_name
        other._model_calls = [
            _ModelCall(m.event, list(m.steps), m.completed, m.failed) for m in self._model_calls
        ]
        other._tool_calls = [
            _ToolCall(
                t.model_call_index,
                t.order,
                t.tool_call_id,
                t.tool_name,
                t.input,
                t.descriptor,
                t.required,
                t.classification,
                t.classification_failed,
                t.resolved,
                t.invocation,
                list(t.progress),
                t.result,
            )
            for t in self._tool_calls
        ]
        other._tool_by_id = {t.tool_call_id: t for t in other._tool_calls}
        other._unresolved = {i: other._tool_by_id[i] for i in self._unresolved}
        other._suspension = self._suspension
        other._terminal = self._terminal
        other._totals = self._totals
        other._usage = self._usage
        other._count = self._count
        other._state = self._state
        return other

    def apply(self, event: TurnEvent) -> None:
        """Check ``event`` against every invariant, then fold it in.

        Raises ``CorruptTurnError`` (without a line) and leaves the reducer
        unchanged if the event is impossible here.
        """
        created = self._created
        if created is None:
            if not isinstance(event, TurnCreated):
                raise _corrupt(f"the first event must be turn_created, not {event.type}")
            self._check_created(event)
            self._created = event
            resolved = event.agent.resolved
            if isinstance(resolved, ResolvedAgent):
                self._tools_by_name = {t.name: t for t in resolved.tools}
            self._commit(event)
            return
        if event.turn_id != created.turn_id:
            raise _corrupt(
                f"{event.type} has turnId {event.turn_id!r}, not this turn's {created.turn_id!r}"
            )
        if self._terminal is not None:
            raise _corrupt(f"{event.type} follows the terminal event {self._terminal.type}")

        handler = _HANDLERS.get(type(event)) or _handler_for(event)
        handler(self, event)
        self._count += 1
        self._state = None
        # A snapshot describes the moment it was taken; any later fact
        # invalidates it (§11.1, §27.2).
        self._suspension = (
            event if handler is _ON_SUSPENDED and isinstance(event, TurnSuspended) else None
        )

    # -- bookkeeping --------------------------------------------------------

    def _add_usage(self, u: TurnUsage) -> None:
        totals = self._totals
        self._totals = (
            _plus(totals[0], u.input_tokens),
            _plus(totals[1], u.output_tokens),
            _plus(totals[2], u.total_tokens),
            _plus(totals[3], u.reasoning_tokens),
            _plus(totals[4], u.cached_input_tokens),
        )
        self._usage = None

    def _aggregate(self) -> TurnUsage:
        """The turn's usage: the sum of its completed calls' (§8.2)."""
        if self._usage is None:
            i, o, t, r, c = self._totals
            self._usage = TurnUsage(
                input_tokens=i,
                output_tokens=o,
                total_tokens=t,
                reasoning_tokens=r,
                cached_input_tokens=c,
            )
        return self._usage

    def _commit(self, event: TurnCreated) -> None:
        self._count += 1
        self._state = None
        self._suspension = None

    def _check_created(self, event: TurnCreated) -> None:
        if event.schema_version != SCHEMA_VERSION:
            raise _corrupt(f"unsupported schemaVersion {event.schema_version}")
        resolved = event.agent.resolved
        if isinstance(resolved, InheritedAgentSnapshot):
            context = event.context
            if (
                not isinstance(context, ContextRef)
                or context.previous_turn_id != resolved.inherited_from
            ):
                raise _corrupt(
                    "an inherited agent snapshot must inherit from the turn's context.previousTurnId"
                )

    # -- per-event handlers (the dispatch table below maps event classes to these)

    def _on_created_again(self, event: TurnCreated) -> None:
        raise _corrupt("a turn has exactly one turn_created event")

    def _on_step(self, event: ModelStepEvent) -> None:
        calls, index = self._model_calls, event.model_call_index
        call = calls[index] if index < len(calls) else None
        if call is None or call.completed is not None or call.failed is not None:
            call = self._open_call(index, event.type)  # raises
        call.steps.append(event.event)

    def _on_model_failed(self, event: ModelCallFailed) -> None:
        call = self._open_call(event.model_call_index, event.type)
        call.failed = event
        # Tokens an accepted attempt used before it broke are still spent: the
        # provider's last report rides a finish-step of the failed call.
        reported = _reported_usage(call.steps)
        if reported is not None:
            self._add_usage(reported)

    def _on_failed_or_cancelled(self, event: TurnFailed | TurnCancelled) -> None:
        self._check_settled(event.type)
        last = self._model_calls[-1] if self._model_calls else None
        if (
            last is not None
            and last.completed is not None
            and not _tool_calls(last.completed.message)
        ):
            # §18 10.l: the loop completes as soon as such a response is recorded;
            # no failure or cancellation can come between (§22 cancels open work only).
            raise _corrupt(
                f"{event.type} after model call {len(self._model_calls) - 1}'s final response: "
                "a response without tool calls completes the turn"
            )
        _at_least(event.usage, self._aggregate(), event.type)
        self._terminal = event

    # -- model calls --------------------------------------------------------

    def _open_call(self, index: int, kind: str) -> _ModelCall:
        if index >= len(self._model_calls):
            raise _corrupt(f"{kind} for model call {index}, which was never requested")
        call = self._model_calls[index]
        if call.completed is not None or call.failed is not None:
            done = "completed" if call.completed is not None else "failed"
            raise _corrupt(f"{kind} for model call {index}, which already {done}")
        return call

    def _on_model_requested(self, event: ModelCallRequested) -> None:
        created = self._created
        assert created is not None  # apply() folds turn_created first
        index = event.model_call_index
        expected = len(self._model_calls)
        if index != expected:
            raise _corrupt(
                f"model call index {index} is out of order; the next index is {expected}"
            )
        if self._model_calls and self._model_calls[-1].open:
            raise _corrupt(
                f"model call {index} was requested while model call {index - 1} is unresolved"
            )
        if index >= created.config.max_model_calls:
            raise _corrupt(
                f"model call {index} exceeds maxModelCalls={created.config.max_model_calls}"
            )
        if self._unresolved:
            raise _corrupt(
                f"model call {index} was requested before tool calls "
                f"{list(self._unresolved)} have results"
            )
        self._check_request_refs(created, index, event.request)
        self._model_calls.append(_ModelCall(event))

    def _check_request_refs(self, created: TurnCreated, index: int, request: ModelRequest) -> None:
        if index == 0:
            context = created.context
            if isinstance(context, ContextRef):
                if request.context_ref != context:
                    raise _corrupt(
                        "model call 0 contextRef does not match the turn's context reference"
                    )
                expected = ["input"]
            else:
                if request.context_ref is not None:
                    raise _corrupt("model call 0 has a contextRef but the turn's context is inline")
                expected = ["context", "input"] if context else ["input"]
        else:
            if request.context_ref is not None:
                raise _corrupt(f"model call {index} has a contextRef; only call 0 may")
            previous = self._model_calls[index - 1]
            if previous.completed is not None:
                calls = _tool_calls(previous.completed.message)
                if not calls:
                    raise _corrupt(
                        f"model call {index} follows a response without tool calls, "
                        "which completes the turn"
                    )
                expected = [f"assistant:{index - 1}"] + [
                    f"toolResult:{c.tool_call_id}" for c in calls
                ]
            else:
                expected = []
        if request.messages != expected:
            raise _corrupt(
                f"model call {index} references {request.messages} "
                f"but the transcript requires {expected} (tool results in call order)"
            )

    def _on_model_completed(self, event: ModelCallCompleted) -> None:
        call = self._open_call(event.model_call_index, event.type)
        new_calls: list[_ToolCall] = []
        seen: set[str] = set()
        for order, part in enumerate(_tool_calls(event.message)):
            if part.tool_call_id in seen:
                raise _corrupt(
                    f"tool-call id {part.tool_call_id!r} appears twice in model call "
                    f"{event.model_call_index}'s response"
                )
            seen.add(part.tool_call_id)
            descriptor = self._tools_by_name.get(part.tool_name) if self._tools_by_name else None
            new_calls.append(
                _ToolCall(
                    event.model_call_index,
                    order,
                    part.tool_call_id,
                    part.tool_name,
                    part.input,
                    descriptor,
                )
            )
        call.completed = event
        self._add_usage(event.usage)
        for t in new_calls:
            self._tool_calls.append(t)
            # An id reused from an earlier response (§24 forbids duplicates
            # within one response only) now names this call: the earlier one
            # is settled, since no model call starts before its batch is.
            self._tool_by_id[t.tool_call_id] = t
            self._unresolved[t.tool_call_id] = t

    # -- permissions --------------------------------------------------------

    def _target(self, tool_call_id: str, kind: str) -> _ToolCall:
        call = self._tool_by_id.get(tool_call_id)
        if call is None:
            raise _corrupt(f"{kind} targets unknown tool call {tool_call_id!r}")
        if call.result is not None:
            raise _corrupt(f"{kind} for tool call {tool_call_id!r} after its terminal result")
        return call

    def _on_permission_required(self, event: ToolPermissionRequired) -> None:
        call = self._target(event.tool_call_id, event.type)
        if call.required is not None:
            raise _corrupt(f"permission for tool call {event.tool_call_id!r} was already required")
        if call.invocation is not None:
            raise _corrupt(
                f"permission for tool call {event.tool_call_id!r} was required after its invocation"
            )
        if event.tool_name != call.tool_name:
            raise _corrupt(
                f"tool_permission_required names {event.tool_name!r} but tool call "
                f"{event.tool_call_id!r} is {call.tool_name!r}"
            )
        call.required = event

    def _needs_open_permission(self, call: _ToolCall, kind: str) -> None:
        if call.required is None:
            raise _corrupt(
                f"{kind} for tool call {call.tool_call_id!r}, which required no permission"
            )
        if call.resolved is not None:
            raise _corrupt(
                f"{kind} for tool call {call.tool_call_id!r} after its permission was resolved"
            )

    def _human_wait(self, call: _ToolCall) -> str | None:
        """None if the permission now waits on a human (§9.3); else why it does not.

        Without ``autoPermission`` every required permission asks a human. With
        it, only a classifier ``defer``, a classification failure or a checker
        error (which is never classified) reach one; an ``allow`` or ``deny``
        is the classifier's, and before it speaks nothing waits on a human.
        """
        assert self._created is not None and call.required is not None
        return _human_wait_reason(
            self._created.config.auto_permission,
            call.required.checker_error is not None,
            call.classification,
            call.classification_failed is not None,
        )

    def _never_classified(self, call: _ToolCall, kind: str) -> None:
        if call.required is not None and call.required.checker_error is not None:
            raise _corrupt(
                f"{kind} for tool call {call.tool_call_id!r}, whose permission checker failed: "
                "it asks a human and is never classified (§9.3)"
            )

    def _needs_auto_permission(self, kind: str) -> None:
        assert self._created is not None
        if not self._created.config.auto_permission:
            raise _corrupt(f"{kind} in a turn without autoPermission: no classifier may run")

    def _on_permission_classified(self, event: ToolPermissionClassified) -> None:
        call = self._target(event.tool_call_id, event.type)
        self._needs_open_permission(call, event.type)
        self._needs_auto_permission(event.type)
        if call.classification is not None or call.classification_failed is not None:
            raise _corrupt(f"tool call {event.tool_call_id!r} was classified twice")
        self._never_classified(call, event.type)
        call.classification = event

    def _on_classification_failed(self, event: ToolPermissionClassificationFailed) -> None:
        if not event.tool_call_ids:
            raise _corrupt("tool_permission_classification_failed names no tool call")
        if len(set(event.tool_call_ids)) != len(event.tool_call_ids):
            raise _corrupt("tool_permission_classification_failed lists a tool call twice")
        targets = [self._target(i, event.type) for i in event.tool_call_ids]
        for call in targets:
            self._needs_open_permission(call, event.type)
            if call.classification is not None or call.classification_failed is not None:
                raise _corrupt(f"tool call {call.tool_call_id!r} was classified twice")
            self._never_classified(call, event.type)
        self._needs_auto_permission(event.type)
        for call in targets:
            call.classification_failed = event

    def _on_permission_resolved(self, event: ToolPermissionResolved) -> None:
        call = self._target(event.tool_call_id, event.type)
        if call.resolved is not None:
            raise _corrupt(
                f"conflicting permission decisions for tool call {event.tool_call_id!r}: "
                f"already resolved {call.resolved.decision}"
            )
        self._needs_open_permission(call, event.type)
        assert self._created is not None
        human = self._created.config.human_available
        if event.source == "classifier":
            c = call.classification
            if c is None or c.decision != event.decision:
                said = c.decision if c is not None else "nothing"
                raise _corrupt(
                    f"a classifier {event.decision} for tool call {event.tool_call_id!r}, "
                    f"whose classification said {said}"
                )
        elif event.source == "human" and not human:
            raise _corrupt(
                f"a human decision for tool call {event.tool_call_id!r} in a turn without a human"
            )
        elif event.source == "human_unavailable" and human:
            raise _corrupt(
                f"tool call {event.tool_call_id!r} resolved as human_unavailable in a turn with a human"
            )
        if event.source != "classifier":
            waits = self._human_wait(call)
            if waits is not None:
                raise _corrupt(
                    f"a {event.source} decision for tool call {event.tool_call_id!r}, "
                    f"which is not awaiting a human: {waits}"
                )
        call.resolved = event

    # -- tools --------------------------------------------------------------

    def _on_invocation(self, event: ToolInvocationRequested) -> None:
        call = self._target(event.tool_call_id, event.type)
        if call.invocation is not None:
            raise _corrupt(f"tool call {event.tool_call_id!r} was invoked twice")
        if call.required is not None and (
            call.resolved is None or call.resolved.decision != "allow"
        ):
            raise _corrupt(
                f"tool call {event.tool_call_id!r} was invoked without an allow decision"
            )
        if event.tool_name != call.tool_name:
            raise _corrupt(
                f"invocation names tool {event.tool_name!r} but the model called {call.tool_name!r}"
            )
        if event.input != call.input:
            raise _corrupt(
                f"invocation input for tool call {event.tool_call_id!r} differs from the model's"
            )
        d = call.descriptor
        if d is not None and (d.tool_id != event.tool_id or d.execution != event.execution):
            raise _corrupt(
                f"invocation of {event.tool_name!r} as {event.tool_id}/{event.execution} "
                f"contradicts the turn's tool snapshot {d.tool_id}/{d.execution}"
            )
        if d is None and self._tools_by_name is not None:
            raise _corrupt(
                f"invocation of {event.tool_name!r}, which is not in the turn's tool set"
            )
        call.invocation = event

    def _on_progress(self, event: ToolProgress) -> None:
        # An unresolved call is a known one without a result: ``_target``'s
        # checks, which raise the precise error when the lookup misses.
        call = self._unresolved.get(event.tool_call_id) or self._target(
            event.tool_call_id, event.type
        )
        if call.invocation is None:
            raise _corrupt(
                f"progress for tool call {event.tool_call_id!r}, which was never invoked"
            )
        if call.invocation.execution != event.source:
            raise _corrupt(
                f"{event.source} progress for {call.invocation.execution} tool call "
                f"{event.tool_call_id!r}"
            )
        if event.source == "async":
            self._human_present_for(call, event.type)
        call.progress.append(event)

    def _on_result(self, event: ToolResult) -> None:
        call = self._tool_by_id.get(event.tool_call_id)
        if call is None:
            raise _corrupt(f"tool_result targets unknown tool call {event.tool_call_id!r}")
        if call.result is not None:
            raise _corrupt(f"duplicate terminal result for tool call {event.tool_call_id!r}")
        if event.tool_name != call.tool_name:
            raise _corrupt(
                f"tool_result names {event.tool_name!r} but tool call "
                f"{event.tool_call_id!r} is {call.tool_name!r}"
            )
        if event.source == "runtime" and not event.result.is_error:
            raise _corrupt(
                f"runtime result for tool call {event.tool_call_id!r} has isError false; "
                "a runtime result must be an error (§10.3)"
            )
        if event.source == "async":
            self._human_present_for(call, event.type)
        if event.source != "runtime":
            if call.invocation is None:
                raise _corrupt(
                    f"{event.source} result for tool call {event.tool_call_id!r}, "
                    "which was never invoked"
                )
            if call.invocation.execution != event.source:
                raise _corrupt(
                    f"{event.source} result for {call.invocation.execution} tool call "
                    f"{event.tool_call_id!r}"
                )
        call.result = event
        del self._unresolved[event.tool_call_id]

    def _human_present_for(self, call: _ToolCall, kind: str) -> None:
        """§10.2: a human-only tool in a turn without a human gets a runtime error at
        once, so nothing may wait on it or answer it from outside."""
        assert self._created is not None
        d = call.descriptor
        if d is not None and d.requires_human and not self._created.config.human_available:
            raise _corrupt(
                f"{kind} for tool call {call.tool_call_id!r}: {call.tool_name} needs a human and "
                "this turn has none, so it gets an immediate runtime error (§10.2)"
            )

    # -- settle points ------------------------------------------------------

    def _check_settled(self, kind: str) -> None:
        if self._model_calls and self._model_calls[-1].open:
            raise _corrupt(f"{kind} while model call {len(self._model_calls) - 1} is unresolved")
        if self._unresolved:
            raise _corrupt(
                f"{kind} while tool calls {list(self._unresolved)} lack terminal results"
            )

    def _on_suspended(self, event: TurnSuspended) -> None:
        if self._suspension is not None:
            # §11.1: advancing a suspended turn without input appends nothing;
            # a new snapshot follows a valid input. Back to back is a duplicate.
            raise _corrupt(
                "turn_suspended directly follows another turn_suspended; a new snapshot "
                "is appended only after something changed (§11.1)"
            )
        if self._model_calls and self._model_calls[-1].open:
            raise _corrupt("turn_suspended while a model call is unresolved")
        # Compare against what is actually pending (same rule as TurnState's views).
        want_perm = {
            t.tool_call_id
            for t in self._unresolved.values()
            if t.required is not None and t.resolved is None and self._human_wait(t) is None
        }
        want_async = {
            t.tool_call_id
            for t in self._unresolved.values()
            if t.invocation is not None and t.invocation.execution == "async"
        }
        got_perm = [p.tool_call_id for p in event.pending_permissions]
        got_async = [p.tool_call_id for p in event.pending_async_tools]
        if set(got_perm) != want_perm or len(got_perm) != len(want_perm):
            raise _corrupt(
                f"turn_suspended lists pending permissions {sorted(got_perm)} "
                f"but {sorted(want_perm)} are pending"
            )
        if set(got_async) != want_async or len(got_async) != len(want_async):
            raise _corrupt(
                f"turn_suspended lists pending async tools {sorted(got_async)} "
                f"but {sorted(want_async)} are pending"
            )
        if not want_perm and not want_async:
            raise _corrupt("turn_suspended with no pending permission or async tool")
        for i in want_async:
            self._human_present_for(self._tool_by_id[i], event.type)
        if event.usage != self._aggregate():
            raise _corrupt("turn_suspended.usage differs from the turn's aggregate usage")
        # The snapshot is what callers answer from, so each entry must describe
        # the pending work exactly, not just name it.
        for p in event.pending_permissions:
            t = self._tool_by_id[p.tool_call_id]
            if t.required is None or (p.tool_name, p.request) != (t.tool_name, t.required.request):
                raise _corrupt(
                    f"turn_suspended misdescribes the pending permission of tool call "
                    f"{p.tool_call_id!r}"
                )
        for a in event.pending_async_tools:
            inv = self._tool_by_id[a.tool_call_id].invocation
            if inv is None or (a.tool_id, a.tool_name, a.input) != (
                inv.tool_id,
                inv.tool_name,
                inv.input,
            ):
                raise _corrupt(
                    f"turn_suspended misdescribes the pending async tool call {a.tool_call_id!r}"
                )

    def _on_completed(self, event: TurnCompleted) -> None:
        self._check_settled(event.type)
        last = self._model_calls[-1] if self._model_calls else None
        if last is None or last.completed is None:
            raise _corrupt("turn_completed without a completed final model call")
        if _tool_calls(last.completed.message):
            raise _corrupt("turn_completed after a response that called tools")
        if event.output != last.completed.message:
            raise _corrupt("turn_completed.output differs from the final model response")
        if event.finish_reason != last.completed.finish_reason:
            raise _corrupt(
                f"turn_completed.finishReason {event.finish_reason!r} differs from the final "
                f"model response's {last.completed.finish_reason!r}"
            )
        if event.usage != self._aggregate():
            raise _corrupt("turn_completed.usage differs from the turn's aggregate usage")
        self._terminal = event

    # -- projection ---------------------------------------------------------

    def _project(self, created: TurnCreated) -> TurnState:
        model_calls = [
            ModelCallState.model_construct(
                index=m.event.model_call_index,
                request=m.event.request,
                step_events=list(m.steps),
                response=m.completed.message if m.completed else None,
                finish_reason=m.completed.finish_reason if m.completed else None,
                usage=(
                    m.completed.usage
                    if m.completed
                    else (_reported_usage(m.steps) if m.failed else None)
                ),
                error=m.failed.error if m.failed else None,
            )
            for m in self._model_calls
        ]
        tool_calls = [
            ToolCallState.model_construct(
                model_call_index=t.model_call_index,
                order=t.order,
                tool_call_id=t.tool_call_id,
                tool_id=(
                    t.invocation.tool_id
                    if t.invocation
                    else (t.descriptor.tool_id if t.descriptor else None)
                ),
                tool_name=t.tool_name,
                input=t.input,
                execution=t.execution,
                permission=(
                    PermissionState.model_construct(
                        required=t.required,
                        classification=t.classification,
                        classification_failed=t.classification_failed,
                        resolved=t.resolved,
                    )
                    if t.required is not None
                    else None
                ),
                invocation=t.invocation,
                progress=list(t.progress),
                result=t.result,
            )
            for t in self._tool_calls
        ]
        return TurnState.model_construct(
            definition=created,
            model_calls=model_calls,
            tool_calls=tool_calls,
            suspension=self._suspension,
            terminal=self._terminal,
            usage=self._aggregate(),
        )


_Handler = Callable[[TurnReducer, Any], None]

_HANDLERS: dict[type, _Handler] = {
    TurnCreated: TurnReducer._on_created_again,
    ModelCallRequested: TurnReducer._on_model_requested,
    ModelStepEvent: TurnReducer._on_step,
    ModelCallCompleted: TurnReducer._on_model_completed,
    ModelCallFailed: TurnReducer._on_model_failed,
    ToolPermissionRequired: TurnReducer._on_permission_required,
    ToolPermissionClassified: TurnReducer._on_permission_classified,
    ToolPermissionClassificationFailed: TurnReducer._on_classification_failed,
    ToolPermissionResolved: TurnReducer._on_permission_resolved,
    ToolInvocationRequested: TurnReducer._on_invocation,
    ToolProgress: TurnReducer._on_progress,
    ToolResult: TurnReducer._on_result,
    TurnSuspended: TurnReducer._on_suspended,
    TurnCompleted: TurnReducer._on_completed,
    TurnFailed: TurnReducer._on_failed_or_cancelled,
    TurnCancelled: TurnReducer._on_failed_or_cancelled,
}
"""Event class → handler: one dict lookup per event instead of a chain of
``isinstance`` checks (each a Python-level ``__instancecheck__`` on pydantic
model classes). Every member of the ``TurnEvent`` union has an entry."""

_ON_SUSPENDED: _Handler = TurnReducer._on_suspended


def _handler_for(event: object) -> _Handler:
    """The handler for an instance of a subclass of an event class (not in the table)."""
    for cls in type(event).__mro__:
        handler = _HANDLERS.get(cls)
        if handler is not None:
            return handler
    raise AssertionError(f"{type(event).__name__} is not a turn event")


def reduce_turn(events: Sequence[TurnEvent]) -> TurnState:
    """Replay a whole turn log. Raises ``CorruptTurnError`` naming the rule and 1-based line."""
    if not events:
        raise CorruptTurnError(
            "the turn log is empty; the first event must be turn_created", line=1
        )
    return TurnReducer.of(events).state
