"""The cancellation token: monotonic, cloneable, wakes waiters."""

from __future__ import annotations

import asyncio
import gc

import pytest

from turncore.model import (
    DEFAULT_LIMITS,
    CancellationToken,
    FailureKind,
    ModelFailure,
    ModelOutcome,
    StreamEvent,
)
from turncore.model._attempt import Attempt, run_attempt


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


async def test_a_failure_racing_a_cancel_is_retrieved() -> None:
    """The attempt fails just as the caller cancels: the cancel wins, and the
    work's own failure is taken, so asyncio prints nothing "never retrieved"
    later (a GC that ran that report inside another module's ``ast.parse``
    broke CPython 3.11's parser state)."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    token = CancellationToken()

    async def sink(_: StreamEvent) -> None:
        pass

    attempt = Attempt(sink, DEFAULT_LIMITS)

    async def work() -> ModelOutcome:
        token.cancel()
        raise attempt.failure(FailureKind.RATE_LIMIT, "the provider throttled the request")

    try:
        with pytest.raises(ModelFailure) as failed:
            await run_attempt(work, attempt, token, None)
        assert failed.value.kind is FailureKind.CANCELLED
        del failed
        gc.collect()
    finally:
        loop.set_exception_handler(None)
    assert reported == []
