"""Structured output on the Anthropic wire: the final-result tool, against a real
server on 127.0.0.1 speaking Anthropic Messages (the OpenAI wires are covered
through the ``turns`` command in tests/test_structured_wire.py)."""

from __future__ import annotations

import httpx
import pytest

from turncore.messages import TextPart, ToolCallPart, UserMessage
from turncore.model import (
    CancellationToken,
    Dispatch,
    FailureKind,
    ModelCallRequest,
    ModelFailure,
    TextDeltaEvent,
    ToolCallStartEvent,
    ToolDefinition,
)
from turncore.model.port import OutputFormat

from .conftest import Collect, FakeProvider, Reply
from .wire import _MESSAGE_START, AnthropicWire, _a, _a_end, _block_delta

WIRE = AnthropicWire()
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
WEATHER = ToolDefinition("get_weather", "Weather for a city", {"type": "object", "properties": {}})


def request(**kw: object) -> ModelCallRequest:
    fields: dict[str, object] = {
        "model": WIRE.model_id,
        "system": "Be brief.",
        "messages": [UserMessage(content="Hi")],
        "output": OutputFormat("Check", SCHEMA),
    }
    fields.update(kw)
    return ModelCallRequest(**fields)  # type: ignore[arg-type]


def tool_use(index: int, call_id: str, name: str, *fragments: str) -> list[bytes]:
    return [
        _a(
            "content_block_start",
            index=index,
            content_block={"type": "tool_use", "id": call_id, "name": name, "input": {}},
        ),
        *[_block_delta(index, type="input_json_delta", partial_json=f) for f in fragments],
        _a("content_block_stop", index=index),
    ]


async def turn(
    provider: FakeProvider, http: httpx.AsyncClient, req: ModelCallRequest, sink: Collect
):  # type: ignore[no-untyped-def]
    model = WIRE.make(WIRE.binding(provider.base_url), http)
    return await model.turn(req, sink, CancellationToken())


async def test_the_final_result_call_is_the_answer_text(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(
        Reply(
            chunks=[
                _MESSAGE_START,
                *tool_use(0, "toolu_1", "final_result", '{"ok"', ": true}"),
                *_a_end("tool_use"),
            ]
        )
    )
    sink = Collect()
    outcome = await turn(provider, http, request(tools=[WEATHER]), sink)
    assert outcome.parts == (TextPart(text='{"ok": true}'),)
    assert outcome.finish_reason == "stop"  # the answer is given; no tool to run
    assert sink.events == [TextDeltaEvent('{"ok"'), TextDeltaEvent(": true}")]
    body = provider.received[0].json()
    assert [t["name"] for t in body["tools"]] == ["get_weather", "final_result"]
    assert body["tools"][1]["input_schema"] == SCHEMA
    assert "tool_choice" not in body


async def test_other_tools_called_beside_it_stay_tool_calls(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    provider.queue(
        Reply(
            chunks=[
                _MESSAGE_START,
                *tool_use(0, "toolu_1", "get_weather", '{"city": "Paris"}'),
                *tool_use(1, "toolu_2", "final_result", '{"ok": false}'),
                *_a_end("tool_use"),
            ]
        )
    )
    sink = Collect()
    outcome = await turn(provider, http, request(tools=[WEATHER]), sink)
    assert outcome.parts == (
        ToolCallPart(tool_call_id="toolu_1", tool_name="get_weather", input={"city": "Paris"}),
        TextPart(text='{"ok": false}'),
    )
    assert outcome.finish_reason == "tool-calls"
    assert ToolCallStartEvent("toolu_1", "get_weather") in sink.events


async def test_without_output_a_tool_named_final_result_is_an_ordinary_tool(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    mine = ToolDefinition("final_result", "mine", {"type": "object", "properties": {}})
    provider.queue(
        Reply(
            chunks=[
                _MESSAGE_START,
                *tool_use(0, "toolu_1", "final_result", "{}"),
                *_a_end("tool_use"),
            ]
        )
    )
    outcome = await turn(provider, http, request(tools=[mine], output=None), Collect())
    assert outcome.parts == (
        ToolCallPart(tool_call_id="toolu_1", tool_name="final_result", input={}),
    )


@pytest.mark.parametrize(
    ("req", "kind", "says"),
    [
        (
            request(tools=[ToolDefinition("final_result", "mine", {"type": "object"})]),
            FailureKind.INVALID_INPUT,
            "clashes with the final-result tool",
        ),
        (
            request(output=OutputFormat("List", {"type": "array"})),
            FailureKind.UNSUPPORTED,
            "must be a JSON object",
        ),
    ],
    ids=["tool-name-clash", "not-an-object"],
)
async def test_what_the_final_result_tool_cannot_carry_is_refused_before_sending(
    provider: FakeProvider,
    http: httpx.AsyncClient,
    req: ModelCallRequest,
    kind: FailureKind,
    says: str,
) -> None:
    with pytest.raises(ModelFailure) as info:
        await turn(provider, http, req, Collect())
    assert info.value.kind == kind and info.value.dispatch == Dispatch.NOT_SENT
    assert says in str(info.value)
    assert provider.received == []
