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
import contextlib
import logging
import os
import re
import shlex
import signal
import stat
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import orjson

from turncore.errors import (
    CorruptTurnError,
    InfrastructureError,
    InvalidInputError,
    RejectedInputError,
    TurnError,
    TurnNotFoundError,
)
from turncore.ids import TURN_ID_SHAPE, is_turn_id, turn_path, validate_turn_id

from .terminal import PROG, VisibleText, command_line

# Read-only commands start fast: pydantic models, the reducer and asyncio load
# inside the functions that need them (bench/cli.py measures start-up).
if TYPE_CHECKING:
    import asyncio

    from turncore.events import ModelDescriptor, TurnEvent, TurnExternalInput, TurnOutcome
    from turncore.reducer import TurnState

    from .api import CreateTurnInput, TurnClient
    from .config import Config
    from .conversations import Continuation
    from .render import StreamRenderer
    from .runtime import Runtime, Temporal

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2
EXIT_SUSPENDED = 3
EXIT_FAILED = 4
EXIT_CANCELLED = 5
EXIT_REJECTED = 6
EXIT_UNREACHABLE = 7
EXIT_CODES: dict[str, int] = {
    "completed": EXIT_OK,
    "suspended": EXIT_SUSPENDED,
    "failed": EXIT_FAILED,
    "cancelled": EXIT_CANCELLED,
}
"""A settled outcome's status → the command's exit code."""

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
  7  Temporal cannot be reached (TEMPORAL_ADDRESS does not answer, or the
     embedded server could not start)
  129, 130, 143  detached by SIGHUP, Ctrl-C or SIGTERM: the turn is left as
     it is (resume: `turns recover TURN`)

environment:
  TURNS_HOME        the work dir: turns.toml, storage/, temporal/ (default: the
                    nearest .turns/ here or above, else ./.turns)
  TEMPORAL_ADDRESS  use this Temporal server instead of the embedded one; also
                    TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_* as usual
  TURNS_TASK_QUEUE  the task queue (default turns, or task_queue in turns.toml)
  TURNS_DATABASE_URL  the turn database with [storage] kind = "postgres"

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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("turncore")
    except PackageNotFoundError:
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``, reading the installed metadata only when asked (it costs start-up)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"{PROG} {_version()}")
        parser.exit()


class _UsageError(Exception):
    """argparse found the command line unusable (reported like every other failure)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's hook; it must not return
        raise _UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``turns`` parser; with ``only``, just that command's subparser.

    Building all ~25 subparsers costs about a bare interpreter start (argparse
    looks up translations for every message), so a command line that names a
    known command builds only its own. Anything else (``--help``, a mistyped
    command, whose error lists every choice) gets the whole parser.
    """
    parser = _Parser(
        prog=PROG,
        description="Run, answer and inspect durable agent turns.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action=_VersionAction, nargs=0, help="print the version and exit"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for c in _in_help_order() if only is None else [COMMANDS[only]]:
        p = sub.add_parser(c.name, help=c.help, description=c.help)
        for a in c.args:
            p.add_argument(*a.flags, **a.options)
        p.set_defaults(run=c.run)
    return parser


HELP_ORDER = (
    *("run", "chat", "approve", "deny", "complete", "progress", "cancel", "recover", "watch"),
    *("list", "show", "state", "log", "inspect", "validate", "repair"),
    *("dev", "worker", "ui", "config", "db", "export", "import", "codec-server", "completion"),
)
"""``--help`` lists commands in the order people reach for them: running and
answering turns first, reading them next, operating the runtime last."""


def _in_help_order() -> list[Command]:
    rank = {name: i for i, name in enumerate(HELP_ORDER)}
    return sorted(COMMANDS.values(), key=lambda c: rank.get(c.name, len(rank)))


def _did_you_mean(argv: list[str]) -> str:
    """`` (did you mean `turns run`?)`` for a misspelled command, else nothing."""
    import difflib

    given = next((a for a in argv if not a.startswith("-")), None)
    if given is None or given in COMMANDS:
        return ""
    close = difflib.get_close_matches(given, list(COMMANDS), n=2, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' or '.join(f'`{PROG} {c}`' for c in close)}?)"


def main(argv: list[str] | None = None) -> int:
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(errors="replace")  # type: ignore[union-attr]
        sys.stderr.reconfigure(errors="replace")  # type: ignore[union-attr]
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help or --version
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except _UsageError as exc:
        message = str(exc)
        if "invalid choice" in message:
            message = f"{PROG}: unknown command {next(a for a in argv if not a.startswith('-'))!r}"
            message += _did_you_mean(argv) or f" (see `{PROG} --help`)"
        return _report(argparse.Namespace(json="--json" in argv), EXIT_USAGE, message)
    run: Run | None = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    streams = sys.stdout, sys.stderr
    # What people read shows control characters (model text, tool output, ids)
    # as escapes; --json, `log` and `completion` keep their bytes exact.
    sys.stderr = VisibleText(sys.stderr)
    if not getattr(args, "json", False) and args.command not in _EXACT_OUTPUT:
        sys.stdout = VisibleText(sys.stdout)
    try:
        return run(args)
    except BrokenPipeError:
        return _closed_pipe()
    finally:
        sys.stdout, sys.stderr = streams


_EXACT_OUTPUT = frozenset({"log", "completion"})
"""Commands whose plain output is data (a turn file, a shell script), written byte for byte."""


def entry() -> NoReturn:
    """The ``turns`` console script and ``python -m turnclient.cli``: run the command,
    then leave without finalising the interpreter under the Temporal SDK's threads
    (``turnclient.process``). ``main`` returns instead, for callers in a process
    of their own."""
    from .process import leave

    leave(main())


