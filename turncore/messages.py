"""Conversation messages on the wire (DESIGN §2, AI SDK model-message vocabulary).

- user: ``{"role":"user","content": str | [part…]}``
- assistant: ``{"role":"assistant","content": str | [part…]}``
- tool: ``{"role":"tool","content":[tool-result…]}`` (inline context and composed requests)

Media parts carry exactly one source (``url``, inline base64 ``data`` or a
provider ``fileId``), a media type and an optional filename (seed 000,
ContentPart). ``describe_part`` is the projection for humans: it never shows
bytes, URLs or ids.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BeforeValidator, Field, model_validator

from ._wire import Opt, WireModel
from .jsonvalue import JsonValue


class TextPart(WireModel):
    type: Literal["text"] = "text"
    text: str
    provider_options: Opt[JsonValue] = None


class ReasoningPart(WireModel):
    """Model reasoning. ``providerOptions`` holds opaque provider state (signatures,
    encrypted reasoning) together with the binding it was produced under."""

    type: Literal["reasoning"] = "reasoning"
    text: str
    provider_options: Opt[JsonValue] = None


class ToolCallPart(WireModel):
    type: Literal["tool-call"] = "tool-call"
    tool_call_id: str = Field(min_length=1)
    tool_name: str
    input: JsonValue
    provider_options: Opt[JsonValue] = None


class _MediaPart(WireModel):
    media_type: str = Field(min_length=1)
    filename: Opt[str] = None
    url: Opt[str] = None
    data: Opt[str] = None
    file_id: Opt[str] = None

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Any:
        sources = [n for n in ("url", "data", "file_id") if getattr(self, n) is not None]
        if len(sources) != 1:
            raise ValueError(
                f"a media part needs exactly one source of url, data or fileId; got {len(sources)}"
            )
        return self

    def source_kind(self) -> str:
        if self.url is not None:
            return "url"
        if self.data is not None:
            return "data"
        return "file_id"

    def byte_size(self) -> int | None:
        if self.data is None:
            return None
        try:
            return len(base64.b64decode(self.data, validate=False))
        except (binascii.Error, ValueError):
            return None


class ImagePart(_MediaPart):
    type: Literal["image"] = "image"


class AudioPart(_MediaPart):
    type: Literal["audio"] = "audio"


class FilePart(_MediaPart):
    type: Literal["file"] = "file"


MediaPart: TypeAlias = ImagePart | AudioPart | FilePart

UserPart = Annotated[TextPart | ImagePart | AudioPart | FilePart, Field(discriminator="type")]
AssistantPart = Annotated[
    TextPart | ReasoningPart | ToolCallPart | ImagePart | FilePart, Field(discriminator="type")
]


class ToolResultOutput(WireModel):
    """AI SDK tool-result output: ``json`` for results, ``error-json`` for error results."""

    type: Literal["json", "error-json"]
    value: JsonValue


class ToolResultPart(WireModel):
    type: Literal["tool-result"] = "tool-result"
    tool_call_id: str = Field(min_length=1)
    tool_name: str
    output: ToolResultOutput


class UserMessage(WireModel):
    role: Literal["user"] = "user"
    content: str | list[UserPart]


class AssistantMessage(WireModel):
    role: Literal["assistant"] = "assistant"
    content: str | list[AssistantPart]

    def tool_calls(self) -> list[ToolCallPart]:
        if isinstance(self.content, str):
            return []
        return [p for p in self.content if isinstance(p, ToolCallPart)]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


class ToolMessage(WireModel):
    role: Literal["tool"] = "tool"
    content: list[ToolResultPart] = Field(min_length=1)


def _reject_system(value: Any) -> Any:
    if isinstance(value, dict) and value.get("role") == "system":
        raise ValueError(
            "system-role messages are not allowed in a conversation; "
            "the resolved agent owns the single system prompt"
        )
    return value


ConversationMessage = Annotated[
    Annotated[UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")],
    BeforeValidator(_reject_system),
]
"""A prior message: user, assistant or tool. System-role messages are rejected."""


def describe_part(
    part: TextPart | ReasoningPart | ToolCallPart | ToolResultPart | MediaPart,
) -> str:
    """A one-line, human-safe description of a part (no media bytes, URLs or ids)."""
    match part:
        case TextPart() | ReasoningPart():
            return part.text
        case ToolCallPart():
            return f"[tool call {part.tool_name} · {part.tool_call_id}]"
        case ToolResultPart():
            return f"[tool result {part.tool_name} · {part.tool_call_id}]"
        case ImagePart() | AudioPart() | FilePart():
            size = part.byte_size()
            bits = [part.type, part.source_kind(), part.media_type]
            if part.filename:
                bits.append(part.filename)
            if size is not None:
                bits.append(f"{size} bytes")
            return "[" + " · ".join(bits) + "]"
