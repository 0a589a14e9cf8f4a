"""Commands that read a turn: ``validate``, ``state``, ``show``, ``log``,
``inspect`` (a file or a stored turn, no server), ``watch``, ``list`` and
``replay`` (the pre-deploy check).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from turnclient.cli.common import (
    EXIT_CODES,
    EXIT_OK,
    EXIT_PROBLEM,
    EXIT_USAGE,
    JSON,
    NO_WORKER,
    PROG,
    TURN,
    Failure,
    arg,
    command,
    command_line,
    cost_json,
    cost_text,
    current_work_dir,
    emit_json,
    following,
    in_database,
    load_turn,
    names_a_turn,
    open_runtime,
    path_of,
    positive,
    read_turn_file,
    resolve_turn_id,
    run_async,
    run_sync,
    storage_config,
    stored_repository,
    turn_files,
)
from turncore.errors import CorruptTurnError, InfrastructureError, TurnNotFoundError
from turncore.ids import is_turn_id

if TYPE_CHECKING:
    from temporalio.client import Client

    from turnclient.lib.stuck import StuckRun
    from turnclient.runtime.connection import Runtime
    from turncore.events import TurnEvent
    from turncore.reducer import TurnState


# ---------------------------------------------------------------- file commands


def _server_file() -> Path:
    """Where the work dir's embedded server says it runs (``turnclient.runtime.embedded``)."""
    return current_work_dir() / "temporal" / "server.json"


async def _running_server() -> Client | None:
    """A client of the Temporal server commands use, if one is up: never starts the
    embedded server (``show``, ``state`` and ``watch --no-worker`` read the file;
    the server only adds whether the turn is stuck). None if none answers."""
    import asyncio

    from temporalio.client import Client

    from turnclient.runtime.connection import uses_embedded
    from turnclient.runtime.embedded import NAMESPACE, ServerInfo, is_server_process

    try:
        if uses_embedded():
            try:
                info = ServerInfo.from_json(orjson.loads(_server_file().read_bytes()))
            except (OSError, ValueError, KeyError, TypeError):
                return None
            if not is_server_process(info.pid, info.db):
                return None
            connecting = Client.connect(info.address, namespace=NAMESPACE)
        else:
            from temporalio.envconfig import ClientConfig

            connecting = Client.connect(**ClientConfig.load_client_connect_config())
        return await asyncio.wait_for(connecting, timeout=5.0)
    except (RuntimeError, OSError, TimeoutError):
        return None


def _stuck_of(state: TurnState) -> StuckRun | None:
    """The open turn's stuck run, asked of a Temporal server that is already up; None
    for an ended turn, or when no server answers within seconds (the file's view
    stands unmarked rather than the command failing)."""
    if state.terminal is not None:
        return None
    if not os.environ.get("TEMPORAL_ADDRESS") and not _server_file().exists():
        return None  # no embedded server up: nothing to ask, and no Temporal SDK to load
    import asyncio

    from temporalio.service import RPCError

    from turnclient.lib.stuck import stuck_run

    turn_id = state.definition.turn_id

    async def ask() -> StuckRun | None:
        client = await _running_server()
        return None if client is None else await stuck_run(client, turn_id)

    try:
        return asyncio.run(asyncio.wait_for(ask(), timeout=5.0))
    except (TimeoutError, RPCError):
        return None  # no server to ask: the file's view stands unmarked


@command(
    "validate",
    "check turn files; print PATH:LINE: rule for each invalid one",
    arg(
        "paths",
        nargs="+",
        metavar="PATH|TURN",
        help="a turn file, a directory of them, or a turn id in the configured storage",
    ),
    arg("--json", action="store_true", help='{"valid": [PATH…], "invalid": [{path, problem}…]}'),
)
def validate(args: argparse.Namespace) -> int:
    valid: list[str] = []
    invalid: list[dict[str, str]] = []
    for given in args.paths:
        if not os.path.exists(given) and names_a_turn(given):
            try:  # `last` and a prefix name a stored turn, as for every command
                targets = [resolve_turn_id(given)]
            except Failure as exc:
                invalid.append({"path": given, "problem": str(exc)})
                if not args.json:
                    print(str(exc))
                continue
        else:
            targets = list(turn_files(given))
        for path in targets:
            _, problem = _read_stored(path) if _is_stored_id(path) else read_turn_file(path)
            if problem is None:
                valid.append(path)
                continue
            invalid.append({"path": path, "problem": problem})
            if not args.json:
                print(problem)
    if args.json:
        emit_json({"valid": valid, "invalid": invalid})
    elif not valid and not invalid:
        print("no turn files found")
    elif not invalid:  # with problems, stdout is exactly their PATH:LINE: rule lines
        print(f"all {len(valid)} turn file{'s' if len(valid) != 1 else ''} valid")
    return 1 if invalid else 0


