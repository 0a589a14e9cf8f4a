"""Durable turn events (spec §7–§13) and the values they carry.

One discriminated union, ``TurnEvent``, on ``type``; one module-level
``TypeAdapter`` reused for every line read or written. Field names on the wire
are the spec's camelCase. Events are facts: they are minted (with ``ts``) by
whoever performs the fact, never by the reducer.
"""

# No `from __future__ import annotations` here: pydantic would then evaluate
# every field annotation from its string when each model class is built,
# which every strict read pays at start-up (docs/operations.md, "Start-up").
import contextlib
import functools
import math
import threading
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias, cast, get_args

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic_core import SchemaValidator

from ._wire import Opt, WireModel
from .errors import InvalidTurnIdError
from .ids import validate_turn_id
from .jsonvalue import TRUSTED_JSON, JsonObject, JsonValue, without_json_checks
from .messages import AssistantMessage, ConversationMessage, UserMessage

SCHEMA_VERSION = 1
DEFAULT_MAX_MODEL_CALLS = 20

# ---------------------------------------------------------------- agents


class ModelDescriptor(WireModel):
    provider: str = Field(min_length=1)
    model: str = Field(min_length=1)

    def label(self) -> str:
        return f"{self.provider}/{self.model}"


class AgentOverrides(WireModel):
    model: Opt[ModelDescriptor] = None
    composition: Opt[JsonValue] = None


class RequestedAgent(WireModel):
    """Caller intent: a registered agent id plus an atomic model override (§6.1)."""

    agent_id: str = Field(min_length=1)
    overrides: Opt[AgentOverrides] = None


class ToolDescriptor(WireModel):
    tool_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    description: str
    input_schema: JsonValue
    execution: Literal["sync", "async"]
    requires_human: bool


class ResolvedAgent(WireModel):
    agent_id: str = Field(min_length=1)
    system_prompt: str
    model: ModelDescriptor
    tools: list[ToolDescriptor]

    @field_validator("tools")
    @classmethod
    def _unique_names(cls, tools: list[ToolDescriptor]) -> list[ToolDescriptor]:
        seen: set[str] = set()
        for t in tools:
            if t.name in seen:
                raise ValueError(f"two tools are advertised under the name {t.name!r}")
            seen.add(t.name)
        return tools


class InheritedAgentSnapshot(WireModel):
    """§6.7: the heavy fields come from the context predecessor's snapshot."""

    agent_id: str = Field(min_length=1)
    model: ModelDescriptor
    inherited_from: str = Field(min_length=1)


ResolvedAgentSnapshot: TypeAlias = ResolvedAgent | InheritedAgentSnapshot


class AgentSnapshot(WireModel):
    requested: RequestedAgent
    resolved: ResolvedAgentSnapshot


class ContextRef(WireModel):
    previous_turn_id: str = Field(min_length=1)

    @field_validator("previous_turn_id")
    @classmethod
    def _a_turn_id(cls, value: str) -> str:
        # The reference becomes a path when it is resolved (§5.1), so a log that
        # names a path-like or impossible id is corrupt where it says so, not
        # only when some later advance follows it.
        try:
            return validate_turn_id(value)
        except InvalidTurnIdError as exc:
            raise ValueError(str(exc)) from None


def _context_kind(value: Any) -> str:
    return "inline" if isinstance(value, list) else "ref"


TurnContext: TypeAlias = Annotated[
    Annotated[ContextRef, Tag("ref")] | Annotated[list[ConversationMessage], Tag("inline")],
    Discriminator(_context_kind),
]
"""Either a reference to the previous turn or inline prior messages (§6.6)."""


class TurnConfig(WireModel):
    auto_permission: bool
    human_available: bool
    max_model_calls: int = Field(ge=1)
    reasoning_effort: Opt[Literal["low", "medium", "high"]] = None


# ---------------------------------------------------------------- usage, tools


class TurnUsage(WireModel):
    input_tokens: Opt[int] = None
    output_tokens: Opt[int] = None
    total_tokens: Opt[int] = None
    reasoning_tokens: Opt[int] = None
    cached_input_tokens: Opt[int] = None

    def __add__(self, other: "TurnUsage") -> "TurnUsage":
        def add(a: int | None, b: int | None) -> int | None:
            if a is None:
                return b
            if b is None:
                return a
            return a + b

        return TurnUsage(
            input_tokens=add(self.input_tokens, other.input_tokens),
            output_tokens=add(self.output_tokens, other.output_tokens),
            total_tokens=add(self.total_tokens, other.total_tokens),
            reasoning_tokens=add(self.reasoning_tokens, other.reasoning_tokens),
            cached_input_tokens=add(self.cached_input_tokens, other.cached_input_tokens),
        )


