"""Activity inputs and results: small dataclasses with JSON-ready fields.

Events cross the Temporal boundary as their wire dicts (camelCase), never
as transcripts: the model activity composes its own request from the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

WireEvent = dict[str, Any]


@dataclass
class AppendInput:
    turn_id: str
    events: list[WireEvent]
    known_offset: int
    """The line count the workflow knew before this batch; a retried batch whose
    exact lines already follow it is recognised and not written twice."""
    derive: str | None = None
    """Instead of ``events``, an event the activity derives from the file, for
    decisions that copy values the workflow only holds elided: "completion"."""
    ts: str | None = None


@dataclass
class AppendResult:
    offset: int
    events: list[WireEvent] = field(default_factory=list)
    """Derived events as the workflow should fold them (large values elided)."""


@dataclass
class LoadInput:
    turn_id: str
    start: int = 0
    validate: bool = False
    """Also check the live dependencies (§15.3) against the snapshot, in the same read."""


@dataclass
class LoadResult:
    events: list[WireEvent]
    offset: int
    next_start: int | None = None
    """Set when the events did not fit one payload: load again from here."""


@dataclass
class CheckCall:
    tool_call_id: str
    tool_id: str
    tool_name: str
    input: Any


@dataclass
class CheckPermissionsInput:
    turn_id: str
    calls: list[CheckCall]


@dataclass
class CheckOutcome:
    tool_call_id: str
    required: bool
    request: Any = None
    checker_error: str | None = None


@dataclass
class CheckPermissionsResult:
    outcomes: list[CheckOutcome]


@dataclass
class ClassifyRequest:
    tool_call_id: str
    tool_name: str
    input: Any
    request: Any


@dataclass
class ClassifyInput:
    turn_id: str
    requests: list[ClassifyRequest]


@dataclass
class ClassifyResult:
    classifications: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


@dataclass
class ModelCallInput:
    turn_id: str
    model_call_index: int
    parameters: dict[str, Any] = field(default_factory=dict)
    settle_if_final: bool = True
    """The workflow's standing decision: a response without tool calls completes
    the turn and a provider failure fails it, so the activity may append that
    terminal event itself and save a round trip."""


@dataclass
class ModelCallResult:
    events: list[WireEvent]
    offset: int


@dataclass
class ToolCallInput:
    turn_id: str
    tool_call_id: str
    tool_id: str
    tool_name: str
    input: Any


@dataclass
class ToolCallResult:
    events: list[WireEvent]


@dataclass
class ValidateDependenciesInput:
    turn_id: str


@dataclass
class CreateChildInput:
    parent_turn_id: str
    tool_call_id: str
    ts: str


@dataclass
class CreateChildResult:
    child_turn_id: str | None = None
    error: str | None = None
    """Why no child could be created (an error result for the call, not a turn failure)."""
    events: list[WireEvent] = field(default_factory=list)
    """The link progress appended to the parent, as the workflow should fold it."""
