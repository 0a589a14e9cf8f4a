"""The three HTTP adapters against a real server on 127.0.0.1 replaying each
provider's wire format. Every scenario runs once per protocol."""

from __future__ import annotations

import asyncio
import logging
import socket

import httpx
import pytest

from turncore.messages import AssistantMessage, ReasoningPart, TextPart, ToolCallPart, UserMessage
from turncore.model import (
    CancellationToken,
    Dispatch,
    FailureKind,
    ModelCallRequest,
    ModelFailure,
    ReasoningDeltaEvent,
    Secret,
    SinkFailure,
    StreamEvent,
    TextDeltaEvent,
    ToolCallArgsDeltaEvent,
    ToolCallStartEvent,
    ToolDefinition,
    opaque_state,
    provider_metadata,
)

from .conftest import API_KEY, Collect, FakeProvider, Hold, Reply, assert_redacted
from .wire import WIRES, Wire

pytestmark = pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))

TOOLS = [
    ToolDefinition("get_weather", "Weather for a city", {"type": "object", "properties": {}}),
    ToolDefinition("get_time", "Time in a zone", {"type": "object", "properties": {}}),
]


def request_for(wire: Wire, **kw: object) -> ModelCallRequest:
    fields: dict[str, object] = {
        "model": wire.model_id,
        "system": "Be brief.",
        "messages": [UserMessage(content="Hi")],
    }
    fields.update(kw)
    return ModelCallRequest(**fields)  # type: ignore[arg-type]


async def run(
    wire: Wire,
    provider: FakeProvider,
    http: httpx.AsyncClient,
    request: ModelCallRequest | None = None,
    sink: Collect | None = None,
    cancel: CancellationToken | None = None,
):  # type: ignore[no-untyped-def]
    model = wire.make(wire.binding(provider.base_url), http)
    return await model.turn(
        request or request_for(wire), sink or Collect(), cancel or CancellationToken()
    )


async def fail(*args: object, **kw: object) -> ModelFailure:
    with pytest.raises(ModelFailure) as info:
        await run(*args, **kw)  # type: ignore[arg-type]
    assert_redacted(info.value)
    return info.value


# ---------------------------------------------------------------- success paths


async def test_plain_text(wire: Wire, provider: FakeProvider, http: httpx.AsyncClient) -> None:
    provider.queue(Reply(chunks=list(wire.text())))
    sink = Collect()
    outcome = await run(wire, provider, http, sink=sink)

    assert sink.events == [TextDeltaEvent("Hello"), TextDeltaEvent(", world")]
    assert outcome.parts == (TextPart(text="Hello, world"),)
    assert outcome.finish_reason == "stop"
    usage = outcome.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (12, 3, 15)
    assert usage.cached_input_tokens == 4
    assert usage.reasoning_tokens == (1 if wire.reports_reasoning_tokens else None)
    obs = outcome.observation
    assert obs.binding == wire.binding(provider.base_url)
    assert obs.response_id and obs.upstream_model and obs.upstream_model != wire.model_id
    assert obs.final_usage

    # the wire request: one POST, the credential only in its header, absent
    # sampling fields absent, streaming on
    (received,) = provider.received
    name, value = wire.auth_header()
    assert received.method == "POST" and received.headers[name] == value
    body = received.json()
    assert body["model"] == wire.model_id and body["stream"] is True
    assert API_KEY not in received.body.decode()
    for absent in ("temperature", "top_p", "max_completion_tokens", "max_output_tokens"):
        assert absent not in body
    assert API_KEY not in repr(outcome) + repr(provider_metadata(outcome)) + repr(sink.events)


async def test_sampling_fields_are_sent_when_set(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(chunks=list(wire.text())))
    await run(
        wire, provider, http, request_for(wire, temperature=0.5, top_p=0.9, max_output_tokens=77)
    )
    body = provider.received[0].json()
    assert body["temperature"] == 0.5 and body["top_p"] == 0.9
    assert 77 in (
        body.get("max_completion_tokens"),
        body.get("max_output_tokens"),
        body.get("max_tokens"),
    )


