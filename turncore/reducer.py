"""The one reducer: durable events in, ``TurnState`` out (spec §14, §24).

Theory of operation
-------------------
A turn log is a strict sequence: ``turn_created``; then rounds of one model
call (requested → step events → completed | failed) followed by the tool batch
of a completed response (permission records, invocations, progress, results in
any physical order); suspension snapshots whenever work waits on the outside;
and at most one terminal event, after which nothing may follow.

Every call is one record with an explicit ``phase``: a ``ModelCallState`` per
model call and a ``ToolCallState`` per tool call the model made. An event about
a call moves its record through a transition table, ``(phase, move) → next
phase`` (``MODEL_CALL_TRANSITIONS``, ``TOOL_CALL_TRANSITIONS``). The move is the
event's type, qualified where the event itself picks the next phase::

    model call   requested ─step→ streaming ─step→ streaming
                 requested | streaming ─completed→ completed, ─failed→ failed

    tool call    proposed ─required→ permission_required   (autoPermission, checker answered)
                 proposed ─required/human→ awaiting_human  (no autoPermission, or checker failed)
                 proposed | allowed ─invocation→ invoked
                 permission_required ─classified (allow|deny)→ classified
                 permission_required ─classified/defer | classification_failed→ deferred
                 classified ─resolved/classifier/allow|deny→ allowed | denied
                 awaiting_human | deferred ─resolved/human/allow|deny→ allowed | denied
                 invoked ─progress→ invoked, ─result (sync|async)→ done
                 any phase but done ─result/runtime→ done

A pair missing from the table is illegal: the refusal for that event names the
broken rule, checking the rules in the same order as always, so a log with
several faults reports the same one. Facts that are not about the phase (a
tool name that differs from the model's, a human decision in a turn without a
human) are guards checked beside the lookup. The views filter on phase, so
each rule is written once: a permission waits on a human exactly in
``awaiting_human`` and ``deferred``; an async or sync tool runs in ``invoked``.

``TurnReducer`` folds events one at a time. ``apply`` first *checks* the event
against every invariant that concerns it and only then *mutates*, so an illegal
event raises ``CorruptTurnError`` naming the broken rule and leaves the reducer
exactly as it was (the repository's append gate relies on this). Folding is
linear in the number of events. ``reduce_turn`` is the one-liner fold that
also reports the 1-based line of the offending event.

The records are frozen pydantic models, written in place by the one reducer
that holds them while they are open. A record in a terminal phase (``done``,
``completed``, ``failed``) has no move out of it, so it never changes again
and reducers share it: ``copy()`` (one per append) copies the lists and
clones only the open batch. ``state`` hands out copies of every record, so a
caller that changes their lists never reaches the reducer's.

The reducer never resolves context references, never reads clocks, and never
infers that a turn is running (§14.3): liveness is not durable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeVar, assert_never, get_args

from pydantic import BaseModel, ConfigDict

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
    TurnConfig,
    TurnCreated,
    TurnEvent,
    TurnFailed,
    TurnSuspended,
    TurnUsage,
)
from .jsonvalue import JsonValue
from .messages import AssistantMessage, ToolCallPart
from .output import output_spec

# ---------------------------------------------------------------- phases and their tables

ModelCallPhase = Literal["requested", "streaming", "completed", "failed"]

ModelCallMove = Literal["model_step_event", "model_call_completed", "model_call_failed"]

MODEL_CALL_TRANSITIONS: dict[tuple[ModelCallPhase, ModelCallMove], ModelCallPhase] = {
    ("requested", "model_step_event"): "streaming",
    ("streaming", "model_step_event"): "streaming",
    ("requested", "model_call_completed"): "completed",
    ("streaming", "model_call_completed"): "completed",
    ("requested", "model_call_failed"): "failed",
    ("streaming", "model_call_failed"): "failed",
}
"""Where an event about a model call moves it; a missing pair is illegal.