@command(
    "state",
    "print the state a turn reduces to (from its file)",
    arg("path", metavar="TURN|PATH", help="a turn id, or the path of a turn file"),
    arg("--json", action="store_true", help="the TurnState as JSON (spec §14.2 names)"),
)
def state(args: argparse.Namespace) -> int:
    from turnclient.lib.summary import summarize
    from turncore.reducer import reduce_turn

    def body() -> int:
        if not (args.path.endswith(".jsonl") or os.sep in args.path):
            _, events = load_turn(args.path)
        else:
            found, problem = read_turn_file(args.path)
            if found is None:
                raise Failure(problem or args.path)
            events = found
        reduced = reduce_turn(events)
        if args.json:
            emit_json(reduced.to_wire())
        else:
            print(summarize(reduced))
            stuck = _stuck_of(reduced)
            if stuck is not None:
                print(stuck.describe())
        return EXIT_OK

    return run_sync(args, body)


@command(
    "show",
    "show a turn: messages, tool calls with permissions, progress and results, usage, outcome",
    TURN,
    JSON,
)
def show(args: argparse.Namespace) -> int:
    from turnclient.cli.render import output_lines, status_of, transcript
    from turncore.reducer import reduce_turn

    def body() -> int:
        from turnclient.lib.turnview import answering_lines, answering_models, structured_output

        _, events = load_turn(args.turn)
        reduced = reduce_turn(events)
        stuck = _stuck_of(reduced)
        if args.json:
            emit_json(
                {
                    "turnId": reduced.definition.turn_id,
                    "status": status_of(reduced),
                    "stuck": {"cause": stuck.cause, "fix": stuck.fix} if stuck else None,
                    "state": reduced.to_wire(),
                    "cost": cost_json(reduced, session=True),
                    "models": answering_models(events),
                    "output": structured_output(reduced),
                }
            )
        else:
            print(transcript(reduced))
            for line in answering_lines(events):
                print(line)
            for line in output_lines(structured_output(reduced)):
                print(line)
            print("\n".join(cost_text(reduced)))
            if stuck is not None:
                print(stuck.describe())
        return EXIT_OK

    return run_sync(args, body)


@command(
    "log",
    "print a turn's raw JSONL file",
    arg("turn", metavar="TURN|PATH", help="a turn id, or the path of a turn file"),
    arg("--json", action="store_true", help="a JSON array of the lines' objects instead"),
)
def log(args: argparse.Namespace) -> int:
    def body() -> int:
        if in_database(args.turn):
            turn_id = resolve_turn_id(args.turn)
            path, data = f"postgres:{turn_id}", _stored_bytes(turn_id)
        else:
            file = path_of(args.turn)
            path, data = str(file), _turn_file_bytes(file)
        if args.json:
            # Element N-1 is line N (offsets are line numbers, §17.1), so a line
            # that is not JSON, blank ones included, is named rather than dropped.
            # Not a validation: the final piece without its newline is shown too.
            pieces = data.split(b"\n")
            if pieces[-1] == b"":
                pieces.pop()
            objects = []
            for number, piece in enumerate(pieces, start=1):
                try:
                    objects.append(orjson.loads(piece))
                except orjson.JSONDecodeError as exc:
                    raise Failure(
                        f"{path}:{number}: the line is not JSON ({exc.msg}); "
                        f"`{PROG} validate {args.turn}` checks the whole turn"
                    ) from None
            emit_json(objects)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return EXIT_OK

    return run_sync(args, body)


