"""The turn database goes away in the middle of a turn, then comes back.

A dedicated PostgreSQL server (not the session's) is shut down while a sync
tool runs. The tool's result cannot be stored: the run ends with an
infrastructure error, nothing partial is stored and nothing false is
recorded. Once the server is back, ``recover`` continues the turn by the
recovery table, and it completes with a valid history.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.pg_worker import dependencies, resolver
from tests.postgres import PASSWORD, PostgresServer
from turnclient.lib.api import CreateTurnInput, TurnClient
from turncore.advance import INTERRUPTED_TOOL_RESULT
from turncore.errors import InfrastructureError
from turncore.events import PermissionDecisionInput, RequestedAgent
from turncore.messages import UserMessage
from turncore.reducer import TurnReducer
from turncore.storage.postgres import PostgresTurnRepository, migrate
from turncore_temporal.worker import build_worker


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    server = PostgresServer.start()
    try:
        yield server
    finally:
        server.stop()


async def until(predicate: object, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition never became true")


async def test_database_lost_mid_turn_then_recovered(
    temporal_env: WorkflowEnvironment,
    own_server: PostgresServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = own_server.create_database("turns")
    migrate(url)
    monkeypatch.setenv("SLOW_TOOL_SECONDS", "2")
    repo = PostgresTurnRepository.connect(url, timeout=3.0)
    task_queue = f"outage-{uuid.uuid4()}"
    deps = dependencies(repo, tmp_path)
    client = TurnClient(
        temporal_env.client,
        repo,
        resolver(),
        task_queue=task_queue,
        workflow_options={"heartbeat_timeout_seconds": 2.0},
    )
    executions = tmp_path / "executions"
    try:
        async with build_worker(temporal_env.client, deps, task_queue=task_queue):
            turn_id = await client.create_turn(
                CreateTurnInput(
                    agent=RequestedAgent(agent_id="hosts"),
                    input=UserMessage(content="go"),
                    human_available=True,
                )
            )
            outcome = asyncio.ensure_future(client.recover(turn_id))
            # The fetch tool is running: the database goes away under it.
            await until(lambda: executions.exists() and "fetch" in executions.read_text())
            before = repo.raw(turn_id)
            own_server.pause()
            with pytest.raises(InfrastructureError) as info:
                await asyncio.wait_for(outcome, 120)
            assert PASSWORD not in str(info.value)
            failed = await temporal_env.client.get_workflow_handle(turn_id).fetch_history()
            assert "PostgreSQL 127.0.0.1" in failed.to_json()  # the failure names the server...
            assert PASSWORD not in failed.to_json()  # ...and never the credentials
            own_server.resume()

            # Nothing partial, nothing false: what was stored before is all there is.
            after = repo.raw(turn_id)
            assert after == before
            state = TurnReducer.of(repo.read(turn_id)).state
            assert state.terminal is None

            # recover continues the turn once the database is back.
            suspended = await asyncio.wait_for(client.recover(turn_id), 120)
            assert suspended.status == "suspended", suspended
            [pending] = suspended.pending_permissions
            done = await asyncio.wait_for(
                client.advance_turn(
                    turn_id,
                    PermissionDecisionInput(tool_call_id=pending.tool_call_id, decision="allow"),
                ).outcome,
                120,
            )
            assert done.status == "completed", done
        state = TurnReducer.of(repo.read(turn_id)).state
        fetch = next(c for c in state.tool_calls if c.invocation and c.tool_name == "fetch")
        assert fetch.result is not None and fetch.result.result.output == INTERRUPTED_TOOL_RESULT
        runs = executions.read_text().splitlines()
        assert len(runs) == len({r.split()[0] for r in runs}) == 2  # fetch once, guarded once
        assert PASSWORD not in caplog.text
    finally:
        repo.close()


@pytest.fixture
def durable_server() -> Iterator[PostgresServer]:
    """fsync on: a crash-stop must keep every committed row, as in production."""
    server = PostgresServer.start(durable=True)
    try:
        yield server
    finally:
        server.stop()


async def test_a_database_crash_and_restart_shorter_than_the_wait_is_ridden_out(
    temporal_env: WorkflowEnvironment,
    durable_server: PostgresServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server is crash-stopped while a sync tool runs and started again a few
    seconds later: every storage operation waits for it (up to the repository's
    ``timeout``), so the run goes on as if nothing happened — the tool's result is
    its own, not "interrupted", and nothing runs twice."""
    url = durable_server.create_database("turns")
    migrate(url)
    monkeypatch.setenv("SLOW_TOOL_SECONDS", "2")
    repo = PostgresTurnRepository.connect(url, timeout=30.0)
    task_queue = f"outage-{uuid.uuid4()}"
    client = TurnClient(
        temporal_env.client,
        repo,
        resolver(),
        task_queue=task_queue,
        workflow_options={"heartbeat_timeout_seconds": 2.0},
    )
    executions = tmp_path / "executions"
    try:
        async with build_worker(
            temporal_env.client, dependencies(repo, tmp_path), task_queue=task_queue
        ):
            turn_id = await client.create_turn(
                CreateTurnInput(
                    agent=RequestedAgent(agent_id="hosts"),
                    input=UserMessage(content="go"),
                    human_available=True,
                )
            )
            outcome = asyncio.ensure_future(client.recover(turn_id))
            await until(lambda: executions.exists() and "fetch" in executions.read_text())
            # Hold the turn's row, so that the tool's result is being written (its
            # append waits on the lock inside its transaction) when the server dies.
            locker = await asyncio.to_thread(
                psycopg.connect, durable_server.psql_url("turns"), autocommit=False
            )
            locker.execute("SELECT 1 FROM turns WHERE turn_id = %s FOR UPDATE", (turn_id,))
            with psycopg.connect(durable_server.psql_url("turns"), autocommit=True) as watch:
                waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted"
                await until(lambda: watch.execute(waiting).fetchone() != (0,))
            await asyncio.to_thread(durable_server.pause, "immediate")
            locker.close()
            await asyncio.sleep(5)  # the outage: the tool finishes while the server is down
            await asyncio.to_thread(durable_server.resume)
            suspended = await asyncio.wait_for(outcome, 120)
            assert suspended.status == "suspended", suspended
            [pending] = suspended.pending_permissions
            done = await asyncio.wait_for(
                client.advance_turn(
                    turn_id,
                    PermissionDecisionInput(tool_call_id=pending.tool_call_id, decision="allow"),
                ).outcome,
                120,
            )
            assert done.status == "completed", done
        state = TurnReducer.of(repo.read(turn_id)).state
        fetch = next(c for c in state.tool_calls if c.tool_name == "fetch")
        assert fetch.result is not None
        assert fetch.result.result.output != INTERRUPTED_TOOL_RESULT
        runs = executions.read_text().splitlines()
        assert len(runs) == len({r.split()[0] for r in runs}) == 2  # fetch once, guarded once
        history = await temporal_env.client.get_workflow_handle(turn_id).fetch_history()
        assert (
            "ActivityTaskFailed" not in history.to_json() or "PostgreSQL" not in history.to_json()
        )
    finally:
        repo.close()
