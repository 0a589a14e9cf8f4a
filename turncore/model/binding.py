"""Bindings and the opaque provider state bound to them (seed 003).

A *binding* is one validated single-model declaration: protocol, provider
name, account, endpoint, upstream model, auth reference and declared
capabilities. Its *revision* is a hash of that whole declaration, so
repointing a provider name (new endpoint, new model, new auth reference)
invalidates opaque state produced before; secret bytes are never part of a
declaration, so rotating the key behind the same reference does not.

Opaque state (encrypted reasoning, signatures, provider reasoning items)
travels in a part's ``providerOptions`` inside one envelope::

    {"turncore": {"protocol": …, "provider": …, "account": …, "endpoint": …,
                  "model": …, "revision": …, "state": <opaque payload>}}

Every adapter calls :func:`opaque_state` for every part before sending and
refuses state whose six coordinates differ from the selected binding in any
way. State read from an ingress body has no binding; it is held as::

    {"turncore": {"unattributed": true, "protocol": …, "state": <payload>}}

and refused with :data:`~turncore.model.failures.UNATTRIBUTED_REFUSAL` until the
caller binds it with :func:`bind_unattributed`. ``providerOptions`` that are not
in this envelope at all have no provable origin either and get the same refusal.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias
from urllib.parse import urlsplit

import orjson

from turncore.jsonvalue import JsonValue
from turncore.messages import AssistantMessage, ReasoningPart, TextPart, ToolCallPart
from turncore.model.failures import UNATTRIBUTED_REFUSAL, invalid

Protocol: TypeAlias = Literal["openai-chat", "openai-responses", "anthropic", "scripted"]
PROTOCOLS: tuple[Protocol, ...] = ("openai-chat", "openai-responses", "anthropic", "scripted")

ENVELOPE_KEY = "turncore"
COORDINATES: tuple[str, ...] = ("protocol", "provider", "account", "endpoint", "model", "revision")


@dataclass(frozen=True)
class Capabilities:
    """What the operator declares a binding supports. Core checks requests
    against the declaration; it cannot check that the declaration is true."""

    tools: bool = True
    """Function tools may be published."""
    reasoning: bool = True
    """``reasoning_effort`` may be requested."""
    sampling: bool = True
    """``temperature`` and ``top_p`` may be set (some reasoning models refuse them)."""


@dataclass(frozen=True)
class Binding:
    """The selected, immutable binding one attempt runs under."""

    protocol: Protocol
    provider: str
    """The provider's configured name (``[providers.NAME]``)."""
    endpoint: str
    """Base URL, normalised (no trailing slash, never with credentials)."""
    model: str
    """The upstream model id the request must name."""
    auth_ref: str | None = None
    """Name of the environment variable holding the key — a reference, never the key."""
    account: str = ""
    """Account label; defaults to the auth reference, or ``anonymous``."""
    capabilities: Capabilities = field(default_factory=Capabilities)
    options: tuple[tuple[str, str | int | bool], ...] = ()
    """Further protocol options that shape the wire (sorted name/value pairs)."""
    revision: str = field(init=False)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}")
        for name in ("provider", "model", "endpoint"):
            value = getattr(self, name)
            if not value or len(value) > 512:
                raise ValueError(f"binding {name} must be 1..512 characters")
        if not self.account:
            object.__setattr__(self, "account", self.auth_ref or "anonymous")
        object.__setattr__(self, "options", tuple(sorted(self.options)))
        object.__setattr__(self, "revision", _revision(self))

    def coordinates(self) -> dict[str, str]:
        """The six coordinates opaque state is bound to."""
        return {
            "protocol": self.protocol,
            "provider": self.provider,
            "account": self.account,
            "endpoint": self.endpoint,
            "model": self.model,
            "revision": self.revision,
        }

    def option(self, name: str, default: Any = None) -> Any:
        for key, value in self.options:
            if key == name:
                return value
        return default

    def label(self) -> str:
        return f"{self.provider}/{self.model}"


