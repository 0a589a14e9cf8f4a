"""The pre-deploy check: replay the histories of open turns against this code.

A change to the workflow's command sequence that is not behind
``workflow.patched`` makes every older history non-deterministic; the
committed histories (``tests/test_replay.py``) catch that in CI, but only for
the shapes they record. Before a rollout, ``turns replay`` fetches the
histories of the turns actually open on the server (all of them, a random
sample, or named ones) and replays each with Temporal's ``Replayer`` against
the workflow code installed in this process, with the same sandbox and data
converter (and payload codec) a worker uses. Nothing is sent to the server
but reads; a turn whose history does not replay is named with the failure.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer

from turncore_temporal.worker import typed_client, workflow_runner
from turncore_temporal.workflows import TurnWorkflow

OPEN_TURNS = "WorkflowType = 'Turn' AND ExecutionStatus = 'Running'"


@dataclass(frozen=True)
class ReplayResult:
    turn_id: str
    failure: str | None
    """None if the history replays; else the replayer's failure (non-determinism, …)."""

    @property
    def ok(self) -> bool:
        return self.failure is None


async def open_turn_ids(client: Client, task_queue: str | None = None) -> list[str]:
    """The turns whose latest run is open on the server (optionally on one task queue)."""
    query = OPEN_TURNS + (f" AND TaskQueue = '{task_queue}'" if task_queue else "")
    return [wf.id async for wf in client.list_workflows(query)]


def sample(turn_ids: Sequence[str], size: int | None, seed: int | None = None) -> list[str]:
    """``size`` of ``turn_ids`` picked at random (all of them if ``size`` is None or larger)."""
    if size is None or size >= len(turn_ids):
        return list(turn_ids)
    return random.Random(seed).sample(list(turn_ids), size)


async def replay_turns(
    client: Client, turn_ids: Sequence[str], *, workflow: type = TurnWorkflow
) -> list[ReplayResult]:
    """Replay each turn's current run against ``workflow`` (the installed one by default).

    A turn with no workflow on the server is reported as a failure too: the
    caller named it, and nothing was checked.
    """
    typed = typed_client(client)
    replayer = Replayer(
        workflows=[workflow],
        workflow_runner=workflow_runner(),
        data_converter=typed.data_converter,
    )
    results: list[ReplayResult] = []
    for turn_id in turn_ids:
        try:
            history: WorkflowHistory = await typed.get_workflow_handle(turn_id).fetch_history()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            results.append(ReplayResult(turn_id, "no workflow on the server"))
            continue
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        failure = replayed.replay_failure
        results.append(ReplayResult(turn_id, None if failure is None else _one_line(failure)))
    return results


def _one_line(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["OPEN_TURNS", "ReplayResult", "open_turn_ids", "replay_turns", "sample"]
