"""Keeping large values out of Temporal payloads (DESIGN §5).

The workflow never needs the bytes of a tool output, a progress payload or a
long text: activities compose model requests from the file. So every event
that crosses into the workflow passes through ``elide_event``, which replaces
each oversized value with a marker that says what was removed. The file keeps
the value; the ``state`` query shows the marker. For events without large
values it is the identity, so normal turns keep the central invariant
``reduce_turn(read(file)) == state`` exactly; for turns with large values
(tool outputs and progress, and a context budget's summary text in a model
call's request, above ``TOOL_VALUE_BUDGET``, anything else above
``DEFAULT_VALUE_BUDGET``) the invariant is ``reduce_turn(map(elide_event, read(file))) == state``.
"""

from __future__ import annotations

from typing import Any

import orjson

from .events import ModelCallCompleted, TurnEvent, parse_event

DEFAULT_VALUE_BUDGET = 16 * 1024
"""Bytes (of JSON) above which a value stays in the file only."""

TOOL_VALUE_BUDGET = 1024
"""Bytes (of JSON) above which a tool's output, metadata or progress stays in the
file only. Lower than the general budget: the workflow never reads them (the
model activity composes requests from the file), and each one would otherwise
ride in history with the activity that wrote it, so history per model call
would grow with the tools' outputs instead of staying flat."""

_TOOL_KINDS = ("tool_result", "tool_progress")

ELIDED_KEY = "turncoreElided"

# Wire fields that hold free JSON (any value may be replaced by a marker object).
_JSON_FIELDS = {
    "tool_result": (("result", "output"), ("result", "metadata")),
    "tool_progress": (("progress",),),
    "model_call_completed": (("providerMetadata",),),
    # A context budget's summary (``turncore.budget``) is recorded with every call
    # that sends it; the workflow never reads it (activities compose from the file).
    "model_call_requested": (("request", "parameters", "contextBudget", "summary", "text"),),
}
_SMALL_KINDS = (*_TOOL_KINDS, "model_call_requested")
"""Kinds whose free JSON stays in the file above ``TOOL_VALUE_BUDGET``."""


def _size(value: Any) -> int:
    return len(orjson.dumps(value))


def elided_marker(size: int) -> dict[str, Any]:
    return {ELIDED_KEY: {"bytes": size, "where": "the turn file"}}


_ELIDED_TEXT_LEAD = "[elided by turncore: "


def _elided_text(size: int) -> str:
    return f"{_ELIDED_TEXT_LEAD}{size} bytes; the full value is in the turn file]"


def may_hold_elisions(wire: Any) -> bool:
    """Whether a wire value may carry a marker ``elide_wire`` put in: then whoever shows
    it reads the value from the file. It may also be a value that only looks like
    one (a model that wrote the marker's words): reading the file costs a read then,
    and shows the same value."""
    dumped = orjson.dumps(wire)
    return _ELIDED_TEXT_LEAD.encode() in dumped or f'"{ELIDED_KEY}"'.encode() in dumped


def _shrink_strings(value: Any, budget: int) -> tuple[Any, bool]:
    """Replace every string longer than ``budget`` characters (structure is kept)."""
    if isinstance(value, str):
        if len(value) > budget:
            return _elided_text(len(value.encode())), True
        return value, False
    if isinstance(value, list):
        changed = False
        out = []
        for item in value:
            new, c = _shrink_strings(item, budget)
            changed |= c
            out.append(new)
        return (out, True) if changed else (value, False)
    if isinstance(value, dict):
        changed = False
        res: dict[str, Any] = {}
        for k, item in value.items():
            new, c = _shrink_strings(item, budget)
            changed |= c
            res[k] = new
        return (res, True) if changed else (value, False)
    return value, False


