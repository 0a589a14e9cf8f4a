"""Replay benchmark: read + validate + reduce turn files of 1k, 10k and 100k events.

Run from anywhere: ``python bench/replay.py [--repeat N]``. It writes valid
turn files to a temporary directory, times ``FileTurnRepository.read`` on each
(every line parsed strictly, validated and folded through the reducer; best
of ``--repeat`` runs, each on a fresh repository), and prints JSON::

    {"1k": {"events": …, "seconds": …, "events_per_second": …,
            "cpu_seconds": …, "page_faults_per_event": …},
     "10k": {…}, "100k": {…},
     "ratio_100k_over_10k": …,
     "calibration_us_per_tiny_model": …,
     "breakdown_10k_us_per_event": {"json": …, "validate": …, "reduce": …, "gc": …, …},
     "targets": {…}, "met": {"throughput": bool, "linear": bool}}

Targets: at least 200,000 events/s (the slowest size counts), and a ratio
of at most 11, meaning replay time grows linearly with the log.
``calibration_us_per_tiny_model`` is the time pydantic takes here to
validate a three-field model. It helps compare machines, because validation
is most of the cost: ``tiny_models_per_event`` is the cost of one event in
those units, and ``throughput_met_where_calibration_us_below`` the
calibration a machine needs for this code to reach the throughput target.

The breakdown times the stages of the 10k read separately (orjson per
line, validation of the decoded objects, folding the events through the
reducer, and what the read does about the garbage collector at its end:
filing the objects it made among the old ones, ``gc.freeze`` +
``gc.unfreeze``); its sum is close to, not exactly, the read time.

``first_read_in_a_new_process`` reads each file once in a process of its own
(after one read of the 1k file, so the validators are built): what ``turns
state`` or a newly started worker pays. There no size finds memory free from
earlier work, so every size pays its page faults. It is reported, not a
target.

``cpu_seconds`` (process time of the fastest run) and
``page_faults_per_event`` (minor faults during that run) help read a figure
from a shared machine: wall time above CPU time is time spent waiting for a
core, and a long log pays page faults for the memory its events take when the
process has none free from earlier work (the 100k read, in this script).

The histories are a realistic mix: rounds of one model call (request, text
and tool-call step events, finish, completion) and its tool batch (one to
three sync reads with zero to eight progress events each). Every fifth
round also asks the human through an async tool, so the turn suspends and
then gets async progress and a result. A final answer and
``turn_completed`` close the turn.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.builders import TurnBuilder, ask_call, read_call  # noqa: E402
from turncore.events import TRUSTED_EVENT_VALIDATORS, TurnEvent  # noqa: E402
from turncore.reducer import TurnReducer  # noqa: E402
from turncore.storage.repository import FileTurnRepository  # noqa: E402

SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000}
TARGET_EVENTS_PER_SECOND = 200_000
TARGET_MAX_RATIO = 11.0


def history(turn_id: str, target: int) -> list[TurnEvent]:
    """A valid, completed turn of about ``target`` events (see the module docstring)."""
    b = TurnBuilder(turn_id, max_model_calls=1_000_000)
    round_no = 0
    while len(b.events) < target - 8:  # leave room for the closing call
        calls = [
            read_call(f"r{round_no}_{k}", f"src/module_{round_no % 97}_{k}.py")
            for k in range(1 + round_no % 3)
        ]
        asks = [ask_call(f"a{round_no}")] if round_no % 5 == 4 else []
        b.model_call(f"Step {round_no}: reading {len(calls)} files.", [*calls, *asks])
        for c in [*calls, *asks]:
            b.invoke(c.tool_call_id)
        for c in calls:
            for p in range((round_no + len(c.tool_call_id)) % 9):
                b.progress(c.tool_call_id, {"bytesRead": 4096 * (p + 1), "done": False})
            b.result(c.tool_call_id, f"# module {round_no}\n" + "x = 1\n" * 20)
        for a in asks:
            b.suspend()
            b.progress(a.tool_call_id, {"status": "delivered"})
            b.result(a.tool_call_id, "Yes, continue.")
        round_no += 1
    b.model_call("All files read; here is the summary.")
    b.finish()
    return b.events


def write_turn(repo: FileTurnRepository, events: list[TurnEvent]) -> None:
    path = repo.path_for(events[0].turn_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(e.to_wire()) + b"\n" for e in events))


def time_read(work_dir: Path, turn_id: str, expected: int, repeat: int) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and minor page faults of the fastest of ``repeat`` reads."""
    best = (float("inf"), 0.0, 0)
    for _ in range(repeat):
        repo = FileTurnRepository(work_dir)  # no warm cache carried between runs
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        cpu = time.process_time()
        start = time.perf_counter()
        events = repo.read(turn_id)
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        best = min(best, (wall, cpu, faults))
        if len(events) != expected:
            raise AssertionError(f"read {len(events)} events, wrote {expected}")
        del events, repo
    return best


