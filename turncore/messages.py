"""Conversation messages on the wire (DESIGN §2, AI SDK model-message vocabulary).

- user: ``{"role":"user","content": str | [part…]}``
- assistant: ``{"role":"assistant","content": str | [part…]}``
- tool: ``{"role":"tool","content":[tool-result…]}`` (inline context and composed requests)

Media parts carry exactly one source (``url``, inline base64 ``data`` or a
provider ``fileId``), a media type and an optional filename (seed 000,
ContentPart). ``describe_part`` is the projection for humans: it never shows
bytes, URLs or ids.
"""

# No `from __future__ import annotations` here: pydantic would then evaluate
# every field annotation from its string when each model class is built,
# which every strict read pays at start-up (docs/operations.md, "Start-up").
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


def project_media(part: MediaPart) -> dict[str, JsonValue]:
    """A media part as surfaces and debug views show it (seed 000): type, source
    kind, media type, filename and byte size — never the bytes, URL or file id."""
    out: dict[str, JsonValue] = {
        "type": part.type,
        "source": part.source_kind(),
        "mediaType": part.media_type,
    }
    if part.filename:
        out["filename"] = part.filename
    size = part.byte_size()
    if size is not None:
        out["bytes"] = size
    return out


def describe_projection(projected: dict[str, JsonValue]) -> str:
    """``describe_part`` of a media part, from its ``project_media`` form."""
    bits = [
        str(projected[k]) for k in ("type", "source", "mediaType", "filename") if k in projected
    ]
    if "bytes" in projected:
        bits.append(f"{projected['bytes']} bytes")
    return "[" + " · ".join(bits) + "]"


def projected_wire(message: ConversationMessage) -> dict[str, JsonValue]:
    """``message.to_wire()`` with every media part replaced by ``project_media``."""
    wire: dict[str, JsonValue] = message.to_wire()
    if isinstance(message.content, list):
        wire["content"] = [
            project_media(p) if isinstance(p, ImagePart | AudioPart | FilePart) else p.to_wire()
            for p in message.content
        ]
    return wire


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
            return describe_projection(project_media(part))
