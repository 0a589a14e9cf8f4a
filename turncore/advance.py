"""The turn loop's decisions as pure functions of ``TurnState`` (spec §9–§12, §18, §20, §23).

Theory of operation
-------------------
``next_action(state, running=…, allowed=…, ts=…)`` is the loop: it returns
the one next thing to do as data (an ``Action``), in a fixed order — close
calls to unknown tools, ask the permission checker, ask the classifier,
deny what must be denied, invoke what is allowed, start sync tools, and once
nothing about tools can be decided: wait for running tools, suspend on what
awaits the outside, complete, fail at the model-call limit, or call the model.
The workflow (``workflows/turn.py``) and the in-process runner
(``bench/_inprocess.py``) only interpret actions: run the activity an action
names, append what it says, feed the result back, ask again. Every function
mints events with the ``ts`` it is given and never reads a clock, so the
workflow stays deterministic and the order is tested without Temporal
(tests/test_advance.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import assert_never

from .errors import RejectedInputError
from .events import (
    AsyncToolProgressInput,
    AsyncToolResultInput,
    CancelInput,
    CancelledOutcome,
    CompletedOutcome,
    ExternalDelivery,
    FailedOutcome,
    ModelCallFailed,
    PermissionDecisionInput,
    ResolvedAgent,
    StagedAsyncToolProgressInput,
    StagedAsyncToolResultInput,
    SuspendedOutcome,
    ToolDescriptor,
    ToolInvocationRequested,
    ToolPermissionClassificationFailed,
    ToolPermissionClassified,
    ToolPermissionRequired,
    ToolPermissionResolved,
    ToolProgress,
    ToolResult,
    ToolResultData,
    TurnCancelled,
    TurnCompleted,
    TurnEvent,
    TurnExternalInput,
    TurnFailed,
    TurnOutcome,
    TurnSuspended,
)
from .jsonvalue import JsonTooDeepError, JsonValue, json_problem, loads_exact
from .output import OUTPUT_INVALID_CODE, answer_errors, output_spec
from .permissions import PermissionCheck, PermissionClassification
from .reducer import ToolCallState, TurnState
from .subagents import SPAWN_AGENT_TOOL_ID, linked_child

INTERRUPTED_TOOL_RESULT = (
    "Tool execution was interrupted; its outcome is unknown and it was not retried."
)
INTERRUPTED_MODEL_CALL = "Model call was interrupted before it finished; it will be re-issued."
HUMAN_UNAVAILABLE_RESULT = "Human input is unavailable for this turn."
MODEL_CALL_LIMIT_CODE = "model-call-limit"
REFUSED_RESPONSE_CODE = "model-call-failed:protocol:accepted"
"""``turn_failed.code`` when the reducer refuses a model response (a tool-call id
twice in one response, §24): the provider accepted the request and answered
with something the log cannot hold. The call is recorded as failed and never
re-issued. (The model-failure code scheme, ``turncore.model.failure_code``.)"""


Tools = Sequence[ToolDescriptor] | None
"""The turn's materialized tool set (§6.7): what an inherited snapshot's chain
resolves to. Callers pass it for inherited snapshots; a full snapshot carries
its own tools and ignores it."""


def snapshot_tools(state: TurnState, materialized: Tools = None) -> Tools:
    """The turn's tools: its own snapshot's, else the materialized chain's, else unknown."""
    resolved = state.definition.agent.resolved
    if isinstance(resolved, ResolvedAgent):
        return resolved.tools
    return materialized


def descriptor_for(
    state: TurnState, call: ToolCallState, tools: Tools = None
) -> ToolDescriptor | None:
    for d in snapshot_tools(state, tools) or ():
        if d.name == call.tool_name:
            return d
    return None


def _runtime_error(state: TurnState, call: ToolCallState, message: str, ts: str) -> ToolResult:
    return ToolResult(
        turn_id=state.definition.turn_id,
        ts=ts,
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        source="runtime",
        result=ToolResultData(output=message, is_error=True),
    )


# ---------------------------------------------------------------- recovery (§23)


def close_interrupted_model_call(state: TurnState, ts: str) -> list[TurnEvent]:
    """An unmatched model request is closed as interrupted (and later re-issued)."""
    call = state.open_model_call()
    if call is None:
        return []
    return [
        ModelCallFailed(
            turn_id=state.definition.turn_id,
            ts=ts,
            model_call_index=call.index,
            error=INTERRUPTED_MODEL_CALL,
        )
    ]


