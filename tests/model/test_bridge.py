"""From turn values to a port request, and from an outcome to durable events."""

from __future__ import annotations

import pytest

from turncore.events import (
    ModelCallCompleted,
    ModelCallFailed,
    ModelDescriptor,
    ModelStepEvent,
    StepError,
    StepFinish,
    StepReasoningEnd,
    StepReasoningStart,
    StepTextEnd,
    StepTextStart,
    StepToolCall,
    ToolDescriptor,
    parse_event,
)
from turncore.messages import UserMessage
from turncore.model import (
    CancellationToken,
    Dispatch,
    FailureKind,
    ModelFailure,
    ModelRequestError,
    ScriptedModel,
    StepRecorder,
    StreamEvent,
    TextDeltaEvent,
    build_request,
    completion_fields,
    failure_message,
    normalise_finish_reason,
    step_events,
)

DESCRIPTOR = ModelDescriptor(provider="scripted", model="m")
TOOLS = [
    ToolDescriptor(
        tool_id="fs.read",
        name="read_file",
        description="Read a file",
        input_schema={"type": "object"},
        execution="sync",
        requires_human=False,
    )
]


def test_build_request_maps_parameters_and_keeps_absent_absent() -> None:
    request = build_request(
        model=DESCRIPTOR,
        system_prompt="You help.",
        tools=TOOLS,
        messages=[UserMessage(content="hi")],
        parameters={
            "temperature": 1,
            "maxOutputTokens": 100,
            "reasoningEffort": "low",
            "providerOptions": {},
        },
    )
    assert request.model == "m" and request.system == "You help."
    assert [t.name for t in request.tools] == ["read_file"]
    assert (request.temperature, request.max_output_tokens, request.reasoning_effort) == (
        1.0,
        100,
        "low",
    )
    assert request.top_p is None
    bare = build_request(model="m", system_prompt="", tools=[], messages=[], parameters={})
    assert (bare.temperature, bare.top_p, bare.max_output_tokens, bare.reasoning_effort) == (
        None,
    ) * 4


@pytest.mark.parametrize(
    ("parameters", "kind"),
    [
        ({"seed": 4}, FailureKind.UNSUPPORTED),
        ({"providerOptions": {"openai": {"store": True}}}, FailureKind.UNSUPPORTED),
        ({"temperature": "hot"}, FailureKind.INVALID_INPUT),
        ({"maxOutputTokens": 1.5}, FailureKind.INVALID_INPUT),
        ({"reasoningEffort": "max"}, FailureKind.INVALID_INPUT),
    ],
)
def test_build_request_refuses_unknown_or_malformed_parameters(
    parameters: dict[str, object], kind: FailureKind
) -> None:
    with pytest.raises(ModelRequestError) as info:
        build_request(model="m", system_prompt="", tools=[], messages=[], parameters=parameters)  # type: ignore[arg-type]
    assert info.value.kind is kind and info.value.dispatch is Dispatch.NOT_SENT


async def test_outcome_becomes_durable_events() -> None:
    model = ScriptedModel(
        [
            {
                "reasoning": "hmm, let me see",
                "text": "Reading it now.",
                "toolCalls": [{"toolName": "read_file", "input": {"path": "a"}}],
            }
        ],
        model="m",
    )
    recorder = StepRecorder()
    live: list[object] = []

    async def sink(event: StreamEvent) -> None:
        live.extend(recorder.on_event(event))

    request = build_request(
        model=DESCRIPTOR, system_prompt="", tools=TOOLS, messages=[UserMessage(content="go")]
    )
    outcome = await model.turn(request, sink, CancellationToken())
    live.extend(recorder.finish(outcome))
    assert live == [
        StepReasoningStart(),
        StepReasoningEnd(),
        StepTextStart(),
        StepTextEnd(),
        StepToolCall(tool_call_id="call_0_0", tool_name="read_file", input={"path": "a"}),
        StepFinish(finish_reason="tool-calls", usage=outcome.usage),
    ]
    assert step_events(outcome) == live

    fields = completion_fields(outcome)
    event = ModelCallCompleted(
        turn_id="t",
        ts="2025-01-01T00:00:00Z",
        model_call_index=0,
        message=fields.message,
        finish_reason=fields.finish_reason,
        usage=fields.usage,
        provider_metadata=fields.provider_metadata,
    )
    again = parse_event(event.to_wire())
    assert again == event
    assert again.to_wire()["providerMetadata"]["turncore"]["binding"]["protocol"] == "scripted"
    for step in live:
        parse_event(
            ModelStepEvent(
                turn_id="t", ts="2025-01-01T00:00:00Z", model_call_index=0, event=step
            ).to_wire()  # type: ignore[arg-type]
        )


def test_failures_become_one_line() -> None:
    failure = ModelFailure(
        FailureKind.RATE_LIMIT,
        Dispatch.REJECTED,
        "the provider throttled the request",
        status=429,
        provider_code="rate_limit_exceeded",
        retry_after=2.5,
    )
    line = failure_message(failure)
    assert line == (
        "model call failed: rate-limit (rejected, HTTP 429, rate_limit_exceeded, retry-after hint 2.5s): "
        "the provider throttled the request"
    )
    assert "\n" not in line
    assert (
        failure_message(RuntimeError("secret sk-123 inside"))
        == "model call failed: unexpected RuntimeError"
    )
    ModelCallFailed(turn_id="t", ts="2025-01-01T00:00:00Z", model_call_index=0, error=line)

    recorder = StepRecorder()
    recorder.on_event(TextDeltaEvent("a"))
    assert recorder.fail(failure) == [StepTextEnd(), StepError(error=line)]


def test_failure_evidence_rules() -> None:
    with pytest.raises(ValueError):
        ModelFailure(FailureKind.TRANSPORT, Dispatch.NOT_SENT, "x", status=500)
    unknown_code = ModelFailure(
        FailureKind.PROTOCOL, Dispatch.ACCEPTED, "x", provider_code="Your key sk-1 is bad"
    )
    assert unknown_code.provider_code is None


def test_finish_reasons_normalise() -> None:
    assert [
        normalise_finish_reason(t)
        for t in ("stop", "content_filter", "tool_use", "max_tokens", "weird", None)
    ] == [
        "stop",
        "content-filter",
        "tool-calls",
        "length",
        "other",
        "other",
    ]
