"""A worker process for the multi-host simulation: its own work dir, turns in PostgreSQL.

Usage: python -m tests.pg_worker ADDRESS TASK_QUEUE WORK_DIR (TURNS_DATABASE_URL set)

Nothing is shared with other workers but Temporal and the database. Each
sync tool execution appends ``<toolCallId> <tool> <pid>`` to
``WORK_DIR/executions`` (this worker's own file), so the test can count side
effects across workers and restarts. ``SLOW_TOOL_SECONDS`` makes the tools
take their time, so a kill lands while some of them run.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from temporalio.client import Client

from turnclient.lib.api import iso_now
from turncore.agents import AgentDefinition, StaticAgentResolver
from turncore.context import ContextResolver
from turncore.events import ModelDescriptor, ToolDescriptor
from turncore.live import LiveHub
from turncore.model.scripted import ScriptedModel
from turncore.permissions import DeclaredPermissionChecker, DeferAllClassifier
from turncore.reducer import TurnReducer
from turncore.storage.postgres import PostgresTurnRepository
from turncore.tools import ToolContext, ToolRegistry, tool
from turncore_temporal.activities.turn_activities import TurnDependencies

MODEL = ModelDescriptor(provider="scripted", model="hosts")


def _tool(name: str, description: str) -> ToolDescriptor:
    return ToolDescriptor(
        tool_id=f"builtin:{name}",
        name=name,
        description=description,
        input_schema={"type": "object"},
        execution="sync",
        requires_human=False,
    )


FETCH = _tool("fetch", "fetches without asking")
GUARDED = _tool("guarded", "changes something; asks first")
SCRIPT: list[Any] = [
    {
        "text": "fetching, then changing something",
        "toolCalls": [
            {"toolName": "fetch", "input": {"what": "data"}},
            {"toolName": "guarded", "input": {"change": "it"}},
        ],
    },
    {"text": "both tools are done"},
]


class Models:
    def __init__(self) -> None:
        self.model = ScriptedModel(SCRIPT, model="hosts")

    def resolve(self, descriptor: ModelDescriptor) -> ScriptedModel:
        return self.model


def resolver() -> StaticAgentResolver:
    return StaticAgentResolver(
        agents={
            "hosts": AgentDefinition(
                agent_id="hosts", system_prompt="multi-host simulation", tools=["fetch", "guarded"]
            )
        },
        catalog={"fetch": FETCH, "guarded": GUARDED},
        default_model=MODEL,
    )


def dependencies(repo: PostgresTurnRepository, work: Path) -> TurnDependencies:
    executions = work / "executions"
    seconds = float(os.environ.get("SLOW_TOOL_SECONDS", "0"))

    async def record(name: str, ctx: ToolContext) -> Any:
        with executions.open("a") as f:
            f.write(f"{ctx.tool_call_id}@{ctx.turn_id} {name} {os.getpid()}\n")
        await asyncio.sleep(seconds)
        return {"done": name}

    @tool(permission="none", tool_id="builtin:fetch")
    async def fetch(what: str, ctx: ToolContext) -> Any:
        """Fetch something."""
        return await record("fetch", ctx)

    @tool(permission="ask", tool_id="builtin:guarded")
    async def guarded(change: str, ctx: ToolContext) -> Any:
        """Change something (needs approval)."""
        return await record("guarded", ctx)

    return TurnDependencies(
        repository=repo,
        models=Models(),
        tools=ToolRegistry.of([fetch, guarded]),
        checker=DeclaredPermissionChecker({"builtin:fetch": "none", "builtin:guarded": "ask"}),
        classifier=DeferAllClassifier(),
        contexts=ContextResolver(lambda tid: TurnReducer.of(repo.read(tid)).state),
        clock=iso_now,
        hub=LiveHub(),
    )


async def main(address: str, task_queue: str, work: str) -> None:
    from turncore_temporal.worker import build_worker

    client = await Client.connect(address)
    repo = PostgresTurnRepository.connect(os.environ["TURNS_DATABASE_URL"])
    deps = dependencies(repo, Path(work))
    worker = build_worker(client, deps, task_queue=task_queue)
    Path(work, "worker.ready").write_text(str(os.getpid()))
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
