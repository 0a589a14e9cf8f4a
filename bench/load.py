"""Many concurrent turns on one worker, with file and with PostgreSQL storage.

Run from anywhere: ``python bench/load.py [--turns N] [--suspended M]``.
It starts a Temporal dev server and a PostgreSQL server (the tests' helper:
initdb and pg_ctl under a temporary directory, ``fsync=off`` and
``synchronous_commit=off``, as the file repository does not fsync either),
then for each storage:

1. ``load``: one worker process (``bench/_load_worker.py``, the real
   ``build_worker`` with a scripted model) and N turns started at once.
   Half run a tool that needs no permission and complete; half suspend for
   an approval and are approved as soon as they suspend. Reported:
   ``turns_per_s`` (N over the wall time from the first start to the last
   completion), ``signal_to_model_ms`` p50/p99 (approval sent, on the
   client's clock, to the next ``model_call_requested``, on the workflow's
   clock; one machine), ``worker_rss_mib_peak`` (sampled from /proc while the
   N turns are open), ``history_bytes_per_turn`` (Temporal history of a
   sample of turns), and what was lost: turns not completed, stored turns
   that do not validate, sync tools that ran twice.
2. ``suspended`` (PostgreSQL only, ``--suspended``, default 10,000): M turns
   created and suspended for an approval, the worker restarted, and a random
   100 approved; reported: the time to create them, to restart, and to
   resume the 100 (with p50/p99 per resume).

Targets checked in the output: PostgreSQL throughput at least 0.7× the
file repository's, worker RSS under 1 GiB at N open turns, p99 under 10×
p50 for signal→model. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError  # noqa: E402
from temporalio.service import RPCError  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402

from bench._load_worker import open_repository, resolver  # noqa: E402
from bench._stdout import report_stdout  # noqa: E402
from tests.postgres import PostgresServer  # noqa: E402
from turnclient.lib.api import CreateTurnInput, TurnClient  # noqa: E402
from turnclient.runtime.devserver import find_temporal_cli  # noqa: E402
from turncore.events import (  # noqa: E402
    ModelCallRequested,
    PermissionDecisionInput,
    RequestedAgent,
    TurnOutcome,
)
from turncore.messages import UserMessage  # noqa: E402
from turncore.storage.repository import JsonlRepository  # noqa: E402
from turncore_temporal.workflows import SEARCH_ATTRIBUTES  # noqa: E402

CONCURRENCY = 100  # client calls in flight at once (the worker sees all N turns open)


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@asynccontextmanager
async def worker(
    env: WorkflowEnvironment, queue: str, work: Path, kind: str, url: str | None
) -> AsyncIterator[asyncio.subprocess.Process]:
    work.mkdir(parents=True, exist_ok=True)
    ready = work / "worker.ready"
    ready.unlink(missing_ok=True)
    log = (work / "worker.log").open("ab")  # the worker's own output stays out of the JSON
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "bench" / "_load_worker.py"),
        env.client.service_client.config.target_host,
        queue,
        str(work),
        kind,
        cwd=ROOT,
        env={**os.environ, **({"TURNS_DATABASE_URL": url} if url else {})},
        stdout=log,
        stderr=log,
    )
    log.close()
    try:
        while not ready.exists():
            if proc.returncode is not None:
                raise RuntimeError("the worker exited at start")
            await asyncio.sleep(0.05)
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def patiently(call: Callable[[], Awaitable[TurnOutcome]]) -> TurnOutcome:
    """Ask for a settle point again when the update poll timed out under load (harmless)."""
    while True:
        try:
            return await call()
        except (WorkflowUpdateRPCTimeoutOrCancelledError, RPCError):
            await asyncio.sleep(0.5)


async def approve(client: TurnClient, turn_id: str, call_id: str) -> TurnOutcome:
    """Approve once; if the answer is lost, wait for the settle point before asking again.

    An input is only sent again when the turn is still waiting for it, so a
    timed-out first attempt that did arrive is not delivered twice.
    """
    decision = PermissionDecisionInput(tool_call_id=call_id, decision="allow")
    while True:
        try:
            return await client.advance_turn(turn_id, decision).outcome
        except (WorkflowUpdateRPCTimeoutOrCancelledError, RPCError):
            outcome = await patiently(lambda: client.recover(turn_id))
            waiting = outcome.status == "suspended" and any(
                p.tool_call_id == call_id for p in outcome.pending_permissions
            )
            if not waiting:
                return outcome


def ts_seconds(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


async def drive(
    client: TurnClient, gate: asyncio.Semaphore, agent: str, i: int, signals: dict[str, float]
) -> tuple[str, str]:
    async with gate:
        turn_id = await client.create_turn(
            CreateTurnInput(
                agent=RequestedAgent(agent_id=agent),
                input=UserMessage(content=f"turn {i}"),
                human_available=True,
            )
        )
        outcome = await patiently(lambda: client.recover(turn_id))
    if outcome.status == "suspended":
        [pending] = outcome.pending_permissions
        async with gate:
            signals[turn_id] = time.time()
            outcome = await approve(client, turn_id, pending.tool_call_id)
    return turn_id, outcome.status


def model_delay(repo: JsonlRepository, turn_id: str, sent: float) -> float:
    for event in repo.read(turn_id):
        if isinstance(event, ModelCallRequested) and event.model_call_index == 1:
            return max(0.0, ts_seconds(event.ts) - sent) * 1000
    raise AssertionError(f"{turn_id} has no second model call")


async def history_bytes(env: WorkflowEnvironment, turn_ids: list[str]) -> float:
    sizes = []
    for turn_id in turn_ids:
        history = await env.client.get_workflow_handle(turn_id).fetch_history()
        sizes.append(sum(e.ByteSize() for e in history.events))
    return statistics.mean(sizes)


async def load(
    env: WorkflowEnvironment, kind: str, n: int, base: Path, url: str | None
) -> dict[str, Any]:
    queue = f"load-{kind}-{uuid.uuid4()}"
    work = base / f"worker-{kind}"
    repo = open_repository(kind, work)
    client = TurnClient(env.client, repo, resolver(), task_queue=queue)
    gate = asyncio.Semaphore(CONCURRENCY)
    signals: dict[str, float] = {}
    peak = 0.0
    async with worker(env, queue, work, kind, url) as proc:
        done = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, rss_mib(proc.pid))
                await asyncio.sleep(0.25)

        sampler = asyncio.create_task(sample())
        started = time.monotonic()
        results = await asyncio.gather(
            *(drive(client, gate, "ask" if i % 2 else "free", i, signals) for i in range(n))
        )
        wall = time.monotonic() - started
        done.set()
        await sampler
        turn_ids = [t for t, _ in results]
        sample_ids = random.Random(1).sample(turn_ids, min(50, n))
        hist = await history_bytes(env, sample_ids)
    delays = [model_delay(repo, t, sent) for t, sent in signals.items()]
    invalid = 0
    for turn_id in turn_ids:
        try:
            events = repo.read(turn_id)
            if events[-1].type != "turn_completed":
                invalid += 1
        except Exception:
            invalid += 1
    runs = Counter((work / "executions").read_text().splitlines())
    close = getattr(repo, "close", None)
    if close is not None:
        close()
    p50, p99 = pct(delays, 0.5), pct(delays, 0.99)
    return {
        "turns": n,
        "approved": len(signals),
        "wall_s": round(wall, 2),
        "turns_per_s": round(n / wall, 2),
        "signal_to_model_ms": {"p50": round(p50, 1), "p99": round(p99, 1)},
        "worker_rss_mib_peak": round(peak, 1),
        "history_bytes_per_turn": round(hist),
        "lost": {
            "not_completed": sum(1 for _, s in results if s != "completed"),
            "invalid_or_unfinished_stored_turns": invalid,
            "tool_runs_twice": sum(1 for c in runs.values() if c > 1),
            "tool_runs_missing": n - len(runs),
        },
    }


async def suspended(env: WorkflowEnvironment, m: int, base: Path, url: str) -> dict[str, Any]:
    queue = f"suspended-{uuid.uuid4()}"
    work = base / "worker-suspended"
    repo = open_repository("postgres", work)
    client = TurnClient(env.client, repo, resolver(), task_queue=queue)
    gate = asyncio.Semaphore(CONCURRENCY)
    pending: dict[str, str] = {}

    async def create(i: int) -> None:
        async with gate:
            turn_id = await client.create_turn(
                CreateTurnInput(
                    agent=RequestedAgent(agent_id="ask"),
                    input=UserMessage(content=f"suspend {i}"),
                    human_available=True,
                )
            )
            outcome = await patiently(lambda: client.recover(turn_id))
            assert outcome.status == "suspended", outcome
            pending[turn_id] = outcome.pending_permissions[0].tool_call_id

    async with worker(env, queue, work, "postgres", url) as proc:
        started = time.monotonic()
        await asyncio.gather(*(create(i) for i in range(m)))
        create_s = time.monotonic() - started
        rss = rss_mib(proc.pid)
    started = time.monotonic()
    async with worker(env, queue, work, "postgres", url):
        restart_s = time.monotonic() - started
        chosen = random.Random(2).sample(sorted(pending), min(100, m))
        times: list[float] = []

        async def resume(turn_id: str) -> str:
            t0 = time.monotonic()
            outcome = await approve(client, turn_id, pending[turn_id])
            times.append((time.monotonic() - t0) * 1000)
            return outcome.status

        started = time.monotonic()
        statuses = await asyncio.gather(*(resume(t) for t in chosen))
        resume_s = time.monotonic() - started
    close = getattr(repo, "close", None)
    if close is not None:
        close()
    return {
        "suspended_turns": m,
        "create_and_suspend_s": round(create_s, 1),
        "worker_rss_mib_with_all_suspended": round(rss, 1),
        "worker_restart_s": round(restart_s, 2),
        "resumed": len(chosen),
        "resume_all_s": round(resume_s, 2),
        "resume_ms": {"p50": round(pct(times, 0.5), 1), "p99": round(pct(times, 0.99), 1)},
        "resumed_completed": sum(1 for s in statuses if s == "completed"),
    }


async def main(n: int, m: int, kinds: list[str]) -> dict[str, Any]:
    from turncore.storage.postgres import migrate

    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_log_level="error",
    )
    pg = PostgresServer.start()
    try:
        url = pg.create_database("turns")
        migrate(url)
        os.environ["TURNS_DATABASE_URL"] = url  # this process's repository reads it too
        with tempfile.TemporaryDirectory(prefix="turncore-load-") as tmp:
            out: dict[str, Any] = {"turns": n, "cpus": os.cpu_count(), "storage": {}}
            for kind in kinds:
                out["storage"][kind] = await load(
                    env, kind, n, Path(tmp), url if kind == "postgres" else None
                )
            if m:
                out["suspended"] = await suspended(env, m, Path(tmp), url)
        storage = out["storage"]
        targets: dict[str, Any] = {}
        if "file" in storage and "postgres" in storage:
            ratio = storage["postgres"]["turns_per_s"] / storage["file"]["turns_per_s"]
            targets["postgres_vs_file_throughput"] = {"value": round(ratio, 2), "target": ">= 0.7"}
            targets["postgres_vs_file_throughput"]["met"] = ratio >= 0.7
        for kind, r in storage.items():
            targets[f"{kind}_rss_under_1GiB"] = r["worker_rss_mib_peak"] < 1024
            p = r["signal_to_model_ms"]
            targets[f"{kind}_p99_under_10x_p50"] = p["p99"] < 10 * p["p50"]
            targets[f"{kind}_nothing_lost"] = not any(r["lost"].values())
        out["targets"] = targets
        return out
    finally:
        pg.stop()
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=1000, help="concurrent turns (1000)")
    parser.add_argument(
        "--suspended", type=int, default=10_000, help="suspended turns to restart over (10000)"
    )
    parser.add_argument("--storage", nargs="*", default=["file", "postgres"])
    args = parser.parse_args()
    with report_stdout():
        report = asyncio.run(main(args.turns, args.suspended, args.storage))
    print(json.dumps(report, indent=2))
