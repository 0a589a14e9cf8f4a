"""The client API (spec §15.2): create, advance, get and recover turns.

``create_turn`` resolves the agent once and writes ``turn_created`` only if
resolution succeeds. ``advance_turn`` returns a hot ``TurnExecution`` whose
``events`` (durable events tailed from the file, plus deltas from a live hub
in this process) and ``outcome`` are independent: nobody has to consume
events for the turn to progress. ``get_turn`` only reads.
"""

from __future__ import annotations

import asyncio
import getpass
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

from pydantic import ValidationError
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import PollWorkflowExecutionUpdateRequest
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.service import RPCError, RPCStatusCode

from turnclient.lib.stuck import StuckRun, stuck_run
from turnclient.lib.summary import message_preview
from turncore.advance import check_input, outcome_of
from turncore.agents import (
    AgentResolver,
    ListedTools,
    StaticAgentResolver,
    fallback_composition,
    with_listed,
)
from turncore.context import ContextResolver
from turncore.elision import may_hold_elisions
from turncore.errors import (
    ExpiredDeliveryError,
    InfrastructureError,
    InvalidInputError,
    RejectedInputError,
    StuckTurnError,
    TurnExistsError,
    TurnNotFoundError,
    invalid_input,
)
from turncore.events import (
    DEFAULT_MAX_MODEL_CALLS,
    SCHEMA_VERSION,
    AgentSnapshot,
    AsyncToolProgressInput,
    AsyncToolResultInput,
    CancelInput,
    ContextRef,
    ExternalDelivery,
    PermissionDecisionInput,
    RequestedAgent,
    StagedAsyncToolProgressInput,
    StagedAsyncToolResultInput,
    SuspendedOutcome,
    TurnConfig,
    TurnContext,
    TurnCreated,
    TurnDelta,
    TurnEvent,
    TurnOutcome,
    TurnStreamEvent,
    outcome_adapter,
)
from turncore.ids import MINT_ATTEMPTS, TurnIdGenerator, validate_turn_id
from turncore.inputs import DELIVER_BY, accept_input, staged_form
from turncore.jsonvalue import JsonValue
from turncore.live import LiveHub, TurnProcessingEnd, TurnProcessingStart
from turncore.messages import UserMessage
from turncore.model.port import unsendable_media
from turncore.output import OutputSchemaError, with_output
from turncore.reducer import TurnReducer, TurnState
from turncore.storage.repository import TurnRepository
from turncore.timestamps import format_ts
from turncore_temporal.activities import telemetry
from turncore_temporal.activities.failures import run_failure, update_refusal
from turncore_temporal.workflows import TurnWorkflow, TurnWorkflowInput
from turncore_temporal.workflows.turn import (
    MAX_KEYWORD_BYTES,
    TURN_AGENT,
    TURN_MODEL,
    TURN_SESSION,
    TURN_STATUS,
    keyword_size,
)

INPUT_PREVIEW = 200
"""Longest input preview in a turn's memo, in characters."""


_T = TypeVar("_T")

_TRANSIENT = {
    RPCStatusCode.UNAVAILABLE,  # "tcp connect error": the server restarts or is not up yet
    RPCStatusCode.DEADLINE_EXCEEDED,  # "Timeout expired" on a busy host
    RPCStatusCode.CANCELLED,
    RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.UNKNOWN,
}
"""RPC failures that say nothing about the request, only that Temporal did not answer it."""

RPC_DEADLINE_SECONDS = 300.0
"""How long a run of transient RPC failures is retried before the caller gets an error."""


_WFT_RETRYING = "Workflow Task in failed state"
"""Temporal refuses updates while a workflow task is being retried, as after a worker
died holding it; the next worker's attempt clears it."""


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, WorkflowUpdateRPCTimeoutOrCancelledError):
        return True  # the update's poll ended, not the update: poll again (same id)
    if not isinstance(exc, RPCError):
        return False
    return exc.status in _TRANSIENT or (
        exc.status == RPCStatusCode.FAILED_PRECONDITION and _WFT_RETRYING in exc.message
    )


def open_turn_message(state: TurnState) -> str:
    """Why an open turn cannot be continued, and how to finish it."""
    turn_id = state.definition.turn_id
    from turnclient.lib.terminal import command_line

    waiting = [
        f"approval of {p.tool_name} ({p.tool_call_id}): "
        f"{command_line('approve', turn_id, p.tool_call_id)} (or deny)"
        for p in state.pending_permissions()
    ] + [
        f"the result of {p.tool_name} ({p.tool_call_id}): "
        + command_line("complete", turn_id, p.tool_call_id, "--text", "...")
        for p in state.pending_async_tools()
    ]
    cancel = command_line("cancel", turn_id)
    if waiting:
        return (
            f"turn {turn_id} has not ended, so it cannot be continued yet; it awaits "
            f"{'; '.join(waiting)}; or end it with: {cancel}"
        )
    return (
        f"turn {turn_id} has not ended (it is running), so it cannot be continued yet; follow it "
        f"with: {command_line('watch', turn_id)}, or end it with: {cancel}"
    )


