"""Hostile external inputs (issue 9 §2, §3): any payload shape, any size.

No signal or update may raise in the workflow, whatever it carries: no input,
two inputs, a ``type`` that disagrees with the signal's name, megabytes. A bad
signal is dropped and listed in ``rejectedInputs`` in bounded form (never the
value itself), the list stays bounded, nothing is appended, and the turn
keeps working.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from tests.builders import nested
from tests.harness import Harness, async_tool
from turncore.inputs import MAX_INPUT_BYTES, MAX_REJECTED_INPUTS
from turncore.jsonvalue import MAX_JSON_DEPTH

RESULT = {
    "type": "async_tool_result",
    "toolCallId": "call_0_0",
    "result": {"output": 1, "isError": False},
}


def _script() -> list[Any]:
    return [{"toolCalls": [{"toolName": "a", "input": {}}]}, {"text": "done"}]


async def _rejected(h: Harness, turn_id: str, count: int) -> list[dict[str, Any]]:
    for _ in range(200):
        state = await h.query_state(turn_id)
        if len(state["rejectedInputs"]) >= count:
            return state["rejectedInputs"]  # type: ignore[no-any-return]
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected {count} rejected inputs, got {state['rejectedInputs']}")


async def _suspended_turn(h: Harness) -> tuple[str, WorkflowHandle[Any, Any], bytes]:
    turn_id, outcome = await h.run("go")
    assert outcome.status == "suspended"
    return turn_id, h.client.get_workflow_handle(turn_id), h.repo.path_for(turn_id).read_bytes()


async def test_signals_of_any_shape_are_listed_and_the_turn_goes_on(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(
        temporal_env.client,
        tmp_path,
        _script(),
        tools=[async_tool("a")],
        permissions={"external:a": "none"},
    ) as h:
        turn_id, handle, before = await _suspended_turn(h)
        sent: list[tuple[str, list[Any], str]] = [
            ("permission_decision", [], "exactly one input"),
            ("async_tool_result", [RESULT, RESULT], "exactly one input"),
            ("async_tool_progress", ["a string"], "invalid input"),
            ("permission_decision", [{"type": "cancel"}], "carries a 'cancel' input"),
            ("async_tool_result", [{**RESULT, "type": "async_tool_progress"}], "carries a"),
            ("cancel", [{"type": "cancel"}, {"type": "cancel"}], "exactly one input"),
        ]
        for name, args, _ in sent:
            await handle.signal(name, args=args)
        rejected = await _rejected(h, turn_id, len(sent))
        for record, (name, _args, reason) in zip(rejected, sent, strict=True):
            assert record["signal"] == name
            assert reason in record["reason"], record
            assert set(record) <= {"signal", "type", "toolCallId", "reason", "size", "digest", "at"}
        assert h.repo.path_for(turn_id).read_bytes() == before  # nothing appended, not cancelled
        assert (await h.query_state(turn_id))["suspension"] is not None
        done = await h.send(turn_id, RESULT)
        assert done.status == "completed"
        await h.assert_file_matches_query(turn_id)


async def test_updates_of_any_shape_are_rejected_without_trace(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(
        temporal_env.client,
        tmp_path,
        _script(),
        tools=[async_tool("a")],
        permissions={"external:a": "none"},
    ) as h:
        turn_id, handle, before = await _suspended_turn(h)
        for name, args, reason in [
            ("async_tool_result", [], "exactly one input"),
            ("async_tool_result", [RESULT, RESULT], "exactly one input"),
            ("permission_decision", [{"type": "cancel"}], "carries a 'cancel' input"),
        ]:
            with pytest.raises(WorkflowUpdateFailedError) as info:
                await handle.execute_update(name, args=args)
            assert reason in str(info.value.cause), info.value.cause
        assert h.repo.path_for(turn_id).read_bytes() == before
        assert (await h.query_state(turn_id))["rejectedInputs"] == []  # updates leave no trace
        assert (await h.send(turn_id, RESULT)).status == "completed"


async def test_a_large_invalid_input_is_listed_by_size_and_digest_only(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(
        temporal_env.client,
        tmp_path,
        _script(),
        tools=[async_tool("a")],
        permissions={"external:a": "none"},
    ) as h:
        turn_id, handle, before = await _suspended_turn(h)
        big = {"type": "async_tool_progress", "toolCallId": "ghost", "progress": "x" * 1_500_000}
        await handle.signal("async_tool_progress", big)
        (record,) = await _rejected(h, turn_id, 1)
        assert record["size"] > 1_500_000 and len(record["digest"]) == 64
        assert "ghost" in record["reason"] or "larger" in record["reason"]
        # A valid progress above the limit is refused up front as well.
        over = {
            "type": "async_tool_progress",
            "toolCallId": "call_0_0",
            "progress": "y" * MAX_INPUT_BYTES,
        }
        await handle.signal("async_tool_progress", over)
        rejected = await _rejected(h, turn_id, 2)
        assert f"larger than {MAX_INPUT_BYTES}" in rejected[1]["reason"]
        assert h.repo.path_for(turn_id).read_bytes() == before
        # The turn is not wedged: the next valid input is applied exactly once.
        await handle.signal(
            "async_tool_progress",
            {"type": "async_tool_progress", "toolCallId": "call_0_0", "progress": {"pct": 1}},
        )
        assert (await h.send(turn_id, RESULT)).status == "completed"
        assert h.types(turn_id).count("tool_progress") == 1
        await h.assert_file_matches_query(turn_id)


async def test_the_rejected_list_is_bounded(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(
        temporal_env.client,
        tmp_path,
        _script(),
        tools=[async_tool("a")],
        permissions={"external:a": "none"},
    ) as h:
        turn_id, handle, _ = await _suspended_turn(h)
        for i in range(MAX_REJECTED_INPUTS + 10):
            await handle.signal("permission_decision", {"type": "permission_decision", "n": i})
        await handle.signal("async_tool_progress", args=[])  # the last one, to wait for
        for _ in range(200):
            rejected = (await h.query_state(turn_id))["rejectedInputs"]
            if rejected and rejected[-1]["signal"] == "async_tool_progress":
                break
            await asyncio.sleep(0.05)
        assert len(rejected) == MAX_REJECTED_INPUTS
        assert rejected[-1]["signal"] == "async_tool_progress"


HUGE = 123456789012345678901234567890


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"n": HUGE}, "safe integer range"),
        (nested(MAX_JSON_DEPTH + 1), f"is nested deeper than {MAX_JSON_DEPTH} levels"),
    ],
    ids=["an integer outside the safe range", "a value nested past the depth limit"],
)
async def test_a_value_no_turn_may_hold_is_rejected_not_appended(
    temporal_env: WorkflowEnvironment, tmp_path: Path, value: Any, reason: str
) -> None:
    async with Harness(
        temporal_env.client,
        tmp_path,
        _script(),
        tools=[async_tool("a")],
        permissions={"external:a": "none"},
    ) as h:
        turn_id, handle, before = await _suspended_turn(h)
        progress = {"type": "async_tool_progress", "toolCallId": "call_0_0", "progress": value}
        await handle.signal("async_tool_progress", progress)
        (record,) = await _rejected(h, turn_id, 1)
        assert reason in record["reason"], record
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await handle.execute_update("async_tool_progress", progress)
        assert reason in str(info.value.cause)
        assert h.repo.path_for(turn_id).read_bytes() == before
        assert (await h.send(turn_id, RESULT)).status == "completed"  # the run did not fail


def test_the_safe_range_is_the_boundary() -> None:
    from turncore.jsonvalue import MAX_SAFE_INTEGER, json_problem

    assert json_problem({"n": [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER]}) is None
    assert "safe integer range" in (json_problem({"n": [MAX_SAFE_INTEGER + 1]}) or "")
    assert "$.n[0]" in (json_problem({"n": [-MAX_SAFE_INTEGER - 1]}) or "")
    assert "bits" in (json_problem(10**400) or "")


def test_the_depth_limit_is_the_boundary() -> None:
    from turncore.jsonvalue import json_problem

    assert json_problem(nested(MAX_JSON_DEPTH)) is None
    assert json_problem({"a": nested(MAX_JSON_DEPTH - 1)}) is None
    problem = json_problem({"a": nested(MAX_JSON_DEPTH)}) or ""
    assert problem.startswith("$.a") and f"is nested deeper than {MAX_JSON_DEPTH} levels" in problem
    assert json_problem(nested(5000)) is not None  # walked without recursion


def test_turns_progress_data_keeps_a_huge_integer_exact_and_refuses_it() -> None:
    import argparse

    from pydantic import ValidationError

    from turnclient.cli.deciding import json_value
    from turncore.events import AsyncToolProgressInput

    value = json_value(f'{{"n": {HUGE}}}')
    assert value == {"n": HUGE}  # not silently a float
    with pytest.raises(ValidationError, match="safe integer range"):
        AsyncToolProgressInput(tool_call_id="call_0_0", progress=value)
    with pytest.raises(argparse.ArgumentTypeError):
        json_value("NaN")


async def test_a_workflow_whose_id_is_not_its_turn_id_is_refused(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    from temporalio.client import WorkflowFailureError

    from turncore_temporal.workflows import TurnWorkflow, TurnWorkflowInput

    async with Harness(
        temporal_env.client,
        tmp_path,
        _script(),
        tools=[async_tool("a")],
        permissions={"external:a": "none"},
    ) as h:
        turn_id = await h.create("go")
        before = h.repo.path_for(turn_id).read_bytes()
        with pytest.raises(WorkflowFailureError) as info:
            await h.client.execute_workflow(
                TurnWorkflow.run,
                TurnWorkflowInput(turn_id=turn_id),
                id=f"not-{turn_id}",
                task_queue=h.task_queue,
            )
        assert "must equal its turn id" in str(info.value.cause)
        assert h.repo.path_for(turn_id).read_bytes() == before  # nothing was written


async def test_a_signal_of_no_input_name_is_listed_not_kept(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A mistyped signal name (`--name approve`, `permission-decision`) is no input:
    it is listed like any invalid signal instead of waiting, unseen, for a handler."""
    async with Harness(
        temporal_env.client,
        tmp_path,
        _script(),
        tools=[async_tool("a")],
        permissions={"external:a": "none"},
    ) as h:
        turn_id, handle, before = await _suspended_turn(h)
        await handle.signal("approve", {"type": "permission_decision", "toolCallId": "call_0_0"})
        await handle.signal("async-tool-result", args=[RESULT, "x" * 1000])
        await handle.signal("n" * 250)
        first, second, third = await _rejected(h, turn_id, 3)
        assert first["signal"] == "approve" and first["toolCallId"] == "call_0_0"
        assert "no 'approve' signal" in first["reason"] and "permission_decision" in first["reason"]
        assert second["signal"] == "async-tool-result" and second["size"] > 1000
        assert len(third["signal"]) <= 200 and len(third["reason"]) <= 800
        for record in (first, second, third):
            assert set(record) <= {"signal", "type", "toolCallId", "reason", "size", "digest", "at"}
        assert h.repo.path_for(turn_id).read_bytes() == before
        assert (await h.send(turn_id, RESULT)).status == "completed"
        await h.assert_file_matches_query(turn_id)
