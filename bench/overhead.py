"""What Temporal costs a turn: the workflow against the same loop in one process.

Run from anywhere: ``python bench/overhead.py [--repeat N]`` (15–30 s at the
default 5). It starts a Temporal dev server, a worker (the real
``build_worker``: sandboxed workflow, real activities, a scripted model with
no delay, ``FileTurnRepository``), and measures in one run:

1. ``latency``: the wall time of a turn with one model call, and of a turn
   with ``ITERATIONS`` tool iterations (model call → sync tool) before the
   final call, through ``TurnClient.advance_turn`` (the workflow) and through
   ``bench/_inprocess.py`` (the same decisions and activity code, no
   Temporal). The overhead per model call is the difference for the one-call
   turn; per tool iteration the difference of the slopes.
2. ``plain_activity``: one round trip of a trivial activity (regular and
   local) in a workflow that does nothing else, on the same server and
   worker setup, so the overheads can be stated as multiples of it.
3. ``history``: Temporal history bytes per model call for turns whose
   inline ``context`` holds 1 KB, 10 KB and 100 KB of text (the serialized
   size of the fetched history's events: per tool iteration, and the
   ``call_model`` activity's own events per call).
4. ``signal_to_resume``: a turn suspended on an async tool gets its result
   as a signal; the time from the signal to the next model call, from the
   client's clock (signal sent → scripted model invoked) and from history
   (WorkflowExecutionSignaled → the call_model ActivityTaskStarted), against
   the in-process loop applying the same input.
5. ``anatomy``: what a one-call turn and each further tool iteration cost
   in Temporal terms (workflow tasks, activities, local activities, history
   events and bytes), and ``workflow_1_call_phases_ms``: where the one-call
   turn's wall time goes (client, first workflow task with its local
   activities, the call_model activity, closing), from history.

Targets: history growth per model call independent of the context size
(within 10%), and overhead per model call at most 1.5 plain activity round
trips. Prints one JSON object with the targets, the measurements and
whether each target is met. Times are medians over ``--repeat`` runs;
machines are noisy, so compare values within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.api.history.v1 import HistoryEvent  # noqa: E402
from temporalio.client import Client, WorkflowHistory  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from bench._inprocess import InProcessTurn  # noqa: E402
from bench._plain import PlainWorkflow, noop  # noqa: E402
from bench._stdout import report_stdout  # noqa: E402
from tests.harness import Harness, async_tool, sync_tool  # noqa: E402
from turnclient.runtime.devserver import find_temporal_cli  # noqa: E402
from turncore.events import AsyncToolResultInput  # noqa: E402
from turncore.messages import AssistantMessage, UserMessage  # noqa: E402
from turncore.model.port import ModelCallRequest  # noqa: E402
from turncore.model.scripted import call_index  # noqa: E402
from turncore_temporal.activities.turn_activities import TurnActivities  # noqa: E402
from turncore_temporal.worker import workflow_runner  # noqa: E402
from turncore_temporal.workflows import SEARCH_ATTRIBUTES  # noqa: E402

ITERATIONS = 5
PLAIN_N = 20
WORK_MS = 40
HISTORY_CALLS = 5
CONTEXT_SIZES = {"1KB": 1024, "10KB": 10 * 1024, "100KB": 100 * 1024}
TARGET_HISTORY_SPREAD = 0.10
TARGET_OVERHEAD_IN_ROUND_TRIPS = 1.5

# -------------------------------------------------------------- the scripted model


class Script:
    """The model's decisions, from the turn's input text alone.

    ``tools N``: N calls that each request the sync ``echo`` tool, then an
    answer. ``async KEY``: one call requesting the async ``external`` tool,
    then an answer; the time each call starts is kept under KEY.
    """

    def __init__(self) -> None:
        self.invoked: dict[str, list[float]] = {}

    def __call__(self, request: ModelCallRequest) -> dict[str, Any]:
        now = time.perf_counter()
        prompt = _last_user_text(request)
        index = call_index(request.messages)
        kind, _, arg = prompt.partition(" ")
        if kind == "tools" and index < int(arg):
            return {"toolCalls": [{"toolName": "echo", "input": {"n": index}}]}
        if kind == "async":
            self.invoked.setdefault(arg, []).append(now)
            if index == 0:
                return {"toolCalls": [{"toolName": "external", "input": {"ask": arg}}]}
        return {"text": f"Done after {index} calls."}


def _last_user_text(request: ModelCallRequest) -> str:
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            return message.content if isinstance(message.content, str) else ""
    return ""


def echo(value: Any, context: Any) -> Any:
    return value


def _context(size: int) -> list[UserMessage | AssistantMessage] | None:
    if size <= 0:
        return None
    return [
        UserMessage(content=("Earlier material. " * (size // 18 + 1))[:size]),
        AssistantMessage(content="Noted."),
    ]


# -------------------------------------------------------------- helpers


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _event_seconds(e: HistoryEvent) -> float:
    return e.event_time.seconds + e.event_time.nanos / 1e9


def _history_bytes(history: WorkflowHistory) -> int:
    return sum(e.ByteSize() for e in history.events)


def _activity_bytes(history: WorkflowHistory, activity_type: str) -> tuple[int, int]:
    """(bytes of the events of every ``activity_type`` activity, how many there were)."""
    scheduled: set[int] = set()
    total = 0
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if e.activity_task_scheduled_event_attributes.activity_type.name == activity_type:
                scheduled.add(e.event_id)
                total += e.ByteSize()
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            if e.activity_task_started_event_attributes.scheduled_event_id in scheduled:
                total += e.ByteSize()
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            if e.activity_task_completed_event_attributes.scheduled_event_id in scheduled:
                total += e.ByteSize()
    return total, len(scheduled)


def _anatomy(history: WorkflowHistory) -> dict[str, int]:
    kinds = Counter(EventType.Name(e.event_type) for e in history.events)
    activities = Counter(
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    )
    return {
        "history_events": len(history.events),
        "workflow_tasks": kinds["EVENT_TYPE_WORKFLOW_TASK_COMPLETED"],
        "activities": sum(activities.values()),
        "local_activities": kinds["EVENT_TYPE_MARKER_RECORDED"],
        "history_bytes": _history_bytes(history),
        **{f"activity:{name}": n for name, n in sorted(activities.items())},
    }


# -------------------------------------------------------------- measurements


async def measure_latency(h: Harness, plain: Plain, repeat: int) -> dict[str, Any]:
    """One-call and ITERATIONS-iteration turns, workflow and in-process, interleaved."""
    acts = TurnActivities(h.deps)
    samples: dict[str, list[float]] = {
        "workflow_1_call": [],
        "inprocess_1_call": [],
        f"workflow_{ITERATIONS}_iterations": [],
        f"inprocess_{ITERATIONS}_iterations": [],
    }
    phases: dict[str, list[float]] = {}
    histories: dict[int, WorkflowHistory] = {}
    for _ in range(repeat):
        for n, label in ((0, "1_call"), (ITERATIONS, f"{ITERATIONS}_iterations")):
            turn_id = await h.create(f"tools {n}")
            start = time.perf_counter()
            outcome = await h.turns.advance_turn(turn_id).outcome
            seconds = time.perf_counter() - start
            assert outcome.status == "completed", outcome
            samples[f"workflow_{label}"].append(seconds)
            history = await h.client.get_workflow_handle(turn_id).fetch_history()
            histories[n] = history
            if n == 0:
                for phase, value in _phases(history, seconds).items():
                    phases.setdefault(phase, []).append(value)
            turn_id = await h.create(f"tools {n}")
            start = time.perf_counter()
            wire = await InProcessTurn(acts, turn_id).run()
            seconds = time.perf_counter() - start
            assert wire["status"] == "completed", wire
            samples[f"inprocess_{label}"].append(seconds)
        await plain.sample()
    med = {k: _median(v) for k, v in samples.items()}
    wf_slope = (med[f"workflow_{ITERATIONS}_iterations"] - med["workflow_1_call"]) / ITERATIONS
    ip_slope = (med[f"inprocess_{ITERATIONS}_iterations"] - med["inprocess_1_call"]) / ITERATIONS
    one = _anatomy(histories[0])
    many = _anatomy(histories[ITERATIONS])
    return {
        "median_ms": {k: _ms(v) for k, v in med.items()},
        "workflow_1_call_phases_ms": {k: _ms(_median(v)) for k, v in phases.items()},
        "overhead_per_model_call_ms": _ms(med["workflow_1_call"] - med["inprocess_1_call"]),
        "per_tool_iteration_ms": {"workflow": _ms(wf_slope), "inprocess": _ms(ip_slope)},
        "overhead_per_tool_iteration_ms": _ms(wf_slope - ip_slope),
        "_anatomy": {
            "1_call_turn": one,
            "per_tool_iteration": {
                k: round((many.get(k, 0) - one.get(k, 0)) / ITERATIONS, 2)
                for k in sorted(many.keys() | one.keys())
            },
        },
    }


def _phases(history: WorkflowHistory, client_seconds: float) -> dict[str, float]:
    """Where the wall time of a one-call turn goes, from its history and the client's clock."""
    events = list(history.events)

    def first(kind: int, after: int = 0) -> int:
        return next(i for i in range(after, len(events)) if events[i].event_type == kind)

    def at(i: int) -> float:
        return _event_seconds(events[i])

    wft_scheduled = first(EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)
    wft_started = first(EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED)
    wft_completed = first(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    activity = first(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    done = first(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, activity)
    server = at(len(events) - 1) - at(0)
    return {
        "client_outside_server": client_seconds - server,
        "first_workflow_task_dispatch": at(wft_started) - at(wft_scheduled),
        "first_workflow_task_incl_load_and_validate": at(wft_completed) - at(wft_started),
        "until_call_model_scheduled": at(activity) - at(wft_completed),
        "call_model_activity": at(done) - at(activity),
        "after_call_model_to_close": at(len(events) - 1) - at(done),
        "server_side_total": server,
    }


class Plain:
    """Round trips of a trivial activity, sampled between the turn measurements.

    Per round trip: (time of a workflow with PLAIN_N+1 calls − one with 1) / PLAIN_N,
    and from history the gap between consecutive ActivityTaskScheduled events.

    On the dev server, back-to-back no-op activities settle at one round trip
    per ~50 ms however little they do: the next workflow task waits ~30 ms to
    be picked up. An activity that works WORK_MS first does not wait, so
    ``activity_overhead_with_work`` (its round trip minus the work) is what
    an activity costs beyond its own work; the turn's activities do work
    too. Both are reported; the target is checked against the no-op.
    """

    def __init__(self, client: Client) -> None:
        self.client = client
        self.queue = ""
        self.samples: dict[str, list[float]] = {}

    def _worker(self) -> Worker:
        self.queue = f"bench-plain-{uuid.uuid4()}"
        return Worker(
            self.client,
            task_queue=self.queue,
            workflows=[PlainWorkflow],
            activities=[noop],
            workflow_runner=workflow_runner(),
            activity_executor=ThreadPoolExecutor(max_workers=4),
        )

    async def _workflow(self, n: int, local: bool, work_ms: int = 0) -> tuple[float, str]:
        wid = f"bench-plain-{uuid.uuid4()}"
        start = time.perf_counter()
        await self.client.execute_workflow(
            PlainWorkflow.run, args=[n, local, work_ms], id=wid, task_queue=self.queue
        )
        return time.perf_counter() - start, wid

    async def sample(self) -> None:
        async with self._worker():
            await self._workflow(2, False)  # warm up: sandbox import, sticky queue
            await self._sample()

    async def _sample(self) -> None:
        for local in (False, True):
            label = "local_activity" if local else "activity"
            one, _ = await self._workflow(1, local)
            many, wid = await self._workflow(PLAIN_N + 1, local)
            self.samples.setdefault(f"{label}_workflow_with_1_call", []).append(one)
            self.samples.setdefault(f"{label}_round_trip", []).append((many - one) / PLAIN_N)
            if not local:
                history = await self.client.get_workflow_handle(wid).fetch_history()
                times = [
                    _event_seconds(e)
                    for e in history.events
                    if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                ]
                gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
                self.samples.setdefault("activity_round_trip_server_side", []).append(_median(gaps))
        one, _ = await self._workflow(1, False, WORK_MS)
        many, _ = await self._workflow(PLAIN_N // 2 + 1, False, WORK_MS)
        per_call = (many - one) / (PLAIN_N // 2)
        self.samples.setdefault("activity_overhead_with_work", []).append(per_call - WORK_MS / 1000)

    def report(self) -> dict[str, float]:
        return {f"{k}_ms": _ms(_median(v)) for k, v in self.samples.items()}


async def measure_history(h: Harness) -> dict[str, Any]:
    """History bytes per model call as the inline context grows."""
    out: dict[str, Any] = {}
    for label, size in CONTEXT_SIZES.items():
        sizes: dict[int, int] = {}
        call_model_bytes: list[float] = []
        for iterations in (0, HISTORY_CALLS - 1):
            turn_id = await h.create(f"tools {iterations}", context=_context(size))
            outcome = await h.turns.advance_turn(turn_id).outcome
            assert outcome.status == "completed", outcome
            history = await h.client.get_workflow_handle(turn_id).fetch_history()
            sizes[iterations + 1] = _history_bytes(history)
            total, calls = _activity_bytes(history, "call_model")
            assert calls == iterations + 1
            call_model_bytes.append(total / calls)
        out[label] = {
            "history_bytes_1_call": sizes[1],
            f"history_bytes_{HISTORY_CALLS}_calls": sizes[HISTORY_CALLS],
            "bytes_per_model_call": round((sizes[HISTORY_CALLS] - sizes[1]) / (HISTORY_CALLS - 1)),
            "call_model_activity_bytes_per_call": round(_median(call_model_bytes)),
        }
    growth = [v["bytes_per_model_call"] for v in out.values()]
    spread = max(growth) / min(growth) - 1
    return {"by_context_size": out, "spread": round(spread, 3)}


async def measure_signal(h: Harness, script: Script, repeat: int) -> dict[str, Any]:
    """Async tool result as a signal → the next model call starts."""
    acts = TurnActivities(h.deps)
    client_side: list[float] = []
    from_history: list[float] = []
    signaled_to_next_task: list[float] = []
    inprocess: list[float] = []
    for r in range(repeat):
        key = f"wf{r}"
        turn_id = await h.create(f"async {key}")
        outcome = await h.turns.advance_turn(turn_id).outcome
        assert outcome.status == "suspended", outcome
        call_id = outcome.pending_async_tools[0].tool_call_id
        handle = h.client.get_workflow_handle(turn_id)
        sent = time.perf_counter()
        await handle.signal(
            "async_tool_result",
            {
                "type": "async_tool_result",
                "toolCallId": call_id,
                "result": {"output": "done", "isError": False},
            },
        )
        result = await handle.result()
        assert result["status"] == "completed", result
        client_side.append(script.invoked[key][1] - sent)
        history = await handle.fetch_history()
        events = list(history.events)
        signaled = next(
            i
            for i, e in enumerate(events)
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        )
        started = next(
            e
            for e in events[signaled:]
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        )
        from_history.append(_event_seconds(started) - _event_seconds(events[signaled]))
        task = next(
            e
            for e in events[signaled:]
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
        )
        signaled_to_next_task.append(_event_seconds(task) - _event_seconds(events[signaled]))

        key = f"ip{r}"
        turn_id = await h.create(f"async {key}")
        loop = InProcessTurn(acts, turn_id)
        wire = await loop.run()
        assert wire["status"] == "suspended", wire
        call_id = wire["pendingAsyncTools"][0]["toolCallId"]
        given = AsyncToolResultInput.model_validate(
            {"toolCallId": call_id, "result": {"output": "done", "isError": False}}
        )
        sent = time.perf_counter()
        wire = await loop.apply_input(given)
        assert wire["status"] == "completed", wire
        inprocess.append(script.invoked[key][1] - sent)
    return {
        "client_side_ms": _ms(_median(client_side)),
        "history_signaled_to_activity_started_ms": _ms(_median(from_history)),
        "history_signaled_to_workflow_task_started_ms": _ms(_median(signaled_to_next_task)),
        "inprocess_ms": _ms(_median(inprocess)),
    }


# -------------------------------------------------------------- main


async def run(repeat: int) -> dict[str, Any]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_cli(),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_log_level="error",
    )
    script = Script()
    plain = Plain(env.client)
    try:
        with tempfile.TemporaryDirectory(prefix="turncore-overhead-") as tmp:
            async with Harness(
                env.client,
                Path(tmp),
                script,
                tools=[sync_tool("echo"), async_tool("external")],
                implementations={"echo": echo},
                permissions={"builtin:echo": "none", "external:external": "none"},
            ) as h:
                await h.run("tools 1")  # warm up: sandbox, imports, connections
                await InProcessTurn(TurnActivities(h.deps), await h.create("tools 1")).run()
                latency = await measure_latency(h, plain, repeat)
                history = await measure_history(h)
                signal = await measure_signal(h, script, repeat)
    finally:
        await env.shutdown()

    anatomy = latency.pop("_anatomy")
    plain_report = plain.report()
    round_trip = plain_report["activity_round_trip_ms"]
    working = plain_report["activity_overhead_with_work_ms"]
    per_call = latency["overhead_per_model_call_ms"]
    per_iteration = latency["overhead_per_tool_iteration_ms"]
    return {
        "targets": {
            "history_growth_per_model_call_spread_at_most": TARGET_HISTORY_SPREAD,
            "overhead_per_model_call_in_activity_round_trips_at_most": (
                TARGET_OVERHEAD_IN_ROUND_TRIPS
            ),
        },
        "latency": latency,
        "plain_activity": plain_report,
        "overhead_in_activity_round_trips": {
            "per_model_call": round(per_call / round_trip, 2),
            "per_tool_iteration": round(per_iteration / round_trip, 2),
        },
        "overhead_in_working_activity_overheads": {
            "per_model_call": round(per_call / working, 2),
            "per_tool_iteration": round(per_iteration / working, 2),
        },
        "history": history,
        "signal_to_resume": signal,
        "anatomy": anatomy,
        "met": {
            "history_growth_independent_of_context": history["spread"] <= TARGET_HISTORY_SPREAD,
            "overhead_per_model_call": per_call <= TARGET_OVERHEAD_IN_ROUND_TRIPS * round_trip,
        },
        "repeat": repeat,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement; medians")
    args = parser.parse_args()
    started = time.perf_counter()
    with report_stdout():
        report = asyncio.run(run(args.repeat))
    report["bench_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
