"""Determinism is enforced by the sandbox, not hoped for.

The project's worker configuration (``workflow_runner``) must refuse a clock,
random, uuid4 or file call in workflow code, and must not exempt the Turn
workflow's own module; the workflow's import graph holds no I/O.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

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
        "turncore.storage.repository",
        "turncore_temporal.activities.turn_activities",
        "turnclient",
    ):
        assert module not in loaded, module


# The sandbox restricts the workflow module but not what it passes through.
# turncore's decision and reducer code is passed through (for speed: it is
# imported once per worker, not once per workflow run), so this check stands
# in for the sandbox there: no clock, randomness, uuid or file access in the
# modules the workflow calls.
_DECIDING_MODULES = (
    "turncore/advance.py",
    "turncore/reducer.py",
    "turncore/events.py",
    "turncore/messages.py",
    "turncore/permissions.py",
    "turncore/subagents.py",
    "turncore/timestamps.py",
    "turncore/jsonvalue.py",
    "turncore/_wire.py",
    "turncore/errors.py",
    "activities/contract.py",
    "activities/payloads.py",
    "activities/failures.py",
    "workflows/turn.py",
    "workflows/_types.py",
)
_FORBIDDEN_MODULES = {"random", "secrets", "uuid", "time"}
_FORBIDDEN_ATTRIBUTES = {"now", "utcnow", "today", "urandom", "getenv", "environ"}


def test_the_passed_through_decision_code_reads_no_clock_and_does_no_io() -> None:
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    problems: list[str] = []
    for rel in _DECIDING_MODULES:
        tree = ast.parse((root / rel).read_text(), rel)
        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import):
                problems += [
                    f"{where} imports {a.name}"
                    for a in node.names
                    if a.name.split(".")[0] in _FORBIDDEN_MODULES
                ]
            elif isinstance(node, ast.ImportFrom) and node.module:
                if node.module.split(".")[0] in _FORBIDDEN_MODULES:
                    problems.append(f"{where} imports from {node.module}")
            elif isinstance(node, ast.Attribute) and node.attr in _FORBIDDEN_ATTRIBUTES:
                if not (isinstance(node.value, ast.Name) and node.value.id == "workflow"):
                    problems.append(f"{where} uses .{node.attr}")
            elif isinstance(node, ast.Name) and node.id == "open":
                problems.append(f"{where} uses open")
    assert problems == []


async def test_the_sandboxed_workflow_module_is_compiled_once_per_process(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The sandbox imports the workflow module for every run; its code object is
    built once (not compiled from source each run where no bytecode is cached)."""
    import importlib

    from tests.harness import Harness
    from turncore_temporal import worker

    async with Harness(temporal_env.client, tmp_path, ["hello"]) as h:
        await h.run("hi")
        await h.run("hi again")
    turn = importlib.import_module("turncore_temporal.workflows.turn")
    code = worker._COMPILED_ONCE._code.get(turn.__file__)
    assert code is not None  # the sandbox's imports went through it
    package = importlib.import_module("turncore_temporal.workflows")
    spec = worker._COMPILED_ONCE.find_spec(turn.__name__, package.__path__)
    assert spec is not None and spec.loader is not None
    assert spec.loader.get_code(turn.__name__) is code  # type: ignore[attr-defined]