def _closed_pipe() -> int:
    """The reader went away (``turns watch … | head -1``): end quietly, like ``cat``."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail
    return EXIT_OK


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
    from .runtime import TemporalUnreachableError

    if isinstance(exc, Failure):
        return exc.code, str(exc)
    if isinstance(exc, RejectedInputError):
        return EXIT_REJECTED, f"rejected: {exc}"
    if isinstance(exc, (InvalidInputError, TurnNotFoundError)):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, (TemporalUnreachableError, EmbeddedServerError)):
        return EXIT_UNREACHABLE, str(exc)
    if isinstance(exc, (TurnError, OSError)):
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
        self.idle_hint: str | None = None
        """Set while no turn is in flight (``turns chat`` at its prompt): how to go on."""
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
            message = f"{name}: stopped" + (f"; {self.idle_hint}" if self.idle_hint else "")
        else:
            message = (
                f"{name}: detached; turn {turn} is left as it is. "
                f"Resume it with `{command_line('recover', turn)}`, follow it with "
                f"`{command_line('watch', turn)}`, or cancel it with `{command_line('cancel', turn)}`"
            )
        with contextlib.suppress(Exception):
            _report(self.args, self.code, message, turn, status="detached")
        return self.code

    def hard_exit(self) -> NoReturn:
        from .process import leave

        leave(self.report())


_INTERRUPTS: _Interrupts | None = None


def _following(turn_id: str) -> None:
    """Name the turn this command works on, for the message a signal prints."""
    if _INTERRUPTS is not None:
        _INTERRUPTS.turn_id = turn_id
        _INTERRUPTS.idle_hint = None


def _between_turns(hint: str) -> None:
    """No turn is in flight any more: a signal now just stops, printing ``hint``."""
    if _INTERRUPTS is not None:
        _INTERRUPTS.turn_id = None
        _INTERRUPTS.idle_hint = hint


def _run_async(args: argparse.Namespace, body: Callable[[], Awaitable[int]]) -> int:
    """Run an async command: errors become one line and an exit code; signals detach."""
    import asyncio

    global _INTERRUPTS
    _quiet_logging()
    from .telemetry import install_default_runtime

    install_default_runtime()
    interrupts = _INTERRUPTS = _Interrupts(args)

    async def guarded() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        interrupts.install(loop, task)
        try:
            return await body()
        finally:
            interrupts.uninstall(loop)

    try:
        code = asyncio.run(guarded())
    except BrokenPipeError:
        return _closed_pipe()
    except (KeyboardInterrupt, asyncio.CancelledError):
        code = interrupts.report()
    except Exception as exc:
        if interrupts.received is None:
            code, message = _classify(exc)
            code = _report(args, code, message, getattr(exc, "turn_id", None))
            if code == EXIT_UNREACHABLE:
                # The SDK's connection threads may still be retrying: leave now,
                # even when called in-process (see turnclient.process).
                from .process import leave

                leave(code)
            return code
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
    except BrokenPipeError:
        return _closed_pipe()
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
WAIT_FOR_WORKER = arg(
    "--wait-for-worker",
    action="store_true",
    help="with --no-worker: wait even when no worker polls the task queue yet",
)
TURN = arg("turn", metavar="TURN", help="a turn id, `last`, or a unique prefix of one")
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
    from turncore.repository import read_path

    try:
        return read_path(path), None
    except CorruptTurnError as exc:
        return None, f"{path}:{exc.line if exc.line is not None else 1}: {exc.rule}"
    except TurnNotFoundError:
        return None, f"{path}: no such file"
    except InfrastructureError as exc:
        return None, f"{path}: cannot be read: {exc.__cause__ or exc}"


_ID_PREFIX = re.compile(r"[0-9TZ-]{1,40}")


def _stored_turn_ids(work_dir: Path) -> list[str]:
    """Every turn id stored in the work dir, oldest first (ids start with their UTC time)."""
    if (stored := _database_turn_ids()) is not None:
        return stored
    found = (p.stem for p in (work_dir / "storage" / "turns").glob("*/*/*/*.jsonl"))
    return sorted(t for t in found if is_turn_id(t))


def _turn_id(given: str) -> str:
    """A turn id from what the user typed: an id, ``last`` (the newest), or a unique prefix."""
    if is_turn_id(given):
        return given
    # A prefix is shorter than an id; as long as one, it was meant as one (and
    # validate_turn_id says what is wrong with it, not "no turn starts with").
    if given == "last" or (len(given) < len(TURN_ID_SHAPE) and _ID_PREFIX.fullmatch(given)):
        work = _work_dir()
        known = _stored_turn_ids(work)
        if given == "last":
            if not known:
                raise Failure(f"no turns in {work} yet", EXIT_USAGE)
            return known[-1]
        matches = [t for t in known if t.startswith(given)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            shown = ", ".join(reversed(matches[-5:]))
            raise Failure(
                f"{given!r} is the start of {len(matches)} turns (newest first: {shown}); "
                "type more of it",
                EXIT_USAGE,
            )
        raise Failure(f"no turn in {work} starts with {given!r}", EXIT_USAGE)
    try:
        validate_turn_id(given)  # raises: a malformed or path-like id, said precisely
    except InvalidInputError as exc:
        raise Failure(f"{exc}; {TURN_FORMS}", EXIT_USAGE) from None
    raise AssertionError


TURN_FORMS = "name a turn by its id, `last` (the newest) or a unique prefix of its id"


def _names_a_turn(given: str) -> bool:
    """Whether ``given`` (no such path) is a turn id, ``last`` or an id's prefix."""
    return given == "last" or is_turn_id(given) or bool(_ID_PREFIX.fullmatch(given))