def _turn_file_bytes(path: Path) -> bytes:
    """The bytes of a turn file; anything else (``/etc/passwd``, a FIFO) is refused unread.

    A turn file is a regular file whose first line is a ``turn_created`` event;
    ``turns validate`` checks the rest.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        raise Failure(f"no turn file at {path}", EXIT_USAGE) from None
    if not stat.S_ISREG(info.st_mode):
        raise Failure(f"{path} is not a regular file, so not a turn file", EXIT_USAGE)
    data = path.read_bytes()
    first = data.split(b"\n", 1)[0]
    try:
        head = orjson.loads(first)
    except orjson.JSONDecodeError:
        head = None
    if not (
        isinstance(head, dict)
        and head.get("type") == "turn_created"
        and isinstance(head.get("turnId"), str)
        and is_turn_id(head["turnId"])
    ):
        raise Failure(
            f"{path} is not a turn file (its first line is not a turn_created event); "
            f"`{PROG} validate {path}` says more",
            EXIT_USAGE,
        )
    return data


@command(
    "inspect",
    "print the composed, provider-neutral request of a model call (default: the last one); "
    "--wire shows the provider's HTTP body",
    TURN,
    arg("--call", type=int, metavar="N", help="the model call index (0 is the first)"),
    arg(
        "--wire",
        action="store_true",
        help="the request as the provider's adapter sends it: URL, headers (credentials "
        "redacted) and JSON body",
    ),
    JSON,
)
def inspect(args: argparse.Namespace) -> int:
    from turnclient.runtime.config import ConfigError
    from turncore.budget import BUDGET_KEY
    from turncore.compose import compose_model_request
    from turncore.context import ContextResolver, ElisionPolicy
    from turncore.messages import projected_wire
    from turncore.reducer import reduce_turn

    def body() -> int:
        _, events = load_turn(args.turn)
        reduced = reduce_turn(events)
        if not reduced.model_calls:
            raise Failure(f"turn {args.turn} has made no model call yet", EXIT_USAGE)
        index = args.call if args.call is not None else len(reduced.model_calls) - 1
        if not 0 <= index < len(reduced.model_calls):
            raise Failure(
                f"turn {args.turn} has model calls 0..{len(reduced.model_calls) - 1}, not {index}",
                EXIT_USAGE,
            )
        cfg = None
        try:
            cfg = storage_config()
            policy = cfg.context
        except ConfigError as exc:
            print(f"{PROG}: turns.toml unusable, default elision policy: {exc}", file=sys.stderr)
            policy = ElisionPolicy()
        with stored_repository(cfg) as repo:
            contexts = ContextResolver(lambda t: repo.reduced(t).state, policy)
            agent = contexts.resolve_agent(reduced.definition)
            context = contexts.resolve(reduced.definition.context)
        composed = compose_model_request(agent, context, reduced, index)
        if args.wire:
            wire = _wire_request(agent.tools, composed)
            if args.json:
                emit_json(wire)
            else:
                print(f"{wire['method']} {wire['url']}")
                for name, value in wire["headers"].items():
                    print(f"{name}: {value}")
                print()
                print(orjson.dumps(wire["body"], option=orjson.OPT_INDENT_2).decode())
            return EXIT_OK
        # A debug prompt view: media parts are projected, never shown (seed 000);
        # `--wire` is the exact body and the one place their sources appear.
        shown = composed.to_wire()
        shown["messages"] = [projected_wire(m) for m in composed.messages]
        budget = reduced.model_calls[index].request.parameters.get(BUDGET_KEY)
        if budget is not None:  # what the context budget dropped, as the file records it
            shown[BUDGET_KEY] = budget
        if args.json:
            emit_json(shown)
            return EXIT_OK
        _print_request(shown, policy.to_wire())
        return EXIT_OK

    return run_sync(args, body)


def _wire_request(tools: Any, composed: Any) -> dict[str, Any]:
    """The provider body the model activity would send for ``composed`` (no network I/O)."""
    from turncore.model import HttpModel, RetryingModel, build_request

    runtime = open_runtime()
    model = runtime.models.resolve(composed.model, require_key=False)
    if isinstance(model, RetryingModel):  # routing repeats the same body; show the adapter's
        model = model.inner
    if not isinstance(model, HttpModel):
        raise Failure(
            f"{composed.model.label()} is played in process and sends no HTTP request; "
            f"`{PROG} inspect` without --wire shows what it reads",
            EXIT_USAGE,
        )
    parameters = dict(composed.parameters)
    if composed.reasoning_effort is not None:
        parameters["reasoningEffort"] = composed.reasoning_effort
    request = build_request(
        model=composed.model,
        system_prompt=composed.system,
        tools=tools,
        messages=composed.messages,
        parameters=parameters,
        binding=model.binding,  # as the model activity does: foreign opaque state is stripped
    )
    return model.wire_request(request)


def _print_request(wire: dict[str, Any], policy: dict[str, Any]) -> None:
    from turnclient.cli.render import preview

    effort = f" · reasoningEffort {wire['reasoningEffort']}" if wire.get("reasoningEffort") else ""
    model = wire["model"]
    print(f"model call {wire['modelCallIndex']} · {model['provider']}/{model['model']}{effort}")
    print(f"parameters {orjson.dumps(wire['parameters']).decode()}")
    print(f"elision    {orjson.dumps(policy).decode()} (applies to earlier turns' messages)")
    budget = wire.get("contextBudget")
    if isinstance(budget, dict):
        print(
            f"budget     {budget.get('tokens')} tokens: dropped the {budget.get('dropped')} "
            "oldest messages of earlier turns (as recorded in the file)"
        )
        summary = budget.get("summary")
        if isinstance(summary, dict):
            if summary.get("error") is not None:
                how = f"failed, dropped plainly: {summary.get('error')}"
            elif summary.get("sent"):
                how = "sent as the first message"
            else:
                how = "not sent: it does not fit the budget"
            paid = (
                f" · usage {orjson.dumps(summary['usage']).decode()}" if "usage" in summary else ""
            )
            print(f"summary    turn {summary.get('turnId')}: {how}{paid}")
    print("\nsystem")
    print("\n".join("  " + line for line in wire["system"].splitlines()))
    print(f"\ntools ({len(wire['tools'])})")
    for t in wire["tools"]:
        print(f"  {t['name']}: {preview(t['description'], 100)}")
    print(f"\nmessages ({len(wire['messages'])})")
    for m in wire["messages"]:
        print(f"  [{m['role']}] {preview(_shown_content(m['content']), 300)}")
    print(
        "\n(the provider-neutral request: `turns inspect --json` prints all of it, "
        "`turns inspect --wire` the provider's HTTP body)"
    )


def _shown_content(content: Any) -> Any:
    """Message content for the text view: text parts as text, projected media as
    ``describe_part`` writes it, anything else (tool calls, results) unchanged."""
    from turncore.messages import describe_projection

    if not isinstance(content, list):
        return content
    if all(isinstance(p, dict) and (p.get("type") == "text" or "source" in p) for p in content):
        return " ".join(
            p["text"] if p.get("type") == "text" else describe_projection(p) for p in content
        )
    return content


def _is_stored_id(given: str) -> bool:
    """A turn id that is not also an existing path (``turns validate``)."""
    return is_turn_id(given) and not os.path.exists(given)


def _stored_bytes(turn_id: str) -> bytes:
    from turnclient.runtime.storage import where

    with stored_repository() as repo:
        try:
            data: bytes = repo.raw(turn_id)
        except TurnNotFoundError:
            raise Failure(f"no turn {turn_id} in {where(storage_config())}", EXIT_USAGE) from None
    return data


def _read_stored(turn_id: str) -> tuple[list[TurnEvent] | None, str | None]:
    """Like ``read_turn_file``, for a turn id in the configured storage."""
    try:
        with stored_repository() as repo:
            return repo.read(turn_id), None
    except CorruptTurnError as exc:
        return None, f"{exc.path}:{exc.line if exc.line is not None else 1}: {exc.rule}"
    except TurnNotFoundError:
        return None, f"{turn_id}: no such turn"
    except InfrastructureError as exc:
        return None, f"{turn_id}: cannot be read: {exc}"


@command(
    "watch",
    "follow a turn live: everything so far once, then new events as they land",
    TURN,
    arg("--no-follow", action="store_true", help="print what is there and exit"),
    arg("--json", action="store_true", help="JSON lines: each event, then the outcome"),
    arg(
        "--surface",
        action="store_true",
        help="JSON lines in the seed-001 surface event format (docs/surface.md)",
    ),
    NO_WORKER,
)
def watch(args: argparse.Namespace) -> int:
    import asyncio

    from turncore.reducer import reduce_turn

    async def body() -> int:
        from turnclient.cli.render import (
            StreamRenderer,
            outcome_block,
            outcome_json,
            running_tools_note,
            wants_color,
        )
        from turncore.advance import outcome_of
        from turncore.surface import SurfaceProjector, encode_line

        turn_id = resolve_turn_id(args.turn)
        following(turn_id)
        runtime = open_runtime()
        repo = runtime.repository
        try:
            events = await asyncio.to_thread(repo.read, turn_id)
        except TurnNotFoundError:
            raise Failure(f"no turn {turn_id} in {runtime.work_dir}", EXIT_USAGE) from None
        projector = SurfaceProjector() if args.surface else None
        machine = args.json or projector is not None
        renderer = None if machine else StreamRenderer(sys.stdout, color=wants_color(sys.stdout))

        def show(event: Any) -> None:
            if projector is not None:
                for s in projector.feed(event):
                    sys.stdout.buffer.write(encode_line(s))
                sys.stdout.flush()
            elif renderer is not None:
                renderer.feed(event)
            else:
                sys.stdout.write(orjson.dumps(event.to_wire()).decode() + "\n")
                sys.stdout.flush()

        for e in events:
            show(e)
        state = reduce_turn(events)
        if state.terminal is None and not args.no_follow:
            note = running_tools_note(state)
            if renderer is not None and note is not None:
                renderer.close()
                print(note, flush=True)
            state = await _tail(args, runtime, turn_id, len(events), show)
        if renderer is not None:
            renderer.close()
        outcome = outcome_of(state)
        if projector is not None:  # turn_completed already marked the settle point
            return EXIT_OK if outcome is None else EXIT_CODES[outcome.status]
        if outcome is None:
            if args.json:
                sys.stdout.write(
                    orjson.dumps({"turnId": turn_id, "status": "in-progress"}).decode() + "\n"
                )
            else:
                print(f"… in progress (no settle point recorded yet) · turn {turn_id}")
            return EXIT_OK
        if args.json:
            sys.stdout.write(orjson.dumps(outcome_json(turn_id, outcome)).decode() + "\n")
        else:
            shown = renderer.failures if renderer is not None else ()
            print("\n".join(outcome_block(turn_id, outcome, shown=shown)))
        return EXIT_CODES[outcome.status]

    return run_async(args, body)


async def _tail(
    args: argparse.Namespace,
    runtime: Runtime,
    turn_id: str,
    offset: int,
    show: Callable[[Any], None],
) -> TurnState:
    """Follow the file from line ``offset``, and the live deltas of whichever process on
    this host runs the turn's model calls, until the turn ends."""
    import asyncio

    from turnclient.lib.deltaspool import spool_dir
    from turnclient.lib.follow import Durable, Live, Settled, follow_turn
    from turnclient.lib.stuck import unless_stuck
    from turnclient.runtime.connection import ConnectOptions, temporal
    from turncore.reducer import reduce_turn
    from turncore_temporal.worker import serving

    async def pump() -> None:
        stream = follow_turn(
            runtime.repository,
            spool_dir(runtime.work_dir),
            turn_id,
            after=offset,
            until="terminal",
            deltas=runtime.delta_reader(turn_id),
        )
        async for item in stream:
            match item:
                case Durable(event=event):
                    show(event)
                case Live(delta=delta):
                    show(delta)
                case Settled():
                    pass

    async with contextlib.AsyncExitStack() as stack:
        if args.no_worker:
            # The workers run elsewhere; a server that is up still says if the run is stuck.
            client = await _running_server()
            await (pump() if client is None else unless_stuck(client, turn_id, pump()))
        else:
            options = ConnectOptions.for_config(runtime.config)
            conn = await stack.enter_async_context(temporal(runtime.work_dir, options=options))
            await stack.enter_async_context(serving(runtime, conn.client))
            # A stuck run never reaches its end: say so instead of waiting forever.
            await unless_stuck(conn.client, turn_id, pump())
    return reduce_turn(await asyncio.to_thread(runtime.repository.read, turn_id))