``model_call_requested`` makes the record (in ``requested``); whether it may is
a rule of the turn (order, limits, the previous batch), not of a call."""

_MODEL_NEXT: dict[ModelCallMove, dict[ModelCallPhase, ModelCallPhase]] = {
    move: {p: n for (p, m), n in MODEL_CALL_TRANSITIONS.items() if m == move}
    for move in get_args(ModelCallMove)
}
"""The same table by move: one lookup of a cached string per event on the hot
path, instead of hashing a fresh ``(phase, move)`` tuple."""

_STEP_NEXT = _MODEL_NEXT["model_step_event"]  # the hot moves, looked up once
_COMPLETE_NEXT = _MODEL_NEXT["model_call_completed"]

_OPEN_MODEL_PHASES: frozenset[ModelCallPhase] = frozenset({"requested", "streaming"})

ToolCallPhase = Literal[
    "proposed",
    "permission_required",
    "awaiting_human",
    "deferred",
    "classified",
    "allowed",
    "denied",
    "invoked",
    "done",
]
"""Where a tool call is. ``proposed``: in a completed response, nothing recorded
yet. ``permission_required``: required, the classifier decides next.
``awaiting_human``: required, and only a human (or the lack of one) decides:
no ``autoPermission``, or the checker failed (§9.3). ``deferred``: the
classifier deferred or failed, so a human decides. ``classified``: the
classifier allowed or denied; its resolution comes next. ``allowed`` /
``denied``: resolved. ``invoked``: running (progress keeps it here). ``done``:
it has its terminal result."""

ToolCallMove = Literal[
    "tool_permission_required",
    "tool_permission_required/human",
    "tool_permission_classified",
    "tool_permission_classified/defer",
    "tool_permission_classification_failed",
    "tool_permission_resolved/classifier/allow",
    "tool_permission_resolved/classifier/deny",
    "tool_permission_resolved/human/allow",
    "tool_permission_resolved/human/deny",
    "tool_invocation_requested",
    "tool_progress",
    "tool_result",
    "tool_result/runtime",
]
"""An event about a tool call, as the table sees it: its type, qualified where
the event picks the next phase (``_tool_move`` maps events to moves).
``/human`` covers both ``human`` and ``human_unavailable`` resolutions; a
``tool_result`` is a sync or async one."""

TOOL_CALL_TRANSITIONS: dict[tuple[ToolCallPhase, ToolCallMove], ToolCallPhase] = {
    ("proposed", "tool_permission_required"): "permission_required",
    ("proposed", "tool_permission_required/human"): "awaiting_human",
    ("proposed", "tool_invocation_requested"): "invoked",
    ("permission_required", "tool_permission_classified"): "classified",
    ("permission_required", "tool_permission_classified/defer"): "deferred",
    ("permission_required", "tool_permission_classification_failed"): "deferred",
    ("classified", "tool_permission_resolved/classifier/allow"): "allowed",
    ("classified", "tool_permission_resolved/classifier/deny"): "denied",
    ("awaiting_human", "tool_permission_resolved/human/allow"): "allowed",
    ("awaiting_human", "tool_permission_resolved/human/deny"): "denied",
    ("deferred", "tool_permission_resolved/human/allow"): "allowed",
    ("deferred", "tool_permission_resolved/human/deny"): "denied",
    ("allowed", "tool_invocation_requested"): "invoked",
    ("invoked", "tool_progress"): "invoked",
    ("invoked", "tool_result"): "done",
    # The runtime may close any open call with an error (unknown tool, bad
    # arguments, denial, interruption, cancellation: §10.3).
    **{
        (phase, "tool_result/runtime"): "done"
        for phase in get_args(ToolCallPhase)
        if phase != "done"
    },
}
"""Where an event about a tool call moves it; a missing pair is illegal."""

_TOOL_NEXT: dict[ToolCallMove, dict[ToolCallPhase, ToolCallPhase]] = {
    move: {p: n for (p, m), n in TOOL_CALL_TRANSITIONS.items() if m == move}
    for move in get_args(ToolCallMove)
}
"""``TOOL_CALL_TRANSITIONS`` by move (see ``_MODEL_NEXT``)."""

_INVOKE_NEXT = _TOOL_NEXT["tool_invocation_requested"]  # the hot moves, looked up once
_PROGRESS_NEXT = _TOOL_NEXT["tool_progress"]

_AWAITING_HUMAN: frozenset[ToolCallPhase] = frozenset({"awaiting_human", "deferred"})
"""The phases in which a permission waits on a human (§9.3): the one place the
rule is read. Without ``autoPermission`` every required permission asks a
human; with it, only a classifier ``defer``, a classification failure or a
checker error (never classified) reach one. Before the classifier has spoken
the runtime still owns the decision, so a suspension lists only these."""


_ToolEvent = (
    ToolPermissionRequired
    | ToolPermissionClassified
    | ToolPermissionClassificationFailed
    | ToolPermissionResolved
    | ToolInvocationRequested
    | ToolProgress
    | ToolResult
)


def _tool_move(event: _ToolEvent, auto_permission: bool) -> ToolCallMove:
    """The table's name for a tool event: where the event itself picks the next phase,
    it says so. ``tool_permission_required/human`` is where the human-wait rule
    (``_AWAITING_HUMAN``) starts: a permission the classifier may not decide."""
    match event:
        case ToolPermissionRequired():
            if auto_permission and event.checker_error is None:
                return "tool_permission_required"
            return "tool_permission_required/human"
        case ToolPermissionClassified():
            if event.decision == "defer":
                return "tool_permission_classified/defer"
            return "tool_permission_classified"
        case ToolPermissionClassificationFailed():
            return "tool_permission_classification_failed"
        case ToolPermissionResolved():
            if event.source == "classifier":
                if event.decision == "allow":
                    return "tool_permission_resolved/classifier/allow"
                return "tool_permission_resolved/classifier/deny"
            if event.decision == "allow":
                return "tool_permission_resolved/human/allow"
            return "tool_permission_resolved/human/deny"
        case ToolInvocationRequested():
            return "tool_invocation_requested"
        case ToolProgress():
            return "tool_progress"
        case ToolResult():
            return _result_move(event)
        case _:
            assert_never(event)


def _result_move(event: ToolResult) -> ToolCallMove:
    return "tool_result/runtime" if event.source == "runtime" else "tool_result"


# ---------------------------------------------------------------- the §14.2 projection


_STATE_CONFIG = ConfigDict(defer_build=True)


class PermissionState(WireModel):
    model_config = _STATE_CONFIG

    required: ToolPermissionRequired
    classification: Opt[ToolPermissionClassified] = None
    classification_failed: Opt[ToolPermissionClassificationFailed] = None
    """Set when the classifier failed or omitted this call: it is treated as defer."""
    resolved: Opt[ToolPermissionResolved] = None


class ModelCallState(WireModel):
    model_config = _STATE_CONFIG

    index: int
    phase: ModelCallPhase
    request: ModelRequest
    step_events: list[DurableLlmStepStreamEvent]
    response: Opt[AssistantMessage] = None
    finish_reason: Opt[str] = None
    usage: Opt[TurnUsage] = None
    """The completion's usage, or for a failed call the provider's last report, if any."""
    error: Opt[str] = None


class ToolCallState(WireModel):
    model_config = _STATE_CONFIG

    model_call_index: int
    order: int
    tool_call_id: str
    phase: ToolCallPhase
    tool_id: Opt[str] = None
    """The invocation's, or before it the turn's tool snapshot's (unknown for an
    inherited snapshot or a tool outside the snapshot)."""
    tool_name: str
    input: JsonValue
    execution: Opt[Literal["sync", "async"]] = None
    permission: Opt[PermissionState] = None
    invocation: Opt[ToolInvocationRequested] = None
    progress: list[ToolProgress]
    result: Opt[ToolResult] = None


def _is_open(call: ModelCallState) -> bool:
    return call.phase in _OPEN_MODEL_PHASES


def _awaits_human(call: ToolCallState) -> bool:
    return call.phase in _AWAITING_HUMAN


def _runs(call: ToolCallState, execution: Literal["sync", "async"]) -> bool:
    """An invoked ``execution`` call still without its result: the open-call filter."""
    return call.phase == "invoked" and call.execution == execution


def _pending_permission(call: ToolCallState) -> PendingPermission:
    assert call.permission is not None
    return PendingPermission(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        request=call.permission.required.request,
    )


def _pending_async(call: ToolCallState) -> PendingAsyncTool:
    assert call.invocation is not None
    return PendingAsyncTool(
        tool_call_id=call.tool_call_id,
        tool_id=call.invocation.tool_id,
        tool_name=call.tool_name,
        input=call.invocation.input,
    )


class TurnState(WireModel):
    """Everything durable about a turn, and nothing about whether it is running."""

    model_config = _STATE_CONFIG

    definition: TurnCreated
    model_calls: list[ModelCallState]
    tool_calls: list[ToolCallState]
    suspension: Opt[TurnSuspended] = None
    terminal: Opt[TerminalEvent] = None
    usage: TurnUsage

    # Derived views used by the runtime and by surfaces. They read the state;
    # they never add to it. Each filters on phase.

    def open_model_call(self) -> ModelCallState | None:
        if self.model_calls and _is_open(self.model_calls[-1]):
            return self.model_calls[-1]
        return None

    def unresolved_tool_calls(self) -> list[ToolCallState]:
        return [t for t in self.tool_calls if t.phase != "done"]

    def pending_permissions(self) -> list[PendingPermission]:
        return [_pending_permission(t) for t in self.tool_calls if _awaits_human(t)]

    def pending_async_tools(self) -> list[PendingAsyncTool]:
        return [_pending_async(t) for t in self.tool_calls if _runs(t, "async")]

    def running_sync_tools(self) -> list[ToolCallState]:
        """Invoked sync calls without a result: running, or interrupted (§23)."""
        return [t for t in self.tool_calls if _runs(t, "sync")]

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


# ---------------------------------------------------------------- refusals

# When a pair is not in a table, these name the rule it breaks. Each checks
# the rules in the order the reducer always has, so a log breaking several
# reports the same one. They run only on the illegal path.


def _refuse_model(calls: Sequence[ModelCallState], index: int, kind: str) -> str:
    if index >= len(calls):
        return f"{kind} for model call {index}, which was never requested"
    return f"{kind} for model call {index}, which already {calls[index].phase}"


def _refuse_required(call: ToolCallState) -> str:
    if call.permission is not None:
        return f"permission for tool call {call.tool_call_id!r} was already required"
    return f"permission for tool call {call.tool_call_id!r} was required after its invocation"


def _permission_closed(call: ToolCallState, kind: str) -> str | None:
    """Why no classification or resolution can concern this call's permission, if so."""
    if call.permission is None:
        return f"{kind} for tool call {call.tool_call_id!r}, which required no permission"
    if call.permission.resolved is not None:
        return f"{kind} for tool call {call.tool_call_id!r} after its permission was resolved"
    return None


