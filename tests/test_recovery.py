"""§23 / §26.7: recovery from a log ending at every boundary, through the real workflow.

A rich turn (a sync tool, a permission-gated sync tool and an async tool) is run
once to completion. Then every prefix of its file is put in a fresh work dir as
if the process had died right there, and `recover` (advanceTurn with no input)
must carry the turn to the end following the recovery table: an open model call
is closed as interrupted and re-issued, an unmatched sync invocation gets the
indeterminate result and is never re-executed, unmatched async invocations stay
pending, terminal turns are returned without a write.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, async_tool, sync_tool
from turncore.advance import INTERRUPTED_MODEL_CALL, INTERRUPTED_TOOL_RESULT
from turncore.errors import CorruptTurnError
from turncore.ids import turn_path
from turncore.tools import ToolContext

SCRIPT = [
    {
        "text": "working on it",
        "toolCalls": [
            {"toolName": "S", "input": {"k": "s"}},
            {"toolName": "P", "input": {"k": "p"}},
            {"toolName": "A", "input": {"k": "a"}},
        ],
    },
    {"text": "all three done"},
]
TOOLS = [sync_tool("S"), sync_tool("P"), async_tool("A")]
PERMISSIONS = {"builtin:S": "none", "external:A": "none"}  # P needs a human


def _harness(env: WorkflowEnvironment, work: Path, executed: Counter[str]) -> Harness:
    def run(value: Any, ctx: ToolContext) -> Any:
        executed[ctx.tool_call_id] += 1
        return {"ran": value}

    return Harness(
        env.client,
        work,
        SCRIPT,
        tools=TOOLS,
        implementations={"S": run, "P": run},
        permissions=PERMISSIONS,
    )


async def _finish(h: Harness, turn_id: str, outcome: Any) -> Any:
    """Answer whatever the turn waits for until it ends."""
    for _ in range(6):
        if outcome.status != "suspended":
            return outcome
        if outcome.pending_permissions:
            p = outcome.pending_permissions[0]
            outcome = await h.send(
                turn_id,
                {"type": "permission_decision", "toolCallId": p.tool_call_id, "decision": "allow"},
            )
        else:
            a = outcome.pending_async_tools[0]
            outcome = await h.send(
                turn_id,
                {
                    "type": "async_tool_result",
                    "toolCallId": a.tool_call_id,
                    "result": {"output": "A done", "isError": False},
                },
            )
    raise AssertionError("the turn did not finish")


async def _full_run(env: WorkflowEnvironment, work: Path) -> tuple[str, list[bytes]]:
    executed: Counter[str] = Counter()
    async with _harness(env, work, executed) as h:
        turn_id, outcome = await h.run("do three things")
        outcome = await _finish(h, turn_id, outcome)
        assert outcome.status == "completed"
        assert executed == Counter({"call_0_0": 1, "call_0_1": 1})
        lines = h.repo.path_for(turn_id).read_bytes().splitlines(keepends=True)
        return turn_id, lines


async def test_recovery_from_every_prefix(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    turn_id, lines = await _full_run(temporal_env, tmp_path / "original")
    boundaries_seen: set[str] = set()
    for k in range(1, len(lines) + 1):
        prefix = lines[:k]
        work = tmp_path / f"cut{k}"
        path = turn_path(work, turn_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(prefix))
        before = [orjson.loads(x) for x in prefix]
        last = before[-1]["type"]
        boundaries_seen.add(last)
        executed: Counter[str] = Counter()
        async with _harness(temporal_env, work, executed) as h:
            assert h.repo.path_for(turn_id) == path
            outcome = await h.turns.recover(turn_id)
            if last == "turn_completed":
                assert outcome.status == "completed"
                assert path.read_bytes() == b"".join(prefix)  # no writes, no side effects
                assert not executed
                continue
            outcome = await _finish(h, turn_id, outcome)
            assert outcome.status == "completed", (k, last, outcome)
            after = h.lines(turn_id)
            assert after[:k] == before  # recovery only appends
            types = [e["type"] for e in after]
            assert "turn_failed" not in types
            # Sync side effects never run twice: a call invoked before the cut is
            # never executed again; one not yet invoked runs exactly once.
            invoked_before = {
                e["toolCallId"] for e in before if e["type"] == "tool_invocation_requested"
            }
            for call in ("call_0_0", "call_0_1"):
                assert executed[call] == (0 if call in invoked_before else 1), (k, call, executed)
            for e in before:
                if e["type"] == "tool_invocation_requested" and e["execution"] == "sync":
                    results = [
                        r
                        for r in after
                        if r["type"] == "tool_result" and r["toolCallId"] == e["toolCallId"]
                    ]
                    assert len(results) == 1
                    if not any(
                        b["type"] == "tool_result" and b["toolCallId"] == e["toolCallId"]
                        for b in before
                    ):
                        assert results[0]["source"] == "runtime"
                        assert results[0]["result"]["output"] == INTERRUPTED_TOOL_RESULT
            # An open model call is closed as interrupted and re-issued with the next index.
            if last == "model_call_requested" or last == "model_step_event":
                index = before[-1]["modelCallIndex"]
                closing = after[k]
                assert closing["type"] == "model_call_failed" and closing["modelCallIndex"] == index
                assert closing["error"] == INTERRUPTED_MODEL_CALL
                reissue = after[k + 1]
                assert (
                    reissue["type"] == "model_call_requested"
                    and reissue["modelCallIndex"] == index + 1
                )
                assert reissue["request"]["messages"] == []
            await h.assert_file_matches_query(turn_id)
            desc = await temporal_env.client.get_workflow_handle(turn_id).describe()
            if desc.status == WorkflowExecutionStatus.RUNNING:
                await temporal_env.client.get_workflow_handle(turn_id).terminate("next cut")
    # The walk covered every row of the recovery table that this turn can reach.
    assert {
        "turn_created",
        "model_call_requested",
        "model_call_completed",
        "tool_permission_required",
        "tool_invocation_requested",
        "tool_result",
        "turn_suspended",
        "tool_permission_resolved",
        "turn_completed",
    } <= boundaries_seen


async def test_recovery_rejects_a_corrupt_file(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    executed: Counter[str] = Counter()
    async with _harness(temporal_env, tmp_path, executed) as h:
        turn_id = await h.create("hello")
        path = h.repo.path_for(turn_id)
        path.write_bytes(path.read_bytes() + b'{"type": "model_call_requested", "tur')
        before = path.read_bytes()
        with pytest.raises(CorruptTurnError) as info:
            await h.turns.recover(turn_id)
        assert info.value.line == 2
        assert path.read_bytes() == before


async def test_a_reissue_counts_against_max_model_calls(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """§23 / §26.7: the interrupted call 0 used the only call maxModelCalls=1 allows."""
    executed: Counter[str] = Counter()
    async with _harness(temporal_env, tmp_path, executed) as h:
        turn_id = await h.create("go", max_model_calls=1)
        path = h.repo.path_for(turn_id)
        created = path.read_bytes()
        requested = {
            "type": "model_call_requested",
            "turnId": turn_id,
            "ts": h.lines(turn_id)[0]["ts"],
            "modelCallIndex": 0,
            "request": {"messages": ["input"], "parameters": {}},
        }
        path.write_bytes(created + orjson.dumps(requested) + b"\n")
        outcome = await h.turns.recover(turn_id)
        assert outcome.status == "failed" and outcome.code == "model-call-limit"
        assert h.types(turn_id) == [
            "turn_created",
            "model_call_requested",
            "model_call_failed",
            "turn_failed",
        ]
        assert h.lines(turn_id)[2]["error"] == INTERRUPTED_MODEL_CALL
        await h.assert_file_matches_query(turn_id)


AUTO_SCRIPT = [
    {
        "toolCalls": [
            {"toolName": "S", "input": {"k": "s"}},
            {"toolName": "A", "input": {"k": "a"}},
            {"toolName": "B", "input": {"k": "b"}},
        ],
    },
    {"text": "done"},
]


async def test_recovery_walks_a_classification_and_several_async_results(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """§26.7: every prefix of an autoPermission turn whose sync tool the classifier
    allows and whose two async tools answer one at a time recovers to the end; the
    sync tool runs exactly once overall and earlier async results are kept."""
    from turncore.permissions import (
        FunctionClassifier,
        PermissionClassification,
        PermissionClassificationBatch,
    )

    async def allow(batch: PermissionClassificationBatch) -> list[PermissionClassification]:
        return [
            PermissionClassification(tool_call_id=r.tool_call_id, decision="allow", reason="ok")
            for r in batch.requests
        ]

    def harness(work: Path, executed: Counter[str]) -> Harness:
        def run(value: Any, ctx: ToolContext) -> Any:
            executed[ctx.tool_call_id] += 1
            return "ran"

        return Harness(
            temporal_env.client,
            work,
            AUTO_SCRIPT,
            tools=[sync_tool("S"), async_tool("A"), async_tool("B")],
            implementations={"S": run},
            permissions={"external:A": "none", "external:B": "none"},
            classifier=FunctionClassifier(allow),
        )

    async def answer(h: Harness, turn_id: str, outcome: Any) -> Any:
        while outcome.status == "suspended":
            a = outcome.pending_async_tools[0]
            outcome = await h.send(
                turn_id,
                {
                    "type": "async_tool_result",
                    "toolCallId": a.tool_call_id,
                    "result": {"output": f"{a.tool_name} done", "isError": False},
                },
            )
        return outcome

    executed: Counter[str] = Counter()
    async with harness(tmp_path / "original", executed) as h:
        turn_id = await h.create("go", auto_permission=True)
        outcome = await answer(h, turn_id, await h.turns.advance_turn(turn_id).outcome)
        assert outcome.status == "completed" and executed == Counter({"call_0_0": 1})
        lines = h.repo.path_for(turn_id).read_bytes().splitlines(keepends=True)
    types = [orjson.loads(x)["type"] for x in lines]
    assert {"tool_permission_classified", "turn_suspended"} <= set(types)
    assert types.count("tool_result") == 3
    for k in range(2, len(lines)):
        work = tmp_path / f"cut{k}"
        path = turn_path(work, turn_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(lines[:k]))
        before = [orjson.loads(x) for x in lines[:k]]
        ran: Counter[str] = Counter()
        async with harness(work, ran) as h:
            outcome = await asyncio.wait_for(
                answer(h, turn_id, await h.turns.recover(turn_id)), timeout=20
            )
            assert outcome.status == "completed", (k, types[k - 1])
            after = h.lines(turn_id)
            assert after[:k] == before  # recovery only appends
            invoked = any(
                e["type"] == "tool_invocation_requested" and e["toolCallId"] == "call_0_0"
                for e in before
            )
            assert ran["call_0_0"] == (0 if invoked else 1), (k, types[k - 1])
            kept = [e for e in before if e["type"] == "tool_result" and e["source"] == "async"]
            assert all(e in after for e in kept)
            assert sum(1 for e in after if e["type"] == "tool_result") == 3
            await h.assert_file_matches_query(turn_id)
            handle = temporal_env.client.get_workflow_handle(turn_id)
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await handle.terminate("next cut")
