"""Failures carry only evidence that can be true (seed 003, "Evidence, not inference")."""

from __future__ import annotations

import pickle

import httpx
import pytest

from turncore.events import StepFinish, TurnUsage
from turncore.messages import UserMessage
from turncore.model import (
    Binding,
    CancellationToken,
    Dispatch,
    FailureKind,
    ModelCallRequest,
    ModelFailure,
    ScriptedModel,
    SinkFailure,
    StepRecorder,
    StreamEvent,
    TextDeltaEvent,
    failure_code,
    failure_message,
    parse_failure_code,
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


# ---------------------------------------------------------------- messages and codes


def _binding(auth_ref: str | None = "ACME_API_KEY") -> Binding:
    return Binding(
        protocol="openai-chat",
        provider="acme",
        endpoint="http://127.0.0.1:9/v1",
        model="gpt-4.1",
        auth_ref=auth_ref,
    )


@pytest.mark.parametrize("kind", list(FailureKind))
@pytest.mark.parametrize("dispatch", list(Dispatch))
def test_every_failure_message_names_the_binding_and_what_was_sent(
    kind: FailureKind, dispatch: Dispatch
) -> None:
    failure = ModelFailure(kind, dispatch, "fixed detail")
    message = failure_message(failure, _binding())
    assert message.startswith(failure.summary())
    assert "provider acme, model gpt-4.1, base_url http://127.0.0.1:9/v1" in message
    sent = {
        Dispatch.NOT_SENT: "nothing was sent",
        Dispatch.REJECTED: "refused it before doing any work",
        Dispatch.UNKNOWN: "may have received it and may bill it",
        Dispatch.ACCEPTED: "the provider accepted it",
    }
    assert sent[dispatch] in message
    assert "\n" not in message
    code = failure_code(failure)
    assert code == f"model-call-failed:{kind.value}:{dispatch.value}"
    assert parse_failure_code(code) == (kind, dispatch)


def test_advice_names_the_key_variable_or_the_server() -> None:
    auth = ModelFailure(FailureKind.AUTHENTICATION, Dispatch.REJECTED, "x", status=401)
    assert "environment variable ACME_API_KEY" in failure_message(auth, _binding())
    assert "api_key_env" in failure_message(auth, _binding(auth_ref=None))
    down = ModelFailure(FailureKind.TRANSPORT, Dispatch.NOT_SENT, "x")
    assert "is running" in failure_message(down, _binding())
    assert failure_message(down) == down.summary()  # no binding: the summary alone


@pytest.mark.parametrize(
    "code", [None, "", "model-call-limit", "model-call-failed:nope:accepted", "model-call-failed"]
)
def test_other_codes_are_not_model_failures(code: str | None) -> None:
    assert parse_failure_code(code) is None


def test_the_recorder_keeps_a_failures_usage_as_a_finish_step() -> None:
    usage = TurnUsage(input_tokens=3, output_tokens=1, total_tokens=4)
    recorder = StepRecorder()
    recorder.on_event(TextDeltaEvent("hi"))
    failure = ModelFailure(FailureKind.TRANSPORT, Dispatch.ACCEPTED, "broke", usage=usage)
    steps = recorder.fail(failure, _binding())
    assert [s.type for s in steps] == ["text-end", "finish-step", "error"]
    assert steps[1] == StepFinish(finish_reason="error", usage=usage)
    bare = StepRecorder().fail(ModelFailure(FailureKind.TRANSPORT, Dispatch.ACCEPTED, "broke"))
    assert [s.type for s in bare] == ["error"]
