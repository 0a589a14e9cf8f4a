"""Hand-written turn files (``tests/golden``): the wire format as the spec states it.

Good files must parse, reduce, and re-serialize to the same JSON line by line
(key order aside); together they cover every event type, step kind, result
source and permission path. Broken files (``tests/golden/broken``) must fail
at the line and for the reason ``expected.json`` records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from turncore.compose import compose_model_request
from turncore.context import ContextResolver
from turncore.errors import CorruptTurnError
from turncore.events import (
    EVENT_TYPES,
    ModelStepEvent,
    ResolvedAgent,
    ToolPermissionClassified,
    ToolPermissionResolved,
    ToolResult,
    TurnEvent,
    TurnFailed,
    TurnSuspended,
    parse_event,
)
from turncore.ids import is_turn_id
from turncore.messages import ToolMessage
from turncore.reducer import TurnState, reduce_turn
from turncore.storage.repository import read_path

GOLDEN = Path(__file__).parent / "golden"
BROKEN = GOLDEN / "broken"
GOOD_FILES = sorted(GOLDEN.glob("*.jsonl"))
BROKEN_FILES = sorted(BROKEN.glob("*.jsonl"))
EXPECTED: dict[str, dict[str, Any]] = orjson.loads((BROKEN / "expected.json").read_bytes())

STEP_KINDS = {
    "text-start",
    "text-end",
    "reasoning-start",
    "reasoning-end",
    "tool-call",
    "finish-step",
    "error",
}


def plain_read(path: Path) -> tuple[list[bytes], list[TurnEvent]]:
    """orjson per line, then parse_event: no repository involved."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), "every line of a turn file ends with a newline"
    lines = data[:-1].split(b"\n")
    return lines, [parse_event(orjson.loads(line), trusted_json=True) for line in lines]


def load_golden(turn_id: str) -> TurnState:
    return reduce_turn(read_path(GOLDEN / f"{turn_id}.jsonl"))


def test_there_are_golden_files() -> None:
    assert len(GOOD_FILES) >= 8
    assert len(BROKEN_FILES) >= 10


@pytest.mark.parametrize("path", GOOD_FILES, ids=lambda p: p.stem)
def test_good_file_reads_reduces_and_round_trips(path: Path) -> None:
    lines, events = plain_read(path)
    assert is_turn_id(path.stem)
    assert events[0].turn_id == path.stem
    for n, (line, event) in enumerate(zip(lines, events, strict=True), start=1):
        original = orjson.loads(line)
        assert event.to_wire() == original, f"line {n} does not re-serialize to itself"
        # The untrusted path (full JSON walk) reads the same event.
        assert parse_event(original) == event
    state = reduce_turn(events)
    assert state.terminal is not None
    # The repository's reader agrees with the plain one.
    assert read_path(path) == events


@pytest.mark.parametrize("path", GOOD_FILES, ids=lambda p: p.stem)
def test_good_file_settle_points_are_self_consistent(path: Path) -> None:
    """What the reducer does not check but the spec states: snapshots and totals."""
    _, events = plain_read(path)
    for n, event in enumerate(events, start=1):
        if isinstance(event, TurnSuspended):
            before = reduce_turn(events[: n - 1])
            assert event.pending_permissions == before.pending_permissions(), f"line {n}"
            assert event.pending_async_tools == before.pending_async_tools(), f"line {n}"
            assert event.usage == before.usage, f"line {n}"
    state = reduce_turn(events)
    assert state.terminal is not None
    assert state.terminal.usage == state.usage  # the terminal repeats the aggregate usage


def _all_events() -> list[TurnEvent]:
    return [e for p in GOOD_FILES for e in plain_read(p)[1]]


def test_good_files_cover_every_event_type_and_step_kind() -> None:
    events = _all_events()
    assert {e.type for e in events} == set(EVENT_TYPES)
    assert {e.event.type for e in events if isinstance(e, ModelStepEvent)} == STEP_KINDS


