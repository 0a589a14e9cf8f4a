"""``Turns``: turncore as a library, in one object.

    async with Turns(agents=[Agent(...)], tools=[...]) as turns:
        result = await turns.run("What is 6 times 7?", agent="math")
        print(result.text)

``allow``/``deny`` name tools the ``auto_permission=True`` classifier allows or
denies without asking (like ``[permissions]``); other calls that need approval
wait for a human.

``models`` registers Python functions as scripted models (``scripted/NAME``):
a function gets the composed request and returns ``{"text": ...,
"toolCalls": [...]}``, so an app can be tested without a provider.

``Turns`` wraps everything a process needs: the configuration (the work
dir's ``turns.toml`` over the built-ins, plus agents and tools defined in
Python, checked by the same rules), the connection (the work dir's embedded
dev server by default, ``TEMPORAL_ADDRESS`` when set, or a ``Client`` you
pass), a worker in this process (unless ``worker=False``), and the turn
files. Its methods are the operations of the CLI: start and run turns,
continue a conversation, approve/deny/complete/progress/cancel, read state
and events, watch live, list, recover, and serve.

Errors an application maps to responses are typed (all from
``turncore.errors``): ``RejectedInputError`` (the input targets nothing
pending, the turn ended, an unknown agent; HTTP 409/422),
``TurnNotFoundError`` (404), ``InvalidTurnIdError`` (400) and
``DependencyError`` (a model, tool or agent that cannot be resolved, or
a bad configuration: 500/503).

This module may import the worker (``turncore_temporal.worker``);
``turnclient.runtime.connection`` may not, so there is no import cycle.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar, get_args

from pydantic import TypeAdapter, ValidationError
from temporalio.client import Client

from turnclient.lib.api import CreateTurnInput, TurnClient, decided
from turnclient.lib.conversations import continuation
from turnclient.lib.listing import TurnSummary, latest_turns, pending_across
from turnclient.lib.stuck import StuckRun
from turnclient.runtime.app import App
from turnclient.runtime.config import Agent, load_config, with_python, work_dir_from_env
from turnclient.runtime.connection import Runtime, temporal
from turncore.advance import outcome_of
from turncore.errors import (
    InfrastructureError,
    InvalidInputError,
    RejectedInputError,
    TurnNotFoundError,
    invalid_input,
)
from turncore.events import (
    AgentOverrides,
    AsyncToolProgressInput,
    AsyncToolResultInput,
    CancelInput,
    PermissionDecisionInput,
    ToolResultData,
    TurnEvent,
    TurnExternalInput,
    TurnOutcome,
    TurnStreamEvent,
)
from turncore.events import RequestedAgent as _RequestedAgent
from turncore.ids import validate_turn_id
from turncore.messages import UserMessage
from turncore.model.scripted import ScriptFunction
from turncore.output import answer_text, answer_value
from turncore.reducer import TurnReducer, TurnState
from turncore.tools import Tool
from turncore_temporal.worker import serving

Status = Literal["running", "suspended", "completed", "failed", "cancelled"]


@functools.lru_cache(maxsize=32)
def _adapter(output_type: Any) -> TypeAdapter[Any]:
    return TypeAdapter(output_type)


_I = TypeVar("_I")
_TERMINAL = ("turn_completed", "turn_failed", "turn_cancelled")


@dataclass(frozen=True)
class TurnResult:
    """A turn at a settle point: its id and its §16.4 outcome."""

    turn_id: str
    outcome: TurnOutcome
    agent: Agent | None = None
    """The agent that ran the turn, when it declares structured output."""

    @property
    def status(self) -> str:
        return self.outcome.status

    @property
    def text(self) -> str:
        """The final assistant text of a completed turn ("" otherwise)."""
        return self.outcome.output.text() if self.outcome.status == "completed" else ""

    @property
    def output(self) -> Any:
        """The structured answer of a completed turn whose agent declares one: an
        instance of its ``output_type`` (validated here), or the JSON value of its
        ``output_schema``; None for any other turn."""
        if self.outcome.status != "completed" or self.agent is None:
            return None
        if self.agent.output_schema is None:
            return None
        if self.agent.output_type is not None:
            text = answer_text(self.outcome.output)
            return _adapter(self.agent.output_type).validate_json(text)
        return answer_value(self.outcome.output)


class Turns:
    """The runtime object: configuration, connection, worker and turn files in one."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str] | None = None,
        *,
        agents: Sequence[Agent] = (),
        tools: Sequence[Tool] = (),
        default_agent: str | None = None,
        default_model: str | None = None,
        allow: Sequence[str] = (),
        deny: Sequence[str] = (),
        max_concurrent_subagents: int | None = None,
        models: Mapping[str, ScriptFunction] = {},  # noqa: B006 - never mutated
        client: Client | None = None,
        worker: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._env = os.environ if env is None else env
        root = Path(work_dir).absolute() if work_dir is not None else work_dir_from_env(self._env)
        self.app = App(
            agents=tuple(agents),
            tools=tuple(tools),
            models=dict(models),  # served as "scripted/NAME"
            default_agent=default_agent,
            default_model=default_model,
            allow=tuple(allow),
            deny=tuple(deny),
        )
        """What this object defines: ``--app MODULE:ATTR`` naming it serves the same."""
        config = with_python(
            # This object is an app itself: TURNS_APP or `app =` is for other processes.
            load_config(root, self._env, with_app=False),
            agents=self.app.agents,
            tools=self.app.tools,
            models=self.app.models,
            default_agent=default_agent,
            default_model=default_model,
            allow=allow,
            deny=deny,
        )
        if max_concurrent_subagents is not None:
            config = replace(config, max_concurrent_subagents=max_concurrent_subagents)
        self.runtime = Runtime.from_config(config, env=self._env)
        self._client = client
        self._worker = worker
        self._stack: contextlib.AsyncExitStack | None = None
        self._opening = False
        self._closed: asyncio.Event | None = None
        """Set when the block ends: calls still waiting then end instead of retrying."""
        self._turns: TurnClient | None = None

    # ---------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Turns:
        # Open once at a time: a second entry would serve a second worker, and its
        # exit would close the first block's connection under it.
        if self._stack is not None or self._opening:
            raise RuntimeError(
                "this Turns is already open: enter it once (`async with`) and share the "
                "object inside the block"
            )
        self._opening = True
        stack = contextlib.AsyncExitStack()
        try:
            client = self._client
            server = None
            if client is None:
                conn = await stack.enter_async_context(
                    temporal(self.runtime.work_dir, env=self._env)
                )
                client, server = conn.client, conn.server
            if self._worker:
                await stack.enter_async_context(serving(self.runtime, client))
        except BaseException:
            await stack.aclose()
            raise
        finally:
            self._opening = False
        self._stack = stack
        self._closed = asyncio.Event()
        self._turns = self.runtime.turn_client(client, server, serving=self._worker)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack, self._turns = self._stack, None, None
        if self._closed is not None:
            self._closed.set()  # calls still waiting end now (see _served)
        if stack is not None:
            await stack.aclose()

    @property
    def client(self) -> TurnClient:
        """The underlying ``TurnClient`` (inside ``async with``)."""
        if self._turns is None:
            raise RuntimeError("use Turns inside `async with Turns(...) as turns:`")
        return self._turns

    @property
    def work_dir(self) -> Path:
        return self.runtime.work_dir

    async def serve(self) -> None:
        """Serve turns (the worker runs already inside ``async with``) until cancelled."""
        self.client  # noqa: B018 - raises outside `async with`
        await asyncio.Event().wait()

    # ---------------------------------------------------------------- starting

    async def start(
        self,
        prompt: str,
        *,
        agent: str | None = None,
        model: str | None = None,
        session: str | None = None,
        continue_from: str | None = None,
        auto_permission: bool = False,
        human_available: bool = True,
        max_model_calls: int | None = None,
    ) -> str:
        """Create a turn (nothing runs yet; ``advance`` or ``wait`` runs it). Returns its id.

        ``continue_from`` continues a conversation after a terminal turn (§6.6):
        context is a reference to it, the session is its session (or, if it had
        none, its id), and the agent defaults to its agent. ``session`` alone
        continues the session's latest turn, or starts the session.
        """
        request = await self._request(
            prompt,
            agent=agent,
            model=model,
            session=session,
            continue_from=continue_from,
            auto_permission=auto_permission,
            human_available=human_available,
            max_model_calls=max_model_calls,
        )
        return await self.client.create_turn(request)

    async def run(self, prompt: str, **options: Any) -> TurnResult:
        """Start a turn (same options as ``start``) and advance it until it settles.

        For an agent with structured output, ``TurnResult.output`` is the answer."""
        turn_id = await self.start(prompt, **options)
        outcome = await self.advance(turn_id)
        agents = self.runtime.config.agents
        agent: Agent | None = None
        if outcome.status == "completed" and any(a.output_schema for a in agents.values()):
            ran = (await self._state(turn_id)).definition.agent.requested.agent_id
            agent = agents.get(ran)
        return TurnResult(turn_id, outcome, agent)

    async def _request(
        self,
        prompt: str,
        *,
        agent: str | None,
        model: str | None,
        session: str | None,
        continue_from: str | None,
        auto_permission: bool,
        human_available: bool,
        max_model_calls: int | None,
    ) -> CreateTurnInput:
        if not prompt.strip():
            raise InvalidInputError("the prompt is empty: say what the turn is about")
        after = await continuation(
            self.runtime.repository,
            self.client.temporal,
            continue_from=continue_from,
            session=session,
        )
        context, session, agent = after.context, after.session, agent or after.agent
        config = self.runtime.config
        name = agent or config.default_agent
        if name not in config.agents:
            known = ", ".join(sorted(config.agents))
            raise RejectedInputError(f"unknown agent {name!r} (known: {known})")
        descriptor = self.runtime.model_override(model) if model is not None else None
        resolved = self.runtime.model_for(name, model)
        if resolved is not None:
            self.runtime.models.resolve(resolved)  # a missing key fails before any file exists
        options: dict[str, Any] = {}
        if max_model_calls is not None:
            options["max_model_calls"] = max_model_calls
        return CreateTurnInput(
            agent=_RequestedAgent(
                agent_id=name,
                overrides=AgentOverrides(model=descriptor) if descriptor is not None else None,
            ),
            input=UserMessage(content=prompt),
            human_available=human_available,
            auto_permission=auto_permission,
            session_id=session,
            context=context,
            reasoning_effort=config.agents[name].reasoning_effort,
            **options,
        )

    # ---------------------------------------------------------------- advancing

    async def advance(self, turn_id: str, input: TurnExternalInput | None = None) -> TurnOutcome:
        """Advance the turn by at most one input until it settles; its outcome."""
        return await self._served(turn_id, self.client.advance_turn(turn_id, input).outcome)

    async def approve(
        self, turn_id: str, tool_call_id: str, *, by: str | None = None
    ) -> TurnOutcome:
        """Allow the call; ``by`` names who decided (recorded with ``via: api`` and the time)."""
        decision = _input(
            "approve",
            lambda: PermissionDecisionInput(
                tool_call_id=tool_call_id, decision="allow", metadata=decided("api", by)
            ),
        )
        return await self.advance(turn_id, decision)

    async def deny(
        self, turn_id: str, tool_call_id: str, reason: str | None = None, *, by: str | None = None
    ) -> TurnOutcome:
        metadata = decided("api", by, reason)
        decision = _input(
            "deny",
            lambda: PermissionDecisionInput(
                tool_call_id=tool_call_id, decision="deny", metadata=metadata
            ),
        )
        return await self.advance(turn_id, decision)

    async def complete(
        self,
        turn_id: str,
        tool_call_id: str,
        output: Any,
        *,
        is_error: bool = False,
        by: str | None = None,
    ) -> TurnOutcome:
        """Supply the result of an async tool call (such as ``ask_human``); ``by`` as for
        ``approve``."""
        result = _input(
            "complete",
            lambda: AsyncToolResultInput(
                tool_call_id=tool_call_id,
                result=ToolResultData(
                    output=output, is_error=is_error, metadata=decided("api", by)
                ),
            ),
        )
        return await self.advance(turn_id, result)

    async def progress(self, turn_id: str, tool_call_id: str, data: Any) -> TurnOutcome:
        progress = _input(
            "progress", lambda: AsyncToolProgressInput(tool_call_id=tool_call_id, progress=data)
        )
        return await self.advance(turn_id, progress)

    async def cancel(self, turn_id: str, reason: str | None = None) -> TurnOutcome:
        return await self.advance(turn_id, _input("cancel", lambda: CancelInput(reason=reason)))

    async def recover(self, turn_id: str) -> TurnOutcome:
        """Serve a turn until it settles, starting its workflow from the file if none runs.

        A stuck run (its workflow task keeps failing, as after a deploy of
        workflow code that does not replay it) is terminated first and a new
        run starts from the file (``TurnClient.rebuild``).
        """

        async def rebuilt_then_served() -> TurnOutcome:
            await self.client.rebuild(turn_id)
            return await self.client.recover(turn_id)

        return await self._served(turn_id, rebuilt_then_served())

    async def stuck(self, turn_id: str) -> StuckRun | None:
        """The turn's run if its workflow task keeps failing (with the cause), else None."""
        return await self.client.stuck(turn_id)

    async def _served(self, turn_id: str, call: Awaitable[TurnOutcome]) -> TurnOutcome:
        """``call``, or an ``InfrastructureError`` once this ``Turns`` closes under it.

        The block's end stops this process's worker and releases the embedded
        server; a call still waiting would retry against them for minutes. The
        turn is left as it is, durable in its file.
        """
        task = asyncio.ensure_future(call)
        closed = asyncio.ensure_future(self._closed.wait() if self._closed else asyncio.Future())
        try:
            await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            closed.cancel()
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.wait({task})
        if not task.cancelled():
            task.exception()  # retrieved: the error below says what happened
        raise InfrastructureError(
            f"this Turns closed while turn {turn_id} was advancing; the turn is left as it "
            f"is (Turns.recover or `turns recover {turn_id}` serves it again)"
        )

    # ---------------------------------------------------------------- reading

    async def events(self, turn_id: str) -> list[TurnEvent]:
        return (await self.client.get_turn(turn_id)).events

    async def state(self, turn_id: str) -> TurnState:
        return await self._state(turn_id)

    async def outcome(self, turn_id: str) -> TurnOutcome | None:
        """The outcome at the last settle point recorded in the file; None while running."""
        return outcome_of(await self._state(turn_id))

    async def _state(self, turn_id: str) -> TurnState:
        validate_turn_id(turn_id)
        events = await asyncio.to_thread(self.runtime.repository.read, turn_id)
        return TurnReducer.of(events).state

    async def watch(
        self, turn_id: str, *, until: Literal["ended", "settled"] = "ended", interval: float = 0.05
    ) -> AsyncIterator[TurnStreamEvent]:
        """Every durable event of the turn from the first, then new ones and this process's
        deltas as they come, until the turn ends (or, with ``until="settled"``, until it
        also suspends). Nothing is skipped or repeated."""
        validate_turn_id(turn_id)
        repo, hub = self.runtime.repository, self.runtime.hub
        if not await asyncio.to_thread(repo.exists, turn_id):
            raise TurnNotFoundError(f"no turn {turn_id} in {self.work_dir}")
        deltas = hub.attach(turn_id)
        try:
            offset = 0
            while True:
                while not deltas.empty():
                    yield deltas.get_nowait()
                new = await asyncio.to_thread(repo.read_after, turn_id, offset)
                for event in new:
                    offset += 1
                    yield event
                    if event.type in _TERMINAL or (
                        until == "settled" and event.type == "turn_suspended"
                    ):
                        return
                await asyncio.sleep(interval)
        finally:
            hub.detach(turn_id, deltas)

    async def list(
        self,
        *,
        status: Status | None = None,
        agent: str | None = None,
        session: str | None = None,
        limit: int = 100,
    ) -> list[TurnSummary]:
        """Turns from Temporal visibility, newest first; a session's last turns in order."""
        if status is not None and status not in get_args(Status):
            known = ", ".join(get_args(Status))
            raise InvalidInputError(f"list: unknown status {status!r} (known: {known})")
        if limit < 1:
            raise InvalidInputError(f"list: limit is {limit}; list at least one turn")
        return await latest_turns(
            self.client.temporal, status=status, agent=agent, session=session, limit=limit
        )

    async def pending(self) -> dict[str, Any]:
        """What every suspended turn waits for, newest turn first, read from the files:
        ``{"turns": [{turnId, agent, prompt, permissions, asyncTools}…], "partial": bool}``,
        exactly the web UI's ``GET /api/pending``. ``partial`` is true when more than
        ``turnclient.lib.listing.PENDING_LIMIT`` turns are suspended (only the newest are read).

        Suspended turns are found through Temporal visibility, which is
        eventually consistent: a turn that suspended a moment ago may be listed
        a moment later. Each turn's file then says what it awaits."""
        return await pending_across(self.client.temporal, self.runtime.repository)

    async def pending_approvals(self) -> builtins.list[dict[str, Any]]:
        """Every tool call that awaits a human's approval, from ``pending()``: one
        ``{turnId, toolCallId, toolName, input, request[, reason]}`` per call (check
        ``pending()["partial"]`` when thousands of turns may be suspended)."""
        view = await self.pending()
        return [
            {"turnId": turn["turnId"], **approval}
            for turn in view["turns"]
            for approval in turn["permissions"]
        ]


def _input(what: str, build: Callable[[], _I]) -> _I:
    """An input made from a caller's arguments; a value its model refuses (a set as an
    output, an empty call id) is the caller's ``InvalidInputError``, before anything is sent."""
    try:
        return build()
    except ValidationError as exc:
        raise invalid_input(what, exc) from None


__all__ = ["TurnResult", "TurnSummary", "Turns"]
