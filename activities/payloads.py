"""Activity inputs and results: typed, frozen dataclasses, the one boundary type each.

This is a leaf module: it imports only pure ``turncore`` types, so the
workflow can import it inside the sandbox without loading an activity's
I/O (httpx, model adapters, the file repository). The worker's data
converter (``turncore_temporal.activities.DATA_CONVERTER``, pydantic) turns
the fields into JSON and back, so events cross as ``TurnEvent`` and are
validated once, at the boundary. Events the workflow receives are elided
(DESIGN §5): the model activity composes its own request from the file. They
also come compact (``turncore.elision.for_workflow``): no turn id, no provider
metadata; the workflow puts its turn id back (``owned``) before folding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from turncore.events import (
    StagedInput,
    ToolDescriptor,
    ToolInvocationRequested,
    TurnEvent,
    TurnOutcome,
)
from turncore.jsonvalue import JsonValue
from turncore.permissions import PermissionCheck, PermissionClassification
from turncore.reducer import ToolCallState

Derived = Literal["completion"]
"""Events the append activity derives from the file instead of receiving them:
``completion`` copies the last response, which the workflow holds only elided."""


@dataclass(frozen=True)
class SubagentResultInput:
    """A ``spawn_agent`` call whose result the append activity builds from the
    child turn's file: the child's answer may be past the value budget, and
    the workflow holds it only elided (DESIGN §5)."""

    tool_call_id: str
    child_turn_id: str


@dataclass(frozen=True)
class AppendInput:
    turn_id: str
    events: list[TurnEvent]
    known_offset: int
    """The file's line count as the workflow last saw it; a retried batch that
    already follows it (equal but for ``ts``) is recognised and not written twice."""
    derive: Derived | None = None
    """Instead of ``events``, the event the activity derives from the file."""
    ts: str | None = None
    """The timestamp of the derived event (the workflow's clock)."""
    staged: StagedInput | None = None
    """Instead of ``events``, the events of this input, whose value the activity
    fetches from the turn's storage and validates (the claim check)."""
    subagent: SubagentResultInput | None = None
    """Instead of ``events``, the result of this ``spawn_agent`` call, from its
    child turn's outcome as the child's file records it."""


@dataclass(frozen=True)
class AppendResult:
    offset: int
    """The line the batch ends at on file (the workflow's next ``known_offset``)."""
    events: list[TurnEvent] = field(default_factory=list)
    """Derived events as the workflow should fold them (large values elided); or,
    when an earlier attempt of the batch had landed, the batch as on file."""


@dataclass(frozen=True)
class LoadInput:
    turn_id: str
    start: int = 0
    validate: bool = False
    """Also check the live dependencies (§15.3) against the snapshot, in the same read."""


@dataclass(frozen=True)
class LoadResult:
    events: list[TurnEvent]
    offset: int
    next_start: int | None = None
    """Set when the events did not fit one payload: load again from here."""
    fast_tools: dict[str, float] = field(default_factory=dict)
    """The turn's tools this worker runs fast (as local activities), by tool id,
    with their bounds in seconds. Recorded in history with the load, so a replay
    makes the same choice whatever the worker's configuration is by then."""


@dataclass(frozen=True)
class CheckCall:
    tool_call_id: str
    tool_id: str
    tool_name: str
    input: JsonValue


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class CheckOutcome:
    tool_call_id: str
    required: bool
    request: JsonValue = None
    checker_error: str | None = None
    tool_id: str | None = None
    """The tool id the checker was asked about (set when the model activity checks)."""
    """Why the checker could not answer (the call then fails closed)."""


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ClassifyRequest:
    tool_call_id: str
    tool_name: str
    input: JsonValue
    request: JsonValue


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class ClassifyResult:
    classifications: list[PermissionClassification] = field(default_factory=list)
    error: str | None = None
    """The classifier's failure; its decisions are then treated as defer."""

    def decisions(self) -> list[PermissionClassification] | None:
        """The classifier's decisions, or None when it failed (treated as defer)."""
        return None if self.error is not None else list(self.classifications)


@dataclass(frozen=True)
class ModelCallInput:
    turn_id: str
    model_call_index: int
    compact: bool = False
    """The workflow takes its events compact (``turncore.elision.for_workflow``).
    Workflows from before sent no such field and read the turn id from every event."""


@dataclass(frozen=True)
class ModelCallResult:
    events: list[TurnEvent]
    offset: int
    checks: list[CheckOutcome] | None = None
    """The permission checker's answers for the response's tool calls, asked by
    the model activity right after it recorded the response: the workflow then
    needs no ``check_permissions`` round trip (and no marker in history)."""
    allowed: dict[str, str] | None = None
    """Compact answers (with ``ModelCallInput.compact``): the calls the checker lets
    run with nothing to ask, as call id → the tool id it was asked about. Each
    stands for the ``CheckOutcome`` that requires nothing, so only the calls that
    need a decision or met a checker error are spelled out in ``checks``."""

    def prechecked(self) -> dict[str, CheckOutcome]:
        """Every answer this result brings, by call id."""
        out = {c.tool_call_id: c for c in self.checks or ()}
        for call_id, tool_id in (self.allowed or {}).items():
            out[call_id] = CheckOutcome(tool_call_id=call_id, required=False, tool_id=tool_id)
        return out


@dataclass(frozen=True)
class ToolCallInput:
    turn_id: str
    tool_call_id: str
    tool_id: str
    tool_name: str
    input: JsonValue
    compact: bool = False
    """As ``ModelCallInput.compact``."""


@dataclass(frozen=True)
class ToolCallResult:
    events: list[TurnEvent]


@dataclass(frozen=True)
class FastToolsInput:
    """A batch of fast sync tool calls, run by one local activity.

    The activity appends ``invocations`` itself (all of them, in source order,
    before any of them runs), so a re-executed attempt can tell from the file
    whether a lost one may have started a tool (§23)."""

    turn_id: str
    invocations: list[ToolInvocationRequested]
    bounds: dict[str, float]
    """Seconds each call may run, by tool call id."""
    known_offset: int


@dataclass(frozen=True)
class FastToolsResult:
    events: list[TurnEvent]
    """What a lost attempt had written for these calls, then what this one wrote
    except the invocations it was given (the workflow holds them): elided, in
    file order."""
    offset: int


@dataclass(frozen=True)
class ValidateDependenciesInput:
    turn_id: str


@dataclass(frozen=True)
class MaterializeAgentInput:
    turn_id: str


@dataclass(frozen=True)
class MaterializeAgentResult:
    tools: list[ToolDescriptor]
    """The chain's tool descriptors (§6.7), in advertised order."""


@dataclass(frozen=True)
class CreateChildInput:
    parent_turn_id: str
    tool_call_id: str
    ts: str


@dataclass(frozen=True)
class AwaitChildInput:
    """Wait for a child turn this run did not start (its parent's earlier run was lost)."""

    child_turn_id: str
    workflow_input: dict[str, JsonValue]
    """The TurnWorkflowInput fields to start the child with, should no run serve it."""


@dataclass(frozen=True)
class AwaitChildResult:
    outcome: TurnOutcome
    """The child's terminal outcome (§16.4)."""


@dataclass(frozen=True)
class CreateChildResult:
    child_turn_id: str | None = None
    error: str | None = None
    """Why no child could be created (an error result for the call, not a turn failure)."""
    events: list[TurnEvent] = field(default_factory=list)
    """The link progress appended to the parent, as the workflow should fold it."""
