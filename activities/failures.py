"""The one mapping between turncore's errors and Temporal's ``ApplicationError``.

Errors cross two Temporal boundaries, always as ``ApplicationError`` whose
``type`` names the turncore error class:

- activity → workflow: an activity that cannot establish or persist trustworthy
  state raises ``to_application_error(exc)`` (never retried); the workflow reads
  it back with ``failure_of`` and ``is_dependency_failure``;
- workflow → client: a run that cannot advance fails with ``DependencyError``
  or ``InfrastructureError`` (or the kind an activity reported), an update that
  is refused fails with ``RejectedInputError``; the client turns them back into
  turncore errors with ``update_refusal`` and ``run_failure``.

Every kind is named here once; nothing else compares ``ApplicationError.type``.
"""

from __future__ import annotations

from typing import Final

from temporalio.exceptions import ApplicationError

from turncore.errors import (
    DependencyError,
    ExpiredDeliveryError,
    InfrastructureError,
    RejectedInputError,
    TurnError,
)

DEPENDENCY: Final = "DependencyError"
INFRASTRUCTURE: Final = "InfrastructureError"
REJECTED: Final = "RejectedInputError"
EXPIRED: Final = "ExpiredDeliveryError"

# An update validator's refusal arrives as the exception's class name.
_REJECTION_KINDS: Final = frozenset({REJECTED, "ValueError", "ValidationError"})


def to_application_error(exc: Exception) -> ApplicationError:
    """What an activity raises for an infrastructure problem: retrying won't help.

    Every unresolvable live dependency (a provider missing from the config, a
    tool renamed, a context chain unreadable) travels as ``DependencyError``,
    the one kind the workflow and the client tell apart from the others.
    """
    if isinstance(exc, DependencyError):
        kind = DEPENDENCY
    elif isinstance(exc, RejectedInputError):
        kind = REJECTED  # the input being applied is refused (a staged value gone bad)
    else:
        kind = type(exc).__name__
    return ApplicationError(str(exc), type=kind, non_retryable=True)


def dependency_failure(message: str) -> ApplicationError:
    """The run's failure when the live environment cannot advance the turn (§15.3)."""
    return ApplicationError(message, type=DEPENDENCY, non_retryable=True)


def infrastructure_failure(message: str, kind: str | None = None) -> ApplicationError:
    """The run's failure when the file or an activity cannot be trusted."""
    return ApplicationError(message, type=kind or INFRASTRUCTURE, non_retryable=True)


def rejection(message: str) -> ApplicationError:
    """An update's refusal: the input targets nothing pending now."""
    return ApplicationError(message, type=REJECTED)


def expired(message: str) -> ApplicationError:
    """An update's refusal: it reached the run after its sender's deadline (never applied)."""
    return ApplicationError(message, type=EXPIRED)


def failure_of(exc: BaseException | None) -> ApplicationError | None:
    """The ``ApplicationError`` behind ``exc`` (local activities may raise it unwrapped)."""
    current = exc
    while current is not None:
        if isinstance(current, ApplicationError):
            return current
        current = current.__cause__
    return None


def cause(exc: BaseException) -> str:
    """The message of the failure behind ``exc``."""
    failure = failure_of(exc)
    return failure.message if failure is not None else str(exc)


def is_dependency_failure(exc: BaseException) -> bool:
    failure = failure_of(exc)
    return failure is not None and failure.type == DEPENDENCY


WORKER_SHUTDOWN = "WorkerShutdown"
"""The failure type Temporal gives an activity its stopping worker gave up."""


def given_up_by_its_worker(exc: BaseException) -> bool:
    """Whether an activity ended because the worker running it was stopping."""
    failure = failure_of(exc)
    return failure is not None and failure.type == WORKER_SHUTDOWN


def is_rejection(exc: BaseException) -> bool:
    """Whether an activity refused the input being applied (nothing was written)."""
    failure = failure_of(exc)
    return failure is not None and failure.type == REJECTED


def update_refusal(exc: BaseException | None, fallback: str) -> TurnError:
    """The turncore error a failed update stands for: a rejection unless the
    environment (``DependencyError``) or the turn's file or run is at fault."""
    if not isinstance(exc, ApplicationError):
        return RejectedInputError(str(exc) if exc is not None else fallback)
    if exc.type == DEPENDENCY:
        return DependencyError(exc.message)
    if exc.type == EXPIRED:
        return ExpiredDeliveryError(exc.message)
    if exc.type is None or exc.type in _REJECTION_KINDS:
        return RejectedInputError(exc.message)
    return InfrastructureError(exc.message)


def run_failure(exc: BaseException | None, description: str) -> TurnError:
    """The turncore error a failed run stands for (``description`` says which run)."""
    if isinstance(exc, ApplicationError) and exc.type == DEPENDENCY:
        return DependencyError(exc.message)
    return InfrastructureError(description)


__all__ = [
    "DEPENDENCY",
    "EXPIRED",
    "INFRASTRUCTURE",
    "REJECTED",
    "cause",
    "dependency_failure",
    "expired",
    "failure_of",
    "infrastructure_failure",
    "is_dependency_failure",
    "is_rejection",
    "rejection",
    "run_failure",
    "to_application_error",
    "update_refusal",
]
