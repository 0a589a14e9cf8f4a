"""Sub-agents (§29.2, DESIGN §5): `spawn_agent` runs each call as a child turn —
its own file, its own workflow — in parallel; cancelling the parent cancels
the children."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import psycopg
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, sync_tool
from tests.test_large_values import _payloads
from turncore.advance import INTERRUPTED_TOOL_RESULT
from turncore.elision import elide_event
from turncore.ids import TurnIdGenerator
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index
from turncore.reducer import TurnReducer
from turncore.storage.postgres import PostgresTurnRepository, migrate
from turncore.subagents import spawn_agent_descriptor
from turncore.tools import ToolContext


def script(request: ModelCallRequest) -> Any:
    """The parent fans out to two children; each child answers from its prompt."""
    prompt = [m for m in request.messages if m.role == "user"][-1].content
    assert isinstance(prompt, str)
    if prompt.startswith("child:"):
        if "needs approval" in prompt and call_index(request.messages) == 0:
            return {"toolCalls": [{"toolName": "deploy", "input": {}}]}
        return {"text": f"done with {prompt.removeprefix('child:').strip()}"}
    if call_index(request.messages) == 0:
        tasks = (
            ["child: needs approval", "child: sleeps"]
            if "slow" in prompt
            else ["child: A", "child: B"]
        )
        return {
            "toolCalls": [
                {"toolName": "spawn_agent", "input": {"agent": "test", "prompt": t}} for t in tasks
            ]
        }
    return {"text": "both children reported"}


def deploy(value: Any, ctx: ToolContext) -> Any:
    return "deployed"


def harness(env: WorkflowEnvironment, work: Path) -> Harness:
    return Harness(
        env.client,
        work,
        script,
        tools=[spawn_agent_descriptor(), sync_tool("deploy")],
        implementations={"deploy": deploy},
        permissions={"workflow:spawn_agent": "none"},
    )


async def test_fan_out_to_two_children(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    async with harness(temporal_env, tmp_path) as h:
        turn_id, outcome = await h.run("fan out")
        assert outcome.status == "completed"
        parent = h.file_state(turn_id)
        links = [p.progress for t in parent.tool_calls for p in t.progress]
        assert [link["kind"] for link in links] == ["subagent", "subagent"]
        children = [link["childTurnId"] for link in links]
        assert len(set(children)) == 2 and turn_id not in children
        for call, child_id in zip(parent.tool_calls, children, strict=True):
            child = TurnReducer.of(h.repo.read(child_id)).state  # its own valid file
            assert child.terminal is not None and child.terminal.type == "turn_completed"
            assert [t.name for t in child.definition.agent.resolved.tools] == ["deploy"]  # type: ignore[union-attr]
            assert call.result is not None and call.result.source == "sync"
            assert call.result.result.output["childTurnId"] == child_id
            assert call.result.result.output["status"] == "completed"
        texts = sorted(t.result.result.output["text"] for t in parent.tool_calls if t.result)
        assert texts == ["done with A", "done with B"]
        await h.assert_file_matches_query(turn_id)


async def test_cancelling_the_parent_cancels_its_children(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with harness(temporal_env, tmp_path) as h:
        turn_id = await h.create("slow fan out")
        execution = h.turns.advance_turn(turn_id)
        children: list[str] = []
        for _ in range(200):
            state = h.file_state(turn_id)
            children = [p.progress["childTurnId"] for t in state.tool_calls for p in t.progress]
            if len(children) == 2 and all(h.repo.exists(c) for c in children):
                waiting = TurnReducer.of(h.repo.read(children[0])).state
                if waiting.suspension is not None:
                    break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the children never started")
        cancelled = await h.send(turn_id, {"type": "cancel", "reason": "stop everything"})
        assert cancelled.status == "cancelled"
        assert (await execution.outcome).status == "cancelled"
        first = TurnReducer.of(h.repo.read(children[0])).state
        assert first.terminal is not None and first.terminal.type == "turn_cancelled"
        await h.assert_file_matches_query(turn_id)


LONG_ANSWER = "".join(f"finding {i}: all is well. " for i in range(2000))  # ~50 KB, > the budget
release_long = asyncio.Event()


def long_script(request: ModelCallRequest) -> Any:
    """The child holds in a tool, then answers at length; the parent repeats what it got."""
    prompt = [m for m in request.messages if m.role == "user"][-1].content
    assert isinstance(prompt, str)
    if prompt == "child: report":
        if call_index(request.messages) == 0:
            return {"toolCalls": [{"toolName": "hold", "input": {}}]}
        return {"text": LONG_ANSWER}
    if call_index(request.messages) == 0:
        return {
            "toolCalls": [
                {"toolName": "spawn_agent", "input": {"agent": "test", "prompt": "child: report"}}
            ]
        }
    output = request.messages[-1].content[-1].output.value  # type: ignore[union-attr]
    return {"text": "whole" if output["text"] == LONG_ANSWER else f"got: {output['text'][:80]}"}


async def hold(value: Any, ctx: ToolContext) -> Any:
    await asyncio.wait_for(release_long.wait(), 120)
    return "held"


@pytest.mark.parametrize("reattached", [False, True])
async def test_a_long_child_answer_reaches_the_parent_whole(
    temporal_env: WorkflowEnvironment, tmp_path: Path, reattached: bool
) -> None:
    """A child's answer past the value budget is recorded in the parent's file as the
    child's file has it (not as the workflow's elided copy), and stays out of history."""
    release_long.clear()
    async with Harness(
        temporal_env.client,
        tmp_path,
        long_script,
        tools=[spawn_agent_descriptor(), sync_tool("hold")],
        implementations={"hold": hold},
        permissions={"workflow:spawn_agent": "none", "builtin:hold": "none"},
    ) as h:
        turn_id = await h.create("delegate")
        first = asyncio.ensure_future(h.turns.advance_turn(turn_id).outcome)
        child_id = await _linked_child_holding(h, turn_id)
        if reattached:
            # The parent's workflow is lost while its child runs; recovery re-attaches.
            await temporal_env.client.get_workflow_handle(turn_id).terminate("lost for the test")
            with contextlib.suppress(Exception):
                await first
            release_long.set()
            outcome = await asyncio.wait_for(h.turns.recover(turn_id), 120)
        else:
            release_long.set()
            outcome = await asyncio.wait_for(first, 120)
        assert outcome.status == "completed"
        assert outcome.output.text() == "whole"  # type: ignore[union-attr]
        [call] = h.file_state(turn_id).tool_calls
        assert call.result is not None
        assert call.result.result.output == {
            "childTurnId": child_id,
            "status": "completed",
            "text": LONG_ANSWER,
        }
        # The state query holds the elided copy; the file holds the value.
        queried = await h.query_state(turn_id)
        queried.pop("rejectedInputs", None)
        elided = TurnReducer.of([elide_event(e) for e in h.repo.read(turn_id)]).state
        assert elided.to_wire() == queried
        # Neither the parent's history nor the child's carries the answer.
        for workflow_id in (turn_id, child_id):
            history = await temporal_env.client.get_workflow_handle(workflow_id).fetch_history()
            payloads = [p.data for e in history.events for p in _payloads(e)]
            assert payloads and not any(LONG_ANSWER[:1000].encode() in data for data in payloads)


async def _linked_child_holding(h: Harness, turn_id: str) -> str:
    """The child turn of the parent's one call, once the child runs its tool."""
    deadline = asyncio.get_running_loop().time() + 60
    while asyncio.get_running_loop().time() < deadline:
        links = [p.progress for t in h.file_state(turn_id).tool_calls for p in t.progress]
        if links and h.repo.exists(links[0]["childTurnId"]):
            child = TurnReducer.of(h.repo.read(links[0]["childTurnId"])).state
            if any(t.invocation is not None for t in child.tool_calls):
                return str(links[0]["childTurnId"])
        await asyncio.sleep(0.05)
    raise AssertionError("the child never ran its tool")


