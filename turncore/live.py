"""Process-local live deltas (DESIGN §7).

Text and reasoning deltas are never durable: the process running a model
call publishes them here, and watchers in the same process subscribe by turn
id. Delivery is best-effort and observational — a slow or absent subscriber
never holds the model call back, and a crash losing subscribers reflects
exactly that no execution is known to be active.

A hub may also hand every delta to a ``DeltaMirror`` — the port through which
deltas leave the process (the work dir's per-turn spool, see
``turnclient.lib.deltaspool``), so that watchers in other processes on the same
host see them too. The mirror is told when a model call ends, so it can drop
what it kept for that call: deltas live exactly as long as their call.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal, Protocol

from ._wire import WireModel
from .events import TurnDelta


class TurnProcessingStart(WireModel):
    """Ephemeral (§17): an advance of this turn began in this process. Never persisted."""

    type: Literal["turn-processing-start"] = "turn-processing-start"
    turn_id: str


class TurnProcessingEnd(WireModel):
    """Ephemeral (§17): that advance settled or failed. Never persisted."""

    type: Literal["turn-processing-end"] = "turn-processing-end"
    turn_id: str


LifecycleEvent = TurnProcessingStart | TurnProcessingEnd


class DeltaMirror(Protocol):
    """Where a hub's deltas go besides its in-process subscribers (best effort: never raises)."""

    def publish(self, delta: TurnDelta) -> None: ...

    def finish(self, turn_id: str, model_call_index: int) -> None:
        """The model call ended: its deltas are no longer needed."""
        ...


class LiveHub:
    def __init__(self, mirror: DeltaMirror | None = None) -> None:
        self._mirror = mirror
        self._subscribers: dict[str, list[asyncio.Queue[TurnDelta]]] = defaultdict(list)
        self._lifecycle: list[asyncio.Queue[LifecycleEvent]] = []
        self.active: set[str] = set()
        """Turns with an advance in progress in this process; lost with the process,
        which is exactly right: no execution is then known to be active."""

    def publish_lifecycle(self, event: LifecycleEvent) -> None:
        if isinstance(event, TurnProcessingStart):
            self.active.add(event.turn_id)
        else:
            self.active.discard(event.turn_id)
        for queue in list(self._lifecycle):
            queue.put_nowait(event)

    def lifecycle(self) -> asyncio.Queue[LifecycleEvent]:
        """A queue of every lifecycle event from now on (until ``drop_lifecycle``)."""
        queue: asyncio.Queue[LifecycleEvent] = asyncio.Queue()
        self._lifecycle.append(queue)
        return queue

    def drop_lifecycle(self, queue: asyncio.Queue[LifecycleEvent]) -> None:
        if queue in self._lifecycle:
            self._lifecycle.remove(queue)

    def publish(self, delta: TurnDelta) -> None:
        for queue in list(self._subscribers.get(delta.turn_id, ())):
            queue.put_nowait(delta)
        if self._mirror is not None:
            self._mirror.publish(delta)

    def finish_call(self, turn_id: str, model_call_index: int) -> None:
        """The process running model call ``model_call_index`` is done with it."""
        if self._mirror is not None:
            self._mirror.finish(turn_id, model_call_index)

    def attach(self, turn_id: str) -> asyncio.Queue[TurnDelta]:
        """Start receiving the turn's deltas now; pair with ``detach``."""
        queue: asyncio.Queue[TurnDelta] = asyncio.Queue()
        self._subscribers[turn_id].append(queue)
        return queue

    def detach(self, turn_id: str, queue: asyncio.Queue[TurnDelta]) -> None:
        subs = self._subscribers.get(turn_id)
        if subs is not None and queue in subs:
            subs.remove(queue)
            if not subs:
                del self._subscribers[turn_id]

    @asynccontextmanager
    async def subscribe(self, turn_id: str) -> AsyncIterator[asyncio.Queue[TurnDelta]]:
        queue = self.attach(turn_id)
        try:
            yield queue
        finally:
            self.detach(turn_id, queue)
