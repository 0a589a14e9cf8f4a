"""A long conversation: does turn 500 cost the runtime what turn 10 does?

Run from anywhere: ``python bench/conversation.py [--turns 500]`` (a few
minutes). It opens ``Turns`` on a fresh work dir (the embedded default: its own
Temporal dev server, a worker in this process, file storage) with an agent
whose model is a Python function answering every turn with one short text
(usage given; the CPU it spends measuring each request is the model's and
is subtracted), and chains
``--turns`` turns through ``Turns.run(..., continue_from=last)``. It prints one
JSON object:

- ``ms_per_turn_by_decile``: the wall time of one whole turn (create, run,
  settle) in each tenth of the conversation, and ``flatness`` (the last tenth
  over the second: the first holds the worker's warm-up);
- ``cpu_ms_per_turn_by_decile``: this process's CPU time per turn (client and
  worker alike: the runtime's own work; Temporal's server aside, and the model's
  own measuring of the request it was sent), the figure to judge flatness by on
  a shared machine;
- ``cpu_ms_median_by_decile`` and its flatness: the same, each tenth's median
  turn, so a few turns that waited on a busy neighbour do not stand for the
  tenth (the mean keeps what every turn paid, collections included);
- ``request_messages`` / ``request_bytes``: what the model was sent at turns
  1, 10, 100 and the last (messages, and their JSON size);

and the same again for a second conversation whose agent has a context
budget (``--budget``, default 2,000 tokens): earlier turns are dropped to fit.
With ``--summarise``, a third conversation on the same budget summarises what
it drops (``summarise_dropped``): ``summary_calls`` (how many summary turns ran)
and ``summary_request_messages_max`` / ``summary_request_bytes_max`` (the
largest summary request: each summarises only what is newly dropped, so it
stays bounded however long the conversation gets).

Compare ratios within one run: absolute figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402

from turnclient import Agent, SummariseDropped, Turns  # noqa: E402
from turnclient.runtime.embedded import servers_on  # noqa: E402
from turncore.model.port import ModelCallRequest  # noqa: E402
from turncore.model.scripted import ScriptFunction  # noqa: E402


class Answerer:
    """The model: one short answer per turn; keeps what each request carried."""

    def __init__(self) -> None:
        self.sizes: list[tuple[int, int]] = []
        self.cpu_s = 0.0
        """CPU time spent here, measuring the request: the model's work, not the runtime's."""

    def __call__(self, request: ModelCallRequest) -> dict[str, Any]:
        started = time.process_time()
        size = len(orjson.dumps([m.to_wire() for m in request.messages]))
        self.sizes.append((len(request.messages), size))
        usage = {"inputTokens": size // 4, "outputTokens": 5, "totalTokens": size // 4 + 5}
        self.cpu_s += time.process_time() - started
        return {"text": f"Noted, that is message {len(self.sizes)}.", "usage": usage}


def _by_decile(values: list[float], average: Callable[[list[float]], float]) -> list[float]:
    n = len(values)
    return [
        round(average(values[d * n // 10 : max((d + 1) * n // 10, d * n // 10 + 1)]), 1)
        for d in range(10)
    ]


class Summariser:
    """The summariser: one fixed summary; keeps what each summary request carried."""

    def __init__(self) -> None:
        self.sizes: list[tuple[int, int]] = []

    def __call__(self, request: ModelCallRequest) -> dict[str, Any]:
        size = len(orjson.dumps([m.to_wire() for m in request.messages]))
        self.sizes.append((len(request.messages), size))
        usage = {"inputTokens": size // 4, "outputTokens": 20, "totalTokens": size // 4 + 20}
        return {"text": "The user reported fine weather in every message.", "usage": usage}


async def conversation(
    count: int, budget: int | None = None, summarise: bool = False
) -> dict[str, Any]:
    model = Answerer()
    summariser = Summariser()
    wall: list[float] = []
    cpu: list[float] = []
    with tempfile.TemporaryDirectory(prefix="turns-conversation-") as tmp:
        agent = Agent(
            name="chat",
            system_prompt="Keep the user company.",
            model="scripted/answer",
            context_tokens=budget,
            summarise_dropped=SummariseDropped(model="scripted/summary") if summarise else False,
        )
        models: dict[str, ScriptFunction] = {"answer": model, "summary": summariser}
        async with Turns(tmp, agents=[agent], models=models) as turns:
            last: str | None = None
            for i in range(count):
                started, cpu_started = time.perf_counter(), time.process_time()
                model_cpu = model.cpu_s
                result = await turns.run(
                    f"Here is message {i}: the weather is fine today.",
                    agent="chat",
                    continue_from=last,
                )
                wall.append((time.perf_counter() - started) * 1000)
                runtime_cpu = time.process_time() - cpu_started - (model.cpu_s - model_cpu)
                cpu.append(runtime_cpu * 1000)
                if result.status != "completed":
                    raise SystemExit(f"turn {i} ended {result.status}")
                last = result.turn_id
        # The work dir's embedded server outlives the block (its idle grace); the
        # directory goes now, so the server goes too.
        for pid in servers_on(str(Path(tmp) / "temporal" / "dev.db")):
            os.kill(pid, signal.SIGKILL)
    ms = _by_decile(wall, statistics.fmean)
    cpu_ms = _by_decile(cpu, statistics.fmean)
    cpu_median = _by_decile(cpu, statistics.median)
    picks = sorted({0, 9, 99, count - 1} & set(range(count)))
    return {
        "turns": count,
        "context_tokens": budget,
        "ms_per_turn_by_decile": ms,
        "flatness_last_over_second_decile": round(ms[-1] / ms[1], 2),
        "cpu_ms_per_turn_by_decile": cpu_ms,
        "cpu_flatness_last_over_second_decile": round(cpu_ms[-1] / cpu_ms[1], 2),
        "cpu_ms_median_by_decile": cpu_median,
        "cpu_median_flatness_last_over_second_decile": round(cpu_median[-1] / cpu_median[1], 2),
        "request_messages": {str(i + 1): model.sizes[i][0] for i in picks},
        "request_bytes": {str(i + 1): model.sizes[i][1] for i in picks},
        **(
            {
                "summary_calls": len(summariser.sizes),
                "summary_request_messages_max": max((m for m, _ in summariser.sizes), default=0),
                "summary_request_bytes_max": max((b for _, b in summariser.sizes), default=0),
            }
            if summarise
            else {}
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument(
        "--budget",
        type=int,
        default=2000,
        help="a second conversation runs with this context budget (0: none)",
    )
    parser.add_argument(
        "--summarise",
        action="store_true",
        help="a third conversation on the budget summarises what it drops",
    )
    args = parser.parse_args()
    report = {"without_budget": asyncio.run(conversation(args.turns))}
    if args.budget:
        report["with_budget"] = asyncio.run(conversation(args.turns, args.budget))
    if args.budget and args.summarise:
        report["with_summaries"] = asyncio.run(conversation(args.turns, args.budget, True))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
