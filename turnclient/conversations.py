"""Conversations: turns chained by context reference (spec §6.6).

A turn continues an earlier one when its context is ``{previousTurnId}``;
the predecessor must have ended (``TurnClient.create_turn`` refuses an
open one, naming what it awaits). The continuing turn joins the
predecessor's session; a conversation that was started without one is
named after its first turn, so ``turns list --session FIRST_TURN_ID`` lists
it. ``turns run --session S`` continues the session's latest turn, or starts
the session. Sessions are found through Temporal visibility (the
``TurnSession`` search attribute); the files decide whether a turn ended.

The CLI (``turns run --continue``, ``turns chat``) and the library
(``Turns.run(continue_from=...)``) both go through here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from temporalio.client import Client, WorkflowExecution

from turncore.errors import RejectedInputError, TurnNotFoundError
from turncore.events import ContextRef
from turncore.ids import validate_turn_id
from turncore.reducer import TurnReducer
from turncore.repository import TurnRepository
from turncore_temporal.workflows.turn import (
    TURN_AGENT,
    TURN_MODEL,
    TURN_PENDING,
    TURN_SESSION,
    TURN_STATUS,
)

from .api import open_turn_message


@dataclass(frozen=True)
class TurnSummary:
    """One turn as Temporal visibility lists it."""

    turn_id: str
    status: str | None
    agent: str | None
    model: str | None
    session: str | None
    pending: tuple[str, ...]
    workflow_status: str | None = None
    start_time: str | None = None
    input: str | None = None
    """The preview of the turn's input (from its memo)."""


@dataclass(frozen=True)
class Continuation:
    """What a turn that continues another one starts from."""

    context: ContextRef | None
    session: str | None
    agent: str | None
    """The predecessor's agent (the default for the new turn)."""


def quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


async def list_turns(
    client: Client,
    *,
    status: str | None = None,
    agent: str | None = None,
    session: str | None = None,
    limit: int = 100,
    scan: int = 5000,
) -> list[TurnSummary]:
    """Turns from visibility, newest first; a session's turns oldest first (its order).

    Visibility orders running workflows first; a turn id starts with its creation
    time, so up to ``scan`` workflows are read and sorted by id.
    """
    # A run that continued as new hands the turn to its successor: list only the latest.
    clauses = ["WorkflowType = 'Turn'", "ExecutionStatus != 'ContinuedAsNew'"]
    if status:
        clauses.append(f"{TURN_STATUS.name} = '{quote(status)}'")
    if agent:
        clauses.append(f"{TURN_AGENT.name} = '{quote(agent)}'")
    if session:
        # The first turn of a conversation started without a session names it.
        clauses.append(
            f"({TURN_SESSION.name} = '{quote(session)}' OR WorkflowId = '{quote(session)}')"
        )
    found: dict[str, WorkflowExecution] = {}
    async for wf in client.list_workflows(" AND ".join(clauses), limit=scan):
        if wf.id not in found:  # a later run of the same turn came first
            found[wf.id] = wf
    rows: list[TurnSummary] = []
    for turn_id in sorted(found, reverse=not session)[:limit]:
        wf = found[turn_id]
        a = wf.typed_search_attributes
        memo = await wf.memo()
        rows.append(
            TurnSummary(
                turn_id=turn_id,
                status=a.get(TURN_STATUS),
                agent=a.get(TURN_AGENT),
                model=a.get(TURN_MODEL),
                session=a.get(TURN_SESSION),
                pending=tuple(p for p in (a.get(TURN_PENDING) or "").split(",") if p),
                workflow_status=wf.status.name.lower() if wf.status is not None else None,
                start_time=wf.start_time.isoformat() if wf.start_time else None,
                input=memo.get("input") if isinstance(memo, dict) else None,
            )
        )
    return rows


async def continuation(
    repository: TurnRepository,
    client: Client | None,
    *,
    continue_from: str | None = None,
    session: str | None = None,
) -> Continuation:
    """Where a new turn starts: after ``continue_from``, after the session's latest turn,
    or (neither) fresh. An open predecessor is refused, naming what it awaits."""
    if continue_from is None and session is not None:
        if client is None:
            raise ValueError("finding a session's latest turn needs a Temporal client")
        turns = await list_turns(client, session=session, limit=5000)
        continue_from = turns[-1].turn_id if turns else None
        if continue_from is None:
            return Continuation(context=None, session=session, agent=None)
    if continue_from is None:
        return Continuation(context=None, session=session, agent=None)
    validate_turn_id(continue_from)
    try:
        events = await asyncio.to_thread(repository.read, continue_from)
    except TurnNotFoundError:
        raise RejectedInputError(f"there is no turn {continue_from} to continue") from None
    state = TurnReducer.of(events).state
    if state.terminal is None:
        raise RejectedInputError(open_turn_message(state))
    definition = state.definition
    return Continuation(
        context=ContextRef(previous_turn_id=continue_from),
        session=definition.session_id or continue_from,
        agent=definition.agent.requested.agent_id,
    )


__all__ = ["Continuation", "TurnSummary", "continuation", "list_turns", "quote"]
