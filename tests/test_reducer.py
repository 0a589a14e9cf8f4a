"""The reducer (spec §14, §24, §27.2): valid transitions, every invariant, the projection.

Every rejection test goes through ``assert_rejects``, which checks two
things: ``reduce_turn`` names the rule and the 1-based line of the offending
event; and ``TurnReducer.apply`` of that event on the valid prefix raises the
same rule and leaves the reducer exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from tests.histories import (
    MODEL,
    PREV_ID,
    TURN_ID,
    USAGE,
    History,
    assistant,
    created,
    simple_turn,
    stamp,
    tool_turn,
)
from turncore.errors import CorruptTurnError
from turncore.events import (
    EVENT_TYPES,
    AgentOverrides,
    ContextRef,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallRequested,
    ModelDescriptor,
    ModelRequest,
    ModelStepEvent,
    PendingAsyncTool,
    PendingPermission,
    RequestedAgent,
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
    ToolResultData,
    TurnCancelled,
    TurnCompleted,
    TurnCreated,
    TurnEvent,
    TurnFailed,
    TurnSuspended,
    TurnUsage,
    parse_event,
)
from turncore.messages import AssistantMessage, UserMessage
from turncore.reducer import TurnReducer, TurnState, reduce_turn

# ---------------------------------------------------------------- helpers


def assert_rejects(events: Sequence[TurnEvent], line: int, rule: str) -> CorruptTurnError:
    """``events[line-1]`` is illegal after ``events[:line-1]``, for the reason ``rule``."""
    with pytest.raises(CorruptTurnError) as info:
        reduce_turn(events)
    err = info.value
    assert err.line == line, f"expected line {line}, got {err.line}: {err.rule}"
    assert rule in err.rule, err.rule

    prefix, offending = list(events[: line - 1]), events[line - 1]
    # The prefix reducer's state is never read before the illegal apply, so
    # the comparison below re-projects from its internals (no cached view).
    reducer = TurnReducer.of(prefix)
    with pytest.raises(CorruptTurnError) as gate:
        reducer.apply(offending)
    assert gate.value.rule == err.rule
    assert gate.value.line is None
    assert reducer.event_count == len(prefix)
    if not prefix:
        assert not reducer.started
        return err
    expected = reduce_turn(prefix).to_wire()
    assert reducer.state.to_wire() == expected
    return err


def edit(event: Any, **update: Any) -> Any:
    """A copy of ``event`` with fields replaced (no validation: we want illegal events)."""
    return event.model_copy(update=update)


def batch(h: History, calls: Sequence[tuple[str, str, Any]], text: str = "Working.") -> History:
    h.request()
    h.complete(text, calls)
    return h


def reduce_ok(events: Sequence[TurnEvent]) -> TurnState:
    return reduce_turn(events)


# ---------------------------------------------------------------- valid transitions

Scenario = Callable[[], History]


def s_created_only() -> History:
    return History()


def s_cancel_before_any_call() -> History:
    h = History()
    h.cancel()
    return h


def s_fail_before_any_call() -> History:
    h = History()
    h.fail_turn("no budget", code="model-call-limit")
    return h


def s_plain_completion_with_steps() -> History:
    h = History()
    h.request({"temperature": 0.2})
    h.step(StepReasoningStart())
    h.step(StepReasoningEnd())
    h.step(StepTextStart())
    h.step(StepTextEnd())
    h.step(StepFinish(finish_reason="stop", usage=USAGE))
    h.complete("Hello.")
    h.finish()
    return h


def s_open_model_call() -> History:
    h = History()
    h.request()
    h.step(StepTextStart())
    return h


def s_provider_failure() -> History:
    h = History()
    h.request()
    h.step(StepError(error="upstream 500"))
    h.fail_call("provider returned 500")
    h.fail_turn("provider returned 500")
    return h


def s_interrupted_then_reissued() -> History:
    h = History(created(context=[UserMessage(content="before")]))
    h.request()
    h.fail_call("Model call was interrupted.")
    h.request()  # refs []
    h.complete("Hi.")
    h.finish()
    return h


def s_interrupted_after_batch() -> History:
    h = batch(History(), [("a", "read_file", {})])
    h.invoke("a")
    h.result("a")
    h.request()
    h.fail_call()
    h.request()
    h.complete("done")
    h.finish()
    return h


def s_cancel_during_model_call() -> History:
    h = History()
    h.request()
    h.fail_call("cancelled")
    h.cancel()
    return h


def s_mixed_sync_async_reverse_results() -> History:
    h = batch(
        History(),
        [
            ("A", "read_file", {"p": 1}),
            ("B", "run_job", {"j": 1}),
            ("C", "write_file", {"p": 2}),
            ("D", "ask_human", {"q": "?"}),
        ],
    )
    for i in "ABCD":
        h.invoke(i)
    h.progress("C", {"pct": 10})
    h.progress("C", {"pct": 90})
    h.result("C")
    h.progress("A")
    h.result("A")
    h.suspend()
    h.progress("D", {"seen": True})
    h.suspend()
    h.result("D", "yes")
    h.suspend()
    h.result("B", {"exit": 0})
    h.request()
    h.complete("All done.")
    h.finish()
    return h


def s_manual_permissions() -> History:
    h = batch(
        History(),
        [("a", "read_file", {}), ("b", "run_job", {}), ("c", "write_file", {})],
    )
    h.require("a", {"kind": "tool", "path": "x"})
    h.require("b")
    h.require("c", checker_error="checker crashed")
    h.suspend()
    h.resolve("a", "allow")
    h.invoke("a")
    h.result("a")
    h.suspend()
    h.resolve("b", "allow")
    h.invoke("b")
    h.suspend()
    h.resolve("c", "deny")
    h.result("c", "Permission denied.", is_error=True)
    h.suspend()
    h.result("b", "ran")
    h.request()
    h.complete("ok")
    h.finish()
    return h


def s_auto_permissions() -> History:
    h = batch(
        History(created(auto_permission=True)),
        [
            ("a", "read_file", {}),
            ("b", "write_file", {}),
            ("c", "run_job", {}),
            ("d", "write_file", {"x": 1}),
        ],
    )
    for i in "abcd":
        h.require(i)
    h.classify("a", "allow", "read-only")
    h.classify("b", "deny", "destructive")
    h.classify("c", "defer", "unsure")
    h.classification_failed(["d"], "classifier timed out")
    h.resolve("a", "allow", "classifier", "read-only")
    h.resolve("b", "deny", "classifier", "destructive")
    h.result("b", "Denied by policy.", is_error=True)
    h.invoke("a")
    h.result("a")
    h.suspend()
    h.resolve("d", "deny")
    h.result("d", "Denied.", is_error=True)
    h.suspend()
    h.resolve("c", "allow")
    h.invoke("c")
    h.suspend()
    h.result("c")
    h.request()
    h.complete("fine")
    h.finish()
    return h


def s_human_unavailable() -> History:
    h = batch(
        History(created(auto_permission=True, human_available=False)),
        [("a", "write_file", {}), ("q", "ask_human", {"question": "?"})],
    )
    h.require("a")
    h.classify("a", "defer", "unsure")
    h.resolve("a", "deny", "human_unavailable", "no human to ask")
    h.result("a", "Permission denied: no human available.", is_error=True)
    h.invoke("q")
    h.result("q", "Human input is unavailable for this turn.", is_error=True, source="runtime")
    h.request()
    h.complete("ok")
    h.finish()
    return h


def s_unknown_tool_and_interrupted_sync() -> History:
    h = batch(History(), [("u", "no_such_tool", {}), ("s", "read_file", {})])
    h.result("u", "Unknown tool no_such_tool.", is_error=True)
    h.invoke("s")
    h.progress("s")
    h.result(
        "s",
        "Tool execution was interrupted; its outcome is unknown and it was not retried.",
        is_error=True,
        source="runtime",
    )
    h.request()
    h.complete("ok")
    h.finish()
    return h


def s_cancel_while_suspended() -> History:
    h = batch(History(), [("p", "write_file", {}), ("j", "run_job", {}), ("r", "read_file", {})])
    h.require("p")
    h.invoke("j")
    h.invoke("r")
    h.result("r")
    h.suspend()
    h.progress("j")
    h.close_unresolved()
    h.cancel("user pressed stop")
    return h


def s_cancel_during_sync_tool() -> History:
    h = batch(History(), [("r", "read_file", {})])
    h.invoke("r")
    h.progress("r")
    h.result("r", "cancelled", is_error=True, source="runtime")
    h.cancel(None)
    return h


def s_model_call_limit() -> History:
    h = History(created(max_model_calls=2))
    batch(h, [("a", "read_file", {})])
    h.invoke("a")
    h.result("a")
    batch(h, [("b", "read_file", {})])
    h.invoke("b")
    h.result("b")
    h.fail_turn("The turn reached its limit of 2 model calls.", code="model-call-limit")
    return h


def s_permission_then_runtime_result() -> History:
    # An allowed call whose invocation never happened can still be closed (cancellation).
    h = batch(History(), [("a", "write_file", {})])
    h.require("a")
    h.resolve("a", "allow")
    h.result("a", "cancelled", is_error=True, source="runtime")
    h.cancel()
    return h


def s_async_runtime_error_result() -> History:
    # §24: a runtime-generated error is the one legal non-async result of an async tool.
    h = batch(History(), [("j", "run_job", {})])
    h.invoke("j")
    h.suspend()
    h.result("j", "cancelled", is_error=True, source="runtime")
    h.cancel()
    return h


def s_context_ref_and_inherited_agent() -> History:
    h = History(
        created(
            context=ContextRef(previous_turn_id=PREV_ID),
            inherited_from=PREV_ID,
            model=ModelDescriptor(provider="anthropic", model="claude"),
        )
    )
    h.request()
    h.complete("hi")
    h.finish()
    return h


def s_three_rounds() -> History:
    h = History()
    for n in range(3):
        batch(h, [(f"c{n}a", "read_file", {"n": n}), (f"c{n}b", "write_file", {"n": n})])
        h.invoke(f"c{n}a")
        h.invoke(f"c{n}b")
        h.result(f"c{n}b")
        h.result(f"c{n}a")
    h.request()
    h.complete("done")
    h.finish()
    return h


SCENARIOS: dict[str, Scenario] = {
    name.removeprefix("s_"): fn for name, fn in list(globals().items()) if name.startswith("s_")
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_valid_history_reduces(name: str) -> None:
    h = SCENARIOS[name]()
    state = reduce_ok(h.events)
    assert state.definition == h.first
    # Incremental fold agrees at every prefix.
    reducer = TurnReducer()
    for n, e in enumerate(h.events, start=1):
        reducer.apply(e)
        assert reducer.event_count == n
        assert reducer.state.to_wire() == reduce_turn(h.events[:n]).to_wire()


def test_scenarios_cover_every_event_type_and_step_kind() -> None:
    types: set[str] = set()
    steps: set[str] = set()
    sources: set[tuple[str, str]] = set()
    for fn in SCENARIOS.values():
        for e in fn().events:
            types.add(e.type)
            if isinstance(e, ModelStepEvent):
                steps.add(e.event.type)
            if isinstance(e, ToolPermissionResolved):
                sources.add(("resolved", e.source))
            if isinstance(e, ToolResult):
                sources.add(("result", e.source))
    assert types == set(EVENT_TYPES)
    # tool-call steps come from s_valid_step_kinds below
    assert steps >= {
        "text-start",
        "text-end",
        "reasoning-start",
        "reasoning-end",
        "finish-step",
        "error",
    }
    assert sources >= {
        ("resolved", "classifier"),
        ("resolved", "human"),
        ("resolved", "human_unavailable"),
        ("result", "sync"),
        ("result", "async"),
        ("result", "runtime"),
    }


# Each step of the turn's, a model call's and a tool call's life, as (event, next event).
TRANSITIONS = {
    ("turn_created", "model_call_requested"),
    ("turn_created", "turn_cancelled"),
    ("turn_created", "turn_failed"),
    ("model_call_requested", "model_step_event"),
    ("model_call_requested", "model_call_completed"),
    ("model_call_requested", "model_call_failed"),
    ("model_step_event", "model_step_event"),
    ("model_step_event", "model_call_completed"),
    ("model_step_event", "model_call_failed"),
    ("model_call_failed", "model_call_requested"),
    ("model_call_failed", "turn_failed"),
    ("model_call_failed", "turn_cancelled"),
    ("model_call_completed", "turn_completed"),
    ("model_call_completed", "tool_permission_required"),
    ("model_call_completed", "tool_invocation_requested"),
    ("model_call_completed", "tool_result"),
    ("tool_permission_required", "tool_permission_required"),
    ("tool_permission_required", "tool_permission_classified"),
    ("tool_permission_required", "tool_permission_resolved"),
    ("tool_permission_required", "tool_invocation_requested"),
    ("tool_permission_required", "turn_suspended"),
    ("tool_permission_classified", "tool_permission_classified"),
    ("tool_permission_classified", "tool_permission_classification_failed"),
    ("tool_permission_classified", "tool_permission_resolved"),
    ("tool_permission_classification_failed", "tool_permission_resolved"),
    ("tool_permission_resolved", "tool_permission_resolved"),
    ("tool_permission_resolved", "tool_invocation_requested"),
    ("tool_permission_resolved", "tool_result"),
    ("tool_invocation_requested", "tool_invocation_requested"),
    ("tool_invocation_requested", "tool_progress"),
    ("tool_invocation_requested", "tool_result"),
    ("tool_invocation_requested", "turn_suspended"),
    ("tool_progress", "tool_progress"),
    ("tool_progress", "tool_result"),
    ("tool_progress", "turn_suspended"),
    ("tool_result", "tool_result"),
    ("tool_result", "tool_invocation_requested"),
    ("tool_result", "tool_progress"),
    ("tool_result", "turn_suspended"),
    ("tool_result", "model_call_requested"),
    ("tool_result", "turn_failed"),
    ("tool_result", "turn_cancelled"),
    ("turn_suspended", "tool_permission_resolved"),
    ("turn_suspended", "tool_progress"),
    ("turn_suspended", "tool_result"),
}


def test_scenarios_exercise_every_transition() -> None:
    seen: set[tuple[str, str]] = set()
    for fn in SCENARIOS.values():
        events = fn().events
        seen |= {(a.type, b.type) for a, b in zip(events, events[1:], strict=False)}
    assert TRANSITIONS - seen == set()


def test_tool_call_step_events_are_retained_in_order() -> None:
    h = History()
    h.request()
    steps = [
        StepTextStart(),
        StepTextEnd(),
        StepToolCall(tool_call_id="a", tool_name="read_file", input={"p": 1}),
        StepFinish(finish_reason="tool-calls", usage=USAGE),
    ]
    for s in steps:
        h.step(s)
    h.complete("x", [("a", "read_file", {"p": 1})])
    state = reduce_ok(h.events)
    assert state.model_calls[0].step_events == steps


# ---------------------------------------------------------------- the projection


def test_plain_completion_projection() -> None:
    h = s_plain_completion_with_steps()
    state = reduce_ok(h.events)
    [call] = state.model_calls
    assert call.index == 0
    assert call.request == ModelRequest(messages=["input"], parameters={"temperature": 0.2})
    assert [s.type for s in call.step_events] == [
        "reasoning-start",
        "reasoning-end",
        "text-start",
        "text-end",
        "finish-step",
    ]
    assert call.response == AssistantMessage(content="Hello.")
    assert call.finish_reason == "stop"
    assert call.usage == USAGE
    assert call.error is None
    assert state.tool_calls == []
    assert isinstance(state.terminal, TurnCompleted)
    assert state.terminal.output == AssistantMessage(content="Hello.")
    assert state.suspension is None
    assert state.usage == USAGE
    assert state.open_model_call() is None


def test_open_model_call_is_visible_and_not_running_status() -> None:
    state = reduce_ok(s_open_model_call().events)
    open_call = state.open_model_call()
    assert open_call is not None and open_call.index == 0
    assert open_call.response is None and open_call.error is None
    assert state.terminal is None and state.suspension is None
    # §14.3: there is no status field at all.
    assert "status" not in state.to_wire()


def test_failed_model_call_records_error_and_no_usage() -> None:
    state = reduce_ok(s_provider_failure().events)
    [call] = state.model_calls
    assert call.error == "provider returned 500"
    assert call.response is None and call.usage is None and call.finish_reason is None
    assert isinstance(state.terminal, TurnFailed)
    assert state.usage == TurnUsage()


def test_usage_aggregates_over_completed_calls_only() -> None:
    h = History()
    batch(h, [("a", "read_file", {})])
    h.events[-1] = edit(
        h.events[-1], usage=TurnUsage(input_tokens=100, output_tokens=7, cached_input_tokens=40)
    )
    h.invoke("a")
    h.result("a")
    h.request()
    h.fail_call()  # contributes nothing
    h.request()
    h.complete(
        "done",
        usage=TurnUsage(input_tokens=150, output_tokens=3, total_tokens=153, reasoning_tokens=2),
    )
    state = reduce_ok(h.events)
    assert state.usage == TurnUsage(
        input_tokens=250,
        output_tokens=10,
        total_tokens=153,
        reasoning_tokens=2,
        cached_input_tokens=40,
    )
    assert [m.usage for m in state.model_calls][1] is None
    assert state.to_wire()["usage"] == {
        "inputTokens": 250,
        "outputTokens": 10,
        "totalTokens": 153,
        "reasoningTokens": 2,
        "cachedInputTokens": 40,
    }


def test_usage_of_a_turn_without_completed_calls_is_empty() -> None:
    state = reduce_ok(History().events)
    assert state.usage == TurnUsage()
    assert state.to_wire()["usage"] == {}


def test_tool_calls_keep_source_order_whatever_the_physical_order() -> None:
    h = s_mixed_sync_async_reverse_results()
    state = reduce_ok(h.events)
    assert [t.tool_call_id for t in state.tool_calls] == ["A", "B", "C", "D"]
    assert [t.order for t in state.tool_calls] == [0, 1, 2, 3]
    assert [t.execution for t in state.tool_calls] == ["sync", "async", "sync", "async"]
    assert [t.tool_id for t in state.tool_calls] == [
        "builtin:read_file",
        "builtin:run_job",
        "builtin:write_file",
        "builtin:ask_human",
    ]
    assert all(t.model_call_index == 0 for t in state.tool_calls)
    assert [t.result.source for t in state.tool_calls if t.result] == [
        "sync",
        "async",
        "sync",
        "async",
    ]
    # The physical order of results was C, A, D, B; the next request is in source order.
    physical = [e.tool_call_id for e in h.events if isinstance(e, ToolResult)]
    assert physical == ["C", "A", "D", "B"]
    assert state.model_calls[1].request.messages == [
        "assistant:0",
        "toolResult:A",
        "toolResult:B",
        "toolResult:C",
        "toolResult:D",
    ]


def test_tool_calls_across_iterations_are_numbered_per_response() -> None:
    state = reduce_ok(s_three_rounds().events)
    assert [(t.model_call_index, t.order, t.tool_call_id) for t in state.tool_calls] == [
        (0, 0, "c0a"),
        (0, 1, "c0b"),
        (1, 0, "c1a"),
        (1, 1, "c1b"),
        (2, 0, "c2a"),
        (2, 1, "c2b"),
    ]
    assert [m.index for m in state.model_calls] == [0, 1, 2, 3]
    assert state.model_calls[2].request.messages == [
        "assistant:1",
        "toolResult:c1a",
        "toolResult:c1b",
    ]
    assert state.usage == USAGE + USAGE + USAGE + USAGE
    assert isinstance(state.terminal, TurnCompleted)


def test_progress_is_retained_in_order_after_the_result() -> None:
    h = batch(History(), [("s", "read_file", {}), ("j", "run_job", {})])
    h.invoke("s")
    h.invoke("j")
    h.progress("s", {"n": 1})
    h.progress("j", {"n": "a"})
    h.progress("s", {"n": 2})
    h.result("s")
    h.suspend()
    h.progress("j", {"n": "b"})
    h.result("j")
    state = reduce_ok(h.events)
    s, j = state.tool_calls
    assert [p.progress for p in s.progress] == [{"n": 1}, {"n": 2}]
    assert [p.source for p in s.progress] == ["sync", "sync"]
    assert [p.progress for p in j.progress] == [{"n": "a"}, {"n": "b"}]
    assert [p.source for p in j.progress] == ["async", "async"]
    assert s.result is not None and j.result is not None


def test_permission_records_are_projected_per_call() -> None:
    state = reduce_ok(s_auto_permissions().events)
    by_id = {t.tool_call_id: t for t in state.tool_calls}
    a, b, c, d = (by_id[i] for i in "abcd")
    assert a.permission is not None and a.permission.classification is not None
    assert a.permission.classification.decision == "allow"
    assert a.permission.resolved is not None and a.permission.resolved.source == "classifier"
    assert a.invocation is not None and a.result is not None and a.result.source == "sync"
    assert b.permission is not None and b.permission.resolved is not None
    assert b.permission.resolved.decision == "deny"
    assert b.invocation is None and b.result is not None and b.result.source == "runtime"
    assert b.result.result.is_error
    assert c.permission is not None and c.permission.classification is not None
    assert c.permission.classification.decision == "defer"
    assert c.permission.resolved is not None and c.permission.resolved.source == "human"
    assert d.permission is not None and d.permission.classification is None
    assert d.permission.resolved is not None and d.permission.resolved.decision == "deny"
    # A call that required no permission has none in the projection.
    plain = reduce_ok(tool_turn().events).tool_calls[0]
    assert plain.permission is None


def test_checker_error_is_kept_on_the_required_record() -> None:
    state = reduce_ok(s_manual_permissions().events)
    c = state.tool_call("c")
    assert c is not None and c.permission is not None
    assert c.permission.required.checker_error == "checker crashed"
    assert state.tool_call("nope") is None


def test_unknown_tool_has_no_tool_id_or_execution() -> None:
    state = reduce_ok(s_unknown_tool_and_interrupted_sync().events)
    u, s = state.tool_calls
    assert u.tool_name == "no_such_tool" and u.tool_id is None and u.execution is None
    assert u.invocation is None and u.result is not None and u.result.source == "runtime"
    assert s.execution == "sync" and s.result is not None and s.result.source == "runtime"
    assert len(s.progress) == 1


def test_pending_views() -> None:
    h = batch(
        History(created(auto_permission=True)),
        [("p", "write_file", {}), ("q", "write_file", {}), ("j", "run_job", {"x": 1})],
    )
    h.require("p", {"kind": "write"})
    h.require("q")
    h.classify("q", "allow")  # not yet resolved; the runtime, not a human, owns it
    h.invoke("j")
    # In an autoPermission turn nothing waits on a human before the classifier spoke.
    assert reduce_turn(h.events).pending_permissions() == []
    h.classify("p", "defer")
    state = reduce_turn(h.events)
    assert state.pending_permissions() == [
        PendingPermission(tool_call_id="p", tool_name="write_file", request={"kind": "write"})
    ]
    assert state.pending_async_tools() == [
        PendingAsyncTool(
            tool_call_id="j", tool_id="builtin:run_job", tool_name="run_job", input={"x": 1}
        )
    ]
    assert [t.tool_call_id for t in state.unresolved_tool_calls()] == ["p", "q", "j"]


# ---------------------------------------------------------------- suspension


def test_suspension_is_projected_until_the_next_fact() -> None:
    h = batch(History(), [("j", "run_job", {}), ("k", "run_job", {})])
    h.invoke("j")
    h.invoke("k")
    first = h.suspend()
    assert reduce_ok(h.events).suspension == first
    h.progress("j")
    # Any new fact invalidates the snapshot (it described an earlier moment).
    assert reduce_ok(h.events).suspension is None
    second = h.suspend()
    assert reduce_ok(h.events).suspension == second
    h.result("j")
    assert reduce_ok(h.events).suspension is None
    third = h.suspend()
    state = reduce_ok(h.events)
    assert state.suspension == third
    assert [p.tool_call_id for p in third.pending_async_tools] == ["k"]


def test_a_suspension_is_not_repeated_back_to_back() -> None:
    """§11.1: re-advancing a suspended turn appends no duplicate snapshot; a new one
    follows only a change (an input, a result). So two in a row are rejected."""
    h = batch(History(), [("j", "run_job", {}), ("k", "run_job", {})])
    h.invoke("j")
    h.invoke("k")
    h.suspend()
    h.suspend()
    assert_rejects(h.events, len(h.events), "directly follows another turn_suspended")


def test_a_new_suspension_replaces_the_last_after_a_change() -> None:
    h = batch(History(), [("j", "run_job", {}), ("k", "run_job", {})])
    h.invoke("j")
    h.invoke("k")
    h.suspend()
    h.result("j")
    again = h.suspend()
    assert reduce_ok(h.events).suspension == again


def test_suspension_cleared_by_terminal() -> None:
    state = reduce_ok(s_cancel_while_suspended().events)
    assert state.suspension is None
    assert isinstance(state.terminal, TurnCancelled)
    assert state.terminal.reason == "user pressed stop"


def test_suspension_must_list_exactly_the_pending_work() -> None:
    h = batch(History(), [("p", "write_file", {}), ("j", "run_job", {})])
    h.require("p")
    h.invoke("j")
    good = h.suspend()
    assert reduce_ok(h.events).suspension == good
    n = len(h.events)
    base = h.events[:-1]
    assert_rejects(base + [edit(good, pending_permissions=[])], n, "pending permissions")
    assert_rejects(base + [edit(good, pending_async_tools=[])], n, "pending async tools")
    doubled = edit(good, pending_async_tools=good.pending_async_tools * 2)
    assert_rejects(base + [doubled], n, "pending async tools")
    extra = edit(
        good,
        pending_permissions=[
            *good.pending_permissions,
            PendingPermission(tool_call_id="j", tool_name="run_job", request=None),
        ],
    )
    assert_rejects(base + [extra], n, "pending permissions")


def test_suspension_entries_must_describe_the_pending_work() -> None:
    h = batch(History(), [("p", "write_file", {"path": "a"}), ("j", "run_job", {"cmd": "x"})])
    h.require("p", {"kind": "write", "path": "a"})
    h.invoke("j")
    good = h.suspend()
    n = len(h.events)
    base = h.events[:-1]
    [perm] = good.pending_permissions
    [job] = good.pending_async_tools
    for wrong in (edit(perm, tool_name="read_file"), edit(perm, request={"kind": "tool"})):
        bad = edit(good, pending_permissions=[wrong])
        assert_rejects([*base, bad], n, "misdescribes the pending permission of tool call 'p'")
    for wrong in (
        edit(job, tool_id="builtin:other"),
        edit(job, tool_name="ask_human"),
        edit(job, input={"cmd": "rm -rf /"}),
    ):
        bad = edit(good, pending_async_tools=[wrong])
        assert_rejects([*base, bad], n, "misdescribes the pending async tool call 'j'")


def test_suspension_with_nothing_pending_is_rejected() -> None:
    h = tool_turn()
    events = h.events[:5]  # created, request, completed, invocation, result
    susp = TurnSuspended(
        turn_id=TURN_ID, ts=stamp(5), pending_permissions=[], pending_async_tools=[], usage=USAGE
    )
    assert_rejects([*events, susp], 6, "no pending permission or async tool")
    assert_rejects([h.events[0], susp], 2, "no pending permission or async tool")


def test_suspension_during_an_open_model_call_is_rejected() -> None:
    h = History()
    h.request()
    susp = TurnSuspended(
        turn_id=TURN_ID, ts=stamp(2), pending_permissions=[], pending_async_tools=[], usage=USAGE
    )
    assert_rejects([*h.events, susp], 3, "while a model call is unresolved")


def test_suspension_lists_permissions_awaiting_a_human_only() -> None:
    h = batch(
        History(created(auto_permission=True)), [("p", "write_file", {}), ("q", "write_file", {})]
    )
    h.require("p")
    h.require("q")
    h.classify("p", "defer")
    h.classify("q", "allow")
    # q was allowed by the classifier but not yet resolved: not a human's question.
    with_q = TurnSuspended(
        turn_id=TURN_ID,
        ts=stamp(len(h.events)),
        pending_permissions=[
            PendingPermission(tool_call_id="p", tool_name="write_file", request={"kind": "tool"}),
            PendingPermission(tool_call_id="q", tool_name="write_file", request={"kind": "tool"}),
        ],
        pending_async_tools=[],
        usage=USAGE,
    )
    assert_rejects([*h.events, with_q], len(h.events) + 1, "pending permissions")
    snapshot = h.suspend()
    assert reduce_ok(h.events).suspension == snapshot
    assert [p.tool_call_id for p in snapshot.pending_permissions] == ["p"]


# ---------------------------------------------------------------- agent snapshots


def test_requested_and_resolved_agent_snapshots_are_both_kept() -> None:
    requested = RequestedAgent(
        agent_id="copilot",
        overrides=AgentOverrides(
            model=ModelDescriptor(provider="anthropic", model="claude-sonnet"),
            composition={"voice": False, "workDir": "w1"},
        ),
    )
    first = created(
        requested=requested,
        agent_id="copilot-v2",
        model=ModelDescriptor(provider="anthropic", model="claude-sonnet"),
    )
    h = History(first)
    h.request()
    h.complete("hi")
    state = reduce_ok(h.events)
    assert state.definition.agent.requested == requested
    resolved = state.definition.agent.resolved
    assert resolved.agent_id == "copilot-v2"
    wire = state.to_wire()["definition"]["agent"]
    assert wire["requested"] == {
        "agentId": "copilot",
        "overrides": {
            "model": {"provider": "anthropic", "model": "claude-sonnet"},
            "composition": {"voice": False, "workDir": "w1"},
        },
    }
    assert wire["resolved"]["agentId"] == "copilot-v2"
    assert wire["resolved"]["systemPrompt"]
    assert [t["toolId"] for t in wire["resolved"]["tools"]] == [
        "builtin:read_file",
        "builtin:write_file",
        "builtin:run_job",
        "builtin:ask_human",
    ]


def test_inherited_snapshot_must_inherit_from_the_context_predecessor() -> None:
    ok = created(context=ContextRef(previous_turn_id=PREV_ID), inherited_from=PREV_ID)
    reduce_ok([ok])
    wrong = created(
        context=ContextRef(previous_turn_id=PREV_ID),
        inherited_from="2025-01-01T00-00-00Z-0000000-000",
    )
    assert_rejects([wrong], 1, "inherit from the turn's context.previousTurnId")
    inline = created(context=[UserMessage(content="x")], inherited_from=PREV_ID)
    assert_rejects([inline], 1, "inherit from the turn's context.previousTurnId")


def test_inherited_snapshot_takes_tool_identity_from_invocations() -> None:
    first = created(context=ContextRef(previous_turn_id=PREV_ID), inherited_from=PREV_ID)
    h = History(first)
    h.request()
    h.complete("x", [("a", "anything", {"k": 1}), ("b", "later", {})])
    # The builder cannot invoke a tool it has no descriptor for; write the events by hand.
    h.events.append(
        ToolInvocationRequested(
            turn_id=TURN_ID,
            ts=stamp(3),
            tool_call_id="a",
            tool_id="mcp:anything",
            tool_name="anything",
            execution="async",
            input={"k": 1},
        )
    )
    state = reduce_ok(h.events)
    a, b = state.tool_calls
    assert a.tool_id == "mcp:anything" and a.execution == "async"
    assert b.tool_id is None and b.execution is None
    h.events.append(
        ToolResult(
            turn_id=TURN_ID,
            ts=stamp(4),
            tool_call_id="a",
            tool_name="anything",
            source="sync",
            result=ToolResultData(output=1, is_error=False),
        )
    )
    assert_rejects(h.events, 5, "sync result for async tool call")


# ---------------------------------------------------------------- §24 invariants, one by one
#
# §24 bullet                                   test(s)
# missing or non-first turn_created            test_missing_turn_created, _not_first, test_empty_log
# multiple turn_created                        test_multiple_turn_created
# mismatched turn ids                          test_mismatched_turn_id
# unsupported schema version                   test_unsupported_schema_version
# model-call indices reused / out of order     test_model_call_index_reused, _out_of_order
# concurrent unresolved model requests         test_concurrent_unresolved_model_requests
# completion/failure without a request         test_model_outcome_without_request
# duplicate completion/failure                 test_duplicate_model_completion_or_failure
# duplicate tool-call ids in one response      test_duplicate_tool_call_ids_within_one_response
# permission records for unknown calls         test_tool_records_targeting_unknown_tool_calls
# conflicting effective decisions              test_conflicting_effective_permission_decisions
# progress after a terminal result             test_progress_after_a_terminal_result
# duplicate terminal tool results              test_duplicate_terminal_tool_results
# async results for sync tools                 test_async_external_result_for_a_sync_tool
# sync results for async tools (not runtime)   test_sync_execution_result_for_an_async_tool
# next call before all results                 test_next_model_call_before_all_tool_results
# model-facing result order                    test_model_facing_tool_result_order_must_be_source_order
# completion while calls unresolved            test_turn_completed_while_tool_calls_are_unresolved
# terminal without synthetic results           test_terminal_while_unresolved_calls_lack_synthetic_results
# multiple terminal events                     test_multiple_terminal_events
# any event after a terminal event             test_no_event_after_a_terminal_event
# mutation of the definition                   test_multiple_turn_created, test_invocation_must_match_...
# contextRef inconsistent / not on call 0      test_context_ref_inconsistent_..., _on_a_non_initial_call
# request refs vs transcript                   test_call_zero_refs, test_reissue_..., test_no_model_call_after_...


def test_missing_turn_created() -> None:
    h = simple_turn()
    assert_rejects(h.events[1:], 1, "the first event must be turn_created")


def test_turn_created_not_first() -> None:
    h = simple_turn()
    assert_rejects([h.events[1], h.events[0], *h.events[2:]], 1, "must be turn_created")


def test_empty_log() -> None:
    with pytest.raises(CorruptTurnError) as info:
        reduce_turn([])
    assert info.value.line == 1
    assert "empty" in info.value.rule


def test_multiple_turn_created() -> None:
    h = simple_turn()
    assert_rejects([h.events[0], h.events[0], *h.events[1:]], 2, "exactly one turn_created")
    # Also later in the log, and also when it would change the definition.
    changed = edit(h.events[0], input=UserMessage(content="something else"))
    assert_rejects([*h.events[:2], changed], 3, "exactly one turn_created")


def test_mismatched_turn_id() -> None:
    h = tool_turn()
    for i in range(1, len(h.events)):
        events = list(h.events)
        events[i] = edit(events[i], turn_id=PREV_ID)
        assert_rejects(events, i + 1, f"has turnId '{PREV_ID}'")


def test_unsupported_schema_version() -> None:
    h = simple_turn()
    v2 = TurnCreated.model_construct(**{**dict(h.events[0]), "schema_version": 2})
    assert_rejects([v2, *h.events[1:]], 1, "unsupported schemaVersion 2")
    # The parser already refuses it on the way in.
    wire = h.events[0].to_wire()
    with pytest.raises(ValidationError):
        parse_event({**wire, "schemaVersion": 2})


def test_model_call_index_reused() -> None:
    h = History()
    h.request()
    h.fail_call()
    h.request()
    events = list(h.events)
    events[-1] = edit(events[-1], model_call_index=0)
    assert_rejects(events, 4, "model call index 0 is out of order; the next index is 1")


def test_model_call_index_out_of_order() -> None:
    h = History()
    h.request()
    events = [h.events[0], edit(h.events[1], model_call_index=1)]
    assert_rejects(events, 2, "model call index 1 is out of order; the next index is 0")


def test_concurrent_unresolved_model_requests() -> None:
    h = History()
    h.request()
    second = ModelCallRequested(
        turn_id=TURN_ID,
        ts=stamp(2),
        model_call_index=1,
        request=ModelRequest(messages=[], parameters={}),
    )
    assert_rejects([*h.events, second], 3, "requested while model call 0 is unresolved")


@pytest.mark.parametrize("kind", ["completed", "failed", "step"])
def test_model_outcome_without_request(kind: str) -> None:
    h = History()
    event: TurnEvent
    if kind == "completed":
        event = ModelCallCompleted(
            turn_id=TURN_ID,
            ts=stamp(1),
            model_call_index=0,
            message=AssistantMessage(content="x"),
            finish_reason="stop",
            usage=USAGE,
        )
    elif kind == "failed":
        event = ModelCallFailed(turn_id=TURN_ID, ts=stamp(1), model_call_index=0, error="x")
    else:
        event = ModelStepEvent(
            turn_id=TURN_ID, ts=stamp(1), model_call_index=0, event=StepTextStart()
        )
    assert_rejects([*h.events, event], 2, "model call 0, which was never requested")
    # Also for a later index than the one open.
    h.request()
    assert_rejects(
        [*h.events, edit(event, model_call_index=1)], 3, "model call 1, which was never requested"
    )


def test_duplicate_model_completion_or_failure() -> None:
    h = History()
    h.request()
    done = h.complete("x")
    assert_rejects([*h.events, edit(done, ts=stamp(9))], 4, "which already completed")
    fail = ModelCallFailed(turn_id=TURN_ID, ts=stamp(9), model_call_index=0, error="late")
    assert_rejects([*h.events, fail], 4, "which already completed")
    step = ModelStepEvent(turn_id=TURN_ID, ts=stamp(9), model_call_index=0, event=StepTextEnd())
    assert_rejects([*h.events, step], 4, "which already completed")

    h = History()
    h.request()
    failed = h.fail_call()
    assert_rejects([*h.events, failed], 4, "which already failed")
    assert_rejects([*h.events, edit(done, ts=stamp(9))], 4, "which already failed")


def test_duplicate_tool_call_ids_within_one_response() -> None:
    h = History()
    h.request()
    bad = ModelCallCompleted(
        turn_id=TURN_ID,
        ts=stamp(2),
        model_call_index=0,
        message=assistant("x", [("a", "read_file", {}), ("a", "write_file", {})]),
        finish_reason="tool-calls",
        usage=USAGE,
    )
    assert_rejects([*h.events, bad], 3, "tool-call id 'a' appears twice in model call 0's response")


def test_tool_call_id_reused_in_a_later_response() -> None:
    """§24 forbids duplicates within one response only; OpenAI-compatible servers
    often number calls per response (``call_0`` every time).

    The earlier call is settled before the next model call may start, so every
    later record naming the id belongs to the call that is still open.
    """
    h = batch(History(), [("a", "read_file", {"path": "one"})])
    h.invoke("a")
    h.result("a", "first")
    batch(h, [("a", "write_file", {"path": "two"})])
    h.require("a")
    assert h.suspend().pending_permissions[0].tool_call_id == "a"
    h.resolve("a", "allow", source="human")
    h.invoke("a")
    h.progress("a")
    h.result("a", "second")
    h.request()
    h.complete("Both done.")
    h.finish()
    state = reduce_ok(h.events)
    first, second = state.tool_calls
    assert (first.tool_call_id, second.tool_call_id) == ("a", "a")
    assert first.result is not None and first.result.result.output == "first"
    assert first.permission is None and first.progress == []
    assert second.tool_name == "write_file" and second.permission is not None
    assert second.result is not None and second.result.result.output == "second"
    assert state.tool_call("a") == second  # the newest call with that id
    assert state.tool_call("a", model_call_index=0) == first
    assert state.model_calls[2].request.messages == ["assistant:1", "toolResult:a"]


def test_a_reused_tool_call_id_stays_unique_within_its_response() -> None:
    h = batch(History(), [("a", "read_file", {})])
    h.invoke("a")
    h.result("a")
    h.request()
    bad = ModelCallCompleted(
        turn_id=TURN_ID,
        ts=stamp(9),
        model_call_index=1,
        message=assistant("x", [("a", "read_file", {}), ("a", "read_file", {})]),
        finish_reason="tool-calls",
        usage=USAGE,
    )
    assert_rejects([*h.events, bad], len(h.events) + 1, "appears twice in model call 1's response")


def test_a_late_result_for_a_reused_id_goes_to_the_open_call() -> None:
    h = batch(History(), [("a", "read_file", {})])
    h.invoke("a")
    h.result("a")
    batch(h, [("a", "ask_human", {})])
    h.invoke("a")
    h.result("a", "answer")
    state = reduce_ok(h.events)
    assert [t.result is not None for t in state.tool_calls] == [True, True]
    dup = ToolResult(
        turn_id=TURN_ID,
        ts=stamp(50),
        tool_call_id="a",
        tool_name="ask_human",
        source="async",
        result=ToolResultData(output="again", is_error=False),
    )
    assert_rejects([*h.events, dup], len(h.events) + 1, "duplicate terminal result")


@pytest.mark.parametrize(
    "event",
    [
        ToolPermissionRequired(
            turn_id=TURN_ID, ts=stamp(9), tool_call_id="zz", tool_name="read_file", request=None
        ),
        ToolPermissionClassified(
            turn_id=TURN_ID, ts=stamp(9), tool_call_id="zz", decision="allow", reason="r"
        ),
        ToolPermissionClassificationFailed(
            turn_id=TURN_ID, ts=stamp(9), tool_call_ids=["a", "zz"], error="e"
        ),
        ToolPermissionResolved(
            turn_id=TURN_ID, ts=stamp(9), tool_call_id="zz", decision="allow", source="human"
        ),
        ToolInvocationRequested(
            turn_id=TURN_ID,
            ts=stamp(9),
            tool_call_id="zz",
            tool_id="builtin:read_file",
            tool_name="read_file",
            execution="sync",
            input={},
        ),
        ToolProgress(turn_id=TURN_ID, ts=stamp(9), tool_call_id="zz", source="sync", progress=1),
        ToolResult(
            turn_id=TURN_ID,
            ts=stamp(9),
            tool_call_id="zz",
            tool_name="read_file",
            source="runtime",
            result=ToolResultData(output="x", is_error=True),
        ),
    ],
    ids=lambda e: e.type,
)
def test_tool_records_targeting_unknown_tool_calls(event: TurnEvent) -> None:
    h = batch(History(), [("a", "read_file", {})])
    h.require("a")
    assert_rejects([*h.events, event], len(h.events) + 1, "unknown tool call 'zz'")


def test_conflicting_effective_permission_decisions() -> None:
    h = batch(History(), [("a", "write_file", {})])
    h.require("a")
    first = h.resolve("a", "allow")
    flipped = edit(first, decision="deny", ts=stamp(9))
    assert_rejects([*h.events, flipped], len(h.events) + 1, "conflicting permission decisions")
    assert_rejects([*h.events, first], len(h.events) + 1, "already resolved allow")


def test_permission_records_for_calls_that_required_none() -> None:
    h = batch(History(), [("a", "read_file", {})])
    resolved = ToolPermissionResolved(
        turn_id=TURN_ID, ts=stamp(9), tool_call_id="a", decision="allow", source="human"
    )
    assert_rejects([*h.events, resolved], 4, "which required no permission")
    classified = ToolPermissionClassified(
        turn_id=TURN_ID, ts=stamp(9), tool_call_id="a", decision="allow", reason="r"
    )
    assert_rejects([*h.events, classified], 4, "which required no permission")
    failed = ToolPermissionClassificationFailed(
        turn_id=TURN_ID, ts=stamp(9), tool_call_ids=["a"], error="e"
    )
    assert_rejects([*h.events, failed], 4, "which required no permission")


def test_permission_bookkeeping_rules() -> None:
    h = batch(History(created(auto_permission=True)), [("a", "write_file", {})])
    req = h.require("a")
    assert_rejects([*h.events, req], 5, "was already required")
    cls = h.classify("a", "allow")
    assert_rejects([*h.events, cls], 6, "was classified twice")
    h.resolve("a", "allow", "classifier")
    assert_rejects([*h.events, edit(cls, ts=stamp(9))], 7, "after its permission was resolved")
    failed = ToolPermissionClassificationFailed(
        turn_id=TURN_ID, ts=stamp(9), tool_call_ids=["a"], error="e"
    )
    assert_rejects([*h.events, failed], 7, "after its permission was resolved")
    wrong_name = edit(req, tool_name="read_file")
    assert_rejects(
        [*h.events[:3], wrong_name], 4, "names 'read_file' but tool call 'a' is 'write_file'"
    )

    h = batch(History(), [("b", "read_file", {})])
    h.invoke("b")
    late = ToolPermissionRequired(
        turn_id=TURN_ID, ts=stamp(9), tool_call_id="b", tool_name="read_file", request=None
    )
    assert_rejects([*h.events, late], 5, "was required after its invocation")


def test_invocation_needs_an_allow_decision_when_permission_was_required() -> None:
    h = batch(History(), [("a", "write_file", {})])
    h.require("a")
    inv = ToolInvocationRequested(
        turn_id=TURN_ID,
        ts=stamp(9),
        tool_call_id="a",
        tool_id="builtin:write_file",
        tool_name="write_file",
        execution="sync",
        input={},
    )
    assert_rejects([*h.events, inv], 5, "invoked without an allow decision")
    h.resolve("a", "deny")
    assert_rejects([*h.events, inv], 6, "invoked without an allow decision")


def test_invocation_must_match_the_model_call_and_the_tool_snapshot() -> None:
    h = batch(History(), [("a", "read_file", {"p": 1}), ("u", "nope", {})])
    good = ToolInvocationRequested(
        turn_id=TURN_ID,
        ts=stamp(3),
        tool_call_id="a",
        tool_id="builtin:read_file",
        tool_name="read_file",
        execution="sync",
        input={"p": 1},
    )
    reduce_ok([*h.events, good])
    n = len(h.events) + 1
    assert_rejects([*h.events, edit(good, input={"p": 2})], n, "differs from the model's")
    assert_rejects(
        [*h.events, edit(good, tool_name="write_file")], n, "but the model called 'read_file'"
    )
    assert_rejects(
        [*h.events, edit(good, tool_id="builtin:other")], n, "contradicts the turn's tool snapshot"
    )
    assert_rejects(
        [*h.events, edit(good, execution="async")], n, "contradicts the turn's tool snapshot"
    )
    unknown = edit(good, tool_call_id="u", tool_name="nope", tool_id="x:nope", input={})
    assert_rejects([*h.events, unknown], n, "which is not in the turn's tool set")
    assert_rejects([*h.events, good, edit(good, ts=stamp(9))], n + 1, "was invoked twice")


def test_progress_after_a_terminal_result() -> None:
    h = batch(History(), [("a", "read_file", {})])
    h.invoke("a")
    p = h.progress("a")
    h.result("a")
    assert_rejects(
        [*h.events, edit(p, ts=stamp(9))], len(h.events) + 1, "after its terminal result"
    )


def test_progress_rules() -> None:
    h = batch(History(), [("a", "read_file", {}), ("j", "run_job", {})])
    p = ToolProgress(turn_id=TURN_ID, ts=stamp(9), tool_call_id="a", source="sync", progress=1)
    assert_rejects([*h.events, p], 4, "which was never invoked")
    h.invoke("a")
    h.invoke("j")
    assert_rejects([*h.events, edit(p, source="async")], 6, "async progress for sync tool call 'a'")
    assert_rejects(
        [*h.events, edit(p, tool_call_id="j")], 6, "sync progress for async tool call 'j'"
    )


def test_duplicate_terminal_tool_results() -> None:
    h = batch(History(), [("a", "read_file", {}), ("b", "read_file", {})])
    h.invoke("a")
    r = h.result("a")
    assert_rejects(
        [*h.events, edit(r, ts=stamp(9))], 6, "duplicate terminal result for tool call 'a'"
    )
    runtime = edit(r, source="runtime", ts=stamp(9))
    assert_rejects([*h.events, runtime], 6, "duplicate terminal result")


def test_async_external_result_for_a_sync_tool() -> None:
    h = batch(History(), [("a", "read_file", {})])
    h.invoke("a")
    r = ToolResult(
        turn_id=TURN_ID,
        ts=stamp(9),
        tool_call_id="a",
        tool_name="read_file",
        source="async",
        result=ToolResultData(output=1, is_error=False),
    )
    assert_rejects([*h.events, r], 5, "async result for sync tool call 'a'")


def test_sync_execution_result_for_an_async_tool() -> None:
    h = batch(History(), [("j", "run_job", {})])
    h.invoke("j")
    r = ToolResult(
        turn_id=TURN_ID,
        ts=stamp(9),
        tool_call_id="j",
        tool_name="run_job",
        source="sync",
        result=ToolResultData(output=1, is_error=True),
    )
    assert_rejects([*h.events, r], 5, "sync result for async tool call 'j'")
    # A runtime-generated error is the explicit exception (§24).
    reduce_ok([*h.events, edit(r, source="runtime")])


def test_tool_side_result_without_invocation() -> None:
    h = batch(History(), [("a", "read_file", {})])
    r = ToolResult(
        turn_id=TURN_ID,
        ts=stamp(9),
        tool_call_id="a",
        tool_name="read_file",
        source="sync",
        result=ToolResultData(output=1, is_error=False),
    )
    assert_rejects([*h.events, r], 4, "which was never invoked")
    assert_rejects([*h.events, edit(r, source="async")], 4, "which was never invoked")
    assert_rejects([*h.events, edit(r, source="runtime", tool_name="x")], 4, "names 'x'")


def test_next_model_call_before_all_tool_results() -> None:
    h = batch(History(), [("a", "read_file", {}), ("b", "run_job", {})])
    h.invoke("a")
    h.invoke("b")
    h.result("a")
    req = ModelCallRequested(
        turn_id=TURN_ID,
        ts=stamp(9),
        model_call_index=1,
        request=ModelRequest(
            messages=["assistant:0", "toolResult:a", "toolResult:b"], parameters={}
        ),
    )
    assert_rejects([*h.events, req], 7, "before tool calls ['b'] have results")


def test_model_facing_tool_result_order_must_be_source_order() -> None:
    h = batch(History(), [("a", "read_file", {}), ("b", "write_file", {})])
    h.invoke("a")
    h.invoke("b")
    h.result("b")
    h.result("a")
    good = h.request()
    assert good.request.messages == ["assistant:0", "toolResult:a", "toolResult:b"]
    swapped = edit(
        good,
        request=ModelRequest(
            messages=["assistant:0", "toolResult:b", "toolResult:a"], parameters={}
        ),
    )
    n = len(h.events)
    assert_rejects([*h.events[:-1], swapped], n, "tool results in call order")
    missing = edit(
        good, request=ModelRequest(messages=["assistant:0", "toolResult:a"], parameters={})
    )
    assert_rejects([*h.events[:-1], missing], n, "tool results in call order")
    no_assistant = edit(
        good, request=ModelRequest(messages=["toolResult:a", "toolResult:b"], parameters={})
    )
    assert_rejects([*h.events[:-1], no_assistant], n, "transcript requires")


def test_turn_completed_while_tool_calls_are_unresolved() -> None:
    h = batch(History(), [("a", "read_file", {})])
    assert h.last_response is not None
    done = TurnCompleted(
        turn_id=TURN_ID,
        ts=stamp(9),
        output=h.last_response,
        finish_reason="stop",
        usage=USAGE,
    )
    assert_rejects(
        [*h.events, done], 4, "turn_completed while tool calls ['a'] lack terminal results"
    )


def test_turn_completed_must_follow_a_tool_free_response() -> None:
    h = batch(History(), [("a", "read_file", {})])
    h.invoke("a")
    h.result("a")
    assert h.last_response is not None
    done = TurnCompleted(
        turn_id=TURN_ID, ts=stamp(9), output=h.last_response, finish_reason="stop", usage=USAGE
    )
    assert_rejects([*h.events, done], 6, "after a response that called tools")
    nothing = History()
    assert_rejects([*nothing.events, done], 2, "without a completed final model call")
    h = History()
    h.request()
    h.complete("the answer")
    assert_rejects(
        [*h.events, edit(done, output=AssistantMessage(content="another answer"))],
        4,
        "differs from the final model response",
    )
    final = h.last_response
    assert final is not None
    assert_rejects(
        [*h.events, edit(done, output=final, finish_reason="length")],
        4,
        "finishReason 'length' differs",
    )
    h2 = History()
    h2.request()
    h2.fail_call()
    assert_rejects([*h2.events, done], 4, "without a completed final model call")
    h3 = History()
    h3.request()
    assert_rejects([*h3.events, done], 3, "while model call 0 is unresolved")


@pytest.mark.parametrize("terminal", ["failed", "cancelled"])
def test_terminal_while_unresolved_calls_lack_synthetic_results(terminal: str) -> None:
    h = batch(History(), [("a", "read_file", {}), ("j", "run_job", {})])
    h.invoke("a")
    h.invoke("j")
    h.result("a")
    h.suspend()
    event: TurnEvent
    if terminal == "failed":
        event = TurnFailed(turn_id=TURN_ID, ts=stamp(9), error="x", usage=USAGE)
    else:
        event = TurnCancelled(turn_id=TURN_ID, ts=stamp(9), usage=USAGE)
    assert_rejects(
        [*h.events, event], 8, f"turn_{terminal} while tool calls ['j'] lack terminal results"
    )
    # With the synthetic closure result it is fine.
    h.result("j", "cancelled", is_error=True, source="runtime")
    reduce_ok([*h.events, event])
    # And an open model call must be closed first (model_call_failed), too.
    h2 = History()
    h2.request()
    assert_rejects([*h2.events, event], 3, "while model call 0 is unresolved")


def _after_terminal_events() -> list[TurnEvent]:
    return [
        created(),
        ModelCallRequested(
            turn_id=TURN_ID,
            ts=stamp(99),
            model_call_index=1,
            request=ModelRequest(messages=[], parameters={}),
        ),
        ModelStepEvent(turn_id=TURN_ID, ts=stamp(99), model_call_index=0, event=StepTextStart()),
        ModelCallCompleted(
            turn_id=TURN_ID,
            ts=stamp(99),
            model_call_index=0,
            message=AssistantMessage(content="x"),
            finish_reason="stop",
            usage=USAGE,
        ),
        ModelCallFailed(turn_id=TURN_ID, ts=stamp(99), model_call_index=0, error="late"),
        ToolPermissionRequired(
            turn_id=TURN_ID, ts=stamp(99), tool_call_id="c1", tool_name="read_file", request=None
        ),
        ToolPermissionClassified(
            turn_id=TURN_ID, ts=stamp(99), tool_call_id="c1", decision="allow", reason="r"
        ),
        ToolPermissionClassificationFailed(
            turn_id=TURN_ID, ts=stamp(99), tool_call_ids=["c1"], error="e"
        ),
        ToolPermissionResolved(
            turn_id=TURN_ID, ts=stamp(99), tool_call_id="c1", decision="allow", source="human"
        ),
        ToolInvocationRequested(
            turn_id=TURN_ID,
            ts=stamp(99),
            tool_call_id="c1",
            tool_id="builtin:read_file",
            tool_name="read_file",
            execution="sync",
            input={"path": "a.txt"},
        ),
        ToolProgress(turn_id=TURN_ID, ts=stamp(99), tool_call_id="c1", source="sync", progress=1),
        ToolResult(
            turn_id=TURN_ID,
            ts=stamp(99),
            tool_call_id="c1",
            tool_name="read_file",
            source="sync",
            result=ToolResultData(output=1, is_error=False),
        ),
        TurnSuspended(
            turn_id=TURN_ID,
            ts=stamp(99),
            pending_permissions=[],
            pending_async_tools=[],
            usage=USAGE,
        ),
        TurnCompleted(
            turn_id=TURN_ID,
            ts=stamp(99),
            output=AssistantMessage(content="It says hi."),
            finish_reason="stop",
            usage=USAGE,
        ),
        TurnFailed(turn_id=TURN_ID, ts=stamp(99), error="x", usage=USAGE),
        TurnCancelled(turn_id=TURN_ID, ts=stamp(99), usage=USAGE),
    ]


def _terminal_histories() -> dict[str, History]:
    return {
        "completed": tool_turn(),
        "failed": s_model_call_limit(),
        "cancelled": s_cancel_while_suspended(),
    }


def test_after_terminal_list_covers_every_event_type() -> None:
    assert {e.type for e in _after_terminal_events()} == set(EVENT_TYPES)


@pytest.mark.parametrize("terminal", ["completed", "failed", "cancelled"])
@pytest.mark.parametrize("event", _after_terminal_events(), ids=lambda e: e.type)
def test_no_event_after_a_terminal_event(terminal: str, event: TurnEvent) -> None:
    h = _terminal_histories()[terminal]
    events = [*h.events, event]
    assert_rejects(events, len(events), f"{event.type} follows the terminal event turn_{terminal}")


def test_multiple_terminal_events() -> None:
    h = tool_turn()
    assert_rejects([*h.events, h.events[-1]], len(h.events) + 1, "follows the terminal event")


def test_terminal_state_is_immutable() -> None:
    for h in _terminal_histories().values():
        reducer = TurnReducer.of(h.events)
        before = reducer.state.to_wire()
        for event in _after_terminal_events():
            with pytest.raises(CorruptTurnError):
                reducer.apply(event)
        assert reducer.state.to_wire() == before
        assert reducer.event_count == len(h.events)


def test_context_ref_inconsistent_with_the_definition() -> None:
    ref = ContextRef(previous_turn_id=PREV_ID)
    h = History(created(context=ref))
    good = h.request()
    assert good.request.context_ref == ref and good.request.messages == ["input"]
    reduce_ok(h.events)
    other = ContextRef(previous_turn_id=TURN_ID)
    assert_rejects(
        [
            h.events[0],
            edit(good, request=ModelRequest(context_ref=other, messages=["input"], parameters={})),
        ],
        2,
        "contextRef does not match",
    )
    assert_rejects(
        [h.events[0], edit(good, request=ModelRequest(messages=["input"], parameters={}))],
        2,
        "contextRef does not match",
    )
    inline = History(created(context=[UserMessage(content="x")]))
    req = inline.request()
    assert_rejects(
        [
            inline.events[0],
            edit(
                req,
                request=ModelRequest(context_ref=ref, messages=["context", "input"], parameters={}),
            ),
        ],
        2,
        "has a contextRef but the turn's context is inline",
    )


def test_context_ref_on_a_non_initial_call() -> None:
    ref = ContextRef(previous_turn_id=PREV_ID)
    h = History(created(context=ref))
    h.request()
    h.fail_call()
    second = h.request()
    assert second.request.context_ref is None
    bad = edit(second, request=ModelRequest(context_ref=ref, messages=[], parameters={}))
    assert_rejects([*h.events[:-1], bad], 4, "model call 1 has a contextRef; only call 0 may")


@pytest.mark.parametrize(
    ("context", "refs", "ok"),
    [
        ([], ["input"], True),
        ([], ["context", "input"], False),
        ([UserMessage(content="x")], ["context", "input"], True),
        ([UserMessage(content="x")], ["input"], False),
        ([UserMessage(content="x")], ["input", "context"], False),
        ([], [], False),
        ([], ["input", "input"], False),
    ],
)
def test_call_zero_refs(context: list[Any], refs: list[str], ok: bool) -> None:
    first = created(context=context)
    req = ModelCallRequested(
        turn_id=TURN_ID,
        ts=stamp(1),
        model_call_index=0,
        request=ModelRequest(messages=refs, parameters={}),
    )
    if ok:
        reduce_ok([first, req])
    else:
        assert_rejects([first, req], 2, "but the transcript requires")


def test_reissue_after_interruption_must_reference_nothing() -> None:
    h = History()
    h.request()
    h.fail_call()
    req = h.request()
    assert req.request.messages == []
    reduce_ok(h.events)
    bad = edit(req, request=ModelRequest(messages=["input"], parameters={}))
    assert_rejects([*h.events[:-1], bad], 4, "requires []")


def test_no_model_call_after_a_tool_free_response() -> None:
    h = History()
    h.request()
    h.complete("final")
    req = ModelCallRequested(
        turn_id=TURN_ID,
        ts=stamp(9),
        model_call_index=1,
        request=ModelRequest(messages=["assistant:0"], parameters={}),
    )
    assert_rejects([*h.events, req], 4, "follows a response without tool calls")


def test_model_call_limit_is_enforced() -> None:
    h = History(created(max_model_calls=1))
    batch(h, [("a", "read_file", {})])
    h.invoke("a")
    h.result("a")
    req = ModelCallRequested(
        turn_id=TURN_ID,
        ts=stamp(9),
        model_call_index=1,
        request=ModelRequest(messages=["assistant:0", "toolResult:a"], parameters={}),
    )
    assert_rejects([*h.events, req], len(h.events) + 1, "exceeds maxModelCalls=1")


def test_result_tool_name_must_match_the_call() -> None:
    h = batch(History(), [("a", "read_file", {})])
    h.invoke("a")
    r = ToolResult(
        turn_id=TURN_ID,
        ts=stamp(9),
        tool_call_id="a",
        tool_name="write_file",
        source="sync",
        result=ToolResultData(output=1, is_error=False),
    )
    assert_rejects([*h.events, r], 5, "names 'write_file' but tool call 'a' is 'read_file'")


# ---------------------------------------------------------------- copy, fold


def test_copy_is_independent() -> None:
    h = s_mixed_sync_async_reverse_results()
    cut = 8
    reducer = TurnReducer.of(h.events[:cut])
    before = reducer.state.to_wire()
    trial = reducer.copy()
    for e in h.events[cut:]:
        trial.apply(e)
    assert reducer.state.to_wire() == before
    assert reducer.event_count == cut
    assert trial.state.to_wire() == reduce_turn(h.events).to_wire()
    assert trial.event_count == len(h.events)


def test_state_of_an_empty_reducer_is_an_error() -> None:
    reducer = TurnReducer()
    assert not reducer.started and reducer.event_count == 0
    with pytest.raises(CorruptTurnError):
        _ = reducer.state


def test_state_view_is_not_shared_with_the_reducer() -> None:
    h = batch(History(), [("a", "read_file", {})])
    h.invoke("a")
    reducer = TurnReducer.of(h.events)
    state = reducer.state
    state.tool_calls[0].progress.append(
        ToolProgress(turn_id=TURN_ID, ts=stamp(9), tool_call_id="a", source="sync", progress=0)
    )
    state.model_calls.clear()
    reducer.apply(h.progress("a"))
    fresh = reducer.state
    assert len(fresh.model_calls) == 1
    assert len(fresh.tool_calls[0].progress) == 1


def test_reduce_turn_line_points_at_the_offending_event_not_its_cause() -> None:
    # The unresolved call is in line 3; the offending event is the request on line 6.
    h = batch(History(), [("a", "read_file", {}), ("b", "read_file", {})])
    h.invoke("a")
    h.result("a")
    req = ModelCallRequested(
        turn_id=TURN_ID,
        ts=stamp(9),
        model_call_index=1,
        request=ModelRequest(messages=["assistant:0", "toolResult:a"], parameters={}),
    )
    later = ModelCallFailed(turn_id=TURN_ID, ts=stamp(10), model_call_index=1, error="x")
    err = assert_rejects([*h.events, req, later], 6, "before tool calls ['b']")
    assert str(err) == f"line 6: {err.rule}"


def test_model_of_the_definition_is_untouched_by_requests() -> None:
    state = reduce_ok(s_context_ref_and_inherited_agent().events)
    assert state.definition.agent.resolved.model == ModelDescriptor(
        provider="anthropic", model="claude"
    )
    assert state.definition.agent.resolved.model != MODEL
    # The reducer keeps the reference opaque: it never materializes the context.
    assert state.definition.context == ContextRef(previous_turn_id=PREV_ID)
    assert state.model_calls[0].request.context_ref == ContextRef(previous_turn_id=PREV_ID)


def test_classification_needs_auto_permission() -> None:
    h = batch(History(created(auto_permission=False)), [("a", "read_file", {})])
    h.require("a")
    h.classify("a", "allow")
    assert_rejects(h.events, len(h.events), "without autoPermission")
    h = batch(History(created(auto_permission=False)), [("a", "read_file", {})])
    h.require("a")
    h.classification_failed(["a"])
    assert_rejects(h.events, len(h.events), "without autoPermission")


def test_classifier_decisions_must_follow_the_classification() -> None:
    h = batch(History(created(auto_permission=True)), [("a", "read_file", {})])
    h.require("a")
    h.classify("a", "deny")
    h.resolve("a", "allow", "classifier")
    assert_rejects(h.events, len(h.events), "whose classification said deny")
    h = batch(History(created(auto_permission=True)), [("a", "read_file", {})])
    h.require("a")
    h.resolve("a", "allow", "classifier")
    assert_rejects(h.events, len(h.events), "whose classification said nothing")


def test_human_sources_must_match_human_availability() -> None:
    h = batch(History(created(human_available=False)), [("a", "read_file", {})])
    h.require("a")
    h.resolve("a", "allow", "human")
    assert_rejects(h.events, len(h.events), "in a turn without a human")
    h = batch(History(created(human_available=True)), [("a", "read_file", {})])
    h.require("a")
    h.resolve("a", "deny", "human_unavailable")
    assert_rejects(h.events, len(h.events), "human_unavailable in a turn with a human")


@pytest.mark.parametrize("auto_permission", [False, True])
def test_no_human_means_deny_never_allow(auto_permission: bool) -> None:
    """§9.3: without a human, a call that waits on one is denied. ``human_unavailable``
    says nobody was asked, so it cannot carry an allow that lets the tool run."""
    h = batch(
        History(created(human_available=False, auto_permission=auto_permission)),
        [("w", "write_file", {})],
    )
    h.require("w")
    if auto_permission:
        h.classify("w", "defer")
    h.resolve("w", "allow", "human_unavailable")
    h.invoke("w")
    assert_rejects(h.events, len(h.events) - 1, "without a human the decision is deny")


def test_turn_completed_repeats_the_aggregate_usage() -> None:
    h = History()
    h.request()
    h.complete("the answer")
    done = h.finish()
    h.events[-1] = edit(done, usage=TurnUsage(input_tokens=1))
    assert_rejects(h.events, len(h.events), "usage differs from the turn's aggregate usage")


# ---------------------------------------------------------------- issue 16: invariants the
# §9.3 matrix, §10.2 and §24 imply. Each history is valid up to its last event.


def _auto(human: bool = True) -> History:
    return History(first=created(auto_permission=True, human_available=human))


def test_a_human_cannot_overrule_a_classifier_deny() -> None:
    h = batch(_auto(), [("w", "write_file", {})])
    h.require("w")
    h.classify("w", "deny")
    h.resolve("w", "allow", source="human")
    assert_rejects(h.events, len(h.events), "not awaiting a human")


def test_a_human_cannot_overrule_a_classifier_allow() -> None:
    h = batch(_auto(), [("w", "write_file", {})])
    h.require("w")
    h.classify("w", "allow")
    h.resolve("w", "deny", source="human")
    assert_rejects(h.events, len(h.events), "not awaiting a human")


def test_a_human_decides_after_a_defer_or_a_classifier_failure() -> None:
    h = batch(_auto(), [("w", "write_file", {}), ("v", "write_file", {})])
    h.require("w")
    h.require("v")
    h.classify("w", "defer")
    h.classification_failed(["v"])
    h.resolve("w", "allow", source="human")
    h.resolve("v", "deny", source="human")
    reduce_ok(h.events)


def test_a_checker_error_is_never_classified() -> None:
    """§9.3: a checker that throws fails closed — ask a human, never execute automatically."""
    h = batch(_auto(), [("w", "write_file", {})])
    h.require("w", checker_error="boom")
    h.classify("w", "allow")
    assert_rejects(h.events, len(h.events), "permission checker failed")
    h = batch(_auto(), [("w", "write_file", {})])
    h.require("w", checker_error="boom")
    h.classification_failed(["w"])
    assert_rejects(h.events, len(h.events), "permission checker failed")


def test_a_human_decides_after_a_checker_error_in_auto_mode() -> None:
    h = batch(_auto(), [("w", "write_file", {})])
    h.require("w", checker_error="boom")
    h.resolve("w", "allow", source="human")
    h.invoke("w")
    reduce_ok(h.events)


def test_a_runtime_result_is_an_error() -> None:
    h = batch(History(), [("r", "no_such_tool", {})])
    h.result("r", "it worked?", is_error=False, source="runtime")
    assert_rejects(h.events, len(h.events), "runtime result must be an error")


@pytest.mark.parametrize("end", ["fail", "cancel"])
def test_a_final_response_is_followed_by_completion_only(end: str) -> None:
    """§18 10.l: a response without tool calls completes the turn."""
    h = batch(History(), [], text="The answer.")
    if end == "fail":
        h.fail_turn()
    else:
        h.cancel()
    assert_rejects(h.events, len(h.events), "a response without tool calls completes the turn")


def test_failing_or_cancelling_is_fine_elsewhere() -> None:
    h = batch(History(), [("r", "read_file", {})])
    h.invoke("r")
    h.result("r", "interrupted", is_error=True, source="runtime")
    h.cancel()
    reduce_ok(h.events)
    h = History()
    h.request()
    h.fail_call("provider down")
    h.fail_turn()
    reduce_ok(h.events)


def test_a_human_only_async_tool_is_not_left_pending_without_a_human() -> None:
    """§10.2: without a human it gets its invocation and an immediate runtime error."""
    h = batch(History(first=created(human_available=False)), [("q", "ask_human", {})])
    h.invoke("q")
    snapshot = TurnSuspended(
        turn_id=TURN_ID,
        ts=stamp(len(h.events)),
        pending_permissions=[],
        pending_async_tools=h.pending_async(),
        usage=h.usage,
    )
    assert_rejects([*h.events, snapshot], len(h.events) + 1, "needs a human")
    result = ToolResult(
        turn_id=TURN_ID,
        ts=stamp(len(h.events)),
        tool_call_id="q",
        tool_name="ask_human",
        source="async",
        result=ToolResultData(output="an answer from nobody", is_error=False),
    )
    assert_rejects([*h.events, result], len(h.events) + 1, "needs a human")


def test_a_classification_failure_names_at_least_one_call() -> None:
    h = batch(_auto(), [("w", "write_file", {})])
    h.require("w")
    h.classification_failed([])
    assert_rejects(h.events, len(h.events), "names no tool call")


@pytest.mark.parametrize("kind", ["turn_failed", "turn_cancelled", "turn_suspended"])
def test_settle_point_usage_is_the_aggregate(kind: str) -> None:
    """turn_failed, turn_cancelled and turn_suspended carry the turn's usage, like turn_completed."""
    h = batch(History(), [("j", "run_job", {})])
    h.invoke("j")
    wrong = TurnUsage(input_tokens=1)
    if kind == "turn_suspended":
        bad: TurnEvent = TurnSuspended(
            turn_id=TURN_ID,
            ts=stamp(50),
            pending_permissions=[],
            pending_async_tools=h.pending_async(),
            usage=wrong,
        )
    else:
        h.result("j", "closed", is_error=True, source="runtime")
        if kind == "turn_failed":
            bad = TurnFailed(turn_id=TURN_ID, ts=stamp(50), error="x", usage=wrong)
        else:
            bad = TurnCancelled(turn_id=TURN_ID, ts=stamp(50), usage=wrong)
    assert_rejects([*h.events, bad], len(h.events) + 1, "the turn's aggregate usage")
