"""turncore as a library: ``Turns`` with Python agents and typed tools, on the real dev server."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.builders import nested
from turnclient import (
    Agent,
    ConfigError,
    InvalidInputError,
    RejectedInputError,
    ToolContext,
    TurnNotFoundError,
    Turns,
    tool,
)
from turncore.errors import InfrastructureError
from turncore.events import InheritedAgentSnapshot, ResolvedAgent, ToolPermissionResolved
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index

seen: list[int] = []


@tool(permission="none")
async def multiply(a: int, b: int, ctx: ToolContext) -> dict[str, int]:
    """Multiply two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    seen.append(a)
    await ctx.report_progress({"multiplying": [a, b]})
    return {"product": a * b}


@tool  # permission "ask" by default
def delete_file(path: str) -> str:
    """Delete a file (needs approval)."""
    return f"deleted {path}"


def scripted(calls: list[dict[str, Any]]) -> Any:
    """A scripted model: the given tool calls first, then the last result as text."""

    def model(request: ModelCallRequest) -> dict[str, Any]:
        if call_index(request.messages) == 0:
            return {"text": "working", "toolCalls": calls}
        last = request.messages[-1]
        return {"text": f"result: {last.content[-1].output.value}"}  # type: ignore[union-attr]

    return model


async def _eventually_listed(turns: Turns) -> list[dict[str, Any]]:
    """Pending approvals, waiting (with a deadline) for visibility to list the suspension."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        approvals = await turns.pending_approvals()
        if approvals or asyncio.get_running_loop().time() > deadline:
            return approvals
        await asyncio.sleep(0.1)


def runtime(env: WorkflowEnvironment, tmp_path: Path, **kwargs: Any) -> Turns:
    return Turns(
        tmp_path,
        client=env.client,
        env={"TURNS_TASK_QUEUE": f"tq-{uuid.uuid4()}"},
        **kwargs,
    )


async def test_a_python_agent_with_a_typed_tool(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    seen.clear()
    math = Agent(
        name="math",
        system_prompt="You multiply.",
        tools=(multiply,),
        model="scripted/math",
    )
    model = scripted(
        [
            {"toolName": "multiply", "input": {"a": "six", "b": 7}},
            {"toolName": "multiply", "input": {"a": 6, "b": 7}},
        ]
    )
    async with runtime(temporal_env, tmp_path, agents=[math], models={"math": model}) as turns:
        result = await turns.run("What is 6 times 7?", agent="math")
        assert result.status == "completed"
        assert result.text == "result: {'product': 42}"
        assert seen == [6]  # the invalid call never reached the function
        events = await turns.events(result.turn_id)
        # The two calls run concurrently: their results may land in either order.
        results = sorted(
            (e for e in events if e.type == "tool_result"), key=lambda e: e.tool_call_id
        )  # type: ignore[union-attr]
        outputs = [e.result.output for e in results]  # type: ignore[union-attr]
        assert outputs[0].startswith("Invalid arguments for tool multiply (1 problem): a: ")
        assert outputs[1] == {"product": 42}
        assert any(e.type == "tool_progress" for e in events)
        created = events[0]
        assert created.type == "turn_created"
        snapshot = created.agent.resolved
        assert isinstance(snapshot, ResolvedAgent)
        assert (
            snapshot.tools[0].input_schema["properties"]["a"]["description"] == "the first factor"
        )
        state = await turns.state(result.turn_id)
        assert state.terminal is not None

        # A conversation: the next turn continues this one by reference.
        second = await turns.run("and again?", continue_from=result.turn_id)
        assert second.status == "completed"
        events2 = await turns.events(second.turn_id)
        created2 = events2[0]
        assert created2.type == "turn_created"
        assert created2.context.previous_turn_id == result.turn_id  # type: ignore[union-attr]
        assert created2.session_id == result.turn_id  # named after its first turn
        assert isinstance(created2.agent.resolved, InheritedAgentSnapshot)  # §6.7
        assert created2.agent.resolved.inherited_from == result.turn_id
        # The central invariant holds for an inherited snapshot too: the workflow
        # decides from the materialized agent but reports the file's own state.
        queried = await temporal_env.client.get_workflow_handle(second.turn_id).query("state")
        queried.pop("rejectedInputs", None)
        assert (await turns.state(second.turn_id)).to_wire() == queried
        second_results = sorted(
            (e for e in events2 if e.type == "tool_result"),
            key=lambda e: e.tool_call_id,  # type: ignore[union-attr]
        )
        second_outputs = [e.result.output for e in second_results]  # type: ignore[union-attr]
        assert second_outputs[1] == {"product": 42}

        listed = await turns.list(session=result.turn_id)
        assert [r.turn_id for r in listed] == [result.turn_id, second.turn_id]
        third = await turns.run("once more", session=result.turn_id)
        assert (await turns.events(third.turn_id))[0].context.previous_turn_id == second.turn_id  # type: ignore[union-attr]


async def test_an_approval_suspends_and_typed_errors(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    ops = Agent(name="ops", system_prompt="Ops.", tools=(delete_file,), model="scripted/ops")
    model = scripted([{"toolName": "delete_file", "input": {"path": "a.txt"}}])
    async with runtime(temporal_env, tmp_path, agents=[ops], models={"ops": model}) as turns:
        turn_id = await turns.start("clean up", agent="ops")
        outcome = await turns.advance(turn_id)
        assert outcome.status == "suspended"
        [pending] = outcome.pending_permissions  # type: ignore[union-attr]
        approvals = await _eventually_listed(turns)
        assert {"turnId": turn_id, "toolCallId": pending.tool_call_id}.items() <= approvals[
            0
        ].items()

        with pytest.raises(
            RejectedInputError, match=f"turn {turn_id} has not ended, .* turns approve"
        ):
            await turns.start("next", continue_from=turn_id)
        with pytest.raises(RejectedInputError):
            await turns.approve(turn_id, "call_nope")
        with pytest.raises(RejectedInputError, match="unknown agent 'nobody'"):
            await turns.start("hi", agent="nobody")
        with pytest.raises(TurnNotFoundError):
            await turns.state("2025-01-01T00-00-00Z-0000001-000")

        done = await turns.approve(turn_id, pending.tool_call_id, by="ops-bot")
        assert done.status == "completed"
        assert done.output.text() == "result: deleted a.txt"  # type: ignore[union-attr]
        watched = [e async for e in turns.watch(turn_id)]
        assert watched[0].type == "turn_created" and watched[-1].type == "turn_completed"
        (decision,) = [e for e in watched if isinstance(e, ToolPermissionResolved)]
        assert isinstance(decision.metadata, dict)
        assert decision.metadata["via"] == "api" and decision.metadata["by"] == "ops-bot"


async def test_a_permission_policy_from_python(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    ops = Agent(name="ops", system_prompt="Ops.", tools=(delete_file,), model="scripted/ops")
    model = scripted([{"toolName": "delete_file", "input": {"path": "a.txt"}}])
    async with runtime(
        temporal_env, tmp_path, agents=[ops], models={"ops": model}, allow=["delete_file"]
    ) as turns:
        asked = await turns.run("clean up", agent="ops")
        assert asked.status == "suspended"  # without auto_permission a human decides
        allowed = await turns.run("clean up", agent="ops", auto_permission=True)
        assert allowed.text == "result: deleted a.txt"
        events = await turns.events(allowed.turn_id)
        [resolved] = [e for e in events if e.type == "tool_permission_resolved"]
        assert resolved.source == "classifier"  # type: ignore[union-attr]


def test_python_agents_are_checked_like_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="agents.x.tools: unknown tool 'nope'"):
        Turns(tmp_path, agents=[Agent(name="x", system_prompt="s", tools=("nope",))], env={})
    with pytest.raises(ConfigError, match="permissions.deny: unknown tool 'nope'"):
        Turns(tmp_path, deny=["nope"], env={})
    with pytest.raises(ConfigError, match="agents.x.model: provider 'acme' is not configured"):
        Turns(tmp_path, agents=[Agent(name="x", system_prompt="s", model="acme/gpt")], env={})
    effort: Any = "max"  # what an untyped caller passes
    with pytest.raises(
        ConfigError, match='agents.x.reasoning_effort must be "low", "medium" or "high"'
    ):
        Turns(
            tmp_path, agents=[Agent(name="x", system_prompt="s", reasoning_effort=effort)], env={}
        )
    with pytest.raises(ConfigError, match="agents.x: two agents are named 'x'"):
        Turns(
            tmp_path,
            agents=[Agent(name="x", system_prompt="one"), Agent(name="x", system_prompt="two")],
            env={},
        )


async def test_an_empty_session_or_a_session_beside_continue_from_is_refused(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """An empty session id is no filter at all: it must not continue whichever turn is
    newest in the namespace (another user's conversation), and a session given next to
    ``continue_from`` must not be silently dropped for the predecessor's."""
    a = Agent(name="a", system_prompt="s", model="scripted/a")
    async with runtime(temporal_env, tmp_path, agents=[a], models={"a": lambda r: "hi"}) as turns:
        theirs = await turns.run("someone else's conversation", agent="a", session="s-theirs")
        assert theirs.status == "completed"
        files = sorted(tmp_path.glob("storage/turns/**/*.jsonl"))
        with pytest.raises(InvalidInputError, match="session id is empty"):
            await turns.start("mine", agent="a", session="")
        with pytest.raises(InvalidInputError, match="continue_from or session, not both"):
            await turns.start("mine", session="s-mine", continue_from=theirs.turn_id)
        assert sorted(tmp_path.glob("storage/turns/**/*.jsonl")) == files  # nothing created


def test_two_different_tools_under_one_name_are_refused(tmp_path: Path) -> None:
    """A tool is found by name, so a second tool under a taken name would silently run
    instead of the first (another function, another permission) for every agent."""
    (tmp_path / "lib_clash_tools.py").write_text(
        "def wc(text: str) -> int:\n    '''Count words.'''\n    return len(text.split())\n"
    )
    (tmp_path / "turns.toml").write_text('[tools.wc]\ncallable = "lib_clash_tools:wc"\n')

    @tool(permission="none")
    def wc(text: str) -> int:
        """Count words."""
        return -1

    def other(text: str) -> int:
        """Count words."""
        return -2

    with pytest.raises(ConfigError, match="tools.wc: two different tools are named 'wc'"):
        Turns(tmp_path, tools=[wc], env={})
    (tmp_path / "turns.toml").unlink()
    with pytest.raises(ConfigError, match="tools.wc: two different tools are named 'wc'"):
        Turns(tmp_path, tools=[wc, tool(other, name="wc", permission="none")], env={})
    careful = Agent(name="careful", system_prompt="s", tools=(delete_file,))
    careless = Agent(
        name="careless", system_prompt="s", tools=(delete_file.with_(permission="none"),)
    )
    with pytest.raises(ConfigError, match="two different tools are named 'delete_file'"):
        Turns(tmp_path, agents=[careful, careless], env={})
    # The same tool listed twice is one tool.
    both = Turns(tmp_path, tools=[delete_file], agents=[careful], env={})
    assert both.runtime.config.tools["delete_file"] is delete_file


async def test_a_turns_object_is_open_once_at_a_time(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Entering an open Turns again would start a second worker and, on the inner exit,
    close the outer block's connection and leak its worker."""
    a = Agent(name="a", system_prompt="s", model="scripted/a")
    turns = runtime(temporal_env, tmp_path, agents=[a], models={"a": lambda r: "hi"})
    async with turns:
        with pytest.raises(RuntimeError, match="already open"):
            async with turns:
                pass
        assert (await turns.run("still open", agent="a")).status == "completed"
    async with turns:  # once closed, it opens again
        assert (await turns.run("again", agent="a")).status == "completed"


@tool(execution="async", permission="none")
def lookup(query: str) -> None:
    """Answered later, by an outside system."""


async def test_bad_arguments_are_invalid_input_errors_and_change_nothing(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """An app maps turncore's errors to responses; a raw pydantic ValidationError (or a
    silent empty list) for a caller's mistake is neither typed nor explained."""
    agent = Agent(name="ask", system_prompt="s", tools=(lookup,), model="scripted/ask")
    model = scripted([{"toolName": "lookup", "input": {"query": "q"}}])
    async with runtime(temporal_env, tmp_path, agents=[agent], models={"ask": model}) as turns:
        outcome = await turns.run("look it up", agent="ask")
        assert outcome.status == "suspended"
        [call] = outcome.outcome.pending_async_tools  # type: ignore[union-attr]
        files = {p: p.read_bytes() for p in tmp_path.glob("storage/turns/**/*.jsonl")}
        tid, cid = outcome.turn_id, call.tool_call_id
        with pytest.raises(InvalidInputError, match="complete: output is a set"):
            await turns.complete(tid, cid, {1, 2})
        with pytest.raises(InvalidInputError, match="complete: output is nan"):
            await turns.complete(tid, cid, float("nan"))
        with pytest.raises(InvalidInputError, match="progress: progress is a bytes"):
            await turns.progress(tid, cid, b"\xff")
        with pytest.raises(InvalidInputError, match="approve: tool_call_id: String should have"):
            await turns.approve(tid, "")
        with pytest.raises(InvalidInputError, match="max_model_calls: Input should be greater"):
            await turns.start("hi", agent="ask", max_model_calls=0)
        with pytest.raises(InvalidInputError, match="the prompt is empty"):
            await turns.start("  ", agent="ask")
        with pytest.raises(InvalidInputError, match="a model reference is PROVIDER/MODEL"):
            await turns.start("hi", agent="ask", model="nope")
        with pytest.raises(InvalidInputError, match="unknown model provider 'nosuch'"):
            await turns.start("hi", agent="ask", model="nosuch/x")
        status: Any = "pending"  # a typo an untyped caller makes
        with pytest.raises(InvalidInputError, match="unknown status 'pending'"):
            await turns.list(status=status)
        with pytest.raises(InvalidInputError, match="limit"):
            await turns.list(limit=0)
        assert {p: p.read_bytes() for p in tmp_path.glob("storage/turns/**/*.jsonl")} == files
        done = await turns.complete(tid, cid, {"answer": 42})
        assert done.status == "completed"


async def test_cancelling_a_waiting_call_cancels_it(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A caller that gives up (``asyncio.wait_for``, a web request whose client went away)
    cancels its advance; the SDK reports the cancelled update as a retryable RPC timeout,
    which must not swallow the cancellation. The turn goes on regardless."""
    answer = asyncio.Event()

    async def slow(request: ModelCallRequest) -> str:
        await answer.wait()
        return "finally"

    a = Agent(name="a", system_prompt="s", model="scripted/slow")
    async with runtime(temporal_env, tmp_path, agents=[a], models={"slow": slow}) as turns:
        turn_id = await turns.start("take your time", agent="a")
        waiting = asyncio.ensure_future(turns.advance(turn_id))
        async for event in turns.watch(turn_id):
            if event.type == "model_call_requested":
                break
        waiting.cancel()
        done, _ = await asyncio.wait({waiting}, timeout=10)
        assert waiting in done and waiting.cancelled()
        answer.set()
        assert (await turns.advance(turn_id)).status == "completed"


async def test_closing_turns_ends_the_calls_still_waiting_on_it(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A call still waiting when its Turns block ends (an app shutting down) is told at
    once that nothing serves it any more, instead of retrying for minutes; the turn is
    left as it is, and recovers later."""
    answer = asyncio.Event()

    async def slow(request: ModelCallRequest) -> str:
        await answer.wait()
        return "finally"

    a = Agent(name="a", system_prompt="s", model="scripted/slow")
    turns = runtime(temporal_env, tmp_path, agents=[a], models={"slow": slow})
    async with turns:
        turn_id = await turns.start("take your time", agent="a")
        waiting = asyncio.ensure_future(turns.advance(turn_id))
        async for event in turns.watch(turn_id):
            if event.type == "model_call_requested":
                break
    with pytest.raises(InfrastructureError, match=f"closed while turn {turn_id} was advancing"):
        await asyncio.wait_for(waiting, 30)
    answer.set()
    async with turns:
        assert (await turns.recover(turn_id)).status == "completed"


@tool(permission="none")
def tree(depth: int) -> list[Any]:
    """A value nested ``depth`` levels deep (an AST dump, a deep JSON document)."""
    return nested(depth)


async def test_a_tool_value_nested_past_the_limit_is_an_error_result_not_a_wedged_turn(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    from turncore.jsonvalue import MAX_JSON_DEPTH

    # Past ~200 levels Temporal's payload decoding fails the workflow task on every
    # retry: the turn hung. A value over the limit is refused where it is made.
    agent = Agent(name="deep", system_prompt="s", tools=(tree,), model="scripted/deep")
    calls = [
        {"toolName": "tree", "input": {"depth": MAX_JSON_DEPTH}},
        {"toolName": "tree", "input": {"depth": 230}},
    ]
    async with runtime(
        temporal_env, tmp_path, agents=[agent], models={"deep": scripted(calls)}
    ) as turns:
        result = await asyncio.wait_for(turns.run("go", agent="deep"), 60)
        assert result.status == "completed"
        results = {
            e.tool_call_id: e.result
            for e in await turns.events(result.turn_id)
            if e.type == "tool_result"
        }
        fits, deep = results["call_0_0"], results["call_0_1"]
        assert not fits.is_error
        assert deep.is_error
        assert f"is nested deeper than {MAX_JSON_DEPTH} levels" in str(deep.output)


async def test_pending_says_when_it_read_only_the_newest_suspended_turns(
    temporal_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import turnclient.lib.listing

    agent = Agent(name="d", system_prompt="s", tools=(delete_file,), model="scripted/del")
    calls = [{"toolName": "delete_file", "input": {"path": "a"}}]
    async with runtime(
        temporal_env, tmp_path, agents=[agent], models={"del": scripted(calls)}
    ) as turns:
        older = await turns.start("one", agent="d")
        assert (await turns.advance(older)).status == "suspended"
        newer = await turns.start("two", agent="d")
        assert (await turns.advance(newer)).status == "suspended"
        deadline = asyncio.get_running_loop().time() + 30
        while len((view := await turns.pending())["turns"]) < 2:
            assert asyncio.get_running_loop().time() < deadline, view
            await asyncio.sleep(0.1)
        assert view["partial"] is False
        approvals = await turns.pending_approvals()
        assert [(a["turnId"], a["toolName"], a["input"]) for a in approvals] == [
            (newer, "delete_file", {"path": "a"}),
            (older, "delete_file", {"path": "a"}),
        ]
        # More suspended turns than the view reads: it says so instead of silently
        # leaving the older ones out.
        monkeypatch.setattr(turnclient.lib.listing, "PENDING_LIMIT", 1)
        view = await turns.pending()
        assert [t["turnId"] for t in view["turns"]] == [newer] and view["partial"] is True