NO_PROGRESS_SECONDS = 60.0
"""How long a follower rides runs that hand over (continue as new) without a new
event in the turn's file before it gives up; a turn that keeps appending is
followed across any number of runs, for as long as it takes."""

STUCK_POLL_SECONDS = 1.0
"""How soon a command waiting on a run first checks whether its workflow task keeps
failing; the gap doubles after each check, up to ``STUCK_POLL_MAX_SECONDS``."""

STUCK_POLL_MAX_SECONDS = 5.0
"""The longest gap between two stuck checks of one wait. Each check is a describe
on the server: once a second, hundreds of turns waiting at once cost the server
more than running them did."""

DELIVER_WINDOW_SECONDS = 5.0
"""How long a run may take to accept an input update; later it refuses it as expired
(the client then sends it again). The bound lets a caller that stopped waiting
on a stuck run say for certain that its input was not applied."""

CLOCK_SKEW_SECONDS = 1.0
"""How far the client's clock may be ahead of the Temporal server's (the run
checks the deadline by the server's clock): NTP keeps hosts well within it."""

LAG_GRACE = 10.0
"""How long an input the file shows applicable is resent while its run catches up."""


def iso_now() -> str:
    return format_ts(datetime.now(UTC))


Via = Literal["web", "cli", "api", "classifier"]
"""Which surface carried a decision: the web UI, the ``turns`` command, the library
(``Turns`` and anything built on it), or the permission classifier."""


def os_user() -> str | None:
    """The name of the OS user running this process, or None where the OS has none."""
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):
        return None  # a container's uid with no passwd entry and no $USER


def decided(via: Via, by: str | None, reason: str | None = None) -> dict[str, JsonValue]:
    """The ``metadata`` every decision carries: who (``by``), through what (``via``), when.

    Goes into the permission decision's ``metadata`` (spec §11.2, recorded in
    ``tool_permission_resolved``) and into an async result's ``metadata``
    (``ToolResultData``). ``at`` is the deciding surface's clock, in the log's
    timestamp format; ``by`` is left out when nobody can be named (a shared
    token). A denial's stated ``reason`` rides beside them, where the loop reads it.
    """
    meta: dict[str, JsonValue] = {"via": via, "at": iso_now()}
    if by:
        meta["by"] = by
    if reason:
        meta["reason"] = reason
    return meta


def start_details(definition: TurnCreated) -> dict[str, Any]:
    """What Temporal Web shows of a turn from its start: a memo with the input
    preview, and the search attributes, with ``TurnStatus=running`` until the
    workflow's first settle point upserts the real status."""
    resolved = definition.agent.resolved
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(TURN_STATUS, "running"),
        SearchAttributePair(TURN_AGENT, resolved.agent_id),
        SearchAttributePair(TURN_MODEL, resolved.model.label()),
    ]
    if definition.session_id:
        pairs.append(SearchAttributePair(TURN_SESSION, definition.session_id))
    memo: dict[str, Any] = {
        "turnId": definition.turn_id,
        "input": message_preview(definition.input, INPUT_PREVIEW),
        "agent": resolved.agent_id,
        "model": resolved.model.label(),
    }
    if definition.session_id:
        memo["session"] = definition.session_id
    return {"memo": memo, "search_attributes": TypedSearchAttributes(pairs)}


@dataclass(frozen=True)
class CreateTurnInput:
    agent: RequestedAgent
    input: UserMessage
    human_available: bool
    context: TurnContext | None = None
    session_id: str | None = None
    auto_permission: bool = False
    max_model_calls: int = DEFAULT_MAX_MODEL_CALLS
    reasoning_effort: str | None = None


@dataclass(frozen=True)
class Turn:
    turn_id: str
    events: list[TurnEvent]


class TurnExecution:
    """A hot execution: ``outcome`` resolves whether or not ``events`` is consumed."""

    def __init__(
        self, outcome: asyncio.Task[TurnOutcome], events: AsyncIterator[TurnStreamEvent]
    ) -> None:
        self.outcome = outcome
        self.events = events


