"""A process that used Temporal leaves without finalising the interpreter.

The Temporal SDK's Rust core runs threads of its own that the SDK never
stops. When CPython finalises while one of them calls back into Python, the
process aborts (SIGABRT: "Fatal Python error: PyGILState_Release … Python
runtime state: finalizing", no Python frame). CI saw it once in ~1,900
tests: `turns run --session S` refusing to continue an open turn exited
-6 instead of 2. So the `turns` command and `worker.py` flush what they
owe (stdio, logging, OpenTelemetry spans) and end with ``os._exit``.

The probe: a ``sitecustomize`` on ``PYTHONPATH`` registers an ``atexit``
hook, which runs at the start of finalisation and never after
``os._exit``. Each command must give its documented exit code and output,
and the hook must not have run. (That spans are still exported is
``tests/test_observability_cli.py``'s collector test.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli_turns import ROOT, TIMEOUT, environment, held, home, turns

__all__ = ["held", "home"]  # fixtures used by name

pytestmark = pytest.mark.temporal

PROBE = """\
import atexit, os
_marker = os.environ.get("TURNS_TEST_FINALISED")
if _marker:
    atexit.register(lambda: open(_marker, "a").write("finalised\\n"))
"""


def probed(home: Path, tmp_path: Path) -> tuple[dict[str, str], Path]:
    site = tmp_path / "probe"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(PROBE)
    marker = tmp_path / "finalised.txt"
    env = environment(home)
    env["PYTHONPATH"] = f"{site}{os.pathsep}{env['PYTHONPATH']}"
    env["TURNS_TEST_FINALISED"] = str(marker)
    return env, marker


def test_the_probe_sees_a_plain_interpreter_finalise(tmp_path: Path) -> None:
    env, marker = probed(tmp_path / "home", tmp_path)
    r = subprocess.run([sys.executable, "-c", "pass"], env=env, timeout=TIMEOUT)
    assert r.returncode == 0
    assert marker.read_text() == "finalised\n"


def test_turns_commands_on_temporal_end_without_finalising(held: Path, tmp_path: Path) -> None:
    env, marker = probed(held, tmp_path)
    done = turns(held, "run", "--session", "s-1", "--json", "Calculate 2 + 3", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert not marker.exists(), "turns run finalised the interpreter under the SDK's threads"

    suspended = turns(held, "run", "--session", "s-1", "--json", "Save 'x' to z.txt", env=env)
    assert suspended.returncode == 3, suspended.stderr
    open_id = json.loads(suspended.stdout)["turnId"]
    # The command CI saw abort: it connects, starts a worker, then refuses.
    refused = turns(held, "run", "--session", "s-1", "Calculate 1 + 1", env=env)
    assert refused.returncode == 2, refused.stderr
    assert f"turn {open_id} has not ended" in refused.stderr
    denied = turns(held, "deny", open_id, "call_0_0", "--json", env=env)
    assert denied.returncode == 0, denied.stderr
    assert not marker.exists(), "a turns command finalised the interpreter under the SDK's threads"


def test_a_worker_stopped_by_sigterm_ends_without_finalising(held: Path, tmp_path: Path) -> None:
    env, marker = probed(held, tmp_path)
    for argv in (
        [sys.executable, "-m", "turnclient.cli", "worker"],
        [sys.executable, str(ROOT / "worker.py")],
    ):
        proc = subprocess.Popen(
            argv,
            cwd=held.parent,
            env={**env, "TURNS_LOG_LEVEL": "INFO"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:  # each says so once it serves
            if "Ctrl-C to stop." in line or "serving turns of" in line:
                break
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, out
        assert not marker.exists(), f"{argv[-1]} finalised the interpreter under the SDK's threads"
