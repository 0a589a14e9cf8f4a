"""Follow one turn: its durable events once each, then live deltas, until it settles.

This is the one place that merges the two streams every surface reads
(DESIGN §7, §9): the durable events, tailed from the repository by offset
(the 1-based line number, §17.1), and the ephemeral deltas of the model call
that is open now, read from the work dir's delta spool (``deltaspool``),
whichever process on this host runs that call. The web UI's SSE endpoint and
``turns watch`` both iterate ``follow_turn``.

Rules, so that a watcher sees no gap and no duplicate:

- Durable events after ``after`` are yielded in file order, each once.
- A delta is yielded only while its model call is open in the events read so
  far: deltas of a call whose ``model_call_requested`` has not been read yet
  wait for it, and deltas of a closed call are dropped (its
  ``model_call_completed`` already carries the whole message).
- Deltas are resumable too: a position ``(model call, seq)`` skips those
  already seen.
- The stream ends at the first settle point (suspended or terminal) reached
  after the start — or, with ``until="terminal"``, only at a terminal event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from turnclient.lib.deltaspool import DeltaReader, DeltaSpoolReader, SpooledDelta
from turncore.events import TurnDelta, TurnEvent
from turncore.reducer import TurnReducer, TurnState
from turncore.storage.repository import TurnRepository


@dataclass(frozen=True)
class Durable:
    offset: int
    """The event's 1-based line number in the turn file."""
    event: TurnEvent


@dataclass(frozen=True)
class Live:
    offset: int
    """The number of durable events before this delta (where a resume continues)."""
    seq: int
    delta: TurnDelta


@dataclass(frozen=True)
class Settled:
    offset: int
    state: TurnState


FollowItem = Durable | Live | Settled


def settled(state: TurnState) -> bool:
    return state.terminal is not None or state.suspension is not None


async def follow_turn(
    repository: TurnRepository,
    spool: Path,
    turn_id: str,
    *,
    after: int = 0,
    delta_after: tuple[int, int] = (-1, 0),
    until: Literal["settled", "terminal"] = "settled",
    poll: float = 0.05,
    deltas: DeltaReader | None = None,
) -> AsyncGenerator[FollowItem, None]:
    """Yield the turn's stream from line ``after`` on (raises ``TurnNotFoundError``).

    ``Settled`` is yielded at every settle point the stream reaches (and at
    once if the turn already sits at one and nothing follows ``after``).
    """
    # The spool is read before the file, every round: the process running a
    # model call appends its durable step events before it spools the deltas
    # they open, so every delta read has its durable context read right after.
    reader: DeltaReader = deltas or DeltaSpoolReader(spool, turn_id, delta_after)

    async def live() -> list[SpooledDelta]:
        # A spool is read in the loop, not a thread: it is at most two small local
        # files, and many watchers must not fill the default executor the repository
        # reads need. A database reader does I/O: a thread.
        return await asyncio.to_thread(reader.read) if reader.blocking else reader.read()

    spooled = await live()
    events = await asyncio.to_thread(repository.read, turn_id)
    after = max(0, min(after, len(events)))
    reducer = TurnReducer.of(events[:after])
    offset = after
    backlog = events[after:]
    waiting: list[SpooledDelta] = []
    first = True
    while True:
        for event in backlog:
            reducer.apply(event)
            offset += 1
            yield Durable(offset, event)
        state = reducer.state
        if settled(state) and (backlog or first):
            yield Settled(offset, state)
            if state.terminal is not None or until == "settled":
                return
        first = False
        open_call = state.open_model_call()
        waiting += spooled
        keep: list[SpooledDelta] = []
        for d in waiting:
            index = d.delta.model_call_index
            if open_call is not None and index == open_call.index:
                yield Live(offset, d.seq, d.delta)
            elif index >= len(state.model_calls):
                keep.append(d)  # its call is not in the file yet
            # else: its call is closed, and its durable record says it all
        waiting = keep
        await asyncio.sleep(poll)
        spooled = await live()
        backlog = await asyncio.to_thread(repository.read_after, turn_id, offset)


__all__ = ["Durable", "FollowItem", "Live", "Settled", "follow_turn", "settled"]
