"""Commands that start turns: ``run``; and what running, deciding and chatting
share: a session with a worker (``worker_session``), following a turn to its
end (``follow_to_end``), printing how it ended (``finish``), the request for
a new turn (``turn_request``, ``continuation_of``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnclient.cli.common import (
    EXIT_CODES,
    EXIT_OK,
    EXIT_USAGE,
    JSON,
    NO_WORKER,
    PROG,
    WAIT_FOR_WORKER,
    Failure,
    arg,
    command,
    cost_json,
    cost_text,
    emit_json,
    following,
    open_runtime,
    positive,
    resolve_turn_id,
    run_async,
    settled_state,
)
from turncore.errors import RejectedInputError, TurnError

if TYPE_CHECKING:
    from turnclient.cli.render import StreamRenderer
    from turnclient.lib.api import CreateTurnInput, TurnClient
    from turnclient.lib.conversations import Continuation
    from turnclient.runtime.connection import Runtime, Temporal
    from turncore.events import ModelDescriptor, TurnExternalInput, TurnOutcome


# ---------------------------------------------------------------- running turns


@contextlib.asynccontextmanager
async def worker_session(
    args: argparse.Namespace, runtime: Runtime, *, worker: bool = True
) -> AsyncIterator[tuple[Temporal, TurnClient]]:
    """Connected (embedded or remote), with a worker in this process unless --no-worker."""
    from turnclient.runtime.connection import ConnectOptions, temporal
    from turncore_temporal.worker import serving

    options = ConnectOptions.for_config(runtime.config)
    async with temporal(runtime.work_dir, options=options) as conn:
        if worker and not getattr(args, "no_worker", False):
            async with serving(runtime, conn.client):
                yield conn, runtime.turn_client(conn.client, conn.server, serving=True)
        else:
            if worker and not getattr(args, "wait_for_worker", False):
                await _require_a_worker(conn, runtime.task_queue)
            yield conn, runtime.turn_client(conn.client, conn.server)


NO_WORKER_PATIENCE = 3.0
"""Seconds ``--no-worker`` waits for a worker to show up polling the task queue."""


async def _require_a_worker(conn: Temporal, task_queue: str) -> None:
    """Fail within seconds, instead of waiting forever, when no worker polls the task queue."""
    import asyncio

    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    request = DescribeTaskQueueRequest(
        namespace=conn.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    deadline = asyncio.get_running_loop().time() + NO_WORKER_PATIENCE
    while True:
        described = await conn.client.workflow_service.describe_task_queue(request)
        if described.pollers:
            return
        if asyncio.get_running_loop().time() >= deadline:
            raise Failure(
                f"no worker polls task queue {task_queue!r} on {conn.address}: start one with "
                f"`{PROG} worker` (same TURNS_HOME/TEMPORAL_ADDRESS), drop --no-worker to run one "
                "in this command, or pass --wait-for-worker to wait anyway"
            )
        await asyncio.sleep(0.5)


async def follow_to_end(
    turns: TurnClient,
    turn_id: str,
    input: TurnExternalInput | None,
    renderer: StreamRenderer | None,
) -> TurnOutcome:
    """Advance the turn, rendering its stream, until it settles (a signal detaches)."""
    import asyncio

    following(turn_id)
    execution = turns.advance_turn(turn_id, input)

    async def pump() -> None:
        with contextlib.suppress(Exception):  # the outcome reports any failure
            async for event in execution.events:
                if renderer is not None:
                    renderer.feed(event)

    async def spin() -> None:
        while renderer is not None:
            renderer.tick(time.monotonic())
            await asyncio.sleep(0.1)

    pumping = asyncio.create_task(pump())
    spinning = asyncio.create_task(spin())
    try:
        outcome = await execution.outcome
    except BaseException:
        pumping.cancel()
        raise
    finally:
        spinning.cancel()
    # The outcome is settled: let the stream print its last durable events.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(pumping, 5.0)
    if renderer is not None:
        renderer.close()
    return outcome


def finish(
    args: argparse.Namespace,
    turn_id: str,
    outcome: TurnOutcome,
    *,
    accepted: bool = False,
    renderer: StreamRenderer | None = None,
) -> int:
    from turnclient.cli.render import outcome_block, outcome_json, wants_color, write_painted

    state = settled_state(turn_id)
    if args.json:
        doc = outcome_json(turn_id, outcome)
        doc["cost"] = cost_json(state, session=True) if state is not None else None
        if state is not None:
            from turnclient.lib.turnview import structured_output

            shaped = structured_output(state)
            if shaped is not None:  # only an agent with structured output has it
                doc["structuredOutput"] = shaped
        emit_json(doc)
    else:
        color = wants_color(sys.stdout)
        lines = outcome_block(
            turn_id, outcome, shown=renderer.failures if renderer is not None else ()
        )
        if state is not None:
            lines += [f"  {line.strip()}" for line in cost_text(state, known_only=True)[:1]]
        for line in lines:
            write_painted(sys.stdout, line, color)
        sys.stdout.flush()
    if accepted:
        return EXIT_OK
    return EXIT_CODES[outcome.status]


@command(
    "run",
    "create a turn and advance it, streaming text, tool calls and approvals",
    arg(
        "prompt",
        nargs="*",
        metavar="PROMPT",
        help="the user's message (`-` reads it from stdin; or use --file)",
    ),
    arg("--file", metavar="PATH", help="read the user's message from a file"),
    arg(
        "--agent", metavar="NAME", help="the agent (default: default_agent of turns.toml, or demo)"
    ),
    arg("--model", metavar="PROVIDER/MODEL", help="override the agent's model"),
    arg("--auto-permission", action="store_true", help="let the classifier decide approvals first"),
    arg("--no-human", action="store_true", help="no human is available: deny what needs one"),
    arg("--max-model-calls", type=positive, metavar="N", help="limit model calls (default 20)"),
    arg(
        "--session",
        metavar="ID",
        help="continue the session's latest turn, or start the session",
    ),
    arg(
        "--continue",
        dest="continue_from",
        metavar="TURN",
        help="continue the conversation of TURN (an id, `last` or a unique prefix of a turn "
        "that has ended) in this new turn: same session, its agent",
    ),
    JSON,
    NO_WORKER,
    WAIT_FOR_WORKER,
)
def run(args: argparse.Namespace) -> int:
    async def body() -> int:
        from turnclient.cli.render import StreamRenderer, wants_color

        if args.continue_from and args.session:
            raise Failure(
                "give --continue TURN_ID or --session ID, not both "
                "(a continued turn joins its predecessor's session)",
                EXIT_USAGE,
            )
        runtime = open_runtime()
        prompt = _prompt(args)
        if args.continue_from:  # the file decides: no server needed to refuse
            after = await continuation_of(
                runtime, None, continue_from=resolve_turn_id(args.continue_from)
            )
            request, agent_name, model = turn_request(args, runtime, prompt, after)
        async with worker_session(args, runtime) as (_, turns):
            if not args.continue_from:
                after = await continuation_of(runtime, turns.temporal, session=args.session)
                request, agent_name, model = turn_request(args, runtime, prompt, after)
            turn_id = await turns.create_turn(request)
            renderer = None
            if not args.json:
                print(f"turn {turn_id} · agent {agent_name} · model {model.label()}", flush=True)
                renderer = StreamRenderer(
                    sys.stdout, model=model.label(), color=wants_color(sys.stdout)
                )
            outcome = await follow_to_end(turns, turn_id, None, renderer)
            return finish(args, turn_id, outcome, renderer=renderer)

    return run_async(args, body)


MAX_PROMPT_BYTES = 1 << 20
"""A prompt larger than this is refused: it would not fit a model's context anyway."""


