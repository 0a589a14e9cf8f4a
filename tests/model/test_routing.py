"""Routing's retries (seed 003; spec §21.1 "internal transport retries") against a
real server on 127.0.0.1 replaying each provider's wire format."""

from __future__ import annotations

import asyncio
import socket

import httpx
import orjson
import pytest

from turncore.events import ModelDescriptor
from turncore.messages import TextPart, UserMessage
from turncore.model import (
    Binding,
    CancellationToken,
    Dispatch,
    FailureKind,
    Model,
    ModelCallRequest,
    ModelFailure,
    ModelOutcome,
    ModelRegistry,
    ProviderConfig,
    ProviderConfigError,
    RetryingModel,
    RetryPolicy,
    Sink,
    TextDeltaEvent,
)

from .conftest import Collect, FakeProvider, Reply, assert_redacted
from .wire import WIRES, Wire

FAST = RetryPolicy(max_retries=2, backoff=0.01, max_wait=5.0)
JSON = {"content-type": "application/json"}


def _request(wire: Wire) -> ModelCallRequest:
    return ModelCallRequest(model=wire.model_id, system="", messages=[UserMessage(content="Hi")])


def _model(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient, policy: RetryPolicy = FAST
) -> RetryingModel:
    return RetryingModel(wire.make(wire.binding(provider.base_url), http), policy)


def _refusal(wire: Wire, status: int, **headers: str) -> Reply:
    return Reply(status=status, headers={**JSON, **headers}, body=wire.error_body(status))


async def _fail(model: Model, wire: Wire, sink: Collect | None = None) -> ModelFailure:
    with pytest.raises(ModelFailure) as info:
        await model.turn(_request(wire), sink or Collect(), CancellationToken())
    assert_redacted(info.value)
    return info.value


wires = pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))


