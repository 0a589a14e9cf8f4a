"""Processes started together that race each other: stand-ins for other hosts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_children(
    code: str, target: str, tmp_path: Path, mode: str, count: int, children: int
) -> list[int]:
    """Run ``children`` copies of ``code`` (``python -c``) and release them at once.

    Each child gets ``target mode index count go``, touches ``go.ready.INDEX``
    when set up, waits for ``go`` and prints one integer; the integers are
    returned in child order.
    """
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, target, mode, str(i), str(count), str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(children)
    ]
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"go.ready.{i}").exists() for i in range(children)):
        assert time.monotonic() < deadline, "children did not start"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.01)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(int(out))
    return results
