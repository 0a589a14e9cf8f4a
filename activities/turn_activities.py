"""The activities that act for the turn workflow.

The workflow decides; these act. Each class holds its injected
dependencies; nothing is looked up from globals. Model calls and sync tools
never retry (one attempt, one port): the workflow recovers by reloading the
file instead. Append, load, permission and classification activities are
safe to retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import orjson
from temporalio import activity
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from turncore.advance import (
    REFUSED_RESPONSE_CODE,
    calls_needing_check,
    check_input,
    completion_event,
    failure_event,
    fast_attempt,
    fast_overrun_result,
    final_answer_events,
    input_events,
    outcome_of,
)
from turncore.agents import (
    AgentResolver,
    ListedTools,
    StaticAgentResolver,
    fallback_models,
    resolve_listed,
)
from turncore.budget import (
    BUDGET_KEY,
    ContextBudgetExceeded,
    RecordedSummary,
    Summariser,
    TokenEstimates,
    fixed_tokens,
    plan_drop,
    plan_summarised_drop,
    recorded_summary,
    summary_input,
    summary_message,
    summary_reserve,
    summary_span_start,
)
from turncore.compose import (
    ComposedPrefix,
    closed_transcript,
    compose_incrementally,
    next_model_request,
)
from turncore.context import ContextResolver
from turncore.elision import elide_event, for_workflow
from turncore.errors import (
    ContextResolutionError,
    CorruptTurnError,
    DependencyError,
    InfrastructureError,
    RejectedInputError,
    TurnExistsError,
)
from turncore.events import (
    SCHEMA_VERSION,
    AgentSnapshot,
    ContextRef,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallRequested,
    ModelDescriptor,
    ModelStepEvent,
    ReasoningDelta,
    RequestedAgent,
    ResolvedAgent,
    StagedInput,
    TextDelta,
    ToolInputDelta,
    ToolProgress,
    ToolResult,
    ToolResultData,
    TurnConfig,
    TurnCreated,
    TurnEvent,
)
from turncore.ids import MINT_ATTEMPTS, TurnIdGenerator
from turncore.inputs import resolve_staged
from turncore.jsonvalue import JsonValue
from turncore.live import LiveHub
from turncore.messages import ConversationMessage, UserMessage
from turncore.model import (
    CancellationToken,
    Dispatch,
    FailureKind,
    Model,
    ModelFailure,
    ReasoningDeltaEvent,
    StepRecorder,
    StreamEvent,
    TextDeltaEvent,
    ToolCallArgsDeltaEvent,
    ToolCallStartEvent,
    build_request,
    completion_fields,
    failure_code,
    failure_message,
)
from turncore.model.routing import falls_back
from turncore.output import with_output
from turncore.permissions import (
    PermissionChecker,
    PermissionCheckInput,
    PermissionClassificationBatch,
    PermissionClassificationInput,
    PermissionClassifier,
)
from turncore.reducer import TurnReducer, TurnState
from turncore.storage.repository import TurnRepository
from turncore.subagents import (
    child_link,
    child_result,
    is_workflow_tool,
    linked_child,
    spawn_request,
)
from turncore.tools import DEFAULT_FAST_TIMEOUT, SyncTool, ToolContext, ToolRegistry

from . import telemetry
from .contract import TurnActivityContract
from .failures import to_application_error
from .payloads import (
    AppendInput,
    AppendResult,
    AwaitChildInput,
    AwaitChildResult,
    CheckCall,
    CheckOutcome,
    CheckPermissionsInput,
    CheckPermissionsResult,
    ClassifyInput,
    ClassifyResult,
    CreateChildInput,
    CreateChildResult,
    FastToolsInput,
    FastToolsResult,
    LoadInput,
    LoadResult,
    MaterializeAgentInput,
    MaterializeAgentResult,
    ModelCallInput,
    ModelCallResult,
    SubagentResultInput,
    ToolCallInput,
    ToolCallResult,
    ValidateDependenciesInput,
)
from .summaries import SummaryTurns, summarise

HEARTBEAT_EVERY = 1.0
CHILD_POLL_SECONDS = 0.25
"""How often a re-attached parent reads its child's file."""


class ModelResolver(Protocol):
    def resolve(self, descriptor: ModelDescriptor) -> Model: ...


Clock = Callable[[], str]


def _elided(events: Sequence[TurnEvent], compact: bool = True) -> list[TurnEvent]:
    """Events as the workflow sees them: large values stay in the file (DESIGN §5),
    and with ``compact`` (``for_workflow``) neither the turn id nor a response's
    provider metadata rides along. A regular activity compacts only when its
    workflow asked: it may run on a worker of another version than the workflow's."""
    return [for_workflow(e) if compact else elide_event(e) for e in events]


LOAD_PAGE_BYTES = 128 * 1024
LOADS_KEPT = 16
"""Loads between pages whose events are kept for their next page (the oldest goes first)."""
TURNS_KEPT = 64
"""Turns whose materialized context and last composed request a worker keeps."""
"""Loads between pages whose events are kept for their next page (the oldest goes first)."""


AppendObserver = Callable[[str, int, Sequence[TurnEvent]], Awaitable[None]]
"""Called with (turn id, the batch's last line number, its lines) after each append."""


@dataclass
class TurnDependencies:
    repository: TurnRepository
    models: ModelResolver
    tools: ToolRegistry
    checker: PermissionChecker
    classifier: PermissionClassifier
    contexts: ContextResolver
    clock: Clock
    hub: LiveHub
    agents: AgentResolver | None = None
    """Resolves sub-agents for ``spawn_agent`` (absent: the tool reports it is unavailable)."""
    ids: TurnIdGenerator | None = None
    on_appended: AppendObserver | None = None
    """Told of every batch the append activity lands (turn id, last line number, the
    lines as on file) — webhook notifications; it must not raise or block for long."""
    context_budget: Callable[[str, ModelDescriptor], int | None] | None = None
    """The context budget in tokens of an agent (by id) on a model; None: no budget."""
    summariser: Callable[[str], Summariser | None] | None = None
    """How an agent (by id) summarises what its budget drops; None: it does not."""
    listed: ListedTools | None = None
    """Tools sub-agents get from elsewhere (MCP servers), listed as a child is created."""