def _prompt(args: argparse.Namespace) -> str:
    """The user's message from the arguments, stdin (``-``) or ``--file``; never empty."""
    words: list[str] = args.prompt
    if args.file is not None and words:
        raise Failure("give the prompt as arguments, `-` (stdin) or --file, not both", EXIT_USAGE)
    if args.file is not None:
        try:
            data = Path(args.file).read_bytes()
        except OSError as exc:
            raise Failure(
                f"cannot read the prompt from {args.file}: {exc.strerror}", EXIT_USAGE
            ) from None
        source = args.file
    elif words == ["-"]:
        data = sys.stdin.buffer.read(MAX_PROMPT_BYTES + 1)
        source = "stdin"
    else:
        data = " ".join(words).encode()
        source = "the arguments"
    if len(data) > MAX_PROMPT_BYTES:
        raise Failure(f"the prompt from {source} is over {MAX_PROMPT_BYTES} bytes", EXIT_USAGE)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise Failure(f"the prompt from {source} is not UTF-8 text", EXIT_USAGE) from None
    if not text.strip():
        raise Failure(
            f'the prompt is empty: say what the turn is about (`{PROG} run "…"`, '
            f"`{PROG} run -` to read stdin, or --file PATH)",
            EXIT_USAGE,
        )
    return text


async def continuation_of(
    runtime: Runtime, client: Any, *, continue_from: str | None = None, session: str | None = None
) -> Continuation:
    """Where the new turn starts; continuing a turn that has not ended is a usage error."""
    from turnclient.lib.conversations import continuation

    try:
        return await continuation(
            runtime.repository, client, continue_from=continue_from, session=session
        )
    except RejectedInputError as exc:
        raise Failure(str(exc), EXIT_USAGE) from None


def turn_request(
    args: argparse.Namespace, runtime: Runtime, prompt: str, after: Continuation
) -> tuple[CreateTurnInput, str, ModelDescriptor]:
    """The new turn of ``turns run``/``turns chat``: agent, model and context checked."""
    from turnclient.lib.api import CreateTurnInput
    from turncore.events import AgentOverrides, RequestedAgent
    from turncore.messages import UserMessage

    agent_name = args.agent or after.agent or runtime.config.default_agent
    agent = runtime.config.agents.get(agent_name)
    if agent is None:
        known = ", ".join(sorted(runtime.config.agents))
        raise Failure(f"unknown agent {agent_name!r} (known: {known})", EXIT_USAGE)
    override = getattr(args, "model", None)
    try:
        model = runtime.model_for(agent_name, override)
    except TurnError as exc:  # InvalidInputError is one
        raise Failure(str(exc), EXIT_USAGE) from None
    if model is None:
        raise Failure(
            f"agent {agent_name!r} names no model: set OPENAI_API_KEY or ANTHROPIC_API_KEY "
            "(its default model follows the key), pass --model PROVIDER/MODEL, or set "
            "default_model in turns.toml",
            EXIT_USAGE,
        )
    runtime.models.resolve(model)  # a missing key fails before any file exists
    max_calls = getattr(args, "max_model_calls", None)
    request = CreateTurnInput(
        agent=RequestedAgent(
            agent_id=agent_name,
            overrides=AgentOverrides(model=model) if override else None,
        ),
        input=UserMessage(content=prompt),
        human_available=not getattr(args, "no_human", False),
        auto_permission=getattr(args, "auto_permission", False),
        session_id=after.session,
        context=after.context,
        reasoning_effort=agent.reasoning_effort,
        **({"max_model_calls": max_calls} if max_calls else {}),
    )
    return request, agent_name, model
