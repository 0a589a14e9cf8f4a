"""A workflow that calls one API by name: the sandbox test's probe.

Kept apart from the test module so the sandbox imports nothing but this
(and, like the Turn workflow's module, it is not passed through).
"""

from __future__ import annotations

import datetime
import random
import uuid
from pathlib import Path

from temporalio import workflow


def _call(api: str) -> str:
    match api:
        case "clock":
            return datetime.datetime.now().isoformat()
        case "random":
            return str(random.random())
        case "uuid4":
            return str(uuid.uuid4())
        case "open":
            with open(Path(__file__)) as f:
                return f.read(10)
        case "workflow.now":
            return workflow.now().isoformat()  # the deterministic clock: allowed
    raise ValueError(f"unknown api {api!r}")


@workflow.defn(name="SandboxProbe")
class SandboxProbe:
    @workflow.run
    async def run(self, api: str) -> str:
        return _call(api)
