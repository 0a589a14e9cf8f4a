"""The reducer's transition tables, checked pair by pair (pure, no Temporal).

Every call record moves through ``MODEL_CALL_TRANSITIONS`` or
``TOOL_CALL_TRANSITIONS``. For every phase and every move, we build a log that
leaves one call in that phase, apply one event that is that move, and check
that the call reaches the table's phase, or, for a pair the table lacks, that
the event is refused and the reducer is left exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import product
from typing import Any, get_args

import pytest

from tests.histories import History, created
from turncore.errors import CorruptTurnError
from turncore.events import (
    StepTextStart,
    ToolInvocationRequested,
    ToolProgress,
    ToolResult,
    ToolResultData,
    TurnEvent,
)
from turncore.reducer import (
    MODEL_CALL_TRANSITIONS,
    TOOL_CALL_TRANSITIONS,
    ModelCallMove,
    ModelCallPhase,
    ToolCallMove,
    ToolCallPhase,
    TurnReducer,
    reduce_turn,
)

TOOL_PHASES: tuple[ToolCallPhase, ...] = get_args(ToolCallPhase)
TOOL_MOVES: tuple[ToolCallMove, ...] = get_args(ToolCallMove)
MODEL_PHASES: tuple[ModelCallPhase, ...] = get_args(ModelCallPhase)
MODEL_MOVES: tuple[ModelCallMove, ...] = get_args(ModelCallMove)

# ---------------------------------------------------------------- tool calls


def _tool_history(phase: ToolCallPhase, move: ToolCallMove) -> History:
    """A turn whose call ``a`` (a known sync tool) is in ``phase``.

    The turn has ``autoPermission`` and a human, so every move can be spelled:
    ``awaiting_human`` is reached through a checker failure. A classified call
    was classified as the move's classifier resolution says, so that pair
    fails only if the table says it does.
    """
    h = History(created(auto_permission=True, human_available=True))
    h.request()
    h.complete("Reading.", [("a", "read_file", {"path": "x"})])
    decision: Any = "deny" if move.endswith("/classifier/deny") else "allow"
    match phase:
        case "proposed":
            pass
        case "permission_required":
            h.require("a")
        case "awaiting_human":
            h.require("a", checker_error="checker down")
        case "deferred":
            h.require("a")
            h.classify("a", "defer")
        case "classified":
            h.require("a")
            h.classify("a", decision)
        case "allowed" | "denied":
            h.require("a")
            h.classify("a", "allow" if phase == "allowed" else "deny")
            h.resolve("a", "allow" if phase == "allowed" else "deny", "classifier")
        case "invoked":
            h.invoke("a")
        case "done":
            h.invoke("a")
            h.result("a")
    return h


def _tool_event(h: History, move: ToolCallMove) -> TurnEvent:
    """One event for call ``a`` that the table names ``move`` (built without the
    builder's own bookkeeping where that would assume the move is legal)."""
    base = {"turn_id": h.turn_id, "ts": h._ts(), "tool_call_id": "a"}
    events: dict[ToolCallMove, Callable[[], TurnEvent]] = {
        "tool_permission_required": lambda: h.require("a"),
        "tool_permission_required/human": lambda: h.require("a", checker_error="checker down"),
        "tool_permission_classified": lambda: h.classify("a", "allow"),
        "tool_permission_classified/defer": lambda: h.classify("a", "defer"),
        "tool_permission_classification_failed": lambda: h.classification_failed(["a"]),
        "tool_permission_resolved/classifier/allow": lambda: h.resolve("a", "allow", "classifier"),
        "tool_permission_resolved/classifier/deny": lambda: h.resolve("a", "deny", "classifier"),
        "tool_permission_resolved/human/allow": lambda: h.resolve("a", "allow", "human"),
        "tool_permission_resolved/human/deny": lambda: h.resolve("a", "deny", "human"),
        "tool_invocation_requested": lambda: ToolInvocationRequested(
            **base,
            tool_id="builtin:read_file",
            tool_name="read_file",
            execution="sync",
            input={"path": "x"},
        ),
        "tool_progress": lambda: ToolProgress(**base, source="sync", progress={"pct": 1}),
        "tool_result": lambda: ToolResult(
            **base,
            tool_name="read_file",
            source="sync",
            result=ToolResultData(output="ok", is_error=False),
        ),
        "tool_result/runtime": lambda: ToolResult(
            **base,
            tool_name="read_file",
            source="runtime",
            result=ToolResultData(output="no", is_error=True),
        ),
    }
    event = events[move]()
    if h.events and h.events[-1] is event:
        h.events.pop()  # the builder appended it; the test applies it itself
    return event


@pytest.mark.parametrize(("phase", "move"), list(product(TOOL_PHASES, TOOL_MOVES)))
def test_tool_call_table(phase: ToolCallPhase, move: ToolCallMove) -> None:
    h = _tool_history(phase, move)
    reducer = TurnReducer.of(h.events)
    assert reducer.state.tool_call("a") is not None
    assert reducer.state.tool_calls[0].phase == phase
    event = _tool_event(h, move)
    reducer = TurnReducer.of(h.events)  # no view built: a refusal must leave no trace
    target = TOOL_CALL_TRANSITIONS.get((phase, move))
    if target is None:
        with pytest.raises(CorruptTurnError):
            reducer.apply(event)
        assert reducer.event_count == len(h.events)
        assert reducer.state == reduce_turn(h.events)
    else:
        reducer.apply(event)
        assert reducer.state.tool_calls[0].phase == target


def test_tool_table_names_only_known_phases_and_moves() -> None:
    for (phase, move), target in TOOL_CALL_TRANSITIONS.items():
        assert phase in TOOL_PHASES and move in TOOL_MOVES and target in TOOL_PHASES


def test_terminal_phases_have_no_way_out() -> None:
    """Settled records never change: ``copy()`` shares them on that promise."""
    assert not [k for k in TOOL_CALL_TRANSITIONS if k[0] == "done"]
    assert not [k for k in MODEL_CALL_TRANSITIONS if k[0] in ("completed", "failed")]


@pytest.mark.parametrize(
    ("phase", "move", "rule"),
    [
        ("done", "tool_progress", "after its terminal result"),
        ("done", "tool_result/runtime", "duplicate terminal result"),
        ("proposed", "tool_progress", "which was never invoked"),
        ("proposed", "tool_permission_classified", "which required no permission"),
        ("permission_required", "tool_invocation_requested", "without an allow decision"),
        ("permission_required", "tool_permission_resolved/human/allow", "not decided it yet"),
        ("classified", "tool_permission_resolved/human/deny", "the classifier decided allow"),
        ("awaiting_human", "tool_permission_classified", "permission checker failed"),
        ("awaiting_human", "tool_permission_resolved/classifier/allow", "said nothing"),
        ("deferred", "tool_permission_classification_failed", "classified twice"),
        ("deferred", "tool_permission_resolved/classifier/allow", "said defer"),
        ("allowed", "tool_permission_resolved/human/deny", "already resolved allow"),
        ("invoked", "tool_invocation_requested", "invoked twice"),
        ("invoked", "tool_permission_required", "required after its invocation"),
        ("denied", "tool_result", "which was never invoked"),
    ],
)
def test_refused_tool_pairs_name_their_rule(
    phase: ToolCallPhase, move: ToolCallMove, rule: str
) -> None:
    assert (phase, move) not in TOOL_CALL_TRANSITIONS
    h = _tool_history(phase, move)
    event = _tool_event(h, move)
    with pytest.raises(CorruptTurnError) as info:
        TurnReducer.of(h.events).apply(event)
    assert rule in info.value.rule


def test_without_auto_permission_a_required_permission_awaits_a_human() -> None:
    """``tool_permission_required/human`` without a checker failure: the turn's rule."""
    h = History(created(auto_permission=False))
    h.request()
    h.complete("Reading.", [("a", "read_file", {})])
    h.require("a")
    state = reduce_turn(h.events)
    assert state.tool_calls[0].phase == "awaiting_human"
    assert [p.tool_call_id for p in state.pending_permissions()] == ["a"]
    h.classify("a", "allow")
    with pytest.raises(CorruptTurnError, match="without autoPermission"):
        reduce_turn(h.events)


# ---------------------------------------------------------------- model calls


def _model_history(phase: ModelCallPhase) -> History:
    h = History()
    h.request()
    match phase:
        case "requested":
            pass
        case "streaming":
            h.step(StepTextStart())
        case "completed":
            h.complete("Reading.", [("a", "read_file", {})])
        case "failed":
            h.fail_call()
    return h


def _model_event(h: History, move: ModelCallMove) -> TurnEvent:
    h.open_index = 0  # spell the event even when the call is settled
    events: dict[ModelCallMove, Callable[[], TurnEvent]] = {
        "model_step_event": lambda: h.step(StepTextStart()),
        "model_call_completed": lambda: h.complete("Done."),
        "model_call_failed": lambda: h.fail_call(),
    }
    event = events[move]()
    h.events.pop()
    return event


@pytest.mark.parametrize(("phase", "move"), list(product(MODEL_PHASES, MODEL_MOVES)))
def test_model_call_table(phase: ModelCallPhase, move: ModelCallMove) -> None:
    h = _model_history(phase)
    assert reduce_turn(h.events).model_calls[0].phase == phase
    event = _model_event(h, move)
    reducer = TurnReducer.of(h.events)
    target = MODEL_CALL_TRANSITIONS.get((phase, move))
    if target is None:
        with pytest.raises(CorruptTurnError, match=f"which already {phase}"):
            reducer.apply(event)
        assert reducer.event_count == len(h.events)
        assert reducer.state == reduce_turn(h.events)
    else:
        reducer.apply(event)
        assert reducer.state.model_calls[0].phase == target
        assert (reducer.state.open_model_call() is not None) == (target == "streaming")


# ---------------------------------------------------------------- copies


def test_a_copy_shares_settled_records_and_clones_open_ones() -> None:
    h = History()
    h.request()
    h.complete("Reading.", [("a", "read_file", {}), ("b", "read_file", {})])
    h.invoke("a")
    h.result("a")
    h.invoke("b")
    original = TurnReducer.of(h.events)
    before = original.state
    trial = original.copy()
    trial.apply(h.progress("b"))
    trial.apply(h.result("b"))
    # The trial's appends reach neither the original nor a view it handed out.
    assert original.state == before
    assert original.state.tool_calls[1].phase == "invoked"
    assert original.state.tool_calls[1].progress == []
    assert trial.state.tool_calls[1].phase == "done"
    assert len(trial.state.tool_calls[1].progress) == 1
    original.apply(h.events[-2])
    assert len(original.state.tool_calls[1].progress) == 1
    assert trial.state.tool_calls[1].phase == "done"