class ToolResultData(WireModel):
    output: JsonValue
    is_error: bool
    metadata: Opt[JsonValue] = None


class ModelRequest(WireModel):
    """What is NEW since the previous call, as refs into this turn's events (§8.3)."""

    context_ref: Opt[ContextRef] = None
    messages: list[str]
    parameters: JsonObject


# ---------------------------------------------------------------- step events (§8.4)


class StepTextStart(WireModel):
    type: Literal["text-start"] = "text-start"


class StepTextEnd(WireModel):
    type: Literal["text-end"] = "text-end"


class StepReasoningStart(WireModel):
    type: Literal["reasoning-start"] = "reasoning-start"


class StepReasoningEnd(WireModel):
    type: Literal["reasoning-end"] = "reasoning-end"


class StepToolCall(WireModel):
    type: Literal["tool-call"] = "tool-call"
    tool_call_id: str
    tool_name: str
    input: JsonValue


class StepFinish(WireModel):
    type: Literal["finish-step"] = "finish-step"
    finish_reason: str
    usage: TurnUsage


class StepError(WireModel):
    type: Literal["error"] = "error"
    error: str


DurableLlmStepStreamEvent = Annotated[
    StepTextStart
    | StepTextEnd
    | StepReasoningStart
    | StepReasoningEnd
    | StepToolCall
    | StepFinish
    | StepError,
    Field(discriminator="type"),
]

# ---------------------------------------------------------------- events


# ``ts`` (§5.2): an ISO-8601 instant written in UTC. The whole rule is one
# pattern so pydantic-core checks it in Rust on the hot read path (a Python
# validator would cost a call per line): a calendar date (month lengths and
# the Gregorian leap years included), 24-hour time with seconds, an optional
# fraction, and ``Z`` or ``+00:00``.
_DATE = (
    r"(?:[0-9]{4}-(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
    r"|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
    r"|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)"
)
_UTC_TIMESTAMP = (
    rf"^{_DATE}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{{1,9}})?(?:Z|\+00:00)$"
)

UtcTimestamp: TypeAlias = Annotated[str, StringConstraints(pattern=_UTC_TIMESTAMP)]
"""``ts``: an ISO-8601 UTC instant such as ``2025-11-11T04:36:29.000Z``.

Seconds are required, fractions optional (up to nanoseconds), the zone is
``Z`` or ``+00:00``; local times, other offsets and non-dates
(``2025-02-30``) are rejected."""


class _Event(WireModel):
    turn_id: str
    ts: UtcTimestamp


class TurnCreated(_Event):
    type: Literal["turn_created"] = "turn_created"
    schema_version: Literal[1]

    @field_validator("schema_version", mode="before")
    @classmethod
    def _an_integer(cls, value: Any) -> Any:
        # ``true == 1 == 1.0`` in Python, and a strict Literal[1] still takes
        # both; reads coerce nothing (docs/file-format.md, "Lines").
        if type(value) is not int:
            raise ValueError(f"schemaVersion must be the integer 1, not a {type(value).__name__}")
        return value

    session_id: str | None
    agent: AgentSnapshot
    context: TurnContext
    input: UserMessage
    config: TurnConfig


class ModelCallRequested(_Event):
    type: Literal["model_call_requested"] = "model_call_requested"
    model_call_index: int = Field(ge=0)
    request: ModelRequest


class ModelStepEvent(_Event):
    type: Literal["model_step_event"] = "model_step_event"
    model_call_index: int = Field(ge=0)
    event: DurableLlmStepStreamEvent


class ModelCallCompleted(_Event):
    type: Literal["model_call_completed"] = "model_call_completed"
    model_call_index: int = Field(ge=0)
    message: AssistantMessage
    finish_reason: str
    usage: TurnUsage
    provider_metadata: Opt[JsonValue] = None


class ModelCallFailed(_Event):
    type: Literal["model_call_failed"] = "model_call_failed"
    model_call_index: int = Field(ge=0)
    error: str


