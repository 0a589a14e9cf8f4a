"""The seed-001 surface event contract, derived from turn events and deltas.

A surface (a CLI, a web page, a remote client) that speaks the v0 ``loop``
vocabulary of the surface contract gets one envelope per observable step::

    {"type": "...", "family": "loop", "turn_id": "...", "payload": {...}}

- ``turn_started``   ``{prompt}``                       from ``turn_created``
- ``item_started``   ``{item_id, item_type}``           an item opened
- ``item_delta``     ``{item_id, chunk}``               a live text/reasoning chunk (ephemeral)
- ``item_completed`` ``{item_id, item_type, ...}``      ``message`` | ``reasoning`` |
  ``tool_use`` | ``tool_result``
- ``turn_completed`` ``{usage, iteration, final}``      a settle point; ``final: true``
  closes the run (a terminal event), ``final: false`` is a suspension
- ``error``          ``{reason}``                       a failed model call or turn

Item ids are turn-scoped (``i1``, ``i2``, …) and are assigned from durable
events only — the step events a model call records as it streams
(``text-start``, ``reasoning-start``, ``tool-call``) and the completed
message — so replaying the file gives every item the same id whether or not
deltas were seen. A delta becomes ``item_delta`` for the item its call has
open; a chunk with no open item (it cannot happen with turncore's recorder,
which writes ``text-start`` before the first chunk is published) is not shown.

Additions allowed by the contract's grow-only rule: ``turn_completed`` also
carries ``status`` (``suspended`` | ``completed`` | ``failed`` |
``cancelled``), ``pending`` (what a suspension waits for) and, when final,
``evidence: "absent"`` (a turncore turn offers no evidence refs) and
``reason`` for a cancelled turn; ``item_completed`` of a ``tool_use`` carries
``tool_call_id``, ``tool_name`` and ``input``; of a ``tool_result`` carries
``tool_call_id``, ``tool_name``, ``output`` and ``is_error``.

``evidence_status`` decodes the evidence marker of a final ``turn_completed``
payload exactly as the contract specifies (the grandfather rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, assert_never

import orjson

from .events import (
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallRequested,
    ModelStepEvent,
    ReasoningDelta,
    StepReasoningEnd,
    StepReasoningStart,
    StepTextEnd,
    StepTextStart,
    StepToolCall,
    TextDelta,
    ToolInputDelta,
    ToolInvocationRequested,
    ToolPermissionClassificationFailed,
    ToolPermissionClassified,
    ToolPermissionRequired,
    ToolPermissionResolved,
    ToolProgress,
    ToolResult,
    TurnCancelled,
    TurnCompleted,
    TurnCreated,
    TurnFailed,
    TurnStreamEvent,
    TurnSuspended,
    TurnUsage,
)
from .messages import ReasoningPart, TextPart, ToolCallPart, UserMessage

SurfaceType = Literal[
    "turn_started", "item_started", "item_delta", "item_completed", "turn_completed", "error"
]
ItemType = Literal["message", "reasoning", "tool_use", "tool_result"]
Evidence = Literal["accepted", "rejected", "absent", "unknown"]


@dataclass(frozen=True)
class SurfaceEvent:
    type: SurfaceType
    turn_id: str
    payload: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "family": "loop",
            "turn_id": self.turn_id,
            "payload": self.payload,
        }


def encode_line(event: SurfaceEvent) -> bytes:
    """The event as one JSON line, newline-terminated."""
    return orjson.dumps(event.to_wire()) + b"\n"


def _usage(usage: TurnUsage) -> dict[str, Any]:
    return usage.to_wire()


def _prompt(message: UserMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(p.text for p in message.content if isinstance(p, TextPart))


@dataclass
class _Call:
    text: list[str] = field(default_factory=list)
    """Ids of the call's message items, in the order they opened."""
    reasoning: list[str] = field(default_factory=list)
    open_text: str | None = None
    open_reasoning: str | None = None
    tools: dict[str, str] = field(default_factory=dict)
    """tool call id → item id of its tool_use item."""


