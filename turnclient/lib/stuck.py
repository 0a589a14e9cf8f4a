"""Stuck runs: a turn whose workflow task keeps failing.

A worker that cannot run a turn's workflow task (most often new workflow code
that does not replay the run's history: Temporal's non-determinism error,
TMPRL1100) fails it, and the server retries it about every ten seconds,
forever. Nothing in the turn's file changes and no update is ever answered, so
every command waiting on the run would wait for nothing.

``stuck_run`` tells such a run apart from one that is merely slow or whose
worker died (a timed-out task is taken by the next worker; that is not
stuck): the server's description shows a retried workflow task, and the
run's history ends its last workflow task with a WorkflowTaskFailed event,
whose cause and message say why. It is one describe call, plus one short
read of the history's tail when a task is being retried, so waiting
commands, ``turns list``/``show``/``state``, the web UI and ``turns
recover`` all ask it.

The fix is always the same: rebuild the run from the file (``turns recover
TURN`` terminates the stuck run and starts a new one, which reloads the
file), or roll the workers back to code that replays it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.workflowservice.v1 import (
    DescribeWorkflowExecutionRequest,
    GetWorkflowExecutionHistoryReverseRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from turncore.errors import StuckTurnError

_T = TypeVar("_T")

NON_DETERMINISM = "non-determinism"
"""``StuckRun.kind`` of a run whose history the installed workflow code does not replay."""

_RETRIED_AGAIN = 3
"""The attempt from which a failure other than non-determinism counts as stuck.

Non-determinism repeats on every attempt of the same code, so one failure
says it. Anything else may pass: a server-side cause (an unhandled command)
clears on the next attempt, and so may a worker's own (a sandbox deadlock
on an overloaded host). The server retries a failed task at once, then about
every ten seconds, so a second failure in a row is the sign."""

_TAIL = 64
"""History events read from the end to find the last workflow task's fate."""

_TASK_ENDS = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
}


@dataclass(frozen=True)
class StuckRun:
    """A run whose workflow task keeps failing, and why."""

    turn_id: str
    run_id: str
    kind: str
    """``non-determinism`` or ``failure``."""
    message: str
    """The failure's own words (first line), as the worker reported them."""
    attempts: int
    """The attempt of the workflow task now pending (1 + the failures so far)."""

    @property
    def cause(self) -> str:
        """The cause in one phrase, for one-line messages and listings."""
        if self.kind == NON_DETERMINISM:
            return f"non-determinism after a code change ({self.message})"
        return f"its workflow task fails: {self.message}"

    @property
    def fix(self) -> str:
        return f"turns recover {self.turn_id}"

    def describe(self) -> str:
        """One line: the turn, the cause and the command that fixes it."""
        return (
            f"turn {self.turn_id} is stuck: {self.cause}; rebuild it from its file with: "
            f"{self.fix} (or roll the workers back to code that replays it)"
        )


async def stuck_run(client: Client, turn_id: str) -> StuckRun | None:
    """The turn's latest run if it is running and its workflow task keeps failing, else None.

    A turn without a workflow, or a closed one, is not stuck. RPC failures
    other than "not found" propagate: the caller decides whether to retry.
    """
    service = client.workflow_service
    execution = WorkflowExecution(workflow_id=turn_id)
    try:
        desc = await service.describe_workflow_execution(
            DescribeWorkflowExecutionRequest(namespace=client.namespace, execution=execution)
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    info = desc.workflow_execution_info
    if info.HasField("close_time") or not desc.HasField("pending_workflow_task"):
        return None
    attempt = desc.pending_workflow_task.attempt
    if attempt < 2:
        return None
    run_id = info.execution.run_id
    history = await service.get_workflow_execution_history_reverse(
        GetWorkflowExecutionHistoryReverseRequest(
            namespace=client.namespace,
            execution=WorkflowExecution(workflow_id=turn_id, run_id=run_id),
            maximum_page_size=_TAIL,
        )
    )
    for event in history.history.events:
        if event.event_type not in _TASK_ENDS:
            continue
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            return None  # timed out (a worker died: the next one takes it) or completed
        failed = event.workflow_task_failed_event_attributes
        nondeterministic = (
            failed.cause
            == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR
            or "TMPRL1100" in failed.failure.message
        )
        if not nondeterministic and attempt < _RETRIED_AGAIN:
            return None
        message = (
            _first_line(failed.failure.message)
            or WorkflowTaskFailedCause.Name(failed.cause)
            .removeprefix("WORKFLOW_TASK_FAILED_CAUSE_")
            .lower()
        )
        return StuckRun(
            turn_id=turn_id,
            run_id=run_id,
            kind=NON_DETERMINISM if nondeterministic else "failure",
            message=message,
            attempts=attempt,
        )
    return None


async def unless_stuck(
    client: Client, turn_id: str, work: Awaitable[_T], *, poll: float = 1.0
) -> _T:
    """``work``'s result, unless the turn's run turns out stuck first: then
    ``StuckTurnError`` (one line: the turn, the cause, the fix) and ``work`` is
    cancelled. For waits that send nothing (``turns watch``); a wait on an
    input goes through ``TurnClient``, which also says whether it was applied.
    """
    task = asyncio.ensure_future(work)
    try:
        while True:
            await asyncio.wait([task], timeout=poll)
            if task.done():
                return task.result()
            try:
                stuck = await stuck_run(client, turn_id)
            except RPCError:
                continue  # Temporal away for a moment: the file is still followed
            if stuck is not None:
                raise StuckTurnError(
                    stuck.describe(), turn_id=turn_id, cause=stuck.cause, applied=None
                )
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


__all__ = ["NON_DETERMINISM", "StuckRun", "stuck_run", "unless_stuck"]
