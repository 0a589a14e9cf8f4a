"""Spec-exact edges on a real dev server (issue 16): reused tool-call ids,
refused model responses, inherited agent snapshots, classifier cancellation,
unusable tool calls and dependency validation on every advance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, sync_tool
from tests.test_workflow_scenarios import Recorder
from turncore.tools import ToolContext


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
