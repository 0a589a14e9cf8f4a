"""Spec-exact edges on a real dev server (issue 16): reused tool-call ids,
refused model responses, inherited agent snapshots, classifier cancellation,
unusable tool calls and dependency validation on every advance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, sync_tool
from tests.test_workflow_scenarios import Recorder
from turncore.model import ModelCallRequest
from turncore.tools import ToolContext


class Sequential(Recorder):
    """Answers the n-th request with the n-th response, across turns."""

    def __call__(self, request: ModelCallRequest) -> Any:
        self.requests.append(request)
        return self.responses[len(self.requests) - 1]


def _reused(name: str, n: int) -> dict[str, Any]:
    return {"toolCalls": [{"toolName": name, "input": {"n": n}, "toolCallId": "call_0"}]}


async def test_tool_call_ids_reused_across_responses_run_to_completion(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """OpenAI-compatible servers number calls per response: ``call_0`` every time.

    The second ``call_0`` needs approval; the decision naming ``call_0``
    resolves to the call that is still open, and the turn completes with each
    model call issued exactly once.
    """
    recorder = Recorder([_reused("read", 1), _reused("write", 2), {"text": "done"}])
    ran: list[tuple[str, Any]] = []

    def track(value: Any, ctx: ToolContext) -> Any:
        ran.append((ctx.tool_call_id, value))
        return {"ok": value}

    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=[sync_tool("read"), sync_tool("write")],
        implementations={"read": track, "write": track},
        permissions={"builtin:read": "none"},
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        assert [p.tool_call_id for p in outcome.pending_permissions] == ["call_0"]
        assert [p.tool_name for p in outcome.pending_permissions] == ["write"]
        outcome = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0", "decision": "allow"}
        )
        assert outcome.status == "completed"
        assert ran == [("call_0", {"n": 1}), ("call_0", {"n": 2})]
        assert len(recorder.requests) == 3  # no paid call was re-issued
        types = h.types(turn_id)
        assert types.count("model_call_requested") == 3
        assert "model_call_failed" not in types
        # The third request carried the second call's result, not the first's.
        sent = recorder.requests[2].messages[-1].to_wire()
        assert sent["content"][0]["output"]["value"] == {"ok": {"n": 2}}
        await h.assert_file_matches_query(turn_id)


async def test_a_response_the_reducer_refuses_fails_the_turn_without_reissuing(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    twice = {
        "toolCalls": [
            {"toolName": "read", "input": {}, "toolCallId": "dup"},
            {"toolName": "read", "input": {}, "toolCallId": "dup"},
        ]
    }
    recorder = Recorder([twice, {"text": "never"}])
    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=[sync_tool("read")],
        implementations={"read": lambda v, c: "ok"},
        permissions={"builtin:read": "none"},
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "failed"
        assert "appears twice" in outcome.error
        assert outcome.code == "model-call-failed:protocol:accepted"
        assert len(recorder.requests) == 1
        types = h.types(turn_id)
        assert types.count("model_call_requested") == 1
        assert types[-2:] == ["model_call_failed", "turn_failed"]
        failed = h.lines(turn_id)[-2]
        assert "refused" in failed["error"] and "appears twice" in failed["error"]
        await h.assert_file_matches_query(turn_id)


# ---------------------------------------------------------------- §6.7 inheritance


async def _continue(h: Harness, previous: str, session: str | None = "s-1") -> str:
    from turnclient.lib.api import CreateTurnInput
    from turncore.events import ContextRef, RequestedAgent
    from turncore.messages import UserMessage

    return await h.turns.create_turn(
        CreateTurnInput(
            agent=RequestedAgent(agent_id="test"),
            input=UserMessage(content="and now?"),
            human_available=True,
            context=ContextRef(previous_turn_id=previous),
            session_id=session,
        )
    )


async def test_a_continued_turn_inherits_its_snapshot_calls_a_tool_and_suspends(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """§6.7: same prompt and tools as the predecessor → the inherited form; its
    tools and permissions resolve through the chain; approval then completion."""
    recorder = Sequential(
        [
            {"text": "first turn done"},
            {"toolCalls": [{"toolName": "write", "input": {"p": 1}}]},
            {"text": "written"},
        ]
    )
    ran: list[Any] = []

    def write(value: Any, ctx: ToolContext) -> Any:
        ran.append(value)
        return "ok"

    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=[sync_tool("write")],
        implementations={"write": write},
    ) as h:
        first, outcome = await h.run("hello")
        assert outcome.status == "completed"
        second = await _continue(h, first)
        resolved = h.lines(second)[0]["agent"]["resolved"]
        assert resolved == {
            "agentId": "test",
            "model": {"provider": "scripted", "model": "test"},
            "inheritedFrom": first,
        }
        outcome = await h.turns.advance_turn(second).outcome
        assert outcome.status == "suspended"
        assert [p.tool_name for p in outcome.pending_permissions] == ["write"]
        assert ran == []
        call = outcome.pending_permissions[0].tool_call_id
        outcome = await h.send(
            second, {"type": "permission_decision", "toolCallId": call, "decision": "allow"}
        )
        assert outcome.status == "completed"
        assert ran == [{"p": 1}]
        invoked = next(e for e in h.lines(second) if e["type"] == "tool_invocation_requested")
        assert (invoked["toolId"], invoked["execution"]) == ("builtin:write", "sync")
        # The model saw the chain's tools on the continued turn.
        assert [t.name for t in recorder.requests[1].tools] == ["write"]
        await h.assert_file_matches_query(second)


async def test_create_turn_writes_the_full_snapshot_unless_inheritance_applies(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    recorder = Recorder([{"text": "done"}])
    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=[sync_tool("write")],
        implementations={"write": lambda v, c: "ok"},
    ) as h:
        first, _ = await h.run("hello")
        # Not a session turn: the full snapshot.
        alone = await _continue(h, first, session=None)
        assert "tools" in h.lines(alone)[0]["agent"]["resolved"]
        # The agent's tools changed since the predecessor: the full snapshot.
        h.resolver.catalog["read"] = sync_tool("read")
        h.resolver.agents["test"].tools.append("read")
        changed = await _continue(h, first)
        assert [t["name"] for t in h.lines(changed)[0]["agent"]["resolved"]["tools"]] == [
            "write",
            "read",
        ]
        # An unreadable predecessor: the full snapshot.
        path = h.repo.path_for(first)
        path.write_bytes(path.read_bytes() + b"{broken\n")
        h.resolver.agents["test"].tools.remove("read")
        broken = await _continue(h, first)
        assert "tools" in h.lines(broken)[0]["agent"]["resolved"]


# ---------------------------------------------------------------- §15.3 on every advance


async def test_an_advance_without_input_on_a_suspended_turn_validates_dependencies(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """§15.3 / §18 step 8: every advance validates the live environment, also one
    that only asks for the current outcome of a live, suspended workflow."""
    import pytest

    from tests.harness import MODEL
    from turncore.errors import DependencyError

    recorder = Recorder([{"toolCalls": [{"toolName": "write", "input": {}}]}, {"text": "ok"}])
    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=[sync_tool("write")],
        implementations={"write": lambda v, c: "ok"},
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        del h.models.models[MODEL.label()]
        before = h.repo.path_for(turn_id).read_bytes()
        with pytest.raises(DependencyError, match="no model is configured"):
            await h.turns.advance_turn(turn_id).outcome
        assert h.repo.path_for(turn_id).read_bytes() == before
        # Fixed environment: the same live workflow answers again, unchanged.
        h.models.models[MODEL.label()] = h.model
        again = await h.turns.advance_turn(turn_id).outcome
        assert again.status == "suspended"
        assert h.repo.path_for(turn_id).read_bytes() == before
        await h.assert_file_matches_query(turn_id)


# ---------------------------------------------------------------- §26.4


async def test_explicit_defer_without_a_human_and_deny_get_errors_without_invocations(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The classifier defers one call and denies another in a turn with no human:
    both are denied with a runtime error result; neither is ever invoked or run."""
    from turncore.permissions import (
        FunctionClassifier,
        PermissionClassification,
        PermissionClassificationBatch,
    )

    async def classify(batch: PermissionClassificationBatch) -> list[PermissionClassification]:
        verdict = {"deferme": "defer", "denyme": "deny"}
        return [
            PermissionClassification(
                tool_call_id=r.tool_call_id,
                decision=verdict[r.tool_name],  # type: ignore[arg-type]
                reason=f"policy for {r.tool_name}",
            )
            for r in batch.requests
        ]

    ran: list[str] = []
    recorder = Recorder(
        [
            {
                "toolCalls": [
                    {"toolName": "deferme", "input": {}},
                    {"toolName": "denyme", "input": {}},
                ]
            },
            {"text": "understood"},
        ]
    )
    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=[sync_tool("deferme"), sync_tool("denyme")],
        implementations={n: lambda v, c, n=n: ran.append(n) for n in ("deferme", "denyme")},
        classifier=FunctionClassifier(classify),
    ) as h:
        turn_id, outcome = await h.run("go", auto_permission=True, human_available=False)
        assert outcome.status == "completed"
        assert ran == []
        lines = h.lines(turn_id)
        assert "tool_invocation_requested" not in h.types(turn_id)
        classified = [
            (e["toolCallId"], e["decision"])
            for e in lines
            if e["type"] == "tool_permission_classified"
        ]
        assert classified == [("call_0_0", "defer"), ("call_0_1", "deny")]
        resolved = [
            (e["toolCallId"], e["decision"], e["source"])
            for e in lines
            if e["type"] == "tool_permission_resolved"
        ]
        assert sorted(resolved) == [
            ("call_0_0", "deny", "human_unavailable"),
            ("call_0_1", "deny", "classifier"),
        ]
        results = {e["toolCallId"]: e for e in lines if e["type"] == "tool_result"}
        for call_id in ("call_0_0", "call_0_1"):
            assert results[call_id]["source"] == "runtime"
            assert results[call_id]["result"]["isError"] is True
        assert "policy for denyme" in results["call_0_1"]["result"]["output"]
        # The model saw both errors, in call order.
        sent = recorder.requests[1].messages[-1].to_wire()["content"]
        assert [p["toolCallId"] for p in sent] == ["call_0_0", "call_0_1"]
        assert all(p["output"]["type"] == "error-json" for p in sent)
        await h.assert_file_matches_query(turn_id)


