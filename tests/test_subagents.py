"""Sub-agents (§29.2, DESIGN §5): `spawn_agent` runs each call as a child turn —
its own file, its own workflow — in parallel; cancelling the parent cancels
the children."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, sync_tool
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index
from turncore.reducer import TurnReducer
from turncore.subagents import spawn_agent_descriptor
from turncore.tools import ToolContext


def script(request: ModelCallRequest) -> Any:
    """The parent fans out to two children; each child answers from its prompt."""
    prompt = [m for m in request.messages if m.role == "user"][-1].content
    assert isinstance(prompt, str)
    if prompt.startswith("child:"):
        if "needs approval" in prompt and call_index(request.messages) == 0:
            return {"toolCalls": [{"toolName": "deploy", "input": {}}]}
        return {"text": f"done with {prompt.removeprefix('child:').strip()}"}
    if call_index(request.messages) == 0:
        tasks = (
            ["child: needs approval", "child: sleeps"]
            if "slow" in prompt
            else ["child: A", "child: B"]
        )
        return {
            "toolCalls": [
                {"toolName": "spawn_agent", "input": {"agent": "test", "prompt": t}} for t in tasks
            ]
        }
    return {"text": "both children reported"}


def deploy(value: Any, ctx: ToolContext) -> Any:
    return "deployed"


def harness(env: WorkflowEnvironment, work: Path) -> Harness:
    return Harness(
        env.client,
        work,
        script,
        tools=[spawn_agent_descriptor(), sync_tool("deploy")],
        implementations={"deploy": deploy},
        permissions={"workflow:spawn_agent": "none"},
    )


async def test_fan_out_to_two_children(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    async with harness(temporal_env, tmp_path) as h:
        turn_id, outcome = await h.run("fan out")
        assert outcome.status == "completed"
        parent = h.file_state(turn_id)
        links = [p.progress for t in parent.tool_calls for p in t.progress]
        assert [link["kind"] for link in links] == ["subagent", "subagent"]
        children = [link["childTurnId"] for link in links]
        assert len(set(children)) == 2 and turn_id not in children
        for call, child_id in zip(parent.tool_calls, children, strict=True):
            child = TurnReducer.of(h.repo.read(child_id)).state  # its own valid file
            assert child.terminal is not None and child.terminal.type == "turn_completed"
            assert [t.name for t in child.definition.agent.resolved.tools] == ["deploy"]  # type: ignore[union-attr]
            assert call.result is not None and call.result.source == "sync"
            assert call.result.result.output["childTurnId"] == child_id
            assert call.result.result.output["status"] == "completed"
        texts = sorted(t.result.result.output["text"] for t in parent.tool_calls if t.result)
        assert texts == ["done with A", "done with B"]
        await h.assert_file_matches_query(turn_id)


async def test_cancelling_the_parent_cancels_its_children(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with harness(temporal_env, tmp_path) as h:
        turn_id = await h.create("slow fan out")
        execution = h.turns.advance_turn(turn_id)
        children: list[str] = []
        for _ in range(200):
            state = h.file_state(turn_id)
            children = [p.progress["childTurnId"] for t in state.tool_calls for p in t.progress]
            if len(children) == 2 and all(h.repo.exists(c) for c in children):
                waiting = TurnReducer.of(h.repo.read(children[0])).state
                if waiting.suspension is not None:
                    break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the children never started")
        cancelled = await h.send(turn_id, {"type": "cancel", "reason": "stop everything"})
        assert cancelled.status == "cancelled"
        assert (await execution.outcome).status == "cancelled"
        first = TurnReducer.of(h.repo.read(children[0])).state
        assert first.terminal is not None and first.terminal.type == "turn_cancelled"
        await h.assert_file_matches_query(turn_id)
