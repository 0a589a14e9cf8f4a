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

from temporalio.client import Client
from temporalio.common import SearchAttributeKey

from turncore.errors import RejectedInputError, TurnNotFoundError
from turncore.events import ContextRef
from turncore.ids import validate_turn_id
from turncore.reducer import TurnReducer
from turncore.repository import TurnRepository

from .api import open_turn_message

_KEYS = {
    n: SearchAttributeKey.for_keyword(n)
    for n in ("TurnStatus", "TurnAgent", "TurnModel", "TurnSession", "TurnPendingInputs")
}


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
) -> list[TurnSummary]:
    """Turns from visibility, newest first; a session's turns in the order they were created."""
    # A run that continued as new hands the turn to its successor: list only the latest.
    clauses = ["WorkflowType = 'Turn'", "ExecutionStatus != 'ContinuedAsNew'"]
    if status:
        clauses.append(f"TurnStatus = '{quote(status)}'")
    if agent:
        clauses.append(f"TurnAgent = '{quote(agent)}'")
    if session:
        # The first turn of a conversation started without a session names it.
        clauses.append(f"(TurnSession = '{quote(session)}' OR WorkflowId = '{quote(session)}')")
    rows: dict[str, TurnSummary] = {}
    async for wf in client.list_workflows(" AND ".join(clauses), limit=limit * 4):
        if wf.id in rows:
            continue  # a later run of the same turn came first
        a = wf.typed_search_attributes
        rows[wf.id] = TurnSummary(
            turn_id=wf.id,
            status=a.get(_KEYS["TurnStatus"]),
            agent=a.get(_KEYS["TurnAgent"]),
            model=a.get(_KEYS["TurnModel"]),
            session=a.get(_KEYS["TurnSession"]),
            pending=tuple(p for p in (a.get(_KEYS["TurnPendingInputs"]) or "").split(",") if p),
            workflow_status=wf.status.name.lower() if wf.status is not None else None,
            start_time=wf.start_time.isoformat() if wf.start_time else None,
        )
        if len(rows) >= limit:
            break
    listed = list(rows.values())
    if session:
        listed.sort(key=lambda r: r.turn_id)  # turn ids are minted in creation order
    return listed


async def continuation(
    repository: TurnRepository,
    client: Client,
    *,
    continue_from: str | None = None,
    session: str | None = None,
) -> Continuation:
    """Where a new turn starts: after ``continue_from``, after the session's latest turn,
    or (neither) fresh. An open predecessor is refused, naming what it awaits."""
    if continue_from is None and session is not None:
        turns = await list_turns(client, session=session)
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
