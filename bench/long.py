"""A long turn on the embedded default: does each iteration cost the same at call 1,000?

Run from anywhere: ``python bench/long.py [--calls 1000]`` (a few minutes). It
writes a ``turns.toml`` with a scripted agent whose model asks for the built-in
``calculator`` tool ``--calls`` times (zero latency, ~100 B per tool output),
then answers; runs the real ``turns run`` (embedded Temporal server, the
CLI's own worker, file storage) once, and measures:

- ``ms_per_iteration_by_decile``: the wall time of one model+tool iteration
  in each tenth of the turn, from the file's ``model_call_requested``
  timestamps; ``flatness`` is the last decile over the first (the issue's goal:
  call 500 within 1.3x of call 50);
- ``history``: Temporal history events and bytes over every run of the turn's
  workflow, per model call, and ``runs`` (1 + continue-as-new count);
- ``worker_cpu_ms_per_iteration_by_decile``: the CPU time of the ``turns run``
  process (the worker: the runtime's own work, Temporal's server aside) per
  iteration in each tenth, sampled against the file's progress; on a shared
  machine this is the figure to judge flatness by, wall time being others' too;
- ``events`` (lines in the turn file), ``total_seconds``, and the peak RSS of the
  ``turns run`` process, which is the worker.

With ``--peer PYTHON`` it also runs Pydantic AI's ``TemporalAgent`` with that
interpreter (a separate venv: ``pip install 'pydantic-ai-slim[temporal]'``,
never a project dependency) on a dev server, with a zero-latency
``FunctionModel`` making the same calls to a tool returning 100 B, at 150 calls
and at growing counts until its workflow does not complete, and reports
history bytes per call and where it stopped (``bench/_peer_long.py``).

Prints one JSON object. Figures taken on a shared machine are noisy: compare
the ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
from temporalio.client import Client  # noqa: E402

from turnclient.runtime.embedded import servers_on  # noqa: E402

AGENT = """
default_agent = "long"

