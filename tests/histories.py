"""Valid turn histories for the reducer, compose, context and CLI tests.

``History`` grows a spec-conformant log one fact at a time, including the
parts ``builders.TurnBuilder`` leaves out: permission records, runtime
results, suspensions with permissions pending, failures and cancellation.
It keeps its own bookkeeping (which calls are open, what is pending) rather
than asking the reducer, so a test that feeds its output to the reducer is
not checking the reducer against itself.

Import as ``from tests.histories import ...``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from turncore.events import (
    AgentSnapshot,
    ContextRef,
    DurableLlmStepStreamEvent,
    InheritedAgentSnapshot,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallRequested,
    ModelDescriptor,
    ModelRequest,
    ModelStepEvent,
    PendingAsyncTool,
    PendingPermission,
    RequestedAgent,
    ResolvedAgent,
    ToolDescriptor,
    ToolInvocationRequested,
    ToolPermissionClassificationFailed,
    ToolPermissionClassified,
    ToolPermissionRequired,
    ToolPermissionResolved,
    ToolProgress,
    ToolResult,
    ToolResultData,
    TurnCancelled,
    TurnCompleted,
    TurnConfig,
    TurnCreated,
    TurnEvent,
    TurnFailed,
    TurnSuspended,
    TurnUsage,
    parse_event,
)
from turncore.messages import (
    AssistantMessage,
    ConversationMessage,
    TextPart,
    ToolCallPart,
    UserMessage,
)
from turncore.reducer import TurnState, reduce_turn

TURN_ID = "2025-11-11T04-36-29Z-0001234-000"
PREV_ID = "2025-11-11T04-30-00Z-0000001-000"
BASE_ID = "2025-11-11T04-20-00Z-0000001-000"

MODEL = ModelDescriptor(provider="openai", model="gpt-4.1")
SYSTEM_PROMPT = "You are a careful assistant."
USAGE = TurnUsage(input_tokens=10, output_tokens=5, total_tokens=15)


def tool(
    name: str, execution: Literal["sync", "async"] = "sync", *, requires_human: bool = False
) -> ToolDescriptor:
    return ToolDescriptor(
        tool_id=f"builtin:{name}",
        name=name,
        description=f"The {name} tool.",
        input_schema={"type": "object"},
        execution=execution,
        requires_human=requires_human,
    )


READ = tool("read_file")
WRITE = tool("write_file")
JOB = tool("run_job", "async")
ASK = tool("ask_human", "async", requires_human=True)
TOOLS: tuple[ToolDescriptor, ...] = (READ, WRITE, JOB, ASK)


def stamp(n: int) -> str:
    """The ``n``-th timestamp of a history: one second apart, ISO-8601 UTC."""
    minutes, seconds = divmod(n, 60)
    return f"2025-11-11T05:{minutes % 60:02d}:{seconds:02d}.000Z"


def created(
    turn_id: str = TURN_ID,
    *,
    tools: Sequence[ToolDescriptor] = TOOLS,
    context: Sequence[ConversationMessage] | ContextRef = (),
    input: str | UserMessage = "Please help.",
    max_model_calls: int = 20,
    auto_permission: bool = False,
    human_available: bool = True,
    inherited_from: str | None = None,
    model: ModelDescriptor = MODEL,
    system_prompt: str = SYSTEM_PROMPT,
    agent_id: str = "assistant",
    requested: RequestedAgent | None = None,
    session_id: str | None = None,
) -> TurnCreated:
    resolved: ResolvedAgent | InheritedAgentSnapshot
    if inherited_from is not None:
        resolved = InheritedAgentSnapshot(
            agent_id=agent_id, model=model, inherited_from=inherited_from
        )
    else:
        resolved = ResolvedAgent(
            agent_id=agent_id, system_prompt=system_prompt, model=model, tools=list(tools)
        )
    return TurnCreated(
        turn_id=turn_id,
        ts=stamp(0),
        schema_version=1,
        session_id=session_id,
        agent=AgentSnapshot(
            requested=requested or RequestedAgent(agent_id=agent_id), resolved=resolved
        ),
        context=context if isinstance(context, ContextRef) else list(context),
        input=input if isinstance(input, UserMessage) else UserMessage(content=input),
        config=TurnConfig(
            auto_permission=auto_permission,
            human_available=human_available,
            max_model_calls=max_model_calls,
        ),
    )


@dataclass
class _Call:
    """The builder's own record of one model-produced tool call."""

    tool_call_id: str
    tool_name: str
    input: Any
    descriptor: ToolDescriptor | None
    required: ToolPermissionRequired | None = None
    classification: str | None = None
    resolved: str | None = None
    invocation: ToolInvocationRequested | None = None
    done: bool = False


