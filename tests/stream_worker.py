"""A worker in its own process whose model streams up to a gate, for the live-delta tests.

Usage: python -m tests.stream_worker ADDRESS TASK_QUEUE WORK_DIR

It serves the work dir's runtime (the demo agent, the scripted demo model)
with one change: after a model call's first text delta the model waits until
the file ``WORK_DIR/gate`` exists, so the test can watch that delta arrive in
*its* process before the call completes. If ``WORK_DIR/hold-tools`` exists,
it also waits at its first tool call (its text's end already durable) until
``WORK_DIR/tools-gate`` exists. It writes ``WORK_DIR/worker.ready`` once
polling.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from turnclient.runtime.connection import Runtime
from turncore.events import ModelDescriptor
from turncore.model import Model
from turncore.model.binding import Binding
from turncore.model.port import (
    CancellationToken,
    ModelCallRequest,
    ModelOutcome,
    Sink,
    StreamEvent,
    TextDeltaEvent,
    ToolCallStartEvent,
)
from turncore_temporal.worker import build_worker

_ROOT = Path(__file__).resolve().parent.parent


class GatedModel(Model):
    def __init__(self, inner: Model, gate: Path) -> None:
        self._inner = inner
        self._gate = gate

    @property
    def binding(self) -> Binding:
        return self._inner.binding

    async def turn(
        self, request: ModelCallRequest, sink: Sink, cancel: CancellationToken
    ) -> ModelOutcome:
        first, first_tool = True, True
        hold_tools = self._gate.with_name("hold-tools").exists()

        async def gated(event: StreamEvent) -> None:
            nonlocal first, first_tool
            await sink(event)
            if first and isinstance(event, TextDeltaEvent):
                first = False
                while not self._gate.exists():
                    await asyncio.sleep(0.02)
            if hold_tools and first_tool and isinstance(event, ToolCallStartEvent):
                first_tool = False
                while not self._gate.with_name("tools-gate").exists():
                    await asyncio.sleep(0.02)

        return await self._inner.turn(request, gated, cancel)


class GatedModels:
    def __init__(self, inner: object, gate: Path) -> None:
        self._inner = inner
        self._gate = gate

    def resolve(self, descriptor: ModelDescriptor) -> Model:
        return GatedModel(self._inner.resolve(descriptor), self._gate)  # type: ignore[attr-defined]


async def main(address: str, task_queue: str, work: Path) -> None:
    env = {"TURNS_TASK_QUEUE": task_queue}
    if "TURNS_DATABASE_URL" in os.environ:  # a work dir whose turns are in PostgreSQL
        env["TURNS_DATABASE_URL"] = os.environ["TURNS_DATABASE_URL"]
    runtime = Runtime.from_work_dir(work, env=env)
    deps = dataclasses.replace(runtime.deps, models=GatedModels(runtime.models, work / "gate"))
    client = await Client.connect(address)
    worker = build_worker(client, deps, task_queue=task_queue)
    async with worker:
        (work / "worker.ready").write_text("ready")
        await asyncio.Event().wait()


@asynccontextmanager
async def stream_worker(
    env: WorkflowEnvironment, task_queue: str, work: Path
) -> AsyncIterator[None]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.stream_worker",
        env.client.service_client.config.target_host,
        task_queue,
        str(work),
        cwd=_ROOT,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
    )
    try:
        deadline = asyncio.get_running_loop().time() + 60
        while not (work / "worker.ready").exists():
            assert proc.returncode is None, "the worker process exited"
            assert asyncio.get_running_loop().time() < deadline, "the worker did not start"
            await asyncio.sleep(0.05)
        yield
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
