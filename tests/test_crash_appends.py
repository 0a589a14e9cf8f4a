"""A worker SIGKILLed right after each kind of workflow-side append.

The append activity writes its batch, then the process dies before the
workflow task that ran it completes, so Temporal never learns the activity
finished. The next worker replays the task: the same decision is made again,
stamped with a later ``workflow.now()``. The repository must recognise the
earlier attempt whatever its timestamp, so the turn continues with no failed
run and no line written twice (issue 9 §1).
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.crash_worker import resolver
from tests.test_crash import executions_of, worker_process
from turnclient.lib.api import CreateTurnInput, TurnClient
from turncore.events import PermissionDecisionInput, RequestedAgent
from turncore.messages import UserMessage
from turncore.reducer import TurnReducer
from turncore.storage.repository import FileTurnRepository
from turncore_temporal.workflows import TurnWorkflow, TurnWorkflowInput

BEFORE_SUSPENSION = {"tool_permission_required", "tool_permission_classified", "turn_suspended"}


def _lines(repo: FileTurnRepository, turn_id: str) -> list[dict[str, object]]:
    return [orjson.loads(raw) for raw in repo.path_for(turn_id).read_bytes().splitlines()]


@pytest.mark.parametrize(
    ("kind", "human"),
    [
        ("tool_permission_required", True),
        ("tool_permission_classified", True),
        ("turn_suspended", True),
        ("tool_permission_resolved", True),
        ("tool_invocation_requested", True),
        ("turn_cancelled", True),  # the workflow's terminal append (a cancel while suspended)
        ("tool_result", False),  # the synthetic result of a denied call
    ],
)
async def test_a_kill_right_after_an_append_neither_fails_nor_duplicates(
    temporal_env: WorkflowEnvironment, tmp_path: Path, kind: str, human: bool
) -> None:
    work = tmp_path / "w"
    work.mkdir()
    task_queue = f"crash-append-{uuid.uuid4()}"
    repo = FileTurnRepository(work)
    client = TurnClient(temporal_env.client, repo, resolver(), task_queue=task_queue)
    turn_id = await client.create_turn(
        CreateTurnInput(
            agent=RequestedAgent(agent_id="guarded"),
            input=UserMessage(content="go"),
            human_available=human,
            auto_permission=human,  # a classifier (that defers) runs when a human is there
        )
    )
    approved = False

    async def approve_when_suspended() -> None:
        # Approve once the workflow (not just the file) is at the suspension:
        # a workflow replaying after the crash lags its file for a moment, and
        # a decision it cannot place yet is rejected.
        nonlocal approved
        if approved or not any(e["type"] == "turn_suspended" for e in _lines(repo, turn_id)):
            return
        try:
            state = await handle.query("state", rpc_timeout=timedelta(seconds=2))
        except Exception:  # the worker is dying or gone: ask again later
            return
        if state.get("suspension") is not None:
            if kind == "turn_cancelled":
                await handle.signal("cancel", {"type": "cancel", "reason": "enough"})
            else:
                await handle.signal(
                    "permission_decision",
                    {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"},
                )
            approved = True

    async with worker_process(temporal_env, task_queue, work, f"after-append:{kind}") as first:
        handle = await temporal_env.client.start_workflow(
            TurnWorkflow.run,
            TurnWorkflowInput(turn_id=turn_id, heartbeat_timeout_seconds=2.0),
            id=turn_id,
            task_queue=task_queue,
            # A task whose worker died is handed on after this long.
            task_timeout=timedelta(seconds=2),
        )
        for _ in range(1200):
            if first.returncode is not None:
                break
            if kind not in BEFORE_SUSPENSION:
                await approve_when_suspended()
            await asyncio.sleep(0.05)
        await asyncio.wait_for(first.wait(), 30)
        assert first.returncode == -signal.SIGKILL, "the worker was not killed at the append"
    assert kind in Counter(e["type"] for e in _lines(repo, turn_id))  # the line is on file

    async with worker_process(temporal_env, task_queue, work):
        result_task = asyncio.ensure_future(handle.result())
        while not result_task.done():
            if human:
                await approve_when_suspended()
            await asyncio.wait([result_task], timeout=0.05)
        outcome = result_task.result()  # a failed run would raise here
        assert outcome["status"] == ("cancelled" if kind == "turn_cancelled" else "completed")
        state = TurnReducer.of(repo.read(turn_id)).state  # the file validates
        queried = await handle.query("state")
        queried.pop("rejectedInputs")
        assert queried == state.to_wire()

    lines = _lines(repo, turn_id)
    counts = Counter(e["type"] for e in lines)
    once = ["tool_permission_required", "tool_result"]
    if human:
        once += ["tool_permission_classified", "turn_suspended"]
    if kind == "turn_cancelled":
        once += ["turn_cancelled"]
    else:
        once += ["tool_permission_resolved", "turn_completed"]
    if human and kind != "turn_cancelled":
        once += ["tool_invocation_requested"]
    assert {k: counts[k] for k in once} == dict.fromkeys(once, 1), counts
    untimed = [orjson.dumps({k: v for k, v in e.items() if k != "ts"}) for e in lines]
    assert len(set(untimed)) == len(untimed), "a line was written twice"
    assert len(executions_of(work)) == (1 if "tool_invocation_requested" in once else 0)


@pytest.mark.parametrize("kind", ["tool_permission_classified", "turn_suspended"])
async def test_a_decision_sent_while_the_run_replays_after_a_kill_is_applied(
    temporal_env: WorkflowEnvironment, tmp_path: Path, kind: str
) -> None:
    """The file shows the call pending; the run that replays after the kill does not yet.

    The decision is sent while no worker is up, so the next worker's first task
    both replays (its state lags the file until the append is recognised) and
    validates the update. The client rides out the lag instead of refusing.
    """
    work = tmp_path / "w"
    work.mkdir()
    task_queue = f"crash-lag-{uuid.uuid4()}"
    repo = FileTurnRepository(work)
    client = TurnClient(temporal_env.client, repo, resolver(), task_queue=task_queue)
    turn_id = await client.create_turn(
        CreateTurnInput(
            agent=RequestedAgent(agent_id="guarded"),
            input=UserMessage(content="go"),
            human_available=True,
            auto_permission=True,
        )
    )
    async with worker_process(temporal_env, task_queue, work, f"after-append:{kind}") as first:
        await temporal_env.client.start_workflow(
            TurnWorkflow.run,
            TurnWorkflowInput(turn_id=turn_id, heartbeat_timeout_seconds=2.0),
            id=turn_id,
            task_queue=task_queue,
            task_timeout=timedelta(seconds=2),
        )
        await asyncio.wait_for(first.wait(), 60)
        assert first.returncode == -signal.SIGKILL, "the worker was not killed at the append"
    decision = PermissionDecisionInput(tool_call_id="call_0_0", decision="allow")
    pending = TurnReducer.of(repo.read(turn_id)).state.pending_permissions()
    assert [p.tool_call_id for p in pending] == ["call_0_0"]  # the file says: waiting for us
    approving = asyncio.ensure_future(client.advance_turn(turn_id, decision).outcome)
    await asyncio.wait([approving], timeout=1.0)
    assert not approving.done()  # no worker: nothing has looked at it yet
    async with worker_process(temporal_env, task_queue, work):
        outcome = await asyncio.wait_for(approving, 90)
    assert outcome.status == "completed"
    counts = Counter(e["type"] for e in _lines(repo, turn_id))
    assert counts["tool_permission_resolved"] == 1 and counts[kind] == 1, counts