def interrupted_sync_results(
    state: TurnState, running: Collection[str], ts: str
) -> list[TurnEvent]:
    """Unmatched sync invocations that are not running here get the indeterminate result."""
    return [
        _runtime_error(state, t, INTERRUPTED_TOOL_RESULT, ts)
        for t in state.running_sync_tools()
        if t.tool_call_id not in running
    ]


def orphaned_children(
    state: TurnState, running: Collection[str]
) -> list[tuple[ToolCallState, str]]:
    """``spawn_agent`` calls whose child turn a lost run started, not running here:
    the recovered run waits for those children instead of closing the calls."""
    out: list[tuple[ToolCallState, str]] = []
    for t in state.tool_calls:
        if (
            t.result is None
            and t.invocation is not None
            and t.invocation.tool_id == SPAWN_AGENT_TOOL_ID
            and t.tool_call_id not in running
        ):
            child = linked_child(t.progress)
            if child is not None:
                out.append((t, child))
    return out


# ---------------------------------------------------------------- permissions (§9)


def unusable_call_results(state: TurnState, ts: str, tools: Tools = None) -> list[TurnEvent]:
    """Calls the runtime cannot run become runtime errors the model can see (§21.3).

    Unknown tools (outside the snapshot), and calls whose arguments are not a
    JSON object where the tool's schema wants one (adapters keep arguments
    that do not parse as JSON verbatim, as a string). The tool never runs and
    no permission is asked; the turn continues.
    """
    if snapshot_tools(state, tools) is None:
        return []  # an inherited snapshot not materialized here: nothing can be decided
    out: list[TurnEvent] = []
    for t in state.unresolved_tool_calls():
        if t.phase != "proposed":
            continue
        d = descriptor_for(state, t, tools)
        if d is None:
            why = f"Unknown tool {t.tool_name!r}; it is not available in this turn."
        else:
            problem = _argument_problem(t.input, d)
            if problem is None:
                continue
            why = (
                f"The arguments of this {t.tool_name} call {problem}; the tool did not run. "
                "Call it again with a JSON object that matches its input schema."
            )
        out.append(_runtime_error(state, t, why, ts))
    return out


def _argument_problem(value: JsonValue, tool: ToolDescriptor) -> str | None:
    """Why ``value`` cannot be a call's input for ``tool``, or None if it can.

    Every provider wire sends tool arguments as one JSON object, so an object
    is required unless the tool's schema declares another top-level type.
    """
    schema = tool.input_schema
    wanted = schema.get("type", "object") if isinstance(schema, dict) else "object"
    if not (wanted == "object" or (isinstance(wanted, list) and "object" in wanted)):
        return None
    if isinstance(value, dict):
        return None
    if isinstance(value, str):
        # The adapters keep arguments as text when they are not JSON, or are
        # JSON no turn may hold (parse_arguments); say which.
        try:
            parsed = loads_exact(value)
        except JsonTooDeepError as exc:
            return f"are {exc}"
        except ValueError:
            return "are not valid JSON"
        problem = json_problem(parsed)
        if problem is not None:
            return f"hold a value no turn can store: {problem}"
    kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )
    return f"are not a JSON object (they are {kind})"


def calls_needing_check(
    state: TurnState, allowed: Collection[str] = frozenset(), tools: Tools = None
) -> list[ToolCallState]:
    """Unresolved calls whose permission has not been determined yet.

    ``allowed`` are calls the checker already allowed outright (no durable
    record of that exists until their invocation is appended). Each call
    carries its tool's id, from the materialized snapshot when the turn's own
    is inherited (the reducer leaves it unknown until invocation).
    """
    out: list[ToolCallState] = []
    for t in state.unresolved_tool_calls():
        if t.phase != "proposed" or t.tool_call_id in allowed:
            continue
        d = descriptor_for(state, t, tools)
        if d is not None:
            out.append(t if t.tool_id == d.tool_id else t.model_copy(update={"tool_id": d.tool_id}))
    return out


