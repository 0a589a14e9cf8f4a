"""§26.5 cancellation on a real dev server: suspended, during a model call, during a sync tool,
by Temporal cancellation, and with a broken environment."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from tests.harness import MODEL, Harness, async_tool, sync_tool
from turncore.context import ContextResolver
from turncore.errors import DependencyError, RejectedInputError
from turncore.events import ContextRef
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index
from turncore.tools import ToolContext


async def wait_for_type(
    h: Harness, turn_id: str, type_: str, timeout: float = 20.0, count: int = 1
) -> None:
    """Until the file holds ``count`` events of ``type_``."""
    for _ in range(int(timeout / 0.05)):
        if h.types(turn_id).count(type_) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{type_} never appeared {count} times in {h.types(turn_id)}")


def noop(value: Any, ctx: ToolContext) -> Any:
    return None


def two_calls(a: str, b: str) -> dict[str, Any]:
    return {"toolCalls": [{"toolName": a, "input": {}}, {"toolName": b, "input": {}}]}


async def test_cancel_while_suspended(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    script = [two_calls("ask", "ext"), {"text": "never"}]
    async with Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=[sync_tool("ask"), async_tool("ext")],
        implementations={"ask": noop},
        permissions={"external:ext": "none"},
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        cancelled = await h.send(turn_id, {"type": "cancel", "reason": "user changed their mind"})
        assert cancelled.status == "cancelled" and cancelled.reason == "user changed their mind"
        state = h.file_state(turn_id)
        assert all(t.result is not None and t.result.source == "runtime" for t in state.tool_calls)
        assert h.types(turn_id)[-1] == "turn_cancelled"
        assert h.types(turn_id).count("model_call_requested") == 1
        # Late external inputs are rejected and change nothing.
        before = h.repo.path_for(turn_id).read_bytes()
        with pytest.raises(RejectedInputError):
            await h.send(
                turn_id,
                {
                    "type": "async_tool_result",
                    "toolCallId": "call_0_1",
                    "result": {"output": 1, "isError": False},
                },
            )
        with pytest.raises(RejectedInputError):
            await h.send(
                turn_id,
                {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"},
            )
        assert h.repo.path_for(turn_id).read_bytes() == before
        await h.assert_file_matches_query(turn_id)


async def test_cancel_during_model_call(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    script = [{"text": "a long answer that streams slowly word by word"}]
    async with Harness(temporal_env.client, tmp_path, script, delay=2.0) as h:
        turn_id = await h.create("go")
        execution = h.turns.advance_turn(turn_id)
        await wait_for_type(h, turn_id, "model_call_requested")
        cancelled = await h.send(turn_id, {"type": "cancel"})
        assert cancelled.status == "cancelled"
        outcome = await execution.outcome
        assert outcome.status == "cancelled"
        types = h.types(turn_id)
        assert types[-2:] == ["model_call_failed", "turn_cancelled"]
        assert "model_call_completed" not in types and types.count("model_call_requested") == 1
        await h.assert_file_matches_query(turn_id)


async def test_cancel_during_sync_tool(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    saw_signal = asyncio.Event()

    async def slow(value: Any, ctx: ToolContext) -> Any:
        await ctx.report_progress({"started": True})
        await asyncio.wait_for(ctx.cancelled.wait(), timeout=30)
        saw_signal.set()
        raise asyncio.CancelledError

    script = [two_calls("slow", "slow"), {"text": "never"}]
    async with Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=[sync_tool("slow")],
        implementations={"slow": slow},
        permissions={"builtin:slow": "none"},
    ) as h:
        turn_id = await h.create("go")
        execution = h.turns.advance_turn(turn_id)
        for _ in range(400):
            if h.types(turn_id).count("tool_progress") == 2:
                break
            await asyncio.sleep(0.05)
        cancelled = await h.send(turn_id, {"type": "cancel", "reason": "stop"})
        assert cancelled.status == "cancelled"
        assert saw_signal.is_set()  # the signal reached the tool before the turn closed
        assert (await execution.outcome).status == "cancelled"
        state = h.file_state(turn_id)
        results = [t.result for t in state.tool_calls]
        assert all(
            r is not None and r.source == "runtime" and "cancelled" in str(r.result.output)
            for r in results
        )
        assert h.types(turn_id).count("model_call_requested") == 1
        await h.assert_file_matches_query(turn_id)


async def test_temporal_cancellation_takes_the_same_path(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(
        temporal_env.client,
        tmp_path,
        [two_calls("ask", "ask")],
        tools=[sync_tool("ask")],
        implementations={"ask": noop},
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        handle = h.client.get_workflow_handle(turn_id)
        await handle.cancel()
        result = await handle.result()
        assert result["status"] == "cancelled"
        assert h.types(turn_id)[-1] == "turn_cancelled"
        assert len([e for e in h.lines(turn_id) if e["type"] == "tool_result"]) == 2


async def test_cancel_succeeds_when_dependencies_are_gone(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(
        temporal_env.client,
        tmp_path,
        [two_calls("ask", "ask")],
        tools=[sync_tool("ask")],
        implementations={"ask": noop},
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        # The provider disappears from configuration while the turn waits.
        del h.models.models[MODEL.label()]
        before = h.repo.path_for(turn_id).read_bytes()
        with pytest.raises(DependencyError, match="no model is configured"):
            await h.send(
                turn_id,
                {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"},
            )
        assert h.repo.path_for(turn_id).read_bytes() == before
        done = await h.send(turn_id, {"type": "cancel"})
        assert done.status == "cancelled"
        await h.assert_file_matches_query(turn_id)


async def test_advance_with_a_missing_model_rejects_and_writes_nothing(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(temporal_env.client, tmp_path, ["hi"]) as h:
        turn_id = await h.create("go")
        del h.models.models[MODEL.label()]
        before = h.repo.path_for(turn_id).read_bytes()
        with pytest.raises(DependencyError, match="no model is configured for scripted/test"):
            await h.turns.recover(turn_id)
        assert h.repo.path_for(turn_id).read_bytes() == before
        # Fixing the environment and recovering again advances the same turn.
        h.models.models[MODEL.label()] = h.model
        assert (await h.turns.recover(turn_id)).status == "completed"


def _by_prompt(request: ModelCallRequest) -> Any:
    """Answer the earlier turn in text; make the later one wait on two approvals."""
    last_user = [m for m in request.messages if m.role == "user"][-1]
    if last_user.content == "earlier turn":
        return {"text": "noted"}
    return two_calls("ask", "ask") if call_index(request.messages) == 0 else {"text": "never"}


@pytest.mark.parametrize("breakage", ["tool renamed", "context chain unreadable"])
async def test_cancel_succeeds_when_the_environment_broke(
    temporal_env: WorkflowEnvironment, tmp_path: Path, breakage: str
) -> None:
    async with Harness(
        temporal_env.client,
        tmp_path,
        _by_prompt,
        tools=[sync_tool("ask")],
        implementations={"ask": noop},
    ) as h:
        earlier = await h.create("earlier turn")
        assert (await h.turns.recover(earlier)).status == "completed"
        turn_id = await h.create("go", context=ContextRef(previous_turn_id=earlier))
        assert (await h.turns.recover(turn_id)).status == "suspended"
        refusal: type[Exception]
        if breakage == "tool renamed":
            h.registry._sync.pop("builtin:ask")
            refusal, expected = DependencyError, "no sync implementation"
        else:
            h.repo.path_for(earlier).unlink()
            # An ended turn never changes, so a worker keeps what it composed
            # from it; a worker that has not read it yet (here: a restarted
            # one) finds the file gone.
            h.deps.contexts = ContextResolver(lambda t: h.repo.reduced(t).state)
            refusal, expected = DependencyError, "cannot be read"
        before = h.repo.path_for(turn_id).read_bytes()
        with pytest.raises(refusal, match=expected) as caught:
            await h.send(
                turn_id,
                {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"},
            )
        # Only code a worker lacks is fixed by serving the app; a lost file is not.
        assert ("TURNS_APP" in str(caught.value)) == (breakage == "tool renamed")
        assert h.repo.path_for(turn_id).read_bytes() == before
        done = await h.send(turn_id, {"type": "cancel", "reason": "environment gone"})
        assert done.status == "cancelled"
        assert h.types(turn_id)[-1] == "turn_cancelled"


async def test_a_provider_missing_from_the_registry_is_a_dependency_error(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    from turncore.model.registry import ModelRegistry

    h = Harness(temporal_env.client, tmp_path, ["hi"])
    h.deps.models = ModelRegistry({}, env={})  # "scripted/test" resolves to no function here
    async with h:
        turn_id = await h.create("go")
        before = h.repo.path_for(turn_id).read_bytes()
        with pytest.raises(DependencyError):
            await h.turns.recover(turn_id)
        assert h.repo.path_for(turn_id).read_bytes() == before


async def test_cancel_reaches_a_slow_classifier_and_nothing_is_invoked_after_it(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """§22 / §26.5: the classifier is cancelled, and its late allow runs nothing."""
    from turncore.permissions import (
        FunctionClassifier,
        PermissionClassification,
        PermissionClassificationBatch,
    )

    started = asyncio.Event()
    release = asyncio.Event()
    cancelled = asyncio.Event()
    ran: list[str] = []

    async def slow_allow(batch: PermissionClassificationBatch) -> list[PermissionClassification]:
        started.set()
        try:
            await asyncio.wait_for(release.wait(), timeout=30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return [
            PermissionClassification(tool_call_id=r.tool_call_id, decision="allow", reason="ok")
            for r in batch.requests
        ]

    def run(value: Any, ctx: ToolContext) -> Any:
        ran.append(ctx.tool_call_id)
        return "ran"

    script = [{"toolCalls": [{"toolName": "risky", "input": {}}]}, {"text": "never"}]
    async with Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=[sync_tool("risky")],
        implementations={"risky": run},
        classifier=FunctionClassifier(slow_allow),
    ) as h:
        turn_id = await h.create("go", auto_permission=True)
        execution = h.turns.advance_turn(turn_id)
        await asyncio.wait_for(started.wait(), timeout=20)
        outcome = await h.send(turn_id, {"type": "cancel", "reason": "stop"})
        assert outcome.status == "cancelled"
        assert cancelled.is_set()  # the signal reached the classifier
        release.set()
        assert (await execution.outcome).status == "cancelled"
        types = h.types(turn_id)
        assert "tool_permission_classified" not in types
        assert "tool_permission_resolved" not in types
        assert "tool_invocation_requested" not in types
        assert ran == []
        result = h.file_state(turn_id).tool_calls[0].result
        assert (
            result is not None
            and result.source == "runtime"
            and "cancelled" in str(result.result.output)
        )
        assert types[-1] == "turn_cancelled"
        await h.assert_file_matches_query(turn_id)


async def _admitted(h: Harness, turn_id: str, update_id: str) -> None:
    """Wait until the server holds update ``update_id`` (no worker need have seen it)."""
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
    from temporalio.api.update.v1 import UpdateRef, WaitPolicy
    from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
    from temporalio.service import RPCError

    request = PollWorkflowExecutionUpdateRequest(
        namespace=h.client.namespace,
        update_ref=UpdateRef(
            workflow_execution=WorkflowExecution(workflow_id=turn_id), update_id=update_id
        ),
        wait_policy=WaitPolicy(
            lifecycle_stage=UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
        ),
    )
    for _ in range(400):
        try:
            await h.client.workflow_service.poll_workflow_execution_update(request)
            return
        except RPCError:
            await asyncio.sleep(0.05)  # not admitted yet
    raise AssertionError(f"update {update_id} was never admitted")


@pytest.mark.parametrize("sent_as", ["update", "signal"])
async def test_a_decision_queued_behind_a_cancel_is_rejected_and_the_run_ends(
    temporal_env: WorkflowEnvironment, tmp_path: Path, sent_as: str
) -> None:
    """An approval and a cancel reach the run together (two people, one turn).

    The cancel wins (it stops what runs); the approval, valid when it arrived,
    is rejected as late (§22): its update fails, it is listed, nothing of it
    is written, and the run closes instead of waiting on the update forever.
    """
    async with Harness(
        temporal_env.client,
        tmp_path,
        [two_calls("ext", "ext2"), {"text": "never"}],
        tools=[async_tool("ext"), async_tool("ext2")],
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended" and len(outcome.pending_permissions) == 2
        handle = h.client.get_workflow_handle(turn_id)
        approval = {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"}
        await h.stop_worker()  # both inputs arrive in the next worker's first task
        approving: asyncio.Future[Any] | None = None
        if sent_as == "update":
            approving = asyncio.ensure_future(
                handle.execute_update("permission_decision", approval, id="approve-call_0_0")
            )
            await _admitted(h, turn_id, "approve-call_0_0")
        else:
            await handle.signal("permission_decision", approval)
        await handle.signal("cancel", {"type": "cancel", "reason": "stop"})
        h.start_worker()
        if approving is not None:
            with pytest.raises(WorkflowUpdateFailedError) as info:
                await asyncio.wait_for(approving, 30)
            assert "already ended (turn_cancelled)" in str(info.value.cause)
        result = await asyncio.wait_for(handle.result(), 30)  # the run closes
        assert result["status"] == "cancelled" and result["reason"] == "stop"
        types = h.types(turn_id)
        assert "tool_permission_resolved" not in types and types[-1] == "turn_cancelled"
        rejected = (await h.query_state(turn_id))["rejectedInputs"]
        assert [(r["signal"], r["toolCallId"]) for r in rejected] == [
            ("permission_decision", "call_0_0")
        ]
        assert "already ended" in rejected[0]["reason"]
        await h.assert_file_matches_query(turn_id)


async def test_a_cancel_while_this_worker_shuts_down_records_nothing(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Seen once in a full suite run: `turns run` detached by SIGTERM, and its
    worker's shutdown reached the model activity as a plain cancel request, not
    marked as the worker's. The activity recorded the call as cancelled, so the
    turn left "as it is" held a model_call_failed nobody asked for. While this
    worker shuts down, a cancel is never taken for the turn's: nothing is
    recorded, the open request is the recovery table's (and a real cancel is
    closed by the workflow's own cancellation path, §22)."""
    from temporalio.activity import ActivityCancellationDetails
    from temporalio.testing import ActivityEnvironment

    from turncore_temporal.activities.payloads import ModelCallInput

    script = [{"text": "a long answer that streams slowly word by word"}]
    h = Harness(temporal_env.client, tmp_path, script, delay=2.0)
    turn_id = await h.create("go")
    activities = h.activities(h.deps)
    env = ActivityEnvironment()
    call = asyncio.ensure_future(
        env.run(activities.call_model, ModelCallInput(turn_id=turn_id, model_call_index=0))
    )
    await wait_for_type(h, turn_id, "model_call_requested")
    env.worker_shutdown()
    env.cancel(ActivityCancellationDetails(cancel_requested=True))
    with pytest.raises(asyncio.CancelledError):
        await call
    assert h.types(turn_id) == ["turn_created", "model_call_requested"]


