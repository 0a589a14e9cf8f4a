"""The one mapping between turncore errors and ApplicationError, both ways."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ActivityError, ApplicationError, RetryState

from turncore.errors import (
    ContextResolutionError,
    CorruptTurnError,
    DependencyError,
    InfrastructureError,
    RejectedInputError,
)
from turncore_temporal.activities import failures


def _wrapped(inner: ApplicationError) -> ActivityError:
    """How a regular activity's failure reaches the workflow."""
    outer = ActivityError(
        "activity failed",
        scheduled_event_id=1,
        started_event_id=2,
        identity="w",
        activity_type="t",
        activity_id="1",
        retry_state=RetryState.NON_RETRYABLE_FAILURE,
    )
    outer.__cause__ = inner
    return outer


def test_an_activity_reports_a_dependency_as_the_one_kind_the_workflow_tells_apart() -> None:
    for exc in (DependencyError("no model"), ContextResolutionError("chain unreadable")):
        failure = failures.to_application_error(exc)
        assert failure.type == failures.DEPENDENCY and failure.non_retryable
        assert failures.is_dependency_failure(_wrapped(failure))
        assert failures.cause(_wrapped(failure)) == str(exc)


def test_other_infrastructure_problems_keep_their_class_name_and_are_not_dependencies() -> None:
    failure = failures.to_application_error(CorruptTurnError("torn line", line=3))
    assert failure.type == "CorruptTurnError" and failure.non_retryable
    assert not failures.is_dependency_failure(_wrapped(failure))
    assert failures.failure_of(_wrapped(failure)) is failure


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (failures.rejection("not pending"), RejectedInputError),
        (ApplicationError("bad input", type="ValueError"), RejectedInputError),
        (ApplicationError("no type"), RejectedInputError),
        (failures.dependency_failure("gone"), DependencyError),
        (failures.infrastructure_failure("file"), InfrastructureError),
    ],
)
def test_a_refused_update_maps_back_to_its_turncore_error(
    failure: ApplicationError, expected: type[Exception]
) -> None:
    error = failures.update_refusal(failure, "fallback")
    assert type(error) is expected and str(error) == failure.message


def test_a_failed_run_is_a_dependency_error_or_an_infrastructure_error() -> None:
    dep = failures.run_failure(failures.dependency_failure("gone"), "run failed")
    assert type(dep) is DependencyError and str(dep) == "gone"
    other = failures.run_failure(failures.infrastructure_failure("x"), "run failed")
    assert type(other) is InfrastructureError and str(other) == "run failed"