class ToolPermissionRequired(_Event):
    type: Literal["tool_permission_required"] = "tool_permission_required"
    tool_call_id: str
    tool_name: str
    request: JsonValue
    checker_error: Opt[str] = None


class ToolPermissionClassified(_Event):
    type: Literal["tool_permission_classified"] = "tool_permission_classified"
    tool_call_id: str
    decision: Literal["allow", "deny", "defer"]
    reason: str


class ToolPermissionClassificationFailed(_Event):
    type: Literal["tool_permission_classification_failed"] = "tool_permission_classification_failed"
    tool_call_ids: list[str]
    error: str


class ToolPermissionResolved(_Event):
    type: Literal["tool_permission_resolved"] = "tool_permission_resolved"
    tool_call_id: str
    decision: Literal["allow", "deny"]
    source: Literal["classifier", "human", "human_unavailable"]
    reason: Opt[str] = None
    metadata: Opt[JsonValue] = None


class ToolInvocationRequested(_Event):
    type: Literal["tool_invocation_requested"] = "tool_invocation_requested"
    tool_call_id: str
    tool_id: str
    tool_name: str
    execution: Literal["sync", "async"]
    input: JsonValue


class ToolProgress(_Event):
    type: Literal["tool_progress"] = "tool_progress"
    tool_call_id: str
    source: Literal["sync", "async"]
    progress: JsonValue


class ToolResult(_Event):
    type: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    tool_name: str
    source: Literal["sync", "async", "runtime"]
    result: ToolResultData


class PendingPermission(WireModel):
    tool_call_id: str
    tool_name: str
    request: JsonValue


class PendingAsyncTool(WireModel):
    tool_call_id: str
    tool_id: str
    tool_name: str
    input: JsonValue


class TurnSuspended(_Event):
    type: Literal["turn_suspended"] = "turn_suspended"
    pending_permissions: list[PendingPermission]
    pending_async_tools: list[PendingAsyncTool]
    usage: TurnUsage


class TurnCompleted(_Event):
    type: Literal["turn_completed"] = "turn_completed"
    output: AssistantMessage
    finish_reason: str
    usage: TurnUsage


class TurnFailed(_Event):
    type: Literal["turn_failed"] = "turn_failed"
    error: str
    code: Opt[str] = None
    usage: TurnUsage


class TurnCancelled(_Event):
    type: Literal["turn_cancelled"] = "turn_cancelled"
    reason: Opt[str] = None
    usage: TurnUsage


TurnEvent = Annotated[
    TurnCreated
    | ModelCallRequested
    | ModelStepEvent
    | ModelCallCompleted
    | ModelCallFailed
    | ToolPermissionRequired
    | ToolPermissionClassified
    | ToolPermissionClassificationFailed
    | ToolPermissionResolved
    | ToolInvocationRequested
    | ToolProgress
    | ToolResult
    | TurnSuspended
    | TurnCompleted
    | TurnFailed
    | TurnCancelled,
    Field(discriminator="type"),
]

TerminalEvent: TypeAlias = TurnCompleted | TurnFailed | TurnCancelled

EVENT_TYPES: tuple[str, ...] = tuple(
    get_args(member.model_fields["type"].annotation)[0]
    for member in get_args(get_args(TurnEvent)[0])
)
"""Every event type, in the union's order (derived from it: one list to keep)."""

event_adapter: TypeAdapter[TurnEvent] = TypeAdapter(TurnEvent)


def _model_classes(schema: Any, into: set[type]) -> set[type]:
    if isinstance(schema, dict):
        if schema.get("type") == "model":
            into.add(schema["cls"])
        for v in schema.values():
            _model_classes(v, into)
    elif isinstance(schema, list):
        for v in schema:
            _model_classes(v, into)
    return into


def _wire_exact(schema: Any) -> Any:
    """A copy of a core schema whose every model validates strictly by wire name.

    The same as passing ``strict=True, by_alias=True, by_name=False`` to each
    call, fixed at build time so the hot read loop pays nothing per line for
    it; and optional fields refuse an explicit ``null``.
    """
    if isinstance(schema, dict):
        out = {k: _wire_exact(v) for k, v in schema.items()}
        inner = out.get("schema")
        if (
            out.get("type") == "default"
            and out.get("default") is None
            and isinstance(inner, dict)
            and inner.get("type") == "nullable"
        ):
            # An optional field (``Opt``) is absent or a value, never ``null``
            # on the wire (§5.2; ``field?: T`` admits no null).
            out["schema"] = inner["schema"]
        if out.get("type") == "model":
            out["config"] = {
                **(out.get("config") or {}),
                "strict": True,
                "validate_by_name": False,
                "validate_by_alias": True,
            }
        return out
    if isinstance(schema, list):
        return [_wire_exact(v) for v in schema]
    return schema


