"""Many hosts on one machine: two worker processes with their own work dirs
and nothing shared but one Temporal dev server and one PostgreSQL database.

Fifty turns each run a tool that needs no permission and one that needs an
approval; every turn suspends, is approved and completes. Mid-way one
worker is SIGKILLed (tools are running then) and restarted. Afterwards every
turn has completed, no sync tool ran twice, every stored turn validates,
and each turn's ``state`` query equals the reduction of its stored events.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.testing import WorkflowEnvironment

from tests.pg_worker import resolver
from turnclient.lib.api import CreateTurnInput, TurnClient
from turncore.advance import INTERRUPTED_TOOL_RESULT
from turncore.events import PermissionDecisionInput, RequestedAgent
from turncore.messages import UserMessage
from turncore.reducer import TurnReducer
from turncore.storage.postgres import PostgresTurnRepository, migrate

ROOT = Path(__file__).resolve().parent.parent
TURNS = 50


@asynccontextmanager
async def worker(
    env: WorkflowEnvironment, task_queue: str, work: Path, url: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    work.mkdir(parents=True, exist_ok=True)
    ready = work / "worker.ready"
    ready.unlink(missing_ok=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.pg_worker",
        env.client.service_client.config.target_host,
        task_queue,
        str(work),
        cwd=ROOT,
        env={**os.environ, "TURNS_DATABASE_URL": url, "SLOW_TOOL_SECONDS": "0.3"},
    )
    try:
        for _ in range(600):
            if ready.exists() or proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        assert ready.exists(), "the worker process did not start"
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def executions(*works: Path) -> list[str]:
    """Every sync tool execution on any worker: ``call@turn tool pid``."""
    found: list[str] = []
    for work in works:
        path = work / "executions"
        if path.exists():
            found.extend(path.read_text().splitlines())
    return found


async def test_two_workers_one_killed_fifty_turns_with_approvals(
    temporal_env: WorkflowEnvironment, postgres_url: str, tmp_path: Path
) -> None:
    migrate(postgres_url)
    task_queue = f"hosts-{uuid.uuid4()}"
    a, b = tmp_path / "host-a", tmp_path / "host-b"
    repo = PostgresTurnRepository.connect(postgres_url)
    client = TurnClient(
        temporal_env.client,
        repo,
        resolver(),
        task_queue=task_queue,
        workflow_options={"heartbeat_timeout_seconds": 2.0},
    )
    try:
        async with worker(temporal_env, task_queue, b, postgres_url):
            first_a = worker(temporal_env, task_queue, a, postgres_url)
            proc_a = await first_a.__aenter__()
            killed = asyncio.Event()
            retried: list[str] = []

            async def one(i: int) -> tuple[str, str]:
                turn_id = await client.create_turn(
                    CreateTurnInput(
                        agent=RequestedAgent(agent_id="hosts"),
                        input=UserMessage(content=f"turn {i}"),
                        human_available=True,
                    )
                )
                # A caller waiting on a turn whose worker just died may see its
                # update time out (the workflow task waits for another worker);
                # like `turns recover`, it simply asks again.
                while True:
                    try:
                        outcome = await client.recover(turn_id)
                        if outcome.status == "suspended":
                            [pending] = outcome.pending_permissions
                            assert pending.tool_name == "guarded"
                            decision = PermissionDecisionInput(
                                tool_call_id=pending.tool_call_id, decision="allow"
                            )
                            outcome = await client.advance_turn(turn_id, decision).outcome
                        return turn_id, outcome.status
                    except WorkflowUpdateRPCTimeoutOrCancelledError:
                        retried.append(turn_id)

            async def kill_mid_way() -> None:
                # Once a quarter of the tool runs happened, tools are running on both workers.
                while len(executions(a, b)) < TURNS // 2:
                    await asyncio.sleep(0.02)
                proc_a.send_signal(signal.SIGKILL)
                await proc_a.wait()
                assert proc_a.returncode == -signal.SIGKILL
                killed.set()

            killer = asyncio.create_task(kill_mid_way())
            runs = asyncio.gather(*(one(i) for i in range(TURNS)))
            await asyncio.wait_for(killed.wait(), 120)
            await first_a.__aexit__(None, None, None)
            async with worker(temporal_env, task_queue, a, postgres_url):  # A restarts
                results = await asyncio.wait_for(runs, 300)
                await killer
                await check(temporal_env, repo, [turn_id for turn_id, _ in results], a, b)
            assert [status for _, status in results] == ["completed"] * TURNS
    finally:
        repo.close()


async def check(
    env: WorkflowEnvironment,
    repo: PostgresTurnRepository,
    turn_ids: list[str],
    a: Path,
    b: Path,
) -> None:
    """No tool ran twice, every turn validates and completed, queries match the database."""
    assert sorted(repo.turn_ids()) == sorted(turn_ids)
    runs_per_call = Counter(line.split()[0] for line in executions(a, b))
    assert max(runs_per_call.values()) == 1, "a sync tool ran twice"
    interrupted = 0
    for turn_id in turn_ids:
        state = TurnReducer.of(repo.read(turn_id)).state  # every stored turn validates
        assert state.terminal is not None and state.terminal.type == "turn_completed"
        for call in state.tool_calls:
            assert call.result is not None
            if call.result.source == "runtime":
                assert call.result.result.output == INTERRUPTED_TOOL_RESULT
                interrupted += 1
            else:
                assert runs_per_call[f"{call.tool_call_id}@{turn_id}"] == 1
        # The state query (answered by a worker) equals the reduction of the stored events.
        queried = await env.client.get_workflow_handle(turn_id).query("state")
        queried.pop("rejectedInputs")
        assert queried == state.to_wire()
    # Both hosts did work, and every tool run is accounted for.
    assert len({line.split()[2] for line in executions(a, b)}) >= 2
    assert sum(runs_per_call.values()) >= 2 * len(turn_ids) - interrupted