def _path_of(given: str) -> Path:
    """A turn (id, ``last`` or prefix) in the work dir, or a path to a turn file."""
    if given.endswith(".jsonl") or os.sep in given:
        return Path(given)
    return turn_path(_work_dir(), _turn_id(given))


def _load(given: str) -> tuple[str, list[TurnEvent]]:
    """(the path as shown, its events) or a Failure with the one-line problem."""
    if _in_database(given):
        return _load_stored(_turn_id(given))
    resolved = _path_of(given)
    path = str(resolved)
    events, problem = _read(path)
    if events is None:
        missing = problem is not None and problem.endswith("no such file")
        if missing and is_turn_id(resolved.stem) and not given.endswith(".jsonl"):
            raise Failure(f"no turn {resolved.stem} in {_work_dir()}", EXIT_USAGE)
        raise Failure(problem or path, EXIT_USAGE if missing else EXIT_PROBLEM)
    return path, events


def _runtime(*, migrate: bool = False) -> Runtime:
    from .runtime import Runtime

    return Runtime.from_work_dir(migrate=migrate)


# ---------------------------------------------------------------- file commands


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
        if not os.path.exists(given) and _names_a_turn(given):
            try:  # `last` and a prefix name a stored turn, as for every command
                targets = [_turn_id(given)]
            except Failure as exc:
                invalid.append({"path": given, "problem": str(exc)})
                if not args.json:
                    print(str(exc))
                continue
        else:
            targets = list(_turn_files(given))
        for path in targets:
            _, problem = _read_stored(path) if _is_stored_id(path) else _read(path)
            if problem is None:
                valid.append(path)
                continue
            invalid.append({"path": path, "problem": problem})
            if not args.json:
                print(problem)
    if args.json:
        _emit_json({"valid": valid, "invalid": invalid})
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
    from turncore.reducer import reduce_turn

    from .summary import summarize

    def body() -> int:
        if not (args.path.endswith(".jsonl") or os.sep in args.path):
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
    from turncore.reducer import reduce_turn

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
                    "cost": _cost_json(reduced, session=True),
                }
            )
        else:
            print(transcript(reduced))
            print("\n".join(_cost_text(reduced)))
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
        if _in_database(args.turn):
            turn_id = _turn_id(args.turn)
            path, data = f"postgres:{turn_id}", _stored_bytes(turn_id)
        else:
            file = _path_of(args.turn)
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
            _emit_json(objects)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return EXIT_OK

    return _sync(args, body)


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
    from turncore.compose import compose_model_request
    from turncore.context import ContextResolver, ElisionPolicy
    from turncore.messages import projected_wire
    from turncore.reducer import TurnReducer, reduce_turn

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
        with _stored_repository() as repo:
            contexts = ContextResolver(lambda t: TurnReducer.of(repo.read(t)).state, policy)
            agent = contexts.resolve_agent(reduced.definition)
            context = contexts.resolve(reduced.definition.context)
        composed = compose_model_request(agent, context, reduced, index)
        if args.wire:
            wire = _wire_request(agent.tools, composed)
            if args.json:
                _emit_json(wire)
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
        if args.json:
            _emit_json(shown)
            return EXIT_OK
        _print_request(shown, policy.to_wire())
        return EXIT_OK

    return _sync(args, body)


def _wire_request(tools: Any, composed: Any) -> dict[str, Any]:
    """The provider body the model activity would send for ``composed`` (no network I/O)."""
    from turncore.model import RetryingModel, build_request
    from turncore.model._http import HttpModel

    runtime = _runtime()
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


def _recover_hint(path: Path) -> str:
    """How to continue a repaired turn, only when ``path`` is that turn's file in this work dir."""
    turn_id = path.name.removesuffix(".jsonl")
    if is_turn_id(turn_id) and turn_path(_work_dir(), turn_id).absolute() == path.absolute():
        return f"; continue with: {command_line('recover', turn_id)}"
    return (
        f" (this is not {_work_dir()}'s copy of the turn: `{PROG} recover` continues turns of "
        "the work dir only)"
    )


@command(
    "repair",
    "move a torn final line into <file>.broken (refuses any other damage)",
    arg("turn", metavar="TURN|PATH", help="a turn id, or the path of a turn file"),
    JSON,
)
def repair(args: argparse.Namespace) -> int:
    from turncore.repository import NothingToRepairError, RepairRefusedError, repair_torn_tail

    def body() -> int:
        if _in_database(args.turn):
            return _repair_stored(args)
        path = _path_of(args.turn)
        try:
            report = repair_torn_tail(path)
        except NothingToRepairError:
            if args.json:
                _emit_json({"status": "healthy", "path": str(path)})
            else:
                print(f"{path} is healthy: every line is whole and valid; nothing to repair")
            return EXIT_OK
        except RepairRefusedError as exc:
            raise Failure(f"not repaired: {exc}") from None
        _print_repair(
            args, report, str(report.path), str(report.sidecar), _recover_hint(report.path)
        )
        return EXIT_OK

    return _sync(args, body)


def _print_repair(
    args: argparse.Namespace, report: Any, where: str, sidecar: str, hint: str
) -> None:
    """What a repair removed and where it went, for people or (``--json``) programs."""
    if args.json:
        _emit_json(
            {
                "status": "repaired",
                "path": where,
                "sidecar": sidecar,
                "line": report.line,
                "removedBytes": report.removed_bytes,
                "preview": report.preview(),
                "keptLines": report.kept_lines,
            }
        )
        return
    print(
        f"removed {report.removed_bytes} bytes (line {report.line}) from {where}\n"
        f"  moved to {sidecar}\n"
        f"  they were: {report.preview()}\n"
        f"  {report.kept_lines} valid lines remain{hint}"
    )


