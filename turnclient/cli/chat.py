"""``turns chat``: a conversation in the terminal.

Each line you type is a new turn that continues the previous one (§6.6), so
the whole chat is one session (named after its first turn unless you
continue an existing conversation). Text streams as it is generated. A tool
call that needs approval is asked inline (``y`` allows; ``n`` or anything
else denies, and what you typed becomes the reason the model reads); an
``ask_human`` question (or any async tool that needs a human) is answered
with the next line. Ctrl-D ends the chat; every turn is in its file, and
``turns chat --continue LAST_TURN`` picks the conversation up again.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

import orjson

from turnclient.cli.common import (
    EXIT_OK,
    EXIT_SUSPENDED,
    NO_WORKER,
    arg,
    at_prompt,
    between_turns,
    command,
    following,
    open_runtime,
    resolve_turn_id,
    run_async,
)
from turnclient.cli.running import continuation_of, follow_to_end, turn_request, worker_session
from turnclient.lib.terminal import command_line

if TYPE_CHECKING:
    from turnclient.lib.api import TurnClient
    from turnclient.runtime.connection import Runtime
    from turncore.events import SuspendedOutcome, TurnExternalInput, TurnOutcome

ALLOW = ("y", "yes")


async def _read(prompt: str) -> str | None:
    """One line from stdin after ``prompt``; None at end of input (Ctrl-D)."""
    import asyncio

    sys.stdout.write(prompt)
    sys.stdout.flush()
    with at_prompt():
        line = str(await asyncio.to_thread(sys.stdin.readline))
    if not line:
        sys.stdout.write("\n")
        return None
    return line.rstrip("\n")


def run_chat(args: argparse.Namespace) -> int:
    async def body() -> int:
        runtime = open_runtime()
        last = resolve_turn_id(args.continue_from) if args.continue_from else None
        # A turn left at a question for its human (Ctrl-C at an approval) is
        # picked up at that question; any other turn that has not ended is
        # refused now, before any server starts.
        pending = await _awaiting_a_human(runtime, last) if last is not None else None
        if pending is not None:
            assert last is not None
            agent = args.agent or pending[0]
        else:
            start = await continuation_of(runtime, None, continue_from=last)
            agent = args.agent or start.agent or runtime.config.default_agent
        async with worker_session(args, runtime) as (_, turns):
            print(
                f"chat with {agent} · Ctrl-D ends · approvals: y / n / a reason to deny",
                flush=True,
            )
            if pending is not None and last is not None:
                following(last)
                outcome = await _answer(turns, runtime, last, pending[1])
                if outcome.status == "suspended":
                    return _still_waiting(last)
            while True:
                if last is not None:
                    between_turns(f"continue this conversation with: {_again(last)}")
                line = await _read("you> ")
                if line is None:
                    break
                if not line.strip():
                    continue
                after = await continuation_of(runtime, None, continue_from=last)
                request, _, model = turn_request(args, runtime, line, after)
                turn_id = await turns.create_turn(request)
                last = turn_id
                outcome = await _advance(turns, runtime, turn_id, None, model.label())
                outcome = await _answer(turns, runtime, turn_id, outcome)
                if outcome.status == "suspended":
                    return _still_waiting(turn_id)
        if last is not None:
            print(f"continue this conversation with: {_again(last)}", flush=True)
        return EXIT_OK

    return run_async(args, body)


async def _advance(
    turns: TurnClient,
    runtime: Runtime,
    turn_id: str,
    input: TurnExternalInput | None,
    model: str | None = None,
) -> TurnOutcome:
    import asyncio

    from turnclient.cli.render import StreamRenderer, wants_color
    from turncore.reducer import reduce_turn

    renderer = StreamRenderer(sys.stdout, model=model, color=wants_color(sys.stdout))
    if input is not None:
        renderer.prime(reduce_turn(await asyncio.to_thread(runtime.repository.read, turn_id)))
    outcome = await follow_to_end(turns, turn_id, input, renderer)
    if outcome.status == "completed":
        sys.stdout.write("\n")
    return outcome


def _still_waiting(turn_id: str) -> int:
    finish = command_line("complete", turn_id, "CALL", "--output", "JSON")
    print(
        f"turn {turn_id} still waits for an external result; finish it with "
        f"`{finish}` (or `{command_line('cancel', turn_id)}`), then continue "
        f"with `{_again(turn_id)}`",
        flush=True,
    )
    return EXIT_SUSPENDED


async def _awaiting_a_human(runtime: Runtime, turn_id: str) -> tuple[str, SuspendedOutcome] | None:
    """(its agent, its outcome) if ``turn_id`` is suspended on something its human
    answers here (an approval, ``ask_human``); None otherwise."""
    import asyncio

    from turncore.advance import outcome_of
    from turncore.events import SuspendedOutcome
    from turncore.reducer import reduce_turn

    state = reduce_turn(await asyncio.to_thread(runtime.repository.read, turn_id))
    outcome = outcome_of(state)
    if not isinstance(outcome, SuspendedOutcome):
        return None
    asks = bool(outcome.pending_permissions) or any(
        (declared := runtime.config.tools.get(a.tool_name)) is not None and declared.requires_human
        for a in outcome.pending_async_tools
    )
    return (state.definition.agent.resolved.agent_id, outcome) if asks else None


async def _answer(
    turns: TurnClient, runtime: Runtime, turn_id: str, outcome: TurnOutcome
) -> TurnOutcome:
    """Ask the human for every decision and answer the suspended turn needs, inline.

    At a question, a signal stops the chat and leaves the turn at it; the hint
    it prints (``turns chat --continue TURN``) asks the same question again."""
    from turnclient.lib.api import decided, os_user  # loaded only when a turn waits
    from turnclient.lib.turnview import permission_label
    from turncore.events import AsyncToolResultInput, PermissionDecisionInput, ToolResultData

    while outcome.status == "suspended":
        between_turns(f"the turn waits for your answer; pick it up with: {_again(turn_id)}")
        input: TurnExternalInput | None = None
        for p in outcome.pending_permissions:
            shown = orjson.dumps(_call_input(runtime, turn_id, p.tool_call_id)).decode()
            label = permission_label(p.tool_name, p.request)  # "MCP files · read_file"
            reply = await _read(f"allow {label} {shown}? [y/n/reason] ")
            if reply is None:
                return outcome
            reply = reply.strip()
            if reply.lower() in ALLOW:
                input = PermissionDecisionInput(
                    tool_call_id=p.tool_call_id,
                    decision="allow",
                    metadata=decided("cli", os_user()),
                )
            else:
                reason = None if reply.lower() in ("", "n", "no") else reply
                input = PermissionDecisionInput(
                    tool_call_id=p.tool_call_id,
                    decision="deny",
                    metadata=decided("cli", os_user(), reason),
                )
            break
        if input is None:
            for a in outcome.pending_async_tools:
                declared = runtime.config.tools.get(a.tool_name)
                if declared is None or not declared.requires_human:
                    continue  # an external system answers it
                question = a.input.get("question") if isinstance(a.input, dict) else None
                reply = await _read(f"{question or a.tool_name} > ")
                if reply is None:
                    return outcome
                input = AsyncToolResultInput(
                    tool_call_id=a.tool_call_id,
                    result=ToolResultData(
                        output=reply, is_error=False, metadata=decided("cli", os_user())
                    ),
                )
                break
        if input is None:
            return outcome  # only external tools remain
        outcome = await _advance(turns, runtime, turn_id, input)
    return outcome


def _again(turn_id: str) -> str:
    return command_line("chat", "--continue", turn_id)


def _call_input(runtime: Runtime, turn_id: str, tool_call_id: str) -> Any:
    from turncore.reducer import reduce_turn

    state = reduce_turn(runtime.repository.read(turn_id))
    call = state.tool_call(tool_call_id)
    return call.input if call is not None else None


__all__ = ["run_chat"]


@command(
    "chat",
    "talk with an agent in the terminal: each line is a turn continuing the last (Ctrl-D ends)",
    arg(
        "--agent", metavar="NAME", help="the agent (default: the conversation's, or default_agent)"
    ),
    arg("--model", metavar="PROVIDER/MODEL", help="override the agent's model"),
    arg(
        "--continue",
        dest="continue_from",
        metavar="TURN_ID",
        help="continue the conversation after this ended turn",
    ),
    NO_WORKER,
)
def chat(args: argparse.Namespace) -> int:
    return run_chat(args)