def permission_required_events(
    state: TurnState,
    checks: dict[str, PermissionCheck | str],
    ts: str,
    allowed: Collection[str] = frozenset(),
    tools: Tools = None,
) -> tuple[list[TurnEvent], list[str]]:
    """Record required permissions; return them and the ids allowed outright.

    A check that is a string is the checker's error: it is recorded and the
    call is never executed automatically (fails closed, §9.3).
    """
    events: list[TurnEvent] = []
    allowed_now: list[str] = []
    for t in calls_needing_check(state, allowed, tools):
        check = checks.get(t.tool_call_id)
        if check is None:
            check = "the permission checker returned no answer for this call"
        if isinstance(check, str):
            events.append(
                ToolPermissionRequired(
                    turn_id=state.definition.turn_id,
                    ts=ts,
                    tool_call_id=t.tool_call_id,
                    tool_name=t.tool_name,
                    request={"kind": "tool", "toolName": t.tool_name, "input": t.input},
                    checker_error=check,
                )
            )
        elif check.required:
            events.append(
                ToolPermissionRequired(
                    turn_id=state.definition.turn_id,
                    ts=ts,
                    tool_call_id=t.tool_call_id,
                    tool_name=t.tool_name,
                    request=check.request,
                )
            )
        else:
            allowed_now.append(t.tool_call_id)
    return events, allowed_now


def calls_needing_classification(state: TurnState) -> list[ToolCallState]:
    """Required permissions the classifier decides (only an autoPermission turn has any)."""
    return [t for t in state.tool_calls if t.phase == "permission_required"]


def classification_events(
    state: TurnState,
    classifications: Sequence[PermissionClassification] | None,
    error: str | None,
    ts: str,
    *,
    stamped: bool = False,
) -> list[TurnEvent]:
    """Classifier answers → classified records and effective decisions.

    Failures and omitted decisions are recorded and treated as defer.
    ``stamped``: the decisions' ``metadata`` says who decided, as every
    surface's does (``{"via": "classifier", "at": ts}``).
    """
    turn_id = state.definition.turn_id
    targets = calls_needing_classification(state)
    by_id = {c.tool_call_id: c for c in classifications or []}
    events: list[TurnEvent] = []
    missing: list[str] = []
    for t in targets:
        c = by_id.get(t.tool_call_id) if error is None else None
        if c is None:
            missing.append(t.tool_call_id)
            continue
        events.append(
            ToolPermissionClassified(
                turn_id=turn_id,
                ts=ts,
                tool_call_id=t.tool_call_id,
                decision=c.decision,
                reason=c.reason,
            )
        )
        if c.decision in ("allow", "deny"):
            events.append(
                ToolPermissionResolved(
                    turn_id=turn_id,
                    ts=ts,
                    tool_call_id=t.tool_call_id,
                    decision="allow" if c.decision == "allow" else "deny",
                    source="classifier",
                    reason=c.reason,
                    metadata={"via": "classifier", "at": ts} if stamped else None,
                )
            )
    if missing:
        events.append(
            ToolPermissionClassificationFailed(
                turn_id=turn_id,
                ts=ts,
                tool_call_ids=missing,
                error=error or "the classifier returned no decision for these calls",
            )
        )
    return events


def classified_resolutions(state: TurnState, ts: str) -> list[TurnEvent]:
    """The classifier's effective decision for an allow/deny it recorded without one.

    ``classification_events`` writes both in one batch; a log cut between
    them (§23 "classification partially processed") continues here rather
    than waiting for a decision nobody else will make.
    """
    out: list[TurnEvent] = []
    for t in state.tool_calls:
        c = t.permission.classification if t.permission is not None else None
        if t.phase != "classified" or c is None:
            continue
        out.append(
            ToolPermissionResolved(
                turn_id=state.definition.turn_id,
                ts=ts,
                tool_call_id=t.tool_call_id,
                decision="allow" if c.decision == "allow" else "deny",
                source="classifier",
                reason=c.reason,
            )
        )
    return out


def human_unavailable_denials(state: TurnState, ts: str) -> list[TurnEvent]:
    """Without a human, every permission still waiting on one is denied (§9.3)."""
    if state.definition.config.human_available:
        return []
    return [
        ToolPermissionResolved(
            turn_id=state.definition.turn_id,
            ts=ts,
            tool_call_id=p.tool_call_id,
            decision="deny",
            source="human_unavailable",
            reason="no human is available to decide",
        )
        for p in state.pending_permissions()
    ]


