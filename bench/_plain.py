"""The baseline for ``bench/overhead.py``: a workflow that only runs a trivial activity.

``PlainWorkflow`` runs ``bench_noop`` ``n`` times in a row, as a regular
activity or as a local activity, so the time per iteration is one plain
activity round trip on the same server and worker setup as the turn
workflow. With ``work_ms`` the activity first sleeps that long, which
separates what a round trip costs from how quickly the next one can follow.
Kept apart from the bench so the workflow sandbox imports only this.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="bench_noop")
async def noop(work_ms: int) -> int:
    if work_ms:
        await asyncio.sleep(work_ms / 1000)
    return work_ms


@workflow.defn(name="BenchPlain")
class PlainWorkflow:
    @workflow.run
    async def run(self, n: int, local: bool, work_ms: int = 0) -> int:
        total = 0
        for _ in range(n):
            if local:
                total += await workflow.execute_local_activity(
                    noop, work_ms, start_to_close_timeout=timedelta(seconds=30)
                )
            else:
                total += await workflow.execute_activity(
                    noop, work_ms, start_to_close_timeout=timedelta(seconds=30)
                )
        return total