class TurnActivities(TurnActivityContract):
    def __init__(self, deps: TurnDependencies) -> None:
        self._d = deps
        self._loading: dict[str, list[TurnEvent]] = {}
        """Per turn whose load is between pages, the events its first page read."""
        self._contexts: dict[str, tuple[TurnCreated, list[ConversationMessage]]] = {}
        """Per turn, its materialized context and the definition it is of."""
        self._tokens = TokenEstimates()
        self._composed: dict[str, ComposedPrefix] = {}
        """Per turn, its last composed request, from which the next call's is composed."""

    def _budget(
        self,
        turn_id: str,
        agent: ResolvedAgent,
        context: list[ConversationMessage],
        reducer: TurnReducer,
        requested: ModelCallRequested,
    ) -> tuple[int, list[int], int]:
        """Measure the request ``requested`` would send: what every request of the agent
        carries (system prompt, tools), each prefix message, and the current turn.

        Composed as it would be without dropping (from the turn's last composed
        request, so the work does not grow with the turn), then measured with the
        documented estimate (``turncore.budget``); the prefix's messages are the
        same objects turn after turn, so each is measured once per worker.
        """
        trial = reducer.copy()
        trial.apply(requested)
        state = trial.state
        index = requested.model_call_index
        full, prefix = compose_incrementally(
            agent, context, state, index, self._composed.get(turn_id)
        )
        self._keep(self._composed, turn_id, prefix)
        sizes = self._tokens
        prefix_tokens = [sizes.of(m) for m in context]
        current = sum(sizes.of(m) for m in full.messages[len(context) :])
        fixed = fixed_tokens(agent.system_prompt, agent.tools)
        return fixed, prefix_tokens, current

    async def _summary(
        self,
        agent: ResolvedAgent,
        context: list[ConversationMessage],
        dropped: int,
        spare: int,
        summariser: Summariser,
        budget: int,
        reserve: int,
        earlier: RecordedSummary | None,
    ) -> dict[str, JsonValue] | None:
        """The ``summary`` record of a call that drops ``dropped`` messages: the
        ``earlier`` summary (of this turn, else of the turn it continues) if it is of
        the same cut, or a new summary turn (``activities.summaries``) of what is
        newly dropped, given the earlier summary (None: no summary call fits)."""
        if earlier is not None and earlier.dropped == dropped:
            # The same span: reused as recorded, never summarised again (nor paid again).
            record: dict[str, JsonValue] = {"turnId": earlier.turn_id}
            if earlier.text is None:
                record["error"] = "the summary call for this span failed; dropped plainly"
                return record
            record["text"] = earlier.text
        else:
            base = earlier if earlier is not None and earlier.dropped < dropped else None
            if base is not None and base.text is None:
                base = None
            d = self._d
            if d.ids is None:
                raise InfrastructureError("this runtime mints no turn ids: it cannot summarise")
            ids = d.ids

            async def new_id() -> str:
                return await self._free_id(ids)

            async def append(turn_id: str, events: Sequence[TurnEvent]) -> int:
                # Not observed (no webhook): nobody waits on a summary turn, and its
                # end is not the end of a turn of the conversation.
                return await asyncio.to_thread(d.repository.append, turn_id, list(events))

            turns = SummaryTurns(
                repository=d.repository,
                model=d.models.resolve,
                clock=d.clock,
                new_id=new_id,
                append=append,
            )
            span = context[base.dropped if base is not None else 0 : dropped]
            skip = summary_span_start(
                budget,
                reserve,
                summariser.prompt,
                span,
                [self._tokens.of(m) for m in span],
                self._tokens.of(summary_input(len(span), base)),
            )
            if skip == len(span):
                # Not one newly dropped message fits a summary call: the earlier summary
                # goes on as it is (no call to rewrite it from itself), else none.
                if base is None or base.text is None:
                    return None
                record = {"turnId": base.turn_id, "text": base.text}
            else:
                record = await summarise(turns, agent, summariser, span[skip:], base, reserve)
        text = record.get("text")
        if isinstance(text, str):
            # Sent only if it fits what the cut leaves; otherwise the cut alone, as before.
            record["sent"] = self._tokens.of(summary_message(dropped, text)) <= spare
        return record

    async def _earlier_summary(self, state: TurnState) -> RecordedSummary | None:
        """The last summary recorded by this turn's calls, else by the turn it continues
        (its prefix is the start of this turn's, so its cut means the same messages)."""
        for call in reversed(state.model_calls):
            found = recorded_summary(call.request.parameters)
            if found is not None:
                return found
        context = state.definition.context
        if not isinstance(context, ContextRef):
            return None
        previous = await self._state(context.previous_turn_id)
        for call in reversed(previous.model_calls):
            found = recorded_summary(call.request.parameters)
            if found is not None:
                return found
        return None

    @staticmethod
    def _keep(cache: dict[str, Any], turn_id: str, value: Any) -> None:
        """Keep ``value`` for the turn, forgetting the least recently kept past ``TURNS_KEPT``."""
        cache.pop(turn_id, None)
        cache[turn_id] = value
        while len(cache) > TURNS_KEPT:
            cache.pop(next(iter(cache)))

    def _context(self, turn_id: str, state: TurnState) -> list[ConversationMessage]:
        """The turn's materialized context, resolved once per turn definition: the
        prefix every model call of the turn sends (and the composer's cache key)."""
        known = self._contexts.get(turn_id)
        if known is not None and known[0] is state.definition:
            return known[1]
        context = self._d.contexts.resolve(state.definition.context)
        self._keep(self._contexts, turn_id, (state.definition, context))
        return context

    # -- helpers ------------------------------------------------------------

    async def _read(self, turn_id: str) -> list[TurnEvent]:
        return await asyncio.to_thread(self._d.repository.read, turn_id)

    async def _append(self, turn_id: str, events: Sequence[TurnEvent]) -> int:
        end = await asyncio.to_thread(self._d.repository.append, turn_id, list(events))
        if self._d.on_appended is not None:
            await self._d.on_appended(turn_id, end, events)
        return end

    async def _reduced(self, turn_id: str) -> TurnReducer:
        """The file reduced, reading only what is new since the last time (see
        ``TurnRepository.reduced``): per-call work does not grow with the turn."""
        return await asyncio.to_thread(self._d.repository.reduced, turn_id)

    async def _state(self, turn_id: str) -> TurnState:
        return (await self._reduced(turn_id)).state

    # -- safe to retry ------------------------------------------------------

    @activity.defn
    async def append_events(self, input: AppendInput) -> AppendResult:
        derived: list[TurnEvent] = []
        try:
            if input.staged is not None:
                derived = await self._staged_events(input, input.staged)
            elif input.subagent is not None:
                derived = await self._subagent_result(input, input.subagent)
            elif input.derive == "completion":
                reduced = await self._reduced(input.turn_id)
                state = reduced.state
                if state.terminal is not None and state.terminal.type == "turn_completed":
                    return AppendResult(offset=reduced.event_count, events=[])  # landed earlier
                derived = [completion_event(state, input.ts or self._d.clock())]
            events = derived or input.events
            outcome = await asyncio.to_thread(
                self._d.repository.append_once,
                input.turn_id,
                events,
                known_offset=input.known_offset,
            )
        except (CorruptTurnError, InfrastructureError, RejectedInputError) as exc:
            raise to_application_error(exc) from exc
        if outcome.landed is None:  # an earlier attempt's span already recorded them
            telemetry.decision_events(events)
        # An earlier attempt landed (a replayed workflow task stamped the batch
        # anew): the workflow folds the lines as they are on file.
        on_file = outcome.landed if outcome.landed is not None else derived
        if self._d.on_appended is not None:
            # A retried append whose lines had landed reports them again: the observer
            # makes the same deliveries from the same line numbers, so nothing is lost
            # when the first attempt died before it was told.
            await self._d.on_appended(input.turn_id, outcome.end, on_file or events)
        return AppendResult(offset=outcome.end, events=_elided(on_file))

    async def _staged_events(self, input: AppendInput, staged: StagedInput) -> list[TurnEvent]:
        """The events of a staged input, from its value in the turn's storage.

        The value is fetched, checked against the reference's digest and size
        and validated exactly as the inline input would be; the events are
        built against the log as the workflow saw it (its first ``known_offset``
        lines), so a retry builds the same batch and ``append_once`` finds it.
        Anything wrong raises ``RejectedInputError``; nothing is written then.
        """
        on_file = await self._read(input.turn_id)
        state = TurnReducer.of(on_file[: input.known_offset]).state
        data = await asyncio.to_thread(
            self._d.repository.fetch_staged, input.turn_id, staged.staged
        )
        resolved = resolve_staged(staged, data)
        check_input(state, resolved)
        return input_events(state, resolved, input.ts or self._d.clock())

    async def _subagent_result(
        self, input: AppendInput, ref: SubagentResultInput
    ) -> list[TurnEvent]:
        """The result of a ``spawn_agent`` call: its child's outcome as the child's file
        records it. The workflow holds the child's answer only elided (DESIGN §5), so
        the parent's file gets the answer from here, whatever its size."""
        parent = await self._state(input.turn_id)
        call = parent.tool_call(ref.tool_call_id)
        if call is None or call.invocation is None:
            raise CorruptTurnError(f"tool call {ref.tool_call_id} is not awaiting a sub-agent")
        child = await self._state(ref.child_turn_id)
        outcome = outcome_of(child)
        if child.terminal is None or outcome is None:
            raise InfrastructureError(
                f"sub-agent {ref.child_turn_id} of {ref.tool_call_id} has not ended"
            )
        return [
            ToolResult(
                turn_id=input.turn_id,
                ts=input.ts or self._d.clock(),
                tool_call_id=ref.tool_call_id,
                tool_name=call.tool_name,
                source="sync",
                result=child_result(ref.child_turn_id, outcome),
            )
        ]

    @activity.defn
    async def load_turn(self, input: LoadInput) -> LoadResult:
        """The file's events from ``start``, elided, in pages that fit a payload."""
        try:
            # The pages of one load come from one read: the first page reads and
            # validates the file, the next ones continue in what it read (a
            # long turn's reload reads its file once, not once per page).
            events = self._loading.pop(input.turn_id, None) if input.start else None
            if events is None or len(events) < input.start:
                events = await self._read(input.turn_id)
            if input.validate:
                state = (await self._reduced(input.turn_id)).state
                if state.terminal is None:
                    self._check_dependencies(state)
        except (CorruptTurnError, InfrastructureError) as exc:
            raise to_application_error(exc) from exc
        page: list[TurnEvent] = []
        size = 0
        fast = self._fast_tools(events) if input.start == 0 else {}
        for i in range(input.start, len(events)):
            elided = for_workflow(events[i])
            size += len(orjson.dumps(elided.to_wire()))
            if page and size > LOAD_PAGE_BYTES:
                self._loading[input.turn_id] = events
                while len(self._loading) > LOADS_KEPT:
                    self._loading.pop(next(iter(self._loading)))
                return LoadResult(events=page, offset=len(events), next_start=i, fast_tools=fast)
            page.append(elided)
        return LoadResult(events=page, offset=len(events), fast_tools=fast)

    def _fast_tools(self, events: Sequence[TurnEvent]) -> dict[str, float]:
        """The turn's tools this worker runs fast: its snapshot's, or for an inherited
        snapshot (whose tools live in its chain) every fast tool registered here."""
        first = events[0] if events else None
        if not isinstance(first, TurnCreated):
            return {}
        resolved = first.agent.resolved
        if isinstance(resolved, ResolvedAgent):
            return self._d.tools.fast_tools(t.tool_id for t in resolved.tools)
        return self._d.tools.fast_tools()

    @activity.defn
    async def create_child_turn(self, input: CreateChildInput) -> CreateChildResult:
        """Create the child turn of a ``spawn_agent`` call and link it durably.

        Idempotent: a call that already links a child gets that child back.
        The link is appended to the parent before the child's first line is
        written, so an attempt that fails between the two leaves a link whose
        child the next attempt creates, never a child turn that nothing links
        (and that nothing would ever run).
        """
        d = self._d
        try:
            state = await self._state(input.parent_turn_id)
        except (CorruptTurnError, InfrastructureError) as exc:
            raise to_application_error(exc) from exc
        call = state.tool_call(input.tool_call_id)
        if call is None or call.invocation is None or call.result is not None:
            raise to_application_error(
                CorruptTurnError(f"tool call {input.tool_call_id} is not awaiting a sub-agent")
            )
        linked = linked_child(call.progress)
        # The link as on file: an earlier attempt may have appended it and
        # failed before the workflow heard (it skips a link it already has).
        on_file = [p for p in call.progress if linked_child([p]) is not None][:1]
        try:
            if linked is not None and await asyncio.to_thread(d.repository.exists, linked):
                return CreateChildResult(child_turn_id=linked, events=_elided(on_file))
        except InfrastructureError as exc:
            raise to_application_error(exc) from exc
        request = spawn_request(call.input)
        if isinstance(request, str):
            return CreateChildResult(error=request)
        if d.agents is None or d.ids is None:
            return CreateChildResult(error="sub-agents are not configured in this runtime")
        agent_id, prompt = request
        requested = RequestedAgent(agent_id=agent_id)
        try:
            resolved = await resolve_listed(d.agents, d.listed, requested)
        except DependencyError as exc:
            return CreateChildResult(error=f"cannot start sub-agent {agent_id!r}: {exc}")
        if isinstance(d.agents, StaticAgentResolver):
            # A child answers in its agent's shape too (turncore.output): the
            # parent gets the JSON answer as the child's text.
            requested = with_output(requested, d.agents.output_for(requested))
        parent = state.definition
        try:
            child_id = linked if linked is not None else await self._free_id(d.ids)
        except InfrastructureError as exc:
            raise to_application_error(exc) from exc
        created = TurnCreated(
            turn_id=child_id,
            ts=input.ts,
            schema_version=SCHEMA_VERSION,
            session_id=parent.session_id,
            agent=AgentSnapshot(
                requested=requested,
                # Depth is capped at one: a child never spawns agents itself.
                resolved=resolved.model_copy(
                    update={"tools": [t for t in resolved.tools if not is_workflow_tool(t)]}
                ),
            ),
            context=[],
            input=UserMessage(content=prompt),
            config=TurnConfig(
                auto_permission=parent.config.auto_permission,
                human_available=parent.config.human_available,
                max_model_calls=parent.config.max_model_calls,
                reasoning_effort=parent.config.reasoning_effort,
            ),
        )
        try:
            if linked is None:
                link = ToolProgress(
                    turn_id=parent.turn_id,
                    ts=input.ts,
                    tool_call_id=input.tool_call_id,
                    source="sync",
                    progress=child_link(child_id),
                )
                await self._append(parent.turn_id, [link])
                on_file = [link]
            try:
                await asyncio.to_thread(d.repository.create, created)
            except TurnExistsError:
                # A concurrent attempt of this spawn made it: the same first line.
                # Anything else holds the id (another process minted it in the
                # same instant): never link a turn this spawn did not write.
                on_disk = await asyncio.to_thread(d.repository.read, child_id)
                if on_disk[:1] != [created]:
                    raise InfrastructureError(
                        f"sub-agent id {child_id} was taken by another turn as it was "
                        "created; the call is recovered like any failed spawn"
                    ) from None
        except (CorruptTurnError, InfrastructureError) as exc:
            raise to_application_error(exc) from exc
        return CreateChildResult(child_turn_id=child_id, events=_elided(on_file))

    async def _free_id(self, ids: TurnIdGenerator) -> str:
        """A new child id no turn has yet (another process may mint the same one)."""
        for _ in range(MINT_ATTEMPTS):
            child_id = ids.next_id()
            if not await asyncio.to_thread(self._d.repository.exists, child_id):
                return child_id
        raise InfrastructureError(f"{MINT_ATTEMPTS} fresh sub-agent ids were all taken")

    @activity.defn
    async def await_child_turn(self, input: AwaitChildInput) -> AwaitChildResult:
        """Re-attach a recovered parent to the child turn its lost run had started.

        The child keeps its own file and workflow (a lost parent abandons its
        children rather than cancelling them). This waits, heartbeating, until
        the child's file records its end, starting a run for the child from its
        file if none serves it. Cancelling this activity cancels the child.
        """
        child_id = input.child_turn_id
        client = activity.client()
        handle = client.get_workflow_handle(child_id)
        started = False
        try:
            while True:
                try:
                    events = await self._read(child_id)
                except (CorruptTurnError, InfrastructureError) as exc:
                    raise to_application_error(exc) from exc
                state = TurnReducer.of(events).state
                if state.terminal is not None:
                    # Elided, like every value that crosses into the workflow: the
                    # parent's result is built from the child's file (``subagent``).
                    outcome = outcome_of(TurnReducer.of([elide_event(e) for e in events]).state)
                    assert outcome is not None
                    return AwaitChildResult(outcome=outcome)
                if not started:
                    # USE_EXISTING: a child still running keeps its run; a lost one
                    # gets a new run that resumes from its file (§23).
                    await client.start_workflow(
                        "Turn",
                        {**input.workflow_input, "turn_id": child_id},
                        id=child_id,
                        task_queue=activity.info().task_queue,
                        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                    )
                    started = True
                activity.heartbeat()
                await asyncio.sleep(CHILD_POLL_SECONDS)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await handle.cancel()
            raise

    @activity.defn
    async def validate_dependencies(self, input: ValidateDependenciesInput) -> None:
        """§15.3: the live model and tools must match the snapshot before advancing."""
        try:
            self._check_dependencies(await self._state(input.turn_id))
        except ContextResolutionError as exc:
            # An earlier turn's file, not this worker's code: no app brings it back.
            raise to_application_error(exc) from exc
        except DependencyError as exc:
            # What is missing is this worker's to have: say how it gets it.
            missing = DependencyError(
                f"{exc}; the worker that took the turn lacks it: start workers with the app "
                "that defines it (--app MODULE:ATTR or TURNS_APP)"
            )
            raise to_application_error(missing) from exc
        except InfrastructureError as exc:
            raise to_application_error(exc) from exc

    @activity.defn
    async def materialize_agent(self, input: MaterializeAgentInput) -> MaterializeAgentResult:
        """The tools an inherited agent snapshot resolves to through its chain (§6.7)."""
        try:
            state = await self._state(input.turn_id)
            agent = await asyncio.to_thread(self._d.contexts.resolve_agent, state.definition)
        except (InfrastructureError, DependencyError) as exc:
            raise to_application_error(exc) from exc
        return MaterializeAgentResult(tools=list(agent.tools))

    def _check_dependencies(self, state: TurnState) -> None:
        agent = self._d.contexts.resolve_agent(state.definition)
        self._d.contexts.resolve(state.definition.context)
        self._d.models.resolve(agent.model)
        self._d.tools.check_all(agent.tools)

    @activity.defn
    async def check_permissions(self, input: CheckPermissionsInput) -> CheckPermissionsResult:
        return CheckPermissionsResult(outcomes=await self._checks(input.turn_id, input.calls))

    async def _checks(self, turn_id: str, calls: Sequence[CheckCall]) -> list[CheckOutcome]:
        outcomes: list[CheckOutcome] = []
        for call in calls:
            try:
                check = await self._d.checker.check(
                    PermissionCheckInput(
                        turn_id=turn_id,
                        tool_call_id=call.tool_call_id,
                        tool_id=call.tool_id,
                        tool_name=call.tool_name,
                        input=call.input,
                    )
                )
            except Exception as exc:  # fails closed: recorded, never executed automatically
                outcomes.append(
                    CheckOutcome(
                        tool_call_id=call.tool_call_id,
                        required=True,
                        checker_error=f"{type(exc).__name__}: {exc}"[:500],
                        tool_id=call.tool_id,
                    )
                )
                continue
            outcomes.append(
                CheckOutcome(
                    tool_call_id=call.tool_call_id,
                    required=check.required,
                    request=check.request,
                    tool_id=call.tool_id,
                )
            )
        return outcomes

    @activity.defn
    async def classify_permissions(self, input: ClassifyInput) -> ClassifyResult:
        try:
            state = await self._state(input.turn_id)
            messages = self._d.contexts.resolve(state.definition.context)
            batch = PermissionClassificationBatch(
                turn_id=input.turn_id,
                messages=[*messages, *closed_transcript(state)],
                requests=[
                    PermissionClassificationInput(
                        tool_call_id=r.tool_call_id,
                        tool_name=r.tool_name,
                        input=r.input,
                        request=r.request,
                    )
                    for r in input.requests
                ],
            )
            # Heartbeats carry the workflow's cancellation to the classifier (§22).
            heartbeat = asyncio.create_task(_heartbeat_forever())
            try:
                result = await self._d.classifier.classify(batch)
            finally:
                heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a classifier failure is a modelled defer, not a crash
            return ClassifyResult(error=f"{type(exc).__name__}: {exc}"[:500])
        return ClassifyResult(classifications=list(result))

    # -- one attempt only ---------------------------------------------------

    @activity.defn
    async def call_model(self, input: ModelCallInput) -> ModelCallResult:
        d = self._d
        turn_id = input.turn_id
        try:
            reducer = await self._reduced(turn_id)
            state = reducer.state
            if len(state.model_calls) != input.model_call_index or state.open_model_call():
                raise CorruptTurnError(
                    f"the workflow asked for model call {input.model_call_index} but the file "
                    f"has {len(state.model_calls)} calls"
                )
            agent = d.contexts.resolve_agent(state.definition)
            context = self._context(turn_id, state)
            model = d.models.resolve(agent.model)
            # The turn's fallback models (its file's requested composition), tried in
            # order when the one before fails transiently before any output.
            chain = [(agent.model, model)] + [
                (fallback, d.models.resolve(fallback))
                for fallback in fallback_models(state.definition.agent.requested)
            ]
        except (InfrastructureError, DependencyError) as exc:
            raise to_application_error(exc) from exc

        written: list[TurnEvent] = []
        streamed = [0]  # stream events of this call so far: none yet, a fallback may follow
        fell_back: list[dict[str, Any]] = []

        async def commit(*events: TurnEvent) -> None:
            for e in events:
                reducer.apply(e)  # the same gate the repository applies
            await self._append(turn_id, events)
            written.extend(events)

        requested = ModelCallRequested(
            turn_id=turn_id,
            ts=d.clock(),
            model_call_index=input.model_call_index,
            request=next_model_request(state),
        )
        over_budget: ContextBudgetExceeded | None = None
        budget = d.context_budget(agent.agent_id, agent.model) if d.context_budget else None
        if budget is not None:
            decision: dict[str, JsonValue]
            fixed, prefix_tokens, current = self._budget(
                turn_id, agent, context, reducer, requested
            )
            try:
                dropped = plan_drop(budget, fixed, context, prefix_tokens, current)
                decision = {"tokens": budget, "dropped": dropped}
            except ContextBudgetExceeded as exc:
                over_budget, decision = exc, {"tokens": budget, "dropped": len(context)}
            summariser = d.summariser(agent.agent_id) if d.summariser is not None else None
            if over_budget is None and dropped and summariser is not None:
                # A summary call streams nothing the worker sees: beat for it meanwhile.
                beat = asyncio.create_task(_heartbeat_forever())
                try:
                    reserve = summary_reserve(summariser, budget)
                    before = await self._earlier_summary(state)
                    cut = plan_summarised_drop(
                        budget,
                        reserve,
                        fixed,
                        context,
                        prefix_tokens,
                        current,
                        before.dropped if before is not None else None,
                    )
                    if cut is not None:  # else no summary fits beside this turn: plain
                        spare = budget - fixed - current - sum(prefix_tokens[cut:])
                        decision["dropped"] = cut
                        summary = await self._summary(
                            agent, context, cut, spare, summariser, budget, reserve, before
                        )
                        if summary is not None:
                            decision["summary"] = summary
                except (InfrastructureError, CorruptTurnError, DependencyError) as exc:
                    raise to_application_error(exc) from exc
                finally:
                    beat.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await beat
            params = {**requested.request.parameters, BUDGET_KEY: decision}
            recorded = requested.request.model_copy(update={"parameters": params})
            requested = requested.model_copy(update={"request": recorded})
        await commit(requested)  # the durable barrier precedes the side effect (§4.4)
        index = input.model_call_index
        recorder = StepRecorder()
        tool_names: dict[str, str] = {}
        # A step event the repository could not store ends the attempt through
        # the sink; the storage failure is then the activity's error (§21.4),
        # not a failure of the call or the turn.
        storage_failure: list[CorruptTurnError | InfrastructureError] = []

        async def steps(events: list[Any]) -> None:
            if events:
                await commit(
                    *(
                        ModelStepEvent(
                            turn_id=turn_id, ts=d.clock(), model_call_index=index, event=e
                        )
                        for e in events
                    )
                )

        async def sink(event: StreamEvent) -> None:
            streamed[0] += 1
            if time.monotonic() - started >= HEARTBEAT_EVERY:
                # Temporal sends a call's first beat at once (then one a second):
                # a call over within a second needs none (each is a write on the
                # server), and a cancel still reaches a longer one within a second.
                activity.heartbeat()
            # Durable step events land before the next stream event is read (§13).
            try:
                await steps(recorder.on_event(event))
            except (CorruptTurnError, InfrastructureError) as exc:
                storage_failure.append(exc)
                raise
            if isinstance(event, TextDeltaEvent):
                d.hub.publish(TextDelta(turn_id=turn_id, model_call_index=index, delta=event.text))
            elif isinstance(event, ReasoningDeltaEvent):
                d.hub.publish(
                    ReasoningDelta(turn_id=turn_id, model_call_index=index, delta=event.text)
                )
            elif isinstance(event, ToolCallStartEvent):
                tool_names[event.tool_call_id] = event.tool_name
            elif isinstance(event, ToolCallArgsDeltaEvent):
                d.hub.publish(
                    ToolInputDelta(
                        turn_id=turn_id,
                        model_call_index=index,
                        tool_call_id=event.tool_call_id,
                        tool_name=tool_names.get(event.tool_call_id, ""),
                        delta=event.fragment,
                    )
                )

        # The span covers the provider call (not the barrier append before it).
        span = telemetry.start_span(f"chat {agent.model.model}", client=True)
        telemetry.chat_started(
            span, model.binding.protocol, agent.model.provider, agent.model.model, index
        )
        started = time.monotonic()
        outcome_label, usage_seen = "cancelled", None
        cancel = CancellationToken()
        binding = model.binding
        # The heartbeat runs through the whole call, including routing's waits
        # before a retry, so a long Retry-After never looks like a dead worker.
        heartbeat = asyncio.create_task(_heartbeat_forever())
        try:
            failure: ModelFailure | None = None
            cancelled = False
            try:
                if over_budget is not None:
                    # Before dispatch: nothing was sent, and the failure says why.
                    raise ModelFailure(
                        FailureKind.CONTEXT_BUDGET, Dispatch.NOT_SENT, str(over_budget)
                    )
                composed, prefix = compose_incrementally(
                    agent, context, reducer.state, index, self._composed.pop(turn_id, None)
                )
                self._keep(self._composed, turn_id, prefix)
                parameters = dict(composed.parameters)
                if composed.reasoning_effort is not None:
                    parameters["reasoningEffort"] = composed.reasoning_effort
                telemetry.chat_request_content(span, composed.system, composed.messages)
                for position, (descriptor, candidate) in enumerate(chain):
                    model, binding = candidate, candidate.binding
                    request = build_request(
                        model=composed.model if position == 0 else descriptor,
                        system_prompt=composed.system,
                        tools=agent.tools,
                        messages=composed.messages,
                        parameters=parameters,
                        binding=binding,
                        output_schema=composed.output_schema,
                    )
                    # Shielded: a Temporal cancellation sets the token instead of tearing
                    # the attempt down, so the failure it ends with keeps its evidence.
                    attempt = asyncio.ensure_future(model.turn(request, sink, cancel.clone()))
                    try:
                        outcome = await asyncio.shield(attempt)
                    except asyncio.CancelledError:
                        cancel.cancel()
                        if not _cancelled_by_the_workflow():
                            # Not the turn's cancellation: this worker is stopping (a
                            # detached `turns run`, a redeploy), or the server gave up
                            # on this attempt (a timeout) and recovery owns the call
                            # now. Record nothing; the open request is the recovery
                            # table's interrupted call, re-issued by a worker (§23).
                            attempt.cancel()
                            await asyncio.gather(attempt, return_exceptions=True)
                            raise
                        cancelled = True
                        await attempt  # cancellation wins over completion: the port raises
                        raise ModelFailure(
                            FailureKind.CANCELLED, Dispatch.ACCEPTED, "the attempt was cancelled"
                        ) from None
                    except ModelFailure as exc:
                        last = position == len(chain) - 1
                        if last or streamed[0] or cancel.cancelled or not falls_back(exc):
                            raise
                        # Nothing streamed and the provider is unavailable: the next
                        # model answers this same call; the evidence stays with it.
                        fell_back.append(
                            {
                                "model": descriptor.label(),
                                "code": failure_code(exc),
                                "error": failure_message(exc, binding),
                            }
                        )
                        activity.logger.warning(
                            "model call %s of %s: %s failed (%s); falling back to %s",
                            index,
                            turn_id,
                            descriptor.label(),
                            failure_code(exc),
                            chain[position + 1][0].label(),
                        )
                        continue
                    break
            except ModelFailure as exc:
                failure = exc
            if storage_failure:
                # Nothing more is written: the open request is the recovery
                # table's interrupted call, re-issued by the next run (§23).
                raise storage_failure[0]
            if failure is not None:
                telemetry.chat_failed(span, failure)
                outcome_label = "cancelled" if cancelled else "failed"
                usage_seen = failure.usage
                await steps(recorder.fail(failure, binding))
                message = failure_message(failure, binding)
                if fell_back:
                    earlier = "; ".join(f"{f['model']}: {f['code']}" for f in fell_back)
                    message = f"{message} (fallback after {earlier})"
                failed = ModelCallFailed(
                    turn_id=turn_id, ts=d.clock(), model_call_index=index, error=message
                )
                # A provider failure fails the turn (and a response without tool
                # calls completes it, below): the activity appends that terminal
                # event itself, which saves the workflow a round trip. A cancelled
                # call records only its failure; the workflow closes the turn.
                events: list[TurnEvent] = [failed]
                if not cancelled:
                    probe = reducer.copy()
                    probe.apply(failed)
                    events.append(
                        failure_event(probe.state, message, d.clock(), failure_code(failure))
                    )
                await commit(*events)
                if cancelled:
                    raise asyncio.CancelledError()
                return ModelCallResult(
                    events=_elided(written, input.compact), offset=reducer.event_count
                )
            await steps(recorder.finish(outcome))
            fields = completion_fields(outcome)
            if fell_back:
                # Which models failed before the one that answered (whose binding
                # the observation already carries), each with its evidence.
                fields.provider_metadata["turncore"]["fallbackFrom"] = fell_back
            completed = ModelCallCompleted(
                turn_id=turn_id,
                ts=d.clock(),
                model_call_index=index,
                message=fields.message,
                finish_reason=fields.finish_reason,
                usage=fields.usage,
                provider_metadata=fields.provider_metadata,
            )
            telemetry.chat_finished(
                span,
                response_model=outcome.observation.upstream_model,
                finish_reason=fields.finish_reason,
                usage=outcome.usage,
                response_id=outcome.observation.response_id,
                output=fields.message.to_wire(),
            )
            outcome_label, usage_seen = "completed", outcome.usage
            probe = reducer.copy()
            try:
                probe.apply(completed)
            except CorruptTurnError as refused:
                # A response the log cannot hold (a tool-call id twice in one
                # response, §24) is this call's failure, not an interruption:
                # re-issuing it would pay again for the same refusal.
                await commit(*_refused_response(reducer, completed, refused.rule, d.clock))
                return ModelCallResult(
                    events=_elided(written, input.compact), offset=reducer.event_count
                )
            events = [completed]
            if not outcome.tool_calls():
                # Complete, fail an answer that is still invalid, or (nothing)
                # let the workflow send an invalid answer back (turncore.output).
                events.extend(final_answer_events(probe.state, d.clock()))
            await commit(*events)
            # The checker's answers travel with the response: the workflow needs
            # no round trip to ask for them (it asks itself if they do not fit).
            proposed = calls_needing_check(reducer.state, (), agent.tools)
            checks = (
                await self._checks(turn_id, CheckPermissionsInput.of(turn_id, proposed).calls)
                if proposed
                else None
            )
            allowed = None
            if input.compact and checks:
                allowed = {
                    c.tool_call_id: c.tool_id
                    for c in checks
                    if not c.required
                    and c.request is None
                    and c.checker_error is None
                    and c.tool_id is not None
                }
                checks = [c for c in checks if c.tool_call_id not in allowed] or None
            return ModelCallResult(
                events=_elided(written, input.compact),
                offset=reducer.event_count,
                checks=checks,
                allowed=allowed or None,
            )
        except (CorruptTurnError, InfrastructureError) as exc:
            raise to_application_error(exc) from exc
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            telemetry.end_span(span)
            telemetry.record_model_call(
                agent.model.provider,
                agent.model.model,
                outcome_label,
                timedelta(seconds=time.monotonic() - started),
                usage_seen,
            )
            d.hub.finish_call(turn_id, index)  # its deltas are not needed any more

    @activity.defn
    async def run_tool(self, input: ToolCallInput) -> ToolCallResult:
        d = self._d
        turn_id = input.turn_id
        try:
            state = await self._state(turn_id)
            call = state.tool_call(input.tool_call_id)
            if call is None or call.invocation is None or call.result is not None:
                raise CorruptTurnError(f"tool call {input.tool_call_id} is not awaiting execution")
            agent = d.contexts.resolve_agent(state.definition)
            descriptor = next(t for t in agent.tools if t.tool_id == input.tool_id)
            tool = d.tools.sync_tool(descriptor)
        except (InfrastructureError, DependencyError, StopIteration) as exc:
            raise to_application_error(
                exc if isinstance(exc, Exception) else RuntimeError(str(exc))
            ) from exc

        written: list[TurnEvent] = []
        try:
            await self._execute(input, tool, written)
            return ToolCallResult(events=_elided(written, input.compact))
        except (CorruptTurnError, InfrastructureError) as exc:
            raise to_application_error(exc) from exc

    @activity.defn
    async def run_fast_tools(self, input: FastToolsInput) -> FastToolsResult:
        """A batch of fast sync tools, as one local activity.

        Temporal may execute a local activity again after its worker died, so the
        file decides (``advance.fast_attempt``): calls a lost attempt invoked and
        did not finish get the indeterminate result and never run again (§23);
        the rest are invoked (durable before any tool starts, §4.4, §10.5), then
        run at once, each result appended as it lands. A tool past its bound gets
        an error result; it is not waited for and not run again.
        """
        d = self._d
        turn_id = input.turn_id
        try:
            # Incremental, like every per-call read (``reduced``): the state, then
            # the lines after what the workflow knows, cut to the same point.
            reduced = await self._reduced(turn_id)
            state = reduced.state
            after = await asyncio.to_thread(
                d.repository.read_after, turn_id, min(input.known_offset, reduced.event_count)
            )
            after = after[: max(0, reduced.event_count - input.known_offset)]
            plan = fast_attempt(state, after, input.invocations, d.clock())
            calls: list[tuple[ToolCallInput, SyncTool]] = []
            if plan.invoke:  # resolved before anything is written
                agent = d.contexts.resolve_agent(state.definition)
                for inv in plan.invoke:
                    descriptor = next(t for t in agent.tools if t.tool_id == inv.tool_id)
                    call = ToolCallInput(
                        turn_id=turn_id,
                        tool_call_id=inv.tool_call_id,
                        tool_id=inv.tool_id,
                        tool_name=inv.tool_name,
                        input=inv.input,
                    )
                    calls.append((call, d.tools.sync_tool(descriptor)))
        except (CorruptTurnError, InfrastructureError, DependencyError, StopIteration) as exc:
            raise to_application_error(
                exc if isinstance(exc, Exception) else RuntimeError(str(exc))
            ) from exc
        written: list[TurnEvent] = list(plan.found)
        offset = reduced.event_count
        try:
            first = [*plan.interrupted, *plan.invoke]
            if first:
                offset = await self._append(turn_id, first)
                written.extend(plan.interrupted)  # the invocations are the workflow's own
            if calls:
                ends = await asyncio.gather(
                    *(
                        self._execute(
                            call,
                            tool,
                            written,
                            bound=input.bounds.get(call.tool_call_id, DEFAULT_FAST_TIMEOUT),
                        )
                        for call, tool in calls
                    )
                )
                offset = max(offset, *ends)
        except (CorruptTurnError, InfrastructureError) as exc:
            raise to_application_error(exc) from exc
        return FastToolsResult(events=_elided(written), offset=offset)

    async def _execute(
        self,
        input: ToolCallInput,
        tool: SyncTool,
        written: list[TurnEvent],
        *,
        bound: float | None = None,
    ) -> int:
        """Run one invoked sync tool and append its result; ``written`` collects
        every event appended for it. ``bound``: a fast tool's limit in seconds.
        Returns the file's line count after the result."""
        d = self._d
        turn_id = input.turn_id
        cancelled = asyncio.Event()
        local = activity.info().is_local

        async def report_progress(progress: JsonValue) -> None:
            event = ToolProgress(
                turn_id=turn_id,
                ts=d.clock(),
                tool_call_id=input.tool_call_id,
                source="sync",
                progress=progress,
            )
            await self._append(turn_id, [event])  # durable before report_progress returns (§10.4)
            written.append(event)
            if not local:
                activity.heartbeat()

        context = ToolContext(
            turn_id=turn_id,
            tool_call_id=input.tool_call_id,
            cancelled=cancelled,
            report_progress=report_progress,
        )
        span = telemetry.start_span(f"execute_tool {input.tool_name}")
        telemetry.tool_started(
            span, input.tool_name, input.tool_call_id, input.tool_id, input.input
        )
        started = time.monotonic()
        outcome_label = "cancelled"
        with telemetry.current(span):  # the tool's own spans nest under it
            task = asyncio.create_task(_run_tool_safely(tool.execute, input.input, context))
        heartbeat = None if local else asyncio.create_task(_heartbeat_forever())
        try:
            try:
                result = await asyncio.wait_for(asyncio.shield(task), bound)
            except TimeoutError:
                # A fast tool past its bound: the model gets an error result and the
                # tool is asked to stop; a def tool's thread cannot be stopped and
                # finishes on its own, its outcome discarded.
                cancelled.set()
                task.cancel()
                assert bound is not None
                result = fast_overrun_result(input.tool_name, bound)
                outcome_label = "timeout"
            except asyncio.CancelledError:
                # Cooperative cancellation: tell the tool, wait for it to stop,
                # record what it returned if anything, then report cancelled.
                cancelled.set()
                late = await _await_quietly(task)
                if late is not None:
                    event = _sync_result(turn_id, d.clock(), input, late)
                    await self._append(turn_id, [event])
                    written.append(event)
                raise
            telemetry.tool_finished(span, result.is_error, result.output)
            if outcome_label != "timeout":
                outcome_label = "error" if result.is_error else "ok"
            event = _sync_result(turn_id, d.clock(), input, result)
            end = await self._append(turn_id, [event])
            written.append(event)
            return end
        finally:
            if heartbeat is not None:
                heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat
            telemetry.end_span(span)
            elapsed = timedelta(seconds=time.monotonic() - started)
            telemetry.record_tool(input.tool_name, outcome_label, elapsed)


