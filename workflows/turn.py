"""The turn workflow: one Temporal workflow per turn, workflow id = turn id.

Theory of operation
-------------------
The JSONL file is the truth; this workflow is the process that advances it.
It holds a ``TurnReducer`` fed with every event it appends or learns from an
activity, and decides the next step with the pure functions of
``turncore.advance``. It never trusts memory over the file when it cannot
be sure what an activity did: any activity failure, and every run start,
reloads the file and applies the recovery table (§23).

External inputs arrive as signals (fire and forget; invalid ones are listed
in ``rejectedInputs``) or as updates of the same names (validated against
what is pending now; accepted ones return the next settled outcome). Both
feed one queue and are applied one at a time, in arrival order.

Cancellation — the ``cancel`` input or Temporal cancellation of the workflow —
takes one path: cancel what runs, wait until it has finished cancelling,
reload, close every open call with a synthetic result, append
``turn_cancelled``.
"""

from __future__ import annotations

# Only pure modules below: the sandbox runs this module under its restrictions
# and passes through only pydantic, orjson, turncore and the activity contract
# (see PASSTHROUGH in turncore_temporal.worker).
import asyncio
import dataclasses
import json
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar, assert_never

from temporalio import workflow
from temporalio.common import (
    RawValue,
    RetryPolicy,
    SearchAttributeKey,
    SearchAttributeUpdate,
)
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

from turncore import advance
from turncore.elision import elide_event, owned
from turncore.errors import RejectedInputError
from turncore.events import (
    CancelInput,
    ExternalDelivery,
    ResolvedAgent,
    StagedAsyncToolProgressInput,
    StagedAsyncToolResultInput,
    ToolDescriptor,
    ToolInvocationRequested,
    ToolResult,
    ToolResultData,
    TurnEvent,
    outcome_adapter,
)
from turncore.inputs import (
    INPUT_NAMES,
    MAX_REJECTED_INPUTS,
    accept_input,
    delivery_terms,
    rejection_record,
)
from turncore.reducer import ToolCallState, TurnReducer, TurnState
from turncore.subagents import SPAWN_AGENT_TOOL_ID, child_result
from turncore.timestamps import format_ts
from turncore_temporal.activities import TurnActivityContract as Activities
from turncore_temporal.activities.failures import (
    cause,
    dependency_failure,
    expired,
    failure_of,
    given_up_by_its_worker,
    infrastructure_failure,
    is_dependency_failure,
    is_rejection,
    rejection,
)
from turncore_temporal.activities.payloads import (
    AppendInput,
    AwaitChildInput,
    CheckOutcome,
    CheckPermissionsInput,
    CheckPermissionsResult,
    ClassifyInput,
    CreateChildInput,
    CreateChildResult,
    Derived,
    FastToolsInput,
    LoadInput,
    MaterializeAgentInput,
    ModelCallInput,
    ModelCallResult,
    SubagentResultInput,
    ToolCallInput,
    ValidateDependenciesInput,
)
from turncore_temporal.workflows._types import Flags, Queued, TurnWorkflowInput

TURN_STATUS = SearchAttributeKey.for_keyword("TurnStatus")
TURN_AGENT = SearchAttributeKey.for_keyword("TurnAgent")
TURN_MODEL = SearchAttributeKey.for_keyword("TurnModel")
TURN_SESSION = SearchAttributeKey.for_keyword("TurnSession")
TURN_PENDING = SearchAttributeKey.for_keyword("TurnPendingInputs")
SEARCH_ATTRIBUTES = (TURN_STATUS, TURN_AGENT, TURN_MODEL, TURN_SESSION, TURN_PENDING)

MAX_FRUITLESS_MODEL_ATTEMPTS = 3
"""An activity that keeps dying before it records anything is an infrastructure
problem, not something to retry forever."""

_SAFE_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_attempts=5)
_ONE_ATTEMPT = RetryPolicy(maximum_attempts=1)
_REATTACH_CHILDREN = "reattach-children"
"""Runs from here on abandon (not cancel) children when lost, and re-attach them on recovery."""
_BOUND_PENDING = "bound-pending-search-attribute"
"""Runs from here on cut the pending-inputs search attribute to what Temporal accepts."""
MAX_KEYWORD_BYTES = 2048
"""The largest keyword search attribute Temporal accepts by default
(``limit.searchAttributesSizeOfValue``), counted as its JSON payload."""
_CANCEL_CLOSES_INTERRUPTED = "cancel-closes-interrupted-calls"
"""Runs from here on leave calls a lost worker interrupted to a waiting cancel to close."""
_CLASSIFIER_STAMPS = "classifier-decisions-say-who-decided"
"""Runs from here on record ``{"via": "classifier", "at"}`` in the classifier's decisions."""
_REJECT_QUEUED = "reject-inputs-queued-at-end"
"""Runs from here on reject inputs a cancel overtook, instead of leaving their updates open."""
_CREATE_LINKED_CHILD = "create-linked-child-on-reattach"
"""Runs from here on create a linked child whose first line a lost attempt never wrote,
before re-attaching to it (``create_child_turn`` links first, then creates)."""
_SPAWN_FAILURE_RELOADS = "spawn-failure-reloads"
"""Runs from here on reload when a ``spawn_agent`` call's local activity fails, as
when any activity fails, instead of losing the call's task and starting it anew."""
_SUBAGENT_RESULT_FROM_FILE = "subagent-result-from-file"
"""Runs from here on have the append activity build a ``spawn_agent`` result from the
child's file: the child's outcome reaches the workflow elided."""