class TurnClient:
    def __init__(
        self,
        client: Client,
        repository: TurnRepository,
        resolver: AgentResolver,
        *,
        ids: TurnIdGenerator | None = None,
        task_queue: str = "turns",
        clock: Callable[[], str] = iso_now,
        hub: LiveHub | None = None,
        tail_interval: float = 0.05,
        workflow_options: dict[str, Any] | None = None,
        rpc_deadline_seconds: float = RPC_DEADLINE_SECONDS,
        contexts: ContextResolver | None = None,
        server_check: Callable[[], None] | None = None,
        serves: Callable[[TurnState], None] | None = None,
        no_progress_seconds: float = NO_PROGRESS_SECONDS,
        listed: ListedTools | None = None,
        stuck_poll_seconds: float = STUCK_POLL_SECONDS,
        deliver_window_seconds: float = DELIVER_WINDOW_SECONDS,
        runs_worker: bool = False,
    ) -> None:
        self._client = client
        self._runs_worker = runs_worker
        """This process also runs a worker on the task queue. Its runs start eagerly
        (the start hands the first workflow task to that worker, about 10 ms sooner
        here), so a settle starts the run first and then sends its update; without
        one, the start and the settle go in one request (update-with-start), which
        saves a request and a workflow task."""
        self._serves = serves
        """Raises ``DependencyError`` when this process's worker cannot run the turn."""
        self._listed = listed
        """Tools agents get from elsewhere (MCP servers), listed when a turn is created."""
        self._repo = repository
        self._resolver = resolver
        self._ids = ids or TurnIdGenerator()
        self._task_queue = task_queue
        self._clock = clock
        self._hub = hub
        self._tail_interval = tail_interval
        self._workflow_options = dict(workflow_options or {})
        """Overrides of TurnWorkflowInput fields (timeouts, history budget) for new runs."""
        self._rpc_deadline = rpc_deadline_seconds
        self._server_check = server_check
        """Raises when a transient failure is the server's lasting fault (the embedded
        server's database gone), so the caller hears it at once, not after minutes."""
        self._no_progress = no_progress_seconds
        self._stuck_poll = stuck_poll_seconds
        self._deliver_window = deliver_window_seconds
        # Reads predecessors for §6.7 inheritance at creation (files only).
        self._contexts = contexts or ContextResolver(lambda tid: repository.reduced(tid).state)

    async def _retrying(self, what: str, call: Callable[[], Awaitable[_T]]) -> _T:
        """``call()``, retried with backoff while Temporal fails transiently.

        Every request made here is safe to repeat: starts use the turn id
        with USE_EXISTING, updates carry an id the server deduplicates, and
        the rest only read. After ``rpc_deadline_seconds`` of failures in a
        row the caller gets an ``InfrastructureError``, never a raw RPCError.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._rpc_deadline
        delay = 0.1
        while True:
            try:
                return await call()
            except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError) as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # Our caller cancelled us: the SDK reports a cancelled update poll
                    # as WorkflowUpdateRPCTimeoutOrCancelledError, never to be retried.
                    raise asyncio.CancelledError from exc
                if not _transient(exc):
                    raise
                if self._server_check is not None:
                    self._server_check()
                if loop.time() + delay > deadline:
                    raise InfrastructureError(
                        f"{what}: Temporal did not answer within {self._rpc_deadline:g} s ({exc})"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    @property
    def temporal(self) -> Client:
        """The Temporal client turns are started and signalled through."""
        return self._client

    @property
    def repository(self) -> TurnRepository:
        return self._repo

    # ---------------------------------------------------------------- create

    async def create_turn(self, request: CreateTurnInput) -> str:
        resolved = self._resolver.resolve(request.agent)  # raises: no file is written
        if isinstance(self._resolver, StaticAgentResolver):
            # The agent's fallback models travel in the file (requested composition).
            fallbacks = self._resolver.fallbacks_for(request.agent)
            request = replace(request, agent=fallback_composition(request.agent, fallbacks))
            # So does its output schema: every worker and replay checks the same shape.
            try:
                agent = with_output(request.agent, self._resolver.output_for(request.agent))
            except OutputSchemaError as exc:
                raise InvalidInputError(f"the turn cannot be created: {exc}") from None
            request = replace(request, agent=agent)
        context = request.context if request.context is not None else []
        refused = unsendable_media([request.input, *(context if isinstance(context, list) else [])])
        if refused is not None:
            raise InvalidInputError(f"the turn cannot be created: {refused}")
        too_long = _unlisted_keyword(resolved.agent_id, resolved.model.label(), request.session_id)
        if too_long is not None:
            raise InvalidInputError(f"the turn cannot be created: {too_long}")
        if isinstance(context, ContextRef):
            # Only an ended turn can be continued (§6.6): refused here, before
            # any file is written, rather than failing the new turn later.
            await self._closed_predecessor(context.previous_turn_id)
        # The agent's MCP servers are listed here, once; a server that is down
        # fails the creation (DependencyError naming it) before any file exists.
        resolved = await with_listed(resolved, self._listed)
        snapshot = await asyncio.to_thread(
            self._contexts.snapshot_for, resolved, context, request.session_id
        )
        try:
            config = TurnConfig(
                auto_permission=request.auto_permission,
                human_available=request.human_available,
                max_model_calls=request.max_model_calls,
                reasoning_effort=request.reasoning_effort,
            )
        except ValidationError as exc:  # max_model_calls below 1, an unknown effort
            raise invalid_input("the turn cannot be created", exc) from None
        attempts = MINT_ATTEMPTS
        while True:
            created = TurnCreated(
                turn_id=self._ids.next_id(),
                ts=self._clock(),
                schema_version=SCHEMA_VERSION,
                session_id=request.session_id,
                agent=AgentSnapshot(requested=request.agent, resolved=snapshot),
                context=context,
                input=request.input,
                config=config,
            )
            try:
                await asyncio.to_thread(self._repo.create, created)
                return created.turn_id
            except TurnExistsError:
                # Another process minted the same id first (same tick, same
                # instance number): its file stays as it is; mint again.
                attempts -= 1
                if attempts == 0:
                    raise

    async def _closed_predecessor(self, turn_id: str) -> None:
        """Refuse continuing a turn that does not exist or has not ended (§6.6).

        A predecessor that exists but cannot be read is not refused here: the
        new turn gets the full snapshot and its context resolution reports the
        broken file when it runs (docs/file-format.md, §6.7).
        """
        validate_turn_id(turn_id)
        try:
            events = await asyncio.to_thread(self._repo.read, turn_id)
        except TurnNotFoundError:
            raise RejectedInputError(f"there is no turn {turn_id} to continue") from None
        except InfrastructureError:
            return
        state = TurnReducer.of(events).state
        if state.terminal is None:
            raise RejectedInputError(open_turn_message(state))

    # ---------------------------------------------------------------- read

    async def get_turn(self, turn_id: str) -> Turn:
        validate_turn_id(turn_id)
        events = await asyncio.to_thread(self._repo.read, turn_id)
        return Turn(turn_id=turn_id, events=events)

    async def state(self, turn_id: str) -> TurnState:
        return TurnReducer.of((await self.get_turn(turn_id)).events).state

    def handle(self, turn_id: str) -> WorkflowHandle[Any, Any]:
        return self._client.get_workflow_handle(turn_id)

    # ---------------------------------------------------------------- advance

    def advance_turn(self, turn_id: str, input: ExternalDelivery | None = None) -> TurnExecution:
        """Advance a turn by at most one input; the hot execution starts at once.

        An async tool result or progress too large to send inline (over
        ``MAX_INPUT_BYTES``) is staged in the turn's repository first and sent
        by reference (a claim check); ``InputTooLargeError`` if it is larger
        than ``MAX_STAGED_BYTES``, or large and of another kind. A reference
        staged by the caller (``StagedAsyncToolResultInput`` …) is sent as is.

        ``outcome`` settles whether or not anyone reads ``events``. ``events``
        yields the durable events this invocation produced (tailed from the
        file after the offset it started at) and the deltas published in
        this process; it ends when the outcome settles and raises the same
        error as ``outcome`` if that fails. Closing it early drops later
        events and cancels nothing.
        """
        start = asyncio.get_running_loop().create_future()
        deltas = self._hub.attach(turn_id) if self._hub is not None else None
        outcome = asyncio.ensure_future(self._advance(turn_id, input, start))
        if deltas is not None and self._hub is not None:
            # Stop collecting deltas when the advance settles, even if nobody
            # ever reads the events; a reader still drains what was queued.
            hub = self._hub
            outcome.add_done_callback(lambda _: hub.detach(turn_id, deltas))
        events = self._events(turn_id, start, outcome, deltas)
        return TurnExecution(outcome, events)

    async def _advance(
        self, turn_id: str, input: ExternalDelivery | None, start: asyncio.Future[int]
    ) -> TurnOutcome:
        hub = self._hub
        if hub is not None:
            hub.publish_lifecycle(TurnProcessingStart(turn_id=turn_id))
        try:
            # One span per advance; Temporal's tracing interceptor (when tracing
            # is on) hangs the workflow and its activities under it.
            with telemetry.span(f"turn {turn_id}") as span:
                if input is not None and span.is_recording():
                    span.add_event("input", _input_attributes(input))
                outcome = await self._advance_inner(turn_id, input, start)
                telemetry.turn_status(span, outcome.status, _pending_of(outcome))
                return outcome
        finally:
            if hub is not None:
                hub.publish_lifecycle(TurnProcessingEnd(turn_id=turn_id))

    async def _advance_inner(
        self, turn_id: str, input: ExternalDelivery | None, start: asyncio.Future[int]
    ) -> TurnOutcome:
        try:
            validate_turn_id(turn_id)
            events = await asyncio.to_thread(self._repo.read, turn_id)
            if not start.done():
                start.set_result(len(events))
            state = TurnReducer.of(events).state
            resolved = state.definition.agent.resolved
            telemetry.turn_attributes(
                telemetry.current_span(), turn_id, resolved.agent_id, resolved.model.label()
            )
            if state.terminal is not None:
                if input is not None:
                    check_input(state, input)  # raises: the turn already ended
                outcome = outcome_of(state)
                assert outcome is not None
                return outcome
            if input is not None:
                check_input(state, input)
            if self._serves is not None and (input is None or input.type != "cancel"):
                # A worker in this process would take the turn's next task and fail it:
                # say what is missing now, before anything is sent (cancelling needs
                # no model or tool, so it always goes through).
                await asyncio.to_thread(self._serves, state)
            if input is not None:
                input = await self._stage_if_large(turn_id, input)
            cancel = input.to_wire() if input is not None and input.type == "cancel" else None
            if input is None and not self._runs_worker:
                # One request starts the run if none runs and asks it to settle.
                raw = await self._send(turn_id, "settle", None, starting=state.definition)
            else:
                started = await self._ensure_running(turn_id, state.definition, cancel)
                if input is None or (cancel is not None and started):
                    raw = await self._send(turn_id, "settle", None)
                else:
                    raw = await self._deliver(turn_id, input)
            outcome = outcome_adapter.validate_python(
                {k: v for k, v in raw.items() if k != "turnId"}
            )
            if outcome.status == "completed" and may_hold_elisions(outcome.output.to_wire()):
                # The run holds an answer over its value budget elided (DESIGN §5);
                # the file holds it whole, and an ended turn's outcome never changes.
                events = await asyncio.to_thread(self._repo.read, turn_id)
                whole = outcome_of(TurnReducer.of(events).state)
                assert whole is not None and whole.status == "completed", whole
                outcome = whole
            return outcome
        finally:
            if not start.done():
                start.set_result(-1)

    async def _stage_if_large(self, turn_id: str, input: ExternalDelivery) -> ExternalDelivery:
        """``input``, or the reference to its value once staged (the claim check).

        The value is durable in the turn's storage before the reference is
        sent, so the workflow can always fetch what it is told about.
        """
        match input:
            case AsyncToolProgressInput() | AsyncToolResultInput():
                staging = staged_form(input)  # raises: too large even to stage
                if staging is None:
                    return input
                ref, data = staging
                await asyncio.to_thread(self._repo.stage, turn_id, data)
                return ref
            case PermissionDecisionInput() | CancelInput():
                staged_form(input)  # raises if too large to send at all
                return input
            case _:
                return input  # already a reference

    async def _deliver(self, turn_id: str, input: ExternalDelivery) -> dict[str, Any]:
        """Send ``input``, riding out a run that has not caught up with the file.

        A run that replays after its worker was lost knows a call the file
        already shows pending only once it has recognised its last append, a
        moment later. An input it refuses meanwhile is sent again (a refused
        update changed nothing) while the file still shows it applicable, for
        up to ``LAG_GRACE`` seconds; then the run's refusal stands. A staged
        value is not resent: its refusal may be about the value itself.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LAG_GRACE
        delay = 0.1
        while True:
            try:
                return await self._send(turn_id, input.type, input.to_wire())
            except RejectedInputError:
                staged = isinstance(
                    input, StagedAsyncToolProgressInput | StagedAsyncToolResultInput
                )
                if staged or loop.time() + delay > deadline:
                    raise
                state = TurnReducer.of(await asyncio.to_thread(self._repo.read, turn_id)).state
                try:
                    check_input(state, input)
                except RejectedInputError:
                    pass  # the file agrees: not applicable
                else:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 1.0)
                    continue
                raise

    async def _send(
        self, turn_id: str, name: str, arg: Any, *, starting: TurnCreated | None = None
    ) -> dict[str, Any]:
        """Deliver one update to the turn's latest run and return the settled outcome.

        With ``starting`` (the turn's definition) the first update goes with a
        start: a run is started from the file if none runs (update-with-start),
        so the run's first workflow task already holds the update.

        A run may close under the update (it continued as new, it ended, or it
        failed): the update then goes to the next run, or the closed run's
        outcome or failure is reported. An input that never reached a run
        that applied it is rejected, never silently dropped. A run whose
        workflow task keeps failing ends the wait with ``StuckTurnError``
        (``_exchange``).

        There is no deadline on the whole follow: a turn that keeps appending is
        followed across any number of runs. Only runs that hand over without a
        new line in the file for ``no_progress_seconds`` end it (``_Progress``).
        """
        loop = asyncio.get_running_loop()
        resend_until = loop.time() + self._rpc_deadline
        progress = _Progress(self._repo, turn_id, self._no_progress)
        while True:
            handle = self._client.get_workflow_handle(turn_id)
            # One id per delivery: a retry after a lost answer attaches to the
            # same update instead of applying the input twice.
            update_id = f"{name}-{uuid.uuid4()}"
            deliver_by = None
            args: list[Any] = [arg]
            if name != "settle":
                deliver_by = int((time.time() + self._deliver_window) * 1000)
                args.append({DELIVER_BY: deliver_by})
            try:
                raw = await self._exchange(
                    turn_id, handle, name, args, update_id, deliver_by, starting
                )
            except WorkflowUpdateFailedError as exc:
                refusal = update_refusal(exc.cause, str(exc))
                if isinstance(refusal, ExpiredDeliveryError) and loop.time() < resend_until:
                    # Seen only after its deadline (no worker took the run in
                    # time): certainly not applied, so sent again under a new id.
                    continue
                raise refusal from None
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND and "aborted" not in exc.message:
                    raise InfrastructureError(
                        f"{name} for turn {turn_id}: Temporal refused it: {exc}"
                    ) from exc
                closed = await self._closed_outcome(turn_id)
                if closed is not None:
                    if name != "settle":
                        raise RejectedInputError(
                            f"turn {turn_id} settled as {closed.get('status')} before {name} was applied"
                        ) from None
                    return closed
                raw = {"continuedAsNew": True}  # a newer run is there: ask it again
                if name != "settle":
                    await progress.check(f"{name} to be applied")
                    await asyncio.sleep(0.05)
                    continue
            starting = None  # a later run is the one this started, or one after it
            if not raw.get("continuedAsNew"):
                return raw
            name, arg = "settle", None  # the input (if any) was applied; wait for a settle point
            await progress.check("a settle point (suspended or ended)")
            await asyncio.sleep(0.05)

    async def _exchange(
        self,
        turn_id: str,
        handle: WorkflowHandle[Any, Any],
        name: str,
        args: list[Any],
        update_id: str,
        deliver_by: int | None,
        starting: TurnCreated | None = None,
    ) -> dict[str, Any]:
        """One update, from its start to its answer, unless the run is stuck.

        While it waits, the run is checked after ``stuck_poll_seconds``, then
        at gaps doubling up to ``STUCK_POLL_MAX_SECONDS`` (``stuck_run``). A stuck run ends the wait with ``StuckTurnError``,
        whose message says whether the input was applied. An input the run
        has not accepted is declared not applied only once its deadline
        (``deliver_by``, which the run's validator enforces) has passed, so it
        can never be applied after the caller was told otherwise, whatever
        the workers do next (a rebuild, a rollback).
        """
        what = f"{name} for turn {turn_id}"
        accepted = False

        # An input's update is first waited on until accepted: whether the run took
        # it decides what a stuck run's error says. A settle carries no input, so
        # its one request waits for the answer (a long poll the server ends early
        # with the update merely accepted; the handle then polls for the rest).
        stage = (
            WorkflowUpdateStage.ACCEPTED
            if deliver_by is not None
            else WorkflowUpdateStage.COMPLETED
        )

        async def request() -> WorkflowUpdateHandle[Any]:
            if starting is None:
                return await handle.start_update(
                    name, args=args, id=update_id, wait_for_stage=stage
                )
            # A new operation each attempt (one is used once); a retry finds the
            # run the lost attempt started (USE_EXISTING) and the update by its id.
            operation = WithStartWorkflowOperation(
                TurnWorkflow.run, **self._start_options(turn_id, starting)
            )
            try:
                return await self._client.start_update_with_start_workflow(
                    name,
                    args=args,
                    id=update_id,
                    wait_for_stage=stage,
                    start_workflow_operation=operation,
                )
            finally:
                _take_start_failure(operation)

        async def talk() -> dict[str, Any]:
            nonlocal accepted
            update = await self._retrying(what, request)
            accepted = True
            raw: dict[str, Any] = await self._retrying(what, update.result)
            return raw

        task = asyncio.ensure_future(talk())
        poll = self._stuck_poll
        try:
            while True:
                await asyncio.wait([task], timeout=poll)
                if task.done():
                    return task.result()
                poll = min(poll * 2, max(self._stuck_poll, STUCK_POLL_MAX_SECONDS))
                stuck = await self._stuck(turn_id)
                if stuck is None:
                    continue
                if not accepted and deliver_by is not None:
                    # Until its deadline the run may still take the input (a
                    # rollback lands): keep waiting for it meanwhile.
                    wait = deliver_by / 1000 + CLOCK_SKEW_SECONDS - time.time()
                    if wait > 0:
                        await asyncio.wait([task], timeout=wait)
                        if task.done():
                            return task.result()
                    if accepted or await self._update_accepted(turn_id, update_id):
                        accepted = True
                        continue  # the run took it after all: it is not stuck now
                raise await self._stuck_error(stuck, name, args[0], accepted, deliver_by)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def _stuck(self, turn_id: str) -> StuckRun | None:
        """``stuck_run``, or None while Temporal does not answer (the update's own
        retries report a server that stays away)."""
        try:
            return await stuck_run(self._client, turn_id)
        except RPCError:
            return None

    async def _update_accepted(self, turn_id: str, update_id: str) -> bool:
        """Whether the server has the update as accepted (or completed) now."""
        try:
            answer = await self._client.workflow_service.poll_workflow_execution_update(
                PollWorkflowExecutionUpdateRequest(
                    namespace=self._client.namespace,
                    update_ref=UpdateRef(
                        workflow_execution=WorkflowExecution(workflow_id=turn_id),
                        update_id=update_id,
                    ),
                    identity=self._client.identity,
                    wait_policy=WaitPolicy(
                        lifecycle_stage=UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
                    ),
                ),
                timeout=timedelta(seconds=10),
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False  # never admitted, or its run is gone
            raise InfrastructureError(
                f"cannot tell whether turn {turn_id} took the input: {exc}"
            ) from exc
        if answer.outcome.HasField("failure"):
            return False  # refused (expired): not applied
        return answer.stage in (
            UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ACCEPTED,
            UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_COMPLETED,
        )

    async def _stuck_error(
        self, stuck: StuckRun, name: str, arg: Any, accepted: bool, deliver_by: int | None
    ) -> StuckTurnError:
        """The one-line error for a wait that ended on a stuck run."""
        turn_id = stuck.turn_id
        head = f"turn {turn_id} is stuck: {stuck.cause}"
        fix = f"{stuck.fix} rebuilds it from its file (or roll the workers back)"
        if deliver_by is None:
            return StuckTurnError(
                f"{head}; {fix}", turn_id=turn_id, cause=stuck.cause, applied=None
            )
        if not accepted:
            return StuckTurnError(
                f"{head}; the {name} input was not applied: {fix}, then send it again",
                turn_id=turn_id,
                cause=stuck.cause,
                applied=False,
            )
        in_file = await self._in_file(turn_id, arg)
        said = (
            f"the {name} input was applied (it is in the file)"
            if in_file
            else f"the stuck run took the {name} input but has not written it: after the fix, "
            f"send it again if the turn still awaits it"
        )
        return StuckTurnError(
            f"{head}; {said}; {fix}", turn_id=turn_id, cause=stuck.cause, applied=in_file
        )

    async def _in_file(self, turn_id: str, wire: Any) -> bool:
        """Whether the file no longer awaits the input ``wire`` targets (it was applied)."""
        try:
            parsed = accept_input(wire.get("type", ""), [wire]) if isinstance(wire, dict) else None
        except RejectedInputError:
            return False
        if parsed is None:
            return False
        state = TurnReducer.of(await asyncio.to_thread(self._repo.read, turn_id)).state
        try:
            check_input(state, parsed)
        except RejectedInputError:
            return True
        return False

    async def _closed_outcome(self, turn_id: str) -> dict[str, Any] | None:
        """The outcome of the turn's closed latest run; None if a run is running."""
        handle = self._client.get_workflow_handle(turn_id)
        desc = await self._retrying(f"describing turn {turn_id}", handle.describe)
        if desc.status in (
            WorkflowExecutionStatus.RUNNING,
            WorkflowExecutionStatus.CONTINUED_AS_NEW,
        ):
            return None
        try:
            result: dict[str, Any] = await self._retrying(
                f"the outcome of turn {turn_id}", lambda: handle.result(follow_runs=False)
            )
        except WorkflowFailureError as failure:
            cause = failure.cause
            raise run_failure(
                cause, f"the workflow of turn {turn_id} failed: {cause or failure}"
            ) from None
        return result

    async def _ensure_running(
        self, turn_id: str, definition: TurnCreated, cancel: dict[str, Any] | None = None
    ) -> bool:
        """Make sure a run serves the turn, starting one from the file if none runs.

        Returns whether this call started the run. Without a cancel the start
        goes straight to the server (an existing run is used as it is) and asks
        an in-process worker to take the first task eagerly; a cancel looks
        first, because a fresh run takes the cancel in its input.
        """
        if cancel is not None:
            try:
                desc = await self._retrying(
                    f"describing turn {turn_id}",
                    self._client.get_workflow_handle(turn_id).describe,
                )
                if desc.status == WorkflowExecutionStatus.RUNNING:
                    return False
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
        await self._retrying(
            f"starting the workflow of turn {turn_id}",
            lambda: self._client.start_workflow(
                TurnWorkflow.run,
                request_eager_start=True,
                **self._start_options(turn_id, definition, cancel),
            ),
        )
        return cancel is not None

    def _start_options(
        self, turn_id: str, definition: TurnCreated, cancel: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """How a run of the turn is started: an existing run is used as it is."""
        return {
            "arg": TurnWorkflowInput(turn_id=turn_id, cancel=cancel, **self._workflow_options),
            "id": turn_id,
            "task_queue": self._task_queue,
            "id_conflict_policy": WorkflowIDConflictPolicy.USE_EXISTING,
            "id_reuse_policy": WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            **start_details(definition),
        }

    async def recover(self, turn_id: str) -> TurnOutcome:
        """The spec's ``advanceTurn(turnId)`` with no input."""
        return await self.advance_turn(turn_id).outcome

    async def stuck(self, turn_id: str) -> StuckRun | None:
        """The turn's run, if its workflow task keeps failing (``stuck_run``)."""
        validate_turn_id(turn_id)
        return await self._retrying(
            f"describing turn {turn_id}", lambda: stuck_run(self._client, turn_id)
        )

    async def rebuild(self, turn_id: str) -> StuckRun | None:
        """Terminate the turn's run if it is stuck and start a new run from the file
        (recovery is a reload). Returns the stuck run, or None if the run was not
        stuck (then nothing is done).

        Terminating drops what only the stuck run knew: inputs it had not
        accepted, which their senders were told were not applied. Everything
        the turn did is in its file.
        """
        stuck = await self.stuck(turn_id)
        if stuck is None:
            return None
        handle = self._client.get_workflow_handle(turn_id, run_id=stuck.run_id)
        try:
            await self._retrying(
                f"terminating the stuck run of turn {turn_id}",
                lambda: handle.terminate(
                    reason=f"stuck ({stuck.cause}); rebuilt from the turn's file"
                ),
            )
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            # Closed meanwhile (another rebuild got there first): start it all the same.
        state = await self.state(turn_id)
        if state.terminal is None:
            await self._ensure_running(turn_id, state.definition)
        return stuck

    async def _events(
        self,
        turn_id: str,
        start: asyncio.Future[int],
        outcome: asyncio.Task[TurnOutcome],
        deltas: asyncio.Queue[TurnDelta] | None,
    ) -> AsyncIterator[TurnStreamEvent]:
        try:
            offset = await start
            if offset < 0:
                await outcome  # raises the error that kept the turn from starting
                return
            while True:
                done = outcome.done()
                while deltas is not None and not deltas.empty():
                    yield deltas.get_nowait()
                for event in await asyncio.to_thread(self._repo.read_after, turn_id, offset):
                    offset += 1
                    yield event
                if done:
                    outcome.result()  # the same error as the outcome, if it failed
                    return
                await asyncio.wait([outcome], timeout=self._tail_interval)
        finally:
            if deltas is not None and self._hub is not None:
                self._hub.detach(turn_id, deltas)


def _take_start_failure(operation: WithStartWorkflowOperation[Any, Any]) -> None:
    """Take a failed update-with-start's failure from its start operation.

    The SDK gives the operation a copy of the request's failure (a cancel, an
    update aborted by the run closing) for whoever asks for the run's handle.
    Nobody does here: the request's own error is the one handled. Untaken, asyncio
    prints it as "never retrieved", with a traceback, on the caller's stderr.
    """
    started = operation._workflow_handle  # the SDK keeps no public "done" for it
    if started.done() and not started.cancelled():
        started.exception()


class _Progress:
    """Whether a turn whose runs hand over is still getting anywhere.

    Progress is a new line in the turn's file (the truth, DESIGN §1), looked at
    each time a run hands over: every line resets the clock, so a turn is
    followed for as long as it appends. Runs that keep continuing as new with
    no new line for ``patience`` seconds (a defect: the workflow hands over only
    after appending) end the follow with an error; nothing is sent or written.
    """

    def __init__(self, repo: TurnRepository, turn_id: str, patience: float) -> None:
        self._repo = repo
        self._turn_id = turn_id
        self._patience = patience
        self._lines = -1
        self._since = 0.0

    async def check(self, waiting_for: str) -> None:
        lines = await asyncio.to_thread(self._repo.line_count, self._turn_id)
        now = asyncio.get_running_loop().time()
        if lines != self._lines:
            self._lines, self._since = lines, now
            return
        if now - self._since >= self._patience:
            turn_id = self._turn_id
            size = f"{lines} line" if lines == 1 else f"{lines} lines"
            raise InfrastructureError(
                f"turn {turn_id}: no progress for {self._patience:g} s: its workflow runs kept "
                f"continuing as new without a new event (the file stays at {size}) while "
                f"this waited for {waiting_for}; nothing was changed. See where it stands with "
                f"`turns inspect {turn_id}`; once its worker is fixed, `turns recover {turn_id}`"
            )


def _unlisted_keyword(agent_id: str, model: str, session_id: str | None) -> str | None:
    """Why the turn's search attributes would not fit Temporal's keyword limit, or None.

    They are set when the turn's workflow starts; a value over the limit makes
    every start fail, which would leave a turn that can never run.
    """
    for what, value in (("agent id", agent_id), ("model", model), ("session id", session_id)):
        if value is not None and keyword_size(value) > MAX_KEYWORD_BYTES:
            return (
                f"its {what} is {len(value.encode())} bytes; Temporal keeps at most "
                f"{MAX_KEYWORD_BYTES} bytes (as JSON) in the {what} search attribute"
            )
    return None


def _input_attributes(input: ExternalDelivery) -> dict[str, Any]:
    """What a span may say about an input: its type, target and decision, never its content."""
    attributes: dict[str, Any] = {"turncore.input.type": input.type}
    call_id = getattr(input, "tool_call_id", None)
    if call_id is not None:
        attributes["gen_ai.tool.call.id"] = call_id
    decision = getattr(input, "decision", None)
    if isinstance(decision, str):
        attributes["decision"] = decision
    return attributes


def _pending_of(outcome: TurnOutcome) -> list[str]:
    if not isinstance(outcome, SuspendedOutcome):
        return []
    return [f"permission:{p.tool_call_id}" for p in outcome.pending_permissions] + [
        f"async:{p.tool_call_id}" for p in outcome.pending_async_tools
    ]


__all__ = [
    "CreateTurnInput",
    "Turn",
    "TurnClient",
    "TurnExecution",
    "Via",
    "decided",
    "iso_now",
    "open_turn_message",
    "os_user",
]
