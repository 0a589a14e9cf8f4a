"""A worker process for the crash tests, killable with SIGKILL at chosen points.

Usage: python -m tests.crash_worker ADDRESS TASK_QUEUE WORK_DIR [CRASH_AT]

CRASH_AT is ``before-tool``: the process kills itself the moment a sync tool
activity starts, i.e. after the invocation is durable and before the tool
runs. With ``FAST_TOOLS=1`` the slow tool is fast (a local activity, bound
``FAST_BOUND`` seconds); ``fast-start`` kills the process as the fast batch's
local activity starts, ``fast-after:TYPE`` right after that activity appended
a TYPE event (``tool_invocation_requested``: invoked, not started;
``tool_result``: finished, its workflow task never completed). ``after-append:TYPE``: it kills itself right after the append activity
wrote a batch holding a TYPE event, before the workflow task that ran it can
complete (the local activity's result is lost; the line is on file). Other kill points (while the model streams, while a tool runs) are hit
from the outside by the test. Each tool execution appends a line to
``WORK_DIR/executions`` so the test can count side effects across processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client

from turnclient.lib.api import iso_now
from turncore.agents import AgentDefinition, StaticAgentResolver
from turncore.context import ContextResolver
from turncore.events import ModelDescriptor, ToolDescriptor, TurnEvent
from turncore.live import LiveHub
from turncore.model.scripted import ScriptedModel
from turncore.permissions import DeclaredPermissionChecker, DeferAllClassifier
from turncore.reducer import TurnReducer
from turncore.storage.repository import FileTurnRepository
from turncore.tools import ToolContext, ToolRegistry, tool
from turncore_temporal.activities.payloads import (
    AppendInput,
    AppendResult,
    FastToolsInput,
    FastToolsResult,
    ToolCallInput,
    ToolCallResult,
)
from turncore_temporal.activities.turn_activities import TurnDependencies

MODEL = ModelDescriptor(provider="scripted", model="crash")
SLOW = ToolDescriptor(
    tool_id="builtin:slow",
    name="slow",
    description="takes its time",
    input_schema={"type": "object"},
    execution="sync",
    requires_human=False,
)
GUARDED = ToolDescriptor(
    tool_id="builtin:guarded",
    name="slow",
    description="the slow tool, behind a permission",
    input_schema={"type": "object"},
    execution="sync",
    requires_human=False,
)
SCRIPT: list[Any] = [
    {
        "text": "let me run the slow tool now",
        "toolCalls": [{"toolName": "slow", "input": {"seconds": 0}}],
    },
    {"text": "the slow tool has finished and here is the answer"},
]


class Models:
    def __init__(self, delay: float) -> None:
        self.model = ScriptedModel(SCRIPT, model="crash", delay=delay)

    def resolve(self, descriptor: ModelDescriptor) -> ScriptedModel:
        return self.model


def resolver() -> StaticAgentResolver:
    return StaticAgentResolver(
        agents={
            "crash": AgentDefinition(agent_id="crash", system_prompt="crash test", tools=["slow"]),
            "guarded": AgentDefinition(
                agent_id="guarded", system_prompt="crash test", tools=["guarded"]
            ),
        },
        catalog={"slow": SLOW, "guarded": GUARDED},
        default_model=MODEL,
    )


def dependencies(work: Path, *, delay: float) -> TurnDependencies:
    repo = FileTurnRepository(work)
    executions = work / "executions"

    @tool(permission="none", tool_id="builtin:slow")
    async def slow(ctx: ToolContext, seconds: float = 0) -> Any:
        """Takes its time."""
        with executions.open("a") as f:
            f.write(f"{ctx.tool_call_id} {os.getpid()} {ctx.turn_id}\n")
        await asyncio.sleep(seconds + float(os.environ.get("SLOW_TOOL_SECONDS", "0")))
        return {"slept": True}

    if os.environ.get("FAST_TOOLS") == "1":
        slow = slow.with_(fast=True, fast_timeout=float(os.environ.get("FAST_BOUND", "10")))
    return TurnDependencies(
        repository=repo,
        models=Models(delay),
        tools=ToolRegistry.of([slow, slow.with_(name="guarded", tool_id="builtin:guarded")]),
        checker=DeclaredPermissionChecker({"builtin:slow": "none"}),
        classifier=DeferAllClassifier(),
        contexts=ContextResolver(lambda tid: TurnReducer.of(repo.read(tid)).state),
        clock=iso_now,
        hub=LiveHub(),
    )


async def main(address: str, task_queue: str, work: str, crash_at: str) -> None:
    from turncore_temporal.activities.turn_activities import TurnActivities
    from turncore_temporal.worker import build_worker

    client = await Client.connect(address)
    deps = dependencies(Path(work), delay=float(os.environ.get("MODEL_DELTA_DELAY", "0")))

    class CrashBeforeTool(TurnActivities):
        @activity.defn
        async def run_tool(self, input: ToolCallInput) -> ToolCallResult:
            os.kill(os.getpid(), signal.SIGKILL)  # the invocation is durable; the tool never starts
            return await super().run_tool(input)

    kind = crash_at.removeprefix("after-append:")

    class CrashAfterAppend(TurnActivities):
        @activity.defn
        async def append_events(self, input: AppendInput) -> AppendResult:
            result = await super().append_events(input)
            written = {e.type for e in input.events}
            if input.derive == "completion":
                written.add("turn_completed")
            if kind in written:
                os.kill(os.getpid(), signal.SIGKILL)  # on file; the workflow task never completes
            return result

    fast_kind = crash_at.removeprefix("fast-after:")

    class CrashInFastBatch(TurnActivities):
        @activity.defn
        async def run_fast_tools(self, input: FastToolsInput) -> FastToolsResult:
            if crash_at == "fast-start":
                os.kill(os.getpid(), signal.SIGKILL)  # nothing of the batch is on file
            return await super().run_fast_tools(input)

        async def _append(self, turn_id: str, events: Sequence[TurnEvent]) -> int:
            end = await super()._append(turn_id, events)
            if activity.info().is_local and fast_kind in {e.type for e in events}:
                os.kill(os.getpid(), signal.SIGKILL)  # on file; the workflow task never completes
            return end

    if crash_at == "before-tool":
        acts: TurnActivities = CrashBeforeTool(deps)
    elif crash_at.startswith("fast-"):
        acts = CrashInFastBatch(deps)
    elif crash_at.startswith("after-append:"):
        acts = CrashAfterAppend(deps)
    else:
        acts = TurnActivities(deps)
    worker = build_worker(client, deps, task_queue=task_queue, activities=acts)
    # SIGTERM is a graceful stop (what `turns worker` does on SIGTERM): the
    # worker shuts down, releasing its sticky queue, and the process exits.
    asyncio.get_running_loop().add_signal_handler(
        signal.SIGTERM, lambda: asyncio.ensure_future(worker.shutdown())
    )
    Path(work, "worker.ready").write_text(str(os.getpid()))
    await worker.run()


if __name__ == "__main__":
    asyncio.run(
        main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "")
    )
