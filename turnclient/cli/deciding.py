"""Commands that send a turn an input: ``approve``, ``deny``, ``complete``,
``progress``, ``cancel``; and ``recover`` (follow a turn to its end again).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnclient.cli.common import (
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_USAGE,
    JSON,
    NO_WORKER,
    TURN,
    WAIT_FOR_WORKER,
    Failure,
    arg,
    command,
    command_line,
    emit_json,
    load_turn,
    open_runtime,
    report_failure,
    resolve_turn_id,
    run_async,
)
from turnclient.cli.running import finish, follow_to_end, worker_session
from turncore.errors import RejectedInputError

if TYPE_CHECKING:
    from turncore.events import TurnExternalInput
    from turncore.reducer import TurnState

CALL = arg("call", metavar="CALL", help="a tool call id (see `turns show TURN`)")


def json_value(text: str) -> Any:
    """JSON from the argument, or from a file named ``@PATH`` (``@-``: stdin).

    A value too long for a command line (a megabyte result, which is staged
    for the turn) comes from a file; ``@`` never starts JSON, so nothing is lost.
    """
    where = "the argument"
    if text.startswith("@"):
        path = text[1:]
        where = "stdin" if path == "-" else path
        try:
            raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise argparse.ArgumentTypeError(
                f"cannot read {where}: {exc} (give @PATH of a UTF-8 JSON file, or @- for stdin)"
            ) from None
    from turncore.jsonvalue import JsonTooDeepError, loads_exact

    try:
        return loads_exact(text)  # every integer exact, so validation can refuse it
    except JsonTooDeepError as exc:
        raise argparse.ArgumentTypeError(f"{where} is {exc}") from None
    except ValueError as exc:
        shown = repr(text) if len(text) <= 80 else f"{text[:77]!r}…"
        if where != "the argument":
            raise argparse.ArgumentTypeError(f"{where} is {exc}: {shown}") from None
        raise argparse.ArgumentTypeError(
            f"{shown} is {exc} (a string needs quotes: '\"text\"')"
        ) from None


def _send(
    args: argparse.Namespace,
    make_input: Callable[[], TurnExternalInput],
    *,
    accepted_ok: bool = False,
) -> int:
    from turncore.reducer import reduce_turn

    async def body() -> int:
        from pydantic import ValidationError

        from turnclient.cli.render import StreamRenderer, wants_color
        from turncore.advance import check_input
        from turncore.inputs import validation_reason

        turn_id = resolve_turn_id(args.turn)
        try:
            input = make_input()
        except ValidationError as exc:  # a value no turn may hold, refused before sending
            raise Failure(validation_reason(exc), EXIT_USAGE) from None
        # Rejected from the file before any runtime is built or server started;
        # the workflow checks again, atomically, when the input arrives.
        _, events = load_turn(turn_id)
        before = reduce_turn(events)
        try:
            check_input(before, input)
        except RejectedInputError as exc:
            raise Failure(_rejection(before, input, exc), EXIT_REJECTED) from None
        runtime = open_runtime()
        async with worker_session(args, runtime) as (_, turns):
            renderer = None
            if not args.json:
                renderer = StreamRenderer(sys.stdout, color=wants_color(sys.stdout))
                renderer.prime(before)
            outcome = await follow_to_end(turns, turn_id, input, renderer)
            return finish(
                args,
                turn_id,
                outcome,
                accepted=accepted_ok and outcome.status == "suspended",
                renderer=renderer,
            )

    return run_async(args, body)


_INPUT_WORDS = {
    "permission_decision": "an approval or denial",
    "async_tool_result": "a result",
    "async_tool_progress": "progress",
    "cancel": "a cancellation",
}


def _rejection(state: TurnState, input: TurnExternalInput, exc: RejectedInputError) -> str:
    """Why ``input`` is refused, in the words of the commands, and what the turn waits for."""
    from turnclient.cli.render import continue_commands, status_of

    turn_id = state.definition.turn_id
    what = _INPUT_WORDS.get(input.type, input.type)
    if state.terminal is not None:
        return (
            f"rejected: turn {turn_id} already ended ({status_of(state)}); {what} is not accepted"
        )
    call_id = getattr(input, "tool_call_id", None)
    call = state.tool_call(call_id) if isinstance(call_id, str) else None
    pending_approval = any(p.tool_call_id == call_id for p in state.pending_permissions())
    if call is None:
        reason = f"turn {turn_id} has no tool call {call_id}"
    elif input.type in ("async_tool_result", "async_tool_progress") and pending_approval:
        reason = (
            f"{call.tool_name} ({call_id}) awaits approval first: "
            f"`{command_line('approve', turn_id, call.tool_call_id)}` (or deny it)"
        )
    elif (
        input.type == "permission_decision"
        and call.execution == "async"
        and call.invocation
        and call.result is None
    ):
        # Only a call that still awaits its result is pointed at `complete`;
        # one that has it is refused for that reason (the else branch).
        approved = call.permission is not None and call.permission.resolved is not None
        reason = (
            f"{call.tool_name} ({call_id}) "
            f"{'was already approved;' if approved else 'needs no approval,'} "
            f"it awaits its result: `{command_line('complete', turn_id, call.tool_call_id, '--text', '…')}`"
        )
    else:
        reason = str(exc)
    outcome = _suspended_outcome(state)
    waiting = (
        [f"{desc} → {commands[0]}" for desc, commands in continue_commands(turn_id, outcome)]
        if outcome is not None
        else []
    )
    tail = f". Waiting for: {'; '.join(waiting)}" if waiting else ""
    return f"rejected: {what} for {call_id or 'the turn'}: {reason}{tail}"


def _suspended_outcome(state: TurnState) -> Any:
    from turncore.advance import outcome_of
    from turncore.events import SuspendedOutcome

    outcome = outcome_of(state)
    return outcome if isinstance(outcome, SuspendedOutcome) else None


@command(
    "approve",
    "allow a tool call that awaits approval, then continue the turn",
    TURN,
    CALL,
    JSON,
    NO_WORKER,
    WAIT_FOR_WORKER,
)
def approve(args: argparse.Namespace) -> int:
    from turnclient.lib.api import decided, os_user
    from turncore.events import PermissionDecisionInput

    return _send(
        args,
        lambda: PermissionDecisionInput(
            tool_call_id=args.call, decision="allow", metadata=decided("cli", os_user())
        ),
    )


@command(
    "deny",
    "deny a tool call that awaits approval, then continue the turn",
    TURN,
    CALL,
    arg("--reason", metavar="R", help="why (recorded and shown to the model)"),
    JSON,
    NO_WORKER,
    WAIT_FOR_WORKER,
)
def deny(args: argparse.Namespace) -> int:
    from turnclient.lib.api import decided, os_user
    from turncore.events import PermissionDecisionInput

    def make() -> PermissionDecisionInput:
        metadata = decided("cli", os_user(), args.reason)
        return PermissionDecisionInput(tool_call_id=args.call, decision="deny", metadata=metadata)

    return _send(args, make)


@command(
    "complete",
    "supply the result of an async tool call (such as ask_human), then continue the turn",
    TURN,
    CALL,
    arg(
        "--output",
        type=json_value,
        metavar="JSON",
        help="the result, as JSON; @PATH reads it from a file (@- from stdin)",
    ),
    arg("--text", metavar="TEXT", help="the result, as a plain string"),
    arg("--error", action="store_true", help="the tool failed; the output describes how"),
    JSON,
    NO_WORKER,
    WAIT_FOR_WORKER,
)
def complete(args: argparse.Namespace) -> int:
    from turncore.events import AsyncToolResultInput, ToolResultData

    if (args.output is None) == (args.text is None):
        return report_failure(
            args, EXIT_USAGE, "give the result with exactly one of --output JSON or --text TEXT"
        )

    from turnclient.lib.api import decided, os_user

    def make() -> AsyncToolResultInput:
        output = args.text if args.text is not None else args.output
        result = ToolResultData(
            output=output, is_error=args.error, metadata=decided("cli", os_user())
        )
        return AsyncToolResultInput(tool_call_id=args.call, result=result)

    return _send(args, make)


@command(
    "progress",
    "record progress of an async tool call (the turn stays suspended; exit 0 when accepted)",
    TURN,
    CALL,
    arg(
        "--data",
        type=json_value,
        required=True,
        metavar="JSON",
        help="the progress, as JSON; @PATH reads it from a file (@- from stdin)",
    ),
    JSON,
    NO_WORKER,
    WAIT_FOR_WORKER,
)
def progress(args: argparse.Namespace) -> int:
    from turncore.events import AsyncToolProgressInput

    return _send(
        args,
        lambda: AsyncToolProgressInput(tool_call_id=args.call, progress=args.data),
        accepted_ok=True,
    )


@command(
    "cancel",
    "cancel a turn: open tool calls get cancellation results (exit 5 once cancelled)",
    TURN,
    arg("--reason", metavar="R", help="why"),
    JSON,
    NO_WORKER,
    WAIT_FOR_WORKER,
)
def cancel(args: argparse.Namespace) -> int:
    from turncore.events import CancelInput

    return _send(args, lambda: CancelInput(reason=args.reason))


@command(
    "recover",
    "serve a turn until it settles; start its workflow from the file if none runs, "
    "or rebuild a stuck one",
    arg("turn", metavar="TURN", nargs="?", help="a turn id, `last`, or a unique prefix of one"),
    arg(
        "--all-stuck",
        action="store_true",
        help="rebuild every stuck turn from its file (terminate the run, start a new one)",
    ),
    JSON,
    NO_WORKER,
    WAIT_FOR_WORKER,
)
def recover(args: argparse.Namespace) -> int:
    import asyncio

    from turncore.reducer import reduce_turn

    if (args.turn is None) == (not args.all_stuck):
        return report_failure(args, EXIT_USAGE, "recover takes a TURN or --all-stuck (not both)")
    if args.all_stuck:
        return run_async(args, lambda: _recover_all_stuck(args))

    async def body() -> int:
        from turnclient.cli.render import StreamRenderer, running_tools_note, wants_color

        turn_id = resolve_turn_id(args.turn)
        runtime = open_runtime()
        if not runtime.repository.exists(turn_id):
            raise Failure(f"no turn {turn_id} in {runtime.work_dir}", EXIT_USAGE)
        async with worker_session(args, runtime) as (_, turns):
            rebuilt = await turns.rebuild(turn_id)
            if rebuilt is not None and not args.json:
                print(_rebuilt_line(turn_id, rebuilt.cause), flush=True)
            renderer = None
            if not args.json:
                renderer = StreamRenderer(sys.stdout, color=wants_color(sys.stdout))
                state = reduce_turn(await asyncio.to_thread(runtime.repository.read, turn_id))
                renderer.prime(state)
                note = running_tools_note(state)
                if note is not None:
                    print(note, flush=True)
            outcome = await follow_to_end(turns, turn_id, None, renderer)
            return finish(args, turn_id, outcome, renderer=renderer)

    return run_async(args, body)


def _rebuilt_line(turn_id: str, cause: str) -> str:
    return (
        f"turn {turn_id} was stuck ({cause}): terminated its run and started a new one "
        "from the turn's file"
    )


async def _recover_all_stuck(args: argparse.Namespace) -> int:
    """``turns recover --all-stuck``: rebuild each stuck open turn; the new runs go on
    by themselves (this command does not wait for them to settle)."""
    from turnclient.cli.replaycheck import open_turn_ids

    runtime = open_runtime()
    rebuilt: list[dict[str, str]] = []
    # No worker here: the new runs are the workers' to serve, not this short-lived process's.
    async with worker_session(args, runtime, worker=False) as (conn, turns):
        for turn_id in await open_turn_ids(conn.client, runtime.task_queue):
            if not runtime.repository.exists(turn_id):
                continue  # a turn of another work dir on the same namespace
            stuck = await turns.rebuild(turn_id)
            if stuck is None:
                continue
            rebuilt.append({"turnId": turn_id, "cause": stuck.cause})
            if not args.json:
                print(_rebuilt_line(turn_id, stuck.cause), flush=True)
    if args.json:
        emit_json({"rebuilt": rebuilt})
    elif not rebuilt:
        print("no stuck turns")
    return EXIT_OK
