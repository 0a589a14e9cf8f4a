"""CLI speed benchmark: start-up of read-only commands, and ``turns run`` of the demo.

Run from anywhere: ``python bench/cli.py [--repeat N]``. In a temporary work
dir it runs one demo turn, then times, side by side in this one run:

- a bare interpreter start (``python -c pass``);
- each read-only command on that turn's file (``state``, ``show``, ``log``,
  ``validate``, ``inspect``), as the installed ``turns`` script runs them;
- ``turns run`` of the demo on the embedded default, once starting the
  server and then reusing the idle one (``TURNS_SERVER_IDLE``).

Each figure is the median of ``--repeat`` runs, with bytecode compiled as an
installed package has it (``PYTHONDONTWRITEBYTECODE`` is dropped and each
command runs once first). It prints JSON::

    {"bare_python_s": …,
     "read_only": {"state": {"seconds": …, "times_bare": …}, …},
     "run_demo": {"cold_s": …, "warm_s": …},
     "targets": {"read_only_times_bare": 5, "run_demo_s": 2.5},
     "met": {"read_only": bool, "run_demo": bool}}

The read-only target is at most 5× a bare start; ``turns run`` of the demo
should finish within 2.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READ_ONLY = ("state", "show", "log", "validate", "inspect")
PROMPT = "What time is it in Chicago?"


def _timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def _median(cmd: list[str], env: dict[str, str], cwd: Path, repeat: int) -> float:
    return statistics.median(_timed(cmd, env, cwd) for _ in range(repeat))


def _turns() -> str:
    found = shutil.which("turns", path=str(Path(sys.executable).parent)) or shutil.which("turns")
    if found is None:
        raise SystemExit("bench/cli.py needs the `turns` command installed (pip install -e .)")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    turns = _turns()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / ".turns"
        # An installed package has its bytecode compiled (pip does it); a checkout
        # under PYTHONDONTWRITEBYTECODE would recompile every module on every start.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TEMPORAL_", "TURNS_")) and k != "PYTHONDONTWRITEBYTECODE"
        }
        env.update({"TURNS_HOME": str(home), "NO_COLOR": "1", "TURNS_SERVER_IDLE": "0"})
        cold = _timed([turns, "run", PROMPT], env, Path(tmp))
        warm_env = {**env, "TURNS_SERVER_IDLE": "30"}
        _timed([turns, "run", PROMPT], warm_env, Path(tmp))  # leaves an idle server
        warm = _median([turns, "run", PROMPT], warm_env, Path(tmp), args.repeat)
        _timed([turns, "run", PROMPT], env, Path(tmp))  # idle grace 0: stops the server
        (path, *_) = sorted(home.glob("storage/turns/*/*/*/*.jsonl"))
        bare = _median([sys.executable, "-c", "pass"], env, Path(tmp), args.repeat)
        read_only = {}
        for name in READ_ONLY:
            _timed([turns, name, str(path)], env, Path(tmp))  # writes the bytecode once
            seconds = _median([turns, name, str(path)], env, Path(tmp), args.repeat)
            read_only[name] = {"seconds": round(seconds, 4), "times_bare": round(seconds / bare, 2)}
    worst = max(r["times_bare"] for r in read_only.values())
    print(
        json.dumps(
            {
                "bare_python_s": round(bare, 4),
                "read_only": read_only,
                "run_demo": {"cold_s": round(cold, 3), "warm_s": round(warm, 3)},
                "targets": {"read_only_times_bare": 5, "run_demo_s": 2.5},
                "met": {"read_only": worst <= 5, "run_demo": warm <= 2.5 and cold <= 2.5},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