def _classification_twice_or_unclassifiable(call: ToolCallState, kind: str) -> str | None:
    p = call.permission
    assert p is not None
    if p.classification is not None or p.classification_failed is not None:
        return f"tool call {call.tool_call_id!r} was classified twice"
    if p.required.checker_error is not None:
        return (
            f"{kind} for tool call {call.tool_call_id!r}, whose permission checker failed: "
            "it asks a human and is never classified (§9.3)"
        )
    return None


def _no_classifier(kind: str) -> str:
    return f"{kind} in a turn without autoPermission: no classifier may run"


def _refuse_classified(call: ToolCallState, kind: str, config: TurnConfig) -> str:
    closed = _permission_closed(call, kind)
    if closed is not None:
        return closed
    if not config.auto_permission:
        return _no_classifier(kind)
    why = _classification_twice_or_unclassifiable(call, kind)
    assert why is not None, f"{call.phase} refused a classification for no reason"
    return why


def _refuse_classification_failed(call: ToolCallState, kind: str) -> str | None:
    """Why this one call cannot be in the failure; None when only the turn's rule
    (no classifier without autoPermission, checked after every call's) forbids it."""
    closed = _permission_closed(call, kind)
    if closed is not None:
        return closed
    return _classification_twice_or_unclassifiable(call, kind)


