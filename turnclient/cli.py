"""The ``turns`` command line.

Every command is one function, registered with ``@command``: its name, a
one-line help, and the arguments it takes (``arg(...)``, the arguments of
``ArgumentParser.add_argument``). ``main`` builds one argparse subparser per
registered command and calls the function with the parsed namespace; the
function returns the exit code. Adding a command is writing one decorated
function; a command that talks to Temporal imports the client inside itself,
so file-only commands (``validate``, ``state``, ``show``, ``log``,
``inspect``, ``repair``) never pay for it and never start a server.

Commands that need Temporal connect through ``turnclient.runtime.temporal``:
``TEMPORAL_ADDRESS`` when it is set, otherwise the work dir's embedded dev
server (started, shared or reused; stopped by the last command using it).
Commands that advance a turn also run a worker in this process unless
``--no-worker`` says workers run elsewhere; their model calls then stream
text deltas straight to the terminal.

Exit codes (also in ``turns --help``): 0 completed, or success for commands
that do not settle a turn (``turns progress``: the progress was accepted);
1 an infrastructure or configuration problem (a corrupt or unreadable turn
file, no server, a broken turns.toml, a dependency the turn needs is
missing); 2 bad arguments or usage; 3 the turn is suspended; 4 the turn
failed; 5 the turn was cancelled; 6 the input was rejected (nothing
changed). Every failure prints one line on stderr. With ``--json`` stdout
carries exactly one JSON document (JSON lines for ``turns watch``), also
for failures: ``{"status": "error" | "rejected", "error", "exitCode"}``.

File commands read through ``turncore.repository``, the same strict reader
the runtime uses: every line is parsed and validated and the whole log
reduced, so a file ``turns validate`` accepts is one the runtime can load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from turncore.errors import (
    CorruptTurnError,
    InfrastructureError,
    InvalidInputError,
    RejectedInputError,
    TurnError,
    TurnNotFoundError,
)
from turncore.events import TurnEvent
from turncore.ids import is_turn_id, turn_path, validate_turn_id
from turncore.reducer import TurnState, reduce_turn
from turncore.repository import read_path

from .summary import summarize

if TYPE_CHECKING:
    from turncore.events import TurnExternalInput, TurnOutcome

    from .api import TurnClient
    from .render import StreamRenderer
    from .runtime import Runtime, Temporal

PROG = "turns"

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2
EXIT_SUSPENDED = 3
EXIT_FAILED = 4
EXIT_CANCELLED = 5
EXIT_REJECTED = 6

EPILOG = """\
exit codes:
  0  completed (commands that do not settle a turn: success;
     `turns progress`: the progress was accepted)
  1  infrastructure or configuration problem (corrupt turn file, no server,
     bad turns.toml, a dependency the turn needs is missing)
  2  bad arguments or usage (also: no such turn)
  3  the turn is suspended: it waits for an approval or an async result
  4  the turn failed
  5  the turn was cancelled
  6  the input was rejected; nothing changed

environment:
  TURNS_HOME        the work dir: turns.toml, storage/, temporal/ (default ./.turns)
  TEMPORAL_ADDRESS  use this Temporal server instead of the embedded one; also
                    TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_* as usual
  TURNS_TASK_QUEUE  the task queue (default turns, or task_queue in turns.toml)

