"""The worker process of ``bench/load.py``: one real worker, file or PostgreSQL storage.

Usage: python bench/_load_worker.py ADDRESS TASK_QUEUE WORK_DIR file|postgres

PostgreSQL reads its URL from ``TURNS_DATABASE_URL``. Two agents share a
scripted model (a tool call, then a final answer): ``free`` calls ``fetch``
(no permission needed), ``ask`` calls ``guarded`` (needs an approval). Each
tool run appends its call to ``WORK_DIR/executions`` so duplicates can be
counted. ``WORK_DIR/worker.ready`` holds the pid once the worker polls.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.client import Client  # noqa: E402

from turnclient.lib.api import iso_now  # noqa: E402
from turncore.agents import AgentDefinition, StaticAgentResolver  # noqa: E402
from turncore.context import ContextResolver  # noqa: E402
from turncore.events import ModelDescriptor, ToolDescriptor  # noqa: E402
from turncore.live import LiveHub  # noqa: E402
from turncore.model.scripted import ScriptedModel  # noqa: E402
from turncore.permissions import DeclaredPermissionChecker, DeferAllClassifier  # noqa: E402
from turncore.reducer import TurnReducer  # noqa: E402
from turncore.storage.repository import FileTurnRepository, JsonlRepository  # noqa: E402
from turncore.tools import ToolContext, ToolRegistry, tool  # noqa: E402
from turncore_temporal.activities.turn_activities import TurnDependencies  # noqa: E402

MODEL = ModelDescriptor(provider="scripted", model="load")


def _tool(name: str) -> ToolDescriptor:
    return ToolDescriptor(
        tool_id=f"builtin:{name}",
        name=name,
        description=name,
        input_schema={"type": "object"},
        execution="sync",
        requires_human=False,
    )


def _script(tool: str) -> list[Any]:
    return [
        {"text": f"calling {tool}", "toolCalls": [{"toolName": tool, "input": {"n": 1}}]},
        {"text": f"{tool} is done"},
    ]


class Models:
    def __init__(self) -> None:
        self.free = ScriptedModel(_script("fetch"), model="free")
        self.ask = ScriptedModel(_script("guarded"), model="ask")

    def resolve(self, descriptor: ModelDescriptor) -> ScriptedModel:
        return self.ask if descriptor.model == "ask" else self.free


def resolver() -> StaticAgentResolver:
    return StaticAgentResolver(
        agents={
            "free": AgentDefinition(
                agent_id="free",
                system_prompt="load",
                tools=["fetch"],
                model=ModelDescriptor(provider="scripted", model="free"),
            ),
            "ask": AgentDefinition(
                agent_id="ask",
                system_prompt="load",
                tools=["guarded"],
                model=ModelDescriptor(provider="scripted", model="ask"),
            ),
        },
        catalog={"fetch": _tool("fetch"), "guarded": _tool("guarded")},
        default_model=MODEL,
    )


def open_repository(kind: str, work: Path) -> JsonlRepository:
    if kind == "postgres":
        from turncore.storage.postgres import PostgresTurnRepository

        return PostgresTurnRepository.connect(os.environ["TURNS_DATABASE_URL"], pool_size=16)
    return FileTurnRepository(work)


def dependencies(repo: JsonlRepository, work: Path) -> TurnDependencies:
    executions = work / "executions"

    def recording(name: str, permission: Any) -> Any:
        def run(n: int, ctx: ToolContext) -> Any:
            with executions.open("a") as f:
                f.write(f"{ctx.tool_call_id}@{ctx.turn_id}\n")
            return {"done": name}

        return tool(run, name=name, permission=permission, tool_id=f"builtin:{name}")

    return TurnDependencies(
        repository=repo,
        models=Models(),
        tools=ToolRegistry.of([recording("fetch", "none"), recording("guarded", "ask")]),
        checker=DeclaredPermissionChecker({"builtin:fetch": "none", "builtin:guarded": "ask"}),
        classifier=DeferAllClassifier(),
        contexts=ContextResolver(lambda tid: TurnReducer.of(repo.read(tid)).state),
        clock=iso_now,
        hub=LiveHub(),
    )


async def main(address: str, task_queue: str, work: str, kind: str) -> None:
    from turncore_temporal.worker import build_worker

    client = await Client.connect(address)
    repo = open_repository(kind, Path(work))
    worker = build_worker(
        client,
        dependencies(repo, Path(work)),
        task_queue=task_queue,
        graceful_shutdown=timedelta(0),
    )
    Path(work, "worker.ready").write_text(str(os.getpid()))
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