[agents.long]
system_prompt = "Add one, again and again."
model = "scripted/long.json"
tools = ["calculator"]
"""


def _script(calls: int) -> dict[str, Any]:
    # "1+1+…" keeps each call's expression (and so its tool output) near 100 B.
    # Usage is given, as a provider reports it: without it the scripted model counts
    # the words of every message it is sent, work of the "model", not the runtime's.
    usage = {"inputTokens": 100, "outputTokens": 10, "totalTokens": 110}
    responses: list[Any] = [
        {
            "toolCalls": [{"toolName": "calculator", "input": {"expression": f"{i}+{'0+' * 40}1"}}],
            "usage": usage,
        }
        for i in range(calls)
    ]
    responses.append({"text": "done", "usage": usage})
    return {"responses": responses}


class Sampler(threading.Thread):
    """Samples the worker process while the turn runs: its peak resident set size,
    and its CPU time against the number of model calls the file shows so far, so
    the CPU cost per iteration can be told by decile even on a busy machine."""

    def __init__(self, pid: int, home: Path) -> None:
        super().__init__(daemon=True)
        self.pid, self.home = pid, home
        self.peak_kb = 0
        self.samples: list[tuple[int, float]] = []  # (model calls on file, CPU seconds)
        self.done = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")

    def run(self) -> None:
        path: Path | None = None
        offset = calls = 0
        while not self.done.is_set():
            try:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak_kb = max(self.peak_kb, int(line.split()[1]))
                fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / self._tick
            except OSError:
                return
            if path is None:
                found = list(self.home.glob("storage/turns/*/*/*/*.jsonl"))
                path = found[0] if found else None
            if path is not None:
                with path.open("rb") as f:
                    f.seek(offset)
                    data = f.read()
                data = data[: data.rfind(b"\n") + 1]
                offset += len(data)
                calls += data.count(b'"type":"model_call_requested"')
                self.samples.append((calls, cpu))
            time.sleep(0.2)

    def cpu_by_decile(self, n: int) -> list[float]:
        """CPU milliseconds of the worker per iteration in each tenth of ``n`` calls."""

        def cpu_at(call: int) -> float:
            for done, cpu in self.samples:
                if done >= call:
                    return cpu
            return self.samples[-1][1]

        out = []
        for d in range(10):
            a, b = d * n // 10 + 1, (d + 1) * n // 10
            if b > a:
                out.append(round((cpu_at(b) - cpu_at(a)) / (b - a) * 1000, 1))
        return out


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _deciles(lines: list[dict[str, Any]]) -> list[float]:
    starts = [_ts(e["ts"]) for e in lines if e["type"] == "model_call_requested"]
    n = len(starts) - 1  # iterations between consecutive model calls
    out = []
    for d in range(10):
        a, b = d * n // 10, (d + 1) * n // 10
        if b > a:
            out.append(round((starts[b] - starts[a]) / (b - a) * 1000, 1))
    return out


async def _history(home: Path, turn_id: str) -> dict[str, int]:
    server = json.loads((home / "temporal" / "server.json").read_text())
    client = await Client.connect(f"127.0.0.1:{server['port']}")
    events = size = runs = 0
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(turn_id, run_id=run_id).fetch_history()
        runs += 1
        events += len(history.events)
        size += sum(e.ByteSize() for e in history.events)
        attrs = history.events[0].workflow_execution_started_event_attributes
        run_id = attrs.continued_execution_run_id or None
        if run_id is None:
            return {"events": events, "bytes": size, "runs": runs}


def run_turncore(calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="turns-long-") as tmp:
        home = Path(tmp)
        (home / "turns.toml").write_text(AGENT)
        (home / "long.json").write_text(json.dumps(_script(calls)))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))}
        env.update({"TURNS_HOME": str(home), "NO_COLOR": "1", "TURNS_SERVER_IDLE": "60"})
        argv = [sys.executable, "-m", "turnclient.cli", "run", "--json"]
        argv += ["--max-model-calls", str(calls + 10), "go"]
        started = time.monotonic()
        proc = subprocess.Popen(
            argv, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        sampler = Sampler(proc.pid, home)
        sampler.start()
        out, err = proc.communicate()
        total = time.monotonic() - started
        sampler.done.set()
        try:
            if proc.returncode != 0:
                raise SystemExit(f"turns run failed ({proc.returncode}): {err.decode()[-2000:]}")
            outcome = json.loads(out)
            [path] = home.glob("storage/turns/*/*/*/*.jsonl")
            lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
            history = asyncio.run(_history(home, path.stem))
        finally:
            for pid in servers_on(str(home / "temporal" / "dev.db")):
                os.kill(pid, 9)
        model_calls = sum(e["type"] == "model_call_requested" for e in lines)
        deciles = _deciles(lines)
        cpu = sampler.cpu_by_decile(model_calls)
        return {
            "status": outcome["status"],
            "model_calls": model_calls,
            "ms_per_iteration_by_decile": deciles,
            "flatness_last_over_first_decile": round(deciles[-1] / deciles[0], 2),
            "worker_cpu_ms_per_iteration_by_decile": cpu,
            "cpu_flatness_last_over_first_decile": round(cpu[-1] / cpu[0], 2) if cpu[0] else None,
            "history_bytes_per_call": history["bytes"] // model_calls,
            "history_events": history["events"],
            "runs": history["runs"],
            "events": len(lines),
            "file_bytes": path.stat().st_size if path.exists() else None,
            "total_seconds": round(total, 1),
            "worker_peak_rss_mb": round(sampler.peak_kb / 1024, 1),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument(
        "--peer",
        metavar="PYTHON",
        help="also run Pydantic AI's TemporalAgent with this interpreter (a venv that has "
        "pydantic-ai-slim[temporal])",
    )
    parser.add_argument(
        "--peer-counts",
        default="150,200,250,300,400,600,1000",
        help="the peer's counts, run in order until one does not complete",
    )
    args = parser.parse_args()
    report: dict[str, Any] = {"turncore": run_turncore(args.calls)}
    if args.peer:
        report["peer"] = run_peer(args.peer, [int(c) for c in args.peer_counts.split(",")])
    print(json.dumps(report, indent=2))


def run_peer(python: str, counts: list[int]) -> list[dict[str, Any]]:
    from turnclient.runtime.devserver import find_temporal_cli

    cli = str(find_temporal_cli())
    script = str(Path(__file__).with_name("_peer_long.py"))
    done = subprocess.run(
        [python, script, cli, *map(str, counts)], capture_output=True, text=True, check=False
    )
    runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not runs:
        raise SystemExit(f"the peer did not run: {done.stderr[-2000:]}")
    return runs


if __name__ == "__main__":
    main()
