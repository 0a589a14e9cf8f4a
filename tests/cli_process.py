"""The real ``turns`` command in a child process, pointed at the session's dev server.

Tests that drive the CLI end to end share this: the child inherits no
``TEMPORAL_*``, ``TURNS_*`` or provider variables from the developer's shell
(a key or base URL there would change what is under test), gets its own task
queue, and runs in the work dir's parent, as a user would.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parent.parent


def cli_env(
    home: Path, temporal_env: WorkflowEnvironment, queue: str, **extra: str
) -> dict[str, str]:
    """The child's environment: ``extra`` (provider keys, base URLs) on a clean base."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "TURNS_", "OPENAI_", "ANTHROPIC_"))
    }
    return {
        **keep,
        "TURNS_HOME": str(home),
        "TURNS_TASK_QUEUE": f"{queue}-{uuid.uuid4()}",
        "TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
        "PYTHONPATH": str(ROOT),
        "NO_COLOR": "1",
        **extra,
    }


async def run_cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    """Run ``turns ARGS`` to its end: exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "turnclient.cli",
        *args,
        env=env,
        cwd=Path(env["TURNS_HOME"]).parent,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