_FIRST_READ = """
import resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from turncore.storage.repository import FileTurnRepository
repo = FileTurnRepository(Path(sys.argv[2]))
repo.read(sys.argv[3])  # builds the validators the files use
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
cpu = time.process_time()
start = time.perf_counter()
events = repo.read(sys.argv[4])
wall = time.perf_counter() - start
print(wall, time.process_time() - cpu, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
"""


def first_read(work_dir: Path, warm_id: str, turn_id: str) -> tuple[float, float, int]:
    """Wall and CPU seconds and page faults of the first read of ``turn_id`` in a new
    interpreter."""
    root = str(Path(__file__).resolve().parents[1])
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_READ, root, str(work_dir), warm_id, turn_id],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def breakdown_us(events: list[TurnEvent], repeat: int) -> dict[str, float]:
    """Microseconds per event spent in each stage of a read, timed one stage at a time."""
    lines = [orjson.dumps(e.to_wire()) for e in events]
    objs = [orjson.loads(line) for line in lines]
    validators = TRUSTED_EVENT_VALIDATORS
    n = len(lines)

    def best(stage: object) -> float:
        fastest = float("inf")
        for _ in range(repeat):
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                kept = stage()  # type: ignore[operator]
                fastest = min(fastest, time.perf_counter() - start)
            finally:
                gc.enable()
            del kept
        return fastest / n * 1e6

    def collect() -> float:
        """What the read does about the collector at its end, with all it made still young."""
        fastest = float("inf")
        for _ in range(repeat):
            gc.collect()
            gc.disable()
            kept = [validators[o["type"]].validate_python(o) for o in objs]
            start = time.perf_counter()
            gc.freeze()
            gc.unfreeze()
            gc.enable()
            fastest = min(fastest, time.perf_counter() - start)
            del kept
        return fastest / n * 1e6

    return {
        "json": round(best(lambda: [orjson.loads(line) for line in lines]), 2),
        "validate": round(
            best(lambda: [validators[o["type"]].validate_python(o) for o in objs]), 2
        ),
        "reduce": round(best(lambda: TurnReducer.of(events)), 2),
        "gc": round(collect(), 2),
    }


def calibration_us() -> float:
    class Tiny(BaseModel):
        a: str
        b: int
        c: bool

    value = {"a": "x", "b": 1, "c": True}
    n = 20_000
    start = time.perf_counter()
    for _ in range(n):
        Tiny.model_validate(value)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; the best counts")
    args = parser.parse_args()

    report: dict[str, object] = {}
    seconds: dict[str, float] = {}
    rates: dict[str, float] = {}
    breakdown: dict[str, float] = {}
    fresh: dict[str, object] = {}
    counts: dict[str, int] = {}
    ids = {label: f"2025-11-11T04-36-29Z-{i:07d}-000" for i, label in enumerate(SIZES)}
    with tempfile.TemporaryDirectory(prefix="turncore-bench-") as tmp:
        work_dir = Path(tmp)
        for label, target in SIZES.items():
            turn_id = ids[label]
            events = history(turn_id, target)
            write_turn(FileTurnRepository(work_dir), events)
            count = counts[label] = len(events)
            if label == "10k":
                breakdown = breakdown_us(events, args.repeat)
            del events
            best, cpu, faults = time_read(work_dir, turn_id, count, args.repeat)
            seconds[label] = best
            rates[label] = count / best
            report[label] = {
                "events": count,
                "seconds": round(best, 4),
                "events_per_second": round(count / best),
                "cpu_seconds": round(cpu, 4),
                "page_faults_per_event": round(faults / count, 3),
            }
        first: dict[str, tuple[float, float]] = {}
        for label, count in counts.items():
            took, cpu, faults = first_read(work_dir, ids["1k"], ids[label])
            first[label] = (took, cpu)
            fresh[label] = {
                "seconds": round(took, 4),
                "events_per_second": round(count / took),
                "cpu_seconds": round(cpu, 4),
                "page_faults_per_event": round(faults / count, 3),
            }
        fresh["ratio_100k_over_10k"] = round(first["100k"][0] / first["10k"][0], 2)
        fresh["cpu_ratio_100k_over_10k"] = round(first["100k"][1] / first["10k"][1], 2)
    ratio = seconds["100k"] / seconds["10k"]
    calibration = calibration_us()
    slowest = min(rates.values())
    us_per_event = 1e6 / slowest
    report["ratio_100k_over_10k"] = round(ratio, 2)
    report["calibration_us_per_tiny_model"] = round(calibration, 2)
    report["breakdown_10k_us_per_event"] = breakdown
    report["first_read_in_a_new_process"] = fresh
    report["tiny_models_per_event"] = round(us_per_event / calibration, 2)
    report["throughput_met_where_calibration_us_below"] = round(
        1e6 / TARGET_EVENTS_PER_SECOND / (us_per_event / calibration), 2
    )
    report["targets"] = {
        "events_per_second_at_least": TARGET_EVENTS_PER_SECOND,
        "ratio_100k_over_10k_at_most": TARGET_MAX_RATIO,
    }
    report["met"] = {
        "throughput": slowest >= TARGET_EVENTS_PER_SECOND,
        "linear": ratio <= TARGET_MAX_RATIO,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