_HAND_OVER_AFTER_PROGRESS = "hand-over-after-progress"
"""Runs from here on continue as new only after they added to the file: a run whose
reload alone outgrows the history budget works on instead of handing over in a loop."""
_CHECKED_WITH_MODEL = "permissions-checked-with-the-model-call"
"""Runs from here on take the checker's answers from the model activity's result."""
_FAST_TOOLS = "fast-tools-as-local-activities"
"""Runs from here on run a batch of fast sync tools as one local activity."""
_CLASSIFY_CANCELLABLE = "classify-as-cancellable-activity"
"""Runs from here on classify in a regular activity a cancel can interrupt."""
_VALIDATE_ON_SETTLE = "validate-dependencies-on-settle"
"""Runs from here on validate the live dependencies on a settle with no input."""
_ONE_MARKER = "one-marker-for-earlier-patches"
"""Runs from here on record one patch marker for all of ``_FOLDED``, not one each.
Every marker comes with an upsert of Temporal's ``TemporalChangeVersion`` search
attribute: the three patches a plain turn with a fast tool passes cost six history
events and three visibility writes; now two events and one write."""
_RELOAD_ON_A_WORKING_WORKER = "reload-given-up-work-on-a-worker-taking-work"
"""Runs from here on load the file in a queued activity when a stopping worker gave
up an activity. The task that learns of it may run on that very worker (it still
takes workflow tasks while it stops); a local load would let it close the call
as interrupted, changing a turn its `turns run` promised to leave as it is. A
queued activity only runs on a worker that takes work, so the turn's recovery
(§23) does too. Such a give-up no longer counts as a fruitless model attempt."""
_FOLDED = frozenset(
    {
        _REATTACH_CHILDREN,
        _BOUND_PENDING,
        _CANCEL_CLOSES_INTERRUPTED,
        _CLASSIFIER_STAMPS,
        _REJECT_QUEUED,
        _CREATE_LINKED_CHILD,
        _SPAWN_FAILURE_RELOADS,
        _SUBAGENT_RESULT_FROM_FILE,
        _HAND_OVER_AFTER_PROGRESS,
        _CHECKED_WITH_MODEL,
        _FAST_TOOLS,
        _CLASSIFY_CANCELLABLE,
        _VALIDATE_ON_SETTLE,
    }
)
"""The patches ``_ONE_MARKER`` stands for: every one that existed when it came.
A patch added later must call ``workflow.patched`` itself and never join this
set: histories recorded under ``_ONE_MARKER`` took the old path of a patch that
did not exist yet."""
FAST_MARGIN_SECONDS = 30.0
"""A fast batch's local activity may take its longest bound plus this (reading
the file, appending invocations and results) before Temporal times it out."""

_I = TypeVar("_I")
_R = TypeVar("_R")


def _ts() -> str:
    return format_ts(workflow.now())


def _patched(patch_id: str) -> bool:
    """``workflow.patched`` for a patch of ``_FOLDED``.

    A run that records ``_ONE_MARKER`` (every new run, at its first patch
    question) takes every folded patch's new path without a marker of its own;
    a run recorded before has no such marker, is told False, and asks for the
    patch itself as it did when it was recorded.
    """
    assert patch_id in _FOLDED, f"{patch_id} is not folded: call workflow.patched"
    return workflow.patched(_ONE_MARKER) or workflow.patched(patch_id)