# ---------------------------------------------------------------- turn storage
# [storage] kind = "postgres" keeps turns in PostgreSQL (docs/operations.md,
# "Choosing turn storage"). File commands given a turn id read it from the
# configured storage; a path always means a file. `turns db`, `turns export`
# and `turns import` live here too.


def _storage_config() -> Config:
    from .config import load_config

    return load_config(_work_dir())


def _in_database(given: str) -> bool:
    """Whether ``given`` names a turn (not a path) and turns live in PostgreSQL."""
    if given.endswith(".jsonl") or os.sep in given:
        return False
    return _storage_config().storage.kind == "postgres"


def _database_turn_ids() -> list[str] | None:
    """Every turn id in the turn database, oldest first; None with file storage."""
    if _storage_config().storage.kind != "postgres":
        return None
    with _stored_repository() as repo:
        ids: list[str] = repo.turn_ids()
    return ids


def _is_stored_id(given: str) -> bool:
    """A turn id that is not also an existing path (``turns validate``)."""
    return is_turn_id(given) and not os.path.exists(given)


@contextlib.contextmanager
def _stored_repository() -> Iterator[Any]:
    from .storage import close, open_repository

    repo = open_repository(_storage_config())
    try:
        yield repo
    finally:
        close(repo)


def _load_stored(turn_id: str) -> tuple[str, list[TurnEvent]]:
    from .storage import where

    with _stored_repository() as repo:
        try:
            return f"postgres:{turn_id}", repo.read(turn_id)
        except TurnNotFoundError:
            raise Failure(f"no turn {turn_id} in {where(_storage_config())}", EXIT_USAGE) from None


def _stored_bytes(turn_id: str) -> bytes:
    from .storage import where

    with _stored_repository() as repo:
        try:
            data: bytes = repo.raw(turn_id)
        except TurnNotFoundError:
            raise Failure(f"no turn {turn_id} in {where(_storage_config())}", EXIT_USAGE) from None
    return data


def _read_stored(turn_id: str) -> tuple[list[TurnEvent] | None, str | None]:
    """Like ``_read``, for a turn id in the configured storage."""
    try:
        with _stored_repository() as repo:
            return repo.read(turn_id), None
    except CorruptTurnError as exc:
        return None, f"{exc.path}:{exc.line if exc.line is not None else 1}: {exc.rule}"
    except TurnNotFoundError:
        return None, f"{turn_id}: no such turn"
    except InfrastructureError as exc:
        return None, f"{turn_id}: cannot be read: {exc}"


def _repair_stored(args: argparse.Namespace) -> int:
    from turncore.repository import RepairRefusedError

    with _stored_repository() as repo:
        try:
            report = repo.repair_tail(args.turn)
        except RepairRefusedError as exc:
            raise Failure(f"not repaired: {exc}") from None
    hint = f"; continue with: {command_line('recover', args.turn)}"
    _print_repair(args, report, report.where, "turn_events_broken", hint)
    return EXIT_OK


def _storage_summary(cfg: Config) -> dict[str, Any]:
    """``turns config``'s storage: the kind, and for PostgreSQL the variable and whether it is set."""
    storage = cfg.storage
    if storage.kind == "file":
        return {"kind": "file"}
    return {
        "kind": "postgres",
        "urlEnv": storage.url_env,
        "urlSet": bool(os.environ.get(storage.url_env)),
        "poolSize": storage.pool_size,
    }


def _storage_line(doc: dict[str, Any]) -> str:
    if doc["kind"] == "file":
        return "files under the work dir"
    state = "set" if doc["urlSet"] else "NOT SET"
    return f"PostgreSQL from {doc['urlEnv']} ({state}) · pool {doc['poolSize']}"


def _migrate_requested(args: argparse.Namespace) -> bool:
    from .storage import MIGRATE_ENV

    return bool(getattr(args, "migrate", False)) or os.environ.get(MIGRATE_ENV, "") in ("1", "true")


@command(
    "db",
    "the turn database: `migrate` creates or upgrades its schema, "
    "`validate` checks every stored turn",
    arg("action", choices=["migrate", "validate"]),
    JSON,
)
def db(args: argparse.Namespace) -> int:
    def body() -> int:
        from .storage import migrate_database, where

        cfg = _storage_config()
        if args.action == "migrate":
            before, after = migrate_database(cfg)
            if args.json:
                _emit_json({"status": "migrated", "from": before, "to": after})
            elif before == after:
                print(f"{where(cfg)}: the turn schema is at version {after}; nothing to do")
            else:
                print(f"{where(cfg)}: migrated the turn schema from version {before} to {after}")
            return EXIT_OK
        valid: list[str] = []
        invalid: list[dict[str, str]] = []
        with _stored_repository() as repo:
            for turn_id in repo.turn_ids():
                try:
                    repo.read(turn_id)
                    valid.append(turn_id)
                except CorruptTurnError as exc:
                    problem = f"{exc.path}:{exc.line if exc.line is not None else 1}: {exc.rule}"
                    invalid.append({"turnId": turn_id, "problem": problem})
                    if not args.json:
                        print(problem)
        if args.json:
            _emit_json({"valid": valid, "invalid": invalid})
        elif not invalid:
            print(f"{len(valid)} turns in {where(cfg)} are valid")
        return 1 if invalid else 0

    return _sync(args, body)


