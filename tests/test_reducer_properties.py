"""Property tests for the reducer and the wire format (spec §14, §24).

``histories()`` generates valid turn logs: random numbers of model calls
(some interrupted and re-issued), tool batches mixing sync, async, human and
unknown tools, permissions (manual or classified allow/deny/defer/failed,
resolved by the classifier, a human or for lack of one), progress, results
landing in random physical order, suspension snapshots at random settle
points, and an ending that is a random terminal event or none at all.

On those we check that folding event by event agrees with the whole fold at every prefix, that
every event survives the JSON round trip, and that each of a catalogue of
single mutations, each breaking one §24 rule, is rejected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.histories import PREV_ID, TOOLS, History, created
from turncore.errors import CorruptTurnError
from turncore.events import (
    ContextRef,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallRequested,
    ModelRequest,
    StepError,
    StepFinish,
    StepReasoningEnd,
    StepReasoningStart,
    StepTextEnd,
    StepTextStart,
    StepToolCall,
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
    parse_event,
)
from turncore.messages import AssistantMessage, ToolCallPart, UserMessage
from turncore.reducer import TurnReducer, TurnState, reduce_turn

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

INTERRUPTED = "Tool execution was interrupted; its outcome is unknown and it was not retried."

# ---------------------------------------------------------------- JSON values

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)  # JSON's safe range
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
)
json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=6), inner, max_size=3
        )
    ),
    max_leaves=6,
)
usages = st.builds(
    TurnUsage,
    input_tokens=st.none() | st.integers(0, 10_000),
    output_tokens=st.none() | st.integers(0, 10_000),
    total_tokens=st.none() | st.integers(0, 20_000),
    reasoning_tokens=st.none() | st.integers(0, 1000),
    cached_input_tokens=st.none() | st.integers(0, 1000),
)
step_kinds = st.sampled_from(
    [StepTextStart(), StepTextEnd(), StepReasoningStart(), StepReasoningEnd(), StepError(error="e")]
)

# ---------------------------------------------------------------- valid histories

Thunk = Callable[[], object]


def _chain(draw: st.DrawFn, h: History, call_id: str, auto: bool, human: bool) -> list[Thunk]:
    """The facts one tool call goes through, in order; executing them appends events."""
    call = h.calls[call_id]
    d = call.descriptor
    out: list[Thunk] = []
    if d is None:
        return [lambda: h.result(call_id, f"Unknown tool {call.tool_name}.", is_error=True)]
    allowed = True
    if draw(st.booleans()):
        checker_error = draw(st.none() | st.just("checker crashed"))
        request = draw(json_values)
        out.append(lambda: h.require(call_id, request, checker_error=checker_error))
        ask_human = True
        if auto and checker_error is None:  # a checker error is never classified (§9.3)
            verdict = draw(st.sampled_from(["allow", "deny", "defer", "failed"]))
            if verdict == "failed":
                out.append(lambda: h.classification_failed([call_id]))
            else:
                out.append(lambda: h.classify(call_id, verdict, "because"))  # type: ignore[arg-type]
            if verdict in ("allow", "deny"):
                ask_human = False
                allowed = verdict == "allow"
                out.append(lambda: h.resolve(call_id, verdict, "classifier", "because"))  # type: ignore[arg-type]
        if ask_human:
            if human:
                allowed = draw(st.booleans())
                decision = "allow" if allowed else "deny"
                out.append(lambda: h.resolve(call_id, decision, "human"))  # type: ignore[arg-type]
            else:
                allowed = False
                out.append(lambda: h.resolve(call_id, "deny", "human_unavailable", "no human"))
    if not allowed:
        out.append(lambda: h.result(call_id, "Permission denied.", is_error=True))
        return out
    if d.requires_human and not human:
        # §10.2: the invocation and its runtime error land together; nothing waits between.
        def unavailable() -> None:
            h.invoke(call_id)
            h.result(
                call_id,
                "Human input is unavailable for this turn.",
                is_error=True,
                source="runtime",
            )

        out.append(unavailable)
        return out
    out.append(lambda: h.invoke(call_id))
    for _ in range(draw(st.integers(0, 2))):
        progress = draw(json_values)
        out.append(lambda progress=progress: h.progress(call_id, progress))
    ending = draw(
        st.sampled_from(
            ["ok", "error", "interrupted"] if d.execution == "sync" else ["ok", "error"]
        )
    )
    if ending == "interrupted":
        out.append(lambda: h.result(call_id, INTERRUPTED, is_error=True, source="runtime"))
    else:
        output = draw(json_values)
        out.append(lambda: h.result(call_id, output, is_error=ending == "error"))
    return out


def _maybe_suspend(draw: st.DrawFn, h: History) -> None:
    if h.can_suspend() and draw(st.integers(0, 3)) == 0:
        h.suspend()  # never twice in a row: a snapshot follows a change (§11.1)


@st.composite
def histories(draw: st.DrawFn) -> list[TurnEvent]:
    auto = draw(st.booleans())
    human = draw(st.booleans())
    max_calls = draw(st.integers(1, 6))
    context_kind = draw(st.sampled_from(["empty", "inline", "ref", "inherited"]))
    context: Any = ()
    if context_kind == "inline":
        context = [UserMessage(content="earlier"), AssistantMessage(content="reply")]
    elif context_kind in ("ref", "inherited"):
        context = ContextRef(previous_turn_id=PREV_ID)
    h = History(
        created(
            context=context,
            auto_permission=auto,
            human_available=human,
            max_model_calls=max_calls,
            inherited_from=PREV_ID if context_kind == "inherited" else None,
        )
    )
    if context_kind == "inherited":
        # Tool identity comes from invocations; give the builder descriptors anyway.
        by_name = {t.name: t for t in TOOLS}
        h.tools_by_name = lambda: by_name  # type: ignore[method-assign]
    names = ["read_file", "write_file", "run_job", "ask_human", "no_such_tool"]
    serial = 0
    if draw(st.integers(0, 9)) == 0:
        return _end_before_any_call(draw, h)
    while True:
        h.request(draw(st.sampled_from([{}, {"temperature": 0.5}])))
        steps = draw(st.lists(step_kinds, max_size=3))
        for s in steps:
            h.step(s)
        outcome = draw(
            st.sampled_from(
                ["tools"] * 8
                + ["answer"] * 3
                + ["interrupt", "interrupt", "fail", "cancel", "open"]
            )
        )
        if outcome == "open":
            return h.events
        if outcome in ("interrupt", "fail", "cancel"):
            h.fail_call(
                {"interrupt": "interrupted", "fail": "provider error", "cancel": "cancelled"}[
                    outcome
                ]
            )
            if outcome == "fail":
                h.fail_turn("provider error")
                return h.events
            if outcome == "cancel":
                h.cancel()
                return h.events
            if h.model_calls >= max_calls:
                h.fail_turn("model-call limit", code="model-call-limit")
                return h.events
            continue
        if outcome == "answer":
            if draw(st.booleans()):
                h.step(StepFinish(finish_reason="stop", usage=TurnUsage()))
            h.complete(draw(st.text(max_size=10)), usage=draw(usages))
            # A final response completes the turn; nothing else may follow it (§18 10.l).
            if draw(st.sampled_from(["finish", "finish", "none"])) == "finish":
                h.finish()
            return h.events
        n = draw(st.integers(1, 4))
        calls = []
        for _ in range(n):
            serial += 1
            calls.append((f"call_{serial}", draw(st.sampled_from(names)), draw(json_values)))
        for c in calls:
            if draw(st.booleans()):
                h.step(StepToolCall(tool_call_id=c[0], tool_name=c[1], input=c[2]))
        h.complete("", calls, usage=draw(usages))
        chains = [_chain(draw, h, c[0], auto, human) for c in calls]
        total = sum(len(c) for c in chains)
        ending = draw(st.sampled_from(["continue", "continue", "continue", "stop", "cancel"]))
        cut = total if ending == "continue" else draw(st.integers(0, total))
        done = 0
        while done < cut:
            active = [c for c in chains if c]
            chosen = active[draw(st.integers(0, len(active) - 1))]
            chosen.pop(0)()
            done += 1
            _maybe_suspend(draw, h)
        if ending == "stop":
            return h.events
        if ending == "cancel":
            h.close_unresolved()
            h.cancel()
            return h.events
        if h.model_calls >= max_calls:
            h.fail_turn("The turn reached its model-call limit.", code="model-call-limit")
            return h.events


def _end_before_any_call(draw: st.DrawFn, h: History) -> list[TurnEvent]:
    ending = draw(st.sampled_from(["none", "cancel", "fail"]))
    if ending == "cancel":
        h.cancel()
    elif ending == "fail":
        h.fail_turn("nothing to do")
    return h.events


# ---------------------------------------------------------------- (a) the folds agree


@SETTINGS
@given(histories())
def test_incremental_fold_equals_reduce_turn(events: list[TurnEvent]) -> None:
    reducer = TurnReducer()
    for n, event in enumerate(events, start=1):
        reducer.apply(event)
        whole = reduce_turn(events[:n]).to_wire()
        assert reducer.state.to_wire() == whole
    assert reducer.event_count == len(events)


@SETTINGS
@given(histories())
def test_generated_histories_settle_consistently(events: list[TurnEvent]) -> None:
    state = reduce_turn(events)
    # A terminal turn has a result for every tool call (synthetic or not) and no open call.
    if state.terminal is not None:
        assert state.unresolved_tool_calls() == []
        assert state.open_model_call() is None
        assert state.suspension is None
    # A projected suspension is exactly what is pending now.
    if state.suspension is not None:
        assert state.suspension.pending_permissions == state.pending_permissions()
        assert state.suspension.pending_async_tools == state.pending_async_tools()
    # Tool calls appear in (model call, source order) order.
    keys = [(t.model_call_index, t.order) for t in state.tool_calls]
    assert keys == sorted(keys)
    # Usage is the sum of completed calls' usage.
    total = TurnUsage()
    for m in state.model_calls:
        if m.usage is not None:
            total = total + m.usage
    assert state.usage == total


# ---------------------------------------------------------------- (b) JSON round trip


@SETTINGS
@given(histories())
def test_every_event_round_trips_through_json(events: list[TurnEvent]) -> None:
    for event in events:
        wire = event.to_wire()
        line = orjson.dumps(wire)
        back = parse_event(orjson.loads(line), trusted_json=True)
        assert back == event
        assert back.to_wire() == wire
        assert orjson.dumps(back.to_wire()) == line
        # The untrusted path (full JSON walk) agrees.
        assert parse_event(orjson.loads(line)) == event
    state = reduce_turn(events)
    assert TurnState.model_validate(orjson.loads(orjson.dumps(state.to_wire()))) == state


# ---------------------------------------------------------------- (c) mutations


@dataclass(frozen=True)
class Mutated:
    events: list[TurnEvent]
    lines: tuple[int, int]
    """The 1-based line range the rejection must fall in (inclusive)."""


Draw = Callable[..., Any]
"""``DataObject.draw``: mutations choose their target with it."""

Mutation = Callable[[Draw, list[TurnEvent]], Mutated | None]


def _indices(events: list[TurnEvent], kind: type | tuple[type, ...]) -> list[int]:
    return [i for i, e in enumerate(events) if isinstance(e, kind)]


def _pick(draw: Draw, options: list[int]) -> int | None:
    return draw(st.sampled_from(options)) if options else None


def _edit(event: Any, **update: Any) -> Any:
    return event.model_copy(update=update)


def _at(events: list[TurnEvent], line: int) -> Mutated:
    return Mutated(events, (line, line))


def m_drop_turn_created(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    return _at(ev[1:], 1)


def m_duplicate_turn_created(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = draw(st.integers(1, len(ev)))
    return _at([*ev[:i], ev[0], *ev[i:]], i + 1)


def m_change_turn_id(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = _pick(draw, list(range(1, len(ev))))
    if i is None:
        return None
    out = list(ev)
    out[i] = _edit(ev[i], turn_id="2025-11-11T04-36-29Z-0009999-000")
    return _at(out, i + 1)


def m_reuse_model_call_index(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = _pick(draw, [i for i in _indices(ev, ModelCallRequested) if ev[i].model_call_index > 0])  # type: ignore[union-attr]
    if i is None:
        return None
    out = list(ev)
    out[i] = _edit(ev[i], model_call_index=ev[i].model_call_index - 1)  # type: ignore[union-attr]
    return _at(out, i + 1)


def m_drop_model_call_requested(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = _pick(draw, [i for i in _indices(ev, ModelCallRequested) if i < len(ev) - 1])
    if i is None:
        return None
    return _at([*ev[:i], *ev[i + 1 :]], i + 1)


def m_concurrent_model_request(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = _pick(draw, _indices(ev, ModelCallRequested))
    if i is None:
        return None
    req = ev[i]
    assert isinstance(req, ModelCallRequested)
    extra = _edit(
        req,
        model_call_index=req.model_call_index + 1,
        request=ModelRequest(messages=[], parameters={}),
    )
    return _at([*ev[: i + 1], extra, *ev[i + 1 :]], i + 2)


def _duplicate_later(draw: Draw, ev: list[TurnEvent], kind: type) -> Mutated | None:
    i = _pick(draw, _indices(ev, kind))
    if i is None:
        return None
    j = draw(st.integers(i + 1, len(ev)))
    return _at([*ev[:j], ev[i], *ev[j:]], j + 1)


def m_duplicate_completion(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    return _duplicate_later(draw, ev, ModelCallCompleted)


def m_duplicate_failure(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    return _duplicate_later(draw, ev, ModelCallFailed)


def m_duplicate_tool_result(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    return _duplicate_later(draw, ev, ToolResult)


def m_move_result_after_next_request(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    options = []
    for i in _indices(ev, ToolResult):
        later = [j for j in _indices(ev, ModelCallRequested) if j > i]
        if later:
            options.append((i, later[0]))
    if not options:
        return None
    i, j = draw(st.sampled_from(options))
    out = [*ev[:i], *ev[i + 1 : j + 1], ev[i], *ev[j + 1 :]]
    # Usually the request (now line j) rejects; a suspension in between that no
    # longer matches what is pending may reject first.
    return Mutated(out, (i + 1, j))


def m_drop_tool_result(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    closing = (ModelCallRequested, TurnCompleted, TurnFailed, TurnCancelled)
    options = [i for i in _indices(ev, ToolResult) if any(isinstance(e, closing) for e in ev[i:])]
    i = _pick(draw, options)
    if i is None:
        return None
    return Mutated([*ev[:i], *ev[i + 1 :]], (i + 1, len(ev) - 1))


def m_swap_tool_result_refs(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    options = [
        i
        for i in _indices(ev, ModelCallRequested)
        if sum(r.startswith("toolResult:") for r in ev[i].request.messages) >= 2  # type: ignore[union-attr]
    ]
    i = _pick(draw, options)
    if i is None:
        return None
    req = ev[i]
    assert isinstance(req, ModelCallRequested)
    refs = list(req.request.messages)
    slots = [k for k, r in enumerate(refs) if r.startswith("toolResult:")]
    a, b = draw(st.lists(st.sampled_from(slots), min_size=2, max_size=2, unique=True))
    refs[a], refs[b] = refs[b], refs[a]
    out = list(ev)
    out[i] = _edit(req, request=_edit(req.request, messages=refs))
    return _at(out, i + 1)


def m_context_ref_on_later_call(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = _pick(draw, [i for i in _indices(ev, ModelCallRequested) if ev[i].model_call_index > 0])  # type: ignore[union-attr]
    if i is None:
        return None
    req = ev[i]
    assert isinstance(req, ModelCallRequested)
    out = list(ev)
    out[i] = _edit(
        req, request=_edit(req.request, context_ref=ContextRef(previous_turn_id=PREV_ID))
    )
    return _at(out, i + 1)


def m_wrong_call_zero_refs(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = _pick(draw, [i for i in _indices(ev, ModelCallRequested) if ev[i].model_call_index == 0])  # type: ignore[union-attr]
    if i is None:
        return None
    req = ev[i]
    assert isinstance(req, ModelCallRequested)
    refs = list(req.request.messages)
    refs = refs[:-1] if refs != ["input"] else ["context", "input"]
    out = list(ev)
    out[i] = _edit(req, request=_edit(req.request, messages=refs))
    return _at(out, i + 1)


def m_append_after_terminal(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    if not isinstance(ev[-1], (TurnCompleted, TurnFailed, TurnCancelled)):
        return None
    extra = draw(st.sampled_from(ev))
    return _at([*ev, extra], len(ev) + 1)


def m_progress_after_result(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    invoked = {e.tool_call_id: e for e in ev if isinstance(e, ToolInvocationRequested)}
    i = _pick(draw, [i for i in _indices(ev, ToolResult) if ev[i].tool_call_id in invoked])  # type: ignore[union-attr]
    if i is None:
        return None
    inv = invoked[ev[i].tool_call_id]  # type: ignore[union-attr]
    late = ToolProgress(
        turn_id=inv.turn_id,
        ts=inv.ts,
        tool_call_id=inv.tool_call_id,
        source=inv.execution,
        progress=1,
    )
    return _at([*ev[: i + 1], late, *ev[i + 1 :]], i + 2)


def _flip_result_source(draw: Draw, ev: list[TurnEvent], source: str, to: str) -> Mutated | None:
    i = _pick(draw, [i for i in _indices(ev, ToolResult) if ev[i].source == source])  # type: ignore[union-attr]
    if i is None:
        return None
    out = list(ev)
    out[i] = _edit(ev[i], source=to)
    return _at(out, i + 1)


def m_async_result_for_sync_tool(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    return _flip_result_source(draw, ev, "sync", "async")


def m_sync_result_for_async_tool(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    return _flip_result_source(draw, ev, "async", "sync")


def m_conflicting_permission(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = _pick(draw, _indices(ev, ToolPermissionResolved))
    if i is None:
        return None
    first = ev[i]
    assert isinstance(first, ToolPermissionResolved)
    flipped = _edit(first, decision="deny" if first.decision == "allow" else "allow")
    return _at([*ev[: i + 1], flipped, *ev[i + 1 :]], i + 2)


def m_permission_for_unknown_call(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    kinds = (ToolPermissionRequired, ToolPermissionClassified, ToolPermissionResolved)
    i = _pick(draw, _indices(ev, (*kinds, ToolPermissionClassificationFailed)))
    if i is None:
        return None
    out = list(ev)
    e = ev[i]
    if isinstance(e, ToolPermissionClassificationFailed):
        out[i] = _edit(e, tool_call_ids=[*e.tool_call_ids, "ghost"])
    else:
        out[i] = _edit(e, tool_call_id="ghost")
    return _at(out, i + 1)


def m_duplicate_tool_call_id(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = _pick(draw, [i for i in _indices(ev, ModelCallCompleted) if ev[i].message.tool_calls()])  # type: ignore[union-attr]
    if i is None:
        return None
    done = ev[i]
    assert isinstance(done, ModelCallCompleted)
    content = list(done.message.content)
    first = next(p for p in content if isinstance(p, ToolCallPart))
    out = list(ev)
    out[i] = _edit(done, message=AssistantMessage(content=[*content, first]))
    return _at(out, i + 1)


def m_suspension_misses_pending_work(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = _pick(draw, _indices(ev, TurnSuspended))
    if i is None:
        return None
    s = ev[i]
    assert isinstance(s, TurnSuspended)
    out = list(ev)
    if s.pending_permissions and (not s.pending_async_tools or draw(st.booleans())):
        out[i] = _edit(s, pending_permissions=s.pending_permissions[1:])
    else:
        out[i] = _edit(s, pending_async_tools=s.pending_async_tools[1:])
    return _at(out, i + 1)


def m_suspension_misdescribes_pending_work(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = _pick(draw, _indices(ev, TurnSuspended))
    if i is None:
        return None
    s = ev[i]
    assert isinstance(s, TurnSuspended)
    out = list(ev)
    if s.pending_permissions and (not s.pending_async_tools or draw(st.booleans())):
        first, *rest = s.pending_permissions
        out[i] = _edit(s, pending_permissions=[_edit(first, tool_name="other_tool"), *rest])
    else:
        first_async, *rest_async = s.pending_async_tools
        out[i] = _edit(
            s, pending_async_tools=[_edit(first_async, input={"other": True}), *rest_async]
        )
    return _at(out, i + 1)


def m_invocation_input_changed(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    i = _pick(draw, _indices(ev, ToolInvocationRequested))
    if i is None:
        return None
    out = list(ev)
    out[i] = _edit(ev[i], input={"tampered": ev[i].input})  # type: ignore[union-attr]
    return _at(out, i + 1)


def m_invoke_without_allow(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    options = []
    for i in _indices(ev, ToolPermissionResolved):
        e = ev[i]
        assert isinstance(e, ToolPermissionResolved)
        later = [
            j
            for j in _indices(ev, ToolInvocationRequested)
            if j > i and ev[j].tool_call_id == e.tool_call_id  # type: ignore[union-attr]
        ]
        if later:
            options.append((i, later[0]))
    if not options:
        return None
    i, j = draw(st.sampled_from(options))
    # Without the decision, a suspension in between may reject first (the
    # permission is pending again); otherwise the invocation (now line j) does.
    return Mutated([*ev[:i], *ev[i + 1 :]], (i + 1, j))


def m_complete_turn_early(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    # turn_completed right after a response that called tools.
    i = _pick(draw, [i for i in _indices(ev, ModelCallCompleted) if ev[i].message.tool_calls()])  # type: ignore[union-attr]
    if i is None:
        return None
    done = ev[i]
    assert isinstance(done, ModelCallCompleted)
    fin = TurnCompleted(
        turn_id=done.turn_id,
        ts=done.ts,
        output=done.message,
        finish_reason="stop",
        usage=done.usage,
    )
    return _at([*ev[: i + 1], fin, *ev[i + 1 :]], i + 2)


def m_schema_version(draw: Draw, ev: list[TurnEvent]) -> Mutated | None:
    first = ev[0]
    assert isinstance(first, TurnCreated)
    v2 = TurnCreated.model_construct(**{**dict(first), "schema_version": 2})
    return _at([v2, *ev[1:]], 1)


MUTATIONS: dict[str, Mutation] = {
    name.removeprefix("m_"): fn for name, fn in list(globals().items()) if name.startswith("m_")
}

MUTATION_SETTINGS = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
@MUTATION_SETTINGS
@given(events=histories(), data=st.data())
def test_mutation_breaking_one_rule_is_rejected(
    name: str, events: list[TurnEvent], data: st.DataObject
) -> None:
    mutated = MUTATIONS[name](data.draw, list(events))
    # A history this mutation cannot break is discarded; a mutation that never
    # applies fails the test as unsatisfiable.
    assume(mutated is not None)
    assert mutated is not None
    with pytest.raises(CorruptTurnError) as info:
        reduce_turn(mutated.events)
    lo, hi = mutated.lines
    assert info.value.line is not None
    assert lo <= info.value.line <= hi, (name, info.value.line, mutated.lines, info.value.rule)
    # The gate: the first offending event, applied to the valid prefix, changes nothing.
    line = info.value.line
    prefix = mutated.events[: line - 1]
    if prefix:
        reducer = TurnReducer.of(prefix)
        with pytest.raises(CorruptTurnError):
            reducer.apply(mutated.events[line - 1])
        assert reducer.state.to_wire() == reduce_turn(prefix).to_wire()
