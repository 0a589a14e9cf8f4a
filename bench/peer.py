"""turncore beside Pydantic AI's ``TemporalAgent``, on one dev server, in one run.

Run from anywhere, after ``pip install pydantic-ai-slim`` (bench only, never a
project dependency): ``python bench/peer.py [--repeat 5] [--sizes 40,200]``.
It starts one Temporal dev server and one worker process per system (this
script with ``--worker``): turncore's (the real ``build_worker``, file
storage, a scripted model with no delay) and the peer's (``bench/_peer.py``:
``TemporalAgent`` over a zero-latency ``FunctionModel``, on a plain
``Worker`` with Pydantic AI's plugins). This process only drives them. Each model call but the last asks for one ``blob`` tool
call. turncore runs the tool two ways: ``fast`` (a fast tool, a local
activity) and ``plain`` (a sync-tool activity). Systems alternate within
every measurement, so they share the machine's load alike.

1. ``iteration_ms``: the time one more model+tool iteration adds to a turn
   (median of turns with 0 and ``ITERATIONS`` iterations; the slope).
2. ``history_bytes``: Temporal history bytes per model call of a turn of
   ``HISTORY_CALLS`` model calls (the target's reading), and what one more
   model+tool iteration adds, with tool outputs of 100 B, 10 KB and 100 KB,
   and the spread across the three.
3. ``load``: ``N`` turns of three model calls started at once, for each N in
   ``--sizes``, ``--repeat`` times with the systems alternating: the medians
   of turns/s (N over the wall time) and of p50/p99 of a turn's time from
   start to outcome; and per turn, where it went: CPU milliseconds of the dev
   server, the system's worker and this driver (from /proc: Linux only), and
   the requests the server's frontend answered (its metrics), by call.
   ``turn_of_three_calls`` counts what one such turn puts in history: events,
   bytes, workflow tasks, activity tasks, markers.

``--parts`` picks among ``iteration``, ``history`` and ``load``.

Targets (ratios to the peer, turncore fast): iteration ≤ 0.6×; history per
model call ≤ 0.2× at each output size and within 10% across them;
throughput ≥ 3× and p99 ≤ 0.3× at each load size. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from bench import _peer  # noqa: E402
from bench._stdout import report_stdout  # noqa: E402
from tests.harness import Harness, sync_tool  # noqa: E402
from turnclient.lib.api import TurnClient  # noqa: E402
from turnclient.runtime.devserver import find_temporal_cli  # noqa: E402
from turncore.messages import UserMessage  # noqa: E402
from turncore.model.port import ModelCallRequest  # noqa: E402
from turncore.model.scripted import call_index  # noqa: E402
from turncore_temporal.worker import build_worker  # noqa: E402
from turncore_temporal.workflows import SEARCH_ATTRIBUTES  # noqa: E402

ITERATIONS = 4
HISTORY_CALLS = 10
OUTPUT_SIZES = {"100B": 100, "10KB": 10_000, "100KB": 100_000}
LOAD_CALLS = 3
METRICS_SETTLE_SECONDS = 1.5
"""The dev server's metrics lag its requests by up to about a second."""
TARGETS = {
    "iteration_ratio_at_most": 0.6,
    "history_ratio_at_most": 0.2,
    "history_spread_at_most": 0.10,
    "throughput_ratio_at_least": 3.0,
    "p99_ratio_at_most": 0.3,
}

Run = Callable[[str], Awaitable[Any]]
"""Runs one turn with this prompt to its end; returns its workflow id."""


def _model(request: ModelCallRequest) -> dict[str, Any]:
    prompt = next(m.content for m in request.messages if isinstance(m, UserMessage))
    _, wanted, size = str(prompt).split()
    index = call_index(request.messages)
    if index < int(wanted):
        return {"toolCalls": [{"toolName": "blob", "input": {"i": index, "size": int(size)}}]}
    return {"text": f"Done after {index} calls."}


def _blob(value: Any, context: Any) -> Any:
    return "x" * int(value["size"])


def _harness(client: Client, work: Path, fast: bool) -> Harness:
    return Harness(
        client,
        work,
        _model,
        tools=[sync_tool("blob")],
        implementations={"blob": _blob},
        fast={"blob": 10.0} if fast else {},
        permissions={"builtin:blob": "none"},
    )