def _cancelled_by_the_workflow() -> bool:
    """Whether this activity's cancellation is the turn's (the workflow asked for it).

    Never while this worker shuts down, whatever the cancellation says: a shutdown
    has reached a running call as a plain cancel request (a detached ``turns run``
    then recorded a cancellation nobody asked for). Recording nothing is safe
    either way: the open request is the recovery table's, and a real cancel is
    closed by the workflow's own cancellation path (§22).
    """
    details = activity.cancellation_details()
    return (
        details is not None
        and details.cancel_requested
        and not (details.worker_shutdown or details.timed_out or details.not_found)
        and not activity.is_worker_shutdown()
    )


def _refused_response(
    reducer: TurnReducer, completed: ModelCallCompleted, rule: str, clock: Clock
) -> list[TurnEvent]:
    """``model_call_failed`` and ``turn_failed`` for a response the reducer refuses.

    The activity settles the turn itself, as for any other model failure.
    """
    error = f"model call failed: the response was refused: {rule}"
    failed = ModelCallFailed(
        turn_id=completed.turn_id,
        ts=clock(),
        model_call_index=completed.model_call_index,
        error=error,
    )
    probe = reducer.copy()
    probe.apply(failed)
    return [failed, failure_event(probe.state, error, clock(), code=REFUSED_RESPONSE_CODE)]


