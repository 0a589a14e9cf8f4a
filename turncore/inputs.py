"""External inputs as they arrive, before they are trusted (spec §11.2).

A signal or update reaches the workflow as whatever a Temporal client sent:
no payload, several payloads, a payload whose ``type`` names another input,
megabytes of JSON. ``accept_input`` turns one delivery into a validated
``TurnExternalInput`` or raises ``RejectedInputError`` with the reason, and
``rejection_record`` describes a rejected delivery in bounded form (sizes and
a digest, never the value), so a hostile input can neither raise in a handler
nor grow the workflow's state. Pure: the workflow calls both.

Claim check. A valid async tool result or progress too large to travel
inline is *staged*: the sending client stores its value (``staged_form``
gives the bytes and the reference) in the turn's repository, then sends
only ``{"type", "toolCallId", "staged": {"digest", "size"}}``. The append
activity fetches the bytes and ``resolve_staged`` turns them back into the
input the client meant, validated by the very rules (and with the very
messages) an inline input meets. The value never enters Temporal history.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from .errors import InputTooLargeError, RejectedInputError, StagedValueError
from .events import (
    MAX_STAGED_BYTES,
    STAGED_INPUT_TYPES,
    AsyncToolProgressInput,
    AsyncToolResultInput,
    ExternalDelivery,
    StagedAsyncToolProgressInput,
    StagedAsyncToolResultInput,
    StagedInput,
    StagedValue,
    TurnExternalInput,
    parse_delivery,
    parse_input,
)

__all__ = [
    "INPUT_NAMES",
    "MAX_INPUT_BYTES",
    "MAX_REJECTED_INPUTS",
    "MAX_STAGED_BYTES",
    "accept_input",
    "input_size",
    "rejection_record",
    "resolve_staged",
    "staged_digest",
    "staged_form",
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
    # A validator's own ValueError already says what is wrong and where.
    return f"invalid input at {loc or '$'}: {first['msg'].removeprefix('Value error, ')}"


def accept_input(name: str, args: Sequence[Any]) -> ExternalDelivery:
    """The one input a ``name`` signal or update carries, validated.

    ``cancel`` may come with no input at all (or a null one). The input's ``type`` must be
    the signal's name: a ``permission_decision`` signal never cancels a turn. An input
    carrying ``staged`` is a reference (its value is checked when it is applied).
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
            "(stage a result or progress that large and send a reference to it, as "
            "TurnClient does; keep other large data elsewhere)"
        )
    if isinstance(raw, dict) and raw.get("type") != name:
        raise RejectedInputError(f"the {name} signal carries a {_short(raw.get('type'))} input")
    if isinstance(raw, dict) and "staged" in raw and name not in STAGED_INPUT_TYPES:
        raise RejectedInputError(
            f"a {name} input cannot be staged: send it inline (at most {MAX_INPUT_BYTES} bytes)"
        )
    try:
        parsed = parse_delivery(raw)
    except ValidationError as exc:
        raise RejectedInputError(validation_reason(exc)) from None
    if parsed.type != name:  # a non-dict payload cannot get here; kept for the type checker
        raise RejectedInputError(f"the {name} signal carries a {parsed.type!r} input")
    return parsed


DELIVER_BY = "deliverByMs"
"""The key of an update's delivery terms: the sender's deadline for acceptance."""


def delivery_terms(args: Sequence[Any]) -> tuple[Sequence[Any], int | None]:
    """An input update's arguments without its delivery terms, and the deadline they set.

    ``TurnClient`` sends each input update as ``(input, {"deliverByMs": T})``:
    the run accepts it only until ``T`` (milliseconds since the epoch, by the
    workflow's clock), so a sender that stopped waiting (its run was stuck)
    knows, once ``T`` has passed, that the input can never be applied later.
    Anything else is returned as it came, for ``accept_input`` to judge.
    """
    if len(args) == 2 and isinstance(args[1], dict) and set(args[1]) == {DELIVER_BY}:
        deadline = args[1][DELIVER_BY]
        if isinstance(deadline, int) and not isinstance(deadline, bool):
            return args[:1], deadline
    return args, None


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


