"""The workflow's own data types, defined once per worker.

The sandbox re-imports the workflow module for every workflow run, and
building a dataclass is the slowest part of that (it generates and compiles
its methods): these live here, passed through the sandbox (``PASSTHROUGH`` in
``turncore_temporal.worker``), so a run builds none. Plain data: no clock,
randomness or I/O (tests/test_sandbox.py checks it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from turncore.events import ExternalDelivery


@dataclass
class TurnWorkflowInput:
    turn_id: str
    model_call_timeout_seconds: float = 600.0
    tool_timeout_seconds: float = 3600.0
    heartbeat_timeout_seconds: float = 30.0
    cancel: dict[str, Any] | None = None
    """A cancel input to apply on start (cancelling a turn whose workflow is gone)."""
    max_history_events: int = 5000
    """Continue as new (reloading from the file) once history grows past this,
    or earlier when Temporal suggests it."""
    rejected_inputs: list[dict[str, Any]] = field(default_factory=list)
    """Carried across continue-as-new so the state query keeps listing them."""
    max_concurrent_children: int = 8
    """How many ``spawn_agent`` children run at once; further calls wait for a slot."""


@dataclass
class Queued:
    input: ExternalDelivery
    waiter: asyncio.Future[dict[str, Any]] | None = None


@dataclass
class Flags:
    reload: bool = False
    woken: int = 0
    strikes: int = 0
    """Model call attempts in a row that ended without a result."""
    given_up: bool = False
    """A stopping worker gave up an activity: the reload waits for a worker taking work."""
    rejected: list[dict[str, Any]] = field(default_factory=list)