@command(
    "export",
    "copy turns from the configured storage to DIR/<turnId>.jsonl, byte for byte",
    arg("turns", nargs="*", metavar="TURN", help="turn ids (or --all)"),
    arg("--to", required=True, metavar="DIR", help="the directory to write the files to"),
    arg("--all", action="store_true", help="every stored turn"),
    JSON,
)
def export(args: argparse.Namespace) -> int:
    def body() -> int:
        from .storage import export_turns, where

        if bool(args.turns) == bool(args.all):
            raise Failure("name the turns to export, or pass --all (not both)", EXIT_USAGE)
        cfg = _storage_config()
        with _stored_repository() as repo:
            ids = repo.turn_ids() if args.all else [validate_turn_id(t) for t in args.turns]
            for turn_id in ids:
                if not repo.exists(turn_id):
                    raise Failure(f"no turn {turn_id} in {where(cfg)}", EXIT_USAGE)
            moved = export_turns(repo, ids, Path(args.to))
        if args.json:
            _emit_json([{"turnId": m.turn_id, "path": m.target, "bytes": m.bytes} for m in moved])
        else:
            for m in moved:
                print(f"{m.turn_id} -> {m.target} ({m.bytes} bytes)")
        return EXIT_OK

    return _sync(args, body)


@command(
    "import",
    "store turn files in the configured storage as new turns, byte for byte",
    arg("files", nargs="+", metavar="FILE", help="a turn file, or a directory of them"),
    JSON,
)
def import_(args: argparse.Namespace) -> int:
    def body() -> int:
        from .storage import import_files, where

        paths = [Path(p) for given in args.files for p in _turn_files(given)]
        cfg = _storage_config()
        with _stored_repository() as repo:
            moved = import_files(repo, paths, where(cfg))
        if args.json:
            _emit_json([{"turnId": m.turn_id, "path": m.source, "bytes": m.bytes} for m in moved])
        else:
            for m in moved:
                print(f"{m.source} -> {m.turn_id} ({m.bytes} bytes)")
        return EXIT_OK

    return _sync(args, body)


# ---------------------------------------------------------------- running turns


@contextlib.asynccontextmanager
async def _session(
    args: argparse.Namespace, runtime: Runtime, *, worker: bool = True
) -> AsyncIterator[tuple[Temporal, TurnClient]]:
    """Connected (embedded or remote), with a worker in this process unless --no-worker."""
    from turncore_temporal.worker import serving

    from .runtime import ConnectOptions, temporal

    options = ConnectOptions.for_config(runtime.config)
    async with temporal(runtime.work_dir, options=options) as conn:
        if worker and not getattr(args, "no_worker", False):
            async with serving(runtime, conn.client):
                yield conn, runtime.turn_client(conn.client, conn.server)
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


async def _follow(
    turns: TurnClient,
    turn_id: str,
    input: TurnExternalInput | None,
    renderer: StreamRenderer | None,
) -> TurnOutcome:
    """Advance the turn, rendering its stream, until it settles (a signal detaches)."""
    import asyncio

    _following(turn_id)
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


def _finish(
    args: argparse.Namespace, turn_id: str, outcome: TurnOutcome, *, accepted: bool = False
) -> int:
    from .render import outcome_block, outcome_json, wants_color, write_painted

    state = _settled_state(turn_id)
    if args.json:
        doc = outcome_json(turn_id, outcome)
        doc["cost"] = _cost_json(state, session=True) if state is not None else None
        _emit_json(doc)
    else:
        color = wants_color(sys.stdout)
        lines = outcome_block(turn_id, outcome)
        if state is not None:
            lines += [f"  {line.strip()}" for line in _cost_text(state, known_only=True)[:1]]
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
    arg("--max-model-calls", type=_positive, metavar="N", help="limit model calls (default 20)"),
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
        from .render import StreamRenderer, wants_color

        if args.continue_from and args.session:
            raise Failure(
                "give --continue TURN_ID or --session ID, not both "
                "(a continued turn joins its predecessor's session)",
                EXIT_USAGE,
            )
        runtime = _runtime()
        prompt = _prompt(args)
        if args.continue_from:  # the file decides: no server needed to refuse
            after = await _continuation(runtime, None, continue_from=_turn_id(args.continue_from))
            request, agent_name, model = _turn_request(args, runtime, prompt, after)
        async with _session(args, runtime) as (_, turns):
            if not args.continue_from:
                after = await _continuation(runtime, turns.temporal, session=args.session)
                request, agent_name, model = _turn_request(args, runtime, prompt, after)
            turn_id = await turns.create_turn(request)
            renderer = None
            if not args.json:
                print(f"turn {turn_id} · agent {agent_name} · model {model.label()}", flush=True)
                renderer = StreamRenderer(
                    sys.stdout, model=model.label(), color=wants_color(sys.stdout)
                )
            outcome = await _follow(turns, turn_id, None, renderer)
            return _finish(args, turn_id, outcome)

    return _run_async(args, body)


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


async def _continuation(
    runtime: Runtime, client: Any, *, continue_from: str | None = None, session: str | None = None
) -> Continuation:
    """Where the new turn starts; continuing a turn that has not ended is a usage error."""
    from .conversations import continuation

    try:
        return await continuation(
            runtime.repository, client, continue_from=continue_from, session=session
        )
    except RejectedInputError as exc:
        raise Failure(str(exc), EXIT_USAGE) from None


def _turn_request(
    args: argparse.Namespace, runtime: Runtime, prompt: str, after: Continuation
) -> tuple[CreateTurnInput, str, ModelDescriptor]:
    """The new turn of ``turns run``/``turns chat``: agent, model and context checked."""
    from turncore.events import AgentOverrides, RequestedAgent
    from turncore.messages import UserMessage

    from .api import CreateTurnInput

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
            f"agent {agent_name!r} names no model: pass --model PROVIDER/MODEL or set "
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
    from .chat import run_chat

    return run_chat(args)


