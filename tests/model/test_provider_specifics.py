"""Wire details that belong to one provider (or to compatible servers)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from turncore.messages import (
    AssistantMessage,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolMessage,
    ToolResultOutput,
    ToolResultPart,
    UserMessage,
)
from turncore.model import (
    CancellationToken,
    Dispatch,
    FailureKind,
    ModelCallRequest,
    ModelFailure,
    NamedToolChoice,
    ReasoningDeltaEvent,
    ToolCallStartEvent,
    ToolDefinition,
)

from .conftest import Collect, FakeProvider, Hold, Reply, assert_redacted, sse
from .wire import _MESSAGE_START, _RESP, WIRES, _a, _a_end, _chunk, _ev

CHAT, RESPONSES, ANTHROPIC = WIRES["openai-chat"], WIRES["openai-responses"], WIRES["anthropic"]
TOOL = ToolDefinition("lookup", "Look up", {"type": "object"})


def request(model: str, **kw: Any) -> ModelCallRequest:
    return ModelCallRequest(model=model, system="sys", messages=[UserMessage(content="Hi")], **kw)


async def turn(
    wire: Any,
    provider: FakeProvider,
    http: httpx.AsyncClient,
    req: ModelCallRequest,
    **binding: Any,
) -> Any:
    model = wire.make(wire.binding(provider.base_url, **binding), http)
    return await model.turn(req, Collect(), CancellationToken())


async def failing(*args: Any, **kw: Any) -> ModelFailure:
    with pytest.raises(ModelFailure) as info:
        await turn(*args, **kw)
    assert_redacted(info.value)
    return info.value


# ---------------------------------------------------------------- chat


async def test_chat_content_filter_is_an_outcome(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(
        Reply(chunks=[_chunk({"content": "Part"}), _chunk({}, "content_filter"), sse("[DONE]")])
    )
    outcome = await turn(CHAT, provider, http, request("gpt-4.1"))
    assert outcome.finish_reason == "content-filter" and outcome.raw_stop_reason == "content_filter"
    assert not outcome.observation.final_usage and outcome.usage.input_tokens is None


async def test_chat_refusal_is_a_refusal_failure(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(
        Reply(
            chunks=[
                _chunk({"refusal": "I can't help with CANARY"}),
                _chunk({}, "stop"),
                sse("[DONE]"),
            ]
        )
    )
    failure = await failing(CHAT, provider, http, request("gpt-4.1"))
    assert (failure.kind, failure.dispatch) == (FailureKind.REFUSAL, Dispatch.ACCEPTED)


async def test_chat_compatible_server_quirks(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    # every complete call at index 0 (with distinct ids), arguments as an object, no [DONE]
    calls = [
        {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": 1}'},
        },
        {
            "index": 0,
            "id": "call_2",
            "type": "function",
            "function": {"name": "lookup", "arguments": {"q": 2}},
        },
    ]
    provider.queue(Reply(chunks=[_chunk({"tool_calls": calls}), _chunk({}, "tool_calls")]))
    sink = Collect()
    model = CHAT.make(
        CHAT.binding(provider.base_url, options=(("max_tokens_field", "max_tokens"),)), http
    )
    outcome = await model.turn(
        request("gpt-4.1", tools=[TOOL], max_output_tokens=50), sink, CancellationToken()
    )
    assert [(c.tool_call_id, c.input) for c in outcome.tool_calls()] == [
        ("call_1", {"q": 1}),
        ("call_2", {"q": 2}),
    ]
    assert [e for e in sink.events if isinstance(e, ToolCallStartEvent)] == [
        ToolCallStartEvent("call_1", "lookup"),
        ToolCallStartEvent("call_2", "lookup"),
    ]
    body = provider.received[0].json()
    assert body["max_tokens"] == 50 and "max_completion_tokens" not in body


async def test_chat_unparseable_arguments_are_kept_for_the_tool_layer(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    call = {
        "index": 0,
        "id": "c",
        "type": "function",
        "function": {"name": "lookup", "arguments": "{oops"},
    }
    provider.queue(
        Reply(chunks=[_chunk({"tool_calls": [call]}), _chunk({}, "tool_calls"), sse("[DONE]")])
    )
    outcome = await turn(CHAT, provider, http, request("gpt-4.1", tools=[TOOL]))
    assert outcome.tool_calls()[0].input == "{oops"


async def test_chat_reasoning_sent_under_both_names_is_kept_once(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    # Servers moving from reasoning_content to reasoning (vLLM, mlx-vlm) send
    # the same text under both names in one delta, for older clients.
    provider.queue(
        Reply(
            chunks=[
                _chunk({"role": "assistant", "reasoning_content": "Let me", "reasoning": "Let me"}),
                _chunk({"reasoning": " think.", "reasoning_content": " think."}),
                _chunk({"reasoning_content": None, "reasoning": "!"}),
                _chunk({"content": "42", "reasoning": None}),
                _chunk({}, "stop"),
                sse("[DONE]"),
            ]
        )
    )
    sink = Collect()
    model = CHAT.make(CHAT.binding(provider.base_url), http)
    outcome = await model.turn(request("gpt-4.1"), sink, CancellationToken())
    assert outcome.parts == (ReasoningPart(text="Let me think.!"), TextPart(text="42"))
    assert [e.text for e in sink.events if isinstance(e, ReasoningDeltaEvent)] == [
        "Let me",
        " think.",
        "!",
    ]


async def test_chat_tool_call_without_id_is_a_protocol_failure(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    call = {"index": 0, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    provider.queue(
        Reply(chunks=[_chunk({"tool_calls": [call]}), _chunk({}, "tool_calls"), sse("[DONE]")])
    )
    failure = await failing(CHAT, provider, http, request("gpt-4.1", tools=[TOOL]))
    assert failure.kind is FailureKind.PROTOCOL


async def test_chat_contradictory_usage_is_refused(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 3}
    provider.queue(
        Reply(
            chunks=[
                _chunk({"content": "x"}),
                _chunk({}, "stop"),
                sse({"choices": [], "usage": usage}),
            ]
        )
    )
    failure = await failing(CHAT, provider, http, request("gpt-4.1"))
    assert (failure.kind, failure.dispatch) == (FailureKind.PROTOCOL, Dispatch.ACCEPTED)


async def test_chat_request_shape(provider: FakeProvider, http: httpx.AsyncClient) -> None:
    provider.queue(Reply(chunks=list(CHAT.text())))
    messages = [
        UserMessage(content=[TextPart(text="a"), TextPart(text="b")]),
        AssistantMessage(
            content=[
                ReasoningPart(text="private"),
                ToolCallPart(tool_call_id="c1", tool_name="lookup", input={"q": 1}),
            ]
        ),
        ToolMessage(
            content=[
                ToolResultPart(
                    tool_call_id="c1",
                    tool_name="lookup",
                    output=ToolResultOutput(type="json", value={"r": 2}),
                )
            ]
        ),
    ]
    req = ModelCallRequest(
        model="gpt-4.1",
        system="sys",
        messages=messages,
        tools=[TOOL],
        tool_choice=NamedToolChoice("lookup"),
    )
    await turn(CHAT, provider, http, req)
    body = provider.received[0].json()
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]
    assert body["messages"][2]["content"] is None
    assert body["messages"][2]["tool_calls"][0]["function"] == {
        "name": "lookup",
        "arguments": '{"q":1}',
    }
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": '{"r":2}'}
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert body["stream_options"] == {"include_usage": True}
    assert "private" not in provider.received[0].body.decode()


# ---------------------------------------------------------------- responses


async def test_responses_failed_event(provider: FakeProvider, http: httpx.AsyncClient) -> None:
    failed = _ev(
        "response.failed",
        response={
            **_RESP,
            "status": "failed",
            "error": {"code": "server_error", "message": "CANARY"},
        },
    )
    provider.queue(Reply(chunks=[*RESPONSES.text_head(), failed]))
    failure = await failing(RESPONSES, provider, http, request("gpt-5"))
    assert (failure.kind, failure.dispatch, failure.provider_code) == (
        FailureKind.TRANSPORT,
        Dispatch.ACCEPTED,
        "server_error",
    )


async def test_responses_incomplete_is_length(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    incomplete = _ev(
        "response.incomplete",
        response={
            **_RESP,
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
        },
    )
    provider.queue(Reply(chunks=[*RESPONSES.text_head(), incomplete]))
    outcome = await turn(RESPONSES, provider, http, request("gpt-5"))
    assert outcome.finish_reason == "length" and outcome.message().text() == "Hello"
    assert outcome.raw_stop_reason == "incomplete:max_output_tokens"


async def test_responses_reasoning_without_encrypted_content_stays_plain(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    item = {
        "id": "rs_2",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "brief"}],
    }
    provider.queue(
        Reply(
            chunks=[
                _ev("response.output_item.done", output_index=0, item=item),
                _ev("response.completed", response={**_RESP, "status": "completed", "output": []}),
            ]
        )
    )
    outcome = await turn(RESPONSES, provider, http, request("gpt-5"))
    assert outcome.parts == (ReasoningPart(text="brief"),)


async def test_responses_text_delta_without_content_index_is_kept_once(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    # Some compatible servers leave content_index out of output_text.delta;
    # the message's done item then repeats the text at its position 0.
    message = {"id": "msg_1", "type": "message", "role": "assistant"}
    text = {"type": "output_text", "text": "Hello", "annotations": []}
    provider.queue(
        Reply(
            chunks=[
                _ev("response.created", response={**_RESP, "status": "in_progress"}),
                _ev("response.output_item.added", output_index=0, item={**message, "content": []}),
                _ev("response.output_text.delta", item_id="msg_1", output_index=0, delta="Hel"),
                _ev("response.output_text.delta", item_id="msg_1", output_index=0, delta="lo"),
                _ev(
                    "response.output_item.done", output_index=0, item={**message, "content": [text]}
                ),
                _ev("response.completed", response={**_RESP, "status": "completed", "output": []}),
            ]
        )
    )
    outcome = await turn(RESPONSES, provider, http, request("gpt-5"))
    assert outcome.parts == (TextPart(text="Hello"),)


async def test_responses_request_shape(provider: FakeProvider, http: httpx.AsyncClient) -> None:
    provider.queue(Reply(chunks=list(RESPONSES.text())))
    messages = [
        UserMessage(content="q"),
        AssistantMessage(
            content=[
                TextPart(text="t"),
                ToolCallPart(tool_call_id="c1", tool_name="lookup", input={}),
            ]
        ),
        ToolMessage(
            content=[
                ToolResultPart(
                    tool_call_id="c1",
                    tool_name="lookup",
                    output=ToolResultOutput(type="json", value="done"),
                )
            ]
        ),
    ]
    req = ModelCallRequest(
        model="gpt-5", system="sys", messages=messages, tools=[TOOL], tool_choice="required"
    )
    await turn(RESPONSES, provider, http, req)
    body = provider.received[0].json()
    assert provider.received[0].path == "/v1/responses"
    assert (
        body["instructions"] == "sys"
        and body["store"] is False
        and body["tool_choice"] == "required"
    )
    assert body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "q"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "t"}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ]
    assert "include" not in body and "reasoning" not in body


# ---------------------------------------------------------------- anthropic


async def test_anthropic_refusal(provider: FakeProvider, http: httpx.AsyncClient) -> None:
    provider.queue(Reply(chunks=[_MESSAGE_START, *_a_end("refusal")]))
    failure = await failing(ANTHROPIC, provider, http, request("claude-sonnet-4-5"))
    assert (failure.kind, failure.dispatch) == (FailureKind.REFUSAL, Dispatch.ACCEPTED)
    assert failure.usage is not None and failure.usage.output_tokens == 3


async def test_anthropic_max_tokens_and_request_shape(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(chunks=[_MESSAGE_START, *_a_end("max_tokens")]))
    messages = [
        UserMessage(content="q"),
        AssistantMessage(
            content=[ToolCallPart(tool_call_id="c1", tool_name="lookup", input="{raw")]
        ),
        ToolMessage(
            content=[
                ToolResultPart(
                    tool_call_id="c1",
                    tool_name="lookup",
                    output=ToolResultOutput(type="json", value=1),
                )
            ]
        ),
        UserMessage(content="and now?"),
    ]
    req = ModelCallRequest(
        model="claude-sonnet-4-5",
        system="sys",
        messages=messages,
        tools=[TOOL],
        tool_choice="required",
    )
    outcome = await turn(ANTHROPIC, provider, http, req, options=(("max_output_tokens", 1234),))
    assert outcome.finish_reason == "length" and outcome.parts == ()
    received = provider.received[0]
    assert received.path == "/v1/messages" and received.headers["anthropic-version"] == "2023-06-01"
    body = received.json()
    assert body["max_tokens"] == 1234 and body["system"] == "sys"
    assert body["tool_choice"] == {"type": "any"}
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"][0]["input"] == {"value": "{raw"}
    assert [b["type"] for b in body["messages"][2]["content"]] == ["tool_result", "text"]


async def test_anthropic_ping_only_stream_then_reset(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(chunks=[_MESSAGE_START, _a("ping"), 0.05], reset_after_chunks=True))
    failure = await failing(ANTHROPIC, provider, http, request("claude-sonnet-4-5"))
    assert (failure.kind, failure.dispatch) == (FailureKind.TRANSPORT, Dispatch.ACCEPTED)
    assert failure.usage is not None and failure.usage.input_tokens == 12


# ---------------------------------------------------------------- dropping the future


async def test_dropping_the_future_cancels_local_work(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(Reply(chunks=[*CHAT.text_head(), Hold()]))
    sink = Collect()
    model = CHAT.make(CHAT.binding(provider.base_url), http)
    task = asyncio.ensure_future(model.turn(request("gpt-4.1"), sink, CancellationToken()))

    async def first_event() -> None:
        while not sink.events:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(first_event(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(provider.client_hung_up.wait(), 5)
