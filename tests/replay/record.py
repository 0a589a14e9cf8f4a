"""Record workflow histories for the replay test: `python -m tests.replay.record`.

Run it after a deliberate workflow change that is guarded by
`workflow.patched` (so in-flight turns keep replaying): it rewrites the
committed histories under tests/replay/histories/ from fresh runs of the
scenarios below.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, async_tool, sync_tool
from turnclient.devserver import find_temporal_cli
from turncore.tools import ToolContext
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


SCENARIOS: dict[str, Callable[[Client, Path], Awaitable[str]]] = {
    "plain": plain,
    "tools_and_inputs": tools_and_inputs,
    "denied_and_cancelled": denied_and_cancelled,
    "provider_failure": provider_failure,
}


async def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(), search_attributes=SEARCH_ATTRIBUTES
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, scenario in SCENARIOS.items():
                turn_id = await scenario(env.client, Path(tmp) / name)
                history = await env.client.get_workflow_handle(turn_id).fetch_history()
                (OUT / f"{name}.json").write_text(history.to_json())
                print(f"recorded {name}: {len(history.events)} events")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
