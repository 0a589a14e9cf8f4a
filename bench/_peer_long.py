"""The peer side of ``bench/long.py``: Pydantic AI's ``TemporalAgent`` on one long turn.

Runs in its own virtual environment (``pip install 'pydantic-ai-slim[temporal]'``;
never a project dependency), started by ``bench/long.py --peer`` as
``PYTHON bench/_peer_long.py TEMPORAL_CLI COUNT…``. For each count it runs one
agent run of COUNT tool calls in a workflow on a fresh dev server (a zero-latency
``FunctionModel`` asks for a tool returning 100 B, then answers) and prints one
JSON line per count: completed or not (and why), history events and bytes, bytes
per model call, and wall time. It stops at the first count the workflow does not
survive.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import PydanticAIPlugin, PydanticAIWorkflow, TemporalAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

CALLS = {"n": 0}


def decide(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    made = sum(isinstance(m, ModelResponse) for m in messages)
    if made < CALLS["n"]:
        return ModelResponse(parts=[ToolCallPart("calc", {"n": made})])
    return ModelResponse(parts=[TextPart("done")])


agent = Agent(FunctionModel(decide), name="long")


@agent.tool_plain
def calc(n: int) -> str:
    """A tool answering 100 bytes."""
    return f"{n:>10}" + "x" * 90


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the wrapper is deprecated in favour of a capability
    temporal_agent = TemporalAgent(agent)


@workflow.defn
class LongRun(PydanticAIWorkflow):
    __pydantic_ai_agents__ = [temporal_agent]  # noqa: RUF012

    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await temporal_agent.run(prompt, usage_limits=UsageLimits(request_limit=None))
        return result.output


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def one(cli: str, count: int) -> dict[str, Any]:
    CALLS["n"] = count
    port = _port()
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [cli, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=tmp,
        )
        try:
            client = None
            for _ in range(200):
                try:
                    client = await Client.connect(f"127.0.0.1:{port}", plugins=[PydanticAIPlugin()])
                    break
                except Exception:
                    await asyncio.sleep(0.1)
            assert client is not None
            queue = f"peer-{uuid.uuid4()}"
            outcome: dict[str, Any] = {"calls": count}
            async with Worker(client, task_queue=queue, workflows=[LongRun]):
                started = time.monotonic()
                workflow_id = f"long-{uuid.uuid4()}"
                try:
                    await client.execute_workflow(
                        LongRun.run, "go", id=workflow_id, task_queue=queue
                    )
                    outcome["completed"] = True
                except WorkflowFailureError as exc:
                    outcome["completed"] = False
                    outcome["error"] = str(exc.cause or exc)[:300]
                outcome["seconds"] = round(time.monotonic() - started, 1)
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            size = sum(e.ByteSize() for e in history.events)
            outcome["history_events"] = len(history.events)
            outcome["history_bytes"] = size
            outcome["history_bytes_per_call"] = size // max(1, count)
            return outcome
        finally:
            server.terminate()
            server.wait()


async def main() -> None:
    cli = sys.argv[1]
    for count in map(int, sys.argv[2:]):
        outcome = await one(cli, count)
        print(json.dumps(outcome), flush=True)
        if not outcome["completed"]:
            return


if __name__ == "__main__":
    asyncio.run(main())