async def test_reasoning(wire: Wire, provider: FakeProvider, http: httpx.AsyncClient) -> None:
    provider.queue(Reply(chunks=list(wire.reasoning())))
    sink = Collect()
    outcome = await run(wire, provider, http, request_for(wire, reasoning_effort="high"), sink)

    assert [e for e in sink.events if isinstance(e, ReasoningDeltaEvent)] == [
        ReasoningDeltaEvent("Let me"),
        ReasoningDeltaEvent(" think."),
    ]
    assert sink.events[-1] == TextDeltaEvent("42")
    reasoning = [p for p in outcome.parts if isinstance(p, ReasoningPart)]
    assert reasoning[0].text == "Let me think."
    assert outcome.parts[-1] == TextPart(text="42")
    binding = wire.binding(provider.base_url)
    body = provider.received[0].json()
    if wire.protocol == "openai-chat":
        assert body["reasoning_effort"] == "high"
        assert reasoning[0].provider_options is None  # nothing opaque on this wire
        return
    if wire.protocol == "openai-responses":
        assert body["reasoning"] == {"effort": "high", "summary": "auto"}
        assert body["include"] == ["reasoning.encrypted_content"]
        state = opaque_state(reasoning[0].provider_options, binding)
        assert state["item"]["encrypted_content"] == "gAAAA-opaque-encrypted-blob"
    else:
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 16384}
        assert body["max_tokens"] > 16384
        assert opaque_state(reasoning[0].provider_options, binding) == {
            "type": "thinking",
            "signature": "EqQBCgIYAhIM-sig",
        }
        assert reasoning[1].text == ""
        assert opaque_state(reasoning[1].provider_options, binding)["type"] == "redacted_thinking"

    # the opaque state goes back, verbatim, to the same binding
    provider.queue(Reply(chunks=list(wire.text())))
    follow_up = request_for(
        wire,
        messages=[UserMessage(content="Hi"), outcome.message(), UserMessage(content="And?")],
    )
    await run(wire, provider, http, follow_up)
    sent = provider.received[1].body.decode()
    if wire.protocol == "openai-responses":
        assert '"encrypted_content":"gAAAA-opaque-encrypted-blob"' in sent
        assert '"id":"rs_1"' in sent
    else:
        assert '"signature":"EqQBCgIYAhIM-sig"' in sent
        assert '"data":"EmwKAhgBEgy-redacted"' in sent


async def test_parallel_tool_calls_with_fragmented_arguments(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(chunks=list(wire.tools())))
    sink = Collect()
    outcome = await run(wire, provider, http, request_for(wire, tools=TOOLS), sink)

    starts = [e for e in sink.events if isinstance(e, ToolCallStartEvent)]
    assert starts == [
        ToolCallStartEvent("call_a", "get_weather"),
        ToolCallStartEvent("call_b", "get_time"),
    ]
    for call_id in ("call_a", "call_b"):
        start_at = sink.events.index(next(s for s in starts if s.tool_call_id == call_id))
        fragments = [
            (i, e)
            for i, e in enumerate(sink.events)
            if isinstance(e, ToolCallArgsDeltaEvent) and e.tool_call_id == call_id
        ]
        assert len(fragments) >= 2 and all(i > start_at for i, _ in fragments)
    joined = "".join(
        e.fragment
        for e in sink.events
        if isinstance(e, ToolCallArgsDeltaEvent) and e.tool_call_id == "call_a"
    )
    assert joined == '{"city": "Paris"}'
    assert outcome.tool_calls() == [
        ToolCallPart(tool_call_id="call_a", tool_name="get_weather", input={"city": "Paris"}),
        ToolCallPart(tool_call_id="call_b", tool_name="get_time", input={"tz": "CET"}),
    ]
    assert outcome.finish_reason == "tool-calls"

    body = provider.received[0].json()
    assert [t.get("name") or t["function"]["name"] for t in body["tools"]] == [
        "get_weather",
        "get_time",
    ]


