"""Record workflow histories for the replay test: `python -m tests.replay.record [NAME ...]`.

Run it after a deliberate workflow change that is guarded by
`workflow.patched` (so in-flight turns keep replaying): it rewrites the
committed histories under tests/replay/histories/ from fresh runs of the
scenarios below (all of them, or the ones named). A turn that continued as
new is recorded run by run (``NAME.run1.json``, ``NAME.run2.json``, …), and
a turn with sub-agents is recorded with its children's runs
(``NAME.child1.json``, …).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, async_tool, sync_tool
from turnclient.runtime.devserver import find_temporal_cli
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index
from turncore.subagents import spawn_agent_descriptor
from turncore.tools import ToolContext
from turncore_temporal.activities.payloads import ToolCallInput, ToolCallResult
from turncore_temporal.activities.turn_activities import TurnActivities
from turncore_temporal.workflows import SEARCH_ATTRIBUTES

OUT = Path(__file__).parent / "histories"


def echo(value: Any, ctx: ToolContext) -> Any:
    return {"echo": value}


def _calls(*names: str) -> dict[str, Any]:
    return {"toolCalls": [{"toolName": n, "input": {"i": i}} for i, n in enumerate(names)]}


TOOLS = [sync_tool("s"), sync_tool("gated"), async_tool("ext")]
PERMS = {"builtin:s": "none", "external:ext": "none"}


async def plain(client: Client, work: Path) -> str:
    async with Harness(client, work, ["hello there"]) as h:
        turn_id, _ = await h.run("hi")
        return turn_id


async def tools_and_inputs(client: Client, work: Path) -> str:
    script = [_calls("s", "gated", "ext", "nosuch"), {"text": "done"}]
    async with Harness(
        client,
        work,
        script,
        tools=TOOLS,
        implementations={"s": echo, "gated": echo},
        permissions=PERMS,
    ) as h:
        turn_id, _ = await h.run("go")
        await h.send(
            turn_id,
            {"type": "async_tool_progress", "toolCallId": "call_0_2", "progress": {"pct": 10}},
        )
        await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_1", "decision": "allow"}
        )
        await h.send(
            turn_id,
            {
                "type": "async_tool_result",
                "toolCallId": "call_0_2",
                "result": {"output": 1, "isError": False},
            },
        )
        return turn_id


async def denied_and_cancelled(client: Client, work: Path) -> str:
    script = [_calls("gated", "gated", "ext"), {"text": "never"}]
    async with Harness(
        client,
        work,
        script,
        tools=TOOLS,
        implementations={"s": echo, "gated": echo},
        permissions=PERMS,
    ) as h:
        turn_id, _ = await h.run("go")
        await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "deny"}
        )
        await h.send(turn_id, {"type": "cancel", "reason": "enough"})
        return turn_id


async def provider_failure(client: Client, work: Path) -> str:
    async with Harness(client, work, [{"error": "boom"}]) as h:
        turn_id, _ = await h.run("go")
        return turn_id


def _spawning(request: ModelCallRequest) -> dict[str, Any]:
    prompt = [m for m in request.messages if m.role == "user"][-1].content
    assert isinstance(prompt, str)
    if prompt.startswith("child:"):
        return {"text": f"done with {prompt.removeprefix('child:').strip()}"}
    if call_index(request.messages) == 0:
        return {
            "toolCalls": [
                {"toolName": "spawn_agent", "input": {"agent": "test", "prompt": p}}
                for p in ("child: A", "child: B")
            ]
        }
    return {"text": "both children reported"}


async def spawn_agent(client: Client, work: Path) -> str:
    async with Harness(
        client,
        work,
        _spawning,
        tools=[spawn_agent_descriptor()],
        permissions={"workflow:spawn_agent": "none"},
    ) as h:
        turn_id, _ = await h.run("fan out")
        return turn_id


async def continued_as_new(client: Client, work: Path) -> str:
    script = [
        *({"toolCalls": [{"toolName": "s", "input": {"n": i}}]} for i in range(3)),
        {"toolCalls": [{"toolName": "ext", "input": {}}]},
        {"text": "counted"},
    ]
    async with Harness(
        client,
        work,
        script,
        tools=TOOLS,
        implementations={"s": echo, "gated": echo},
        permissions=PERMS,
        workflow_options={"max_history_events": 40},
    ) as h:
        turn_id, _ = await h.run("count")
        await h.send(
            turn_id,
            {
                "type": "async_tool_result",
                "toolCallId": "call_3_0",
                "result": {"output": "ok", "isError": False},
            },
        )
        return turn_id


class _ToolDiesOnce(TurnActivities):
    """The first tool activity dies after the invocation is durable: the workflow reloads."""

    died = False

    @activity.defn
    async def run_tool(self, input: ToolCallInput) -> ToolCallResult:
        if not _ToolDiesOnce.died:
            _ToolDiesOnce.died = True
            raise RuntimeError("the tool's worker died")
        return await super().run_tool(input)


async def reload_after_failure(client: Client, work: Path) -> str:
    script = [_calls("s"), {"text": "the tool was interrupted"}]
    async with Harness(
        client,
        work,
        script,
        tools=TOOLS,
        implementations={"s": echo, "gated": echo},
        permissions=PERMS,
        activities=_ToolDiesOnce,
    ) as h:
        turn_id, _ = await h.run("go")
        return turn_id


async def fast_tools(client: Client, work: Path) -> str:
    """A batch of two fast tools (one local activity), then a mixed batch run plainly."""
    script = [_calls("f", "f"), _calls("f", "s"), {"text": "done"}]
    async with Harness(
        client,
        work,
        script,
        tools=[sync_tool("f"), sync_tool("s")],
        implementations={"f": echo, "s": echo},
        fast={"f": 5.0},
        permissions={"builtin:f": "none", "builtin:s": "none"},
    ) as h:
        turn_id, _ = await h.run("go")
        return turn_id


SCENARIOS: dict[str, Callable[[Client, Path], Awaitable[str]]] = {
    "plain": plain,
    "tools_and_inputs": tools_and_inputs,
    "denied_and_cancelled": denied_and_cancelled,
    "provider_failure": provider_failure,
    "spawn_agent": spawn_agent,
    "continued_as_new": continued_as_new,
    "reload_after_failure": reload_after_failure,
    "fast_tools": fast_tools,
    # The same turn recorded since one patch marker stands for the earlier
    # ones and events reach the workflow compact (no turn id, no provider
    # metadata); ``fast_tools`` keeps the shape recorded before.
    "fast_tools_compact": fast_tools,
}


async def _runs(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run of the workflow, first to last (following continue-as-new back)."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    runs = [history]
    while True:
        started = runs[0].events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return runs
        earlier = client.get_workflow_handle(workflow_id, run_id=started.continued_execution_run_id)
        runs.insert(0, await earlier.fetch_history())


async def _children(client: Client, history: WorkflowHistory) -> list[str]:
    return [
        e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id
        for e in history.events
        if e.HasField("child_workflow_execution_started_event_attributes")
    ]


async def record(client: Client, work: Path, name: str) -> None:
    turn_id = await SCENARIOS[name](client, work)
    runs = await _runs(client, turn_id)
    files: dict[str, WorkflowHistory] = {}
    if len(runs) == 1:
        files[name] = runs[0]
    else:
        files.update((f"{name}.run{i}", run) for i, run in enumerate(runs, start=1))
    for i, child in enumerate(await _children(client, runs[-1]), start=1):
        files[f"{name}.child{i}"] = await client.get_workflow_handle(child).fetch_history()
    for stem, history in files.items():
        (OUT / f"{stem}.json").write_text(history.to_json())
        print(f"recorded {stem}: {len(history.events)} events")


async def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenarios {unknown}; known: {sorted(SCENARIOS)}")
    OUT.mkdir(parents=True, exist_ok=True)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(), search_attributes=SEARCH_ATTRIBUTES
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in names or SCENARIOS:
                await record(env.client, Path(tmp) / name, name)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