def _without_reuse(schema: Any) -> SchemaValidator:
    """A validator built from ``schema`` itself, never from its models' finished ones.

    pydantic-core reuses a model class's finished validator when a schema
    names the class (so ``_wire_exact`` and ``without_json_checks`` would be
    undone); the classes are marked incomplete only while this one is built.
    Builds happen on first use, possibly in several threads at once: the lock
    keeps one thread from saving another's "incomplete" mark as the original.
    (Another thread that builds a schema meanwhile only misses the reuse.)
    """
    models = _model_classes(schema, set())
    with _MARKING:
        saved = {m: m.__dict__.get("__pydantic_complete__") for m in models}
        try:
            for m in models:
                type.__setattr__(m, "__pydantic_complete__", False)
            return SchemaValidator(schema)
        finally:
            for m, was in saved.items():
                type.__setattr__(m, "__pydantic_complete__", was)


_MARKING = threading.Lock()


_EVENT_CLASSES: dict[str, type[WireModel]] = {
    cls.model_fields["type"].default: cls for cls in get_args(get_args(TurnEvent)[0])
}


def _trusted_validator(kind: str) -> SchemaValidator:
    """The validator of one event type for values a strict JSON parser produced.

    Built from the event class's own core schema minus the ``JsonValue``
    checks (``without_json_checks``), so it accepts and rejects exactly what
    ``event_adapter`` does under the ``trusted_json`` context and returns the
    same classes. Choosing it by the line's ``type`` also skips the union's
    dispatch. (tests/test_trusted_parse.py checks every one in full.)
    """
    return _without_reuse(
        _wire_exact(without_json_checks(_EVENT_CLASSES[kind].__pydantic_core_schema__))
    )


def _trusted_path_works() -> bool:
    """Whether the trusted validators really skip the JSON checks.

    Probes a top-level and a nested JSON field: a remaining check would reject
    NaN here (a check on its own is harmless, only slow).
    """
    common = {"turnId": "t", "ts": "2025-01-01T00:00:00Z", "toolCallId": "c", "source": "sync"}
    try:
        _trusted_validator("tool_progress").validate_python({**common, "progress": math.nan})
        _trusted_validator("tool_result").validate_python(
            {**common, "toolName": "n", "result": {"output": math.nan, "isError": False}}
        )
    except ValidationError:
        return False
    return True


class _TrustedValidators(dict[str, SchemaValidator]):
    """Event type → trusted validator, each built the first time a line needs it.

    A read pays start-up only for the event types its file holds (building
    all of them costs more than reading a typical turn). A type that is not
    an event type — or every type, should the probe find the trusted path
    unavailable — is a ``KeyError``, and callers take ``parse_event``'s union
    (same result, just slower).
    """

    _works: bool | None = None

    def __missing__(self, kind: str) -> SchemaValidator:
        if kind not in _EVENT_CLASSES:
            raise KeyError(kind)
        if _TrustedValidators._works is None:
            _TrustedValidators._works = _trusted_path_works()
        if not _TrustedValidators._works:
            raise KeyError(kind)
        built = self[kind] = _trusted_validator(kind)
        return built


TRUSTED_EVENT_VALIDATORS: Mapping[str, SchemaValidator] = _TrustedValidators()
"""Event type → validator for objects from a strict JSON parser (see ``_trusted_validator``).

Index it (``TRUSTED_EVENT_VALIDATORS[kind]``): entries are built on first use,
and a ``KeyError`` sends the caller to ``parse_event``."""


def all_trusted_validators() -> dict[str, SchemaValidator]:
    """Every trusted validator, built now; empty if the trusted path is unavailable."""
    found: dict[str, SchemaValidator] = {}
    for kind in EVENT_TYPES:
        try:
            found[kind] = TRUSTED_EVENT_VALIDATORS[kind]
        except KeyError:
            return {}
    return found


