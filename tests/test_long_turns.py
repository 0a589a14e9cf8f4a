"""Long turns: followed across any number of runs, and never handed over in a loop.

A turn that keeps appending is followed for as long as it takes, however many
times its workflow continues as new; only runs that hand over without a new
event end a follow, with a message that says so and nothing touched.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.harness import Harness, async_tool, sync_tool
from tests.test_cli_terminal import environment, home, turn_files  # noqa: F401 (fixture)
from turnclient.lib.api import TurnClient
from turncore.errors import InfrastructureError
from turncore.tools import ToolContext


def count(value: Any, ctx: ToolContext) -> Any:
    return {"n": value["n"]}


async def _runs(client: Client, turn_id: str) -> int:
    """How many runs the turn's workflow has had (walking back through continue-as-new)."""
    history = await client.get_workflow_handle(turn_id).fetch_history()
    runs = 1
    run_id = history.events[
        0
    ].workflow_execution_started_event_attributes.continued_execution_run_id
    while run_id:
        runs += 1
        earlier = await client.get_workflow_handle(turn_id, run_id=run_id).fetch_history()
        run_id = earlier.events[
            0
        ].workflow_execution_started_event_attributes.continued_execution_run_id
    return runs


async def _loaded(h: Harness, turn_id: str) -> None:
    """Wait until the turn's latest run has loaded its file (its state query says so)."""
    deadline = asyncio.get_running_loop().time() + 30
    while (await h.query_state(turn_id)).get("loading"):
        assert asyncio.get_running_loop().time() < deadline, "the run never loaded its file"
        await asyncio.sleep(0.05)


async def test_a_history_budget_smaller_than_a_reload_never_hands_over_in_a_loop(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Every run's reload alone outgrows a budget of one history event: each run
    still works until it has added to the file, so the turn gets to its end, and
    a suspended turn waits in its run rather than handing over again and again."""
    script: list[Any] = [
        *({"toolCalls": [{"toolName": "count", "input": {"n": i}}]} for i in range(3)),
        {"toolCalls": [{"toolName": "ext", "input": {}}]},
        {"text": "counted"},
    ]
    async with Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=[sync_tool("count"), async_tool("ext")],
        implementations={"count": count},
        permissions={"builtin:count": "none", "external:ext": "none"},
        workflow_options={"max_history_events": 1},
    ) as h:
        turn_id, outcome = await h.run("count")
        assert outcome.status == "suspended"
        await _loaded(h, turn_id)  # the suspended turn's last run has loaded the file
        suspended_runs = await _runs(h.client, turn_id)
        await h.assert_file_matches_query(turn_id)  # the suspended run is still there
        assert await _runs(h.client, turn_id) == suspended_runs
        done = await h.send(
            turn_id,
            {
                "type": "async_tool_result",
                "toolCallId": "call_3_0",
                "result": {"output": "ok", "isError": False},
            },
        )
        assert done.status == "completed"
        await h.assert_file_matches_query(turn_id)
        # Each run added at least one line before it handed over.
        assert 1 < await _runs(h.client, turn_id) <= len(h.lines(turn_id))


@workflow.defn(name="Turn", sandboxed=False)
class HandsOverForever:
    """A defective turn workflow: every run continues as new without appending."""

    @workflow.run
    async def run(self, input: Any) -> dict[str, Any]:
        await workflow.sleep(0.2)
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(input)

    @workflow.update(name="settle")
    async def settle(self, *args: Any) -> dict[str, Any]:
        return {"continuedAsNew": True}


async def test_runs_that_hand_over_without_a_new_event_end_the_follow_and_touch_nothing(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(temporal_env.client, tmp_path, [{"text": "never asked"}]) as h:
        turn_id = await h.create("go")
        before = h.repo.path_for(turn_id).read_bytes()
        queue = f"tq-{uuid.uuid4()}"
        follower = TurnClient(
            h.client, h.repo, h.resolver, task_queue=queue, no_progress_seconds=1.5
        )
        async with Worker(h.client, task_queue=queue, workflows=[HandsOverForever]):
            with pytest.raises(InfrastructureError) as raised:
                await follower.advance_turn(turn_id).outcome
            await h.client.get_workflow_handle(turn_id).terminate("test over")
        message = str(raised.value)
        assert "no progress for 1.5 s" in message
        assert "continuing as new without a new event" in message
        assert "waited for a settle point" in message
        assert h.repo.path_for(turn_id).read_bytes() == before


CALLS = 600
LONG_AGENT = """
default_agent = "long"

[agents.long]
system_prompt = "Add one, again and again."
model = "scripted/long.json"
tools = ["calculator"]
"""


@pytest.mark.temporal  # starts an embedded dev server through the CLI
@pytest.mark.timeout(900)  # 600 iterations: about 2 minutes on a loaded 2-core host
def test_a_600_call_turn_runs_to_completion_through_turns_run(home: Path) -> None:  # noqa: F811
    """The issue's reproduction: the follow used to give up after 60 s of handing over."""
    (home / "turns.toml").write_text(LONG_AGENT)
    responses: list[Any] = [
        {"toolCalls": [{"toolName": "calculator", "input": {"expression": f"{i}+1"}}]}
        for i in range(CALLS)
    ]
    responses.append({"text": "done"})
    (home / "long.json").write_text(json.dumps({"responses": responses}))
    done = subprocess.run(
        [sys.executable, "-m", "turnclient.cli", "run", "--json", "--max-model-calls", "700", "go"],
        cwd=home,
        env=environment(home),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "completed"
    [path] = turn_files(home)
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    assert sum(e["type"] == "model_call_completed" for e in lines) == CALLS + 1
    results = [e for e in lines if e["type"] == "tool_result"]
    assert len(results) == CALLS
    assert results[-1]["result"]["output"]["result"] == CALLS  # 599 + 1
    assert lines[-1]["type"] == "turn_completed"