@command(
    "list",
    "list turns, newest first: created, status, agent, the prompt's first words",
    arg("--status", choices=["running", "suspended", "completed", "failed", "cancelled"]),
    arg("--agent", metavar="A"),
    arg("--session", metavar="S", help="only this session's last turns, oldest first (its order)"),
    arg("--limit", type=positive, default=50, metavar="N", help="at most N turns (default 50)"),
    JSON,
)
def list_turns(args: argparse.Namespace) -> int:
    async def body() -> int:
        from turnclient.lib.listing import latest_turns
        from turnclient.lib.summary import clip
        from turnclient.runtime.connection import temporal

        async with temporal(current_work_dir()) as conn:
            listed = await latest_turns(
                conn.client,
                status=args.status,
                agent=args.agent,
                session=args.session,
                limit=args.limit,
            )
        rows = [
            {"turnId": r.turn_id, "created": _created(r.turn_id), **r.to_wire()} for r in listed
        ]
        if args.json:
            emit_json(rows)
            return EXIT_OK
        if not rows:
            print("no turns match")
            return EXIT_OK
        for r in rows:
            pending = f" · waiting: {', '.join(r['pendingInputs'])}" if r["pendingInputs"] else ""
            if r["status"] in ("running", "suspended") and r["workflowStatus"] != "running":
                # The run ended without settling the turn (its environment could not
                # advance it); the file is intact and `turns recover` starts a new run.
                pending += (
                    f" · workflow {r['workflowStatus']}: {command_line('recover', r['turnId'])}"
                )
            if r["stuck"]:
                pending += f" · STUCK ({r['stuck']}): {command_line('recover', r['turnId'])}"
            words = clip(" ".join(str(r["input"] or "").split()), 48)
            print(
                f"{r['turnId']}  {r['created']}  {r['status'] or '?':<9}  "
                f"{r['agent'] or '?':<10}  {words}{pending}"
            )
        return EXIT_OK

    return run_async(args, body)


