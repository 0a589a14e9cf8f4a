"""Metrics: a worker's Prometheus endpoint, scraped after real turns.

The worker's client is connected with the runtime ``turns worker
--metrics`` builds (``metrics_runtime``), so turncore's metrics and
Temporal's own SDK metrics come from the one endpoint.
"""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, sync_tool
from tests.test_cli_turns import environment, turns
from turnclient.runtime.connection import ConnectOptions, data_converter
from turnclient.runtime.telemetry import metrics_address, metrics_runtime
from turncore.tools import ToolContext
from turncore_temporal.worker import pending_approvals_reported


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def value(text: str, name: str, **labels: str) -> float | None:
    """The sample of ``name`` whose labels include ``labels`` (None if absent)."""
    for line in text.splitlines():
        m = re.fullmatch(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)", line)
        if m is None or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


async def scrape_until(url: str, ready: Callable[[str], bool], timeout: float = 30.0) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        text = await asyncio.to_thread(scrape, url)
        if ready(text):
            return text
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"metrics never got there; last scrape:\n{text}")
        await asyncio.sleep(0.1)


def _lookup(value: Any, ctx: ToolContext) -> Any:
    return "found"


async def test_worker_endpoint_after_a_turn(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host,
        namespace=temporal_env.client.namespace,
        runtime=metrics_runtime(f"127.0.0.1:{port}"),
        data_converter=data_converter(ConnectOptions()),
    )
    script = [
        {
            "toolCalls": [{"toolName": "lookup", "input": {}}],
            "usage": {"inputTokens": 120, "outputTokens": 30, "totalTokens": 150},
        },
        {"text": "done", "usage": {"inputTokens": 200, "outputTokens": 7, "totalTokens": 207}},
    ]
    h = Harness(
        client, tmp_path, script, tools=[sync_tool("lookup")], implementations={"lookup": _lookup}
    )
    async with h, pending_approvals_reported(client, h.task_queue, every=0.1):
        turn_id, outcome = await h.run("look it up")
        assert outcome.status == "suspended"

        def one_pending(t: str) -> bool:
            return value(t, "turncore_pending_approvals", task_queue=h.task_queue) == 1

        text = await scrape_until(url, one_pending)
        assert value(text, "turncore_turns_started", task_queue=h.task_queue) == 1
        assert value(text, "turncore_turns_settled", status="suspended") == 1

        done = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"}
        )
        assert done.status == "completed"

        def settled(t: str) -> bool:
            # The outcome comes back with the update, before the run's last workflow
            # task completes it: the SDK counts the completed workflow after that.
            return (
                value(t, "turncore_pending_approvals", task_queue=h.task_queue) == 0
                and value(t, "turncore_turns_settled", status="completed") == 1
                and (value(t, "temporal_workflow_completed", task_queue=h.task_queue) or 0) >= 1
            )

        text = await scrape_until(url, settled)

    scripted = {"provider": "scripted", "model": "test"}
    assert value(text, "turncore_model_call_duration_count", **scripted, outcome="completed") == 2
    assert value(text, "turncore_model_tokens", **scripted, token_type="input") == 320
    assert value(text, "turncore_model_tokens", **scripted, token_type="output") == 37
    assert value(text, "turncore_tool_duration_count", tool="lookup", outcome="ok") == 1
    assert value(text, "turncore_turns_settled", status="failed") is None
    # Temporal's own SDK metrics, from the same runtime and endpoint.
    assert (value(text, "temporal_workflow_completed", task_queue=h.task_queue) or 0) >= 1
    assert (
        value(text, "temporal_activity_execution_latency_count", activity_type="call_model") or 0
    ) >= 2


def test_metrics_address_and_the_worker_flag(tmp_path: Path) -> None:
    assert metrics_address(":9464") == "0.0.0.0:9464"
    assert metrics_address("127.0.0.1:9464") == "127.0.0.1:9464"
    assert metrics_address("localhost:9464") == "127.0.0.1:9464"
    assert metrics_address("[::1]:9464") == "[::1]:9464"
    assert metrics_address("[::]:9464") == "[::]:9464"
    # The runtime binds a socket address: a name it cannot parse, an IPv6 address
    # without brackets or a port in other digits would only fail later, inside it.
    for bad in (
        "9464",
        ":0",
        ":99999",
        "host:port",
        "metrics.internal:9464",
        "a b:9464",
        "::1:9464",
        "[::1:9464",
        "127.0.0.1:\u0669\u0664\u0666\u0664",
        ":\u00b2",
        " :9464",
    ):
        try:
            metrics_address(bad)
        except ValueError as exc:
            assert repr(bad) in str(exc)
        else:
            raise AssertionError(f"{bad!r} was accepted")
    r = turns(tmp_path / "home", "worker", "--metrics", "nonsense")
    assert r.returncode == 2 and "--metrics 'nonsense'" in r.stderr


def test_a_metrics_address_the_worker_cannot_serve_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = turns(home, "worker", "--metrics", "metrics.internal:9464")
    assert r.returncode == 2 and "--metrics 'metrics.internal:9464'" in r.stderr, r.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        r = turns(home, "worker", "--metrics", address)
        assert r.returncode == 1, r.stderr
        assert f"--metrics {address}" in r.stderr and "in use" in r.stderr, r.stderr
        assert "unexpected" not in r.stderr and "Traceback" not in r.stderr
        # python worker.py, configured by TURNS_METRICS: the same, one line.
        for given in (address, "nonsense"):
            r = subprocess.run(
                [sys.executable, "-m", "turncore_temporal.worker"],
                cwd=tmp_path,
                env={**environment(home), "TURNS_METRICS": given},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert r.returncode == 1, r.stderr
            assert "Traceback" not in r.stderr and "turncore worker: " in r.stderr, r.stderr
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
