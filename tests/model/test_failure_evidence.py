"""Failures carry only evidence that can be true (seed 003, "Evidence, not inference")."""

from __future__ import annotations

import pickle

import httpx
import pytest

from turncore.events import TurnUsage
from turncore.messages import UserMessage
from turncore.model import (
    CancellationToken,
    Dispatch,
    FailureKind,
    ModelCallRequest,
    ModelFailure,
    ScriptedModel,
    SinkFailure,
    StreamEvent,
)
from turncore.model.scripted import ScriptedResponse

from .conftest import Collect, FakeProvider, Reply, sse
from .wire import WIRES, Wire


@pytest.mark.parametrize(
    "evidence",
    [
        {"status": 503},
        {"provider_code": "server_error"},
        {"retry_after": 2.0},
        {"usage": TurnUsage(input_tokens=3)},
    ],
)
def test_a_not_sent_failure_carries_no_upstream_evidence(evidence: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="not-sent"):
        ModelFailure(FailureKind.TRANSPORT, Dispatch.NOT_SENT, "x", **evidence)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "usage",
    [
        TurnUsage(input_tokens=3, cached_input_tokens=4),
        TurnUsage(output_tokens=1, reasoning_tokens=2),
        TurnUsage(input_tokens=3, output_tokens=3, total_tokens=5),
    ],
)
def test_a_contradictory_usage_snapshot_is_refused(usage: TurnUsage) -> None:
    with pytest.raises(ValueError, match="contradictory"):
        ModelFailure(FailureKind.TRANSPORT, Dispatch.ACCEPTED, "x", usage=usage)


def test_final_usage_needs_usage_and_survives_pickling() -> None:
    with pytest.raises(ValueError, match="final usage"):
        ModelFailure(FailureKind.TRANSPORT, Dispatch.ACCEPTED, "x", usage_final=True)
    usage = TurnUsage(input_tokens=3, output_tokens=1, total_tokens=4)
    failure = ModelFailure(
        FailureKind.TRANSPORT, Dispatch.ACCEPTED, "x", usage=usage, usage_final=True, attempts=2
    )
    copy = pickle.loads(pickle.dumps(failure))
    assert (copy.usage, copy.usage_final, copy.attempts) == (usage, True, 2)
    sink = pickle.loads(pickle.dumps(SinkFailure(Dispatch.ACCEPTED, usage, True)))
    assert (sink.usage, sink.usage_final) == (usage, True)


async def test_a_sink_failing_before_dispatch_is_not_sent() -> None:
    async def broken(event: StreamEvent) -> None:
        raise RuntimeError("sink down")

    model = ScriptedModel([{"text": "hello there"}])
    request = ModelCallRequest(model="script", system="", messages=[UserMessage(content="Hi")])
    with pytest.raises(SinkFailure) as info:
        await model.turn(request, broken, CancellationToken())
    # the scripted "provider" accepted first, so this one is accepted, with no usage yet
    assert info.value.dispatch is Dispatch.ACCEPTED and info.value.usage is None


# ---------------------------------------------------------------- usage snapshots


def _chat_usage(prompt: int, completion: int, total: int, cached: int = 0) -> bytes:
    return sse(
        {
            "id": "chatcmpl-1",
            "model": "gpt-4.1",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": total,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
    )


async def _break_after(
    wire: Wire, chunks: list[bytes], provider: FakeProvider, http: httpx.AsyncClient
) -> ModelFailure:
    provider.queue(Reply(chunks=list(chunks), reset_after_chunks=True))
    model = wire.make(wire.binding(provider.base_url), http)
    request = ModelCallRequest(model=wire.model_id, system="", messages=[UserMessage(content="Hi")])
    with pytest.raises(ModelFailure) as info:
        await model.turn(request, Collect(), CancellationToken())
    return info.value


async def test_a_broken_stream_keeps_its_last_valid_usage(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    wire = WIRES["openai-chat"]
    failure = await _break_after(
        wire, [*wire.text_head(), _chat_usage(12, 3, 15, cached=4)], provider, http
    )
    assert failure.dispatch is Dispatch.ACCEPTED
    assert failure.usage == TurnUsage(
        input_tokens=12, output_tokens=3, total_tokens=15, cached_input_tokens=4
    )
    assert failure.usage_final  # Chat Completions' usage chunk is its terminal report


async def test_a_contradictory_report_is_not_kept_on_the_failure(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    wire = WIRES["openai-chat"]
    failure = await _break_after(
        wire, [*wire.text_head(), _chat_usage(12, 3, 15, cached=40)], provider, http
    )
    assert failure.dispatch is Dispatch.ACCEPTED and failure.usage is None
    assert not failure.usage_final


async def test_anthropic_partial_usage_is_not_final(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    wire = WIRES["anthropic"]
    failure = await _break_after(wire, list(wire.text_head()), provider, http)
    assert failure.dispatch is Dispatch.ACCEPTED
    assert failure.usage is not None and failure.usage.input_tokens is not None
    assert not failure.usage_final


# ---------------------------------------------------------------- the scripted model


async def test_scripted_invented_usage_is_not_final() -> None:
    request = ModelCallRequest(model="script", system="", messages=[UserMessage(content="Hi")])
    invented = await ScriptedModel(["hello there"]).turn(request, Collect(), CancellationToken())
    assert invented.usage.output_tokens is not None
    assert not invented.observation.final_usage
    stated = await ScriptedModel(
        [{"text": "hi", "usage": {"inputTokens": 5, "outputTokens": 1}}]
    ).turn(request, Collect(), CancellationToken())
    assert stated.observation.final_usage


async def test_scripted_error_usage_is_a_partial_snapshot() -> None:
    request = ModelCallRequest(model="script", system="", messages=[UserMessage(content="Hi")])
    model = ScriptedModel([{"error": "boom", "usage": {"inputTokens": 5, "outputTokens": 2}}])
    with pytest.raises(ModelFailure) as info:
        await model.turn(request, Collect(), CancellationToken())
    assert info.value.dispatch is Dispatch.ACCEPTED
    assert info.value.usage == TurnUsage(input_tokens=5, output_tokens=2)
    assert not info.value.usage_final
    with pytest.raises(ValueError, match="contradictory"):
        ScriptedResponse.from_json(
            {"text": "x", "usage": {"inputTokens": 1, "cachedInputTokens": 2}}
        )
