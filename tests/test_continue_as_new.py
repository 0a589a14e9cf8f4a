"""Long turns continue as new and reload from the file; the file is the same either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, async_tool, sync_tool
from turncore.tools import ToolContext


def count(value: Any, ctx: ToolContext) -> Any:
    return {"n": value["n"]}


SCRIPT: list[Any] = [
    *({"toolCalls": [{"toolName": "count", "input": {"n": i}}]} for i in range(5)),
    {"toolCalls": [{"toolName": "ext", "input": {}}]},
    {"text": "counted to five"},
]


def _shape(h: Harness, turn_id: str) -> list[tuple[str, Any]]:
    """The file without timestamps, ids and usage: what must not depend on how the turn was run."""
    out = []
    for e in h.lines(turn_id):
        key = e.get("toolCallId") or e.get("modelCallIndex")
        body = e.get("result") or e.get("request") or e.get("event")
        out.append((e["type"], key, body))
    return out


async def _run(
    env: WorkflowEnvironment, work: Path, budget: int
) -> tuple[list[tuple[str, Any]], int]:
    tools = [sync_tool("count"), async_tool("ext")]
    async with Harness(
        env.client,
        work,
        SCRIPT,
        tools=tools,
        implementations={"count": count},
        permissions={"builtin:count": "none", "external:ext": "none"},
        workflow_options={"max_history_events": budget},
    ) as h:
        turn_id, outcome = await h.run("count")
        assert outcome.status == "suspended"
        done = await h.send(
            turn_id,
            {
                "type": "async_tool_result",
                "toolCallId": "call_5_0",
                "result": {"output": "ok", "isError": False},
            },
        )
        assert done.status == "completed"
        history = await h.client.get_workflow_handle(turn_id).fetch_history()
        # Count the runs by walking back through continued-as-new executions.
        run_id = history.events[
            0
        ].workflow_execution_started_event_attributes.continued_execution_run_id
        runs = 1
        while run_id:
            runs += 1
            earlier = await h.client.get_workflow_handle(turn_id, run_id=run_id).fetch_history()
            run_id = earlier.events[
                0
            ].workflow_execution_started_event_attributes.continued_execution_run_id
        last = history.events[-1].event_type
        assert last == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
        await h.assert_file_matches_query(turn_id)
        return _shape(h, turn_id), runs


async def test_continue_as_new_gives_the_same_file(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    plain, plain_runs = await _run(temporal_env, tmp_path / "plain", budget=100_000)
    split, split_runs = await _run(temporal_env, tmp_path / "split", budget=12)
    assert plain_runs == 1
    assert split_runs >= 5  # one per couple of model calls at this budget
    assert split == plain