class SurfaceProjector:
    """Feed turn events and deltas in stream order; get the surface events each one makes."""

    def __init__(self) -> None:
        self._next = 0
        self._turn_id = ""
        self._calls: dict[int, _Call] = {}
        self._iterations = 0

    def _item(self) -> str:
        self._next += 1
        return f"i{self._next}"

    def _ev(self, type: SurfaceType, payload: dict[str, Any]) -> SurfaceEvent:
        return SurfaceEvent(type, self._turn_id, payload)

    def _start(self, item_type: ItemType) -> tuple[str, SurfaceEvent]:
        item = self._item()
        return item, self._ev("item_started", {"item_id": item, "item_type": item_type})

    def feed(self, event: TurnStreamEvent) -> list[SurfaceEvent]:
        match event:
            case TurnCreated():
                self._turn_id = event.turn_id
                return [self._ev("turn_started", {"prompt": _prompt(event.input)})]
            case ModelCallRequested():
                self._calls[event.model_call_index] = _Call()
                self._iterations = event.model_call_index + 1
                return []
            case ModelStepEvent():
                return self._step(event)
            case ModelCallCompleted():
                return self._completed(event)
            case ModelCallFailed():
                call = self._calls.get(event.model_call_index)
                if call is not None:
                    call.open_text = call.open_reasoning = None
                return [self._ev("error", {"reason": event.error})]
            case ToolResult():
                item, started = self._start("tool_result")
                output = event.result.output
                return [
                    started,
                    self._ev(
                        "item_completed",
                        {
                            "item_id": item,
                            "item_type": "tool_result",
                            "tool_call_id": event.tool_call_id,
                            "tool_name": event.tool_name,
                            "output": output,
                            "is_error": event.result.is_error,
                        },
                    ),
                ]
            case TurnSuspended():
                pending = [
                    {"kind": "permission", "tool_call_id": p.tool_call_id, "tool_name": p.tool_name}
                    for p in event.pending_permissions
                ] + [
                    {"kind": "async_tool", "tool_call_id": p.tool_call_id, "tool_name": p.tool_name}
                    for p in event.pending_async_tools
                ]
                return [self._boundary(event.usage, False, "suspended", pending=pending)]
            case TurnCompleted():
                return [self._boundary(event.usage, True, "completed")]
            case TurnFailed():
                return [
                    self._ev("error", {"reason": event.error}),
                    self._boundary(event.usage, True, "failed"),
                ]
            case TurnCancelled():
                extra = {"reason": event.reason} if event.reason else {}
                return [self._boundary(event.usage, True, "cancelled", **extra)]
            case TextDelta() | ReasoningDelta():
                call = self._calls.get(event.model_call_index)
                if call is None:
                    return []
                open_item = call.open_text if isinstance(event, TextDelta) else call.open_reasoning
                if open_item is None:
                    return []
                return [self._ev("item_delta", {"item_id": open_item, "chunk": event.delta})]
            case (
                ToolInputDelta()
                | ToolPermissionRequired()
                | ToolPermissionClassified()
                | ToolPermissionClassificationFailed()
                | ToolPermissionResolved()
                | ToolInvocationRequested()
                | ToolProgress()
            ):
                # Not in the v0 vocabulary: permissions and progress are shown
                # by richer surfaces (the web UI), tool input arrives whole
                # with the tool_use item.
                return []
            case _:
                assert_never(event)

    def _boundary(self, usage: TurnUsage, final: bool, status: str, **extra: Any) -> SurfaceEvent:
        payload: dict[str, Any] = {
            "usage": _usage(usage),
            "iteration": self._iterations,
            "final": final,
            "status": status,
            **extra,
        }
        if final:
            payload["evidence"] = "absent"
        return self._ev("turn_completed", payload)

    def _step(self, event: ModelStepEvent) -> list[SurfaceEvent]:
        call = self._calls.setdefault(event.model_call_index, _Call())
        step = event.event
        match step:
            case StepTextStart():
                item, started = self._start("message")
                call.text.append(item)
                call.open_text = item
                return [started]
            case StepReasoningStart():
                item, started = self._start("reasoning")
                call.reasoning.append(item)
                call.open_reasoning = item
                return [started]
            case StepTextEnd():
                call.open_text = None
                return []
            case StepReasoningEnd():
                call.open_reasoning = None
                return []
            case StepToolCall():
                if step.tool_call_id in call.tools:
                    return []
                item, started = self._start("tool_use")
                call.tools[step.tool_call_id] = item
                return [started]
            case _:  # finish-step, error: the completion or failure event reports them
                return []

    def _completed(self, event: ModelCallCompleted) -> list[SurfaceEvent]:
        call = self._calls.setdefault(event.model_call_index, _Call())
        call.open_text = call.open_reasoning = None
        content = event.message.content
        parts = [TextPart(text=content)] if isinstance(content, str) else list(content)
        out: list[SurfaceEvent] = []
        texts, thoughts = iter(call.text), iter(call.reasoning)
        for part in parts:
            if isinstance(part, TextPart):
                if not part.text and not call.text:
                    continue  # an empty answer opened no item
                item = next(texts, None)
                if item is None:
                    item, started = self._start("message")
                    out.append(started)
                out.append(
                    self._ev(
                        "item_completed",
                        {"item_id": item, "item_type": "message", "text": part.text},
                    )
                )
            elif isinstance(part, ReasoningPart):
                item = next(thoughts, None)
                if item is None:
                    item, started = self._start("reasoning")
                    out.append(started)
                out.append(
                    self._ev(
                        "item_completed",
                        {"item_id": item, "item_type": "reasoning", "text": part.text},
                    )
                )
            elif isinstance(part, ToolCallPart):
                found = call.tools.get(part.tool_call_id)
                if found is None:
                    found, started = self._start("tool_use")
                    call.tools[part.tool_call_id] = found
                    out.append(started)
                out.append(
                    self._ev(
                        "item_completed",
                        {
                            "item_id": found,
                            "item_type": "tool_use",
                            "tool_call_id": part.tool_call_id,
                            "tool_name": part.tool_name,
                            "input": part.input,
                        },
                    )
                )
            # media parts of an answer are not items in v0
        return out


_EVIDENCE: frozenset[str] = frozenset({"accepted", "rejected", "absent"})


def evidence_status(payload: Any) -> Evidence:
    """The evidence status a final ``turn_completed`` payload carries (never raises).

    A present ``evidence`` key is authoritative (an unknown value is
    ``unknown``, never ``accepted``); without it, ``refs`` present means a
    legacy accepted record, and neither key means ``unknown`` — never
    ``absent``.
    """
    if not isinstance(payload, dict):
        return "unknown"
    if "evidence" in payload:
        value = payload["evidence"]
        if isinstance(value, str) and value in _EVIDENCE:
            return value  # type: ignore[return-value]
        return "unknown"
    if "refs" in payload:
        return "accepted"
    return "unknown"


__all__ = [
    "SurfaceEvent",
    "SurfaceProjector",
    "encode_line",
    "evidence_status",
]
