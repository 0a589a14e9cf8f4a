"""The scripted model implements the port and is restart-safe: the response
it plays is derived from the request, never from hidden state."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
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
    ReasoningDeltaEvent,
    ScriptedModel,
    ScriptedResponse,
    StreamEvent,
    TextDeltaEvent,
    ToolCallArgsDeltaEvent,
    ToolCallStartEvent,
    call_index,
)

from .conftest import Collect

SCRIPT = {
    "responses": [
        {
            "toolCalls": [
                {"toolName": "read_file", "input": {"path": "a.txt"}},
                {"toolName": "ls", "input": {}},
            ]
        },
        {"reasoning": "The file says hi.", "text": "It says hello to you all."},
    ]
}


def req(messages: list[object], model: str = "script.json") -> ModelCallRequest:
    return ModelCallRequest(model=model, system="", messages=messages)  # type: ignore[arg-type]


def after_first_call(outcome_message: AssistantMessage) -> list[object]:
    results = ToolMessage(
        content=[
            ToolResultPart(
                tool_call_id=p.tool_call_id,
                tool_name=p.tool_name,
                output=ToolResultOutput(type="json", value="ok"),
            )
            for p in outcome_message.tool_calls()
        ]
    )
    return [UserMessage(content="go"), outcome_message, results]


async def test_file_script_plays_by_request_position(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_bytes(orjson.dumps(SCRIPT))
    model = ScriptedModel(path, model="script.json")

    sink = Collect()
    first = await model.turn(req([UserMessage(content="go")]), sink, CancellationToken())
    assert first.finish_reason == "tool-calls"
    assert [p.tool_call_id for p in first.tool_calls()] == ["call_0_0", "call_0_1"]
    assert sink.events[0] == ToolCallStartEvent("call_0_0", "read_file")
    args = "".join(
        e.fragment
        for e in sink.events
        if isinstance(e, ToolCallArgsDeltaEvent) and e.tool_call_id == "call_0_0"
    )
    assert orjson.loads(args) == {"path": "a.txt"}

    # a fresh instance (a restarted process) answers the same request the same way
    again = await ScriptedModel(path, model="script.json").turn(
        req([UserMessage(content="go")]), Collect(), CancellationToken()
    )
    assert again.parts == first.parts

    sink = Collect()
    second = await model.turn(req(after_first_call(first.message())), sink, CancellationToken())
    assert second.finish_reason == "stop"
    assert second.parts == (
        ReasoningPart(text="The file says hi."),
        TextPart(text="It says hello to you all."),
    )
    texts = [e.text for e in sink.events if isinstance(e, TextDeltaEvent)]
    assert len(texts) > 1 and "".join(texts) == "It says hello to you all."
    assert (
        "".join(e.text for e in sink.events if isinstance(e, ReasoningDeltaEvent))
        == "The file says hi."
    )
    usage = second.usage
    assert usage.input_tokens and usage.output_tokens
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens

    # the position counts only this turn: a new user message starts over
    history = [
        *after_first_call(first.message()),
        second.message(),
        UserMessage(content="next turn"),
    ]
    third = await model.turn(req(history), Collect(), CancellationToken())
    assert third.tool_calls() == first.tool_calls()

    # past the end of the script: a not-sent invalid-input failure
    beyond = [*after_first_call(first.message()), second.message(), AssistantMessage(content="x")]
    with pytest.raises(ModelFailure) as info:
        await model.turn(req(beyond), Collect(), CancellationToken())
    assert (info.value.kind, info.value.dispatch) == (FailureKind.INVALID_INPUT, Dispatch.NOT_SENT)


async def test_error_responses_raise_model_failures() -> None:
    model = ScriptedModel(
        [{"error": "provider exploded"}, {"error": "slow down", "errorKind": "rate-limit"}],
        model="m",
    )
    with pytest.raises(ModelFailure) as info:
        await model.turn(req([UserMessage(content="x")], "m"), Collect(), CancellationToken())
    assert info.value.kind is FailureKind.TRANSPORT and "provider exploded" in str(info.value)
    with pytest.raises(ModelFailure) as info:
        await model.turn(
            req([UserMessage(content="x"), AssistantMessage(content="y")], "m"),
            Collect(),
            CancellationToken(),
        )
    assert info.value.kind is FailureKind.RATE_LIMIT


async def test_function_scripts_sync_and_async() -> None:
    def sync(request: ModelCallRequest) -> dict[str, object]:
        return {"text": f"call {call_index(request.messages)}"}

    async def later(request: ModelCallRequest) -> ScriptedResponse:
        await asyncio.sleep(0)
        return ScriptedResponse(text="async", finish_reason="length")

    out = await ScriptedModel(sync, model="f").turn(
        req([UserMessage(content="x")], "f"), Collect(), CancellationToken()
    )
    assert out.message().text() == "call 0"
    out = await ScriptedModel(later, model="f").turn(
        req([UserMessage(content="x")], "f"), Collect(), CancellationToken()
    )
    assert out.finish_reason == "length"
    assert out.observation.binding.protocol == "scripted"


async def test_delay_allows_cancellation_mid_stream() -> None:
    model = ScriptedModel([{"text": "one two three four five six"}], model="m", delay=0.2)
    cancel = CancellationToken()
    first = asyncio.Event()

    class FirstEvent(Collect):
        async def __call__(self, event: StreamEvent) -> None:
            await super().__call__(event)
            first.set()

    sink = FirstEvent()
    task = asyncio.ensure_future(model.turn(req([UserMessage(content="x")], "m"), sink, cancel))
    await asyncio.wait_for(first.wait(), 5)  # mid-stream: the first piece has arrived
    cancel.cancel()
    with pytest.raises(ModelFailure) as info:
        await asyncio.wait_for(task, 2)
    assert info.value.kind is FailureKind.CANCELLED
    assert 1 <= len(sink.events) < 3


def test_malformed_scripts_are_refused() -> None:
    for bad in ({"txt": "typo"}, {"toolCalls": [{"input": {}}]}, {"finishReason": "done"}, 3):
        with pytest.raises(ValueError):
            ScriptedResponse.from_json(bad)


def test_call_index_counts_assistants_after_the_last_user_message() -> None:
    call = ToolCallPart(tool_call_id="c", tool_name="t", input={})
    result = ToolMessage(
        content=[
            ToolResultPart(
                tool_call_id="c", tool_name="t", output=ToolResultOutput(type="json", value=1)
            )
        ]
    )
    assert call_index([]) == 0
    assert call_index([UserMessage(content="a")]) == 0
    assert call_index([AssistantMessage(content="old"), UserMessage(content="a")]) == 0
    assert call_index([UserMessage(content="a"), AssistantMessage(content=[call]), result]) == 1
