"""Real crashes: the worker runs in its own process and is killed with SIGKILL
while the model streams, while a sync tool runs, and between the invocation
append and the tool's start. A fresh worker then finishes the turn by the
recovery table; the tool never runs twice and the file stays valid."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
from temporalio.testing import WorkflowEnvironment

from tests.crash_worker import resolver
from turnclient.lib.api import CreateTurnInput, TurnClient
from turncore.advance import INTERRUPTED_MODEL_CALL, INTERRUPTED_TOOL_RESULT
from turncore.events import PermissionDecisionInput, RequestedAgent
from turncore.messages import UserMessage
from turncore.reducer import TurnReducer
from turncore.storage.repository import FileTurnRepository

ROOT = Path(__file__).resolve().parent.parent


@asynccontextmanager
async def worker_process(
    env: WorkflowEnvironment, task_queue: str, work: Path, crash_at: str = "", **extra_env: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    ready = work / "worker.ready"
    ready.unlink(missing_ok=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.crash_worker",
        env.client.service_client.config.target_host,
        task_queue,
        str(work),
        crash_at,
        cwd=ROOT,
        env={**os.environ, **extra_env},
    )
    try:
        for _ in range(400):
            if ready.exists() or proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        assert ready.exists(), "the worker process did not start"
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def types(work: Path, turn_id: str) -> list[str]:
    path = FileTurnRepository(work).path_for(turn_id)
    return [orjson.loads(line)["type"] for line in path.read_bytes().splitlines()]


async def until(predicate: object, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition never became true")


async def _created(
    env: WorkflowEnvironment, work: Path
) -> tuple[str, str, FileTurnRepository, TurnClient]:
    """A fresh work dir and task queue, and one created turn of the crash agent."""
    work.mkdir(parents=True)
    task_queue = f"crash-{uuid.uuid4()}"
    repo = FileTurnRepository(work)
    client = TurnClient(
        env.client,
        repo,
        resolver(),
        task_queue=task_queue,
        workflow_options={"heartbeat_timeout_seconds": 2.0},
    )
    turn_id = await client.create_turn(
        CreateTurnInput(
            agent=RequestedAgent(agent_id="crash"),
            input=UserMessage(content="go"),
            human_available=True,
        )
    )
    return turn_id, task_queue, repo, client


async def _scenario(
    env: WorkflowEnvironment, work: Path, kill_point: str
) -> tuple[str, FileTurnRepository]:
    turn_id, task_queue, repo, client = await _created(env, work)
    executions = work / "executions"
    first_env = (
        {"MODEL_DELTA_DELAY": "1.0"} if kill_point == "model" else {"SLOW_TOOL_SECONDS": "60"}
    )
    crash_at = "before-tool" if kill_point == "before-tool" else ""
    async with worker_process(env, task_queue, work, crash_at, **first_env) as first:
        outcome = asyncio.ensure_future(client.recover(turn_id))
        if kill_point == "model":
            await until(lambda: "model_step_event" in types(work, turn_id))
            first.send_signal(signal.SIGKILL)
        elif kill_point == "tool":
            await until(lambda: executions.exists() and executions.read_text().count("\n") == 1)
            first.send_signal(signal.SIGKILL)
        await asyncio.wait_for(first.wait(), 30)
        assert first.returncode == -signal.SIGKILL
    async with worker_process(env, task_queue, work):
        result = await asyncio.wait_for(outcome, 90)
        assert result.status == "completed", result
        state = TurnReducer.of(repo.read(turn_id)).state  # the file validates
        queried = await env.client.get_workflow_handle(turn_id).query("state")
        queried.pop("rejectedInputs")
        assert queried == state.to_wire()
    return turn_id, repo


def executions_of(work: Path) -> list[str]:
    path = work / "executions"
    return path.read_text().splitlines() if path.exists() else []


async def test_kill_while_the_model_streams(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    turn_id, repo = await _scenario(temporal_env, tmp_path / "w", "model")
    state = TurnReducer.of(repo.read(turn_id)).state
    assert state.model_calls[0].error == INTERRUPTED_MODEL_CALL
    assert state.model_calls[1].request.messages == []  # re-issued as the next index
    assert "turn_failed" not in types(tmp_path / "w", turn_id)
    assert len(executions_of(tmp_path / "w")) == 1


async def test_kill_while_a_sync_tool_runs(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    turn_id, repo = await _scenario(temporal_env, tmp_path / "w", "tool")
    state = TurnReducer.of(repo.read(turn_id)).state
    assert len(executions_of(tmp_path / "w")) == 1  # never run twice
    result = state.tool_calls[0].result
    assert result is not None and result.source == "runtime"
    assert result.result.output == INTERRUPTED_TOOL_RESULT


async def test_kill_between_invocation_and_tool_start(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    turn_id, repo = await _scenario(temporal_env, tmp_path / "w", "before-tool")
    state = TurnReducer.of(repo.read(turn_id)).state
    assert executions_of(tmp_path / "w") == []  # the tool never started, and is not started later
    result = state.tool_calls[0].result
    assert result is not None and result.result.output == INTERRUPTED_TOOL_RESULT
    assert state.terminal is not None and state.terminal.type == "turn_completed"


async def test_a_cancel_after_a_kill_closes_the_interrupted_call_as_cancelled(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The worker dies while the model streams and the turn is cancelled before a
    new worker recovers it: the open call is closed as cancelled (§22), not as
    interrupted with a promise to re-issue it that the cancel then breaks."""
    work = tmp_path / "w"
    turn_id, task_queue, repo, client = await _created(temporal_env, work)
    async with worker_process(temporal_env, task_queue, work, MODEL_DELTA_DELAY="1.0") as first:
        advancing = asyncio.ensure_future(client.recover(turn_id))
        await until(lambda: "model_step_event" in types(work, turn_id))
        first.send_signal(signal.SIGKILL)
        await asyncio.wait_for(first.wait(), 30)
    handle = temporal_env.client.get_workflow_handle(turn_id)
    await handle.signal("cancel", {"type": "cancel", "reason": "stop"})
    async with worker_process(temporal_env, task_queue, work):
        result = await asyncio.wait_for(handle.result(), 90)
        assert result["status"] == "cancelled" and result["reason"] == "stop"
        assert (await asyncio.wait_for(advancing, 30)).status == "cancelled"
        queried = await handle.query("state")
    state = TurnReducer.of(repo.read(turn_id)).state
    assert [(m.index, m.error) for m in state.model_calls] == [(0, "Model call was cancelled.")]
    assert types(work, turn_id)[-2:] == ["model_call_failed", "turn_cancelled"]
    queried.pop("rejectedInputs")
    assert queried == state.to_wire()