def denial_results(state: TurnState, ts: str) -> list[TurnEvent]:
    """Denied calls receive an immediate runtime error result."""
    out: list[TurnEvent] = []
    for t in state.tool_calls:
        resolved = t.permission.resolved if t.permission else None
        if t.phase == "denied" and resolved is not None:
            who = {"human": "a human", "classifier": "the permission classifier"}.get(
                resolved.source, "the runtime (no human available)"
            )
            reason = f": {resolved.reason}" if resolved.reason else ""
            out.append(
                _runtime_error(
                    state, t, f"Permission to run {t.tool_name} was denied by {who}{reason}.", ts
                )
            )
    return out


def invocation_events(
    state: TurnState, allowed_now: Collection[str], ts: str, tools: Tools = None
) -> list[TurnEvent]:
    """Invocations for every allowed, not yet invoked call, in source order (§10.5).

    ``allowed_now`` are calls the checker allowed outright (no durable record
    of that exists). Human-dependent tools without a human get their
    invocation and an immediate runtime error (§10.2).
    """
    turn_id = state.definition.turn_id
    human = state.definition.config.human_available
    events: list[TurnEvent] = []
    for t in state.tool_calls:
        allowed = t.phase == "allowed" or (t.phase == "proposed" and t.tool_call_id in allowed_now)
        if not allowed:
            continue
        d = descriptor_for(state, t, tools)
        if d is None:
            continue
        events.append(
            ToolInvocationRequested(
                turn_id=turn_id,
                ts=ts,
                tool_call_id=t.tool_call_id,
                tool_id=d.tool_id,
                tool_name=t.tool_name,
                execution=d.execution,
                input=t.input,
            )
        )
        if d.requires_human and not human:
            events.append(_runtime_error(state, t, HUMAN_UNAVAILABLE_RESULT, ts))
    return events


def invoked_ids(events: Sequence[TurnEvent]) -> set[str]:
    """The calls ``events`` invoke: their checker allow-outright is now durable.

    Callers drop these from the ``allowed`` they keep, so an id a later
    response reuses (§24) is checked afresh instead of inheriting the grant.
    """
    return {e.tool_call_id for e in events if isinstance(e, ToolInvocationRequested)}


# ---------------------------------------------------------------- fast tools


def fast_batch(
    events: Sequence[TurnEvent], fast: Mapping[str, float]
) -> list[ToolInvocationRequested] | None:
    """The invocations of ``events`` when all of them invoke fast sync tools, else None.

    Such a batch runs as one local activity that appends the invocations itself,
    then runs the tools. A batch that also invokes anything else (a plain sync
    tool, an async tool, ``spawn_agent``, a human-dependent tool without a human)
    is appended and run the plain way, fast tools included: §10.5 wants every
    invocation of a batch durable before any of its tools starts.
    """
    invocations = [e for e in events if isinstance(e, ToolInvocationRequested)]
    if not invocations or len(invocations) != len(events):
        return None
    if all(e.execution == "sync" and e.tool_id in fast for e in invocations):
        return invocations
    return None


@dataclass(frozen=True)
class FastAttempt:
    """What one attempt of a fast batch does, decided from the file (§23)."""

    found: list[TurnEvent]
    """Lines a lost attempt wrote for these calls (invocations, progress, results)."""
    invoke: list[ToolInvocationRequested]
    """Invocations to append now, in source order; their tools then run."""
    interrupted: list[TurnEvent]
    """Indeterminate results for calls a lost attempt invoked and did not finish:
    it may have started them, so they are never run again."""


def fast_attempt(
    state: TurnState,
    log: Sequence[TurnEvent],
    invocations: Sequence[ToolInvocationRequested],
    ts: str,
) -> FastAttempt:
    """Plan an attempt of a fast batch against ``state`` (the file as read now).

    A local activity may be executed again after its worker died: only the file
    says whether an earlier attempt got as far as invoking a call. Invoked without
    a result: interrupted (never re-run). Invoked with a result: done. Not
    invoked: invoke and run it.
    """
    ids = {e.tool_call_id for e in invocations}
    found: list[TurnEvent] = [
        e
        for e in log
        if isinstance(e, (ToolInvocationRequested, ToolProgress, ToolResult))
        and e.tool_call_id in ids
    ]
    invoke: list[ToolInvocationRequested] = []
    interrupted: list[TurnEvent] = []
    for e in invocations:
        call = state.tool_call(e.tool_call_id)
        if call is None or call.invocation is None:
            invoke.append(e)
        elif call.result is None:
            interrupted.append(_runtime_error(state, call, INTERRUPTED_TOOL_RESULT, ts))
    return FastAttempt(found=found, invoke=invoke, interrupted=interrupted)


