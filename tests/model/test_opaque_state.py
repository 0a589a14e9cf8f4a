"""Opaque provider state is bound to six coordinates and refused elsewhere.

Every adapter checks every part before any I/O; the server must see nothing.
"""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from turncore.messages import AssistantMessage, ReasoningPart, TextPart, ToolCallPart, UserMessage
from turncore.model import (
    UNATTRIBUTED_REFUSAL,
    Binding,
    CancellationToken,
    Capabilities,
    Dispatch,
    FailureKind,
    ModelCallRequest,
    ModelFailure,
    ModelRequestError,
    ScriptedModel,
    bind_unattributed_message,
    bound_options,
    build_request,
    opaque_state,
    strip_foreign_state,
    strip_opaque_message,
    unattributed_options,
)

from .conftest import Collect, FakeProvider, Reply, assert_redacted
from .wire import WIRES, Wire

STATE = {"type": "thinking", "signature": "sig-1"}


def _foreign(base: Binding, coordinate: str) -> Binding:
    """``base`` changed in exactly the named coordinate (revision: only the
    declaration behind it changes, the other five stay equal)."""
    if coordinate == "protocol":
        other = next(
            p for p in ("openai-chat", "openai-responses", "anthropic") if p != base.protocol
        )
        return dataclasses.replace(base, protocol=other)
    if coordinate == "provider":
        return dataclasses.replace(base, provider="other-provider")
    if coordinate == "account":
        return dataclasses.replace(base, account="team-b")
    if coordinate == "endpoint":
        return dataclasses.replace(base, endpoint="http://127.0.0.1:9/v1")
    if coordinate == "model":
        return dataclasses.replace(base, model="another-model")
    assert coordinate == "revision"
    return dataclasses.replace(base, capabilities=Capabilities(sampling=False))


def _request(wire: Wire, part: ReasoningPart | TextPart | ToolCallPart) -> ModelCallRequest:
    return ModelCallRequest(
        model=wire.model_id,
        system="",
        messages=[
            UserMessage(content="Hi"),
            AssistantMessage(content=[part, TextPart(text="ok")]),
            UserMessage(content="More"),
        ],
    )


@pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))
@pytest.mark.parametrize(
    "coordinate", ["protocol", "provider", "account", "endpoint", "model", "revision"]
)
async def test_foreign_state_is_refused_before_io(
    wire: Wire, coordinate: str, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    mine = wire.binding(provider.base_url)
    foreign = _foreign(mine, coordinate)
    differs = [c for c, v in foreign.coordinates().items() if mine.coordinates()[c] != v]
    assert coordinate in differs
    if coordinate == "revision":
        assert differs == ["revision"]

    part = ReasoningPart(text="thought", provider_options=bound_options(foreign, STATE))
    model = wire.make(mine, http)
    with pytest.raises(ModelRequestError) as info:
        await model.turn(_request(wire, part), Collect(), CancellationToken())
    failure = info.value
    assert (failure.kind, failure.dispatch) == (FailureKind.INVALID_INPUT, Dispatch.NOT_SENT)
    assert coordinate in failure.detail
    assert provider.received == []
    assert_redacted(failure)


@pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))
async def test_state_on_any_part_kind_is_checked(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    foreign = _foreign(wire.binding(provider.base_url), "account")
    parts = [
        TextPart(text="t", provider_options=bound_options(foreign, {"id": "msg_1"})),
        ToolCallPart(
            tool_call_id="c1",
            tool_name="t",
            input={},
            provider_options=bound_options(foreign, {"id": "fc"}),
        ),
    ]
    model = wire.make(wire.binding(provider.base_url), http)
    for part in parts:
        with pytest.raises(ModelRequestError):
            await model.turn(_request(wire, part), Collect(), CancellationToken())
    assert provider.received == []


@pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))
async def test_unattributed_state_has_one_fixed_refusal(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    model = wire.make(wire.binding(provider.base_url), http)
    held = ReasoningPart(text="x", provider_options=unattributed_options(wire.protocol, STATE))
    foreign_shape = ReasoningPart(text="x", provider_options={"anthropic": {"signature": "s"}})
    for part in (held, foreign_shape):
        with pytest.raises(ModelRequestError) as info:
            await model.turn(_request(wire, part), Collect(), CancellationToken())
        assert info.value.detail == UNATTRIBUTED_REFUSAL
        assert info.value.dispatch is Dispatch.NOT_SENT
    assert provider.received == []


@pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))
async def test_binding_unattributed_state_is_the_callers_explicit_choice(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    binding = wire.binding(provider.base_url)
    state = (
        {"item": {"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": "enc-9"}}
        if wire.protocol == "openai-responses"
        else STATE
    )
    message = AssistantMessage(
        content=[
            ReasoningPart(text="x", provider_options=unattributed_options(wire.protocol, state))
        ]
    )
    bound = bind_unattributed_message(message, binding)
    part = bound.content[0]
    assert isinstance(part, ReasoningPart)
    assert opaque_state(part.provider_options, binding) == state

    provider.queue(Reply(chunks=list(wire.text())))
    request = dataclasses.replace(
        _request(wire, part),
        messages=[UserMessage(content="Hi"), bound, UserMessage(content="More")],
    )
    await wire.make(binding, http).turn(request, Collect(), CancellationToken())
    assert len(provider.received) == 1
    if wire.protocol != "openai-chat":  # chat has no slot for reasoning state
        assert ("enc-9" if wire.protocol == "openai-responses" else "sig-1") in provider.received[
            0
        ].body.decode()

    # a target of another protocol refuses the binding itself
    other = _foreign(binding, "protocol")
    with pytest.raises(ModelRequestError):
        bind_unattributed_message(message, other)


@pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))
async def test_stripping_state_is_explicit_and_then_sends(
    wire: Wire, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    foreign = _foreign(wire.binding(provider.base_url), "model")
    message = AssistantMessage(
        content=[
            ReasoningPart(text="x", provider_options=bound_options(foreign, STATE)),
            TextPart(text="y"),
        ]
    )
    stripped = strip_opaque_message(message)
    provider.queue(Reply(chunks=list(wire.text())))
    request = ModelCallRequest(
        model=wire.model_id,
        system="",
        messages=[UserMessage(content="Hi"), stripped, UserMessage(content="More")],
    )
    await wire.make(wire.binding(provider.base_url), http).turn(
        request, Collect(), CancellationToken()
    )
    assert "sig-1" not in provider.received[0].body.decode()


def test_revision_hashes_the_declaration_but_not_the_secret() -> None:
    base = Binding(
        protocol="anthropic",
        provider="claude",
        endpoint="https://api.anthropic.com/v1",
        model="m",
        auth_ref="ANTHROPIC_API_KEY",
    )
    # same declaration, same revision (a rotated key behind the same reference changes nothing)
    assert base.revision == dataclasses.replace(base).revision
    assert base.account == "ANTHROPIC_API_KEY"
    for changed in (
        dataclasses.replace(base, endpoint="https://proxy.example/v1"),
        dataclasses.replace(base, auth_ref="OTHER_KEY"),
        dataclasses.replace(base, options=(("max_output_tokens", 1000),)),
        dataclasses.replace(base, capabilities=Capabilities(tools=False)),
    ):
        assert changed.revision != base.revision


async def test_scripted_model_checks_state_too() -> None:
    model = ScriptedModel([{"text": "ok"}], model="m")
    foreign = dataclasses.replace(model.binding, account="someone-else")
    request = ModelCallRequest(
        model="m",
        system="",
        messages=[
            UserMessage(content="Hi"),
            AssistantMessage(
                content=[ReasoningPart(text="r", provider_options=bound_options(foreign, 1))]
            ),
            UserMessage(content="again"),
        ],
    )
    with pytest.raises(ModelFailure) as info:
        await model.turn(request, Collect(), CancellationToken())
    assert "account" in info.value.detail


@pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))
@pytest.mark.parametrize(
    "coordinate", ["protocol", "provider", "account", "endpoint", "model", "revision"]
)
async def test_composing_for_a_binding_strips_only_state_bound_elsewhere(
    wire: Wire, coordinate: str, provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    """The runtime's rule when the binding changed between calls (another model or
    provider for the next turn, or turns.toml edited while a turn waited)."""
    mine = wire.binding(provider.base_url)
    foreign = _foreign(mine, coordinate)
    own_state = (
        {"item": {"type": "reasoning", "id": "rs_9", "summary": [], "encrypted_content": "enc-9"}}
        if wire.protocol == "openai-responses"
        else {"type": "thinking", "signature": "sig-own"}
    )
    earlier = AssistantMessage(
        content=[
            ReasoningPart(text="old thought", provider_options=bound_options(foreign, STATE)),
            TextPart(text="old answer"),
        ]
    )
    recent = AssistantMessage(
        content=[
            ReasoningPart(text="new thought", provider_options=bound_options(mine, own_state)),
            TextPart(text="new answer"),
        ]
    )
    request = build_request(
        model=wire.model_id,
        system_prompt="",
        tools=[],
        messages=[
            UserMessage(content="Hi"),
            earlier,
            UserMessage(content="More"),
            recent,
            UserMessage(content="Again"),
        ],
        binding=mine,
    )
    kept_earlier, kept_recent = request.messages[1], request.messages[3]
    assert isinstance(kept_earlier, AssistantMessage) and isinstance(kept_recent, AssistantMessage)
    assert kept_earlier == strip_opaque_message(earlier)  # foreign state gone, text kept
    assert kept_recent is recent  # state bound to this binding stays as it was

    provider.queue(Reply(chunks=list(wire.text())))
    await wire.make(mine, http).turn(request, Collect(), CancellationToken())
    body = provider.received[0].body.decode()
    assert "sig-1" not in body and "old answer" in body
    if wire.protocol != "openai-chat":  # chat has no slot for reasoning state
        assert ("enc-9" if wire.protocol == "openai-responses" else "sig-own") in body


def test_stripping_foreign_state_leaves_unattributed_state_to_the_adapter() -> None:
    binding = WIRES["anthropic"].binding("http://127.0.0.1:9/v1")
    held = AssistantMessage(
        content=[ReasoningPart(text="x", provider_options=unattributed_options("anthropic", STATE))]
    )
    odd = AssistantMessage(
        content=[ReasoningPart(text="x", provider_options={"anthropic": {"signature": "s"}})]
    )
    assert strip_foreign_state(held, binding) is held
    assert strip_foreign_state(odd, binding) is odd
    assert strip_foreign_state(AssistantMessage(content="plain"), binding).content == "plain"
