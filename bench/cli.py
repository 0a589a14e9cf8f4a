"""CLI speed benchmark: start-up of read-only commands, and ``turns run`` of the demo.

Run from anywhere: ``python bench/cli.py [--repeat N]``. In a temporary work
dir it runs one demo turn, then times, side by side in this one run:

- a bare interpreter start (``python -c pass``);
- each read-only command on that turn's file (``state``, ``show``, ``log``,
  ``validate``, ``inspect``), as the installed ``turns`` script runs them;
- ``turns run`` of the demo on the embedded default: cold (``--cold`` runs,
  each in a fresh work dir that starts its server and leaves it to its idle
  grace, as the default ``TURNS_SERVER_IDLE`` does) and warm (reusing an idle
  server).

Read-only figures are medians over ``--repeat`` rounds; each round times the
bare start and every command back to back, and a command's ``times_bare`` is
the median of its per-round ratios (this host's speed drifts between rounds).
Bytecode is compiled as an installed package has it (``PYTHONDONTWRITEBYTECODE``
is dropped and each command runs once first). It prints JSON::

    {"bare_python_s": …,
     "floor": {"import_pydantic": {…}, "one_pydantic_model": {"seconds": …, "times_bare": …}},
     "read_only": {"state": {"seconds": …, "times_bare": …}, …},
     "run_demo": {"cold_s": …, "warm_s": …},
     "targets": {"read_only_times_bare": 5, "run_demo_s": 2.5},
     "met": {"read_only": bool, "run_demo": bool}}

Each read-only command is also reported against the one-pydantic-model floor
(``times_floor``, the median of per-round ratios like ``times_bare``). The
targets: ``state``, ``show``, ``validate`` and ``inspect`` within 1.3× that
floor (a strict read costs pydantic and its models, not the Temporal SDK),
``log`` (which validates nothing) within 3× a bare start, and ``turns run``
of the demo within 2.5 s. ``--cold 0`` skips the cold runs.
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
FLOOR_BOUND = {"state": 1.3, "show": 1.3, "validate": 1.3, "inspect": 1.3}
"""At most this many times the one-pydantic-model floor."""
BARE_BOUND = {"log": 3.0}
"""At most this many times a bare start (``log`` validates nothing)."""
FLOORS = {
    "import_pydantic": "import pydantic\n",
    "one_pydantic_model": "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int\n",
}
"""Starts that only import pydantic, or only define one model: what any strict read costs at least."""
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
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--cold", type=int, default=3, help="cold runs (each starts a server)")
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
        env.update({"TURNS_HOME": str(home), "NO_COLOR": "1"})
        stop = {**env, "TURNS_SERVER_IDLE": "0"}  # the last user stops the server as it exits
        keep = {**env, "TURNS_SERVER_IDLE": "30"}
        colds = []
        for i in range(args.cold):
            # A fresh work dir starts its own server; with the default idle grace
            # the command exits without waiting for the server to stop.
            fresh = {**env, "TURNS_HOME": str(Path(tmp) / f"cold{i}")}
            colds.append(_timed([turns, "run", PROMPT], fresh, Path(tmp)))
            _timed([turns, "list"], {**fresh, "TURNS_SERVER_IDLE": "0"}, Path(tmp))
        _timed([turns, "run", PROMPT], keep, Path(tmp))  # leaves an idle server
        warm = _median([turns, "run", PROMPT], keep, Path(tmp), args.repeat)
        _timed([turns, "list"], stop, Path(tmp))
        (path, *_) = sorted(home.glob("storage/turns/*/*/*/*.jsonl"))
        bare_cmd = [sys.executable, "-c", "pass"]
        commands = {name: [turns, name, str(path)] for name in READ_ONLY}
        # The floors every strict read stands on: pydantic, and its first model.
        for name, code in FLOORS.items():
            commands[name] = [sys.executable, "-c", code]
        for cmd in commands.values():
            _timed(cmd, stop, Path(tmp))  # writes the bytecode once
        # Rounds interleave the bare start and every command, and each ratio is
        # taken within its round: the host's speed drifts between rounds here.
        bares: list[float] = []
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        ratios: dict[str, list[float]] = {name: [] for name in commands}
        floor_ratios: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            bare_now = _timed(bare_cmd, stop, Path(tmp))
            bares.append(bare_now)
            took_now = {}
            for name, cmd in commands.items():
                took = _timed(cmd, stop, Path(tmp))
                took_now[name] = took
                seconds[name].append(took)
                ratios[name].append(took / bare_now)
            for name in commands:
                floor_ratios[name].append(took_now[name] / took_now["one_pydantic_model"])
        bare = statistics.median(bares)
        cold = statistics.median(colds) if colds else None
        measured = {
            name: {
                "seconds": round(statistics.median(seconds[name]), 4),
                "times_bare": round(statistics.median(ratios[name]), 2),
                "times_floor": round(statistics.median(floor_ratios[name]), 2),
            }
            for name in commands
        }
        read_only = {name: measured[name] for name in READ_ONLY}
    read_only_met = all(read_only[n]["times_floor"] <= b for n, b in FLOOR_BOUND.items()) and all(
        read_only[n]["times_bare"] <= b for n, b in BARE_BOUND.items()
    )
    print(
        json.dumps(
            {
                "bare_python_s": round(bare, 4),
                "floor": {name: measured[name] for name in FLOORS},
                "read_only": read_only,
                "run_demo": {
                    "cold_s": None if cold is None else round(cold, 3),
                    "warm_s": round(warm, 3),
                },
                "targets": {
                    "read_only_times_floor": FLOOR_BOUND,
                    "read_only_times_bare": BARE_BOUND,
                    "run_demo_s": 2.5,
                },
                "met": {
                    "read_only": read_only_met,
                    "run_demo": warm <= 2.5 and (cold is None or cold <= 2.5),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