def fast_overrun_result(name: str, bound: float) -> ToolResultData:
    """The error result of a fast tool that did not finish within its bound."""
    return ToolResultData(
        output=(
            f"Tool {name} did not finish within its {bound:g} s bound as a fast tool; "
            "its outcome is unknown and it was not retried."
        ),
        is_error=True,
    )


def sync_calls_to_start(state: TurnState, running: Collection[str]) -> list[ToolCallState]:
    return [t for t in state.running_sync_tools() if t.tool_call_id not in running]


# ---------------------------------------------------------------- settling


@dataclass(frozen=True)
class Append:
    """Append these events (decided here, minted with the loop's ``ts``)."""

    events: list[TurnEvent]


@dataclass(frozen=True)
class CheckPermissions:
    """Ask the permission checker about these calls (``permission_required_events``)."""

    calls: list[ToolCallState]


@dataclass(frozen=True)
class Classify:
    """Ask the classifier about these calls (``classification_events``)."""

    calls: list[ToolCallState]


@dataclass(frozen=True)
class StartTools:
    """Start these invoked sync tools; each appends its own result."""

    calls: list[ToolCallState]


@dataclass(frozen=True)
class Wait:
    """Nothing to decide until a running tool finishes or an input arrives."""


@dataclass(frozen=True)
class Suspend:
    """Settle until an input arrives; append ``event`` first unless it is None
    (the file already ends with the same snapshot)."""

    event: TurnSuspended | None


@dataclass(frozen=True)
class Complete:
    """Append ``turn_completed``. The append activity derives it from the file,
    which holds the last response in full (the workflow may hold it elided)."""


@dataclass(frozen=True)
class FailLimit:
    """Append ``turn_failed``: the model-call limit is reached, or the final
    answer is still invalid after its retries (``output-invalid``)."""

    event: TurnFailed


@dataclass(frozen=True)
class CallModel:
    """Run model call ``index``."""

    index: int


@dataclass(frozen=True)
class Done:
    """The turn has ended; there is nothing left to do."""


Action = (
    Append
    | CheckPermissions
    | Classify
    | StartTools
    | Wait
    | Suspend
    | Complete
    | FailLimit
    | CallModel
    | Done
)


def next_action(
    state: TurnState,
    *,
    running: Collection[str] = frozenset(),
    allowed: Collection[str] = frozenset(),
    tools: Tools = None,
    ts: str,
) -> Action:
    """The one next step of the turn loop (see the module docstring for the order).

    ``running``: ids of sync tool calls executing now. ``allowed``: calls the
    permission checker allowed outright, not invoked yet. ``tools``: an
    inherited snapshot's materialized tools (§6.7; ignored for a full one).
    """
    if state.terminal is not None:
        return Done()
    unknown = unusable_call_results(state, ts, tools)
    if unknown:
        return Append(unknown)
    to_check = calls_needing_check(state, allowed, tools)
    if to_check:
        return CheckPermissions(to_check)
    to_classify = calls_needing_classification(state)
    if to_classify:
        return Classify(to_classify)
    for events in (
        classified_resolutions(state, ts),
        human_unavailable_denials(state, ts),
        denial_results(state, ts),
        # All invocations, in source order, before any tool starts (§10.5).
        invocation_events(state, allowed, ts, tools),
    ):
        if events:
            return Append(events)
    to_start = sync_calls_to_start(state, running)
    if to_start:
        return StartTools(to_start)
    if running:
        return Wait()
    if state.pending_permissions() or state.pending_async_tools():
        return Suspend(suspension_event(state, ts))
    if state.unresolved_tool_calls():
        # Every unresolved call is running, awaited or decided above.
        return Wait()
    last = state.model_calls[-1] if state.model_calls else None
    if last is not None and last.response is not None and not last.response.tool_calls():
        verdict = answer_verdict(state, ts)
        if verdict is None:
            return Complete()
        if verdict:
            return FailLimit(verdict[0])
        # An invalid answer with retries left: the model answers again.
    if len(state.model_calls) >= state.definition.config.max_model_calls:
        return FailLimit(limit_failure_event(state, ts))
    return CallModel(len(state.model_calls))


