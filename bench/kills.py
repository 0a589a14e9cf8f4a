"""Load with kills: many turns while workers and the Temporal server are SIGKILLed.

Run from anywhere: ``python bench/kills.py [--turns 200] [--worker-kills 6]
[--server-kills 2]``. It starts a Temporal dev server on a SQLite database
and a fixed port, ``--workers`` worker processes (``tests/crash_worker.py``:
the real ``build_worker`` with a scripted model and a sync tool that records
every execution), and drives ``--turns`` turns through ``TurnClient``: half
run on their own (model → sync tool → model), half need a permission that
the driver grants once the turn is suspended. Meanwhile it SIGKILLs a worker
(and starts a fresh one) ``--worker-kills`` times and the server (and starts
it again on the same database and port) ``--server-kills`` times, spread
over the run by progress: the i-th kill when i/(kills+1) of the turns are done.

At the end every turn file must validate and be completed, and it prints
one JSON object: the counts, the kills, wall time, and the three numbers
that must be zero: ``failedRuns`` (workflow runs that ended FAILED, from
Temporal visibility), ``duplicateEvents`` (lines of a file equal but for
``ts``) and ``duplicateToolRuns`` (tool executions beyond one per call).
``ok`` is true when they are zero and every turn completed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
from temporalio.client import Client, WorkflowExecutionStatus  # noqa: E402
from temporalio.runtime import Runtime, TelemetryConfig  # noqa: E402

from tests.crash_worker import resolver  # noqa: E402
from turnclient.lib.api import CreateTurnInput, TurnClient  # noqa: E402
from turnclient.runtime.devserver import find_temporal_cli  # noqa: E402
from turnclient.runtime.embedded import free_port, search_attribute_flags  # noqa: E402
from turncore.errors import TurnError  # noqa: E402
from turncore.events import PermissionDecisionInput, RequestedAgent  # noqa: E402
from turncore.messages import UserMessage  # noqa: E402
from turncore.reducer import TurnReducer  # noqa: E402
from turncore.storage.repository import FileTurnRepository  # noqa: E402
from turncore_temporal.workflows import SEARCH_ATTRIBUTES  # noqa: E402


class _Server:
    """``temporal server start-dev`` on one database and port, killable and restartable."""

    def __init__(self, work: Path, port: int) -> None:
        self.db = work / "temporal.db"
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.log = work / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        args = [
            find_temporal_cli(),
            "server",
            "start-dev",
            "--db-filename",
            str(self.db),
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--headless",
            "--log-level",
            "error",
            *search_attribute_flags(SEARCH_ATTRIBUTES),
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                client = await asyncio.wait_for(Client.connect(self.address), 2)
                await asyncio.wait_for(client.count_workflows(), 2)
                return
            except Exception:
                await asyncio.sleep(0.2)
        raise RuntimeError(f"the dev server did not start; see {self.log}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


class _Workers:
    """Worker processes; any of them can be SIGKILLed and replaced."""

    def __init__(self, address: str, task_queue: str, work: Path, env: dict[str, str]) -> None:
        self.address, self.task_queue, self.work, self.env = address, task_queue, work, env
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log = open(work / "workers.log", "ab")  # noqa: SIM115

    def start_one(self) -> None:
        self.procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.crash_worker",
                    self.address,
                    self.task_queue,
                    str(self.work),
                ],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT), **self.env},
                stdout=self.log,
                stderr=self.log,
            )
        )

    def kill_one(self, rng: random.Random) -> None:
        victim = self.procs.pop(rng.randrange(len(self.procs)))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        self.start_one()

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        self.log.close()


async def _drive(client: TurnClient, turn_id: str, guarded: bool, errors: Counter[str]) -> str:
    """Advance the turn until it ends, granting its permission; client errors are retried."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            outcome = await client.recover(turn_id)
            if outcome.status == "suspended" and guarded:
                decision = PermissionDecisionInput(tool_call_id="call_0_0", decision="allow")
                outcome = await client.advance_turn(turn_id, decision).outcome
            if outcome.status != "suspended":
                return outcome.status
        except TurnError as exc:
            # A typed error (the turn's run failed, or a decision met a workflow
            # still replaying after a kill): counted, and the turn is asked again.
            errors[f"{type(exc).__name__}: {_gist(str(exc))}"] += 1
        await asyncio.sleep(0.5)
    return "timeout"


def _gist(message: str) -> str:
    """The message without the turn id and call details, so equal causes count together."""
    words = [w for w in message.split() if not w[:4].isdigit()]
    return " ".join(words)[:120]


def _check_files(repo: FileTurnRepository, turn_ids: list[str]) -> dict[str, int]:
    duplicates = invalid = 0
    for turn_id in turn_ids:
        try:
            TurnReducer.of(repo.read(turn_id))
        except TurnError:
            invalid += 1
        untimed = Counter(
            orjson.dumps({k: v for k, v in orjson.loads(line).items() if k != "ts"})
            for line in repo.path_for(turn_id).read_bytes().splitlines()
        )
        duplicates += sum(n - 1 for n in untimed.values() if n > 1)
    return {"duplicateEvents": duplicates, "invalidFiles": invalid}


