"""External inputs as they arrive, before they are trusted (spec §11.2).

A signal or update reaches the workflow as whatever a Temporal client sent:
no payload, several payloads, a payload whose ``type`` names another input,
megabytes of JSON. ``accept_input`` turns one delivery into a validated
``TurnExternalInput`` or raises ``RejectedInputError`` with the reason, and
``rejection_record`` describes a rejected delivery in bounded form (sizes and
a digest, never the value), so a hostile input can neither raise in a handler
nor grow the workflow's state. Pure: the workflow calls both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from .errors import RejectedInputError
from .events import TurnExternalInput, parse_input

__all__ = [
    "INPUT_NAMES",
    "MAX_INPUT_BYTES",
    "MAX_REJECTED_INPUTS",
    "accept_input",
    "input_size",
    "rejection_record",
    "validation_reason",
]

INPUT_NAMES = ("permission_decision", "async_tool_progress", "async_tool_result", "cancel")

MAX_INPUT_BYTES = 256 * 1024
"""The largest input (its compact JSON, in bytes) a turn accepts. Larger ones are
rejected before they are parsed: they would bloat Temporal history, every
state query and continue-as-new (each capped at 2 MB by the server)."""

MAX_REJECTED_INPUTS = 50
"""How many rejected inputs the ``state`` query lists (the latest ones)."""

_TEXT_LIMIT = 200


def _encode(value: Any) -> bytes:
    # The stdlib keeps integers of any size exact (orjson refuses or rounds them),
    # so even a value the runtime would reject gets a faithful size and digest.
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def _encode_any(value: Any) -> bytes:
    try:
        return _encode(value)
    except (TypeError, ValueError, RecursionError):
        return f"<{type(value).__name__} that is not JSON>".encode()


def input_size(value: Any) -> int:
    """The size of ``value`` as compact JSON, in bytes."""
    return len(_encode_any(value))


def validation_reason(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    loc = ".".join(str(p) for p in first["loc"])
    return f"invalid input at {loc or '$'}: {first['msg']}"


def accept_input(name: str, args: Sequence[Any]) -> TurnExternalInput:
    """The one input a ``name`` signal or update carries, validated.

    ``cancel`` may come with no input at all (or a null one). The input's ``type`` must be
    the signal's name: a ``permission_decision`` signal never cancels a turn.
    """
    if name == "cancel":
        args = [a for a in args if a is not None] or [{"type": "cancel"}]
    if len(args) != 1:
        raise RejectedInputError(f"a {name} signal carries exactly one input, got {len(args)}")
    raw = args[0]
    size = input_size(raw)
    if size > MAX_INPUT_BYTES:
        raise RejectedInputError(
            f"the input is {size} bytes, larger than {MAX_INPUT_BYTES} bytes "
            "(send a large value as a reference to where it is stored)"
        )
    if isinstance(raw, dict) and raw.get("type") != name:
        raise RejectedInputError(f"the {name} signal carries a {_short(raw.get('type'))} input")
    try:
        parsed = parse_input(raw)
    except ValidationError as exc:
        raise RejectedInputError(validation_reason(exc)) from None
    if parsed.type != name:  # a non-dict payload cannot get here; kept for the type checker
        raise RejectedInputError(f"the {name} signal carries a {parsed.type!r} input")
    return parsed


def rejection_record(name: str, args: Sequence[Any], reason: str, at: str) -> dict[str, Any]:
    """What the ``state`` query lists for a rejected input: bounded, whatever came in."""
    record: dict[str, Any] = {"signal": _clip(name)}
    first = args[0] if len(args) == 1 else list(args)
    if isinstance(first, dict):
        if isinstance(first.get("type"), str):
            record["type"] = _clip(first["type"])
        if isinstance(first.get("toolCallId"), str):
            record["toolCallId"] = _clip(first["toolCallId"])
    data = _encode_any(first)
    record["reason"] = _clip(reason, 4 * _TEXT_LIMIT)
    record["size"] = len(data)
    record["digest"] = hashlib.sha256(data).hexdigest()
    record["at"] = at
    return record


def _clip(text: str, limit: int = _TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(value: Any) -> str:
    return _clip(repr(value), 60)