def suspension_event(state: TurnState, ts: str) -> TurnSuspended | None:
    """A fresh snapshot, or None when the last event already is an identical one."""
    event = TurnSuspended(
        turn_id=state.definition.turn_id,
        ts=ts,
        pending_permissions=state.pending_permissions(),
        pending_async_tools=state.pending_async_tools(),
        usage=state.usage,
    )
    current = state.suspension
    if current is not None and current.model_copy(update={"ts": ts}) == event:
        return None
    return event


def completion_event(state: TurnState, ts: str) -> TurnCompleted:
    last = state.model_calls[-1]
    assert last.response is not None and last.finish_reason is not None
    return TurnCompleted(
        turn_id=state.definition.turn_id,
        ts=ts,
        output=last.response,
        finish_reason=last.finish_reason,
        usage=state.usage,
    )


def answer_verdict(state: TurnState, ts: str) -> list[TurnFailed] | None:
    """What the final answer (the last response, without tool calls) decides.

    None: the turn completes (no output schema, or a valid answer). ``[failed]``:
    the answer is invalid and ``outputRetries`` answers were already sent back
    (``output-invalid``). ``[]``: invalid, and the model answers again; the
    composer sends the answer back with its errors (``turncore.output``).
    """
    spec = output_spec(state.definition.agent.requested)
    last = state.model_calls[-1].response if state.model_calls else None
    if spec is None or last is None:
        return None
    errors = answer_errors(spec, last)
    if not errors:
        return None
    answers = sum(
        1 for c in state.model_calls if c.response is not None and not c.response.tool_calls()
    )
    if answers <= spec.retries:
        return []
    listed = "; ".join(errors)
    tries = "answer" if answers == 1 else f"{answers} answers"
    return [
        failure_event(
            state,
            f"The model's final {tries} did not match the agent's output schema: {listed}. "
            "Make the schema easier to meet, give the agent clearer instructions, or raise "
            "output_retries.",
            ts,
            OUTPUT_INVALID_CODE,
        )
    ]


def final_answer_events(state: TurnState, ts: str) -> list[TurnEvent]:
    """The terminal event a response without tool calls settles, if any (see
    ``answer_verdict``): ``turn_completed``, ``turn_failed`` or nothing (answer again)."""
    verdict = answer_verdict(state, ts)
    if verdict is None:
        return [completion_event(state, ts)]
    return list(verdict)


def limit_failure_event(state: TurnState, ts: str) -> TurnFailed:
    n = state.definition.config.max_model_calls
    return TurnFailed(
        turn_id=state.definition.turn_id,
        ts=ts,
        error=f"The turn used all {n} model calls allowed by maxModelCalls without finishing.",
        code=MODEL_CALL_LIMIT_CODE,
        usage=state.usage,
    )


def failure_event(state: TurnState, error: str, ts: str, code: str | None = None) -> TurnFailed:
    return TurnFailed(
        turn_id=state.definition.turn_id, ts=ts, error=error, code=code, usage=state.usage
    )


def cancellation_events(state: TurnState, reason: str | None, ts: str) -> list[TurnEvent]:
    """Close everything still open, then ``turn_cancelled`` (§22)."""
    turn_id = state.definition.turn_id
    events: list[TurnEvent] = []
    open_call = state.open_model_call()
    if open_call is not None:
        events.append(
            ModelCallFailed(
                turn_id=turn_id,
                ts=ts,
                model_call_index=open_call.index,
                error="Model call was cancelled.",
            )
        )
    why = f": {reason}" if reason else ""
    for t in state.unresolved_tool_calls():
        events.append(
            _runtime_error(
                state, t, f"The turn was cancelled before this tool call finished{why}.", ts
            )
        )
    events.append(TurnCancelled(turn_id=turn_id, ts=ts, reason=reason, usage=state.usage))
    return events


