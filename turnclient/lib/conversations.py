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

from turnclient.lib.api import open_turn_message
from turnclient.lib.listing import latest_turns
from turncore.errors import InvalidInputError, RejectedInputError, TurnNotFoundError
from turncore.events import ContextRef
from turncore.ids import validate_turn_id
from turncore.reducer import TurnReducer
from turncore.storage.repository import TurnRepository


@dataclass(frozen=True)
class Continuation:
    """What a turn that continues another one starts from."""

    context: ContextRef | None
    session: str | None
    agent: str | None
    """The predecessor's agent (the default for the new turn)."""


async def continuation(
    repository: TurnRepository,
    client: Client | None,
    *,
    continue_from: str | None = None,
    session: str | None = None,
) -> Continuation:
    """Where a new turn starts: after ``continue_from``, after the session's latest turn,
    or (neither) fresh. An open predecessor is refused, naming what it awaits.

    An empty session id is refused: visibility would read it as no filter at all,
    and the "latest turn of the session" would be the newest turn of the whole
    namespace. ``continue_from`` and ``session`` together are refused too: the
    continued turn joins its predecessor's session, whatever ``session`` says.
    """
    if session == "":
        raise InvalidInputError("the session id is empty: name the session, or give none")
    if continue_from is not None and session is not None:
        raise InvalidInputError(
            "give continue_from or session, not both "
            "(a continued turn joins its predecessor's session)"
        )
    if continue_from is None and session is not None:
        if client is None:
            raise ValueError("finding a session's latest turn needs a Temporal client")
        turns = await latest_turns(client, session=session, limit=1)
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


__all__ = ["Continuation", "continuation"]
