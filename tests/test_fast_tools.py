"""Fast tools: sync tools that finish within a bound run as local activities.

Declaration (``@tool(fast=True)``, ``fast = true`` in ``turns.toml``, the
built-in clock and calculator) and its refusals; on the real dev server, a
batch of fast calls runs as one local activity (no activity task for the tool),
keeps the invocation-before-execution order of a plain batch, and an overrun
gets an error result without being run again. Kills at every point of a fast
batch are in ``tests/test_crash.py``.
"""

from __future__ import annotations

import asyncio
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, sync_tool
from turnclient import Agent, ToolContext, Turns, tool
from turnclient.builtins.tools import calculator_tool, clock_tool
from turnclient.runtime.config import ConfigError, load_config
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index
from turncore.reducer import TurnReducer
from turncore.tools import MAX_FAST_TIMEOUT, ToolDeclarationError, ToolRegistry

runs: list[str] = []


@tool(permission="none", fast=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    runs.append(f"add {a} {b}")
    return a + b


@tool(permission="none", fast=True, fast_timeout=0.5)
async def stall(ctx: ToolContext) -> str:
    """Takes far longer than its bound."""
    runs.append("stall")
    await asyncio.sleep(30)
    return "never"


@tool(permission="none")
async def plain(x: int) -> int:
    """A plain sync tool."""
    runs.append(f"plain {x}")
    return x


# ---------------------------------------------------------------- declaring


def test_the_decorator_and_the_built_ins_declare_fast_tools() -> None:
    assert add.fast and add.fast_timeout == 10.0
    assert stall.fast_timeout == 0.5
    assert not plain.fast
    assert clock_tool().fast and calculator_tool().fast
    registry = ToolRegistry.of([add, stall, plain])
    assert registry.fast_tools() == {"user:add": 10.0, "user:stall": 0.5}
    assert registry.fast_tools(["user:add", "user:plain"]) == {"user:add": 10.0}


def test_a_fast_async_tool_or_an_over_limit_bound_is_refused() -> None:
    def f(x: int) -> int:
        """F."""
        return x

    with pytest.raises(ToolDeclarationError, match="fast applies to sync tools only"):
        tool(f, execution="async", fast=True)
    with pytest.raises(ToolDeclarationError, match="at most 30 seconds, not 31"):
        tool(f, fast=True, fast_timeout=MAX_FAST_TIMEOUT + 1)
    with pytest.raises(ToolDeclarationError, match="more than 0"):
        tool(f, fast=True, fast_timeout=0)
    with pytest.raises(ToolDeclarationError, match="not nan"):
        tool(f, fast=True, fast_timeout=float("nan"))


def _config(home: Path, text: str) -> Any:
    home.mkdir(parents=True, exist_ok=True)
    (home / "fast_cfgtools.py").write_text(
        textwrap.dedent(
            '''
            def lookup(key: str) -> str:
                """Look a key up."""
                return key
            '''
        )
    )
    (home / "turns.toml").write_text(textwrap.dedent(text))
    return load_config(home)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "[tools.t]\nexecution = 'async'\nfast = true",
            "tools.t.fast: an async tool cannot be fast",
        ),
        (
            "[tools.t]\ncallable = 'fast_cfgtools:lookup'\nfast = true\nfast_timeout = 45",
            "tools.t.fast_timeout: must be more than 0 and at most 30 seconds, not 45",
        ),
        (
            "[tools.t]\ncallable = 'fast_cfgtools:lookup'\nfast_timeout = -1",
            "tools.t.fast_timeout: must be more than 0",
        ),
        ("[tools.clock]\nfast_timeout = 60", "tools.clock.fast_timeout: must be"),
        ("[tools.t]\ncallable = 'fast_cfgtools:lookup'\nfast = 'yes'", "tools.t.fast"),
    ],
)
def test_fast_config_mistakes_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, text)


def test_fast_in_turns_toml(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        """
        [tools.lookup]
        callable = "fast_cfgtools:lookup"
        permission = "none"
        fast = true
        fast_timeout = 2.5

        [tools.clock]
        fast = false
        """,
    )
    tools = config.tools
    assert tools["lookup"].fast and tools["lookup"].fast_timeout == 2.5
    assert not tools["clock"].fast
    assert tools["calculator"].fast


# ---------------------------------------------------------------- running


def scripted(calls: list[dict[str, Any]]) -> Any:
    def model(request: ModelCallRequest) -> dict[str, Any]:
        if call_index(request.messages) == 0:
            return {"text": "working", "toolCalls": calls}
        return {"text": "done"}

    return model