With --json, stdout carries one JSON document (JSON lines for `watch`); a
failure is {"status": "error"|"rejected", "error": ..., "exitCode": ...}.
"""

# ---------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Arg:
    """One ``add_argument`` call."""

    flags: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


def arg(*flags: str, **options: Any) -> Arg:
    return Arg(flags, options)


Run = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    args: tuple[Arg, ...]
    run: Run


COMMANDS: dict[str, Command] = {}
"""Every registered command by name, in registration order (the order of ``--help``)."""


def command(name: str, help: str, *args: Arg) -> Callable[[Run], Run]:
    """Register the decorated function as ``turns NAME``."""

    def register(run: Run) -> Run:
        if name in COMMANDS:
            raise ValueError(f"command {name!r} is registered twice")
        COMMANDS[name] = Command(name, help, args, run)
        return run

    return register


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run, answer and inspect durable agent turns.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for c in COMMANDS.values():
        p = sub.add_parser(c.name, help=c.help, description=c.help)
        for a in c.args:
            p.add_argument(*a.flags, **a.options)
        p.set_defaults(run=c.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(errors="replace")  # type: ignore[union-attr]
        sys.stderr.reconfigure(errors="replace")  # type: ignore[union-attr]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already reported
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    run: Run | None = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return run(args)


# ---------------------------------------------------------------- failures


class Failure(Exception):
    """A command ends early: a one-line reason and an exit code."""

    def __init__(self, message: str, code: int = EXIT_PROBLEM, *, turn_id: str | None = None):
        super().__init__(message)
        self.code = code
        self.turn_id = turn_id


def _one_line(text: str) -> str:
    return " ".join(str(text).split()) or "unknown error"


def _classify(exc: BaseException) -> tuple[int, str]:
    from temporalio.service import RPCError

    from .embedded import EmbeddedServerError

    if isinstance(exc, Failure):
        return exc.code, str(exc)
    if isinstance(exc, RejectedInputError):
        return EXIT_REJECTED, f"rejected: {exc}"
    if isinstance(exc, (InvalidInputError, TurnNotFoundError)):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, (TurnError, EmbeddedServerError, OSError)):
        return EXIT_PROBLEM, str(exc)
    if isinstance(exc, RPCError):
        return EXIT_PROBLEM, f"Temporal: {exc.message or exc}"
    return EXIT_PROBLEM, f"unexpected {type(exc).__name__}: {exc}"


def _report(
    args: argparse.Namespace,
    code: int,
    message: str,
    turn_id: str | None = None,
    *,
    status: str | None = None,
) -> int:
    message = _one_line(message)
    print(message, file=sys.stderr, flush=True)
    if getattr(args, "json", False):
        doc: dict[str, Any] = {
            "status": status or ("rejected" if code == EXIT_REJECTED else "error"),
            "error": message,
            "exitCode": code,
        }
        turn = turn_id or getattr(args, "turn", None)
        if isinstance(turn, str) and is_turn_id(turn):
            doc["turnId"] = turn
        _emit_json(doc)
    return code


def _emit_json(doc: Any) -> None:
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    sys.stdout.flush()


def _quiet_logging() -> None:
    level = os.environ.get("TURNS_LOG_LEVEL", "ERROR").upper()
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


class _Interrupts:
    """What SIGINT, SIGTERM and SIGHUP mean to a command: detach, never cancel.

    The first signal stops the command and leaves every turn exactly as it
    is — durable, resumable with ``turns recover``, cancellable with ``turns
    cancel`` (the ``temporal`` CLI's Ctrl-C detaches the same way). Cleanup
    (this process's worker, its share of the embedded server) runs, but the
    process exits within ``HARD_EXIT`` seconds of the last signal whatever
    cleanup still waits for — a tool running in a worker thread cannot be
    interrupted — and a second signal exits at once. A hard exit is safe:
    the kernel drops this process's file locks, the embedded server's
    watchdog stops the server once idle, and the turn's workflow resumes on
    the next worker from its file.
    """

    HARD_EXIT = 1.5
    CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.turn_id: str | None = None
        self.received: signal.Signals | None = None
        self._reported = threading.Lock()
        self._done = False

    def install(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[int]) -> None:
        for sig in self.CODES:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._on_signal, sig, task)

    def uninstall(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in self.CODES:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
            if self.received is not None:
                # Past the loop, a further signal still means "leave now",
                # never a KeyboardInterrupt in the interpreter's shutdown.
                with contextlib.suppress(ValueError):
                    signal.signal(sig, lambda *_: self.hard_exit())

    def _on_signal(self, sig: signal.Signals, task: asyncio.Task[int]) -> None:
        if self.received is not None:
            self.hard_exit()
        self.received = sig
        task.cancel()
        timer = threading.Timer(self.HARD_EXIT, self.hard_exit)
        timer.daemon = True
        timer.start()

    @property
    def code(self) -> int:
        return self.CODES.get(self.received or signal.SIGINT, 130)

    def report(self) -> int:
        """Say once what was left where, and how to go on; returns the exit code."""
        with self._reported:
            if self._done:
                return self.code
            self._done = True
        name = signal.Signals(self.received or signal.SIGINT).name
        turn = self.turn_id
        if turn is None:
            message = f"{name}: stopped"
        else:
            message = (
                f"{name}: detached; turn {turn} is left as it is. "
                f"Resume it with `{PROG} recover {turn}`, follow it with `{PROG} watch {turn}`, "
                f"or cancel it with `{PROG} cancel {turn}`"
            )
        with contextlib.suppress(Exception):
            _report(self.args, self.code, message, turn, status="detached")
        return self.code

    def hard_exit(self) -> None:
        code = self.report()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


_INTERRUPTS: _Interrupts | None = None


def _following(turn_id: str) -> None:
    """Name the turn this command works on, for the message a signal prints."""
    if _INTERRUPTS is not None:
        _INTERRUPTS.turn_id = turn_id


def _run_async(args: argparse.Namespace, body: Callable[[], Awaitable[int]]) -> int:
    """Run an async command: errors become one line and an exit code; signals detach."""
    global _INTERRUPTS
    _quiet_logging()
    interrupts = _INTERRUPTS = _Interrupts(args)

    async def guarded() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        interrupts.install(loop, task)  # type: ignore[arg-type]
        try:
            return await body()
        finally:
            interrupts.uninstall(loop)

    try:
        code = asyncio.run(guarded())
    except (KeyboardInterrupt, asyncio.CancelledError):
        code = interrupts.report()
    except Exception as exc:
        if interrupts.received is None:
            code, message = _classify(exc)
            return _report(args, code, message, getattr(exc, "turn_id", None))
        code = interrupts.report()  # cleanup after a signal failed: still a detach
    finally:
        _INTERRUPTS = None
    if interrupts.received is not None:
        # Do not wait for worker threads (a tool may run for minutes): what
        # they do is recovered from the file by the next worker.
        interrupts.hard_exit()
    return code


def _sync(args: argparse.Namespace, body: Callable[[], int]) -> int:
    try:
        return body()
    except Exception as exc:
        code, message = _classify(exc)
        return _report(args, code, message)


# ---------------------------------------------------------------- shared arguments

JSON = arg("--json", action="store_true", help="print JSON for machines")
NO_WORKER = arg(
    "--no-worker",
    action="store_true",
    help="do not run a worker in this process (workers run elsewhere)",
)
TURN = arg("turn", metavar="TURN", help="a turn id")
CALL = arg("call", metavar="CALL", help="a tool call id (see `turns show TURN`)")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _json_value(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not JSON (a string needs quotes: '\"text\"')"
        ) from None


# ---------------------------------------------------------------- file helpers


def _work_dir() -> Path:
    from .config import work_dir_from_env

    return work_dir_from_env()


def _turn_files(path: str) -> Iterator[str]:
    """``path`` itself, or every ``*.jsonl`` under it if it is a directory (sorted)."""
    if os.path.isdir(path):
        for found in sorted(Path(path).rglob("*.jsonl")):
            yield str(found)
    else:
        yield path


def _read(path: str) -> tuple[list[TurnEvent] | None, str | None]:
    """The file's events, or the one-line problem ``PATH:LINE: rule`` / ``PATH: reason``."""
    try:
        return read_path(path), None
    except CorruptTurnError as exc:
        return None, f"{path}:{exc.line if exc.line is not None else 1}: {exc.rule}"
    except TurnNotFoundError:
        return None, f"{path}: no such file"
    except InfrastructureError as exc:
        return None, f"{path}: cannot be read: {exc.__cause__ or exc}"


def _path_of(given: str) -> Path:
    """A turn id in the work dir, or a path to a turn file."""
    if is_turn_id(given):
        return turn_path(_work_dir(), given)
    if given.endswith(".jsonl") or os.sep in given:
        return Path(given)
    validate_turn_id(given)  # raises: neither a turn id nor a path
    raise AssertionError


def _load(given: str) -> tuple[str, list[TurnEvent]]:
    """(the path as shown, its events) or a Failure with the one-line problem."""
    path = str(_path_of(given))
    events, problem = _read(path)
    if events is None:
        missing = problem is not None and problem.endswith("no such file")
        if missing and is_turn_id(given):
            raise Failure(f"no turn {given} in {_work_dir()}", EXIT_USAGE)
        raise Failure(problem or path, EXIT_USAGE if missing else EXIT_PROBLEM)
    return path, events


def _runtime() -> Runtime:
    from .runtime import Runtime

    return Runtime.from_work_dir()


# ---------------------------------------------------------------- file commands


@command(
    "validate",
    "check turn files; print PATH:LINE: rule for each invalid one",
    arg("paths", nargs="+", metavar="PATH", help="a turn file, or a directory of them"),
    arg("--json", action="store_true", help='{"valid": [PATH…], "invalid": [{path, problem}…]}'),
)
def validate(args: argparse.Namespace) -> int:
    valid: list[str] = []
    invalid: list[dict[str, str]] = []
    for given in args.paths:
        for path in _turn_files(given):
            _, problem = _read(path)
            if problem is None:
                valid.append(path)
                continue
            invalid.append({"path": path, "problem": problem})
            if not args.json:
                print(problem)
    if args.json:
        _emit_json({"valid": valid, "invalid": invalid})
    return 1 if invalid else 0


@command(
    "state",
    "print the state a turn reduces to (from its file)",
    arg("path", metavar="TURN|PATH", help="a turn id, or the path of a turn file"),
    arg("--json", action="store_true", help="the TurnState as JSON (spec §14.2 names)"),
)
def state(args: argparse.Namespace) -> int:
    def body() -> int:
        if is_turn_id(args.path):
            _, events = _load(args.path)
        else:
            found, problem = _read(args.path)
            if found is None:
                raise Failure(problem or args.path)
            events = found
        reduced = reduce_turn(events)
        if args.json:
            _emit_json(reduced.to_wire())
        else:
            print(summarize(reduced))
        return EXIT_OK

    return _sync(args, body)


@command(
    "show",
    "show a turn: messages, tool calls with permissions, progress and results, usage, outcome",
    TURN,
    JSON,
)
def show(args: argparse.Namespace) -> int:
    from .render import status_of, transcript

    def body() -> int:
        _, events = _load(args.turn)
        reduced = reduce_turn(events)
        if args.json:
            _emit_json(
                {
                    "turnId": reduced.definition.turn_id,
                    "status": status_of(reduced),
                    "state": reduced.to_wire(),
                }
            )
        else:
            print(transcript(reduced))
        return EXIT_OK

    return _sync(args, body)


@command(
    "log",
    "print a turn's raw JSONL file",
    arg("turn", metavar="TURN|PATH", help="a turn id, or the path of a turn file"),
    arg("--json", action="store_true", help="a JSON array of the lines' objects instead"),
)
def log(args: argparse.Namespace) -> int:
    def body() -> int:
        path = _path_of(args.turn)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise Failure(f"no turn file at {path}", EXIT_USAGE) from None
        if args.json:
            try:
                _emit_json([orjson.loads(line) for line in data.splitlines() if line.strip()])
            except orjson.JSONDecodeError as exc:
                raise Failure(f"{path}: a line is not JSON ({exc}); use `turns validate`") from None
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return EXIT_OK

    return _sync(args, body)


@command(
    "inspect",
    "print the exact composed model request of a model call (default: the last one)",
    TURN,
    arg("--call", type=int, metavar="N", help="the model call index (0 is the first)"),
    JSON,
)
def inspect(args: argparse.Namespace) -> int:
    from turncore.compose import compose_model_request
    from turncore.context import ContextResolver, ElisionPolicy
    from turncore.reducer import TurnReducer
    from turncore.repository import FileTurnRepository

    from .config import ConfigError, load_config

    def body() -> int:
        _, events = _load(args.turn)
        reduced = reduce_turn(events)
        if not reduced.model_calls:
            raise Failure(f"turn {args.turn} has made no model call yet", EXIT_USAGE)
        index = args.call if args.call is not None else len(reduced.model_calls) - 1
        if not 0 <= index < len(reduced.model_calls):
            raise Failure(
                f"turn {args.turn} has model calls 0..{len(reduced.model_calls) - 1}, not {index}",
                EXIT_USAGE,
            )
        try:
            policy = load_config(_work_dir()).context
        except ConfigError as exc:
            print(f"{PROG}: turns.toml unusable, default elision policy: {exc}", file=sys.stderr)
            policy = ElisionPolicy()
        repo = FileTurnRepository(_work_dir())
        contexts = ContextResolver(lambda t: TurnReducer.of(repo.read(t)).state, policy)
        agent = contexts.resolve_agent(reduced.definition)
        context = contexts.resolve(reduced.definition.context)
        composed = compose_model_request(agent, context, reduced, index)
        if args.json:
            _emit_json(composed.to_wire())
            return EXIT_OK
        _print_request(composed.to_wire(), policy.to_wire())
        return EXIT_OK

    return _sync(args, body)


def _print_request(wire: dict[str, Any], policy: dict[str, Any]) -> None:
    from .render import preview

    effort = f" · reasoningEffort {wire['reasoningEffort']}" if wire.get("reasoningEffort") else ""
    model = wire["model"]
    print(f"model call {wire['modelCallIndex']} · {model['provider']}/{model['model']}{effort}")
    print(f"parameters {orjson.dumps(wire['parameters']).decode()}")
    print(f"elision    {orjson.dumps(policy).decode()} (applies to earlier turns' messages)")
    print("\nsystem")
    print("\n".join("  " + line for line in wire["system"].splitlines()))
    print(f"\ntools ({len(wire['tools'])})")
    for t in wire["tools"]:
        print(f"  {t['name']}: {preview(t['description'], 100)}")
    print(f"\nmessages ({len(wire['messages'])})")
    for m in wire["messages"]:
        print(f"  [{m['role']}] {preview(m['content'], 300)}")
    print("\n(`turns inspect --json` prints the whole request)")


@command(
    "repair",
    "move a torn final line into <file>.broken (refuses any other damage)",
    arg("turn", metavar="TURN|PATH", help="a turn id, or the path of a turn file"),
    JSON,
)
def repair(args: argparse.Namespace) -> int:
    from turncore.repository import RepairRefusedError, repair_torn_tail

    def body() -> int:
        path = _path_of(args.turn)
        try:
            report = repair_torn_tail(path)
        except RepairRefusedError as exc:
            raise Failure(f"not repaired: {exc}") from None
        if args.json:
            _emit_json(
                {
                    "status": "repaired",
                    "path": str(report.path),
                    "sidecar": str(report.sidecar),
                    "line": report.line,
                    "removedBytes": report.removed_bytes,
                    "preview": report.preview(),
                    "keptLines": report.kept_lines,
                }
            )
        else:
            print(
                f"removed {report.removed_bytes} bytes (line {report.line}) from {report.path}\n"
                f"  moved to {report.sidecar}\n"
                f"  they were: {report.preview()}\n"
                f"  {report.kept_lines} valid lines remain; continue with: {PROG} recover "
                f"{report.path.name.removesuffix('.jsonl')}"
            )
        return EXIT_OK

    return _sync(args, body)


# ---------------------------------------------------------------- running turns


@contextlib.asynccontextmanager
async def _session(
    args: argparse.Namespace, runtime: Runtime, *, worker: bool = True
) -> AsyncIterator[tuple[Temporal, TurnClient]]:
    """Connected (embedded or remote), with a worker in this process unless --no-worker."""
    from turncore_temporal.worker import serving

    from .runtime import temporal

    async with temporal(runtime.work_dir) as conn:
        if worker and not getattr(args, "no_worker", False):
            async with serving(runtime, conn.client):
                yield conn, runtime.turn_client(conn.client)
        else:
            yield conn, runtime.turn_client(conn.client)


async def _follow(
    turns: TurnClient,
    turn_id: str,
    input: TurnExternalInput | None,
    renderer: StreamRenderer | None,
) -> TurnOutcome:
    """Advance the turn, rendering its stream, until it settles (a signal detaches)."""
    _following(turn_id)
    execution = turns.advance_turn(turn_id, input)

    async def pump() -> None:
        with contextlib.suppress(Exception):  # the outcome reports any failure
            async for event in execution.events:
                if renderer is not None:
                    renderer.feed(event)

    pumping = asyncio.create_task(pump())
    try:
        outcome = await execution.outcome
    except BaseException:
        pumping.cancel()
        raise
    # The outcome is settled: let the stream print its last durable events.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(pumping, 5.0)
    if renderer is not None:
        renderer.close()
    return outcome


def _finish(
    args: argparse.Namespace, turn_id: str, outcome: TurnOutcome, *, accepted: bool = False
) -> int:
    from .render import EXIT_CODES, outcome_block, outcome_json

    if args.json:
        _emit_json(outcome_json(turn_id, outcome))
    else:
        print("\n".join(outcome_block(turn_id, outcome)), flush=True)
    if accepted:
        return EXIT_OK
    return EXIT_CODES[outcome.status]


@command(
    "run",
    "create a turn and advance it, streaming text, tool calls and approvals",
    arg("prompt", nargs="+", metavar="PROMPT", help="the user's message"),
    arg(
        "--agent", metavar="NAME", help="the agent (default: default_agent of turns.toml, or demo)"
    ),
    arg("--model", metavar="PROVIDER/MODEL", help="override the agent's model"),
    arg("--auto-permission", action="store_true", help="let the classifier decide approvals first"),
    arg("--no-human", action="store_true", help="no human is available: deny what needs one"),
    arg("--max-model-calls", type=_positive, metavar="N", help="limit model calls (default 20)"),
    arg("--session", metavar="ID", help="the session the turn belongs to"),
    JSON,
    NO_WORKER,
)
def run(args: argparse.Namespace) -> int:
    async def body() -> int:
        from turncore.events import AgentOverrides, RequestedAgent
        from turncore.messages import UserMessage

        from .api import CreateTurnInput
        from .render import StreamRenderer

        runtime = _runtime()
        agent_name = args.agent or runtime.config.default_agent
        agent = runtime.config.agents.get(agent_name)
        if agent is None:
            known = ", ".join(sorted(runtime.config.agents))
            raise Failure(f"unknown agent {agent_name!r} (known: {known})", EXIT_USAGE)
        try:
            model = runtime.model_for(agent_name, args.model)
        except InvalidInputError as exc:
            raise Failure(str(exc), EXIT_USAGE) from None
        except TurnError as exc:
            raise Failure(str(exc), EXIT_USAGE) from None
        if model is None:
            raise Failure(
                f"agent {agent_name!r} names no model: pass --model PROVIDER/MODEL or set "
                "default_model in turns.toml"
            )
        runtime.models.resolve(model)  # a missing key or provider fails before any file exists
        request = CreateTurnInput(
            agent=RequestedAgent(
                agent_id=agent_name,
                overrides=AgentOverrides(model=model) if args.model else None,
            ),
            input=UserMessage(content=" ".join(args.prompt)),
            human_available=not args.no_human,
            auto_permission=args.auto_permission,
            session_id=args.session,
            reasoning_effort=agent.reasoning_effort,
            **({"max_model_calls": args.max_model_calls} if args.max_model_calls else {}),
        )
        async with _session(args, runtime) as (_, turns):
            turn_id = await turns.create_turn(request)
            renderer = None
            if not args.json:
                print(f"turn {turn_id} · agent {agent_name} · model {model.label()}", flush=True)
                renderer = StreamRenderer(sys.stdout, model=model.label())
            outcome = await _follow(turns, turn_id, None, renderer)
            return _finish(args, turn_id, outcome)

    return _run_async(args, body)


def _send(
    args: argparse.Namespace,
    make_input: Callable[[], TurnExternalInput],
    *,
    accepted_ok: bool = False,
) -> int:
    async def body() -> int:
        from turncore.advance import check_input

        from .render import StreamRenderer

        turn_id = validate_turn_id(args.turn)
        input = make_input()
        # Rejected from the file before any runtime is built or server started;
        # the workflow checks again, atomically, when the input arrives.
        _, events = _load(turn_id)
        before = reduce_turn(events)
        check_input(before, input)
        runtime = _runtime()
        async with _session(args, runtime) as (_, turns):
            renderer = None
            if not args.json:
                renderer = StreamRenderer(sys.stdout)
                renderer.prime(before)
            outcome = await _follow(turns, turn_id, input, renderer)
            return _finish(
                args, turn_id, outcome, accepted=accepted_ok and outcome.status == "suspended"
            )

    return _run_async(args, body)


@command(
    "approve",
    "allow a tool call that awaits approval, then continue the turn",
    TURN,
    CALL,
    JSON,
    NO_WORKER,
)
def approve(args: argparse.Namespace) -> int:
    from turncore.events import PermissionDecisionInput

    return _send(args, lambda: PermissionDecisionInput(tool_call_id=args.call, decision="allow"))


@command(
    "deny",
    "deny a tool call that awaits approval, then continue the turn",
    TURN,
    CALL,
    arg("--reason", metavar="R", help="why (recorded and shown to the model)"),
    JSON,
    NO_WORKER,
)
def deny(args: argparse.Namespace) -> int:
    from turncore.events import PermissionDecisionInput

    def make() -> PermissionDecisionInput:
        metadata = {"reason": args.reason} if args.reason else None
        return PermissionDecisionInput(tool_call_id=args.call, decision="deny", metadata=metadata)

    return _send(args, make)


@command(
    "complete",
    "supply the result of an async tool call (such as ask_human), then continue the turn",
    TURN,
    CALL,
    arg("--output", type=_json_value, metavar="JSON", help="the result, as JSON"),
    arg("--text", metavar="TEXT", help="the result, as a plain string"),
    arg("--error", action="store_true", help="the tool failed; the output describes how"),
    JSON,
    NO_WORKER,
)
def complete(args: argparse.Namespace) -> int:
    from turncore.events import AsyncToolResultInput, ToolResultData

    if (args.output is None) == (args.text is None):
        return _report(
            args, EXIT_USAGE, "give the result with exactly one of --output JSON or --text TEXT"
        )

    def make() -> AsyncToolResultInput:
        output = args.text if args.text is not None else args.output
        return AsyncToolResultInput(
            tool_call_id=args.call, result=ToolResultData(output=output, is_error=args.error)
        )

    return _send(args, make)


@command(
    "progress",
    "record progress of an async tool call (the turn stays suspended; exit 0 when accepted)",
    TURN,
    CALL,
    arg("--data", type=_json_value, required=True, metavar="JSON", help="the progress, as JSON"),
    JSON,
    NO_WORKER,
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
)
def cancel(args: argparse.Namespace) -> int:
    from turncore.events import CancelInput

    return _send(args, lambda: CancelInput(reason=args.reason))


@command(
    "recover",
    "serve a turn until it settles; start its workflow from the file if none runs",
    TURN,
    JSON,
    NO_WORKER,
)
def recover(args: argparse.Namespace) -> int:
    async def body() -> int:
        from .render import StreamRenderer

        turn_id = validate_turn_id(args.turn)
        runtime = _runtime()
        if not runtime.repository.exists(turn_id):
            raise Failure(f"no turn {turn_id} in {runtime.work_dir}", EXIT_USAGE)
        async with _session(args, runtime) as (_, turns):
            renderer = None
            if not args.json:
                renderer = StreamRenderer(sys.stdout)
                renderer.prime(
                    reduce_turn(await asyncio.to_thread(runtime.repository.read, turn_id))
                )
            outcome = await _follow(turns, turn_id, None, renderer)
            return _finish(args, turn_id, outcome)

    return _run_async(args, body)


@command(
    "watch",
    "follow a turn live: everything so far once, then new events as they land",
    TURN,
    arg("--no-follow", action="store_true", help="print what is there and exit"),
    arg("--json", action="store_true", help="JSON lines: each event, then the outcome"),
    NO_WORKER,
)
def watch(args: argparse.Namespace) -> int:
    async def body() -> int:
        from turncore.advance import outcome_of

        from .render import EXIT_CODES, StreamRenderer, outcome_block, outcome_json

        turn_id = validate_turn_id(args.turn)
        _following(turn_id)
        runtime = _runtime()
        repo = runtime.repository
        try:
            events = await asyncio.to_thread(repo.read, turn_id)
        except TurnNotFoundError:
            raise Failure(f"no turn {turn_id} in {runtime.work_dir}", EXIT_USAGE) from None
        renderer = None if args.json else StreamRenderer(sys.stdout)

        def show(event: Any) -> None:
            if renderer is not None:
                renderer.feed(event)
            else:
                sys.stdout.write(orjson.dumps(event.to_wire()).decode() + "\n")
                sys.stdout.flush()

        for e in events:
            show(e)
        state = reduce_turn(events)
        if state.terminal is None and not args.no_follow:
            state = await _tail(args, runtime, turn_id, len(events), show)
        if renderer is not None:
            renderer.close()
        outcome = outcome_of(state)
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
            print("\n".join(outcome_block(turn_id, outcome)))
        return EXIT_CODES[outcome.status]

    return _run_async(args, body)


async def _tail(
    args: argparse.Namespace,
    runtime: Runtime,
    turn_id: str,
    offset: int,
    show: Callable[[Any], None],
) -> TurnState:
    """Follow the file from line ``offset`` (and this process's deltas) until the turn ends."""
    from turncore_temporal.worker import serving

    from .runtime import temporal

    repo = runtime.repository
    hub = runtime.hub
    async with contextlib.AsyncExitStack() as stack:
        if not args.no_worker:
            conn = await stack.enter_async_context(temporal(runtime.work_dir))
            await stack.enter_async_context(serving(runtime, conn.client))
        deltas = hub.attach(turn_id)
        stack.callback(hub.detach, turn_id, deltas)
        while True:
            while not deltas.empty():
                show(deltas.get_nowait())
            new = await asyncio.to_thread(repo.read_after, turn_id, offset)
            for e in new:
                show(e)
            offset += len(new)
            if any(e.type in ("turn_completed", "turn_failed", "turn_cancelled") for e in new):
                break
            await asyncio.sleep(0.1)
    return reduce_turn(await asyncio.to_thread(repo.read, turn_id))


@command(
    "list",
    "list turns from Temporal visibility (search attributes)",
    arg("--status", choices=["running", "suspended", "completed", "failed", "cancelled"]),
    arg("--agent", metavar="A"),
    arg("--limit", type=_positive, default=50, metavar="N", help="at most N turns (default 50)"),
    JSON,
)
def list_turns(args: argparse.Namespace) -> int:
    async def body() -> int:
        from temporalio.common import SearchAttributeKey

        from .runtime import temporal

        # A run that continued as new hands the turn to its successor: list only the latest.
        clauses = ["WorkflowType = 'Turn'", "ExecutionStatus != 'ContinuedAsNew'"]
        if args.status:
            clauses.append(f"TurnStatus = '{args.status}'")
        if args.agent:
            clauses.append(f"TurnAgent = '{_quote(args.agent)}'")
        query = " AND ".join(clauses)
        keys = {
            name: SearchAttributeKey.for_keyword(name)
            for name in ("TurnStatus", "TurnAgent", "TurnModel", "TurnSession", "TurnPendingInputs")
        }
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        async with temporal(_work_dir()) as conn:
            async for wf in conn.client.list_workflows(query, limit=args.limit * 4):
                if wf.id in seen:
                    continue  # a later run of the same turn came first
                seen.add(wf.id)
                attrs = wf.typed_search_attributes
                row = {
                    "turnId": wf.id,
                    "status": attrs.get(keys["TurnStatus"]),
                    "agent": attrs.get(keys["TurnAgent"]),
                    "model": attrs.get(keys["TurnModel"]),
                    "session": attrs.get(keys["TurnSession"]),
                    "pendingInputs": [
                        p for p in (attrs.get(keys["TurnPendingInputs"]) or "").split(",") if p
                    ],
                    "workflowStatus": wf.status.name.lower() if wf.status is not None else None,
                    "startTime": wf.start_time.isoformat() if wf.start_time else None,
                }
                rows.append(row)
                if len(rows) >= args.limit:
                    break
        if args.json:
            _emit_json(rows)
            return EXIT_OK
        if not rows:
            print(f"no turns match ({query})")
            return EXIT_OK
        for r in rows:
            pending = f" · waiting: {', '.join(r['pendingInputs'])}" if r["pendingInputs"] else ""
            if r["status"] in ("running", "suspended") and r["workflowStatus"] != "running":
                # The run ended without settling the turn (its environment could not
                # advance it); the file is intact and `turns recover` starts a new run.
                pending += f" · workflow {r['workflowStatus']}: turns recover {r['turnId']}"
            print(
                f"{r['turnId']}  {r['status'] or '?':<9}  {r['agent'] or '?'} · {r['model'] or '?'}{pending}"
            )
        return EXIT_OK

    return _run_async(args, body)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


# ---------------------------------------------------------------- serving


@command(
    "dev",
    "run the embedded dev server with Temporal Web and a worker in the foreground",
    arg(
        "--ui-port",
        type=int,
        default=8233,
        metavar="PORT",
        help="Temporal Web port (default 8233, or a free one)",
    ),
    arg("--no-worker", action="store_true", help="serve Temporal only; workers run elsewhere"),
    JSON,
)
def dev(args: argparse.Namespace) -> int:
    from .runtime import uses_embedded

    if not uses_embedded():
        return _report(
            args,
            EXIT_USAGE,
            "turns dev runs the embedded server, but TEMPORAL_ADDRESS is set; "
            "use `turns worker` to serve that server",
        )
    return _serve(args, ui=True, worker=not args.no_worker)


@command(
    "worker", "run a worker in the foreground (TEMPORAL_ADDRESS, or the embedded server)", JSON
)
def worker(args: argparse.Namespace) -> int:
    return _serve(args, ui=False, worker=True)


def _serve(args: argparse.Namespace, *, ui: bool, worker: bool) -> int:
    async def body() -> int:
        from turncore_temporal.worker import run_worker

        runtime = _runtime()

        def ready(conn: Temporal) -> None:
            info = {
                "address": conn.address,
                "namespace": conn.namespace,
                "uiUrl": conn.ui_url,
                "taskQueue": runtime.task_queue,
                "workDir": str(runtime.work_dir),
                "worker": worker,
                "embedded": conn.server is not None,
            }
            if args.json:
                _emit_json(info)
                return
            print(f"Temporal      {conn.address} (namespace {conn.namespace})")
            if conn.server is not None:
                print(f"database      {conn.server.db}")
                for note in conn.server.notes:
                    print(f"              {note}")
            if ui:
                print(f"Temporal Web  {conn.ui_url or 'off (a headless server is in use)'}")
            if worker:
                print(f"worker        task queue {runtime.task_queue}, work dir {runtime.work_dir}")
            print("Ctrl-C to stop.", flush=True)

        await run_worker(
            runtime,
            on_ready=ready,
            ui=ui,
            ui_port=getattr(args, "ui_port", None),
            worker=worker,
        )
        return EXIT_OK

    return _run_async(args, body)


@command("config", "show the effective configuration: agents, tools, providers, Temporal", JSON)
def config(args: argparse.Namespace) -> int:
    def body() -> int:
        from .config import load_config
        from .runtime import uses_embedded

        cfg = load_config(_work_dir())
        doc = {
            "workDir": str(cfg.work_dir),
            "configFile": str(cfg.source) if cfg.source else None,
            "workspace": str(cfg.workspace),
            "taskQueue": cfg.task_queue,
            "temporal": "embedded" if uses_embedded() else os.environ.get("TEMPORAL_ADDRESS"),
            "defaultAgent": cfg.default_agent,
            "defaultModel": cfg.default_model,
            "agents": {
                n: {"model": a.model, "tools": list(a.tools), "reasoningEffort": a.reasoning_effort}
                for n, a in cfg.agents.items()
            },
            "tools": {
                n: {
                    "toolId": t.tool_id,
                    "execution": t.execution,
                    "permission": t.permission,
                    "requiresHuman": t.requires_human,
                }
                for n, t in cfg.tools.items()
            },
            "providers": {
                n: {
                    "kind": p.kind,
                    "baseUrl": p.base_url,
                    "apiKeyEnv": p.api_key_env,
                    "apiKeySet": bool(p.api_key_env and os.environ.get(p.api_key_env)),
                }
                for n, p in cfg.providers.items()
            },
        }
        if args.json:
            _emit_json(doc)
            return EXIT_OK
        print(f"work dir      {doc['workDir']}")
        print(f"turns.toml    {doc['configFile'] or '(none: built-in defaults)'}")
        print(f"workspace     {doc['workspace']}")
        print(f"temporal      {doc['temporal']} · task queue {doc['taskQueue']}")
        print(f"default agent {doc['defaultAgent']} · default model {doc['defaultModel'] or '-'}")
        print("agents")
        for n, a in cfg.agents.items():
            print(
                f"  {n:<12} {a.model or '(default model)'} · tools: {', '.join(a.tools) or 'none'}"
            )
        print("tools")
        for n, t in cfg.tools.items():
            human = ", needs a human" if t.requires_human else ""
            print(f"  {n:<12} {t.tool_id} · {t.execution} · permission {t.permission}{human}")
        print("providers")
        print("  scripted     built in (demo, or a JSON script file)")
        for n, p in cfg.providers.items():
            key = ""
            if p.api_key_env:
                state = "set" if os.environ.get(p.api_key_env) else "NOT set"
                key = f" · key ${p.api_key_env} {state}"
            print(f"  {n:<12} {p.kind} · {p.base_url or 'default endpoint'}{key}")
        return EXIT_OK

    return _sync(args, body)


if __name__ == "__main__":
    raise SystemExit(main())