async def serve(kind: str, address: str, task_queue: str, work: Path) -> None:
    """``--worker``: run one system's worker until killed."""
    if kind == "peer":
        client = await Client.connect(address, plugins=[PydanticAIPlugin()])
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[_peer.PeerWorkflow],
            plugins=[AgentPlugin(_peer.peer)],
        )
    else:
        h = _harness(await Client.connect(address), work, fast=kind == "turncore_fast")
        h.task_queue = task_queue
        worker = build_worker(h.client, h.deps, task_queue=task_queue)
    (work / "worker.ready").write_text(str(os.getpid()))
    await worker.run()


async def _start_worker(
    kind: str, address: str, task_queue: str, work: Path
) -> asyncio.subprocess.Process:
    work.mkdir(parents=True, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--worker", kind, address, task_queue, str(work), cwd=ROOT
    )
    deadline = time.monotonic() + 60
    while not (work / "worker.ready").exists():
        if proc.returncode is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the {kind} worker did not start")
        await asyncio.sleep(0.05)
    return proc


def _turncore(h: Harness) -> Run:
    async def run(prompt: str) -> str:
        turn_id = await h.create(prompt)
        outcome = await h.turns.advance_turn(turn_id).outcome
        assert outcome.status == "completed", outcome
        return turn_id

    return run


def _peer_run(client: Client, task_queue: str) -> Run:
    async def run(prompt: str) -> str:
        workflow_id = f"peer-{uuid.uuid4()}"
        await client.execute_workflow(
            _peer.PeerWorkflow.run, prompt, id=workflow_id, task_queue=task_queue
        )
        return workflow_id

    return run


async def _timed(run: Run, prompt: str) -> tuple[float, str]:
    started = time.perf_counter()
    workflow_id = await run(prompt)
    return time.perf_counter() - started, workflow_id


async def _history_bytes(client: Client, workflow_id: str) -> int:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return sum(e.ByteSize() for e in history.events)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def measure_iteration(systems: dict[str, Run], repeat: int) -> dict[str, Any]:
    times: dict[str, dict[int, list[float]]] = {s: {0: [], ITERATIONS: []} for s in systems}
    for _ in range(repeat):
        for n in (0, ITERATIONS):
            for name, run in systems.items():
                seconds, _ = await _timed(run, f"tools {n} 100")
                times[name][n].append(seconds)
    out = {
        name: round(
            (statistics.median(t[ITERATIONS]) - statistics.median(t[0])) / ITERATIONS * 1000, 1
        )
        for name, t in times.items()
    }
    return {
        "ms": out,
        "one_call_turn_ms": {
            name: round(statistics.median(t[0]) * 1000, 1) for name, t in times.items()
        },
        "ratio_fast_to_peer": round(out["turncore_fast"] / out["peer"], 3),
        "ratio_plain_to_peer": round(out["turncore_plain"] / out["peer"], 3),
    }


async def measure_history(systems: dict[str, Run], clients: dict[str, Client]) -> dict[str, Any]:
    """Two readings of "history per model call", at each tool output size.

    ``per_model_call``: a whole turn of ``HISTORY_CALLS`` model calls (each but
    the last with its tool call), its history bytes over its model calls.
    ``per_added_iteration``: what one more model+tool iteration adds, between
    turns of 0 and ``ITERATIONS`` iterations (the peer's grows with the turn:
    each model request carries the conversation so far).
    """
    whole: dict[str, dict[str, int]] = {s: {} for s in systems}
    added: dict[str, dict[str, int]] = {s: {} for s in systems}
    for label, size in OUTPUT_SIZES.items():
        for name, run in systems.items():
            _, none = await _timed(run, f"tools 0 {size}")
            _, many = await _timed(run, f"tools {ITERATIONS} {size}")
            _, turn = await _timed(run, f"tools {HISTORY_CALLS - 1} {size}")
            history = clients[name]
            grown = await _history_bytes(history, many) - await _history_bytes(history, none)
            added[name][label] = round(grown / ITERATIONS)
            whole[name][label] = round(await _history_bytes(history, turn) / HISTORY_CALLS)
    out: dict[str, Any] = {"per_model_call": whole, "per_added_iteration": added}
    for name in ("turncore_fast", "turncore_plain"):
        for key, per in (("per_model_call", whole), ("per_added_iteration", added)):
            values = list(per[name].values())
            out[f"{name}_{key}_spread"] = round(max(values) / min(values) - 1, 3)
            out[f"{name}_{key}_ratio_to_peer"] = {
                label: round(per[name][label] / per["peer"][label], 3) for label in OUTPUT_SIZES
            }
    return out