@dataclass
class History:
    """A valid turn log under construction; every method appends to ``events``.

    Tool calls are given to ``complete`` as ``(toolCallId, toolName, input)``;
    a name outside the turn's tools is an unknown tool (it can only receive a
    runtime result).
    """

    first: TurnCreated = field(default_factory=created)
    events: list[TurnEvent] = field(default_factory=list)
    calls: dict[str, _Call] = field(default_factory=dict)
    model_calls: int = 0
    open_index: int | None = None
    last_response: AssistantMessage | None = None
    last_batch: list[str] = field(default_factory=list)
    usage: TurnUsage = field(default_factory=TurnUsage)

    def __post_init__(self) -> None:
        if not self.events:
            self.events.append(self.first)

    @property
    def turn_id(self) -> str:
        return self.first.turn_id

    def _add(self, event: Any) -> Any:
        self.events.append(event)
        return event

    def _ts(self) -> str:
        return stamp(len(self.events))

    def _base(self) -> dict[str, Any]:
        return {"turn_id": self.turn_id, "ts": self._ts()}

    # -- model calls --------------------------------------------------------

    def expected_refs(self) -> tuple[list[str], ContextRef | None]:
        index = self.model_calls
        context = self.first.context
        if index == 0:
            if isinstance(context, ContextRef):
                return ["input"], context
            return (["context", "input"] if context else ["input"]), None
        if self.last_response is None:
            return [], None
        return [f"assistant:{index - 1}"] + [f"toolResult:{i}" for i in self.last_batch], None

    def request(self, parameters: dict[str, Any] | None = None) -> ModelCallRequested:
        refs, context_ref = self.expected_refs()
        event = ModelCallRequested(
            **self._base(),
            model_call_index=self.model_calls,
            request=ModelRequest(
                context_ref=context_ref, messages=refs, parameters=parameters or {}
            ),
        )
        self.open_index = self.model_calls
        self.model_calls += 1
        self.last_response = None
        self.last_batch = []
        return self._add(event)

    def step(self, step: DurableLlmStepStreamEvent) -> ModelStepEvent:
        assert self.open_index is not None
        return self._add(
            ModelStepEvent(**self._base(), model_call_index=self.open_index, event=step)
        )

    def complete(
        self,
        text: str = "Done.",
        calls: Sequence[tuple[str, str, Any]] = (),
        *,
        usage: TurnUsage = USAGE,
        finish_reason: str | None = None,
    ) -> ModelCallCompleted:
        assert self.open_index is not None
        message = assistant(text, calls)
        event = ModelCallCompleted(
            **self._base(),
            model_call_index=self.open_index,
            message=message,
            finish_reason=finish_reason or ("tool-calls" if calls else "stop"),
            usage=usage,
        )
        tools = self.tools_by_name()
        for tool_call_id, name, tool_input in calls:
            self.calls[tool_call_id] = _Call(tool_call_id, name, tool_input, tools.get(name))
        self.open_index = None
        self.last_response = message
        self.last_batch = [c[0] for c in calls]
        self.usage = self.usage + usage
        return self._add(event)

    def fail_call(self, error: str = "Model call was interrupted.") -> ModelCallFailed:
        assert self.open_index is not None
        event = ModelCallFailed(**self._base(), model_call_index=self.open_index, error=error)
        self.open_index = None
        return self._add(event)

    def tools_by_name(self) -> dict[str, ToolDescriptor]:
        resolved = self.first.agent.resolved
        return {t.name: t for t in resolved.tools} if isinstance(resolved, ResolvedAgent) else {}

    # -- permissions --------------------------------------------------------

    def require(
        self, tool_call_id: str, request: Any = None, *, checker_error: str | None = None
    ) -> ToolPermissionRequired:
        call = self.calls[tool_call_id]
        event = ToolPermissionRequired(
            **self._base(),
            tool_call_id=tool_call_id,
            tool_name=call.tool_name,
            request=request if request is not None else {"kind": "tool"},
            checker_error=checker_error,
        )
        call.required = event
        return self._add(event)

    def classify(
        self, tool_call_id: str, decision: Literal["allow", "deny", "defer"], reason: str = "policy"
    ) -> ToolPermissionClassified:
        self.calls[tool_call_id].classification = decision
        return self._add(
            ToolPermissionClassified(
                **self._base(), tool_call_id=tool_call_id, decision=decision, reason=reason
            )
        )

    def classification_failed(
        self, tool_call_ids: Sequence[str], error: str = "classifier unavailable"
    ) -> ToolPermissionClassificationFailed:
        for i in tool_call_ids:
            self.calls[i].classification = "failed"
        return self._add(
            ToolPermissionClassificationFailed(
                **self._base(), tool_call_ids=list(tool_call_ids), error=error
            )
        )

    def resolve(
        self,
        tool_call_id: str,
        decision: Literal["allow", "deny"],
        source: Literal["classifier", "human", "human_unavailable"] = "human",
        reason: str | None = None,
    ) -> ToolPermissionResolved:
        self.calls[tool_call_id].resolved = decision
        return self._add(
            ToolPermissionResolved(
                **self._base(),
                tool_call_id=tool_call_id,
                decision=decision,
                source=source,
                reason=reason,
            )
        )

    # -- tools --------------------------------------------------------------

    def invoke(self, tool_call_id: str) -> ToolInvocationRequested:
        call = self.calls[tool_call_id]
        assert call.descriptor is not None, "unknown tools are never invoked"
        event = ToolInvocationRequested(
            **self._base(),
            tool_call_id=tool_call_id,
            tool_id=call.descriptor.tool_id,
            tool_name=call.tool_name,
            execution=call.descriptor.execution,
            input=call.input,
        )
        call.invocation = event
        return self._add(event)

    def progress(self, tool_call_id: str, progress: Any = None) -> ToolProgress:
        call = self.calls[tool_call_id]
        assert call.invocation is not None
        return self._add(
            ToolProgress(
                **self._base(),
                tool_call_id=tool_call_id,
                source=call.invocation.execution,
                progress=progress if progress is not None else {"pct": 50},
            )
        )

    def result(
        self,
        tool_call_id: str,
        output: Any = "ok",
        *,
        is_error: bool = False,
        source: Literal["sync", "async", "runtime"] | None = None,
    ) -> ToolResult:
        """The terminal result; its source defaults to the invocation's execution, or
        ``runtime`` for a call that was never invoked."""
        call = self.calls[tool_call_id]
        if source is None:
            source = call.invocation.execution if call.invocation is not None else "runtime"
        call.done = True
        return self._add(
            ToolResult(
                **self._base(),
                tool_call_id=tool_call_id,
                tool_name=call.tool_name,
                source=source,
                result=ToolResultData(output=output, is_error=is_error),
            )
        )

    # -- settle points ------------------------------------------------------

    def unresolved(self) -> list[str]:
        return [c.tool_call_id for c in self.calls.values() if not c.done]

    def pending_permissions(self) -> list[PendingPermission]:
        return [
            PendingPermission(
                tool_call_id=c.tool_call_id, tool_name=c.tool_name, request=c.required.request
            )
            for c in self.calls.values()
            if not c.done
            and c.required is not None
            and c.resolved is None
            and self._awaits_human(c)
        ]

    def _awaits_human(self, c: _Call) -> bool:
        """§9.3: in an autoPermission turn only a deferred, failed or unclassifiable
        (checker error) permission waits on a human."""
        assert c.required is not None
        if not self.first.config.auto_permission or c.required.checker_error is not None:
            return True
        return c.classification in ("defer", "failed")

    def pending_async(self) -> list[PendingAsyncTool]:
        return [
            PendingAsyncTool(
                tool_call_id=c.tool_call_id,
                tool_id=c.invocation.tool_id,
                tool_name=c.tool_name,
                input=c.input,
            )
            for c in self.calls.values()
            if not c.done and c.invocation is not None and c.invocation.execution == "async"
        ]

    def can_suspend(self) -> bool:
        return self.open_index is None and bool(self.pending_permissions() or self.pending_async())

    def suspend(self) -> TurnSuspended:
        return self._add(
            TurnSuspended(
                **self._base(),
                pending_permissions=self.pending_permissions(),
                pending_async_tools=self.pending_async(),
                usage=self.usage,
            )
        )

    def close_unresolved(self, output: str = "The turn was cancelled.") -> list[ToolResult]:
        """Synthetic runtime error results for every unresolved call, in source order."""
        return [self.result(i, output, is_error=True, source="runtime") for i in self.unresolved()]

    def finish(self) -> TurnCompleted:
        assert self.last_response is not None
        return self._add(
            TurnCompleted(
                **self._base(), output=self.last_response, finish_reason="stop", usage=self.usage
            )
        )

    def fail_turn(self, error: str = "The provider failed.", code: str | None = None) -> TurnFailed:
        return self._add(TurnFailed(**self._base(), error=error, code=code, usage=self.usage))

    def cancel(self, reason: str | None = "cancelled by the user") -> TurnCancelled:
        return self._add(TurnCancelled(**self._base(), reason=reason, usage=self.usage))

    def state(self) -> TurnState:
        return reduce_turn(self.events)