def _shrink_message(message: Any, budget: int) -> tuple[Any, bool]:
    """Shrink the text of a message; tool-call inputs stay intact because the
    runtime copies them into invocations and suspension snapshots."""
    if not isinstance(message, dict):
        return message, False
    content = message.get("content")
    if isinstance(content, str):
        new, changed = _shrink_strings(content, budget)
        return ({**message, "content": new}, True) if changed else (message, False)
    if not isinstance(content, list):
        return message, False
    changed = False
    parts: list[Any] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in (
            "text",
            "reasoning",
            "image",
            "file",
            "audio",
        ):
            new, c = _shrink_strings(part, budget)
            changed |= c
            parts.append(new)
        elif isinstance(part, dict) and part.get("type") == "tool-result":
            output = part.get("output")
            if isinstance(output, dict) and _size(output.get("value")) > budget:
                parts.append(
                    {**part, "output": {**output, "value": elided_marker(_size(output["value"]))}}
                )
                changed = True
            else:
                parts.append(part)
        else:
            parts.append(part)
    return ({**message, "content": parts}, True) if changed else (message, False)


def elide_wire(wire: dict[str, Any], budget: int = DEFAULT_VALUE_BUDGET) -> dict[str, Any]:
    """The wire form of an event with every oversized value replaced by a marker."""
    kind = wire.get("type", "")
    out = dict(wire)
    changed = False
    for path in _JSON_FIELDS.get(kind, ()):
        parent: Any = out
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        leaf = path[-1]
        if isinstance(parent, dict) and leaf in parent:
            size = _size(parent[leaf])
            if size > (min(budget, TOOL_VALUE_BUDGET) if kind in _SMALL_KINDS else budget):
                # Copy the parent chain so the caller's dict is not mutated.
                holder = out
                for key in path[:-1]:
                    holder[key] = dict(holder[key])
                    holder = holder[key]
                holder[leaf] = elided_marker(size)
                changed = True
    for key in ("message", "output", "input"):
        if kind in ("model_call_completed", "turn_completed", "turn_created") and key in out:
            new, c = _shrink_message(out[key], budget)
            if c:
                out[key] = new
                changed = True
    if kind == "turn_created":
        context = out.get("context")
        if isinstance(context, list):
            shrunk = [_shrink_message(m, budget) for m in context]
            if any(c for _, c in shrunk):
                out["context"] = [m for m, _ in shrunk]
                changed = True
        agent = out.get("agent")
        resolved = agent.get("resolved") if isinstance(agent, dict) else None
        prompt = resolved.get("systemPrompt") if isinstance(resolved, dict) else None
        if isinstance(prompt, str) and len(prompt) > budget:
            assert isinstance(agent, dict) and isinstance(resolved, dict)
            out["agent"] = {
                **agent,
                "resolved": {**resolved, "systemPrompt": _elided_text(len(prompt.encode()))},
            }
            changed = True
    return out if changed else wire


def elide_event(event: TurnEvent, budget: int = DEFAULT_VALUE_BUDGET) -> TurnEvent:
    wire = event.to_wire()
    out = elide_wire(wire, budget)
    return event if out is wire else parse_event(out, trusted_json=True)


def for_workflow(event: TurnEvent) -> TurnEvent:
    """The copy of an event an activity hands the workflow, which history keeps.

    Elided (``elide_event``), and without two values the file holds that the
    workflow's reducer never reads: the turn id (``""``: the workflow knows
    its own, and ``owned`` puts it back before folding) and a completed model
    call's provider metadata (no state field comes from it). History per model
    call then carries neither an id repeated in every event nor the provider's
    binding record.
    """
    event = elide_event(event)
    if isinstance(event, ModelCallCompleted) and event.provider_metadata is not None:
        return event.model_copy(update={"turn_id": "", "provider_metadata": None})
    return event.model_copy(update={"turn_id": ""})


def owned(event: TurnEvent, turn_id: str) -> TurnEvent:
    """An event as ``for_workflow`` handed it over, with its turn id back (an event
    that kept its id, as histories recorded before carry them, is returned as is)."""
    return event if event.turn_id else event.model_copy(update={"turn_id": turn_id})


def is_elided(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {ELIDED_KEY}