@functools.cache
def _wire_union() -> SchemaValidator | None:
    """The event union as every untrusted read validates it (``_wire_exact``), JSON checks kept.

    Built on the first such read: reading a turn file only needs it for a line
    the trusted path refuses."""
    built = _without_reuse(_wire_exact(event_adapter.core_schema))
    return built if _nested_by_wire_name(built) else None


def _nested_by_wire_name(validator: SchemaValidator) -> bool:
    """Whether a nested model refuses its Python field names, as ``_wire_exact`` makes it.

    pydantic-core may reuse a nested model's own finished validator, which
    accepts ``is_error`` for ``isError``. A probe says so in microseconds
    (the validator's ``repr`` would too, in a tenth of a second of start-up).
    """
    probe = {
        "type": "tool_result",
        "turnId": "t",
        "ts": "2025-01-01T00:00:00Z",
        "toolCallId": "c",
        "source": "sync",
        "toolName": "n",
        "result": {"output": "x", "is_error": False},
    }
    try:
        validator.validate_python(probe)
    except ValidationError:
        return True
    return False


def parse_event(obj: Any, *, trusted_json: bool = False) -> TurnEvent:
    """Validate one decoded JSON object as a TurnEvent (raises pydantic.ValidationError).

    ``trusted_json``: ``obj`` came from a strict JSON parser (``orjson``), so
    the ``JsonValue`` walk is skipped; everything else is validated as always.
    """
    if trusted_json and type(obj) is dict:
        kind = obj.get("type")
        validator = None
        if type(kind) is str:
            with contextlib.suppress(KeyError):
                validator = TRUSTED_EVENT_VALIDATORS[kind]
        if validator is not None:
            try:
                return cast(TurnEvent, validator.validate_python(obj, by_alias=True, by_name=False))
            except ValidationError:
                pass  # the union below raises the same error, located as callers expect
    # Wire names only, JSON types only (§5.2 "reads validate every line
    # strictly"): a line spelling ``turn_id`` for ``turnId``, ``"false"`` for
    # ``false`` or ``"0"`` for ``0`` is not a turn event.
    context = TRUSTED_JSON if trusted_json else None
    union = _wire_union()
    if union is not None:
        return cast(TurnEvent, union.validate_python(obj, context=context))
    return event_adapter.validate_python(
        obj, strict=True, context=context, by_alias=True, by_name=False
    )


_DEFERRED = ConfigDict(defer_build=True)

# ---------------------------------------------------------------- stream-only deltas (§13)


class TextDelta(WireModel):
    model_config = ConfigDict(defer_build=True)

    type: Literal["text_delta"] = "text_delta"
    turn_id: str
    model_call_index: int
    delta: str


class ReasoningDelta(WireModel):
    model_config = ConfigDict(defer_build=True)

    type: Literal["reasoning_delta"] = "reasoning_delta"
    turn_id: str
    model_call_index: int
    delta: str


class ToolInputDelta(WireModel):
    """A fragment of a tool call's input (JSON text) as the model streams it."""

    model_config = ConfigDict(defer_build=True)

    type: Literal["tool_input_delta"] = "tool_input_delta"
    turn_id: str
    model_call_index: int
    tool_call_id: str
    tool_name: str
    delta: str


TurnDelta: TypeAlias = TextDelta | ReasoningDelta | ToolInputDelta
TurnStreamEvent: TypeAlias = TurnEvent | TurnDelta
"""What an execution stream yields: durable events and ephemeral deltas (§13)."""

# ---------------------------------------------------------------- external inputs (§11.2)


class PermissionDecisionInput(WireModel):
    model_config = ConfigDict(defer_build=True)

    type: Literal["permission_decision"] = "permission_decision"
    tool_call_id: str = Field(min_length=1)
    decision: Literal["allow", "deny"]
    metadata: Opt[JsonValue] = None


class AsyncToolProgressInput(WireModel):
    model_config = ConfigDict(defer_build=True)

    type: Literal["async_tool_progress"] = "async_tool_progress"
    tool_call_id: str = Field(min_length=1)
    progress: JsonValue


class AsyncToolResultInput(WireModel):
    model_config = ConfigDict(defer_build=True)

    type: Literal["async_tool_result"] = "async_tool_result"
    tool_call_id: str = Field(min_length=1)
    result: ToolResultData


