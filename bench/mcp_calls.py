"""What an MCP tool costs per call over a plain Python tool, on the same dev server.

Run from anywhere: ``python bench/mcp_calls.py [--calls N] [--repeat R]``
(about a minute at the defaults). It starts a Temporal dev server, the test
suite's MCP server (``tests/mcp_server.py``, the SDK's server side) over stdio
and over streamable HTTP on 127.0.0.1, and ``Turns`` with a worker in this
process. Three agents run the same turn: a scripted model calls an ``echo``
tool N times, one call per model call, then answers. The tool is a plain
Python function, the stdio server's ``echo`` or the HTTP server's ``echo``;
none needs permission. Each agent runs one warm-up turn first (the worker's
session to the server is opened then, and the stdio server started), so the
figures are steady-state calls.

Prints one JSON object: per agent the median time to create a turn
(``create_ms``: an MCP agent's includes listing its server's tools, through
the worker's open session) and to run it (``turn_ms``), and per transport
``overhead_per_call_ms`` = (MCP turn - plain turn) / N, the difference of two
turns that differ only in the tool; ``direct_call_ms`` is
one call through the same session without Temporal (the MCP round trip
itself). Times are medians over ``--repeat`` turns; compare values within
one run (the machine may be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.testing import WorkflowEnvironment  # noqa: E402

from bench._stdout import report_stdout  # noqa: E402
from turnclient import Agent, Turns, tool  # noqa: E402
from turnclient.runtime.devserver import find_temporal_cli  # noqa: E402
from turncore.events import ToolDescriptor  # noqa: E402
from turncore.model.port import ModelCallRequest  # noqa: E402
from turncore.model.scripted import call_index  # noqa: E402
from turncore.tools import ToolContext  # noqa: E402
from turncore_temporal.workflows import SEARCH_ATTRIBUTES  # noqa: E402


@tool(name="py_echo", permission="none")
def py_echo(text: str) -> str:
    """Echo the text back."""
    return text


def model_for(calls: int, name: str) -> Any:
    def model(request: ModelCallRequest) -> dict[str, Any]:
        index = call_index(request.messages)
        if index < calls:
            return {"toolCalls": [{"toolName": name, "input": {"text": f"call {index}"}}]}
        return {"text": "done"}

    return model


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _http_server(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp_server", "http", str(log), str(port)], cwd=ROOT
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("the MCP HTTP server did not start") from None
            time.sleep(0.1)


async def _direct(turns: Turns, server: str, n: int) -> float:
    """Median ms of one ``echo`` through the worker's session, without Temporal."""
    pool = turns.runtime.mcp
    assert pool is not None
    descriptor = ToolDescriptor(
        tool_id=f"mcp:{server}/echo",
        name="echo",
        description="",
        input_schema={"type": "object"},
        execution="sync",
        requires_human=False,
    )
    runner = pool.tool_for(descriptor)

    async def progress(_: Any) -> None:
        return None

    context = ToolContext("bench", "call", asyncio.Event(), progress)
    await runner.execute({"text": "warm"}, context)
    times = []
    for i in range(n):
        started = time.perf_counter()
        result = await runner.execute({"text": f"d{i}"}, context)
        times.append((time.perf_counter() - started) * 1000)
        assert not result.is_error, result
    return statistics.median(times)


async def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10, help="tool calls per turn")
    parser.add_argument("--repeat", type=int, default=5, help="turns per agent")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="turncore-mcp-bench-"))
    http, url = _http_server(work / "http.log")
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_log_level="error",
    )
    try:
        (work / "turns.toml").write_text(
            "[mcp.stdio]\n"
            f"command = {json.dumps(sys.executable)}\n"
            f'args = ["-m", "tests.mcp_server", "stdio", {json.dumps(str(work / "stdio.log"))}]\n'
            f"cwd = {json.dumps(str(ROOT))}\n"
            'permission = "none"\n'
            f'[mcp.http]\nurl = "{url}"\npermission = "none"\nprefix = "web"\n'
        )
        agents = [
            Agent(name="plain", system_prompt="p", tools=(py_echo,), model="scripted/plain"),
            Agent(name="stdio", system_prompt="p", model="scripted/stdio", mcp=("stdio",)),
            Agent(name="http", system_prompt="p", model="scripted/http", mcp=("http",)),
        ]
        models = {
            "plain": model_for(args.calls, "py_echo"),
            "stdio": model_for(args.calls, "echo"),
            "http": model_for(args.calls, "web_echo"),
        }
        turns = Turns(
            work,
            agents=agents,
            models=models,
            client=env.client,
            env={**os.environ, "TURNS_TASK_QUEUE": f"bench-{uuid.uuid4()}"},
        )
        walls: dict[str, list[float]] = {}
        creates: dict[str, list[float]] = {}
        async with turns:
            for name in ("plain", "stdio", "http"):
                await turns.run("warm up", agent=name)
            for _ in range(args.repeat):  # interleaved: load drifts hit every agent alike
                for name in ("plain", "stdio", "http"):
                    started = time.perf_counter()
                    turn_id = await turns.start("go", agent=name)
                    created = time.perf_counter()
                    outcome = await turns.advance(turn_id)
                    done = time.perf_counter()
                    assert outcome.status == "completed", outcome
                    creates.setdefault(name, []).append((created - started) * 1000)
                    walls.setdefault(name, []).append((done - created) * 1000)
            direct = {
                "stdio": await _direct(turns, "stdio", 50),
                "http": await _direct(turns, "http", 50),
            }
        median = {name: statistics.median(v) for name, v in walls.items()}
        report = {
            "calls_per_turn": args.calls,
            "turns_per_agent": args.repeat,
            "create_ms": {k: round(statistics.median(v), 1) for k, v in creates.items()},
            "turn_ms": {k: round(v, 1) for k, v in median.items()},
            "overhead_per_call_ms": {
                t: round((median[t] - median["plain"]) / args.calls, 2) for t in ("stdio", "http")
            },
            "plain_tool_iteration_ms": round(median["plain"] / (args.calls + 1), 1),
            "direct_call_ms": {k: round(v, 2) for k, v in direct.items()},
        }
        return report
    finally:
        await env.shutdown()
        http.terminate()
        http.wait(10)


if __name__ == "__main__":
    with report_stdout():
        report = asyncio.run(main())
    print(json.dumps(report, indent=2))