async def test_tool_results_round_trip(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    from turncore.messages import ToolMessage, ToolResultOutput, ToolResultPart

    provider.queue(Reply(chunks=list(wire.text())))
    messages = [
        UserMessage(content="Weather?"),
        AssistantMessage(
            content=[
                TextPart(text="Checking."),
                ToolCallPart(
                    tool_call_id="call_a", tool_name="get_weather", input={"city": "Paris"}
                ),
            ]
        ),
        ToolMessage(
            content=[
                ToolResultPart(
                    tool_call_id="call_a",
                    tool_name="get_weather",
                    output=ToolResultOutput(type="error-json", value="no network"),
                )
            ]
        ),
    ]
    await run(wire, provider, http, request_for(wire, messages=messages, tools=TOOLS))
    body = provider.received[0].body.decode()
    assert "call_a" in body and "no network" in body
    if wire.protocol == "anthropic":
        assert '"is_error":true' in body
        assert '"tool_use_id":"call_a"' in body
    else:
        assert '{\\"error\\":\\"no network\\"}' in body


# ---------------------------------------------------------------- failures


async def test_mid_stream_error_event(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    scenario = wire.mid_stream_error()
    provider.queue(Reply(chunks=list(scenario.chunks)))
    failure = await fail(wire, provider, http)
    assert failure.kind is scenario.kind
    assert failure.dispatch is Dispatch.ACCEPTED
    assert failure.provider_code == scenario.code
    if wire.protocol == "anthropic":
        assert failure.usage is not None and failure.usage.input_tokens == 12  # last snapshot kept


@pytest.mark.parametrize(
    ("status", "kind", "dispatch"),
    [
        (400, FailureKind.INVALID_INPUT, Dispatch.REJECTED),
        (401, FailureKind.AUTHENTICATION, Dispatch.REJECTED),
        (429, FailureKind.RATE_LIMIT, Dispatch.REJECTED),
        (500, FailureKind.TRANSPORT, Dispatch.UNKNOWN),
        (529, FailureKind.RATE_LIMIT, Dispatch.REJECTED),
    ],
)
async def test_error_statuses(
    wire: Wire,
    provider: FakeProvider,
    http: httpx.AsyncClient,
    status: int,
    kind: FailureKind,
    dispatch: Dispatch,
) -> None:
    headers = {"content-type": "application/json"}
    if status in (429, 529):
        headers["retry-after"] = "7"
    provider.queue(Reply(status=status, headers=headers, body=wire.error_body(status)))
    failure = await fail(wire, provider, http)
    assert (failure.kind, failure.dispatch, failure.status) == (kind, dispatch, status)
    if status in (429, 529):
        assert failure.retry_after == 7.0
        assert "retry-after hint 7s" in str(failure)
    else:
        assert failure.retry_after is None
    if status == 401:
        assert failure.provider_code in ("invalid_api_key", "authentication_error")


async def test_retry_after_ms_is_a_hint(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(
        Reply(
            status=429,
            headers={"content-type": "application/json", "retry-after-ms": "1500"},
            body=wire.error_body(429),
        )
    )
    failure = await fail(wire, provider, http)
    assert failure.retry_after == 1.5
    assert len(provider.received) == 1  # no retry of any kind


async def test_reset_before_headers_is_unknown(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(reset_before_headers=True))
    failure = await fail(wire, provider, http)
    assert (failure.kind, failure.dispatch) == (FailureKind.TRANSPORT, Dispatch.UNKNOWN)
    assert failure.status is None
    assert len(provider.received) == 1  # the client did not retry


async def test_reset_after_headers_is_accepted(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(chunks=list(wire.text_head()), reset_after_chunks=True))
    sink = Collect()
    failure = await fail(wire, provider, http, sink=sink)
    assert (failure.kind, failure.dispatch) == (FailureKind.TRANSPORT, Dispatch.ACCEPTED)
    assert TextDeltaEvent("Hello") in sink.events
    assert len(provider.received) == 1


async def test_connection_refused_is_not_sent(wire: Wire, http: httpx.AsyncClient) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = wire.make(wire.binding(f"http://127.0.0.1:{port}/v1"), http)
    with pytest.raises(ModelFailure) as info:
        await model.turn(request_for(wire), Collect(), CancellationToken())
    assert (info.value.kind, info.value.dispatch) == (FailureKind.TRANSPORT, Dispatch.NOT_SENT)
    assert_redacted(info.value)


async def test_stream_without_end_is_a_protocol_failure(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(chunks=list(wire.text_head())))
    failure = await fail(wire, provider, http)
    assert (failure.kind, failure.dispatch) == (FailureKind.PROTOCOL, Dispatch.ACCEPTED)


async def test_not_an_event_stream(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(
        Reply(
            headers={"content-type": "application/json"}, body=b'{"echo": "%s"}' % API_KEY.encode()
        )
    )
    failure = await fail(wire, provider, http)
    assert (failure.kind, failure.dispatch) == (FailureKind.PROTOCOL, Dispatch.ACCEPTED)


async def test_garbage_event_is_a_protocol_failure(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(
        Reply(chunks=[*wire.text_head(), b"data: {not json " + API_KEY.encode() + b"\n\n"])
    )
    failure = await fail(wire, provider, http)
    assert (failure.kind, failure.dispatch) == (FailureKind.PROTOCOL, Dispatch.ACCEPTED)


# ---------------------------------------------------------------- cancellation, sinks, deadlines


async def test_cancellation_mid_stream(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    hold = Hold()
    provider.queue(Reply(chunks=[*wire.text_head(), hold, *wire.text_tail()]))
    cancel = CancellationToken()
    got_first = asyncio.Event()

    async def sink(event: StreamEvent) -> None:
        got_first.set()

    task = asyncio.ensure_future(
        wire.make(wire.binding(provider.base_url), http).turn(
            request_for(wire), sink, cancel.clone()
        )
    )
    await asyncio.wait_for(got_first.wait(), 5)
    cancel.cancel()
    with pytest.raises(ModelFailure) as info:
        await asyncio.wait_for(task, 5)
    assert (info.value.kind, info.value.dispatch) == (FailureKind.CANCELLED, Dispatch.ACCEPTED)
    assert_redacted(info.value)
    # the pending read was woken and the connection dropped
    await asyncio.wait_for(provider.client_hung_up.wait(), 5)
    assert not hold.release.is_set()


async def test_cancellation_before_start_sends_nothing(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    cancel = CancellationToken()
    cancel.cancel()
    failure = await fail(wire, provider, http, cancel=cancel)
    assert (failure.kind, failure.dispatch) == (FailureKind.CANCELLED, Dispatch.NOT_SENT)
    assert provider.received == []


async def test_cancellation_wins_over_simultaneous_completion(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(chunks=list(wire.text())))
    cancel = CancellationToken()

    async def sink(event: StreamEvent) -> None:
        if event == TextDeltaEvent(", world"):
            cancel.cancel()  # the stream still completes right after this

    model = wire.make(wire.binding(provider.base_url), http)
    with pytest.raises(ModelFailure) as info:
        await model.turn(request_for(wire), sink, cancel)
    assert info.value.kind is FailureKind.CANCELLED


async def test_slow_sink_holds_the_stream_back(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(chunks=list(wire.text())))
    gate = asyncio.Event()
    seen: list[StreamEvent] = []
    active = 0
    overlapped = False

    async def slow(event: StreamEvent) -> None:
        nonlocal active, overlapped
        active += 1
        overlapped |= active > 1
        seen.append(event)
        await gate.wait()
        active -= 1

    task = asyncio.ensure_future(
        wire.make(wire.binding(provider.base_url), http).turn(
            request_for(wire), slow, CancellationToken()
        )
    )
    await asyncio.wait_for(provider.stream_finished.wait(), 5)  # the server sent everything
    await asyncio.sleep(0.1)
    assert seen == [TextDeltaEvent("Hello")] and not task.done()  # nothing read past the sink
    gate.set()
    outcome = await asyncio.wait_for(task, 5)
    assert seen == [TextDeltaEvent("Hello"), TextDeltaEvent(", world")]
    assert outcome.parts == (TextPart(text="Hello, world"),) and not overlapped


async def test_failing_sink_ends_the_attempt(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(chunks=[*wire.text_head(), Hold(), *wire.text_tail()]))

    async def broken(event: StreamEvent) -> None:
        raise RuntimeError("display went away")

    model = wire.make(wire.binding(provider.base_url), http)
    with pytest.raises(SinkFailure) as info:
        await model.turn(request_for(wire), broken, CancellationToken())
    assert info.value.dispatch is Dispatch.ACCEPTED
    assert isinstance(info.value.__cause__, RuntimeError)
    assert_redacted(info.value)
    await asyncio.wait_for(provider.client_hung_up.wait(), 5)


async def test_local_deadline(wire: Wire, provider: FakeProvider, http: httpx.AsyncClient) -> None:
    provider.queue(Reply(chunks=[*wire.text_head(), Hold()]))
    failure = await fail(wire, provider, http, request_for(wire, deadline_seconds=0.3))
    assert (failure.kind, failure.dispatch) == (FailureKind.DEADLINE, Dispatch.ACCEPTED)
    await asyncio.wait_for(provider.client_hung_up.wait(), 5)


@pytest.mark.parametrize(
    "key",
    [API_KEY + "\n", API_KEY + "\r", " " + API_KEY, API_KEY + "\x00", API_KEY + "é"],
    ids=["newline", "carriage-return", "leading-space", "nul", "non-ascii"],
)
async def test_a_key_that_cannot_be_a_header_is_refused_before_any_io(
    wire: Wire,
    provider: FakeProvider,
    http: httpx.AsyncClient,
    key: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A key pasted with a newline or a stray character cannot travel in a header.
    Nothing is sent, so the evidence is not-sent (not 'the provider may bill it'),
    the kind names the key, and no log line quotes it (httpcore's debug trace
    would print the refused header value)."""
    caplog.set_level(logging.DEBUG)
    model = wire.adapter(wire.binding(provider.base_url), http, Secret(key))
    with pytest.raises(ModelFailure) as info:
        await model.turn(request_for(wire), Collect(), CancellationToken())
    assert (info.value.kind, info.value.dispatch) == (FailureKind.AUTHENTICATION, Dispatch.NOT_SENT)
    assert "API key" in str(info.value)
    assert_redacted(info.value)
    assert provider.received == []
    assert API_KEY not in caplog.text


async def test_a_key_with_a_space_inside_is_sent(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    # A self-hosted server may take any string as its key (vLLM --api-key).
    provider.queue(Reply(chunks=list(wire.text())))
    model = wire.adapter(wire.binding(provider.base_url), http, Secret("two words"))
    await model.turn(request_for(wire), Collect(), CancellationToken())
    name, _ = wire.auth_header()
    assert provider.received[0].headers[name].endswith("two words")


async def test_waiting_for_a_pooled_connection_in_vain_is_not_sent(
    wire: Wire, provider: FakeProvider
) -> None:
    """Every connection of the client's pool is busy and none frees up in time:
    the request never left the process, so it is not-sent (and so retryable)."""
    hold = Hold()
    provider.queue(Reply(chunks=[*wire.text_head(), hold, *wire.text_tail()]))
    async with httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(retries=0, limits=httpx.Limits(max_connections=1)),
        timeout=httpx.Timeout(10.0, pool=0.2),
    ) as http:
        model = wire.make(wire.binding(provider.base_url), http)
        streaming = asyncio.Event()

        async def sink(event: StreamEvent) -> None:
            streaming.set()

        busy = asyncio.ensure_future(model.turn(request_for(wire), sink, CancellationToken()))
        await asyncio.wait_for(streaming.wait(), 5)  # the one connection is taken
        with pytest.raises(ModelFailure) as info:
            await model.turn(request_for(wire), Collect(), CancellationToken())
        hold.release.set()
        await asyncio.wait_for(busy, 5)
    assert (info.value.kind, info.value.dispatch) == (FailureKind.TRANSPORT, Dispatch.NOT_SENT)
    assert_redacted(info.value)
    assert len(provider.received) == 1
