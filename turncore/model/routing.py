"""Routing's retries around one adapter (seed 003: "A client performs one
attempt. Routing owns retries"; spec §21.1: the injected provider "may perform
internal transport retries").

:class:`RetryingModel` wraps a :class:`~turncore.model.port.Model` and repeats
an attempt only when the failed one provably did no work upstream:

- ``not-sent`` transport failures (the connection was never established);
- ``rejected`` rate-limit failures (HTTP 429, 503, 529: throttled or
  overloaded before accepting work), except quota and billing refusals,
  which waiting does not cure.

``unknown`` and ``accepted`` dispatch are never retried: the upstream may
have done, and billed, the work. Nothing is retried once the attempt has
emitted a stream event, and invalid input is never retried (it would fail
the same way). The wait before retry *n* is ``backoff * 2**(n-1)`` (with a
little jitter), or the provider's ``Retry-After`` hint when it sent one; a
hint longer than ``max_wait`` is not waited for, and the failure is final.
Cancellation wakes a wait at once. The failure that escapes says how many
attempts were made.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from turncore.model.binding import Binding
from turncore.model.failures import Dispatch, FailureKind, ModelFailure
from turncore.model.port import (
    CancellationToken,
    Model,
    ModelCallRequest,
    ModelOutcome,
    Sink,
    StreamEvent,
)

# 429s that say "you have no quota/credit": a retry cannot succeed.
_NOT_TRANSIENT_CODES = frozenset({"insufficient_quota", "billing_error"})


@dataclass(frozen=True)
class RetryPolicy:
    """How persistently routing repeats an attempt that did no work upstream."""

    max_retries: int = 2
    """Further attempts after the first (0: one attempt only)."""
    backoff: float = 1.0
    """Seconds before the first retry when the provider gave no hint; doubles after."""
    max_wait: float = 60.0
    """The longest single wait; a longer ``Retry-After`` hint makes the failure final."""

    def __post_init__(self) -> None:
        if not 0 <= self.max_retries <= 10:
            raise ValueError("max_retries must be between 0 and 10")
        if not self.backoff >= 0 or not self.max_wait >= 0:
            raise ValueError("backoff and max_wait must not be negative")


def retryable(failure: ModelFailure) -> bool:
    """True when the failed attempt provably did no work upstream and may succeed later."""
    if failure.dispatch is Dispatch.NOT_SENT:
        return failure.kind is FailureKind.TRANSPORT
    if failure.dispatch is Dispatch.REJECTED:
        return (
            failure.kind is FailureKind.RATE_LIMIT
            and failure.provider_code not in _NOT_TRANSIENT_CODES
        )
    return False


def falls_back(failure: ModelFailure) -> bool:
    """True when another model may answer instead: the provider is unavailable or
    overloaded, not the request at fault (seed 003's taxonomy).

    Rate limits and overload (429, 503, 529; quota too: another provider has its
    own), transport failures and deadlines whose upstream did not answer (not
    sent, a 5xx or a timeout before any status). Never once the upstream accepted
    the request (a 2xx came back), nor for invalid input, authentication, bounds,
    refusal or unsupported settings, which another model would only repeat or
    which say the configuration is wrong. The caller also never falls back after
    any output streamed.
    """
    match failure.kind:
        case FailureKind.RATE_LIMIT:
            return True
        case FailureKind.TRANSPORT | FailureKind.DEADLINE:
            return failure.dispatch is not Dispatch.ACCEPTED
        case _:
            return False


def retry_delay(policy: RetryPolicy, retry: int, failure: ModelFailure) -> float | None:
    """Seconds to wait before retry number ``retry`` (1-based); None: do not retry."""
    if failure.retry_after is not None:
        # A hint is not permission (seed 003), but a retry sooner than it asks
        # for would only be throttled again.
        return failure.retry_after if failure.retry_after <= policy.max_wait else None
    base: float = policy.backoff * 2.0 ** (retry - 1)
    return min(policy.max_wait, base * (1 + random.random() / 4))


class RetryingModel(Model):
    """The wrapped model, with :func:`retryable` failures repeated per the policy."""

    def __init__(self, inner: Model, policy: RetryPolicy) -> None:
        self._inner = inner
        self._policy = policy

    def __repr__(self) -> str:
        return f"RetryingModel({self._inner!r}, max_retries={self._policy.max_retries})"

    @property
    def binding(self) -> Binding:
        return self._inner.binding

    @property
    def inner(self) -> Model:
        """The adapter that performs each attempt."""
        return self._inner

    @property
    def policy(self) -> RetryPolicy:
        return self._policy

    async def turn(
        self, request: ModelCallRequest, sink: Sink, cancel: CancellationToken
    ) -> ModelOutcome:
        emitted = False

        async def watched(event: StreamEvent) -> None:
            nonlocal emitted
            emitted = True
            await sink(event)

        attempts = 1
        while True:
            try:
                return await self._inner.turn(request, watched, cancel)
            except ModelFailure as failure:
                last = failure
            if emitted or attempts > self._policy.max_retries or not retryable(last):
                raise last.again(attempts) if attempts > 1 else last
            wait = retry_delay(self._policy, attempts, last)
            if wait is None:
                raise last.again(attempts) if attempts > 1 else last
            if await _cancelled_during(wait, cancel):
                # The attempt that was due never left; the evidence is the last one's.
                raise ModelFailure(
                    FailureKind.CANCELLED,
                    last.dispatch,
                    "the call was cancelled while waiting to retry",
                    status=last.status,
                    provider_code=last.provider_code,
                    attempts=attempts,
                )
            attempts += 1


async def _cancelled_during(seconds: float, cancel: CancellationToken) -> bool:
    """Wait ``seconds``; True as soon as ``cancel`` fires instead."""
    try:
        await asyncio.wait_for(cancel.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True
