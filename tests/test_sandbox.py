"""Determinism is enforced by the sandbox, not hoped for.

The project's worker configuration (``workflow_runner``) must refuse a clock,
random, uuid4 or file call in workflow code, and must not exempt the Turn
workflow's own module; the workflow's import graph holds no I/O.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.sandbox_probe import SandboxProbe
from turncore_temporal.worker import PASSTHROUGH, workflow_runner


async def _run_probe(env: WorkflowEnvironment, api: str) -> str:
    task_queue = f"tq-{uuid.uuid4()}"
    async with Worker(
        env.client,
        task_queue=task_queue,
        workflows=[SandboxProbe],
        workflow_runner=workflow_runner(),
        # A restricted call fails the workflow (not just the task, retried
        # forever), so the test can wait on the result.
        workflow_failure_exception_types=[Exception],
    ):
        return await env.client.execute_workflow(
            SandboxProbe.run, api, id=f"probe-{uuid.uuid4()}", task_queue=task_queue
        )


@pytest.mark.parametrize("api", ["clock", "random", "uuid4", "open"])
async def test_a_nondeterministic_call_fails_the_workflow(
    temporal_env: WorkflowEnvironment, api: str
) -> None:
    with pytest.raises(WorkflowFailureError) as info:
        await _run_probe(temporal_env, api)
    assert (
        "RestrictedWorkflowAccessError" in repr(info.value.cause)
        or "restricted" in str(info.value.cause).lower()
    ), info.value.cause


async def test_the_deterministic_clock_is_allowed(temporal_env: WorkflowEnvironment) -> None:
    assert await _run_probe(temporal_env, "workflow.now")


def _passed_through(module: str) -> bool:
    parts = module.split(".")
    return any(".".join(parts[:i]) in PASSTHROUGH for i in range(1, len(parts) + 1))


def test_workflow_code_is_not_passed_through() -> None:
    assert workflow_runner().restrictions.passthrough_modules >= set(PASSTHROUGH)
    for module in ("turncore_temporal.workflows", "turncore_temporal.workflows.turn"):
        assert not _passed_through(module), module
    assert not _passed_through("turncore_temporal.activities.turn_activities")


def test_the_workflow_imports_no_io() -> None:
    # A fresh interpreter: what importing the workflow package loads.
    code = "import sys, turncore_temporal.workflows\nprint('\\n'.join(sorted(sys.modules)))\n"
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        ).stdout.split()
    )
    for module in (
        "httpx",
        "anyio",
        "turncore.model",
        "turncore_temporal.activities.turn_activities",
        "turnclient",
    ):
        assert module not in loaded, module
