"""Validation happens before the network: every refusal here is not-sent and
the server records nothing."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from turncore.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ToolCallPart,
    ToolMessage,
    ToolResultOutput,
    ToolResultPart,
    UserMessage,
)
from turncore.model import (
    CancellationToken,
    Capabilities,
    Dispatch,
    FailureKind,
    Limits,
    ModelCallRequest,
    ModelRequestError,
    NamedToolChoice,
    ToolDefinition,
)
from turncore.model.anthropic import AnthropicModel

from .conftest import API_KEY, Collect, FakeProvider, assert_redacted
from .wire import WIRES, Wire

TOOL = ToolDefinition("lookup", "Look something up", {"type": "object"})


def base(wire: Wire, **kw: object) -> ModelCallRequest:
    fields: dict[str, object] = {
        "model": wire.model_id,
        "system": "s",
        "messages": [UserMessage(content="Hi")],
    }
    fields.update(kw)
    return ModelCallRequest(**fields)  # type: ignore[arg-type]


CASES: list[tuple[str, dict[str, object], FailureKind]] = [
    ("model mismatch", {"model": "some-other-model"}, FailureKind.INVALID_INPUT),
    (
        "unknown named tool",
        {"tools": [TOOL], "tool_choice": NamedToolChoice("nope")},
        FailureKind.INVALID_INPUT,
    ),
    ("required without tools", {"tool_choice": "required"}, FailureKind.INVALID_INPUT),
    (
        "tool name breaks identifier rules",
        {"tools": [ToolDefinition("has space", "d", {"type": "object"})]},
        FailureKind.INVALID_INPUT,
    ),
    ("duplicate tools", {"tools": [TOOL, TOOL]}, FailureKind.INVALID_INPUT),
    ("schema not an object", {"tools": [ToolDefinition("t", "d", [1])]}, FailureKind.INVALID_INPUT),
    ("temperature out of range", {"temperature": 5.0}, FailureKind.INVALID_INPUT),
    ("top_p out of range", {"top_p": 0.0}, FailureKind.INVALID_INPUT),
    ("max tokens not positive", {"max_output_tokens": 0}, FailureKind.INVALID_INPUT),
    (
        "image input",
        {
            "messages": [
                UserMessage(content=[ImagePart(media_type="image/png", url="https://x/y.png")])
            ]
        },
        FailureKind.UNSUPPORTED,
    ),
    ("oversized field", {"system": "x" * (2 << 20)}, FailureKind.BOUNDS),
    (
        "oversized tool result",
        {
            "messages": [
                UserMessage(content="Hi"),
                AssistantMessage(
                    content=[ToolCallPart(tool_call_id="c", tool_name="lookup", input={})]
                ),
                ToolMessage(
                    content=[
                        ToolResultPart(
                            tool_call_id="c",
                            tool_name="lookup",
                            output=ToolResultOutput(type="json", value="y" * (2 << 20)),
                        )
                    ]
                ),
            ]
        },
        FailureKind.BOUNDS,
    ),
    (
        "overlong tool call id",
        {
            "messages": [
                UserMessage(content="Hi"),
                AssistantMessage(
                    content=[ToolCallPart(tool_call_id="c" * 300, tool_name="t", input={})]
                ),
            ]
        },
        FailureKind.INVALID_INPUT,
    ),
    # A lone surrogate (a file name read with surrogateescape, say) is text no
    # UTF-8 wire can carry.
    ("lone surrogate in the system prompt", {"system": "a\udcffb"}, FailureKind.INVALID_INPUT),
    (
        "lone surrogate in a message",
        {"messages": [UserMessage(content=[TextPart(text="\ud800")])]},
        FailureKind.INVALID_INPUT,
    ),
    (
        "lone surrogate in a tool description",
        {"tools": [ToolDefinition("lookup", "\udfff", {"type": "object"})]},
        FailureKind.INVALID_INPUT,
    ),
    (
        "lone surrogate in a tool result",
        {
            "messages": [
                UserMessage(content="Hi"),
                AssistantMessage(
                    content=[ToolCallPart(tool_call_id="c", tool_name="lookup", input={})]
                ),
                ToolMessage(
                    content=[
                        ToolResultPart(
                            tool_call_id="c",
                            tool_name="lookup",
                            output=ToolResultOutput(type="json", value={"name": "x\udcff"}),
                        )
                    ]
                ),
            ]
        },
        FailureKind.INVALID_INPUT,
    ),
]


@pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))
@pytest.mark.parametrize(("name", "change", "kind"), CASES, ids=[c[0] for c in CASES])
async def test_refused_before_any_io(
    wire: Wire,
    name: str,
    change: dict[str, object],
    kind: FailureKind,
    provider: FakeProvider,
    http: httpx.AsyncClient,
) -> None:
    model = wire.make(wire.binding(provider.base_url), http)
    with pytest.raises(ModelRequestError) as info:
        await model.turn(base(wire, **change), Collect(), CancellationToken())
    assert (info.value.kind, info.value.dispatch) == (kind, Dispatch.NOT_SENT)
    assert isinstance(info.value, ValueError)  # also the caller's InvalidInputError
    assert info.value.status is None and info.value.provider_code is None
    assert provider.received == []
    assert_redacted(info.value)


@pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))
async def test_declared_capabilities_are_enforced(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    cases = [
        (Capabilities(reasoning=False), {"reasoning_effort": "low"}),
        (Capabilities(sampling=False), {"temperature": 0.2}),
        (Capabilities(tools=False), {"tools": [TOOL]}),
    ]
    for caps, change in cases:
        model = wire.make(wire.binding(provider.base_url, capabilities=caps), http)
        with pytest.raises(ModelRequestError) as info:
            await model.turn(base(wire, **change), Collect(), CancellationToken())
        assert info.value.kind is FailureKind.UNSUPPORTED
    assert provider.received == []


@pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))
async def test_whole_request_is_bounded(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    binding = wire.binding(provider.base_url)
    model = wire.adapter(binding, http, None, limits=Limits(max_request_bytes=4096))
    many = [UserMessage(content="word " * 200) for _ in range(10)]
    with pytest.raises(ModelRequestError) as info:
        await model.turn(base(wire, messages=many), Collect(), CancellationToken())
    assert info.value.kind is FailureKind.BOUNDS
    assert provider.received == []


async def test_anthropic_thinking_refuses_sampling_and_small_budgets(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    wire = WIRES["anthropic"]
    model = wire.make(wire.binding(provider.base_url), http)
    for change, kind in (
        ({"reasoning_effort": "low", "temperature": 0.3}, FailureKind.UNSUPPORTED),
        ({"reasoning_effort": "high", "max_output_tokens": 2000}, FailureKind.INVALID_INPUT),
        ({"temperature": 1.5}, FailureKind.UNSUPPORTED),
        # Extended thinking cannot be combined with a tool choice that forces a call.
        (
            {"reasoning_effort": "low", "tools": [TOOL], "tool_choice": "required"},
            FailureKind.UNSUPPORTED,
        ),
        (
            {"reasoning_effort": "low", "tools": [TOOL], "tool_choice": NamedToolChoice("lookup")},
            FailureKind.UNSUPPORTED,
        ),
    ):
        with pytest.raises(ModelRequestError) as info:
            await model.turn(base(wire, **change), Collect(), CancellationToken())
        assert info.value.kind is kind
    assert provider.received == []


def test_adapter_repr_shows_no_secret(http: httpx.AsyncClient) -> None:
    wire = WIRES["anthropic"]
    model = wire.make(wire.binding("http://127.0.0.1:1/v1"), http)
    assert API_KEY not in repr(model) and API_KEY not in repr(vars(model))
    assert isinstance(model, AnthropicModel)


def test_binding_refuses_credentials_in_urls() -> None:
    from turncore.model.binding import normalise_endpoint

    assert normalise_endpoint("http://127.0.0.1:11434/v1/") == "http://127.0.0.1:11434/v1"
    for bad in ("http://user:pw@host/v1", "ftp://host", "http://host/v1?key=1", "/relative"):
        with pytest.raises(ValueError):
            normalise_endpoint(bad)


def test_no_temporal_import() -> None:
    import subprocess
    import sys

    code = (
        "import sys, turncore.model, turncore.model.registry, turncore.model.bridge; "
        "print(any(m == 'temporalio' or m.startswith('temporalio.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_model_request_is_frozen() -> None:
    request = base(WIRES["openai-chat"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.model = "x"  # type: ignore[misc]
    assert TextPart(text="a") == TextPart(text="a")


def test_an_adapter_serves_only_its_own_protocol(http: httpx.AsyncClient) -> None:
    anthropic_binding = WIRES["anthropic"].binding("http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="openai-chat bindings only"):
        WIRES["openai-chat"].make(anthropic_binding, http)