class CancelInput(WireModel):
    model_config = ConfigDict(defer_build=True)

    type: Literal["cancel"] = "cancel"
    reason: Opt[str] = None


TurnExternalInput = Annotated[
    PermissionDecisionInput | AsyncToolProgressInput | AsyncToolResultInput | CancelInput,
    Field(discriminator="type"),
]
external_input_adapter: TypeAdapter[TurnExternalInput] = TypeAdapter(
    TurnExternalInput, config=_DEFERRED
)


def parse_input(obj: Any) -> TurnExternalInput:
    """Validate an external input in its wire form (raises pydantic.ValidationError).

    Strict like reads: wire names only and JSON types as declared, so
    ``"isError": "yes"`` or ``0`` is rejected rather than coerced to a boolean.
    """
    return external_input_adapter.validate_python(obj, strict=True, by_alias=True, by_name=False)


# ---------------------------------------------------------------- staged inputs (claim check)

MAX_STAGED_BYTES = 64 * 1024 * 1024
"""The largest value (its compact JSON, in bytes) a client may stage for one input."""

STAGED_DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"


class StagedValue(WireModel):
    """Where a staged value is: the SHA-256 of its bytes, and how many there are."""

    model_config = ConfigDict(defer_build=True)

    digest: Annotated[str, StringConstraints(pattern=STAGED_DIGEST_PATTERN)]
    size: int = Field(ge=0, le=MAX_STAGED_BYTES)


class StagedAsyncToolProgressInput(WireModel):
    """``async_tool_progress`` whose ``progress`` value waits in the turn's storage."""

    model_config = ConfigDict(defer_build=True)

    type: Literal["async_tool_progress"] = "async_tool_progress"
    tool_call_id: str = Field(min_length=1)
    staged: StagedValue


class StagedAsyncToolResultInput(WireModel):
    """``async_tool_result`` whose ``result`` object waits in the turn's storage."""

    model_config = ConfigDict(defer_build=True)

    type: Literal["async_tool_result"] = "async_tool_result"
    tool_call_id: str = Field(min_length=1)
    staged: StagedValue


StagedInput = Annotated[
    StagedAsyncToolProgressInput | StagedAsyncToolResultInput,
    Field(discriminator="type"),
]
"""An input sent by reference: only its target and the claim check travel."""
staged_input_adapter: TypeAdapter[StagedInput] = TypeAdapter(StagedInput, config=_DEFERRED)

STAGED_INPUT_TYPES: tuple[str, ...] = ("async_tool_progress", "async_tool_result")

ExternalDelivery: TypeAlias = TurnExternalInput | StagedInput
"""What a turn's signal or update may carry: an input inline, or one by reference."""


def parse_delivery(obj: Any) -> ExternalDelivery:
    """An inline input (``parse_input``), or, when it carries ``staged``, a reference.

    Strict alike: wire names only, JSON types as declared, no extra fields (a
    reference carrying its value as well is refused).
    """
    if isinstance(obj, dict) and "staged" in obj:
        return staged_input_adapter.validate_python(obj, strict=True, by_alias=True, by_name=False)
    return parse_input(obj)


# ---------------------------------------------------------------- outcomes (§16.4)


class CompletedOutcome(WireModel):
    model_config = ConfigDict(defer_build=True)

    status: Literal["completed"] = "completed"
    output: AssistantMessage
    finish_reason: str
    usage: TurnUsage


class SuspendedOutcome(WireModel):
    model_config = ConfigDict(defer_build=True)

    status: Literal["suspended"] = "suspended"
    pending_permissions: list[PendingPermission]
    pending_async_tools: list[PendingAsyncTool]
    usage: TurnUsage


class FailedOutcome(WireModel):
    model_config = ConfigDict(defer_build=True)

    status: Literal["failed"] = "failed"
    error: str
    code: Opt[str] = None
    usage: TurnUsage


class CancelledOutcome(WireModel):
    model_config = ConfigDict(defer_build=True)

    status: Literal["cancelled"] = "cancelled"
    reason: Opt[str] = None
    usage: TurnUsage


TurnOutcome = Annotated[
    CompletedOutcome | SuspendedOutcome | FailedOutcome | CancelledOutcome,
    Field(discriminator="status"),
]
outcome_adapter: TypeAdapter[TurnOutcome] = TypeAdapter(TurnOutcome, config=_DEFERRED)