def test_good_files_cover_every_source_and_decision() -> None:
    events = _all_events()
    assert {e.source for e in events if isinstance(e, ToolResult)} == {"sync", "async", "runtime"}
    resolved = {(e.source, e.decision) for e in events if isinstance(e, ToolPermissionResolved)}
    assert {s for s, _ in resolved} == {"classifier", "human", "human_unavailable"}
    assert {d for _, d in resolved} == {"allow", "deny"}
    classified = {e.decision for e in events if isinstance(e, ToolPermissionClassified)}
    assert classified == {"allow", "deny", "defer"}
    codes = {e.code for e in events if isinstance(e, TurnFailed)}
    assert codes == {None, "model-call-limit"}


def test_mixed_tools_file_sends_results_in_source_order() -> None:
    state = load_golden("2025-11-11T05-00-00Z-0000001-000")
    results = [
        e.tool_call_id
        for e in read_path(GOLDEN / "2025-11-11T05-00-00Z-0000001-000.jsonl")
        if isinstance(e, ToolResult)
    ]
    assert results == ["call_C", "call_A", "call_D", "call_B"]
    agent = state.definition.agent.resolved
    assert isinstance(agent, ResolvedAgent)
    composed = compose_model_request(agent, [], state, 1)
    tool_message = composed.messages[-1]
    assert isinstance(tool_message, ToolMessage)
    assert [p.tool_call_id for p in tool_message.content] == [
        "call_A",
        "call_B",
        "call_C",
        "call_D",
    ]


def test_the_referencing_file_resolves_through_the_golden_set() -> None:
    state = load_golden("2025-11-11T06-00-00Z-0000001-000")
    resolver = ContextResolver(load_golden)
    agent = resolver.resolve_agent(state.definition)
    base = load_golden("2025-11-11T04-36-29Z-0001234-000").definition.agent.resolved
    assert isinstance(base, ResolvedAgent)
    assert agent.tools == base.tools and agent.system_prompt == base.system_prompt
    assert agent.model.model == "claude-sonnet-4"
    context = resolver.resolve(state.definition.context)
    # The referenced turn's own inline context, its input and its answer.
    assert [m.role for m in context] == ["user", "assistant", "user", "assistant"]
    composed = compose_model_request(agent, context, state, 1)
    assert composed.messages[: len(context)] == context


def test_the_manifest_lists_exactly_the_broken_files() -> None:
    assert sorted(EXPECTED) == [p.name for p in BROKEN_FILES]


@pytest.mark.parametrize("path", BROKEN_FILES, ids=lambda p: p.stem)
def test_broken_file_fails_at_the_expected_line(path: Path) -> None:
    expected = EXPECTED[path.name]
    with pytest.raises(CorruptTurnError) as info:
        read_path(path)
    err = info.value
    assert err.line == expected["line"], err
    assert expected["rule"] in err.rule, err
    assert err.path == str(path)
    assert str(err) == f"{path}:{expected['line']}: {err.rule}"


# ---------------------------------------------------------------- docs/file-format.md

DOC = Path(__file__).parent.parent / "docs" / "file-format.md"


def test_the_documented_example_is_a_valid_turn_file(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    block = text.split("```jsonl\n", 1)[1].split("```", 1)[0]
    first = orjson.loads(block.splitlines()[0])
    path = tmp_path / f"{first['turnId']}.jsonl"
    path.write_text(block, encoding="utf-8")
    events = read_path(path)
    state = reduce_turn(events)
    assert state.terminal is not None and state.terminal.usage == state.usage
    for line, event in zip(block.splitlines(), events, strict=True):
        assert event.to_wire() == orjson.loads(line)


def test_the_doc_lists_every_event_type_and_step_kind() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name in (*EVENT_TYPES, *STEP_KINDS):
        assert f"`{name}`" in text, name
