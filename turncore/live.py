"""Process-local live deltas (DESIGN §7).

Text and reasoning deltas are never durable: the process running a model
call publishes them here, and watchers in the same process subscribe by turn
id. Delivery is best-effort and observational — a slow or absent subscriber
never holds the model call back, and a crash losing subscribers reflects
exactly that no execution is known to be active.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from .events import TurnDelta


class LiveHub:
    def __init__(self) -> None:
        self._subscribers: dict[str, list[asyncio.Queue[TurnDelta]]] = defaultdict(list)

    def publish(self, delta: TurnDelta) -> None:
        for queue in list(self._subscribers.get(delta.turn_id, ())):
            queue.put_nowait(delta)

    @asynccontextmanager
    async def subscribe(self, turn_id: str) -> AsyncIterator[asyncio.Queue[TurnDelta]]:
        queue: asyncio.Queue[TurnDelta] = asyncio.Queue()
        self._subscribers[turn_id].append(queue)
        try:
            yield queue
        finally:
            subs = self._subscribers.get(turn_id)
            if subs is not None:
                subs.remove(queue)
                if not subs:
                    del self._subscribers[turn_id]