async def _workflow_task_after(h: Harness, turn_id: str, event: str, count: int) -> None:
    """Until a workflow task completed after the ``count``-th history event of kind ``event``."""
    handle = h.client.get_workflow_handle(turn_id)
    for _ in range(400):
        kinds = [e.WhichOneof("attributes") for e in (await handle.fetch_history()).events]
        at = [i for i, kind in enumerate(kinds) if kind == event]
        if len(at) >= count and "workflow_task_completed_event_attributes" in kinds[at[-1] :]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"no workflow task completed after {event} #{count}")


@pytest.mark.parametrize("abandoned", ["model call", "tool"])
async def test_work_a_stopping_worker_gave_up_is_recovered_only_by_a_worker_taking_work(
    temporal_env: WorkflowEnvironment, tmp_path: Path, abandoned: str
) -> None:
    """Seen in a full suite run: `turns run` detached by SIGINT, its worker's
    shutdown gave up the running model call (Temporal's ``WorkerShutdown``
    failure), and that same worker, still polling workflow tasks, ran the next
    one: the reload closed the call as interrupted, so the turn "left as it is"
    had changed. A worker that takes only workflow tasks and local activities
    stands in for the stopping one here: the recovery's load is a queued
    activity it never takes, so the file stays as it was until a worker that
    takes work continues the turn (and re-issues the call, or gives the tool
    its indeterminate result, §23).

    A model call given up by stopping workers three times in a row (three
    detached `turns run`) is no model failure: the turn still completes,
    where three fruitless attempts would fail it."""
    from temporalio.client import Client
    from temporalio.worker import Worker

    from turncore_temporal.activities import ACTIVITY_NAMES
    from turncore_temporal.worker import typed_client, workflow_runner
    from turncore_temporal.workflows import TurnWorkflow

    async def hang(value: Any, ctx: ToolContext) -> Any:
        await asyncio.wait_for(ctx.cancelled.wait(), timeout=30)
        raise asyncio.CancelledError  # stopped: nothing to record

    rounds = 3 if abandoned == "model call" else 1
    if abandoned == "model call":
        slow: list[Any] = [{"text": "a long answer that streams slowly"}] * rounds
        h = Harness(temporal_env.client, tmp_path, [*slow, {"text": "done"}], delay=3.0)
        opened = "model_call_requested"
    else:
        script = [{"toolCalls": [{"toolName": "hang", "input": {}}]}, {"text": "done"}]
        h = Harness(
            temporal_env.client,
            tmp_path,
            script,
            tools=[sync_tool("hang")],
            implementations={"hang": hang},
            permissions={"builtin:hang": "none"},
        )
        opened = "tool_invocation_requested"
    async with h:
        turn_id = await h.create("go")
        advancing = asyncio.ensure_future(h.turns.advance_turn(turn_id).outcome)
        acts = h.activities(h.deps)
        # A client of its own: one client's workers may not share a task queue.
        own = await Client.connect(h.client.service_client.config.target_host)
        first = 0
        for given_up in range(1, rounds + 1):
            await wait_for_type(h, turn_id, opened, count=given_up)
            before = h.types(turn_id)
            first = first or len(before)
            stand_in = Worker(
                typed_client(own),
                task_queue=h.task_queue,
                workflows=[TurnWorkflow],
                activities=[getattr(acts, name) for name in ACTIVITY_NAMES],
                workflow_runner=workflow_runner(),
                no_remote_activities=True,
            )
            async with stand_in:
                await h.stop_worker()  # gives up the running activity: WorkerShutdown
                await _workflow_task_after(
                    h, turn_id, "activity_task_failed_event_attributes", given_up
                )
                assert h.types(turn_id) == before
            h.start_worker()
        outcome = await asyncio.wait_for(advancing, 60)
        assert outcome.status == "completed", outcome
        after = h.types(turn_id)[first:]
        if abandoned == "model call":
            closed = [t for t in after if t == "model_call_failed"]
            assert len(closed) == rounds and after[:2] == [
                "model_call_failed",
                "model_call_requested",
            ]
        else:
            assert after[0] == "tool_result"
        await h.assert_file_matches_query(turn_id)
