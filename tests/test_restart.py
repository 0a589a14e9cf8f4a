"""Restart durability: a suspended turn survives a full restart of the worker and
of the Temporal dev server (persisted database), and a turn whose workflow is
gone resumes from its file alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, sync_tool
from turnclient.runtime.devserver import find_temporal_cli
from turncore.tools import ToolContext
from turncore_temporal.workflows import SEARCH_ATTRIBUTES

pytestmark = pytest.mark.temporal  # starts its own dev servers

SCRIPT: list[Any] = [
    {"toolCalls": [{"toolName": "write_file", "input": {"path": "x"}}]},
    {"text": "written"},
]


def write(value: Any, ctx: ToolContext) -> Any:
    return "ok"


def harness(env: WorkflowEnvironment, work: Path) -> Harness:
    return Harness(
        env.client,
        work,
        SCRIPT,
        tools=[sync_tool("write_file")],
        implementations={"write_file": write},
    )


async def _server(db: Path) -> WorkflowEnvironment:
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(),
        dev_server_database_filename=str(db),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_log_level="error",
    )


async def test_suspended_turn_survives_worker_and_server_restart(tmp_path: Path) -> None:
    db = tmp_path / "temporal.db"
    env = await _server(db)
    try:
        async with harness(env, tmp_path) as h:
            turn_id, outcome = await h.run("write it")
            assert outcome.status == "suspended"
            task_queue = h.task_queue
    finally:
        await env.shutdown()
    env = await _server(db)  # same database: the workflow is still there, waiting
    try:
        h = harness(env, tmp_path)
        h.task_queue = task_queue
        h.turns._task_queue = task_queue
        async with h:
            desc = await env.client.get_workflow_handle(turn_id).describe()
            assert desc.status is not None and desc.status.name == "RUNNING"
            done = await h.send(
                turn_id,
                {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"},
            )
            assert done.status == "completed"
            await h.assert_file_matches_query(turn_id)
    finally:
        await env.shutdown()


async def test_turn_resumes_from_its_file_when_the_workflow_is_gone(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    db = tmp_path / "temporal.db"
    env = await _server(db)
    try:
        async with harness(env, tmp_path) as h:
            turn_id, outcome = await h.run("write it")
            assert outcome.status == "suspended"
    finally:
        await env.shutdown()
    db.unlink()  # the Temporal database is gone; only the file remains
    async with harness(temporal_env, tmp_path) as h:
        again = await h.turns.recover(turn_id)
        assert again.status == "suspended"
        assert (
            h.types(turn_id).count("turn_suspended") == 1
        )  # advancing a suspended turn appends nothing
        done = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"}
        )
        assert done.status == "completed"
        await h.assert_file_matches_query(turn_id)
        # A terminated workflow is no obstacle either: recover returns the outcome without writing.
        before = h.repo.path_for(turn_id).read_bytes()
        assert (await h.turns.recover(turn_id)).status == "completed"
        assert h.repo.path_for(turn_id).read_bytes() == before


async def test_terminated_workflow_resumes_from_the_file(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with harness(temporal_env, tmp_path) as h:
        turn_id, outcome = await h.run("write it")
        assert outcome.status == "suspended"
        await temporal_env.client.get_workflow_handle(turn_id).terminate("operator error")
        before = h.repo.path_for(turn_id).read_bytes()
        again = await h.turns.recover(turn_id)
        assert again.status == "suspended"
        assert h.repo.path_for(turn_id).read_bytes() == before
        done = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"}
        )
        assert done.status == "completed"
        await h.assert_file_matches_query(turn_id)


async def test_the_client_rides_out_a_server_restart(tmp_path: Path) -> None:
    # issue 9 §7: transport errors and update-poll timeouts are retried inside
    # the client (the update is idempotent by its id) until a deadline.
    import asyncio

    from turnclient.runtime.embedded import free_port

    db = tmp_path / "temporal.db"
    port = free_port()

    async def server() -> WorkflowEnvironment:
        return await WorkflowEnvironment.start_local(
            dev_server_existing_path=find_temporal_cli(),
            dev_server_database_filename=str(db),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_log_level="error",
            port=port,
        )

    env = await server()
    h = harness(env, tmp_path)
    try:
        async with h:
            turn_id, outcome = await h.run("write it")
            assert outcome.status == "suspended"
            await env.shutdown()  # the server goes away under a live client and worker
            sending = asyncio.ensure_future(
                h.send(
                    turn_id,
                    {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"},
                )
            )
            # Longer than the SDK's own few retries: the client meets "connection
            # refused" again and again meanwhile.
            await asyncio.sleep(20.0)
            assert not sending.done(), sending
            env = await server()  # back, on the same port and database
            done = await asyncio.wait_for(sending, 120)
            assert done.status == "completed"
            assert h.types(turn_id).count("tool_permission_resolved") == 1
            await h.assert_file_matches_query(turn_id)
    finally:
        await env.shutdown()


async def test_a_server_that_stays_away_gives_a_typed_error_after_the_deadline(
    tmp_path: Path,
) -> None:
    from turnclient.lib.api import TurnClient
    from turncore.errors import InfrastructureError

    env = await _server(tmp_path / "temporal.db")
    try:
        async with harness(env, tmp_path) as h:
            turn_id, _ = await h.run("write it")
            await env.shutdown()
            client = TurnClient(
                env.client, h.repo, h.resolver, task_queue=h.task_queue, rpc_deadline_seconds=3.0
            )
            try:
                await client.recover(turn_id)
            except InfrastructureError as exc:
                assert "did not answer" in str(exc)
            else:
                raise AssertionError("recover succeeded without a server")
    finally:
        await env.shutdown()


def test_which_rpc_failures_the_client_retries() -> None:
    from temporalio.client import WorkflowUpdateRPCTimeoutOrCancelledError
    from temporalio.service import RPCError, RPCStatusCode

    from turnclient.lib.api import _transient

    def rpc(status: RPCStatusCode, message: str) -> RPCError:
        return RPCError(message, status, b"")

    assert _transient(rpc(RPCStatusCode.UNAVAILABLE, "tcp connect error"))
    assert _transient(rpc(RPCStatusCode.DEADLINE_EXCEEDED, "Timeout expired"))
    assert _transient(WorkflowUpdateRPCTimeoutOrCancelledError())
    # Seen under load with kills: a workflow task being retried after its worker died.
    assert _transient(
        rpc(
            RPCStatusCode.FAILED_PRECONDITION,
            "Unable to perform workflow execution update due to Workflow Task in failed state.",
        )
    )
    assert not _transient(rpc(RPCStatusCode.FAILED_PRECONDITION, "something else"))
    assert not _transient(rpc(RPCStatusCode.INVALID_ARGUMENT, "bad request"))
    assert not _transient(rpc(RPCStatusCode.NOT_FOUND, "workflow not found"))