@dataclass
class Probes:
    """Where one system's load goes: CPU seconds of the server, the system's worker
    and this driver (from /proc, Linux only), and the requests the server's
    frontend answered (its Prometheus metrics): the round trips."""

    metrics_port: int
    workers: dict[str, int]
    """The worker process id, by system."""
    server: list[int]

    def cpu(self, name: str) -> dict[str, float]:
        return {
            "server": sum(_cpu_seconds(p) for p in self.server),
            "worker": _cpu_seconds(self.workers[name]),
            "driver": _cpu_seconds(os.getpid()),
        }

    def requests(self) -> Counter[str]:
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics").read()
        out: Counter[str] = Counter()
        for line in text.decode().splitlines():
            if line.startswith("service_requests{") and 'service_name="frontend"' in line:
                if 'namespace="default"' in line:
                    operation = line.split('operation="', 1)[1].split('"', 1)[0]
                    out[operation] += int(float(line.rsplit(" ", 1)[1]))
        return out


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                found.append(int(entry.name))
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def measure_load(
    systems: dict[str, Run], n: int, repeat: int, probes: Probes
) -> dict[str, Any]:
    """``n`` turns at once, ``repeat`` times, the systems alternating each time:
    the median of each figure, and per turn the CPU and round trips spent."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
    spent: dict[str, Counter[str]] = {name: Counter() for name in systems}
    calls: dict[str, Counter[str]] = {name: Counter() for name in systems}
    for _ in range(repeat):
        for name, run in systems.items():
            await asyncio.sleep(METRICS_SETTLE_SECONDS)  # the last run's requests
            requests = probes.requests()
            cpu = probes.cpu(name)
            started = time.perf_counter()
            results = await asyncio.gather(
                *(_timed(run, f"tools {LOAD_CALLS - 1} 100") for _ in range(n)),
                return_exceptions=True,
            )
            wall = time.perf_counter() - started
            spent[name].update({k: v - cpu[k] for k, v in probes.cpu(name).items()})
            await asyncio.sleep(METRICS_SETTLE_SECONDS)
            calls[name].update(probes.requests() - requests)
            latencies = [r[0] for r in results if isinstance(r, tuple)]
            runs[name].append(
                {
                    "failed": n - len(latencies),
                    "wall_s": wall,
                    "turns_per_s": len(latencies) / wall,
                    "p50_s": _pct(latencies, 0.5) if latencies else float("inf"),
                    "p99_s": _pct(latencies, 0.99) if latencies else float("inf"),
                }
            )
    out: dict[str, Any] = {}
    for name, measured in runs.items():
        turns = n * repeat
        out[name] = {
            "turns": n,
            "runs": repeat,
            "failed": sum(r["failed"] for r in measured),
            **{
                key: round(statistics.median(r[key] for r in measured), 3)
                for key in ("wall_s", "turns_per_s", "p50_s", "p99_s")
            },
            "cpu_ms_per_turn": {k: round(v * 1000 / turns, 1) for k, v in spent[name].items()},
            "round_trips_per_turn": round(sum(calls[name].values()) / turns, 1),
            "round_trips_by_call": {
                k: round(v / turns, 2)
                for k, v in sorted(calls[name].items(), key=lambda kv: -kv[1])
            },
        }
    fast, peer = out["turncore_fast"], out["peer"]
    out["throughput_ratio_fast_to_peer"] = round(fast["turns_per_s"] / peer["turns_per_s"], 2)
    out["p99_ratio_fast_to_peer"] = round(fast["p99_s"] / peer["p99_s"], 3)
    return out


async def measure_anatomy(systems: dict[str, Run], clients: dict[str, Client]) -> dict[str, Any]:
    """What one turn of ``LOAD_CALLS`` model calls puts in history, by kind of event:
    workflow tasks, activity tasks, markers (local activities, patches), the rest."""
    out: dict[str, Any] = {}
    for name, run in systems.items():
        _, workflow_id = await _timed(run, f"tools {LOAD_CALLS - 1} 100")
        history = await clients[name].get_workflow_handle(workflow_id).fetch_history()
        kinds: Counter[str] = Counter()
        for event in history.events:
            kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()
            marker = event.marker_recorded_event_attributes.marker_name
            kinds[f"{kind}:{marker}" if marker else kind] += 1
        out[name] = {
            "events": len(history.events),
            "bytes": sum(e.ByteSize() for e in history.events),
            "workflow_tasks": kinds["workflow_task_completed"],
            "activity_tasks": kinds["activity_task_scheduled"],
            "by_kind": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        }
    return out


async def run(repeat: int, sizes: list[int], parts: set[str]) -> dict[str, Any]:
    metrics_port = _free_port()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=["--metrics-port", str(metrics_port)],
    )
    server = _children(os.getpid())  # before any worker: the dev server's processes
    address = env.client.service_client.config.target_host
    peer_client = await Client.connect(address, plugins=[PydanticAIPlugin()])
    # Names of one length: a task queue's name rides in several events per
    # model call, and the systems' labels differ in length.
    queues = {name: uuid.uuid4().hex for name in ("turncore_fast", "turncore_plain", "peer")}
    workers: list[asyncio.subprocess.Process] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, queue in queues.items():
                workers.append(await _start_worker(name, address, queue, Path(tmp) / name))
            probes = Probes(
                metrics_port,
                {name: proc.pid for name, proc in zip(queues, workers, strict=True)},
                server,
            )
            drivers = {}
            for name in ("turncore_fast", "turncore_plain"):
                h = _harness(env.client, Path(tmp) / name, fast=name == "turncore_fast")
                h.turns = TurnClient(h.client, h.repo, h.resolver, task_queue=queues[name])
                drivers[name] = h
            systems = {
                "turncore_fast": _turncore(drivers["turncore_fast"]),
                "turncore_plain": _turncore(drivers["turncore_plain"]),
                "peer": _peer_run(peer_client, queues["peer"]),
            }
            clients = {
                "turncore_fast": env.client,
                "turncore_plain": env.client,
                "peer": peer_client,
            }
            for r in systems.values():  # warm up: imports, sandbox, caches
                await r("tools 1 100")
            out: dict[str, Any] = {}
            if "iteration" in parts:
                out["iteration_ms"] = await measure_iteration(systems, repeat)
            if "history" in parts:
                out["history_bytes"] = await measure_history(systems, clients)
            if "load" in parts:
                out["turn_of_three_calls"] = await measure_anatomy(systems, clients)
                out["load"] = {
                    str(n): await measure_load(systems, n, repeat, probes) for n in sizes
                }
    finally:
        for proc in workers:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await env.shutdown()
    met: dict[str, bool] = {}
    if "iteration_ms" in out:
        ratio = out["iteration_ms"]["ratio_fast_to_peer"]
        met["iteration"] = ratio <= TARGETS["iteration_ratio_at_most"]
    if "history_bytes" in out:
        history = out["history_bytes"]
        met["history"] = (
            all(
                r <= TARGETS["history_ratio_at_most"]
                for r in history["turncore_fast_per_model_call_ratio_to_peer"].values()
            )
            and history["turncore_fast_per_model_call_spread"] <= TARGETS["history_spread_at_most"]
        )
    if "load" in out:
        load = out["load"].values()
        met["throughput"] = all(
            v["throughput_ratio_fast_to_peer"] >= TARGETS["throughput_ratio_at_least"] for v in load
        )
        met["p99"] = all(v["p99_ratio_fast_to_peer"] <= TARGETS["p99_ratio_at_most"] for v in load)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_average_1_5_15_min": [round(x, 2) for x in os.getloadavg()],
        **out,
        "targets": TARGETS,
        "met": met,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per latency measurement")
    parser.add_argument("--sizes", default="40,200", help="concurrent turns, comma-separated")
    parser.add_argument(
        "--parts", default="iteration,history,load", help="what to measure, comma-separated"
    )
    parser.add_argument("--worker", nargs=4, metavar=("KIND", "ADDRESS", "QUEUE", "WORK"))
    args = parser.parse_args()
    if args.worker:
        kind, address, queue, work = args.worker
        asyncio.run(serve(kind, address, queue, Path(work)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    parts = set(args.parts.split(","))
    with report_stdout():
        report = asyncio.run(run(args.repeat, sizes, parts))
    print(json.dumps(report, indent=2), flush=True)
    os._exit(0)  # the SDK's Rust threads outlive the loop: skip finalisation


if __name__ == "__main__":
    main()
