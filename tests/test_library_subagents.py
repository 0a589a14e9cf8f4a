"""Sub-agents from Python: spawn_agent with Python-defined agents, and a fan-out of
20 children in one response bounded to a few at a time (real dev server)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from turnclient import Agent, ToolContext, Turns, tool
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index

CHILDREN = 20
BOUND = 5


class Gate:
    """Counts tools running at once; holds them until the test has looked."""

    def __init__(self) -> None:
        self.active = 0
        self.most = 0
        self.changed = asyncio.Condition()
        self.release = asyncio.Event()

    async def enter(self) -> None:
        async with self.changed:
            self.active += 1
            self.most = max(self.most, self.active)
            self.changed.notify_all()
        await asyncio.wait_for(self.release.wait(), 120)
        async with self.changed:
            self.active -= 1


gate = Gate()


@tool(permission="none")
async def work(n: int, ctx: ToolContext) -> str:
    """Do task n."""
    await gate.enter()
    return f"task {n} done in {ctx.turn_id}"


def lead_model(request: ModelCallRequest) -> dict[str, Any]:
    if call_index(request.messages) == 0:
        return {
            "toolCalls": [
                {"toolName": "spawn_agent", "input": {"agent": "worker", "prompt": f"task {i}"}}
                for i in range(CHILDREN)
            ]
        }
    return {"text": f"{len(request.messages[-1].content)} children reported"}  # type: ignore[arg-type]


def worker_model(request: ModelCallRequest) -> dict[str, Any]:
    if call_index(request.messages) == 0:
        prompt = str(request.messages[-1].content)
        return {"toolCalls": [{"toolName": "work", "input": {"n": int(prompt.split()[-1])}}]}
    return {"text": str(request.messages[-1].content[-1].output.value)}  # type: ignore[union-attr]


async def test_twenty_children_run_in_parallel_within_the_bound(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    lead = Agent(
        name="lead", system_prompt="Delegate.", tools=("spawn_agent",), model="scripted/lead"
    )
    worker = Agent(name="worker", system_prompt="Work.", tools=(work,), model="scripted/worker")
    turns = Turns(
        tmp_path,
        agents=[lead, worker],
        models={"lead": lead_model, "worker": worker_model},
        max_concurrent_subagents=BOUND,
        client=temporal_env.client,
        env={"TURNS_TASK_QUEUE": f"tq-{uuid.uuid4()}"},
    )
    async with turns:
        turn_id = await turns.start("fan out", agent="lead")
        running = asyncio.ensure_future(turns.advance(turn_id))
        async with gate.changed:
            await asyncio.wait_for(gate.changed.wait_for(lambda: gate.active == BOUND), 120)
        # BOUND children are running, held in their tool: no other child exists yet.
        state = await turns.state(turn_id)
        linked = [p for t in state.tool_calls for p in t.progress]
        assert len(linked) == BOUND
        gate.release.set()
        outcome = await asyncio.wait_for(running, 300)
        assert outcome.status == "completed"
        assert outcome.output.text() == f"{CHILDREN} children reported"  # type: ignore[union-attr]
        assert gate.most == BOUND
        state = await turns.state(turn_id)
        results = [t.result.result.output for t in state.tool_calls if t.result is not None]
        assert len(results) == CHILDREN
        assert all(r["status"] == "completed" for r in results)  # type: ignore[index]
        texts = sorted(r["text"].split(" done")[0] for r in results)  # type: ignore[index]
        assert texts == sorted(f"task {i}" for i in range(CHILDREN))


class Hold:
    """Holds the child's tool until released; says when it is running."""

    def __init__(self) -> None:
        self.running = asyncio.Event()
        self.release = asyncio.Event()


hold = Hold()


@tool(permission="none")
async def slow_task(n: int) -> str:
    """A task that waits for the test."""
    hold.running.set()
    await asyncio.wait_for(hold.release.wait(), 120)
    return f"slow task {n} done"


def one_child_model(request: ModelCallRequest) -> dict[str, Any]:
    if call_index(request.messages) == 0:
        return {
            "toolCalls": [
                {"toolName": "spawn_agent", "input": {"agent": "slow", "prompt": "task 7"}}
            ]
        }
    output = request.messages[-1].content[-1].output.value  # type: ignore[union-attr]
    return {"text": f"child said: {output['text']}"}


def slow_model(request: ModelCallRequest) -> dict[str, Any]:
    if call_index(request.messages) == 0:
        return {"toolCalls": [{"toolName": "slow_task", "input": {"n": 7}}]}
    return {"text": str(request.messages[-1].content[-1].output.value)}  # type: ignore[union-attr]


@pytest.mark.parametrize("child_finishes_first", [False, True])
async def test_a_child_is_reattached_when_its_lost_parent_recovers(
    temporal_env: WorkflowEnvironment, tmp_path: Path, child_finishes_first: bool
) -> None:
    global hold
    hold = Hold()
    lead = Agent(
        name="lead", system_prompt="Delegate.", tools=("spawn_agent",), model="scripted/one"
    )
    slow = Agent(name="slow", system_prompt="Work.", tools=(slow_task,), model="scripted/slow")
    turns = Turns(
        tmp_path,
        agents=[lead, slow],
        models={"one": one_child_model, "slow": slow_model},
        client=temporal_env.client,
        env={"TURNS_TASK_QUEUE": f"tq-{uuid.uuid4()}"},
    )
    async with turns:
        turn_id = await turns.start("delegate", agent="lead")
        first = asyncio.ensure_future(turns.advance(turn_id))
        await asyncio.wait_for(hold.running.wait(), 120)
        [call] = (await turns.state(turn_id)).tool_calls
        [link] = call.progress
        child_id = link.progress["childTurnId"]  # type: ignore[index]

        # The parent's workflow is lost: terminated, as an operator or a bug would.
        await temporal_env.client.get_workflow_handle(turn_id).terminate("lost for the test")
        with contextlib.suppress(Exception):
            await first
        child = await temporal_env.client.get_workflow_handle(child_id).describe()
        assert child.status == WorkflowExecutionStatus.RUNNING  # abandoned, not cancelled

        if child_finishes_first:
            hold.release.set()
            async for event in turns.watch(child_id):
                last = event
            assert last.type == "turn_completed"
        recovering = asyncio.ensure_future(turns.recover(turn_id))
        hold.release.set()
        outcome = await asyncio.wait_for(recovering, 120)
        assert outcome.status == "completed"
        assert outcome.output.text() == "child said: slow task 7 done"  # type: ignore[union-attr]
        [call] = (await turns.state(turn_id)).tool_calls
        assert call.result is not None
        assert call.result.result.output == {
            "childTurnId": child_id,
            "status": "completed",
            "text": "slow task 7 done",
        }
        child_events = [e.type for e in await turns.events(child_id)]
        assert child_events.count("turn_created") == 1 and child_events[-1] == "turn_completed"
        assert "interrupted" not in str([e.to_wire() for e in await turns.events(turn_id)])