def _resolution_guard(
    call: ToolCallState, event: ToolPermissionResolved, human: bool
) -> str | None:
    """What the resolution's source says about it, on either path: a classifier's
    must repeat the classification; a human's needs a turn with a human, and
    ``human_unavailable`` one without."""
    if event.source == "classifier":
        assert call.permission is not None
        c = call.permission.classification
        if c is None or c.decision != event.decision:
            said = c.decision if c is not None else "nothing"
            return (
                f"a classifier {event.decision} for tool call {event.tool_call_id!r}, "
                f"whose classification said {said}"
            )
    elif event.source == "human" and not human:
        return f"a human decision for tool call {event.tool_call_id!r} in a turn without a human"
    elif event.source == "human_unavailable":
        if human:
            return (
                f"tool call {event.tool_call_id!r} resolved as human_unavailable "
                "in a turn with a human"
            )
        if event.decision != "deny":
            # Nobody was asked, so nobody allowed it: §9.3 denies such a call,
            # and an allow here would run a tool no one approved.
            return (
                f"tool call {event.tool_call_id!r} resolved allow as human_unavailable: "
                "without a human the decision is deny (§9.3)"
            )
    return None


def _refuse_resolved(call: ToolCallState, event: ToolPermissionResolved, human: bool) -> str:
    p = call.permission
    if p is not None and p.resolved is not None:
        return (
            f"conflicting permission decisions for tool call {event.tool_call_id!r}: "
            f"already resolved {p.resolved.decision}"
        )
    closed = _permission_closed(call, event.type)
    if closed is not None:
        return closed
    guard = _resolution_guard(call, event, human)
    if guard is not None:
        return guard
    assert p is not None
    # Left: a human or human_unavailable decision before the classifier spoke
    # or after it decided allow or deny.
    waits = (
        "the classifier has not decided it yet"
        if p.classification is None
        else f"the classifier decided {p.classification.decision}"
    )
    return (
        f"a {event.source} decision for tool call {event.tool_call_id!r}, "
        f"which is not awaiting a human: {waits}"
    )


def _refuse_invocation(call: ToolCallState) -> str:
    if call.phase == "invoked":
        return f"tool call {call.tool_call_id!r} was invoked twice"
    return f"tool call {call.tool_call_id!r} was invoked without an allow decision"


# ---------------------------------------------------------------- fold helpers

_Totals = tuple[int | None, int | None, int | None, int | None, int | None]


def _plus(a: int | None, b: int | None) -> int | None:
    """``TurnUsage.__add__`` for one counter: a counter nobody reported stays absent."""
    if a is None:
        return b
    return a if b is None else a + b


def _structured(created: TurnCreated | None) -> bool:
    """Whether the turn's final answer must match an output schema (``turncore.output``)."""
    return created is not None and output_spec(created.agent.requested) is not None


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


_R = TypeVar("_R", bound=WireModel)


def _record(cls: type[_R], fields: dict[str, Any]) -> _R:
    """``cls.model_construct(**fields)`` where ``fields`` names every field.

    The values come from validated events, so there is nothing to validate
    and no default to resolve; skipping both makes a new call's record about
    twice as cheap, which a fold of a long turn notices.
    """
    record = _new(cls)
    _set_dict(record, fields)
    # Every field is set, so every record of a class can share one set;
    # pydantic copies it before changing it (``model_copy``), and a frozen
    # model never changes it otherwise.
    _set_fields_set(record, _ALL_FIELDS[cls])
    _set_extra(record, None)
    _set_private(record, None)
    return record


# The slots ``model_construct`` fills, set through their descriptors (cheaper
# than ``object.__setattr__``, which checks its receiver on every call).
_new = object.__new__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


_ALL_FIELDS: dict[type[BaseModel], set[str]] = {
    cls: set(cls.model_fields) for cls in (ModelCallState, ToolCallState, PermissionState)
}
_TOOL_FIELDS = _ALL_FIELDS[ToolCallState]


_PROPOSED: dict[str, Any] = {
    "model_call_index": 0,
    "order": 0,
    "tool_call_id": "",
    "phase": "proposed",
    "tool_id": None,
    "tool_name": "",
    "input": None,
    "execution": None,
    "permission": None,
    "invocation": None,
    "progress": None,
    "result": None,
}
"""Every field of a new tool call, to copy and fill in (cheaper than a literal)."""
assert _PROPOSED.keys() == ToolCallState.model_fields.keys()


def _cloned_model(call: ModelCallState) -> ModelCallState:
    return call.model_copy(update={"step_events": list(call.step_events)})


def _cloned_tool(call: ToolCallState) -> ToolCallState:
    p = call.permission
    return call.model_copy(
        update={"progress": list(call.progress), "permission": p.model_copy() if p else None}
    )


