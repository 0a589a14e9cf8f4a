"""The cancellation token: monotonic, cloneable, wakes waiters."""

from __future__ import annotations

import asyncio

from turncore.model import CancellationToken


async def test_token_is_monotonic_and_shared_by_clones() -> None:
    token = CancellationToken()
    clone = token.clone().clone()
    assert not token.cancelled and not clone.cancelled
    waiters = [asyncio.ensure_future(t.wait()) for t in (token, clone, clone)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    clone.cancel()
    await asyncio.wait_for(asyncio.gather(*waiters), 1)
    assert token.cancelled and clone.cancelled
    token.cancel()  # idempotent
    assert token.cancelled
    await asyncio.wait_for(token.wait(), 1)  # already cancelled: returns at once
    assert not CancellationToken().cancelled  # independent tokens stay independent


async def test_abandoned_waiters_are_released() -> None:
    token = CancellationToken()
    waiter = asyncio.ensure_future(token.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert token._state.waiters == []
