"""Model failures end to end on a real dev server, with the HTTP adapters talking
to a real server on 127.0.0.1: routing's retries, machine-readable failure
evidence, usage of broken attempts, cancellation evidence, and opaque state
when the binding changes between calls (seed 003; spec §21.1, §22)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.builders import USAGE, TurnBuilder
from tests.harness import Harness, sync_tool
from tests.model.conftest import API_KEY, Chunk, FakeProvider, Hold, Reply, sse
from tests.model.wire import WIRES, Wire, _a, _a_end, _block_delta, _completed, _ev
from turnclient.lib.api import CreateTurnInput
from turncore.events import (
    AgentOverrides,
    ContextRef,
    FailedOutcome,
    ModelDescriptor,
    RequestedAgent,
    StepError,
    StepFinish,
    TurnUsage,
)
from turncore.messages import UserMessage
from turncore.model import (
    Dispatch,
    FailureKind,
    ModelRegistry,
    ProviderConfig,
    parse_failure_code,
)
from turncore.reducer import reduce_turn
from turncore.tools import ToolContext

JSON = {"content-type": "application/json"}
ENV = {"ACME_API_KEY": API_KEY}


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    server = FakeProvider()
    await server.start()
    yield server
    await server.stop()


def registry(wire: Wire, provider: FakeProvider, **settings: Any) -> ModelRegistry:
    """``scripted/…`` (the harness agent's model) served by an HTTP adapter."""
    table = {
        "kind": wire.protocol,
        "base_url": provider.base_url,
        "api_key_env": "ACME_API_KEY",
        "retry_backoff": 0.01,
        **settings,
    }
    return ModelRegistry({"scripted": ProviderConfig.from_table("scripted", table)}, env=ENV)


def echo(value: Any, ctx: ToolContext) -> Any:
    return {"echo": value}


def refusal(wire: Wire, status: int, **headers: str) -> Reply:
    return Reply(status=status, headers={**JSON, **headers}, body=wire.error_body(status))


def no_secret(h: Harness, turn_id: str) -> None:
    raw = h.repo.path_for(turn_id).read_text()
    assert API_KEY not in raw and "Bearer" not in raw and "CANARY" not in raw


CHAT = WIRES["openai-chat"]


# ---------------------------------------------------------------- retries


async def test_a_503_after_an_approval_wait_is_retried(
    temporal_env: WorkflowEnvironment, tmp_path: Path, provider: FakeProvider
) -> None:
    wire = CHAT
    h = Harness(
        temporal_env.client,
        tmp_path,
        [],
        tools=[sync_tool("get_weather"), sync_tool("get_time")],
        implementations={"get_weather": echo, "get_time": echo},
    )
    h.deps.models = registry(wire, provider)
    provider.queue(Reply(chunks=list(wire.tools())))
    async with h:
        turn_id, outcome = await h.run("weather?")
        assert outcome.status == "suspended"
        provider.queue(refusal(wire, 503), Reply(chunks=list(wire.text())))
        for call_id in ("call_a", "call_b"):
            outcome = await h.send(
                turn_id,
                {"type": "permission_decision", "toolCallId": call_id, "decision": "allow"},
            )
        assert outcome.status == "completed", outcome
        types = h.types(turn_id)
        assert "model_call_failed" not in types and types.count("model_call_requested") == 2
        assert len(provider.received) == 3  # call 0, the refused call 1, its retry
        await h.assert_file_matches_query(turn_id)
        no_secret(h, turn_id)


async def test_heartbeats_continue_through_a_long_retry_after(
    temporal_env: WorkflowEnvironment, tmp_path: Path, provider: FakeProvider
) -> None:
    wire = CHAT
    h = Harness(
        temporal_env.client, tmp_path, [], workflow_options={"heartbeat_timeout_seconds": 1.0}
    )
    h.deps.models = registry(wire, provider)
    # the wait (2.5 s) is longer than the activity's heartbeat timeout (1 s)
    provider.queue(refusal(wire, 429, **{"retry-after": "2.5"}), Reply(chunks=list(wire.text())))
    async with h:
        turn_id, outcome = await h.run("hi")
        assert outcome.status == "completed", outcome
        assert len(provider.received) == 2
        assert h.types(turn_id).count("model_call_requested") == 1


async def test_only_the_final_failure_is_recorded(
    temporal_env: WorkflowEnvironment, tmp_path: Path, provider: FakeProvider
) -> None:
    wire = CHAT
    h = Harness(temporal_env.client, tmp_path, [])
    h.deps.models = registry(wire, provider)
    provider.queue(*(refusal(wire, 503) for _ in range(3)))
    async with h:
        turn_id, outcome = await h.run("hi")
        assert isinstance(outcome, FailedOutcome)
        assert outcome.code == "model-call-failed:rate-limit:rejected"
        assert parse_failure_code(outcome.code) == (FailureKind.RATE_LIMIT, Dispatch.REJECTED)
        types = h.types(turn_id)
        assert types.count("model_call_failed") == 1 and types[-1] == "turn_failed"
        assert len(provider.received) == 3
        failed = next(e for e in h.lines(turn_id) if e["type"] == "model_call_failed")
        error = failed["error"]
        assert "3 attempts" in error
        assert f"provider scripted, model test, base_url {provider.base_url}" in error
        assert "refused it before doing any work" in error
        terminal = h.lines(turn_id)[-1]
        assert terminal["code"] == outcome.code and terminal["error"] == error
        await h.assert_file_matches_query(turn_id)
        no_secret(h, turn_id)


async def test_a_refused_connection_says_nothing_was_sent(
    temporal_env: WorkflowEnvironment, tmp_path: Path, provider: FakeProvider
) -> None:
    wire = CHAT
    await provider.stop()  # nobody listens on the configured base_url any more
    h = Harness(temporal_env.client, tmp_path, [])
    h.deps.models = registry(wire, provider, max_retries=1)
    async with h:
        turn_id, outcome = await h.run("hi")
        assert isinstance(outcome, FailedOutcome)
        assert outcome.code == "model-call-failed:transport:not-sent"
        assert "nothing was sent" in outcome.error and "2 attempts" in outcome.error
        assert provider.base_url in outcome.error and "is running" in outcome.error
        assert outcome.usage == TurnUsage()
        no_secret(h, turn_id)


async def test_an_authentication_failure_names_the_key_variable(
    temporal_env: WorkflowEnvironment, tmp_path: Path, provider: FakeProvider
) -> None:
    wire = CHAT
    h = Harness(temporal_env.client, tmp_path, [])
    h.deps.models = registry(wire, provider)
    provider.queue(refusal(wire, 401))
    async with h:
        turn_id, outcome = await h.run("hi")
        assert isinstance(outcome, FailedOutcome)
        assert outcome.code == "model-call-failed:authentication:rejected"
        assert "ACME_API_KEY" in outcome.error
        assert len(provider.received) == 1
        no_secret(h, turn_id)


# ---------------------------------------------------------------- usage of broken attempts


def _chat_usage() -> bytes:
    return sse(
        {
            "id": "chatcmpl-1",
            "model": "gpt-4.1",
            "choices": [],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        }
    )


async def test_an_accepted_then_broken_attempt_counts_its_usage(
    temporal_env: WorkflowEnvironment, tmp_path: Path, provider: FakeProvider
) -> None:
    wire = CHAT
    h = Harness(temporal_env.client, tmp_path, [])
    h.deps.models = registry(wire, provider)
    provider.queue(
        Reply(chunks=[*wire.text_head(), _chat_usage()], reset_after_chunks=True),
        Reply(chunks=list(wire.text())),  # must stay unused: accepted is never retried
    )
    async with h:
        turn_id, outcome = await h.run("hi")
        assert isinstance(outcome, FailedOutcome)
        assert outcome.code == "model-call-failed:transport:accepted"
        spent = TurnUsage(input_tokens=12, output_tokens=3, total_tokens=15)
        assert outcome.usage == spent
        assert len(provider.received) == 1
        steps = [e["event"] for e in h.lines(turn_id) if e["type"] == "model_step_event"]
        assert {"type": "finish-step", "finishReason": "error", "usage": spent.to_wire()} in steps
        assert steps[-1]["type"] == "error"
        state = h.file_state(turn_id)
        assert state.usage == spent and state.model_calls[0].usage == spent
        await h.assert_file_matches_query(turn_id)


async def test_scripted_failure_usage_adds_to_completed_calls(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    script = [
        {
            "toolCalls": [{"toolName": "get_time", "input": {}}],
            "usage": {"inputTokens": 10, "outputTokens": 2, "totalTokens": 12},
        },
        {
            "error": "the stream broke",
            "usage": {"inputTokens": 20, "outputTokens": 1, "totalTokens": 21},
        },
    ]
    async with Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=[sync_tool("get_time")],
        implementations={"get_time": echo},
        permissions={"builtin:get_time": "none"},
    ) as h:
        turn_id, outcome = await h.run("time?")
        assert isinstance(outcome, FailedOutcome)
        assert outcome.code == "model-call-failed:transport:accepted"
        assert outcome.usage == TurnUsage(input_tokens=30, output_tokens=3, total_tokens=33)
        assert h.lines(turn_id)[-1]["usage"] == outcome.usage.to_wire()
        await h.assert_file_matches_query(turn_id)


# ---------------------------------------------------------------- cancellation evidence


async def test_a_cancelled_call_records_its_evidence(
    temporal_env: WorkflowEnvironment, tmp_path: Path, provider: FakeProvider
) -> None:
    wire = CHAT
    h = Harness(temporal_env.client, tmp_path, [])
    h.deps.models = registry(wire, provider)
    provider.queue(Reply(chunks=[*wire.text_head(), Hold(), *wire.text_tail()]))
    async with h:
        turn_id = await h.create("hi")
        run = h.turns.advance_turn(turn_id)
        for _ in range(400):  # the stream is open: its first text step is durable
            if "model_step_event" in h.types(turn_id):
                break
            await asyncio.sleep(0.05)
        assert "model_step_event" in h.types(turn_id)
        cancelled = await h.send(turn_id, {"type": "cancel", "reason": "stop"})
        assert cancelled.status == "cancelled"
        await run.outcome
        failed = next(e for e in h.lines(turn_id) if e["type"] == "model_call_failed")
        assert failed["error"].startswith("model call failed: cancelled (accepted")
        assert "provider scripted, model test" in failed["error"]
        assert h.types(turn_id)[-1] == "turn_cancelled"
        await h.assert_file_matches_query(turn_id)


# ---------------------------------------------------------------- switching bindings

OPAQUE = {
    "openai-responses": ["gAAAA-opaque-encrypted-blob"],
    "anthropic": ["EqQBCgIYAhIM-sig", "EmwKAhgBEgy-redacted"],
}


@pytest.mark.parametrize("protocol", list(OPAQUE))
@pytest.mark.parametrize("change", ["model", "turns.toml"])
async def test_the_next_call_after_a_binding_change_drops_foreign_state(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    provider: FakeProvider,
    protocol: str,
    change: str,
) -> None:
    wire = WIRES[protocol]
    h = Harness(temporal_env.client, tmp_path, [])
    h.deps.models = registry(wire, provider)
    provider.queue(
        Reply(chunks=list(wire.reasoning())),
        Reply(chunks=list(wire.text())),
        Reply(chunks=list(wire.text())),
    )
    async with h:
        first, outcome = await h.run("think")
        assert outcome.status == "completed"
        # the same binding continues the conversation with its opaque state
        same, outcome = await h.run("again", context=ContextRef(previous_turn_id=first))
        assert outcome.status == "completed"
        kept = provider.received[1].body.decode()
        assert all(blob in kept for blob in OPAQUE[protocol])

        model = "test"
        if change == "turns.toml":  # the provider's declaration changed: a new revision
            h.deps.models = registry(wire, provider, account="team-b")
        else:  # the next turn of the conversation runs on another model
            model = "other"
        turn_id = await h.turns.create_turn(
            CreateTurnInput(
                agent=RequestedAgent(
                    agent_id="test",
                    overrides=AgentOverrides(
                        model=ModelDescriptor(provider="scripted", model=model)
                    ),
                ),
                input=UserMessage(content="and now?"),
                human_available=True,
                context=ContextRef(previous_turn_id=first),
            )
        )
        outcome = await h.turns.advance_turn(turn_id).outcome
        assert outcome.status == "completed", outcome
        sent = provider.received[2]
        assert sent.json()["model"] == model
        assert not any(blob in sent.body.decode() for blob in OPAQUE[protocol])
        assert "42" in sent.body.decode()  # the visible answer of the first turn stays
        await h.assert_file_matches_query(turn_id)


# ---------------------------------------------------------------- the reducer's aggregate


def test_a_failed_calls_finish_step_usage_is_aggregated() -> None:
    spent = TurnUsage(input_tokens=7, output_tokens=1, total_tokens=8)
    b = TurnBuilder()
    b.request()
    b.step(StepFinish(finish_reason="error", usage=spent))
    b.step(StepError(error="model call failed: transport (accepted): the stream broke"))
    b.fail("model call failed: transport (accepted): the stream broke")
    b.request()  # a re-issue after the failure
    b.complete("Done.")
    b.finish()
    state = reduce_turn(b.events)
    assert state.usage == USAGE + spent == b.usage
    assert state.model_calls[0].usage == spent and state.model_calls[0].error is not None
    # a failed call that reported nothing adds nothing
    c = TurnBuilder()
    c.request()
    c.fail()
    c.request()
    c.complete("Done.")
    assert reduce_turn([*c.events, c.finish()]).usage == USAGE


def _reasoning_then_tool(wire: Wire) -> list[Chunk]:
    """Call 0 of a turn that waits: reasoning with opaque state, then a tool call."""
    head = list(wire.reasoning())
    if wire.protocol == "openai-responses":
        item = {"id": "fc_9", "type": "function_call", "call_id": "call_r", "name": "get_time"}
        reasoning_item = {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Let me think."}],
            "encrypted_content": "gAAAA-opaque-encrypted-blob",
        }
        return [
            *head[:6],  # created … the reasoning item's output_item.done
            _ev("response.output_item.added", output_index=1, item={**item, "arguments": ""}),
            _ev(
                "response.function_call_arguments.delta", item_id="fc_9", output_index=1, delta="{}"
            ),
            _ev("response.output_item.done", output_index=1, item={**item, "arguments": "{}"}),
            _completed([reasoning_item]),
        ]
    assert wire.protocol == "anthropic"
    return [
        *head[:8],  # message_start, the thinking block, the redacted block
        _a(
            "content_block_start",
            index=2,
            content_block={"type": "tool_use", "id": "call_r", "name": "get_time", "input": {}},
        ),
        _block_delta(2, type="input_json_delta", partial_json="{}"),
        _a("content_block_stop", index=2),
        *_a_end("tool_use"),
    ]


@pytest.mark.parametrize("protocol", list(OPAQUE))
async def test_editing_turns_toml_while_a_turn_waits_does_not_fail_the_next_call(
    temporal_env: WorkflowEnvironment, tmp_path: Path, provider: FakeProvider, protocol: str
) -> None:
    wire = WIRES[protocol]
    h = Harness(
        temporal_env.client,
        tmp_path,
        [],
        tools=[sync_tool("get_time")],
        implementations={"get_time": echo},
    )
    h.deps.models = registry(wire, provider)
    provider.queue(Reply(chunks=_reasoning_then_tool(wire)))
    async with h:
        turn_id, outcome = await h.run("what time is it?")
        assert outcome.status == "suspended"
        response = h.file_state(turn_id).model_calls[0].response
        assert response is not None and not isinstance(response.content, str)
        assert any(p.provider_options for p in response.content if p.type == "reasoning")
        # the operator moves the provider to another account while the turn waits
        h.deps.models = registry(wire, provider, account="team-b")
        provider.queue(Reply(chunks=list(wire.text())))
        outcome = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_r", "decision": "allow"}
        )
        assert outcome.status == "completed", outcome
        sent = provider.received[1].body.decode()
        assert not any(blob in sent for blob in OPAQUE[protocol])
        assert "call_r" in sent  # the tool call and its result still go back
        await h.assert_file_matches_query(turn_id)
