"""Resume after a worker is replaced: SIGKILLed, and stopped gracefully.

Run from anywhere: ``python bench/resume.py [--repeat 3]``. It starts a
Temporal dev server and a worker process (``tests/crash_worker.py``: the
real ``build_worker``, a scripted model, a sync tool behind a permission),
suspends a turn on that permission, then replaces the worker — by SIGKILL,
or by SIGTERM (a graceful shutdown) — and, once the new worker is up, sends
the approval as an update and times how long until it is answered (the turn
completed: the tool ran and the model answered). The workflow's next task
was bound to the old worker's sticky queue; it is answered once Temporal
moves it to the shared queue (``STICKY_QUEUE_TIMEOUT`` in ``worker.py`` for a
killed worker; at once for a worker that released its queue on shutdown).

Targets: answered within 3 s after a SIGKILL, within 1 s after a graceful
restart. Prints one JSON object: every sample, the worst of each way, and
whether each target is met. Taken on a shared machine: compare within a run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
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
from tests.crash_worker import resolver  # noqa: E402
from turnclient.lib.api import CreateTurnInput, TurnClient  # noqa: E402
from turnclient.runtime.devserver import find_temporal_cli  # noqa: E402
from turncore.events import PermissionDecisionInput, RequestedAgent  # noqa: E402
from turncore.messages import UserMessage  # noqa: E402
from turncore.storage.repository import FileTurnRepository  # noqa: E402
from turncore_temporal.workflows import SEARCH_ATTRIBUTES  # noqa: E402

TARGETS = {"sigkill": 3.0, "graceful": 1.0}


async def _start_worker(address: str, task_queue: str, work: Path) -> asyncio.subprocess.Process:
    ready = work / "worker.ready"
    ready.unlink(missing_ok=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.crash_worker", address, task_queue, str(work), cwd=ROOT
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.returncode is not None or time.monotonic() > deadline:
            raise RuntimeError("the worker process did not start")
        await asyncio.sleep(0.02)
    return proc


async def _sample(env: WorkflowEnvironment, work: Path, way: str) -> float:
    work.mkdir(parents=True)
    address = env.client.service_client.config.target_host
    task_queue = f"resume-{uuid.uuid4()}"
    client = TurnClient(env.client, FileTurnRepository(work), resolver(), task_queue=task_queue)
    turn_id = await client.create_turn(
        CreateTurnInput(
            agent=RequestedAgent(agent_id="guarded"),
            input=UserMessage(content="go"),
            human_available=True,
        )
    )
    worker = await _start_worker(address, task_queue, work)
    try:
        suspended = await client.advance_turn(turn_id).outcome
        assert suspended.status == "suspended", suspended
        worker.send_signal(signal.SIGKILL if way == "sigkill" else signal.SIGTERM)
        await worker.wait()
        worker = await _start_worker(address, task_queue, work)
        decision = PermissionDecisionInput(tool_call_id="call_0_0", decision="allow")
        started = time.perf_counter()
        outcome = await asyncio.wait_for(client.advance_turn(turn_id, decision).outcome, 60)
        elapsed = time.perf_counter() - started
        assert outcome.status == "completed", outcome
        return elapsed
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()


async def run(repeat: int) -> dict[str, Any]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(), search_attributes=SEARCH_ATTRIBUTES
    )
    samples: dict[str, list[float]] = {"sigkill": [], "graceful": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(repeat):  # alternating, so both ways see the same load
                for way in samples:
                    seconds = await _sample(env, Path(tmp) / f"{way}{i}", way)
                    samples[way].append(round(seconds, 3))
    finally:
        await env.shutdown()
    worst = {way: max(values) for way, values in samples.items()}
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "targets_seconds": TARGETS,
        "answer_seconds": samples,
        "worst_seconds": worst,
        "met": {way: worst[way] <= TARGETS[way] for way in TARGETS},
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="samples of each way")
    args = parser.parse_args()
    with report_stdout():
        report = asyncio.run(run(args.repeat))
    print(json.dumps(report, indent=2), flush=True)
    os._exit(0)  # the SDK's Rust threads outlive the loop: skip finalisation


if __name__ == "__main__":
    main()