@workflow.defn(name="Turn")
class TurnWorkflow:
    def __init__(self) -> None:
        self._turn_id = ""
        self._reducer: TurnReducer | None = None
        self._queue: deque[Queued] = deque()
        self._settle_waiters: list[asyncio.Future[dict[str, Any]]] = []
        self._running: dict[str, asyncio.Task[None]] = {}
        self._model_handle: workflow.ActivityHandle[ModelCallResult] | None = None
        self._tools: list[ToolDescriptor] | None = None
        """An inherited snapshot's materialized tools, once a tool call needed them."""
        self._cancel: CancelInput | None = None
        self._flags = Flags()
        self._allowed: set[str] = set()
        """Calls the permission checker allowed outright, until their invocation is appended."""
        self._input = TurnWorkflowInput(turn_id="")
        self._idle = False
        """True only while the turn sits at a settle point (suspended or terminal)."""
        self._seen_lines = 0
        """The file's line count as last reported by a load or an append. Every
        line after it was written by a running tool or by an append still in
        flight, so a retried batch found there is that append's earlier attempt."""
        self._ended_before = False
        """The file was already terminal when this run loaded it (nothing to count)."""
        self._loaded_events = 0
        """Events this run's first load found: a run hands over only after adding some."""
        self._child_slots = asyncio.Semaphore(8)
        self._fast: dict[str, float] = {}
        self._prechecked: dict[str, CheckOutcome] = {}
        """The checker's answers the last model call brought, by call id, until used."""
        """Tool ids this turn runs fast, with their bounds (as the last load recorded)."""

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, input: TurnWorkflowInput) -> dict[str, Any]:
        self._input = input
        self._turn_id = input.turn_id
        workflow_id = workflow.info().workflow_id
        if workflow_id != input.turn_id:
            # One workflow per turn is what makes its appends serial: a second
            # workflow under another id would race the first on the same file.
            raise ApplicationError(
                f"workflow id {workflow_id!r} must equal its turn id {input.turn_id!r}",
                type="InvalidInputError",
                non_retryable=True,
            )
        # Acquiring a free slot does not yield, so histories with fewer children
        # than the bound replay unchanged.
        self._child_slots = asyncio.Semaphore(max(1, input.max_concurrent_children))
        if input.cancel is not None:
            self._cancel = CancelInput.model_validate(input.cancel)
        self._flags.rejected.extend(input.rejected_inputs)
        try:
            # §15.3: a broken environment rejects the advance before any write
            # (checked in the same read); cancellation never needs live
            # dependencies (§22).
            await self._reload(validate=self._cancel is None)
            self._ended_before = self._state.terminal is not None
            self._loaded_events = self._reducer.event_count if self._reducer is not None else 0
            if self._reducer is not None and self._reducer.event_count == 1:
                _count("turncore_turns_started", "Turns that began advancing")
            await self._drive()
        except (ApplicationError, ActivityError) as exc:
            # The environment cannot advance this turn (§15.3) or the file
            # cannot be trusted: answer every waiting caller with the reason,
            # then fail this run. Nothing false was written; `recover` starts
            # a new run once the environment or the file is fixed.
            if isinstance(exc, ApplicationError):
                self._fail_waiters(exc)
                await workflow.wait_condition(workflow.all_handlers_finished)
                raise
            failure = _infrastructure_failure(exc)
            self._fail_waiters(failure)
            await workflow.wait_condition(workflow.all_handlers_finished)
            raise failure from None
        except asyncio.CancelledError:
            # Temporal cancelled the workflow: the same path as a cancel input.
            if self._cancel is None:
                self._cancel = CancelInput(reason="the turn's workflow was cancelled")
            await asyncio.shield(asyncio.ensure_future(self._cancel_turn()))
        outcome = self._outcome()
        assert outcome is not None
        self._idle = True
        self._release_waiters(outcome)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return outcome

    @property
    def _state(self) -> TurnState:
        assert self._reducer is not None
        return self._reducer.state

    async def _drive(self) -> None:
        """Interpret ``advance.next_action`` until the turn ends or is cancelled.

        Between two actions: reload if an activity left the state uncertain,
        apply queued inputs one at a time, and hand over to a new run when
        history has grown.
        """
        while True:
            if self._flags.reload and not self._running:
                await self._reload()
            if self._state.terminal is not None:
                await self._settled()
                return
            if self._cancel is not None:
                await self._cancel_turn()
                return
            if self._queue and not self._flags.reload:
                await self._apply_input(self._queue.popleft())
                continue
            if self._should_continue_as_new():
                await self._continue_as_new()
            tools = await self._materialized_tools()
            action = advance.next_action(
                self._state, running=self._running, allowed=self._allowed, tools=tools, ts=_ts()
            )
            match action:
                case advance.Append(events):
                    fast = advance.fast_batch(events, self._fast) if self._fast else None
                    if fast is not None and _patched(_FAST_TOOLS):
                        await self._run_fast(fast)
                    else:
                        await self._append(events)
                case advance.CheckPermissions(calls):
                    await self._check_permissions(calls)
                case advance.Classify(calls):
                    await self._classify(calls)
                case advance.StartTools(calls):
                    for call in calls:
                        self._running[call.tool_call_id] = asyncio.create_task(self._run_tool(call))
                case advance.Wait():
                    await self._wait()
                case advance.Suspend(suspended):
                    if suspended is not None:
                        await self._append([suspended])
                        _count_settled("suspended")
                    await self._settled()
                    if self._should_continue_as_new() and not self._queue and self._cancel is None:
                        await self._continue_as_new()
                    await self._wait(idle=True)
                case advance.Complete():
                    await self._append_derived("completion")
                case advance.FailLimit(failed):
                    await self._append([failed])
                case advance.CallModel(index):
                    await self._call_model(index)
                case advance.Done():
                    pass  # the terminal check above settles it
                case _:
                    assert_never(action)

    def _should_continue_as_new(self) -> bool:
        if self._running or (self._model_handle is not None and not self._model_handle.done()):
            return False
        info = workflow.info()
        if not (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self._input.max_history_events
        ):
            return False
        # A new run reloads the file, and that alone adds history: a run that
        # hands over before adding anything could hand over forever.
        added = self._reducer is not None and self._reducer.event_count > self._loaded_events
        return added or not _patched(_HAND_OVER_AFTER_PROGRESS)

    async def _continue_as_new(self) -> None:
        """Hand the turn to a fresh run; it reloads everything from the file.

        Callers waiting for a settle point are told the run continued as new
        (``{"continuedAsNew": true}``) and ask the next run instead.
        """
        while True:
            self._release_waiters({"continuedAsNew": True})
            await workflow.wait_condition(
                lambda: (
                    workflow.all_handlers_finished()
                    or bool(self._settle_waiters)
                    or bool(self._queue)
                    or self._cancel is not None
                )
            )
            if self._queue or self._cancel is not None:
                return  # new input arrived meanwhile: serve it here, hand over later
            if workflow.all_handlers_finished():
                break
        carried = dataclasses.replace(
            self._input, cancel=None, rejected_inputs=self._flags.rejected[-MAX_REJECTED_INPUTS:]
        )
        workflow.continue_as_new(carried)

    async def _wait(self, idle: bool = False) -> None:
        seen = self._flags.woken
        self._idle = idle
        try:
            await workflow.wait_condition(
                lambda: self._flags.woken != seen or bool(self._queue) or self._cancel is not None
            )
        finally:
            self._idle = False

    def _wake(self) -> None:
        self._flags.woken += 1

    # ------------------------------------------------------------- recovery

    async def _reload(self, recover: bool = True, validate: bool = False) -> None:
        """Rebuild state from the file and apply the recovery table (§23).

        The file arrives in pages that each fit a payload. The cancellation
        path reloads without recovery: it closes open work with cancellation
        results instead.
        """
        reducer = TurnReducer()
        start: int | None = 0
        queued = self._flags.given_up and workflow.patched(_RELOAD_ON_A_WORKING_WORKER)
        self._flags.given_up = False
        while start is not None:
            load = LoadInput(turn_id=self._turn_id, start=start, validate=validate and start == 0)
            result = await self._local(Activities.load_turn, load, queued=queued and start == 0)
            if load.start == 0:
                self._fast = dict(result.fast_tools)
            for e in self._own(result.events):
                reducer.apply(e)
            start = result.next_start
            self._saw(result.offset)
        self._reducer = reducer
        self._flags.reload = False
        self._prechecked = {}
        self._allowed.clear()  # ask the checker again about anything not yet invoked
        state = reducer.state
        if state.terminal is not None or not recover:
            return
        if _patched(_REATTACH_CHILDREN):
            # A child started by a lost run of this turn is still its child:
            # wait for it instead of calling its outcome unknown.
            for call, child_id in advance.orphaned_children(state, self._running):
                self._running[call.tool_call_id] = asyncio.create_task(
                    self._reattach_child(call, child_id)
                )
        repairs = advance.close_interrupted_model_call(state, _ts())
        repairs += advance.interrupted_sync_results(state, self._running, _ts())
        if repairs and self._cancel is not None and _patched(_CANCEL_CLOSES_INTERRUPTED):
            # A cancel is waiting: the cancellation closes these calls next, as
            # cancelled (§22); "interrupted, it will be re-issued" would promise
            # a model call the cancel never lets happen.
            return
        if repairs:
            await self._append(repairs)

    # ------------------------------------------------------------ appending

    async def _append(self, events: list[TurnEvent]) -> None:
        assert self._reducer is not None
        trial = self._reducer.copy()
        for e in events:
            trial.apply(e)  # an illegal decision must never reach the file
        result = await self._local(
            Activities.append_events,
            AppendInput(turn_id=self._turn_id, events=events, known_offset=self._seen_lines),
        )
        self._saw(result.offset)
        if result.events:
            # An earlier attempt of this batch had landed (this workflow task
            # was replayed after a crash): fold it with the file's timestamps.
            events = self._own(result.events)
        for e in events:
            # Large values stay in the file; the workflow keeps the elided copy a
            # reload would give (DESIGN §5), so state queries and continue-as-new
            # stay small.
            self._reducer.apply(elide_event(e))
        # An allow-outright lasts until its invocation records it: a later
        # response may reuse the id (§24) for a call the checker never saw.
        self._allowed.difference_update(advance.invoked_ids(events))

    def _saw(self, offset: int) -> None:
        self._seen_lines = max(self._seen_lines, offset)

    async def _append_derived(self, kind: Derived) -> None:
        """Append an event the activity builds from the file (it copies values the
        workflow holds only elided), then fold the elided copy it returns."""
        folded = await self._append_built(derive=kind)
        if not folded and self._state.terminal is None:
            self._flags.reload = True  # it was already there: trust the file

    async def _append_built(
        self,
        *,
        derive: Derived | None = None,
        staged: StagedAsyncToolProgressInput | StagedAsyncToolResultInput | None = None,
        subagent: SubagentResultInput | None = None,
    ) -> bool:
        """Have the append activity build one event (``derive`` or ``staged``), append
        it and return its elided copy, which is folded here; False if it found the
        event already on file and appended nothing. A staged input's value is
        fetched and checked by the activity (DESIGN §5): missing or not matching,
        the input is rejected."""
        assert self._reducer is not None
        result = await self._local(
            Activities.append_events,
            AppendInput(
                turn_id=self._turn_id,
                events=[],
                known_offset=self._seen_lines,
                ts=_ts(),
                derive=derive,
                staged=staged,
                subagent=subagent,
            ),
            reject=staged is not None,
        )
        self._saw(result.offset)
        for event in self._own(result.events):
            self._reducer.apply(event)
        return bool(result.events)

    def _own(self, events: list[TurnEvent]) -> list[TurnEvent]:
        """Events as an activity handed them over (``for_workflow``: no turn id), as
        the file holds them but for elided values: with this turn's id back."""
        return [owned(e, self._turn_id) for e in events]

    def _absorb(self, events: list[TurnEvent]) -> None:
        """Fold events an activity appended, skipping any a reload already brought in."""
        assert self._reducer is not None
        for event in self._own(events):
            if self._already_have(event):
                continue
            self._reducer.apply(event)

    def _already_have(self, event: TurnEvent) -> bool:
        state = self._state
        if event.type == "tool_progress":
            call = state.tool_call(event.tool_call_id)
            return call is not None and event in call.progress
        if event.type == "tool_result":
            call = state.tool_call(event.tool_call_id)
            return call is not None and call.result == event
        return False

    # ------------------------------------------------------------ tool batch

    async def _materialized_tools(self) -> list[ToolDescriptor] | None:
        """An inherited snapshot's tools, resolved through its chain (§6.7).

        Only asked for when a tool call needs deciding, so full snapshots (and
        cancellation, which needs no live dependency) never run the activity.
        """
        state = self._state
        if isinstance(state.definition.agent.resolved, ResolvedAgent):
            return None
        if self._tools is None and state.unresolved_tool_calls():
            result = await self._local(
                Activities.materialize_agent, MaterializeAgentInput(turn_id=self._turn_id)
            )
            self._tools = list(result.tools)
        return self._tools

    async def _check_permissions(self, calls: list[ToolCallState]) -> None:
        pre, self._prechecked = self._prechecked, {}
        if (
            pre
            and all(
                c.tool_call_id in pre and pre[c.tool_call_id].tool_id == c.tool_id for c in calls
            )
            and _patched(_CHECKED_WITH_MODEL)
        ):
            checked = CheckPermissionsResult(outcomes=[pre[c.tool_call_id] for c in calls])
        else:
            checked = await self._local(
                Activities.check_permissions, CheckPermissionsInput.of(self._turn_id, calls)
            )
        required, allowed = advance.permission_required_events(
            self._state, checked.checks(), _ts(), self._allowed, self._tools
        )
        self._allowed.update(allowed)
        if required:
            await self._append(required)

    async def _classify(self, calls: list[ToolCallState]) -> None:
        """Run the classifier and record its decisions; a cancel input cancels it (§22).

        A regular, heartbeating activity: a local one holds the workflow task,
        so a cancel could not even be seen until the classifier finished or
        the task heartbeat came round (seconds later). A cancelled classifier's
        answer is dropped and the loop closes the turn next; nothing is invoked
        after a cancel is accepted (the loop checks it before every action).
        Histories recorded before this ran it as a local activity and replay so.
        """
        arg = ClassifyInput.of(self._turn_id, calls)
        if _patched(_CLASSIFY_CANCELLABLE):
            handle = workflow.start_activity_method(
                Activities.classify_permissions,
                arg,
                start_to_close_timeout=timedelta(seconds=self._input.model_call_timeout_seconds),
                heartbeat_timeout=timedelta(seconds=self._input.heartbeat_timeout_seconds),
                retry_policy=_SAFE_RETRY,
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary="classify permissions",
            )
            await workflow.wait_condition(lambda: handle.done() or self._cancel is not None)
            if not handle.done():
                handle.cancel()
                await asyncio.gather(handle, return_exceptions=True)
                return
            classified = await handle
        else:
            classified = await self._local(Activities.classify_permissions, arg)
        events = advance.classification_events(
            self._state,
            classified.decisions(),
            classified.error,
            _ts(),
            # Who decided, as every surface records it; histories from before
            # replay without it, so their state stays the file's.
            stamped=_patched(_CLASSIFIER_STAMPS),
        )
        if events:
            await self._append(events)

    async def _run_tool(self, call: ToolCallState) -> None:
        assert call.invocation is not None
        if call.invocation.tool_id == SPAWN_AGENT_TOOL_ID:
            await self._run_child(call)
            return
        try:
            result = await workflow.execute_activity_method(
                Activities.run_tool,
                ToolCallInput(
                    turn_id=self._turn_id,
                    tool_call_id=call.tool_call_id,
                    tool_id=call.invocation.tool_id,
                    tool_name=call.tool_name,
                    input=call.input,
                    compact=True,
                ),
                start_to_close_timeout=timedelta(seconds=self._input.tool_timeout_seconds),
                heartbeat_timeout=timedelta(seconds=self._input.heartbeat_timeout_seconds),
                retry_policy=_ONE_ATTEMPT,
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"tool {call.tool_name} · {call.tool_call_id}",
            )
            self._absorb(result.events)
        except (ActivityError, asyncio.CancelledError) as exc:
            # We cannot be sure what the activity did: trust the file.
            workflow.logger.warning("tool %s ended without a result: %s", call.tool_call_id, exc)
            self._flags.reload = True
            self._flags.given_up |= given_up_by_its_worker(exc)
        finally:
            self._running.pop(call.tool_call_id, None)
            self._wake()

    async def _run_fast(self, invocations: list[ToolInvocationRequested]) -> None:
        """Invoke and run a batch of fast tools as one local activity (no task queue
        round trip). It appends the invocations itself, so a re-executed attempt
        knows from the file what a lost one may have started (§23)."""
        assert self._reducer is not None
        trial = self._reducer.copy()
        for e in invocations:
            trial.apply(e)  # an illegal decision must never reach the file
        bounds = {e.tool_call_id: self._fast[e.tool_id] for e in invocations}
        names = ", ".join(f"{e.tool_name} · {e.tool_call_id}" for e in invocations)
        try:
            result = await workflow.execute_local_activity_method(
                Activities.run_fast_tools,
                FastToolsInput(
                    turn_id=self._turn_id,
                    invocations=invocations,
                    bounds=bounds,
                    known_offset=self._seen_lines,
                ),
                start_to_close_timeout=timedelta(
                    seconds=max(bounds.values()) + FAST_MARGIN_SECONDS
                ),
                retry_policy=_ONE_ATTEMPT,
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"fast tool {names}",
            )
        except (ActivityError, ApplicationError) as exc:
            # We cannot be sure what the activity did: trust the file.
            workflow.logger.warning("fast tools %s ended without a result: %s", names, exc)
            self._flags.reload = True
            return
        except asyncio.CancelledError:
            self._flags.reload = True
            raise
        self._saw(result.offset)
        # A lost attempt's invocations (as on file) first, else the ones given,
        # then results and progress.
        landed = self._own(result.events)
        found = [e for e in landed if isinstance(e, ToolInvocationRequested)]
        known = {e.tool_call_id for e in found}
        for event in [*found, *(e for e in invocations if e.tool_call_id not in known)]:
            call = self._state.tool_call(event.tool_call_id)
            if call is None or call.invocation is None:
                self._reducer.apply(event)
        for other in landed:
            if other.type != "tool_invocation_requested" and not self._already_have(other):
                self._reducer.apply(other)
        self._allowed.difference_update(advance.invoked_ids(invocations))

    async def _run_child(self, call: ToolCallState) -> None:
        """``spawn_agent``: run the call as a child turn with its own file and workflow,
        at most ``max_concurrent_children`` at a time."""
        if not await self._child_slot(call):
            return
        try:
            await self._run_child_now(call)
        finally:
            self._child_slots.release()

    async def _child_slot(self, call: ToolCallState) -> bool:
        """Wait for one of ``max_concurrent_children`` slots; False if cancelled meanwhile.

        Cancelled while waiting, the call is left like a cancelled child's: the
        file decides what happens to it on the reload."""
        try:
            await self._child_slots.acquire()
        except asyncio.CancelledError:
            self._flags.reload = True
            self._running.pop(call.tool_call_id, None)
            self._wake()
            return False
        return True

    async def _reattach_child(self, call: ToolCallState, child_id: str) -> None:
        """Wait for a child turn an earlier run of this turn started (see ``await_child_turn``)."""
        if not await self._child_slot(call):
            return
        try:
            if _patched(_CREATE_LINKED_CHILD):
                # The link is written before the child's first line: an attempt
                # that failed between the two left a child to create.
                created: CreateChildResult = await self._local(
                    Activities.create_child_turn,
                    CreateChildInput(
                        parent_turn_id=self._turn_id, tool_call_id=call.tool_call_id, ts=_ts()
                    ),
                )
                self._absorb(created.events)
                if created.child_turn_id is None:
                    if self._state.terminal is None and self._cancel is None:
                        error = created.error or "the sub-agent could not start"
                        await self._append(
                            [self._sync_result(call, ToolResultData(output=error, is_error=True))]
                        )
                    return
            child_input = dataclasses.replace(
                self._input, turn_id=child_id, cancel=None, rejected_inputs=[]
            )
            done = await workflow.execute_activity_method(
                Activities.await_child_turn,
                AwaitChildInput(
                    child_turn_id=child_id, workflow_input=dataclasses.asdict(child_input)
                ),
                start_to_close_timeout=timedelta(seconds=self._input.tool_timeout_seconds),
                heartbeat_timeout=timedelta(seconds=self._input.heartbeat_timeout_seconds),
                retry_policy=_ONE_ATTEMPT,
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                summary=f"sub-agent {child_id} of {call.tool_call_id} (re-attached)",
            )
            if self._state.terminal is None and self._cancel is None:
                if _patched(_SUBAGENT_RESULT_FROM_FILE):
                    await self._append_child_result(call, child_id)
                else:
                    await self._append(
                        [self._sync_result(call, child_result(child_id, done.outcome))]
                    )
        except (ActivityError, ApplicationError, asyncio.CancelledError) as exc:
            if isinstance(exc, ApplicationError) and not _patched(_SPAWN_FAILURE_RELOADS):
                raise
            workflow.logger.warning("sub-agent %s was not re-attached: %s", child_id, exc)
            self._flags.reload = True
        finally:
            self._child_slots.release()
            self._running.pop(call.tool_call_id, None)
            self._wake()

    async def _append_child_result(self, call: ToolCallState, child_id: str) -> None:
        """Record the ended child's outcome as the call's result, built from its file."""
        folded = await self._append_built(
            subagent=SubagentResultInput(tool_call_id=call.tool_call_id, child_turn_id=child_id)
        )
        if not folded:
            self._flags.reload = True  # nothing appended: trust the file

    def _sync_result(self, call: ToolCallState, data: ToolResultData) -> ToolResult:
        return ToolResult(
            turn_id=self._turn_id,
            ts=_ts(),
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            source="sync",
            result=data,
        )

    async def _run_child_now(self, call: ToolCallState) -> None:
        try:
            created: CreateChildResult = await self._local(
                Activities.create_child_turn,
                CreateChildInput(
                    parent_turn_id=self._turn_id, tool_call_id=call.tool_call_id, ts=_ts()
                ),
            )
            self._absorb(created.events)
            child_id = created.child_turn_id
            data: ToolResultData | None = None
            if child_id is None:
                data = ToolResultData(
                    output=created.error or "the sub-agent could not start", is_error=True
                )
            else:
                try:
                    outcome = await workflow.execute_child_workflow(
                        TurnWorkflow.run,
                        dataclasses.replace(
                            self._input, turn_id=child_id, cancel=None, rejected_inputs=[]
                        ),
                        id=child_id,
                        # A lost run leaves its children running, for the
                        # recovered run to re-attach; cancelling the turn still
                        # cancels them (through this call's cancellation).
                        parent_close_policy=(
                            workflow.ParentClosePolicy.ABANDON
                            if _patched(_REATTACH_CHILDREN)
                            else workflow.ParentClosePolicy.REQUEST_CANCEL
                        ),
                        cancellation_type=workflow.ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
                        static_summary=f"sub-agent of {self._turn_id} · {call.tool_call_id}",
                    )
                    # The child's answer reached us elided (DESIGN §5): the
                    # append activity builds the result from the child's file.
                    if not _patched(_SUBAGENT_RESULT_FROM_FILE):
                        data = child_result(
                            child_id,
                            outcome_adapter.validate_python(
                                {k: v for k, v in outcome.items() if k != "turnId"}
                            ),
                        )
                except ChildWorkflowError as exc:
                    reason = cause(exc)
                    data = ToolResultData(
                        output={"childTurnId": child_id, "status": "error", "error": reason},
                        is_error=True,
                    )
            if self._state.terminal is None and self._cancel is None:
                if data is not None:
                    await self._append([self._sync_result(call, data)])
                else:
                    assert child_id is not None
                    await self._append_child_result(call, child_id)
        except (ActivityError, ApplicationError, asyncio.CancelledError) as exc:
            # A local activity's failure arrives as ApplicationError. Uncaught, it
            # ended this task silently and the loop started the call again at
            # once, without a reload: a hot loop, and a new child turn each time.
            if isinstance(exc, ApplicationError) and not _patched(_SPAWN_FAILURE_RELOADS):
                raise
            workflow.logger.warning(
                "sub-agent of %s ended without a result: %s", call.tool_call_id, exc
            )
            self._flags.reload = True
        finally:
            self._running.pop(call.tool_call_id, None)
            self._wake()

    # ------------------------------------------------------------ model call

    async def _call_model(self, index: int) -> None:
        model = self._state.definition.agent.resolved.model.label()
        handle = workflow.start_activity_method(
            Activities.call_model,
            ModelCallInput(turn_id=self._turn_id, model_call_index=index, compact=True),
            start_to_close_timeout=timedelta(seconds=self._input.model_call_timeout_seconds),
            heartbeat_timeout=timedelta(seconds=self._input.heartbeat_timeout_seconds),
            retry_policy=_ONE_ATTEMPT,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            summary=f"model call {index} · {model}",
        )
        self._model_handle = handle
        await workflow.wait_condition(lambda: handle.done() or self._cancel is not None)
        if not handle.done():
            handle.cancel()
        try:
            result = await handle
        except (ActivityError, asyncio.CancelledError) as exc:
            if is_dependency_failure(exc):
                raise dependency_failure(
                    f"turn {self._turn_id} cannot advance: {cause(exc)}"
                ) from exc
            workflow.logger.warning("model call %s ended without a result: %s", index, exc)
            self._flags.reload = True
            if given_up_by_its_worker(exc) and workflow.patched(_RELOAD_ON_A_WORKING_WORKER):
                # A stopping worker (a detached `turns run`, a deploy) is not the
                # model failing: it never counts toward giving the turn up.
                self._flags.given_up = True
                return
            self._flags.strikes += 1
            if self._flags.strikes >= MAX_FRUITLESS_MODEL_ATTEMPTS:
                raise infrastructure_failure(
                    f"turn {self._turn_id}: the model call activity failed {self._flags.strikes} times "
                    f"in a row without recording anything: {cause(exc)}"
                ) from exc
            return
        self._flags.strikes = 0
        self._absorb_model(result)

    def _absorb_model(self, result: ModelCallResult) -> None:
        assert self._reducer is not None
        for event in self._own(result.events):
            self._reducer.apply(event)
        self._prechecked = result.prechecked()

    # ---------------------------------------------------------------- inputs

    def _enqueue(
        self, parsed: ExternalDelivery, waiter: asyncio.Future[dict[str, Any]] | None
    ) -> None:
        if isinstance(parsed, CancelInput):
            if self._cancel is None:
                self._cancel = parsed
            if waiter is not None:
                self._settle_waiters.append(waiter)
            self._wake()
            return
        self._queue.append(Queued(parsed, waiter))
        self._wake()

    def _signal(self, name: str, args: Sequence[Any]) -> None:
        """A signal never raises: whatever it carries is applied or listed as rejected."""
        try:
            parsed = accept_input(name, args)
            if self._reducer is not None:
                advance.check_input(self._state, parsed)
        except RejectedInputError as exc:
            self._reject(name, args, str(exc))
            return
        self._enqueue(parsed, None)

    def _reject(self, name: str, args: Sequence[Any], reason: str) -> None:
        record = rejection_record(name, args, reason, _ts())
        workflow.logger.warning("rejected input %s", record)
        self._flags.rejected.append(record)
        del self._flags.rejected[:-MAX_REJECTED_INPUTS]

    def _validate(self, name: str, args: Sequence[Any]) -> None:
        args, deliver_by = delivery_terms(args)
        if deliver_by is not None and workflow.now().timestamp() * 1000 > deliver_by:
            # Its sender stopped waiting (this run was stuck, or no worker took
            # it in time) and may have told its caller it was not applied: it
            # never is. Validators do not run on replay, so this adds nothing
            # to the history and changes no command.
            raise expired(
                f"the {name} input reached turn {self._turn_id} after its sender's deadline; "
                "it was not applied: send it again"
            )
        parsed = accept_input(name, args)
        if self._reducer is not None:
            # Before the first load the input is checked when it is applied.
            advance.check_input(self._state, parsed)

    async def _update(self, name: str, args: Sequence[Any]) -> dict[str, Any]:
        try:
            # The validator accepted it; a replay (which skips validators) sees the same.
            parsed = accept_input(name, delivery_terms(args)[0])
        except RejectedInputError as exc:
            raise rejection(str(exc)) from None
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._enqueue(parsed, waiter)
        return await waiter

    async def _apply_input(self, queued: Queued) -> None:
        staged = queued.input
        try:
            advance.check_input(self._state, queued.input)
            # §15.3: an input is applied only if the live environment still
            # matches the snapshot; otherwise it is rejected and nothing is written.
            await self._local(
                Activities.validate_dependencies,
                ValidateDependenciesInput(turn_id=self._turn_id),
                reject=True,
            )
            if isinstance(staged, StagedAsyncToolProgressInput | StagedAsyncToolResultInput):
                # Only this new input shape takes this path, so the commands of
                # recorded histories are unchanged. A value that is missing or
                # does not match is rejected here, like a stale input.
                await self._append_built(staged=staged)
        except _Unserviceable as exc:
            # This worker lacks the turn's model or a tool: nothing is written, and
            # the caller hears a dependency error (exit 1, HTTP 503) naming it, not a
            # rejection it would retry. The same update failure, so no new command.
            self._reject(queued.input.type, [queued.input.to_wire()], str(exc))
            if queued.waiter is not None and not queued.waiter.done():
                queued.waiter.set_exception(dependency_failure(str(exc)))
            return
        except RejectedInputError as exc:
            # Valid when it arrived, stale by its turn in the queue.
            self._reject(queued.input.type, [queued.input.to_wire()], str(exc))
            if queued.waiter is not None and not queued.waiter.done():
                queued.waiter.set_exception(rejection(str(exc)))
            return
        except BaseException:
            if queued.waiter is not None:
                self._settle_waiters.append(queued.waiter)  # answered by the run's failure
            raise
        if queued.waiter is not None:
            # From here on the caller waits for the next settle point (or the
            # run's failure, which answers every settle waiter).
            self._settle_waiters.append(queued.waiter)
        match queued.input:
            case StagedAsyncToolProgressInput() | StagedAsyncToolResultInput():
                pass  # appended above
            case inline:
                await self._append(advance.input_events(self._state, inline, _ts()))
        if self._state.suspension is None and self._state.terminal is None:
            # The turn left its settle point: Temporal Web shows it working again.
            workflow.upsert_search_attributes([TURN_STATUS.value_set("running")])

    # Every handler takes *args: Temporal delivers whatever the sender passed
    # (no payload, two, anything), and a handler that cannot bind its
    # arguments would fail every workflow task of the turn.

    @workflow.signal(name="permission_decision")
    def permission_decision_signal(self, *args: Any) -> None:
        self._signal("permission_decision", args)

    @workflow.signal(name="async_tool_progress")
    def async_tool_progress_signal(self, *args: Any) -> None:
        self._signal("async_tool_progress", args)

    @workflow.signal(name="async_tool_result")
    def async_tool_result_signal(self, *args: Any) -> None:
        self._signal("async_tool_result", args)

    @workflow.signal(name="cancel")
    def cancel_signal(self, *args: Any) -> None:
        self._signal("cancel", args)

    @workflow.signal(dynamic=True)
    def other_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """A signal of any other name carries no input (a mistyped ``approve``):
        listed like an invalid one, rather than buffered unseen for a handler
        that never comes."""
        self._reject(
            name,
            [self._decoded(a) for a in args],
            f"the turn has no {name!r} signal; its inputs are the signals {', '.join(INPUT_NAMES)}",
        )

    @staticmethod
    def _decoded(raw: RawValue) -> Any:
        try:
            return workflow.payload_converter().from_payload(raw.payload)
        except Exception:
            # Listed by size and digest only, like any value: its bytes as text.
            return raw.payload.data.decode("utf-8", "replace")

    @workflow.update(name="settle")
    async def settle_update(self, *args: Any) -> dict[str, Any]:
        """The next settled outcome (now, if the turn is settled): advanceTurn with no input."""
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        outcome = self._outcome() if self._idle else None
        if outcome is not None:
            if (
                self._state.terminal is None
                and self._cancel is None
                and _patched(_VALIDATE_ON_SETTLE)
            ):
                # §15.3 / §18 step 8: every advance validates the live
                # environment, also one with no input on a suspended turn. A
                # failure rejects this advance only; nothing is written.
                await self._local(
                    Activities.validate_dependencies,
                    ValidateDependenciesInput(turn_id=self._turn_id),
                )
                outcome = self._outcome() or outcome
            return outcome
        self._settle_waiters.append(waiter)
        return await waiter

    @workflow.update(name="permission_decision")
    async def permission_decision_update(self, *args: Any) -> dict[str, Any]:
        return await self._update("permission_decision", args)

    @permission_decision_update.validator
    def _v_permission(self, *args: Any) -> None:
        self._validate("permission_decision", args)

    @workflow.update(name="async_tool_progress")
    async def async_tool_progress_update(self, *args: Any) -> dict[str, Any]:
        return await self._update("async_tool_progress", args)

    @async_tool_progress_update.validator
    def _v_progress(self, *args: Any) -> None:
        self._validate("async_tool_progress", args)

    @workflow.update(name="async_tool_result")
    async def async_tool_result_update(self, *args: Any) -> dict[str, Any]:
        return await self._update("async_tool_result", args)

    @async_tool_result_update.validator
    def _v_result(self, *args: Any) -> None:
        self._validate("async_tool_result", args)

    @workflow.update(name="cancel")
    async def cancel_update(self, *args: Any) -> dict[str, Any]:
        return await self._update("cancel", args)

    @cancel_update.validator
    def _v_cancel(self, *args: Any) -> None:
        self._validate("cancel", args)

    # --------------------------------------------------------------- queries

    @workflow.query(name="state")
    def state_query(self) -> dict[str, Any]:
        if self._reducer is None or not self._reducer.started:
            return {"loading": True, "rejectedInputs": list(self._flags.rejected)}
        wire = self._reducer.state.to_wire()  # the file's own (inherited) snapshot
        wire["rejectedInputs"] = list(self._flags.rejected)
        return wire

    @workflow.query(name="outcome")
    def outcome_query(self) -> dict[str, Any] | None:
        return self._outcome()

    def _outcome(self) -> dict[str, Any] | None:
        if self._reducer is None or not self._reducer.started:
            return None
        outcome = advance.outcome_of(self._state)
        if outcome is None:
            return None
        return {"turnId": self._turn_id, **outcome.to_wire()}

    # ---------------------------------------------------------- cancellation

    async def _cancel_turn(self) -> None:
        """Cancel what runs, wait for it, reload, then close the turn (§22)."""
        for task in list(self._running.values()):
            task.cancel()
        if self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)
        handle = self._model_handle
        if handle is not None and not handle.done():
            handle.cancel()
            await asyncio.gather(handle, return_exceptions=True)
        await self._reload(recover=False)
        state = self._state
        if state.terminal is None and isinstance(
            advance.next_action(state, ts=_ts()), advance.Complete
        ):
            # The final response is recorded: the turn completes (§18 10.l); a
            # cancel can only stop work that is still open.
            await self._append_derived("completion")
        elif state.terminal is None:
            reason = self._cancel.reason if self._cancel is not None else None
            await self._append(advance.cancellation_events(state, reason, _ts()))
        await self._settled()

    # ---------------------------------------------------------- settle points

    async def _settled(self) -> None:
        """At a settle point: publish status for Temporal Web and answer waiting updates."""
        state = self._state
        status = state.terminal.type.removeprefix("turn_") if state.terminal else "suspended"
        if state.terminal is not None and not self._ended_before:
            self._ended_before = True
            _count_settled(status)
        pending = [f"permission:{p.tool_call_id}" for p in state.pending_permissions()]
        pending += [f"async:{p.tool_call_id}" for p in state.pending_async_tools()]
        listed = ",".join(pending)
        if keyword_size(listed) > MAX_KEYWORD_BYTES and _patched(_BOUND_PENDING):
            # Temporal fails (and the server then terminates) a run whose keyword
            # value is longer: many parallel calls, or one very long call id.
            listed = _bounded_list(pending, MAX_KEYWORD_BYTES)
        resolved = state.definition.agent.resolved
        pairs: list[SearchAttributeUpdate[Any]] = [
            TURN_STATUS.value_set(status),
            TURN_AGENT.value_set(resolved.agent_id),
            TURN_MODEL.value_set(resolved.model.label()),
            TURN_PENDING.value_set(listed),
        ]
        if state.definition.session_id:
            pairs.append(TURN_SESSION.value_set(state.definition.session_id))
        workflow.upsert_search_attributes(pairs)
        workflow.set_current_details(_details(state) if state.terminal is None else "")
        if state.terminal is not None and self._queue and _patched(_REJECT_QUEUED):
            # Inputs still queued here were overtaken by a cancel (the only way
            # a turn ends with inputs waiting): they are late (§22). Rejecting
            # them answers their updates, so the run can close.
            self._reject_queued()
        outcome = self._outcome()
        if outcome is not None:
            self._release_waiters(outcome)

    def _reject_queued(self) -> None:
        """Reject every queued input against the ended turn: listed, and its update fails."""
        terminal = self._state.terminal
        assert terminal is not None
        while self._queue:
            queued = self._queue.popleft()
            reason = (
                f"turn {self._turn_id} already ended ({terminal.type}); "
                f"{queued.input.type} is not accepted"
            )
            self._reject(queued.input.type, [queued.input.to_wire()], reason)
            if queued.waiter is not None and not queued.waiter.done():
                queued.waiter.set_exception(rejection(reason))

    def _fail_waiters(self, exc: ApplicationError) -> None:
        self._idle = True
        waiters, self._settle_waiters = self._settle_waiters, []
        waiters += [q.waiter for q in self._queue if q.waiter is not None]
        self._queue.clear()
        for w in waiters:
            if not w.done():
                w.set_exception(infrastructure_failure(exc.message, exc.type))

    def _release_waiters(self, outcome: dict[str, Any]) -> None:
        waiters, self._settle_waiters = self._settle_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(outcome)

    # ---------------------------------------------------------------- plumbing

    async def _local(
        self,
        activity: Callable[[Any, _I], Awaitable[_R]],
        arg: _I,
        *,
        reject: bool = False,
        queued: bool = False,
    ) -> _R:
        """Run one of the retry-safe local activities.

        A dependency failure ends the run as ``DependencyError`` (§15.3), or,
        with ``reject``, rejects the input being applied instead. ``queued`` runs
        it as a regular activity instead, on whichever worker takes work.
        """
        try:
            execute = (
                workflow.execute_activity_method
                if queued
                else workflow.execute_local_activity_method
            )
            return await execute(
                activity,
                arg,
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=_SAFE_RETRY,
                summary=activity.__name__.replace("_", " "),
            )
        except (ActivityError, ApplicationError) as exc:
            if reject and is_rejection(exc):
                raise RejectedInputError(cause(exc)) from exc
            if is_dependency_failure(exc):
                message = f"turn {self._turn_id} cannot advance: {cause(exc)}"
                if reject:
                    raise _Unserviceable(message) from exc
                raise dependency_failure(message) from exc
            raise