# ---------------------------------------------------------------- §26.8


async def test_reconstruction_with_permissions_progress_and_suspension(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Full replay reconstructs permissions, progress, suspension and the end; the
    live event stream folded as it arrives equals full replay at every step; no
    deltas are durable; reading is read-only and infers no running state."""
    from turncore.events import PermissionDecisionInput
    from turncore.reducer import TurnReducer, reduce_turn

    async def slow(value: Any, ctx: ToolContext) -> Any:
        await ctx.report_progress({"step": 1})
        await ctx.report_progress({"step": 2})
        return "written"

    recorder = Recorder(
        [
            {"text": "let me write", "toolCalls": [{"toolName": "write", "input": {}}]},
            {"text": "done"},
        ]
    )
    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=[sync_tool("write")],
        implementations={"write": slow},
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        suspended = h.file_state(turn_id)
        assert suspended.suspension is not None and suspended.terminal is None
        assert [p.tool_call_id for p in suspended.pending_permissions()] == ["call_0_0"]
        # Suspended: nothing appends until the decision, so this is the stream's start.
        live = TurnReducer.of((await h.turns.get_turn(turn_id)).events)
        execution = h.turns.advance_turn(
            turn_id,
            PermissionDecisionInput(tool_call_id="call_0_0", decision="allow"),
        )
        seen: list[str] = []
        async for event in execution.events:
            if event.type in ("text_delta", "reasoning_delta"):
                continue
            live.apply(event)  # type: ignore[arg-type]
            seen.append(event.type)
        assert (await execution.outcome).status == "completed"
        before = h.repo.path_for(turn_id).read_bytes()
        turn = await h.turns.get_turn(turn_id)
        assert h.repo.path_for(turn_id).read_bytes() == before  # getTurn is read-only
        full = reduce_turn(turn.events)
        assert live.state == full
        assert {"tool_permission_resolved", "tool_progress", "turn_completed"} <= set(seen)
        call = full.tool_calls[0]
        assert call.permission is not None and call.permission.resolved is not None
        assert [p.progress for p in call.progress] == [{"step": 1}, {"step": 2}]
        assert full.suspension is None and full.terminal is not None
        assert full.model_calls[-1].response is not None  # the final message after reload
        assert not {"text_delta", "reasoning_delta"} & {e.type for e in turn.events}
        assert "running" not in full.to_wire() and "status" not in full.to_wire()
        await h.assert_file_matches_query(turn_id)


async def test_a_session_or_model_too_long_for_temporal_web_is_refused_at_creation(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The session, agent and model are search attributes from the turn's start;
    one longer than Temporal takes would leave a turn that can never start, so
    it is refused where the turn is created, with nothing written."""
    import pytest

    from turnclient.lib.api import CreateTurnInput
    from turncore.errors import InvalidInputError
    from turncore.events import AgentOverrides, ModelDescriptor, RequestedAgent
    from turncore.messages import UserMessage

    long_model = RequestedAgent(
        agent_id="test",
        overrides=AgentOverrides(model=ModelDescriptor(provider="scripted", model="m" * 2100)),
    )
    async with Harness(temporal_env.client, tmp_path, [{"text": "ok"}]) as h:
        for agent, session, what in (
            (RequestedAgent(agent_id="test"), "s" * 2100, "session id"),
            (long_model, None, "model"),
        ):
            request = CreateTurnInput(
                agent=agent,
                input=UserMessage(content="x"),
                human_available=True,
                session_id=session,
            )
            with pytest.raises(InvalidInputError, match=f"cannot be created: its {what} is"):
                await h.turns.create_turn(request)
        assert not list(tmp_path.rglob("*.jsonl"))
        # At the limit it runs.
        request = CreateTurnInput(
            agent=RequestedAgent(agent_id="test"),
            input=UserMessage(content="x"),
            human_available=True,
            session_id="s" * 2000,
        )
        turn_id = await h.turns.create_turn(request)
        assert (await h.turns.advance_turn(turn_id).outcome).status == "completed"


async def test_an_id_another_process_minted_first_is_minted_again_never_shared(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Two generators that mint in the same tick with the same instance number give
    the same id; the second create must not fail the caller's request (nor, for a
    child, link a turn it did not write): it mints again."""
    from turnclient.lib.api import CreateTurnInput, TurnClient
    from turncore.events import RequestedAgent
    from turncore.ids import TurnIdGenerator
    from turncore.messages import UserMessage

    def same_tick() -> int:
        return 1_762_835_789_000_000_000

    async with Harness(temporal_env.client, tmp_path, [{"text": "ok"}]) as h:
        request = CreateTurnInput(
            agent=RequestedAgent(agent_id="test"),
            input=UserMessage(content="x"),
            human_available=True,
        )
        first, second = (
            TurnClient(
                h.client,
                h.repo,
                h.resolver,
                task_queue=h.task_queue,
                ids=TurnIdGenerator(same_tick, instance=7),
            )
            for _ in range(2)
        )
        one = await first.create_turn(request)
        before = h.repo.path_for(one).read_bytes()
        two = await second.create_turn(request)
        assert two != one and two > one
        assert h.repo.path_for(one).read_bytes() == before
        assert (await h.turns.advance_turn(two).outcome).status == "completed"