def assistant(text: str, calls: Sequence[tuple[str, str, Any]] = ()) -> AssistantMessage:
    if not calls:
        return AssistantMessage(content=text)
    parts: list[TextPart | ToolCallPart] = [TextPart(text=text)] if text else []
    parts += [ToolCallPart(tool_call_id=i, tool_name=n, input=v) for i, n, v in calls]
    return AssistantMessage(content=list(parts))


# ---------------------------------------------------------------- ready-made turns


def simple_turn(
    turn_id: str = TURN_ID,
    *,
    context: Sequence[ConversationMessage] | ContextRef = (),
    answer: str = "Hello.",
    input: str = "Hi.",
    **kw: Any,
) -> History:
    """created · request · completed (no tools) · turn_completed."""
    h = History(created(turn_id, context=context, input=input, **kw))
    h.request()
    h.complete(answer)
    h.finish()
    return h


def tool_turn(
    turn_id: str = TURN_ID,
    *,
    context: Sequence[ConversationMessage] | ContextRef = (),
    output: Any = "file contents",
    **kw: Any,
) -> History:
    """One sync read_file call answered, then a final answer."""
    h = History(created(turn_id, context=context, input="Read it.", **kw))
    h.request()
    h.complete("Reading.", [("c1", "read_file", {"path": "a.txt"})])
    h.invoke("c1")
    h.result("c1", output)
    h.request()
    h.complete("It says hi.")
    h.finish()
    return h


# ---------------------------------------------------------------- files


def to_line(event: TurnEvent) -> bytes:
    return orjson.dumps(event.to_wire()) + b"\n"


def write_turn(directory: Path, events: Sequence[TurnEvent]) -> Path:
    """Write ``events`` as ``<directory>/<turnId>.jsonl`` with plain file I/O."""
    path = directory / f"{events[0].turn_id}.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for e in events:
            f.write(to_line(e).decode("utf-8"))
    return path


def read_turn_file(path: Path) -> list[TurnEvent]:
    """Plain read: one JSON object per line, each validated as an event."""
    with open(path, encoding="utf-8") as f:
        return [parse_event(orjson.loads(line), trusted_json=True) for line in f]