def _revision(binding: Binding) -> str:
    declaration = {
        "protocol": binding.protocol,
        "provider": binding.provider,
        "account": binding.account,
        "endpoint": binding.endpoint,
        "model": binding.model,
        "authRef": binding.auth_ref,
        "capabilities": {
            "tools": binding.capabilities.tools,
            "reasoning": binding.capabilities.reasoning,
            "sampling": binding.capabilities.sampling,
        },
        "options": [[k, v] for k, v in binding.options],
    }
    digest = hashlib.sha256(orjson.dumps(declaration, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"sha256:{digest[:32]}"


def normalise_endpoint(url: str) -> str:
    """Validate and normalise a base URL; credentials inside a URL are refused."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("a base URL must be an absolute http(s) URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("a base URL must not carry credentials; use api_key_env")
    if parts.query or parts.fragment:
        raise ValueError("a base URL must not carry a query or fragment")
    return url.strip().rstrip("/")


# ---------------------------------------------------------------- envelopes


def bound_options(binding: Binding, state: JsonValue) -> dict[str, Any]:
    """``providerOptions`` carrying ``state`` bound to ``binding``."""
    return {ENVELOPE_KEY: {**binding.coordinates(), "state": state}}


def unattributed_options(protocol: Protocol, state: JsonValue) -> dict[str, Any]:
    """``providerOptions`` for state an ingress decoder read with no binding."""
    return {ENVELOPE_KEY: {"unattributed": True, "protocol": protocol, "state": state}}


def opaque_state(options: JsonValue, binding: Binding) -> JsonValue:
    """The opaque payload in ``options`` if it is bound to exactly ``binding``.

    Returns None when there are no options; raises a not-sent invalid-input
    failure for unattributed state or for state bound to any other binding.
    """
    if options is None:
        return None
    envelope = options.get(ENVELOPE_KEY) if isinstance(options, dict) else None
    if not isinstance(envelope, dict) or (isinstance(options, dict) and len(options) != 1):
        raise invalid(UNATTRIBUTED_REFUSAL)
    if envelope.get("unattributed") is True:
        raise invalid(UNATTRIBUTED_REFUSAL)
    mine = binding.coordinates()
    differing = [c for c in COORDINATES if envelope.get(c) != mine[c]]
    if differing:
        raise invalid(
            "opaque provider state was produced under a different binding "
            f"(differs in: {', '.join(differing)}); it cannot be sent to {binding.protocol} "
            "binding " + repr(binding.provider)
        )
    return envelope.get("state")


def _bind_options(options: JsonValue, binding: Binding) -> JsonValue:
    if not isinstance(options, dict):
        return options
    envelope = options.get(ENVELOPE_KEY)
    if not isinstance(envelope, dict) or envelope.get("unattributed") is not True:
        return options
    if envelope.get("protocol") != binding.protocol:
        raise invalid(
            "unattributed opaque state was read from a different protocol and cannot be "
            f"bound to a {binding.protocol} binding"
        )
    return bound_options(binding, envelope.get("state"))


_Part: TypeAlias = TextPart | ReasoningPart | ToolCallPart


def bind_unattributed_message(message: AssistantMessage, binding: Binding) -> AssistantMessage:
    """Bind every unattributed opaque state in ``message`` to ``binding`` — the
    caller's explicit decision. Refuses a binding of a different protocol."""
    if isinstance(message.content, str):
        return message
    parts: list[Any] = []
    for part in message.content:
        if isinstance(part, (TextPart, ReasoningPart, ToolCallPart)) and part.provider_options:
            part = part.model_copy(
                update={"provider_options": _bind_options(part.provider_options, binding)}
            )
        parts.append(part)
    return AssistantMessage(content=parts)


def strip_opaque_message(message: AssistantMessage) -> AssistantMessage:
    """The same message without any opaque provider state — the caller's explicit
    decision when continuing a conversation on another binding."""
    if isinstance(message.content, str):
        return message
    parts: list[Any] = []
    for part in message.content:
        if isinstance(part, (TextPart, ReasoningPart, ToolCallPart)) and part.provider_options:
            part = part.model_copy(update={"provider_options": None})
        parts.append(part)
    return AssistantMessage(content=parts)


def _bound_elsewhere(options: JsonValue, binding: Binding) -> bool:
    """True when ``options`` is a bound envelope whose coordinates are not ``binding``'s."""
    if not isinstance(options, dict) or len(options) != 1:
        return False
    envelope = options.get(ENVELOPE_KEY)
    if not isinstance(envelope, dict) or envelope.get("unattributed") is True:
        return False
    if not all(isinstance(envelope.get(c), str) for c in COORDINATES):
        return False  # not a bound envelope: the adapter refuses it as unattributed
    mine = binding.coordinates()
    return any(envelope.get(c) != mine[c] for c in COORDINATES)


def strip_foreign_state(message: AssistantMessage, binding: Binding) -> AssistantMessage:
    """The message without opaque state bound to any binding but ``binding``.

    This is the runtime's rule when it composes a call for a binding other than
    the one that produced earlier assistant messages (another model or provider
    for the next turn of a conversation, or ``turns.toml`` edited while a turn
    waited): such state could only be refused (seed 003 allows no exception),
    and a provider needs none of it to continue — the visible text, reasoning
    text and tool calls stay. State bound to ``binding`` itself is kept, and
    unattributed state is left alone for the adapter to refuse: binding it is
    the caller's explicit decision, never the runtime's.
    """
    if isinstance(message.content, str):
        return message
    changed = False
    parts: list[Any] = []
    for part in message.content:
        if isinstance(part, (TextPart, ReasoningPart, ToolCallPart)) and _bound_elsewhere(
            part.provider_options, binding
        ):
            part = part.model_copy(update={"provider_options": None})
            changed = True
        parts.append(part)
    return AssistantMessage(content=parts) if changed else message