def _duplicate_tool_runs(work: Path) -> tuple[int, int]:
    path = work / "executions"
    lines = path.read_text().splitlines() if path.exists() else []
    runs = Counter((line.split()[2], line.split()[0]) for line in lines)
    return len(lines), sum(n - 1 for n in runs.values() if n > 1)


async def run_kills(
    *,
    turns: int,
    worker_kills: int,
    server_kills: int,
    workers: int = 2,
    concurrency: int = 50,
    seed: int = 1,
    work: Path | None = None,
) -> dict[str, Any]:
    rng = random.Random(seed)
    work = work or Path(tempfile.mkdtemp(prefix="turncore-kills-"))
    work.mkdir(parents=True, exist_ok=True)
    server = _Server(work, free_port())
    await server.start()
    task_queue = f"kills-{uuid.uuid4()}"
    pool = _Workers(
        server.address,
        task_queue,
        work,
        {"MODEL_DELTA_DELAY": "0.02", "SLOW_TOOL_SECONDS": "0.3"},
    )
    for _ in range(workers):
        pool.start_one()
    repo = FileTurnRepository(work)
    # The SDK core logs every retry against the killed server; the report is the JSON.
    quiet = Runtime(telemetry=TelemetryConfig(logging=None))
    temporal = await Client.connect(server.address, runtime=quiet)
    client = TurnClient(
        temporal,
        repo,
        resolver(),
        task_queue=task_queue,
        workflow_options={"heartbeat_timeout_seconds": 3.0},
    )
    started = time.monotonic()
    kinds = [i % 2 == 1 for i in range(turns)]
    turn_ids = [
        await client.create_turn(
            CreateTurnInput(
                agent=RequestedAgent(agent_id="guarded" if guarded else "crash"),
                input=UserMessage(content=f"turn {i}"),
                human_available=True,
            )
        )
        for i, guarded in enumerate(kinds)
    ]
    errors: Counter[str] = Counter()
    gate = asyncio.Semaphore(concurrency)

    finished = 0
    progressed = asyncio.Event()

    async def one(turn_id: str, guarded: bool) -> str:
        nonlocal finished
        async with gate:
            status = await _drive(client, turn_id, guarded, errors)
        finished += 1
        progressed.set()
        return status

    driving = asyncio.gather(*(one(t, g) for t, g in zip(turn_ids, kinds, strict=True)))
    plan = ["worker"] * worker_kills + ["server"] * server_kills
    rng.shuffle(plan)
    done_kills: list[dict[str, Any]] = []
    for i, kind in enumerate(plan):
        # Kills are spread over the run by progress (not by the clock, which
        # differs from machine to machine): the i-th when i/(kills+1) of the
        # turns have finished, so every kill lands while turns are in flight.
        threshold = (i + 1) * turns // (len(plan) + 1)
        while finished < threshold and not driving.done():
            progressed.clear()
            waiting = asyncio.ensure_future(progressed.wait())
            await asyncio.wait([driving, waiting], return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
        if driving.done():
            break
        await asyncio.sleep(rng.uniform(0.0, 0.5))
        at = round(time.monotonic() - started, 1)
        if kind == "worker":
            pool.kill_one(rng)
        else:
            server.kill()
            await asyncio.sleep(1.0)  # down for a moment, then back on the same database
            await server.start()
        done_kills.append({"kind": kind, "atSeconds": at})
    statuses = Counter(await driving)
    wall = time.monotonic() - started

    failed_runs = 0
    async for wf in temporal.list_workflows(f'TaskQueue = "{task_queue}"'):
        if wf.status == WorkflowExecutionStatus.FAILED:
            failed_runs += 1
    pool.stop()
    server.kill()
    files = _check_files(repo, turn_ids)
    executions, duplicate_runs = _duplicate_tool_runs(work)
    result = {
        "turns": turns,
        "workers": workers,
        "kills": done_kills,
        "workerKills": sum(k["kind"] == "worker" for k in done_kills),
        "serverKills": sum(k["kind"] == "server" for k in done_kills),
        "outcomes": dict(statuses),
        "clientErrorsRetried": dict(errors),
        "toolExecutions": executions,
        "failedRuns": failed_runs,
        "duplicateEvents": files["duplicateEvents"],
        "duplicateToolRuns": duplicate_runs,
        "invalidFiles": files["invalidFiles"],
        "wallSeconds": round(wall, 1),
        "workDir": str(work),
    }
    result["ok"] = (
        failed_runs == 0
        and files["duplicateEvents"] == 0
        and duplicate_runs == 0
        and files["invalidFiles"] == 0
        and statuses == Counter({"completed": turns})
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--worker-kills", type=int, default=6)
    parser.add_argument("--server-kills", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    result = asyncio.run(
        run_kills(
            turns=args.turns,
            worker_kills=args.worker_kills,
            server_kills=args.server_kills,
            workers=args.workers,
            concurrency=args.concurrency,
            seed=args.seed,
        )
    )
    print(json.dumps(result, indent=2))
    raise SystemExit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