def _send(
    args: argparse.Namespace,
    make_input: Callable[[], TurnExternalInput],
    *,
    accepted_ok: bool = False,
) -> int:
    from turncore.reducer import reduce_turn

    async def body() -> int:
        from pydantic import ValidationError

        from turncore.advance import check_input
        from turncore.inputs import validation_reason

        from .render import StreamRenderer, wants_color

        turn_id = _turn_id(args.turn)
        try:
            input = make_input()
        except ValidationError as exc:  # a value no turn may hold, refused before sending
            raise Failure(validation_reason(exc), EXIT_USAGE) from None
        # Rejected from the file before any runtime is built or server started;
        # the workflow checks again, atomically, when the input arrives.
        _, events = _load(turn_id)
        before = reduce_turn(events)
        try:
            check_input(before, input)
        except RejectedInputError as exc:
            raise Failure(_rejection(before, input, exc), EXIT_REJECTED) from None
        runtime = _runtime()
        async with _session(args, runtime) as (_, turns):
            renderer = None
            if not args.json:
                renderer = StreamRenderer(sys.stdout, color=wants_color(sys.stdout))
                renderer.prime(before)
            outcome = await _follow(turns, turn_id, input, renderer)
            return _finish(
                args, turn_id, outcome, accepted=accepted_ok and outcome.status == "suspended"
            )

    return _run_async(args, body)


_INPUT_WORDS = {
    "permission_decision": "an approval or denial",
    "async_tool_result": "a result",
    "async_tool_progress": "progress",
    "cancel": "a cancellation",
}