def child_script(request: ModelCallRequest) -> Any:
    prompt = [m for m in request.messages if m.role == "user"][-1].content
    if prompt == "child: count":
        return {"text": "counted"}
    if call_index(request.messages) == 0:
        return {
            "toolCalls": [
                {"toolName": "spawn_agent", "input": {"agent": "test", "prompt": "child: count"}}
            ]
        }
    return {"text": f"child said {request.messages[-1].content[-1].output.value}"}  # type: ignore[union-attr]


FAULT = """CREATE FUNCTION fail_statement() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM faults WHERE NEW.line LIKE '%%' || needle || '%%') THEN
        PERFORM nextval('failures');
        IF (SELECT once FROM faults LIMIT 1) THEN DELETE FROM faults; END IF;
        RAISE EXCEPTION 'the database failed this statement';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql"""


@pytest.mark.parametrize(
    ("needle", "once"),
    [
        ('"kind":"subagent"', True),  # the link, once
        ('"content":"child: count"', False),  # the child's first line, until lifted
    ],
    ids=["link-fails-once", "child-fails-until-lifted"],
)
async def test_a_failed_spawn_leaves_no_turn_unlinked(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    postgres_url: str,
    needle: str,
    once: bool,
) -> None:
    """The database fails the spawn's writes: every child turn created is the one
    the parent links, and it runs to its end."""
    migrate(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE SEQUENCE failures")
        conn.execute("CREATE TABLE faults (needle text, once boolean)")
        conn.execute("INSERT INTO faults VALUES (%s, %s)", (needle, once))
        conn.execute(FAULT)
        conn.execute(
            "CREATE TRIGGER fault BEFORE INSERT ON turn_events "
            "FOR EACH ROW EXECUTE FUNCTION fail_statement()"
        )
    repo = PostgresTurnRepository.connect(postgres_url)
    try:
        async with Harness(
            temporal_env.client,
            tmp_path,
            child_script,
            tools=[spawn_agent_descriptor()],
            permissions={"workflow:spawn_agent": "none"},
            repository=repo,
        ) as h:
            turn_id = await h.create("delegate")
            running = asyncio.ensure_future(h.turns.advance_turn(turn_id).outcome)
            with psycopg.connect(postgres_url, autocommit=True) as conn:

                def failures() -> int:
                    row = conn.execute("SELECT last_value, is_called FROM failures").fetchone()
                    assert row is not None
                    return int(row[0]) if row[1] else 0

                deadline = asyncio.get_running_loop().time() + 60
                # Until lifted, the child's first line fails again and again: on
                # the first attempt, and again on each recovery of the call.
                while failures() < (1 if once else 3):
                    assert asyncio.get_running_loop().time() < deadline, "no write failed"
                    await asyncio.sleep(0.05)
                conn.execute("DELETE FROM faults")
            outcome = await asyncio.wait_for(running, 120)
            assert outcome.status == "completed"
            [call] = h.file_state(turn_id).tool_calls
            assert call.result is not None
            if once:
                # The link never landed, so no child was created: the call is
                # closed like any sync call whose activity failed (§23).
                assert call.progress == [] and repo.turn_ids() == [turn_id]
                assert call.result.result.output == INTERRUPTED_TOOL_RESULT
            else:
                # The link landed first; recovering the call created its child.
                [link] = call.progress
                child_id = link.progress["childTurnId"]  # type: ignore[index]
                assert sorted(repo.turn_ids()) == sorted([turn_id, child_id])
                child = h.file_state(child_id)
                assert child.terminal is not None and child.terminal.type == "turn_completed"
                assert call.result.result.output == {
                    "childTurnId": child_id,
                    "status": "completed",
                    "text": "counted",
                }
                await h.assert_file_matches_query(child_id)
            await h.assert_file_matches_query(turn_id)
    finally:
        repo.close()


class _Colliding:
    """Mints ``taken`` first (another process's turn), then fresh ids."""

    def __init__(self, taken: str) -> None:
        self.taken: str | None = taken
        self.fresh = TurnIdGenerator()

    def next_id(self) -> str:
        taken, self.taken = self.taken, None
        return taken or self.fresh.next_id()


async def test_a_child_id_that_is_already_taken_is_minted_again(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The spawn must link a child it wrote, never a turn that already had the id."""
    h = Harness(
        temporal_env.client,
        tmp_path,
        child_script,
        tools=[spawn_agent_descriptor()],
        permissions={"workflow:spawn_agent": "none"},
    )
    other = await h.create("someone else's turn")
    before = h.repo.path_for(other).read_bytes()
    h.deps = dataclasses.replace(h.deps, ids=_Colliding(other))  # type: ignore[arg-type]
    async with h:
        turn_id = await h.create("delegate")
        outcome = await asyncio.wait_for(h.turns.advance_turn(turn_id).outcome, 120)
        assert outcome.status == "completed"
        [call] = h.file_state(turn_id).tool_calls
        [link] = call.progress
        child_id = link.progress["childTurnId"]  # type: ignore[index]
        assert child_id != other
        assert h.repo.path_for(other).read_bytes() == before
        assert call.result is not None and call.result.result.output == {
            "childTurnId": child_id,
            "status": "completed",
            "text": "counted",
        }