class TurnReducer:
    """Incremental, linear fold of a turn log. ``apply`` checks, then mutates."""

    __slots__ = (
        "_created",
        "_turn_id",
        "_tools_by_name",
        "_proposed",
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
        "_shown_models",
        "_shown_tools",
    )

    def __init__(self) -> None:
        self._created: TurnCreated | None = None
        self._turn_id = ""  # the created turn's, read once per event
        self._tools_by_name: dict[str, ToolDescriptor] | None = None
        # Per tool in the snapshot, the fields of a new call to it (see
        # ``_PROPOSED``): the snapshot never changes, so they are made once.
        self._proposed: dict[str, dict[str, Any]] = {}
        self._model_calls: list[ModelCallState] = []
        self._tool_calls: list[ToolCallState] = []
        # Tool call id → index in ``_tool_calls`` of the newest call with it.
        self._tool_by_id: dict[str, int] = {}
        # The tool calls without a terminal result, in source order, by id:
        # their records' fields (see "records"). Only the latest completed
        # model call's batch can have any (a model call may not start before
        # the previous batch is resolved), so every check that asks "what is
        # still open" is O(batch), not O(turn).
        self._unresolved: dict[str, dict[str, Any]] = {}
        self._suspension: TurnSuspended | None = None
        self._terminal: TerminalEvent | None = None
        # The aggregate usage as plain counters (summed per completion without
        # building a model), and the TurnUsage of them, built when asked for.
        self._totals: _Totals = (None, None, None, None, None)
        self._usage: TurnUsage | None = TurnUsage()
        self._count = 0
        self._state: TurnState | None = None
        # The states' copies of the settled records, oldest first, made once:
        # settled records never change, so successive states share these and
        # only the open records (the last batch) are copied for each state.
        # Building a state is then O(batch), not O(turn), as the turn grows.
        self._shown_models: list[ModelCallState] = []
        self._shown_tools: list[ToolCallState] = []

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
            # Copies of the records, not the records: a caller may change the
            # state's lists (progress, step events) without reaching the
            # reducer's. The copies of settled records are shared by the
            # states this reducer builds (see ``_shown_models``).
            models, shown_models = self._model_calls, self._shown_models
            while len(shown_models) < len(models) and not _is_open(models[len(shown_models)]):
                shown_models.append(_cloned_model(models[len(shown_models)]))
            tools, shown_tools = self._tool_calls, self._shown_tools
            unresolved = self._unresolved
            while len(shown_tools) < len(tools):
                t = tools[len(shown_tools)]
                if unresolved.get(t.tool_call_id) is t.__dict__:
                    break  # open: copied afresh for each state
                shown_tools.append(_cloned_tool(t))
            self._state = TurnState.model_construct(
                definition=self._created,
                model_calls=shown_models + [_cloned_model(m) for m in models[len(shown_models) :]],
                tool_calls=shown_tools + [_cloned_tool(t) for t in tools[len(shown_tools) :]],
                suspension=self._suspension,
                terminal=self._terminal,
                usage=self._aggregate(),
            )
        return self._state

    def copy(self, *, fresh_state: bool = False) -> TurnReducer:
        """An independent reducer at the same point (for trial appends).

        Settled records never change, so both share them; the open ones (the
        last model call, the unresolved batch) are cloned: O(batch), not O(turn).
        With ``fresh_state`` the copy builds its own ``state`` instead of sharing
        this one's (still on the shared copies of settled records).
        """
        other = TurnReducer()
        other._created = self._created
        other._turn_id = self._turn_id
        other._tools_by_name = self._tools_by_name
        other._proposed = self._proposed
        other._model_calls = models = list(self._model_calls)
        if models and _is_open(models[-1]):
            models[-1] = _cloned_model(models[-1])
        other._tool_calls = tools = list(self._tool_calls)
        other._unresolved = {}
        for call_id in self._unresolved:
            i = self._tool_by_id[call_id]
            clone = tools[i] = _cloned_tool(tools[i])
            other._unresolved[call_id] = clone.__dict__
        other._tool_by_id = dict(self._tool_by_id)
        other._suspension = self._suspension
        other._terminal = self._terminal
        other._totals = self._totals
        other._usage = self._usage
        other._count = self._count
        other._state = None if fresh_state else self._state
        other._shown_models = list(self._shown_models)
        other._shown_tools = list(self._shown_tools)
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
            self._turn_id = event.turn_id
            resolved = event.agent.resolved
            if isinstance(resolved, ResolvedAgent):
                self._tools_by_name = {t.name: t for t in resolved.tools}
                self._proposed = {
                    t.name: {
                        **_PROPOSED,
                        "tool_name": t.name,
                        "tool_id": t.tool_id,
                        "execution": t.execution,
                    }
                    for t in resolved.tools
                }
            self._commit(event)
            return
        if event.turn_id != self._turn_id:
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

    # -- records ------------------------------------------------------------

    # Pydantic models define ``__getattr__``, which makes every attribute read
    # several times slower than a dict read, so the handlers that run per
    # event read and write an open record's fields through its ``__dict__``.
    # Writing is safe there: the record is open, so this reducer alone holds it.

    def _tool(self, tool_call_id: str) -> ToolCallState:
        """The newest call with this id (which must exist)."""
        return self._tool_calls[self._tool_by_id[tool_call_id]]

    def _open_fields(self, tool_call_id: str, kind: str) -> dict[str, Any]:
        """The fields of the open call an event names; ``_target``'s error if none."""
        fields = self._unresolved.get(tool_call_id)
        if fields is None:
            self._target(tool_call_id, kind)  # raises: every known call not done is open
            raise AssertionError(f"tool call {tool_call_id!r} is neither open nor done")
        return fields

    def _tool_fields(self, index: int) -> dict[str, Any]:
        return self._tool_calls[index].__dict__

    def _permission_fields(self, index: int) -> dict[str, Any]:
        permission = self._tool_calls[index].permission
        assert permission is not None
        return permission.__dict__

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

    def _on_failed_or_cancelled(self, event: TurnFailed | TurnCancelled) -> None:
        self._check_settled(event.type)
        last = self._model_calls[-1] if self._model_calls else None
        if (
            last is not None
            and last.phase == "completed"
            and last.response is not None
            and not _tool_calls(last.response)
            and not (event.type == "turn_failed" and _structured(self._created))
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

    def _move_model(self, index: int, move: ModelCallMove, kind: str) -> ModelCallPhase:
        """The phase model call ``index`` moves to, or the rule the move breaks."""
        calls = self._model_calls
        nxt = _MODEL_NEXT[move].get(calls[index].phase) if index < len(calls) else None
        if nxt is None:
            raise _corrupt(_refuse_model(calls, index, kind))
        return nxt

    def _on_model_requested(self, event: ModelCallRequested) -> None:
        created = self._created
        assert created is not None  # apply() folds turn_created first
        index = event.model_call_index
        expected = len(self._model_calls)
        if index != expected:
            raise _corrupt(
                f"model call index {index} is out of order; the next index is {expected}"
            )
        models = self._model_calls
        if models and models[-1].__dict__["phase"] in _OPEN_MODEL_PHASES:  # see "records"
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
        self._model_calls.append(
            _record(
                ModelCallState,
                {
                    "index": index,
                    "phase": "requested",
                    "request": event.request,
                    "step_events": [],
                    "response": None,
                    "finish_reason": None,
                    "usage": None,
                    "error": None,
                },
            )
        )

    def _check_request_refs(self, created: TurnCreated, index: int, request: ModelRequest) -> None:
        # A structured turn (turncore.output) sends an invalid final answer back:
        # there a response without tool calls may be followed by another call
        # (``["assistant:N-1"]``) or fail the turn (``output-invalid``). Whether
        # the answer was invalid is the loop's judgement, not re-checked here, so
        # a file stays readable whatever validator version wrote it.
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
            previous = self._model_calls[index - 1].__dict__  # see "records"
            response = previous["response"]
            if previous["phase"] == "completed" and response is not None:
                calls = _tool_calls(response)
                if not calls and not _structured(created):
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

    def _on_step(self, event: ModelStepEvent) -> None:
        # Hot: fields through ``__dict__`` (see "records").
        index, calls = event.model_call_index, self._model_calls
        fields = calls[index].__dict__ if index < len(calls) else None
        nxt = _STEP_NEXT.get(fields["phase"]) if fields else None
        if fields is None or nxt is None:
            raise _corrupt(_refuse_model(calls, index, event.type))
        fields["step_events"].append(event.event)
        if nxt is not fields["phase"]:  # only the first step moves it
            fields["phase"] = nxt

    def _on_model_failed(self, event: ModelCallFailed) -> None:
        index = event.model_call_index
        nxt = self._move_model(index, "model_call_failed", event.type)
        fields = self._model_calls[index].__dict__
        # Tokens an accepted attempt used before it broke are still spent: the
        # provider's last report rides a finish-step of the failed call.
        reported = _reported_usage(fields["step_events"])
        fields.update(phase=nxt, error=event.error, usage=reported)
        if reported is not None:
            self._add_usage(reported)

    def _on_model_completed(self, event: ModelCallCompleted) -> None:
        index, calls = event.model_call_index, self._model_calls
        model = calls[index].__dict__ if index < len(calls) else None  # see "records"
        nxt = _COMPLETE_NEXT.get(model["phase"]) if model else None
        if model is None or nxt is None:
            raise _corrupt(_refuse_model(calls, index, event.type))
        # Parts are pydantic models too: each field is read once (see "records").
        new_calls: dict[str, ToolCallState] = {}
        proposed = self._proposed
        for order, part in enumerate(_tool_calls(event.message)):
            call_id, name = part.tool_call_id, part.tool_name
            if call_id in new_calls:
                raise _corrupt(
                    f"tool-call id {call_id!r} appears twice in model call {index}'s response"
                )
            known = proposed.get(name)
            if known is None:  # not in the snapshot: its id and execution are unknown
                fields = _PROPOSED.copy()
                fields["tool_name"] = name
            else:
                fields = known.copy()
            fields["model_call_index"] = index
            fields["order"] = order
            fields["tool_call_id"] = call_id
            fields["input"] = part.input
            fields["progress"] = []
            # ``_record``, inlined: this loop makes every tool call of a turn.
            t = _new(ToolCallState)
            _set_dict(t, fields)
            _set_fields_set(t, _TOOL_FIELDS)
            _set_extra(t, None)
            _set_private(t, None)
            new_calls[call_id] = t
        model["phase"] = nxt
        model["response"] = event.message
        model["finish_reason"] = event.finish_reason
        model["usage"] = event.usage
        self._add_usage(event.usage)
        tool_calls, by_id, unresolved = self._tool_calls, self._tool_by_id, self._unresolved
        for call_id, t in new_calls.items():
            i = len(tool_calls)
            tool_calls.append(t)
            # An id reused from an earlier response (§24 forbids duplicates
            # within one response only) now names this call: the earlier one
            # is settled, since no model call starts before its batch is.
            by_id[call_id] = i
            unresolved[call_id] = t.__dict__

    # -- tool calls ---------------------------------------------------------

    def _target(self, tool_call_id: str, kind: str) -> int:
        """The index of the call a tool event names; it must still be open."""
        i = self._tool_by_id.get(tool_call_id)
        if i is None:
            raise _corrupt(f"{kind} targets unknown tool call {tool_call_id!r}")
        # Nothing follows a call's result: every move out of ``done`` is
        # refused, and (but for a second result) with this rule.
        if self._tool_calls[i].phase == "done":
            raise _corrupt(f"{kind} for tool call {tool_call_id!r} after its terminal result")
        return i

    def _on_permission_required(self, event: ToolPermissionRequired) -> None:
        assert self._created is not None
        i = self._target(event.tool_call_id, event.type)
        call = self._tool_calls[i]
        nxt = _TOOL_NEXT[_tool_move(event, self._created.config.auto_permission)].get(call.phase)
        if nxt is None:
            raise _corrupt(_refuse_required(call))
        if event.tool_name != call.tool_name:
            raise _corrupt(
                f"tool_permission_required names {event.tool_name!r} but tool call "
                f"{event.tool_call_id!r} is {call.tool_name!r}"
            )
        self._tool_fields(i).update(
            phase=nxt,
            permission=_record(
                PermissionState,
                {
                    "required": event,
                    "classification": None,
                    "classification_failed": None,
                    "resolved": None,
                },
            ),
        )

    def _on_permission_classified(self, event: ToolPermissionClassified) -> None:
        assert self._created is not None
        config = self._created.config
        i = self._target(event.tool_call_id, event.type)
        call = self._tool_calls[i]
        nxt = _TOOL_NEXT[_tool_move(event, config.auto_permission)].get(call.phase)
        if nxt is None:
            raise _corrupt(_refuse_classified(call, event.type, config))
        self._permission_fields(i)["classification"] = event
        self._tool_fields(i)["phase"] = nxt

    def _on_classification_failed(self, event: ToolPermissionClassificationFailed) -> None:
        if not event.tool_call_ids:
            raise _corrupt("tool_permission_classification_failed names no tool call")
        if len(set(event.tool_call_ids)) != len(event.tool_call_ids):
            raise _corrupt("tool_permission_classification_failed lists a tool call twice")
        assert self._created is not None
        config = self._created.config
        targets = [self._target(i, event.type) for i in event.tool_call_ids]
        moves: list[tuple[int, ToolCallPhase]] = []
        for i in targets:
            call = self._tool_calls[i]
            nxt = _TOOL_NEXT["tool_permission_classification_failed"].get(call.phase)
            if nxt is None:
                why = _refuse_classification_failed(call, event.type)
                if why is not None:
                    raise _corrupt(why)
                # A call that only a turn without autoPermission can hold:
                # the turn's rule below refuses it, after every call's own.
                assert not config.auto_permission
                continue
            moves.append((i, nxt))
        if not config.auto_permission:
            raise _corrupt(_no_classifier(event.type))
        for i, nxt in moves:
            self._permission_fields(i)["classification_failed"] = event
            self._tool_fields(i)["phase"] = nxt

    def _on_permission_resolved(self, event: ToolPermissionResolved) -> None:
        assert self._created is not None
        config = self._created.config
        i = self._target(event.tool_call_id, event.type)
        call = self._tool_calls[i]
        nxt = _TOOL_NEXT[_tool_move(event, config.auto_permission)].get(call.phase)
        if nxt is None:
            raise _corrupt(_refuse_resolved(call, event, config.human_available))
        guard = _resolution_guard(call, event, config.human_available)
        if guard is not None:
            raise _corrupt(guard)
        self._permission_fields(i)["resolved"] = event
        self._tool_fields(i)["phase"] = nxt

    def _on_invocation(self, event: ToolInvocationRequested) -> None:
        fields = self._unresolved.get(event.tool_call_id) or self._open_fields(
            event.tool_call_id, event.type
        )
        nxt = _INVOKE_NEXT.get(fields["phase"])
        if nxt is None:
            raise _corrupt(_refuse_invocation(self._tool(event.tool_call_id)))
        name = fields["tool_name"]
        if event.tool_name != name:
            raise _corrupt(
                f"invocation names tool {event.tool_name!r} but the model called {name!r}"
            )
        if event.input != fields["input"]:
            raise _corrupt(
                f"invocation input for tool call {event.tool_call_id!r} differs from the model's"
            )
        tools = self._tools_by_name
        d = tools.get(name) if tools else None
        if d is not None and (d.tool_id != event.tool_id or d.execution != event.execution):
            raise _corrupt(
                f"invocation of {event.tool_name!r} as {event.tool_id}/{event.execution} "
                f"contradicts the turn's tool snapshot {d.tool_id}/{d.execution}"
            )
        if d is None and self._tools_by_name is not None:
            raise _corrupt(
                f"invocation of {event.tool_name!r}, which is not in the turn's tool set"
            )
        fields["phase"] = nxt
        fields["invocation"] = event
        if d is None:  # else they are the snapshot's, which the invocation repeats
            fields["tool_id"] = event.tool_id
            fields["execution"] = event.execution

    def _on_progress(self, event: ToolProgress) -> None:
        # The hottest handler.
        fields = self._unresolved.get(event.tool_call_id) or self._open_fields(
            event.tool_call_id, event.type
        )
        if _PROGRESS_NEXT.get(fields["phase"]) is None:
            raise _corrupt(
                f"progress for tool call {event.tool_call_id!r}, which was never invoked"
            )
        source = event.source
        if fields["execution"] != source:
            raise _corrupt(
                f"{source} progress for {fields['execution']} tool call {event.tool_call_id!r}"
            )
        if source == "async":
            self._human_present_for(event.tool_call_id, fields["tool_name"], event.type)
        # ``invoked`` → ``invoked``: only the progress changes.
        fields["progress"].append(event)

    def _on_result(self, event: ToolResult) -> None:
        call_id = event.tool_call_id
        fields = self._unresolved.get(call_id)
        # The rules in their order: a known call; not a second result; then
        # what the result says of itself; then whether its source could have
        # produced it (the table: only an invoked call has a sync or async one).
        if fields is None:
            if call_id not in self._tool_by_id:
                raise _corrupt(f"tool_result targets unknown tool call {call_id!r}")
            raise _corrupt(f"duplicate terminal result for tool call {call_id!r}")
        source, name = event.source, fields["tool_name"]
        nxt = _TOOL_NEXT[_result_move(event)].get(fields["phase"])
        if event.tool_name != name:
            raise _corrupt(
                f"tool_result names {event.tool_name!r} but tool call {call_id!r} is {name!r}"
            )
        if source == "runtime" and not event.result.is_error:
            raise _corrupt(
                f"runtime result for tool call {event.tool_call_id!r} has isError false; "
                "a runtime result must be an error (§10.3)"
            )
        if source == "async":
            self._human_present_for(call_id, name, event.type)
        if nxt is None:
            raise _corrupt(
                f"{event.source} result for tool call {event.tool_call_id!r}, "
                "which was never invoked"
            )
        if source != "runtime" and fields["execution"] != source:
            raise _corrupt(
                f"{source} result for {fields['execution']} tool call {event.tool_call_id!r}"
            )
        fields["phase"] = nxt
        fields["result"] = event
        del self._unresolved[call_id]

    def _human_present_for(self, tool_call_id: str, tool_name: str, kind: str) -> None:
        """§10.2: a human-only tool in a turn without a human gets a runtime error at
        once, so nothing may wait on it or answer it from outside."""
        assert self._created is not None
        tools = self._tools_by_name
        d = tools.get(tool_name) if tools else None
        if d is not None and d.requires_human and not self._created.config.human_available:
            raise _corrupt(
                f"{kind} for tool call {tool_call_id!r}: {tool_name} needs a human and "
                "this turn has none, so it gets an immediate runtime error (§10.2)"
            )

    # -- settle points ------------------------------------------------------

    def _check_settled(self, kind: str) -> None:
        if self._model_calls and _is_open(self._model_calls[-1]):
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
        if self._model_calls and _is_open(self._model_calls[-1]):
            raise _corrupt("turn_suspended while a model call is unresolved")
        # Compare against what is actually pending: the same phase filters as
        # TurnState's views, over the open batch.
        open_calls = [self._tool(i) for i in self._unresolved]
        want_perm = {t.tool_call_id: t for t in open_calls if _awaits_human(t)}
        want_async = {t.tool_call_id: t for t in open_calls if _runs(t, "async")}
        got_perm = [p.tool_call_id for p in event.pending_permissions]
        got_async = [p.tool_call_id for p in event.pending_async_tools]
        if set(got_perm) != want_perm.keys() or len(got_perm) != len(want_perm):
            raise _corrupt(
                f"turn_suspended lists pending permissions {sorted(got_perm)} "
                f"but {sorted(want_perm)} are pending"
            )
        if set(got_async) != want_async.keys() or len(got_async) != len(want_async):
            raise _corrupt(
                f"turn_suspended lists pending async tools {sorted(got_async)} "
                f"but {sorted(want_async)} are pending"
            )
        if not want_perm and not want_async:
            raise _corrupt("turn_suspended with no pending permission or async tool")
        for t in want_async.values():
            self._human_present_for(t.tool_call_id, t.tool_name, event.type)
        if event.usage != self._aggregate():
            raise _corrupt("turn_suspended.usage differs from the turn's aggregate usage")
        # The snapshot is what callers answer from, so each entry must describe
        # the pending work exactly, not just name it.
        # (Field by field: building the entries to compare costs more.)
        for p in event.pending_permissions:
            t = want_perm[p.tool_call_id]
            assert t.permission is not None
            if (p.tool_name, p.request) != (t.tool_name, t.permission.required.request):
                raise _corrupt(
                    f"turn_suspended misdescribes the pending permission of tool call "
                    f"{p.tool_call_id!r}"
                )
        for a in event.pending_async_tools:
            inv = want_async[a.tool_call_id].invocation
            assert inv is not None
            if (a.tool_id, a.tool_name, a.input) != (inv.tool_id, inv.tool_name, inv.input):
                raise _corrupt(
                    f"turn_suspended misdescribes the pending async tool call {a.tool_call_id!r}"
                )

    def _on_completed(self, event: TurnCompleted) -> None:
        self._check_settled(event.type)
        last = self._model_calls[-1] if self._model_calls else None
        if last is None or last.phase != "completed" or last.response is None:
            raise _corrupt("turn_completed without a completed final model call")
        if _tool_calls(last.response):
            raise _corrupt("turn_completed after a response that called tools")
        if event.output != last.response:
            raise _corrupt("turn_completed.output differs from the final model response")
        if event.finish_reason != last.finish_reason:
            raise _corrupt(
                f"turn_completed.finishReason {event.finish_reason!r} differs from the final "
                f"model response's {last.finish_reason!r}"
            )
        if event.usage != self._aggregate():
            raise _corrupt("turn_completed.usage differs from the turn's aggregate usage")
        self._terminal = event


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