async def _history(env: WorkflowEnvironment, turn_id: str) -> tuple[list[str], int]:
    """Activity types scheduled as regular activities, and local activity markers."""
    history = await env.client.get_workflow_handle(turn_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    markers = sum(1 for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED)
    return scheduled, markers


async def _run(
    env: WorkflowEnvironment, tmp_path: Path, tools: tuple[Any, ...], calls: list[dict[str, Any]]
) -> tuple[Turns, str, list[Any]]:
    runs.clear()
    agent = Agent(name="fast", system_prompt="s", tools=tools, model="scripted/fast")
    turns = Turns(
        tmp_path,
        client=env.client,
        env={"TURNS_TASK_QUEUE": f"tq-{uuid.uuid4()}"},
        agents=[agent],
        models={"fast": scripted(calls)},
    )
    async with turns:
        result = await turns.run("go", agent="fast")
        assert result.status == "completed", result
        events = await turns.events(result.turn_id)
        queried = await env.client.get_workflow_handle(result.turn_id).query("state")
    queried.pop("rejectedInputs", None)
    assert TurnReducer.of(events).state.to_wire() == queried  # the central invariant
    return turns, result.turn_id, events


async def test_a_fast_batch_runs_as_one_local_activity(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    calls = [
        {"toolName": "add", "input": {"a": 1, "b": 2}},
        {"toolName": "add", "input": {"a": 3, "b": 4}},
    ]
    _, turn_id, events = await _run(temporal_env, tmp_path, (add,), calls)
    kinds = [e.type for e in events]
    first_result = kinds.index("tool_result")
    # Every invocation of the batch is durable before any of its tools runs (§10.5).
    assert kinds[first_result - 2 : first_result] == ["tool_invocation_requested"] * 2
    outputs = sorted(e.result.output for e in events if e.type == "tool_result")  # type: ignore[union-attr]
    assert outputs == [3, 7]
    assert sorted(runs) == ["add 1 2", "add 3 4"]
    scheduled, markers = await _history(temporal_env, turn_id)
    assert scheduled == ["call_model", "call_model"]  # no activity task for the tools
    assert markers > 0


async def test_a_batch_with_a_plain_tool_runs_every_tool_plainly(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    calls = [
        {"toolName": "add", "input": {"a": 1, "b": 2}},
        {"toolName": "plain", "input": {"x": 5}},
    ]
    _, turn_id, events = await _run(temporal_env, tmp_path, (add, plain), calls)
    assert sorted(runs) == ["add 1 2", "plain 5"]
    scheduled, _ = await _history(temporal_env, turn_id)
    assert sorted(scheduled) == ["call_model", "call_model", "run_tool", "run_tool"]


async def test_a_fast_tool_past_its_bound_gets_an_error_and_is_not_run_again(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    calls = [{"toolName": "stall", "input": {}}]
    _, _, events = await _run(temporal_env, tmp_path, (stall,), calls)
    results = [e for e in events if e.type == "tool_result"]
    assert len(results) == 1
    result = results[0].result  # type: ignore[union-attr]
    assert result.is_error
    assert result.output == (
        "Tool stall did not finish within its 0.5 s bound as a fast tool; "
        "its outcome is unknown and it was not retried."
    )
    assert runs == ["stall"]
    assert events[-1].type == "turn_completed"  # the turn went on


async def test_progress_and_a_cancel_while_a_fast_batch_runs(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A fast tool's progress is durable like a plain tool's. A cancel that arrives
    while the batch runs reaches the workflow once the batch's workflow task ends
    (a local activity holds it, within the tool's bound): the result is
    recorded, and the cancel then closes what runs next (the model call)."""
    started = asyncio.Event()

    async def slow(value: Any, ctx: ToolContext) -> Any:
        await ctx.report_progress({"step": 1})
        started.set()
        await asyncio.sleep(1.5)
        return {"done": True}

    script = [
        {"toolCalls": [{"toolName": "slow", "input": {}}]},
        {"text": "a long answer that streams slowly enough for the cancel to land"},
    ]
    async with Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=[sync_tool("slow")],
        implementations={"slow": slow},
        fast={"slow": 5.0},
        permissions={"builtin:slow": "none"},
        delay=1.0,
    ) as h:
        turn_id = await h.create("go")
        running = asyncio.ensure_future(h.turns.advance_turn(turn_id).outcome)
        await asyncio.wait_for(started.wait(), 30)
        cancelled = await h.send(turn_id, {"type": "cancel", "reason": "stop"})
        assert cancelled.status == "cancelled"
        assert (await asyncio.wait_for(running, 30)).status == "cancelled"
        kinds = h.types(turn_id)
        assert kinds[kinds.index("tool_invocation_requested") :][:3] == [
            "tool_invocation_requested",
            "tool_progress",
            "tool_result",
        ]
        assert kinds[-1] == "turn_cancelled"
        result = h.file_state(turn_id).tool_calls[0].result
        assert result is not None and result.result.output == {"done": True}
        await h.assert_file_matches_query(turn_id)