# ------------------------------------------------------------ fast tools (local activities)


async def _fast_scenario(env: WorkflowEnvironment, work: Path, kill_point: str) -> TurnReducer:
    """The slow tool is fast (a local activity); the worker dies at ``kill_point``
    of the fast batch and a fresh worker re-executes the local activity."""
    turn_id, task_queue, repo, client = await _created(env, work)
    first_env = {"FAST_TOOLS": "1", "FAST_BOUND": "30"}
    if kill_point == "tool":
        first_env["SLOW_TOOL_SECONDS"] = "60"
    crash_at = "" if kill_point == "tool" else kill_point
    async with worker_process(env, task_queue, work, crash_at, **first_env) as first:
        outcome = asyncio.ensure_future(client.recover(turn_id))
        if kill_point == "tool":
            await until(lambda: len(executions_of(work)) == 1)
            first.send_signal(signal.SIGKILL)
        await asyncio.wait_for(first.wait(), 30)
        assert first.returncode == -signal.SIGKILL
    async with worker_process(env, task_queue, work, FAST_TOOLS="1"):
        result = await asyncio.wait_for(outcome, 90)
        assert result.status == "completed", result
        reducer = TurnReducer.of(repo.read(turn_id))  # the file validates
        queried = await env.client.get_workflow_handle(turn_id).query("state")
        queried.pop("rejectedInputs")
        assert queried == reducer.state.to_wire()
    history = await env.client.get_workflow_handle(turn_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "run_tool" not in scheduled  # it ran as a local activity every time
    return reducer


async def test_fast_kill_before_the_batch_invokes_runs_it_once(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    state = (await _fast_scenario(temporal_env, tmp_path / "w", "fast-start")).state
    assert len(executions_of(tmp_path / "w")) == 1  # nothing was durable: it runs, once
    result = state.tool_calls[0].result
    assert result is not None and result.source == "sync"
    assert result.result.output == {"slept": True}


async def test_fast_kill_after_the_invocation_never_runs_the_tool(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    reducer = await _fast_scenario(
        temporal_env, tmp_path / "w", "fast-after:tool_invocation_requested"
    )
    assert executions_of(tmp_path / "w") == []  # requested without a result: never started later
    result = reducer.state.tool_calls[0].result
    assert result is not None and result.source == "runtime"
    assert result.result.output == INTERRUPTED_TOOL_RESULT
    assert (
        types(tmp_path / "w", reducer.state.definition.turn_id).count("tool_invocation_requested")
        == 1
    )


async def test_fast_kill_while_the_tool_runs_never_runs_it_again(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    reducer = await _fast_scenario(temporal_env, tmp_path / "w", "tool")
    assert len(executions_of(tmp_path / "w")) == 1  # never run twice
    result = reducer.state.tool_calls[0].result
    assert result is not None and result.result.output == INTERRUPTED_TOOL_RESULT


async def test_fast_kill_after_the_result_keeps_the_result(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    reducer = await _fast_scenario(temporal_env, tmp_path / "w", "fast-after:tool_result")
    assert len(executions_of(tmp_path / "w")) == 1
    turn_id = reducer.state.definition.turn_id
    kinds = types(tmp_path / "w", turn_id)
    assert kinds.count("tool_result") == 1 and kinds.count("tool_invocation_requested") == 1
    result = reducer.state.tool_calls[0].result
    assert result is not None and result.result.output == {"slept": True}


async def test_an_input_to_a_turn_whose_worker_was_killed_is_answered_promptly(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The turn's next workflow task is bound to the dead worker's sticky queue;
    it moves to the shared queue after ``STICKY_QUEUE_TIMEOUT`` (1.5 s), not
    Temporal's default 10 s (``bench/resume.py`` measures it closely)."""
    work = tmp_path / "w"
    work.mkdir(parents=True)
    task_queue = f"crash-{uuid.uuid4()}"
    client = TurnClient(
        temporal_env.client, FileTurnRepository(work), resolver(), task_queue=task_queue
    )
    turn_id = await client.create_turn(
        CreateTurnInput(
            agent=RequestedAgent(agent_id="guarded"),
            input=UserMessage(content="go"),
            human_available=True,
        )
    )
    async with worker_process(temporal_env, task_queue, work) as first:
        assert (await client.advance_turn(turn_id).outcome).status == "suspended"
        first.send_signal(signal.SIGKILL)
        await asyncio.wait_for(first.wait(), 30)
    async with worker_process(temporal_env, task_queue, work):
        loop = asyncio.get_running_loop()
        started = loop.time()
        decision = PermissionDecisionInput(tool_call_id="call_0_0", decision="allow")
        outcome = await asyncio.wait_for(client.advance_turn(turn_id, decision).outcome, 60)
        elapsed = loop.time() - started
    assert outcome.status == "completed"
    assert elapsed < 8.0, f"answered after {elapsed:.1f} s"  # 10 s and more before