class _Unserviceable(Exception):
    """An input cannot be applied because this worker lacks a live dependency (§15.3)."""


def _count(name: str, description: str, attributes: dict[str, str] | None = None) -> None:
    # The workflow's meter records nothing while replaying, so each count is
    # made once, by the run that did the work (see docs/operations.md).
    workflow.metric_meter().create_counter(name, description, "turns").add(1, attributes)


def _count_settled(status: str) -> None:
    _count("turncore_turns_settled", "Turns reaching a settle point", {"status": status})


def _infrastructure_failure(exc: ActivityError) -> ApplicationError:
    failure = failure_of(exc)
    return infrastructure_failure(cause(exc), failure.type if failure is not None else None)


def keyword_size(text: str) -> int:
    """The bytes Temporal counts for a keyword value: its JSON payload, quotes included."""
    return len(json.dumps(text))


def _bounded_list(items: Sequence[str], limit: int) -> str:
    """``KIND:ID`` items joined by commas in a keyword of at most ``limit`` bytes: those
    that fit, then ``KIND:…N more`` for each kind cut (``pending_count`` reads both)."""
    kinds = dict.fromkeys(item.partition(":")[0] for item in items)
    # Room for the quotes and for every kind's count, however many are cut.
    reserve = 2 + sum(keyword_size(f",{k}:…{len(items)} more") - 2 for k in kinds)
    kept: list[str] = []
    size = 0
    for item in items:
        size += keyword_size(item) - 2 + 1
        if size + reserve > limit:
            break
        kept.append(item)
    cut = Counter(item.partition(":")[0] for item in items[len(kept) :])
    return ",".join([*kept, *(f"{k}:…{n} more" for k, n in cut.items())])


def pending_count(listed: str, kind: str) -> int:
    """How many ``kind`` inputs a ``TurnPendingInputs`` value names, counting cut ones."""
    count = 0
    for item in listed.split(","):
        prefix, _, rest = item.partition(":")
        if prefix != kind:
            continue
        more = rest.removeprefix("…").removesuffix(" more")
        count += int(more) if rest != more and more.isdigit() else 1
    return count


def _details(state: TurnState) -> str:
    lines = [
        f"awaiting approval: {p.tool_name} ({p.tool_call_id})" for p in state.pending_permissions()
    ]
    lines += [
        f"awaiting result: {p.tool_name} ({p.tool_call_id})" for p in state.pending_async_tools()
    ]
    return "\n".join(lines)


__all__ = [
    "SEARCH_ATTRIBUTES",
    "TurnWorkflow",
    "TurnWorkflowInput",
    "keyword_size",
    "pending_count",
]