def _rejection(state: TurnState, input: TurnExternalInput, exc: RejectedInputError) -> str:
    """Why ``input`` is refused, in the words of the commands, and what the turn waits for."""
    from .render import continue_commands, status_of

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
    WAIT_FOR_WORKER,
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
    arg(
        "--output",
        type=_json_value,
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
    arg(
        "--data",
        type=_json_value,
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
    "serve a turn until it settles; start its workflow from the file if none runs",
    TURN,
    JSON,
    NO_WORKER,
    WAIT_FOR_WORKER,
)
def recover(args: argparse.Namespace) -> int:
    import asyncio

    from turncore.reducer import reduce_turn

    async def body() -> int:
        from .render import StreamRenderer, running_tools_note, wants_color

        turn_id = _turn_id(args.turn)
        runtime = _runtime()
        if not runtime.repository.exists(turn_id):
            raise Failure(f"no turn {turn_id} in {runtime.work_dir}", EXIT_USAGE)
        async with _session(args, runtime) as (_, turns):
            renderer = None
            if not args.json:
                renderer = StreamRenderer(sys.stdout, color=wants_color(sys.stdout))
                state = reduce_turn(await asyncio.to_thread(runtime.repository.read, turn_id))
                renderer.prime(state)
                note = running_tools_note(state)
                if note is not None:
                    print(note, flush=True)
            outcome = await _follow(turns, turn_id, None, renderer)
            return _finish(args, turn_id, outcome)

    return _run_async(args, body)


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
        from turncore.advance import outcome_of
        from turncore.surface import SurfaceProjector, encode_line

        from .render import (
            StreamRenderer,
            outcome_block,
            outcome_json,
            running_tools_note,
            wants_color,
        )

        turn_id = _turn_id(args.turn)
        _following(turn_id)
        runtime = _runtime()
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
    """Follow the file from line ``offset``, and the live deltas of whichever process on
    this host runs the turn's model calls, until the turn ends."""
    import asyncio

    from turncore.reducer import reduce_turn
    from turncore_temporal.worker import serving

    from .deltaspool import spool_dir
    from .follow import Durable, Live, Settled, follow_turn
    from .runtime import ConnectOptions, temporal

    async with contextlib.AsyncExitStack() as stack:
        if not args.no_worker:
            options = ConnectOptions.for_config(runtime.config)
            conn = await stack.enter_async_context(temporal(runtime.work_dir, options=options))
            await stack.enter_async_context(serving(runtime, conn.client))
        stream = follow_turn(
            runtime.repository, spool_dir(runtime.work_dir), turn_id, after=offset, until="terminal"
        )
        async for item in stream:
            match item:
                case Durable(event=event):
                    show(event)
                case Live(delta=delta):
                    show(delta)
                case Settled():
                    pass
    return reduce_turn(await asyncio.to_thread(runtime.repository.read, turn_id))


@command(
    "list",
    "list turns, newest first: created, status, agent, the prompt's first words",
    arg("--status", choices=["running", "suspended", "completed", "failed", "cancelled"]),
    arg("--agent", metavar="A"),
    arg("--session", metavar="S", help="only this session's last turns, oldest first (its order)"),
    arg("--limit", type=_positive, default=50, metavar="N", help="at most N turns (default 50)"),
    JSON,
)
def list_turns(args: argparse.Namespace) -> int:
    async def body() -> int:
        from .listing import latest_turns
        from .runtime import temporal
        from .summary import clip

        async with temporal(_work_dir()) as conn:
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
            _emit_json(rows)
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
            words = clip(" ".join(str(r["input"] or "").split()), 48)
            print(
                f"{r['turnId']}  {r['created']}  {r['status'] or '?':<9}  "
                f"{r['agent'] or '?':<10}  {words}{pending}"
            )
        return EXIT_OK

    return _run_async(args, body)


def _created(turn_id: str) -> str:
    """``2026-05-04T15-09-26Z-…`` → ``2026-05-04 15:09:26Z``."""
    day, _, clock = turn_id[:20].partition("T")
    return f"{day} {clock[:8].replace('-', ':')}Z"


# ---------------------------------------------------------------- serving


DEV_PORT = 7233
"""``turns dev``'s gRPC port: the stock ``temporal server start-dev`` default, so stock tools
and other apps find the server without being told."""


@command(
    "dev",
    "run the embedded dev server with Temporal Web and a worker in the foreground",
    arg(
        "--port",
        type=int,
        default=DEV_PORT,
        metavar="PORT",
        help=f"Temporal's gRPC port (default {DEV_PORT}, or a free one when it is taken)",
    ),
    arg(
        "--ui-port",
        type=int,
        default=8233,
        metavar="PORT",
        help="Temporal Web port (default 8233, or a free one)",
    ),
    arg("--no-worker", action="store_true", help="serve Temporal only; workers run elsewhere"),
    arg(
        "--web-port",
        type=int,
        default=8300,
        metavar="PORT",
        help="the turns web UI's port on loopback (default 8300, or a free one; see `turns ui`)",
    ),
    arg("--no-web", action="store_true", help="do not serve the turns web UI"),
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
    return _serve(args, ui=True, worker=not args.no_worker, web=not args.no_web)


@command(
    "worker",
    "run a worker in the foreground (TEMPORAL_ADDRESS, or the embedded server)",
    JSON,
    arg(
        "--migrate",
        action="store_true",
        help="create or migrate the turn database's schema first (also TURNS_MIGRATE=1)",
    ),
    arg(
        "--metrics",
        metavar="[HOST]:PORT|otlp",
        help="serve Prometheus metrics (turncore's and Temporal's) at this address, e.g. :9464; "
        "otlp: push them to the OTEL_EXPORTER_OTLP_* collector",
    ),
)
def worker(args: argparse.Namespace) -> int:
    return _serve(args, ui=False, worker=True)


def _serve(args: argparse.Namespace, *, ui: bool, worker: bool, web: bool = False) -> int:
    async def body() -> int:
        from turncore_temporal.worker import run_worker

        from .uicli import dev_web_ui

        runtime = _runtime(migrate=_migrate_requested(args))
        web_url: list[str | None] = []

        @contextlib.asynccontextmanager
        async def serve_web(conn: Temporal) -> AsyncIterator[None]:
            async with dev_web_ui(runtime, conn.client, args.web_port) as url:
                web_url[:] = [url]  # a replaced embedded server serves the UI anew
                yield

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
            if web:
                info["webUrl"] = web_url[0] if web_url else None
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
            if web:
                shown = web_url[0] if web_url else None
                print(f"turns web UI  {shown or 'off: ' + 'pip install turncore[ui]'}")
            if worker:
                print(f"worker        task queue {runtime.task_queue}, work dir {runtime.work_dir}")
            print("Ctrl-C to stop.", flush=True)

        await run_worker(
            runtime,
            on_ready=ready,
            ui=ui,
            ui_port=getattr(args, "ui_port", None),
            port=getattr(args, "port", None),
            worker=worker,
            metrics=_metrics_address(args),
            around=serve_web if web else None,
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
            "storage": _storage_summary(cfg),
            "defaultAgent": cfg.default_agent,
            "defaultModel": cfg.default_model,
            "agents": {
                n: {
                    "model": a.model,
                    "tools": list(a.tool_names),
                    "reasoningEffort": a.reasoning_effort,
                }
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
        print(f"storage       {_storage_line(_storage_summary(cfg))}")
        print(f"default agent {doc['defaultAgent']} · default model {doc['defaultModel'] or '-'}")
        print("agents")
        for n, a in cfg.agents.items():
            print(
                f"  {n:<12} {a.model or '(default model)'} · tools: {', '.join(a.tool_names) or 'none'}"
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


@command(
    "completion",
    'print a shell completion script: eval "$(turns completion bash)" (or zsh) in your rc file',
    arg("shell", choices=["bash", "zsh", "ids"], help="bash, zsh (ids: the stored turn ids)"),
)
def completion(args: argparse.Namespace) -> int:
    if args.shell == "ids":  # what the scripts call to complete TURN arguments
        for turn_id in reversed(_stored_turn_ids(_work_dir())):
            print(turn_id)
        return EXIT_OK
    script = _bash_completion(build_parser())
    if args.shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    sys.stdout.write(script)
    return EXIT_OK


def _bash_completion(parser: argparse.ArgumentParser) -> str:
    """A bash completion function generated from the registered commands and their flags."""
    cases = []
    for c in COMMANDS.values():
        flags = sorted(f for a in c.args for f in a.flags if f.startswith("-"))
        takes_turn = any(a.flags and a.flags[0] in ("turn", "path") for a in c.args)
        cases.append(
            f"    {c.name}) opts={shlex.quote(' '.join(flags + ['--help']))}; turn={int(takes_turn)};;"
        )
    names = " ".join(COMMANDS)
    return f"""# turns completion for bash (generated by `turns completion bash`)
_turns() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" opts="" turn=0
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=( $(compgen -W "{names} --help --version" -- "$cur") )
    return
  fi
  case "${{COMP_WORDS[1]}}" in
{chr(10).join(cases)}
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
  elif [ "$turn" -eq 1 ] && [ "$COMP_CWORD" -eq 2 ]; then
    COMPREPLY=( $(compgen -W "last $(turns completion ids 2>/dev/null)" -- "$cur") )
  else
    COMPREPLY=( $(compgen -f -- "$cur") )
  fi
}}
complete -F _turns turns
"""


# ---------------------------------------------------------------- cost (derived, never stored)


def _pricer() -> Any:
    """Prices for the work dir's providers (a broken turns.toml leaves every price unknown)."""
    from .config import ConfigError, load_config
    from .cost import Pricer

    try:
        cfg = load_config(_work_dir())
    except ConfigError as exc:
        print(f"{PROG}: cost unknown: {_one_line(str(exc))}", file=sys.stderr)
        return Pricer({})
    return Pricer(cfg.providers, cfg.prices)


def _settled_state(turn_id: str) -> TurnState | None:
    """The turn as the configured storage holds it (files or PostgreSQL)."""
    from turncore.reducer import reduce_turn

    try:
        with _stored_repository() as repo:
            return reduce_turn(repo.read(turn_id))
    except TurnError:
        return None  # not in this work dir's storage (workers elsewhere): no cost to show


def _session_states(session_id: str) -> list[TurnState]:
    """Every turn of the session in the configured storage (the first line names it)."""
    from turncore.reducer import reduce_turn

    with _stored_repository() as repo:
        return [reduce_turn(repo.read(t)) for t in repo.session_turn_ids(session_id)]


def _session_cost(pricer: Any, session_id: str) -> dict[str, Any]:
    from .cost import session_report

    try:
        return session_report(pricer, session_id, _session_states(session_id))
    except TurnError as exc:  # one of its turns cannot be read: the total is unknown
        return {"sessionId": session_id, "turns": None, "cost": None, "error": str(exc)}


def _cost_json(state: TurnState, *, session: bool = False) -> dict[str, Any]:
    from .cost import turn_report

    pricer = _pricer()
    doc = turn_report(pricer, state)
    session_id = state.definition.session_id
    if session and session_id:
        doc["session"] = _session_cost(pricer, session_id)
    return doc


def _cost_text(state: TurnState, *, known_only: bool = False) -> list[str]:
    from .cost import cost_lines

    pricer = _pricer()
    if known_only and pricer.turn_costs(state)[0] is None:
        return []
    session_id = state.definition.session_id
    session = _session_cost(pricer, session_id) if session_id and not known_only else None
    return cost_lines(pricer, state, session)


# ---------------------------------------------------------------- observability


def _metrics_address(args: argparse.Namespace) -> str | None:
    """``--metrics [HOST]:PORT`` as the runtime's bind address (None: no endpoint)."""
    from .telemetry import metrics_address

    given: str | None = getattr(args, "metrics", None)
    if given is None:
        return None
    try:
        return metrics_address(given)
    except ValueError as exc:
        raise Failure(str(exc), EXIT_USAGE) from None


@command(
    "codec-server",
    "serve /encode and /decode for Temporal Web and the temporal CLI with the payload keys",
    arg("--port", type=int, default=8888, metavar="PORT", help="port (default 8888; 0: any)"),
    arg("--host", default="127.0.0.1", metavar="HOST", help="bind address (default 127.0.0.1)"),
    arg(
        "--origin",
        action="append",
        metavar="URL",
        help="a browser origin allowed to call it (repeatable; default Temporal Web's "
        "http://localhost:8233)",
    ),
    arg(
        "--no-token",
        action="store_true",
        help="accept requests without a bearer token (loopback only; for the local Temporal "
        "Web, which cannot send one)",
    ),
    arg("--new-key", metavar="ID", help="print a fresh ID:BASE64KEY for the key variable and exit"),
    JSON,
)
def codec_server(args: argparse.Namespace) -> int:
    def body() -> int:
        import secrets

        from .config import load_config

        try:
            from .codec import EncryptionCodec, PayloadKeyError, PayloadKeys, new_key_spec
            from .codec_server import DEFAULT_ORIGINS, CodecServer
        except ImportError:
            raise Failure(
                "the codec needs cryptography: pip install 'turncore[encryption]'"
            ) from None
        if args.new_key:
            try:
                spec = new_key_spec(args.new_key)
            except PayloadKeyError as exc:
                raise Failure(str(exc), EXIT_USAGE) from None
            _emit_json({"key": spec}) if args.json else print(spec)
            return EXIT_OK
        cfg = load_config(_work_dir())
        if cfg.payload_key_env is None:
            raise Failure(
                "turns.toml sets no [temporal] payload_key_env: payloads are not encrypted"
            )
        try:
            keys = PayloadKeys.from_env(cfg.payload_key_env)
        except PayloadKeyError as exc:
            raise Failure(str(exc)) from None
        loopback = args.host in ("127.0.0.1", "::1", "localhost")
        if args.no_token and not loopback:
            raise Failure("--no-token is allowed only on a loopback --host", EXIT_USAGE)
        token = (
            None
            if args.no_token
            else os.environ.get("TURNS_CODEC_TOKEN") or secrets.token_urlsafe(24)
        )
        try:
            server = CodecServer(
                EncryptionCodec(keys),
                host=args.host,
                port=args.port,
                token=token,
                origins=args.origin or DEFAULT_ORIGINS,
            )
        except OSError as exc:
            raise Failure(f"cannot listen on {args.host}:{args.port}: {exc}") from None
        info = {
            "url": server.url,
            "keyIds": list(keys.ids),
            "origins": sorted(server.origins),
            "token": token if token and not os.environ.get("TURNS_CODEC_TOKEN") else None,
            "tokenRequired": token is not None,
        }
        if args.json:
            _emit_json(info)
        else:
            print(f"codec server  {server.url} (/encode, /decode) · keys {', '.join(keys.ids)}")
            print(f"origins       {', '.join(sorted(server.origins))}")
            if token is None:
                print("token         none (--no-token)")
            elif info["token"]:
                print(f"token         {token}  (set TURNS_CODEC_TOKEN to choose it)")
            else:
                print("token         from $TURNS_CODEC_TOKEN")
            print("Ctrl-C to stop.", flush=True)
        sys.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        return EXIT_OK

    return _sync(args, body)


# Commands kept in their own modules register themselves on import.
from . import uicli as _uicli  # noqa: E402, F401  (`turns ui`; its web stack loads only when run)

if __name__ == "__main__":
    # Run the package's module (where every command registered), not this copy of it.
    from turnclient.cli import entry as _entry

    _entry()