def outcome_of(state: TurnState) -> TurnOutcome | None:
    """The §16.4 outcome at a settle point; None while work is still in progress."""
    terminal = state.terminal
    match terminal:
        case TurnCompleted():
            return CompletedOutcome(
                output=terminal.output, finish_reason=terminal.finish_reason, usage=terminal.usage
            )
        case TurnFailed():
            return FailedOutcome(error=terminal.error, code=terminal.code, usage=terminal.usage)
        case TurnCancelled():
            return CancelledOutcome(reason=terminal.reason, usage=terminal.usage)
        case None:
            pass
    if state.suspension is not None:
        s = state.suspension
        return SuspendedOutcome(
            pending_permissions=s.pending_permissions,
            pending_async_tools=s.pending_async_tools,
            usage=s.usage,
        )
    return None


# ---------------------------------------------------------------- external inputs (§11.2)


def check_input(state: TurnState, input: ExternalDelivery) -> None:
    """Raise ``RejectedInputError`` unless ``input`` targets something pending now.

    A staged input targets exactly what its inline form would: the same checks.
    """
    if state.terminal is not None:
        raise RejectedInputError(
            f"turn {state.definition.turn_id} already ended ({state.terminal.type}); "
            f"{input.type} is not accepted"
        )
    match input:
        case CancelInput():
            return
        case PermissionDecisionInput():
            call = _known_call(state, input.tool_call_id)
            if call.result is not None:
                raise RejectedInputError(f"tool call {input.tool_call_id} already has a result")
            if not any(p.tool_call_id == input.tool_call_id for p in state.pending_permissions()):
                if call.permission is None:
                    raise RejectedInputError(
                        f"tool call {input.tool_call_id} does not require permission"
                    )
                if call.permission.resolved is not None:
                    raise RejectedInputError(
                        f"permission for tool call {input.tool_call_id} was already resolved "
                        f"({call.permission.resolved.decision})"
                    )
                raise RejectedInputError(
                    f"permission for tool call {input.tool_call_id} is not awaiting a human decision"
                )
        case (
            AsyncToolProgressInput()
            | AsyncToolResultInput()
            | StagedAsyncToolProgressInput()
            | StagedAsyncToolResultInput()
        ):
            call = _known_call(state, input.tool_call_id)
            what = "progress" if input.type == "async_tool_progress" else "result"
            if call.result is not None:
                raise RejectedInputError(
                    f"tool call {input.tool_call_id} already has a result; {what} rejected"
                )
            if call.execution == "sync":
                raise RejectedInputError(
                    f"tool call {input.tool_call_id} is a sync tool; async {what}s are only accepted for async tools"
                )
            if call.invocation is None:
                raise RejectedInputError(
                    f"async tool call {input.tool_call_id} has not been dispatched yet (awaiting permission)"
                )
        case _:
            assert_never(input)


def _known_call(state: TurnState, tool_call_id: str) -> ToolCallState:
    call = state.tool_call(tool_call_id)
    if call is None:
        raise RejectedInputError(
            f"turn {state.definition.turn_id} has no tool call {tool_call_id!r}"
        )
    return call


def _stated_reason(metadata: JsonValue) -> str | None:
    if isinstance(metadata, dict):
        reason = metadata.get("reason")
        if isinstance(reason, str) and reason.strip():
            return reason
    return None


def input_events(state: TurnState, input: TurnExternalInput, ts: str) -> list[TurnEvent]:
    """The durable events of an accepted non-cancel input (check it first)."""
    turn_id = state.definition.turn_id
    match input:
        case PermissionDecisionInput():
            return [
                ToolPermissionResolved(
                    turn_id=turn_id,
                    ts=ts,
                    tool_call_id=input.tool_call_id,
                    decision=input.decision,
                    source="human",
                    # A human's stated reason (``turns deny --reason``) rides in
                    # the input's metadata; it becomes the decision's reason,
                    # which the denial result shows the model.
                    reason=_stated_reason(input.metadata),
                    metadata=input.metadata,
                )
            ]
        case AsyncToolProgressInput():
            return [
                ToolProgress(
                    turn_id=turn_id,
                    ts=ts,
                    tool_call_id=input.tool_call_id,
                    source="async",
                    progress=input.progress,
                )
            ]
        case AsyncToolResultInput():
            call = _known_call(state, input.tool_call_id)
            return [
                ToolResult(
                    turn_id=turn_id,
                    ts=ts,
                    tool_call_id=input.tool_call_id,
                    tool_name=call.tool_name,
                    source="async",
                    result=input.result,
                )
            ]
        case CancelInput():
            return cancellation_events(state, input.reason, ts)