# ---------------------------------------------------------------- claim check


def staged_digest(data: bytes) -> str:
    """The digest naming staged bytes: ``sha256:`` and 64 hex digits."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _staged_bytes(value: Any) -> bytes:
    # Compact, key order kept (the journal keeps the value as sent), and
    # strictly JSON: a validated input holds no NaN, so this never refuses one.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def staged_form(input: TurnExternalInput) -> tuple[StagedInput, bytes] | None:
    """The reference and the bytes to stage for ``input``; None if it fits inline.

    Raises ``InputTooLargeError`` when the input cannot be sent at all: it is
    larger than ``MAX_INPUT_BYTES`` and not an async tool result or progress,
    or its value is larger than ``MAX_STAGED_BYTES``.
    """
    wire = input.to_wire()
    size = input_size(wire)
    if size <= MAX_INPUT_BYTES:
        return None
    match input:
        case AsyncToolProgressInput():
            data = _staged_bytes(wire["progress"])
            what = "progress"
        case AsyncToolResultInput():
            data = _staged_bytes(wire["result"])
            what = "result"
        case _:
            raise InputTooLargeError(
                f"the {input.type} input is {size} bytes, larger than {MAX_INPUT_BYTES}; "
                "only async tool results and progress can be staged, so shorten it"
            )
    if len(data) > MAX_STAGED_BYTES:
        raise InputTooLargeError(
            f"the {what} for tool call {input.tool_call_id} is {len(data)} bytes; a staged "
            f"value may be at most {MAX_STAGED_BYTES} bytes: keep the data elsewhere and "
            "send a reference to it (a path or a URL) instead"
        )
    ref = StagedValue(digest=staged_digest(data), size=len(data))
    staged: StagedInput = (
        StagedAsyncToolProgressInput(tool_call_id=input.tool_call_id, staged=ref)
        if what == "progress"
        else StagedAsyncToolResultInput(tool_call_id=input.tool_call_id, staged=ref)
    )
    return staged, data


def check_staged_bytes(tool_call_id: str, ref: StagedValue, data: bytes) -> None:
    """Raise ``StagedValueError`` unless ``data`` has the size and digest ``ref`` names."""
    if len(data) != ref.size:
        raise StagedValueError(
            f"the staged value for tool call {tool_call_id} is {len(data)} bytes, not "
            f"{ref.size}: stage it again and resend the input"
        )
    if staged_digest(data) != ref.digest:
        raise StagedValueError(
            f"the staged value for tool call {tool_call_id} does not match its digest "
            f"{ref.digest}: stage it again and resend the input"
        )


def _not_json(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def resolve_staged(ref: StagedInput, data: bytes) -> TurnExternalInput:
    """The input ``ref`` stands for, from its staged bytes, validated as if sent inline.

    ``StagedValueError`` if the bytes are not the ones referenced or not JSON;
    ``RejectedInputError`` with the inline message if the value is invalid.
    """
    check_staged_bytes(ref.tool_call_id, ref.staged, data)
    try:
        # The stdlib keeps every integer exact, so an unsafe one is refused by
        # validation with the inline message instead of silently rounded.
        value = json.loads(data.decode("utf-8"), parse_constant=_not_json)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise StagedValueError(
            f"the staged value for tool call {ref.tool_call_id} is not JSON ({_clip(str(exc), 120)}): "
            "stage the value as compact UTF-8 JSON and resend the input"
        ) from None
    field = "progress" if ref.type == "async_tool_progress" else "result"
    inline = {"type": ref.type, "toolCallId": ref.tool_call_id, field: value}
    try:
        return parse_input(inline)
    except ValidationError as exc:
        raise RejectedInputError(validation_reason(exc)) from None