@command(
    "replay",
    "pre-deploy check: replay open turns' histories against this code; exit 1 naming each "
    "turn that does not replay",
    arg("turns", nargs="*", metavar="TURN", help="these turns (default: every open turn)"),
    arg("--sample", type=positive, metavar="N", help="at most N open turns, picked at random"),
    JSON,
)
def replay(args: argparse.Namespace) -> int:
    async def body() -> int:
        from turnclient.cli.replaycheck import open_turn_ids, replay_turns, sample
        from turnclient.runtime.connection import ConnectOptions, temporal

        runtime = open_runtime()
        options = ConnectOptions.for_config(runtime.config)
        async with temporal(runtime.work_dir, options=options) as conn:
            if args.turns:
                ids = [resolve_turn_id(t) for t in args.turns]
            else:
                ids = await open_turn_ids(conn.client, runtime.task_queue)
            ids = sample(ids, args.sample)
            results = await replay_turns(conn.client, ids)
        bad = [r for r in results if not r.ok]
        if args.json:
            emit_json(
                {
                    "replayed": len(results),
                    "incompatible": [{"turnId": r.turn_id, "failure": r.failure} for r in bad],
                }
            )
        else:
            for r in bad:
                print(f"{r.turn_id}: does not replay: {r.failure}")
            plural = "s" if len(results) != 1 else ""
            if bad:
                print(
                    f"{len(bad)} of {len(results)} turn{plural} do not replay against this "
                    "code: deploying it makes them stuck (put the change behind "
                    "workflow.patched, or rebuild them after the deploy with "
                    "turns recover --all-stuck)"
                )
            else:
                print(f"all {len(results)} turn{plural} replay against this code")
        return EXIT_PROBLEM if bad else EXIT_OK

    return run_async(args, body)


def _created(turn_id: str) -> str:
    """``2026-05-04T15-09-26Z-…`` → ``2026-05-04 15:09:26Z``."""
    day, _, clock = turn_id[:20].partition("T")
    return f"{day} {clock[:8].replace('-', ':')}Z"
