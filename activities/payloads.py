"""Activity inputs and results: small dataclasses with JSON-ready fields.

Events cross the Temporal boundary as their wire dicts (camelCase), never
as transcripts: the model activity composes its own request from the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from turncore.permissions import PermissionCheck, PermissionClassification
from turncore.reducer import ToolCallState

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

    @classmethod
    def of(cls, turn_id: str, calls: Sequence[ToolCallState]) -> CheckPermissionsInput:
        return cls(
            turn_id=turn_id,
            calls=[
                CheckCall(
                    tool_call_id=t.tool_call_id,
                    tool_id=t.tool_id or "",
                    tool_name=t.tool_name,
                    input=t.input,
                )
                for t in calls
            ],
        )


@dataclass
class CheckOutcome:
    tool_call_id: str
    required: bool
    request: Any = None
    checker_error: str | None = None


@dataclass
class CheckPermissionsResult:
    outcomes: list[CheckOutcome]

    def checks(self) -> dict[str, PermissionCheck | str]:
        """Per call: the checker's answer, or its error (which fails closed)."""
        return {
            o.tool_call_id: (
                o.checker_error
                if o.checker_error is not None
                else PermissionCheck(required=o.required, request=o.request)
            )
            for o in self.outcomes
        }


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

    @classmethod
    def of(cls, turn_id: str, calls: Sequence[ToolCallState]) -> ClassifyInput:
        requests = []
        for t in calls:
            assert t.permission is not None
            requests.append(
                ClassifyRequest(
                    tool_call_id=t.tool_call_id,
                    tool_name=t.tool_name,
                    input=t.input,
                    request=t.permission.required.request,
                )
            )
        return cls(turn_id=turn_id, requests=requests)


@dataclass
class ClassifyResult:
    classifications: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def decisions(self) -> list[PermissionClassification] | None:
        """The classifier's decisions, or None when it failed (treated as defer)."""
        if self.error is not None:
            return None
        return [PermissionClassification.model_validate(c) for c in self.classifications]


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