async def _heartbeat_forever() -> None:
    # Well inside the heartbeat timeout, whatever the workflow chose for it: a
    # beat every HEARTBEAT_EVERY seconds is too late for a timeout that short.
    timeout = activity.info().heartbeat_timeout
    every = HEARTBEAT_EVERY
    if timeout is not None and timeout.total_seconds() > 0:
        every = min(every, timeout.total_seconds() / 4)
    while True:
        await asyncio.sleep(every)
        activity.heartbeat()


async def _run_tool_safely(execute: Any, input: JsonValue, context: ToolContext) -> ToolResultData:
    try:
        result = await execute(input, context)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a tool throw is an error result, never a turn failure (§21.2)
        return ToolResultData(output=f"Tool raised {type(exc).__name__}: {exc}", is_error=True)
    if not isinstance(result, ToolResultData):
        return ToolResultData(
            output=f"Tool returned {type(result).__name__}, not a result", is_error=True
        )
    return result


async def _await_quietly(task: asyncio.Task[ToolResultData]) -> ToolResultData | None:
    try:
        return await task
    except asyncio.CancelledError:
        return None


def _sync_result(turn_id: str, ts: str, input: ToolCallInput, result: ToolResultData) -> ToolResult:
    return ToolResult(
        turn_id=turn_id,
        ts=ts,
        tool_call_id=input.tool_call_id,
        tool_name=input.tool_name,
        source="sync",
        result=result,
    )


__all__ = ["ModelResolver", "TurnActivities", "TurnDependencies"]
