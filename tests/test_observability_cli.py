"""The CLI wired end to end: OTLP traces to a collector, encrypted history, the codec server.

Real processes on the embedded server: ``turns run`` with the standard
``OTEL_*`` variables pointed at an OTLP/HTTP receiver on 127.0.0.1 and with
``[temporal] payload_key_env`` set; the stock ``temporal`` CLI reads the
history, alone and through ``turns codec-server``.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.test_cli_turns import environment, held, home  # noqa: F401 (fixtures)
from tests.test_codec import with_payloads_decoded
from turnclient.builtins.demo import DEMO_MODEL
from turnclient.runtime.codec import new_key_spec
from turnclient.runtime.devserver import find_temporal_cli

pytestmark = pytest.mark.temporal  # starts its own dev servers

SECRET = "capybara-ledger-8812"


class Collector:
    """An OTLP/HTTP receiver: ``POST /v1/traces`` and ``/v1/metrics`` with protobuf bodies."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.metrics: set[str] = set()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/metrics":
                    metrics = ExportMetricsServiceRequest()
                    metrics.ParseFromString(body)
                    with outer.lock:
                        for rm in metrics.resource_metrics:
                            for sm in rm.scope_metrics:
                                outer.metrics.update(m.name for m in sm.metrics)
                else:
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    with outer.lock:
                        for rs in request.resource_spans:
                            for ss in rs.scope_spans:
                                outer.spans.extend(ss.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def names(self) -> set[str]:
        with self.lock:
            return {s.name for s in self.spans}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.close()


@pytest.fixture
def silent_collector() -> Iterator[str]:
    """A collector that takes connections and never answers (down behind a firewall, or hung)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def run(work: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnclient.cli", *args],
        cwd=work.parent,
        env={**environment(work), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def show(work: Path, turn_id: str, *extra: str) -> str:
    server = json.loads((work / "temporal" / "server.json").read_text())
    r = subprocess.run(
        [find_temporal_cli(), "workflow", "show", "-w", turn_id, "-o", "json"]
        + ["--address", f"127.0.0.1:{server['port']}", *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return with_payloads_decoded(r.stdout)


def test_run_traces_to_a_collector_and_keeps_history_sealed(
    held: Path,  # noqa: F811
    collector: Collector,
) -> None:
    work = held
    (work / "turns.toml").write_text('[temporal]\npayload_key_env = "TURNS_PAYLOAD_KEY"\n')
    env = {
        "TURNS_PAYLOAD_KEY": new_key_spec("cli-key"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    }
    r = run(work, env, "run", f"What time is it in Chicago? {SECRET}", "--json")
    assert r.returncode == 0, r.stderr
    turn_id = json.loads(r.stdout)["turnId"]

    # The process flushed its spans on exit: one trace from the advance down.
    deadline = time.monotonic() + 30
    wanted = {f"turn {turn_id}", "StartWorkflow:Turn", "RunWorkflow:Turn", f"chat {DEMO_MODEL}"}
    while not wanted <= collector.names():
        assert time.monotonic() < deadline, f"spans received: {sorted(collector.names())}"
        time.sleep(0.1)
    assert any(n.startswith("execute_tool ") for n in collector.names())
    assert len({s.trace_id for s in collector.spans}) == 1
    assert SECRET not in str(collector.spans)

    # The history holds nothing of the prompt; the codec server opens it.
    assert SECRET not in show(work, turn_id)
    server = subprocess.Popen(
        [sys.executable, "-m", "turnclient.cli", "codec-server", "--port", "0", "--json"],
        cwd=work.parent,
        env={**environment(work), **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        text = ""
        for line in server.stdout:
            text += line
            if line.startswith("}"):
                break
        info = json.loads(text)
        assert info["keyIds"] == ["cli-key"] and info["tokenRequired"] is True
        decoded = show(
            work,
            turn_id,
            "--codec-endpoint",
            info["url"],
            "--codec-auth",
            f"Bearer {info['token']}",
        )
        assert SECRET in decoded
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def test_worker_pushes_metrics_over_otlp(held: Path, collector: Collector) -> None:  # noqa: F811
    work = held
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_METRIC_EXPORT_INTERVAL": "300"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "turnclient.cli", "worker", "--metrics", "otlp", "--json"],
        cwd=work.parent,
        env={**environment(work), **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        text = ""
        for line in worker.stdout:
            text += line
            if line.startswith("}"):
                break
        assert json.loads(text)["worker"] is True
        r = run(work, {}, "run", "What time is it in Chicago?", "--no-worker", "--json")
        assert r.returncode == 0, r.stderr
        wanted = {
            "turncore_turns_started",
            "turncore_turns_settled",
            "turncore_model_call_duration",
            "turncore_model_tokens",
            "turncore_tool_duration",
            "turncore_pending_approvals",
        }
        deadline = time.monotonic() + 30
        while not (
            wanted <= collector.metrics
            and any(m.startswith("temporal_") for m in collector.metrics)
        ):
            assert time.monotonic() < deadline, f"metrics received: {sorted(collector.metrics)}"
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_collector_that_never_answers_does_not_hold_the_command(
    held: Path,  # noqa: F811
    silent_collector: str,
    protocol: str,
) -> None:
    """The exporter retries a silent collector for its whole timeout (10 s) before giving
    up; a command leaving must not wait for that: its turn is done and in the file."""
    work = held
    started = time.monotonic()
    r = run(work, {}, "run", "What time is it in Chicago?", "--json")
    plain = time.monotonic() - started
    assert r.returncode == 0, r.stderr

    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": silent_collector, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
    started = time.monotonic()
    r = run(work, env, "run", "What time is it in Chicago?", "--json")
    traced = time.monotonic() - started
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "completed"
    assert traced < plain + 5, f"{traced:.1f} s traced, {plain:.1f} s without tracing"