@wires
@pytest.mark.parametrize("status", [503, 529, 429])
async def test_overload_then_success_completes(
    wire: Wire, status: int, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(_refusal(wire, status), Reply(chunks=list(wire.text())))
    sink = Collect()
    outcome = await _model(wire, provider, http).turn(_request(wire), sink, CancellationToken())
    assert outcome.parts == (TextPart(text="Hello, world"),)
    assert sink.events == [TextDeltaEvent("Hello"), TextDeltaEvent(", world")]
    assert len(provider.received) == 2
    assert provider.received[0].body == provider.received[1].body  # the same request again


@wires
async def test_retry_after_is_waited_for(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(_refusal(wire, 429, **{"retry-after": "1"}), Reply(chunks=list(wire.text())))
    loop = asyncio.get_running_loop()
    started = loop.time()
    await _model(wire, provider, http).turn(_request(wire), Collect(), CancellationToken())
    assert loop.time() - started >= 0.99  # the hint (timer resolution aside), not 0.01 s
    assert len(provider.received) == 2


@wires
async def test_retries_are_bounded(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(*(_refusal(wire, 503) for _ in range(4)))
    failure = await _fail(_model(wire, provider, http), wire)
    assert (failure.kind, failure.dispatch, failure.status) == (
        FailureKind.RATE_LIMIT,
        Dispatch.REJECTED,
        503,
    )
    assert failure.attempts == 3 and "3 attempts" in failure.summary()
    assert len(provider.received) == 3


@wires
async def test_an_accepted_break_is_not_retried(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(
        Reply(chunks=list(wire.text_head()), reset_after_chunks=True),
        Reply(chunks=list(wire.text())),
    )
    failure = await _fail(_model(wire, provider, http), wire)
    assert (failure.kind, failure.dispatch) == (FailureKind.TRANSPORT, Dispatch.ACCEPTED)
    assert failure.attempts == 1
    assert len(provider.received) == 1


@wires
async def test_unknown_dispatch_is_not_retried(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(reset_before_headers=True), Reply(chunks=list(wire.text())))
    failure = await _fail(_model(wire, provider, http), wire)
    assert failure.dispatch is Dispatch.UNKNOWN and failure.attempts == 1
    assert len(provider.received) == 1


@wires
async def test_a_mid_stream_overload_is_not_retried(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    error = wire.mid_stream_error()
    provider.queue(Reply(chunks=list(error.chunks)), Reply(chunks=list(wire.text())))
    failure = await _fail(_model(wire, provider, http), wire)
    assert failure.dispatch is Dispatch.ACCEPTED
    assert len(provider.received) == 1


@wires
@pytest.mark.parametrize("status", [400, 401, 500])
async def test_other_refusals_are_not_retried(
    wire: Wire, status: int, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(_refusal(wire, status), Reply(chunks=list(wire.text())))
    failure = await _fail(_model(wire, provider, http), wire)
    assert failure.status == status and failure.attempts == 1
    assert len(provider.received) == 1


@wires
async def test_a_quota_refusal_is_not_retried(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    body = orjson.dumps({"error": {"type": "insufficient_quota", "code": "insufficient_quota"}})
    provider.queue(Reply(status=429, headers=JSON, body=body), Reply(chunks=list(wire.text())))
    failure = await _fail(_model(wire, provider, http), wire)
    assert failure.kind is FailureKind.RATE_LIMIT and failure.provider_code == "insufficient_quota"
    assert len(provider.received) == 1


@wires
async def test_a_hint_beyond_max_wait_fails_at_once(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(_refusal(wire, 429, **{"retry-after": "3600"}), Reply(chunks=list(wire.text())))
    failure = await _fail(_model(wire, provider, http), wire)
    assert failure.retry_after == 3600.0 and failure.attempts == 1
    assert len(provider.received) == 1


@wires
async def test_cancel_wakes_the_wait(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(_refusal(wire, 429, **{"retry-after": "30"}), Reply(chunks=list(wire.text())))
    cancel = CancellationToken()
    model = _model(wire, provider, http, RetryPolicy(max_wait=60.0))
    turn = asyncio.ensure_future(model.turn(_request(wire), Collect(), cancel.clone()))
    for _ in range(1000):  # until the first attempt reached the server (10 s at most)
        if provider.received:
            break
        await asyncio.sleep(0.01)
    assert provider.received
    loop = asyncio.get_running_loop()
    started = loop.time()
    cancel.cancel()
    with pytest.raises(ModelFailure) as info:
        await asyncio.wait_for(turn, timeout=10)
    assert info.value.kind is FailureKind.CANCELLED
    assert info.value.dispatch in (Dispatch.REJECTED, Dispatch.UNKNOWN)
    assert loop.time() - started < 10
    assert len(provider.received) == 1


class _ListenAfterFirstFailure(Model):
    """The real adapter; after its first failure a server starts listening on the
    port that refused the connection (the provider came back)."""

    def __init__(self, inner: Model, server: FakeProvider, port: int) -> None:
        self.inner, self.server, self.port = inner, server, port
        self.failures: list[ModelFailure] = []

    @property
    def binding(self) -> Binding:
        return self.inner.binding

    async def turn(
        self, request: ModelCallRequest, sink: Sink, cancel: CancellationToken
    ) -> ModelOutcome:
        try:
            return await self.inner.turn(request, sink, cancel)
        except ModelFailure as failure:
            if not self.failures:
                self.server._server = await asyncio.start_server(
                    self.server._handle, "127.0.0.1", self.port
                )
                self.server.port = self.port
            self.failures.append(failure)
            raise


@wires
async def test_not_sent_is_retried(wire: Wire, http: httpx.AsyncClient) -> None:
    with socket.socket() as s:  # a port nobody listens on yet
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = FakeProvider()
    server.queue(Reply(chunks=list(wire.text())))
    adapter = wire.make(wire.binding(f"http://127.0.0.1:{port}/v1"), http)
    spy = _ListenAfterFirstFailure(adapter, server, port)
    try:
        outcome = await RetryingModel(spy, FAST).turn(
            _request(wire), Collect(), CancellationToken()
        )
    finally:
        await server.stop()
    assert [(f.kind, f.dispatch) for f in spy.failures] == [
        (FailureKind.TRANSPORT, Dispatch.NOT_SENT)
    ]
    assert outcome.parts == (TextPart(text="Hello, world"),)


async def test_invalid_input_is_never_retried(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    wire = WIRES["openai-chat"]
    request = ModelCallRequest(model="another-model", system="", messages=[])
    with pytest.raises(ModelFailure) as info:
        await _model(wire, provider, http).turn(request, Collect(), CancellationToken())
    assert (info.value.kind, info.value.dispatch) == (FailureKind.INVALID_INPUT, Dispatch.NOT_SENT)
    assert info.value.attempts == 1 and not provider.received


# ---------------------------------------------------------------- configuration


def test_registry_applies_max_retries(provider: FakeProvider) -> None:
    chat = {"kind": "openai-chat", "base_url": "http://127.0.0.1:9/v1"}
    registry = ModelRegistry(
        {
            "plain": ProviderConfig.from_table("plain", chat),
            "once": ProviderConfig.from_table("once", {**chat, "max_retries": 0}),
            "eager": ProviderConfig.from_table(
                "eager", {**chat, "max_retries": 5, "retry_backoff": 0.5, "retry_max_wait": 9}
            ),
        }
    )
    plain = registry.resolve(ModelDescriptor(provider="plain", model="m"))
    assert isinstance(plain, RetryingModel) and plain.policy == RetryPolicy()
    assert plain.policy.max_retries == 2
    assert not isinstance(
        registry.resolve(ModelDescriptor(provider="once", model="m")), RetryingModel
    )
    eager = registry.resolve(ModelDescriptor(provider="eager", model="m"))
    assert isinstance(eager, RetryingModel)
    assert eager.policy == RetryPolicy(max_retries=5, backoff=0.5, max_wait=9.0)
    # retry settings are routing, not part of the binding opaque state is tied to
    acme = ModelDescriptor(provider="acme", model="m")
    revisions = {
        ModelRegistry({"acme": ProviderConfig.from_table("acme", {**chat, **extra})})
        .binding(acme)
        .revision
        for extra in ({}, {"max_retries": 0}, {"retry_backoff": 3})
    }
    assert len(revisions) == 1


@pytest.mark.parametrize(
    "setting",
    [
        {"max_retries": -1},
        {"max_retries": 11},
        {"max_retries": "2"},
        {"max_retries": True},
        {"retry_backoff": -1},
        {"retry_backoff": float("nan")},
        {"retry_max_wait": "x"},
    ],
)
def test_bad_retry_settings_are_refused(setting: dict[str, object]) -> None:
    with pytest.raises(ProviderConfigError, match=next(iter(setting))):
        ProviderConfig.from_table("p", {"kind": "openai-chat", **setting})
