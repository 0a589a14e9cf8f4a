"""§26.1 and friends on a real dev server."""

from __future__ import annotations

import asyncio
import gc
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness
from turncore.events import TextDelta


async def test_plain_model_response(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    async with Harness(temporal_env.client, tmp_path, ["Hello there, how are you today?"]) as h:
        turn_id = await h.create("hi")
        lifecycle = h.hub.lifecycle()
        execution = h.turns.advance_turn(turn_id)
        streamed = [e async for e in execution.events]
        outcome = await execution.outcome
        assert outcome.status == "completed"
        types = h.types(turn_id)
        assert types[0] == "turn_created"
        assert types[1] == "model_call_requested"
        assert types[-2:] == ["model_call_completed", "turn_completed"]
        assert set(types[2:-2]) == {"model_step_event"}
        lines = h.lines(turn_id)
        assert lines[1]["request"] == {"messages": ["input"], "parameters": {}}
        assert "text_delta" not in types
        completed = lines[-2]
        assert completed["finishReason"] == "stop"
        assert completed["usage"]["totalTokens"] > 0
        assert lines[-1]["output"] == completed["message"]
        assert lines[-1]["usage"] == completed["usage"]
        deltas = [e for e in streamed if isinstance(e, TextDelta)]
        assert "".join(d.delta for d in deltas) == "Hello there, how are you today?"
        await h.assert_file_matches_query(turn_id)
        # Processing events are published on the bus but never persisted (§17, §26.1).
        published = [lifecycle.get_nowait().type for _ in range(lifecycle.qsize())]
        assert published == ["turn-processing-start", "turn-processing-end"]
        assert not {"turn-processing-start", "turn-processing-end"} & set(types)
        assert turn_id not in h.hub.active


@pytest.mark.parametrize("runs_worker", [False, True], ids=["remote-worker", "worker-here"])
async def test_running_a_turn_is_one_request_unless_a_worker_here_takes_it_eagerly(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    runs_worker: bool,
) -> None:
    """Without a worker in this process, running a new turn starts its run and asks
    it to settle in one request (update-with-start) that waits for the answer: no
    separate start, update or poll, and the run's first workflow task holds the
    update. With one, the start hands the first task to it (eager start) and the
    settle follows, which is faster there."""
    service = temporal_env.client.workflow_service
    calls: Counter[str] = Counter()
    counted_calls = (
        "start_workflow_execution",
        "update_workflow_execution",
        "poll_workflow_execution_update",
        "execute_multi_operation",
    )
    for name in counted_calls:
        original = getattr(service, name)

        async def counted(*args: Any, _call: Any = original, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return await _call(*args, **kw)

        monkeypatch.setattr(service, name, counted)
    async with Harness(temporal_env.client, tmp_path, ["Hello."]) as h:
        h.turns._runs_worker = runs_worker
        turn_id, outcome = await h.run("hi")
    assert outcome.status == "completed"
    if runs_worker:
        assert calls == {"start_workflow_execution": 1, "update_workflow_execution": 1}
        return
    assert calls == {"execute_multi_operation": 1}
    history = await temporal_env.client.get_workflow_handle(turn_id).fetch_history()
    tasks = [e for e in history.events if e.HasField("workflow_task_completed_event_attributes")]
    # One task for the start with its update, one for the model call's answer.
    assert len(tasks) == 2


async def test_a_turn_run_given_up_mid_request_leaves_nothing_unretrieved(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A caller that stops waiting while its start-and-settle request is in
    flight: the start operation's copy of the failure is taken, so asyncio has
    nothing "never retrieved" to print on the caller's stderr."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        async with Harness(temporal_env.client, tmp_path, ["Hello."]) as h:
            turn_id = await h.create("hi")
            h.turns._task_queue = f"nobody-{uuid.uuid4()}"  # no worker: the update waits
            h.turns._runs_worker = False  # the start goes with the update
            advance = asyncio.ensure_future(h.turns.advance_turn(turn_id).outcome)
            workflow = temporal_env.client.get_workflow_handle(turn_id)
            while True:  # until the request has started the run (it now waits on it)
                try:
                    await workflow.describe()
                    break
                except RPCError:
                    await asyncio.sleep(0.02)
            advance.cancel()
            with pytest.raises(asyncio.CancelledError):
                await advance
            await workflow.terminate("test over")
        del advance
        gc.collect()
    finally:
        loop.set_exception_handler(None)
    assert reported == []
