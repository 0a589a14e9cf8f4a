"""The spec's loop scenarios (§26.2–§26.4, §26.6, §26.8, §26.9, §27.5) on a real dev server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, async_tool, sync_tool
from turncore.compose import compose_model_request
from turncore.errors import RejectedInputError
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index
from turncore.permissions import (
    FunctionClassifier,
    PermissionClassification,
    PermissionClassificationBatch,
)
from turncore.tools import ToolContext
from turncore_temporal.workflows.turn import TURN_PENDING, TURN_STATUS, pending_count


class Recorder:
    """A function model that answers from a list by call index and records every request."""

    def __init__(self, responses: list[Any]) -> None:
        self.responses = responses
        self.requests: list[ModelCallRequest] = []

    def __call__(self, request: ModelCallRequest) -> Any:
        self.requests.append(request)
        return self.responses[call_index(request.messages)]


def calls(*names: str) -> dict[str, Any]:
    return {"toolCalls": [{"toolName": n, "input": {"n": i}} for i, n in enumerate(names)]}


async def assert_composer_reproduces(h: Harness, turn_id: str, recorder: Recorder) -> None:
    """§27.5: the durable file plus the composer reproduce exactly what the model was sent."""
    state = h.file_state(turn_id)
    agent = h.contexts.resolve_agent(state.definition)
    context = h.contexts.resolve(state.definition.context)
    assert len(recorder.requests) == len(state.model_calls)
    for index, sent in enumerate(recorder.requests):
        composed = compose_model_request(agent, context, state, index)
        assert composed.system == sent.system
        assert [m.to_wire() for m in composed.messages] == [m.to_wire() for m in sent.messages]
        assert [t.name for t in composed.tools] == [t.name for t in sent.tools]


def echo(value: Any, ctx: ToolContext) -> Any:
    return {"echo": value}


async def test_mixed_sync_and_async_tools(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    recorder = Recorder([calls("A", "B", "C", "D"), {"text": "all done"}])
    tools = [sync_tool("A"), async_tool("B"), sync_tool("C"), async_tool("D")]
    perms = {t.tool_id: "none" for t in tools}
    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=tools,
        implementations={"A": echo, "C": echo},
        permissions=perms,
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        assert [p.tool_call_id for p in outcome.pending_async_tools] == ["call_0_1", "call_0_3"]
        lines = h.lines(turn_id)
        invocations = [e["toolCallId"] for e in lines if e["type"] == "tool_invocation_requested"]
        assert invocations == ["call_0_0", "call_0_1", "call_0_2", "call_0_3"]
        first_sync_result = next(i for i, e in enumerate(lines) if e["type"] == "tool_result")
        last_invocation = max(
            i for i, e in enumerate(lines) if e["type"] == "tool_invocation_requested"
        )
        assert last_invocation < first_sync_result  # all invocations before any sync tool starts
        await h.assert_file_matches_query(turn_id)
        # Async results arrive in reverse order.
        mid = await h.send(
            turn_id,
            {
                "type": "async_tool_result",
                "toolCallId": "call_0_3",
                "result": {"output": "D!", "isError": False},
            },
        )
        assert mid.status == "suspended"
        assert [p.tool_call_id for p in mid.pending_async_tools] == ["call_0_1"]
        done = await h.send(
            turn_id,
            {
                "type": "async_tool_result",
                "toolCallId": "call_0_1",
                "result": {"output": "B!", "isError": False},
            },
        )
        assert done.status == "completed"
        second = [e for e in h.lines(turn_id) if e["type"] == "model_call_requested"][1]
        assert second["request"]["messages"] == [
            "assistant:0",
            "toolResult:call_0_0",
            "toolResult:call_0_1",
            "toolResult:call_0_2",
            "toolResult:call_0_3",
        ]
        tool_message = recorder.requests[1].messages[-1]
        assert [p.tool_call_id for p in tool_message.content] == [
            "call_0_0",
            "call_0_1",
            "call_0_2",
            "call_0_3",
        ]  # type: ignore[union-attr]
        await assert_composer_reproduces(h, turn_id, recorder)
        await h.assert_file_matches_query(turn_id)


async def test_partial_human_permission_decisions(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    recorder = Recorder([calls("S1", "S2", "A1", "A2"), {"text": "finished"}])
    tools = [sync_tool("S1"), sync_tool("S2"), async_tool("A1"), async_tool("A2")]
    ran: list[str] = []

    def track(value: Any, ctx: ToolContext) -> Any:
        ran.append(ctx.tool_call_id)
        return "ok"

    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=tools,
        implementations={"S1": track, "S2": track},
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        assert [p.tool_call_id for p in outcome.pending_permissions] == [
            "call_0_0",
            "call_0_1",
            "call_0_2",
            "call_0_3",
        ]
        assert h.types(turn_id).count("tool_permission_required") == 4
        # One approval advances only its tool; an approved sync tool runs at once.
        o = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"}
        )
        assert ran == ["call_0_0"]
        assert [p.tool_call_id for p in o.pending_permissions] == [
            "call_0_1",
            "call_0_2",
            "call_0_3",
        ]
        # An approved async tool becomes pending at once, beside the remaining permissions.
        o = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_2", "decision": "allow"}
        )
        assert [p.tool_call_id for p in o.pending_async_tools] == ["call_0_2"]
        assert [p.tool_call_id for p in o.pending_permissions] == ["call_0_1", "call_0_3"]
        snapshot = [e for e in h.lines(turn_id) if e["type"] == "turn_suspended"][-1]
        assert [p["toolCallId"] for p in snapshot["pendingPermissions"]] == ["call_0_1", "call_0_3"]
        assert [p["toolCallId"] for p in snapshot["pendingAsyncTools"]] == ["call_0_2"]
        # Async results may arrive while permissions remain unresolved.
        o = await h.send(
            turn_id,
            {
                "type": "async_tool_result",
                "toolCallId": "call_0_2",
                "result": {"output": 1, "isError": False},
            },
        )
        assert o.status == "suspended"
        # A denied call receives a runtime error result and never runs.
        o = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_1", "decision": "deny"}
        )
        assert ran == ["call_0_0"]
        denied = h.file_state(turn_id).tool_call("call_0_1")
        assert denied is not None and denied.result is not None
        assert denied.result.source == "runtime" and denied.result.result.is_error
        assert (
            h.types(turn_id).count("model_call_requested") == 1
        )  # not until every call has a result
        o = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_3", "decision": "deny"}
        )
        assert o.status == "completed"
        assert h.types(turn_id).count("model_call_requested") == 2
        await assert_composer_reproduces(h, turn_id, recorder)
        await h.assert_file_matches_query(turn_id)


async def test_automatic_permission_classification(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    recorder = Recorder([calls("allowme", "denyme", "deferme", "failme"), {"text": "ok"}])
    tools = [sync_tool("allowme"), sync_tool("denyme"), sync_tool("deferme"), sync_tool("failme")]
    ran: list[str] = []
    batches: list[PermissionClassificationBatch] = []

    def track(value: Any, ctx: ToolContext) -> Any:
        ran.append(ctx.tool_call_id)
        return "ran"

    async def classify(batch: PermissionClassificationBatch) -> list[PermissionClassification]:
        batches.append(batch)
        decisions = {"allowme": "allow", "denyme": "deny", "deferme": "defer"}
        return [
            PermissionClassification(
                tool_call_id=r.tool_call_id,
                decision=decisions[r.tool_name],
                reason=f"policy {r.tool_name}",
            )  # type: ignore[arg-type]
            for r in batch.requests
            if r.tool_name in decisions  # "failme" is omitted: treated as defer
        ]

    impls = {n: track for n in ("allowme", "denyme", "deferme", "failme")}
    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=tools,
        implementations=impls,
        classifier=FunctionClassifier(classify),
    ) as h:
        turn_id, outcome = await h.run("go", auto_permission=True, human_available=True)
        assert (
            len(batches) == 1 and len(batches[0].requests) == 4
        )  # one classifier batch per response
        assert ran == ["call_0_0"]
        assert outcome.status == "suspended"
        assert [p.tool_call_id for p in outcome.pending_permissions] == ["call_0_2", "call_0_3"]
        lines = h.lines(turn_id)
        classified = {
            e["toolCallId"]: e["decision"]
            for e in lines
            if e["type"] == "tool_permission_classified"
        }
        assert classified == {"call_0_0": "allow", "call_0_1": "deny", "call_0_2": "defer"}
        failed = [e for e in lines if e["type"] == "tool_permission_classification_failed"]
        assert failed and failed[0]["toolCallIds"] == ["call_0_3"]
        resolved = {
            e["toolCallId"]: (e["decision"], e["source"])
            for e in lines
            if e["type"] == "tool_permission_resolved"
        }
        assert resolved == {"call_0_0": ("allow", "classifier"), "call_0_1": ("deny", "classifier")}
        # Who decided, as every surface records it: the classifier, at the decision's time.
        for e in lines:
            if e["type"] == "tool_permission_resolved":
                assert e["metadata"] == {"via": "classifier", "at": e["ts"]}
        await h.assert_file_matches_query(turn_id)


async def test_classification_without_human_denies_deferred(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    recorder = Recorder([calls("deferme", "boom"), {"text": "ok"}])
    tools = [sync_tool("deferme"), sync_tool("boom")]

    async def classify(batch: PermissionClassificationBatch) -> list[PermissionClassification]:
        raise RuntimeError("classifier offline")

    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=tools,
        implementations={"deferme": echo, "boom": echo},
        classifier=FunctionClassifier(classify),
    ) as h:
        turn_id, outcome = await h.run("go", auto_permission=True, human_available=False)
        assert outcome.status == "completed"
        lines = h.lines(turn_id)
        failed = [e for e in lines if e["type"] == "tool_permission_classification_failed"]
        assert failed[0]["toolCallIds"] == ["call_0_0", "call_0_1"]
        assert "classifier offline" in failed[0]["error"]
        resolved = [
            (e["decision"], e["source"]) for e in lines if e["type"] == "tool_permission_resolved"
        ]
        assert resolved == [("deny", "human_unavailable"), ("deny", "human_unavailable")]
        assert "tool_invocation_requested" not in h.types(turn_id)
        await h.assert_file_matches_query(turn_id)


async def test_manual_mode_never_calls_classifier(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    recorder = Recorder([calls("t"), {"text": "ok"}])
    called: list[int] = []

    async def classify(batch: PermissionClassificationBatch) -> list[PermissionClassification]:
        called.append(1)
        return []

    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=[sync_tool("t")],
        implementations={"t": echo},
        classifier=FunctionClassifier(classify),
    ) as h:
        turn_id, outcome = await h.run("go", auto_permission=False, human_available=False)
        assert outcome.status == "completed"
        assert called == []
        resolved = [e for e in h.lines(turn_id) if e["type"] == "tool_permission_resolved"]
        assert [(e["decision"], e["source"]) for e in resolved] == [("deny", "human_unavailable")]


async def test_permission_checker_failure_fails_closed(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    recorder = Recorder([calls("t"), {"text": "ok"}])
    ran: list[str] = []

    class Broken:
        async def check(self, input: Any) -> Any:
            raise OSError("policy store unreachable")

    def track(value: Any, ctx: ToolContext) -> Any:
        ran.append(ctx.tool_call_id)
        return 1

    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=[sync_tool("t")],
        implementations={"t": track},
        checker=Broken(),
    ) as h:
        turn_id, outcome = await h.run("go", auto_permission=True, human_available=True)
        assert outcome.status == "suspended"  # asks a human, never executes automatically
        required = [e for e in h.lines(turn_id) if e["type"] == "tool_permission_required"][0]
        assert "policy store unreachable" in required["checkerError"]
        assert "tool_permission_classified" not in h.types(turn_id)
        assert ran == []
        done = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"}
        )
        assert done.status == "completed" and ran == ["call_0_0"]


async def test_failures(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    # A provider failure appends model_call_failed then turn_failed.
    async with Harness(temporal_env.client, tmp_path / "a", [{"error": "upstream exploded"}]) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "failed" and "upstream exploded" in outcome.error
        assert h.types(turn_id)[-2:] == ["model_call_failed", "turn_failed"]
        await h.assert_file_matches_query(turn_id)

    # A sync throw and an async failure become error results; the turn goes on.
    def boom(value: Any, ctx: ToolContext) -> Any:
        raise ValueError("disk on fire")

    recorder = Recorder([calls("boom", "ext", "nosuch"), {"text": "recovered"}])
    tools = [sync_tool("boom"), async_tool("ext")]
    perms = {t.tool_id: "none" for t in tools}
    async with Harness(
        temporal_env.client,
        tmp_path / "b",
        recorder,
        tools=tools,
        implementations={"boom": boom},
        permissions=perms,
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        state = h.file_state(turn_id)
        boomed = state.tool_call("call_0_0")
        assert boomed is not None and boomed.result is not None
        assert boomed.result.result.is_error and "disk on fire" in str(boomed.result.result.output)
        unknown = state.tool_call("call_0_2")
        assert (
            unknown is not None
            and unknown.result is not None
            and unknown.result.source == "runtime"
        )
        assert "Unknown tool" in str(unknown.result.result.output)
        done = await h.send(
            turn_id,
            {
                "type": "async_tool_result",
                "toolCallId": "call_0_1",
                "result": {"output": "no", "isError": True},
            },
        )
        assert done.status == "completed"
        await h.assert_file_matches_query(turn_id)


async def test_model_call_limit(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    ran: list[str] = []

    def track(value: Any, ctx: ToolContext) -> Any:
        ran.append(ctx.tool_call_id)
        return 1

    # Tool calls from the last allowed call are fully processed, then the turn fails.
    loop_forever = Recorder([calls("t")] * 11)
    async with Harness(
        temporal_env.client,
        tmp_path / "a",
        loop_forever,
        tools=[sync_tool("t")],
        implementations={"t": track},
        permissions={"builtin:t": "none"},
    ) as h:
        turn_id, outcome = await h.run("go", max_model_calls=10)
        assert outcome.status == "failed" and outcome.code == "model-call-limit"
        assert len(loop_forever.requests) == 10 and len(ran) == 10
        assert h.types(turn_id).count("model_call_requested") == 10
        assert h.lines(turn_id)[-1]["code"] == "model-call-limit"
        await h.assert_file_matches_query(turn_id)
    # A tool-free response on call 10 completes normally.
    finishes = Recorder([calls("t")] * 9 + [{"text": "made it"}])
    async with Harness(
        temporal_env.client,
        tmp_path / "b",
        finishes,
        tools=[sync_tool("t")],
        implementations={"t": track},
        permissions={"builtin:t": "none"},
    ) as h:
        turn_id, outcome = await h.run("go", max_model_calls=10)
        assert outcome.status == "completed"
        assert len(finishes.requests) == 10


async def test_requires_human_without_human(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    recorder = Recorder([calls("ask_human"), {"text": "ok"}])
    tools = [async_tool("ask_human", requires_human=True)]
    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=tools,
        permissions={"external:ask_human": "none"},
    ) as h:
        turn_id, outcome = await h.run("go", human_available=False)
        assert outcome.status == "completed"
        lines = h.lines(turn_id)
        assert [e["type"] for e in lines].count("tool_invocation_requested") == 1
        result = [e for e in lines if e["type"] == "tool_result"][0]
        assert (
            result["source"] == "runtime"
            and result["result"]["output"] == "Human input is unavailable for this turn."
        )


async def test_update_validators_reject_without_trace(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    recorder = Recorder([calls("s", "a"), {"text": "ok"}])
    tools = [sync_tool("s"), async_tool("a")]
    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=tools,
        implementations={"s": echo},
        permissions={"builtin:s": "none", "external:a": "none"},
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        before = h.repo.path_for(turn_id).read_bytes()
        handle = h.client.get_workflow_handle(turn_id)
        bad = [
            (
                {
                    "type": "async_tool_result",
                    "toolCallId": "nope",
                    "result": {"output": 1, "isError": False},
                },
                "no tool call",
            ),
            (
                {
                    "type": "async_tool_result",
                    "toolCallId": "call_0_0",
                    "result": {"output": 1, "isError": False},
                },
                "already has a result",
            ),
            (
                {"type": "permission_decision", "toolCallId": "call_0_1", "decision": "allow"},
                "does not require permission",
            ),
            ({"type": "async_tool_result", "toolCallId": "call_0_1"}, "invalid input"),
            (
                {
                    "type": "async_tool_result",
                    "toolCallId": "call_0_1",
                    "result": {"output": 1, "isError": "yes"},
                },
                "invalid input",
            ),
        ]
        for raw, reason in bad:
            with pytest.raises(Exception) as info:
                await handle.execute_update(raw["type"], raw)
            assert reason in str(info.value.__cause__ or info.value)
            with pytest.raises(RejectedInputError):
                if reason != "invalid input":
                    await h.send(turn_id, raw)
                else:
                    raise RejectedInputError("schema")
        assert h.repo.path_for(turn_id).read_bytes() == before
        # An invalid signal is dropped, logged and listed; nothing is appended.
        await handle.signal(
            "async_tool_result",
            {
                "type": "async_tool_result",
                "toolCallId": "ghost",
                "result": {"output": 1, "isError": False},
            },
        )
        for _ in range(50):
            state = await h.query_state(turn_id)
            if state["rejectedInputs"]:
                break
            await asyncio.sleep(0.05)
        assert "ghost" in state["rejectedInputs"][0]["reason"]
        assert h.repo.path_for(turn_id).read_bytes() == before
        # Progress, then a result, then progress after the result is rejected.
        await h.send(
            turn_id,
            {"type": "async_tool_progress", "toolCallId": "call_0_1", "progress": {"pct": 50}},
        )
        done = await h.send(
            turn_id,
            {
                "type": "async_tool_result",
                "toolCallId": "call_0_1",
                "result": {"output": 2, "isError": False},
            },
        )
        assert done.status == "completed"
        with pytest.raises(RejectedInputError):
            await h.send(
                turn_id, {"type": "async_tool_progress", "toolCallId": "call_0_1", "progress": 1}
            )
        await h.assert_file_matches_query(turn_id)


async def test_reconstruction_and_read_only_get(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    recorder = Recorder(
        [{"reasoning": "think", "text": "use tool", **calls("s")}, {"text": "final answer"}]
    )
    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=[sync_tool("s")],
        implementations={"s": echo},
        permissions={"builtin:s": "none"},
    ) as h:
        turn_id, outcome = await h.run("go")
        before = h.repo.path_for(turn_id).read_bytes()
        turn = await h.turns.get_turn(turn_id)
        assert h.repo.path_for(turn_id).read_bytes() == before
        state = h.file_state(turn_id)
        assert state.terminal is not None and state.terminal.type == "turn_completed"
        assert state.model_calls[0].response is not None
        assert "text_delta" not in {e.type for e in turn.events}
        assert state.usage.total_tokens == sum(
            m.usage.total_tokens or 0 for m in state.model_calls if m.usage
        )
        # Appending live events one by one and reducing equals full replay.
        from turncore.reducer import TurnReducer, reduce_turn

        incremental = TurnReducer()
        for e in turn.events:
            incremental.apply(e)
        assert incremental.state == reduce_turn(turn.events)
        await h.assert_file_matches_query(turn_id)


async def test_turn_status_follows_the_turn_in_temporal_web(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    from temporalio.api.enums.v1 import EventType

    recorder = Recorder([calls("t"), {"text": "ok"}])
    async with Harness(
        temporal_env.client, tmp_path, recorder, tools=[sync_tool("t")], implementations={"t": echo}
    ) as h:
        turn_id, outcome = await h.run("go")
        handle = h.client.get_workflow_handle(turn_id)
        desc = await handle.describe()
        assert desc.typed_search_attributes.get(TURN_STATUS) == "suspended"
        assert desc.typed_search_attributes.get(TURN_PENDING) == "permission:call_0_0"
        await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"}
        )
        history = await handle.fetch_history()
        statuses = [
            e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields[
                "TurnStatus"
            ].data
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
            and "TurnStatus"
            in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
        ]
        assert [s.decode().strip('"') for s in statuses] == ["suspended", "running", "completed"]


async def test_many_pending_inputs_fit_temporal_webs_search_attribute(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Sixty approvals at once (provider-length call ids) are more than one keyword
    search attribute holds (2 KiB): the list is cut short with a count of the
    rest, instead of Temporal failing the task and terminating the run."""
    ids = [f"toolu_01ABCDEFGHJKLMNOPQRSTU{i:04d}" for i in range(60)]
    script = [{"toolCalls": [{"toolName": "a", "input": {}, "toolCallId": i} for i in ids]}]
    async with Harness(
        temporal_env.client, tmp_path, [*script, {"text": "done"}], tools=[async_tool("a")]
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended" and len(outcome.pending_permissions) == 60
        handle = h.client.get_workflow_handle(turn_id)
        pending = (await handle.describe()).typed_search_attributes.get(TURN_PENDING)
        assert pending is not None and len(pending.encode()) <= 2048
        assert pending.startswith(f"permission:{ids[0]},") and pending.endswith(" more")
        assert pending_count(pending, "permission") == 60  # what the approvals gauge counts
        await h.assert_file_matches_query(turn_id)
        for i in ids[:-1]:
            await handle.signal(
                "permission_decision",
                {"type": "permission_decision", "toolCallId": i, "decision": "deny"},
            )
        last = {"type": "permission_decision", "toolCallId": ids[-1], "decision": "deny"}
        assert (await h.send(turn_id, last)).status == "completed"
        await h.assert_file_matches_query(turn_id)
