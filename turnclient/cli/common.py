"""What every ``turns`` command shares: the command registry (``command``,
``arg``), exit codes, failures and how they are reported, running a command's
body (``run_sync``, ``run_async``: Ctrl-C, telemetry, the exit), and finding
a turn the user named (a file, an id, ``last`` or a prefix; in the work dir
or the configured database) and loading its events.

Every name here is public: the command modules (``reading``, ``running``,
``deciding``, ``serving``, ``admin``, ``chat``) import them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
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

if TYPE_CHECKING:
    import asyncio

    from turnclient.runtime.config import Config
    from turnclient.runtime.connection import Runtime
    from turncore.events import TurnEvent
    from turncore.reducer import TurnState


from turnclient.lib.terminal import PROG as PROG
from turnclient.lib.terminal import command_line as command_line

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


def closed_pipe() -> int:
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


def _loaded(module: str, name: str) -> type[BaseException] | None:
    """``module.name`` if the process has already imported ``module``, else None.

    An exception can only be an instance of a class whose module is loaded, so
    classifying a failure of a command that never touched Temporal (``turns
    state FILE``) does not import the Temporal SDK to learn it is not one.
    """
    loaded = sys.modules.get(module)
    found = getattr(loaded, name, None) if loaded is not None else None
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def _classify(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, Failure):
        return exc.code, str(exc)
    app_error = _loaded("turnclient.runtime.app", "AppError")
    if app_error is not None and isinstance(exc, app_error):
        return (EXIT_USAGE if getattr(exc, "usage", False) else EXIT_PROBLEM), str(exc)
    if isinstance(exc, RejectedInputError):
        return EXIT_REJECTED, f"rejected: {exc}"
    if isinstance(exc, (InvalidInputError, TurnNotFoundError)):
        return EXIT_USAGE, str(exc)
    unreachable = (
        _loaded("turnclient.runtime.connection", "TemporalUnreachableError"),
        _loaded("turnclient.runtime.embedded", "EmbeddedServerError"),
    )
    if any(kind is not None and isinstance(exc, kind) for kind in unreachable):
        return EXIT_UNREACHABLE, str(exc)
    if isinstance(exc, (TurnError, OSError)):
        return EXIT_PROBLEM, str(exc)
    rpc_error = _loaded("temporalio.service", "RPCError")
    if rpc_error is not None and isinstance(exc, rpc_error):
        return EXIT_PROBLEM, f"Temporal: {getattr(exc, 'message', '') or exc}"
    return EXIT_PROBLEM, f"unexpected {type(exc).__name__}: {exc}"


def report_failure(
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
        emit_json(doc)
    return code


def emit_json(doc: Any) -> None:
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    sys.stdout.flush()


def _quiet_logging(default: str = "ERROR") -> None:
    import logging  # commands that only read a file never configure logging

    level = os.environ.get("TURNS_LOG_LEVEL", default).upper()
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
    supervisor stops the server once idle, and the turn's workflow resumes on
    the next worker from its file.
    """

    HARD_EXIT = 1.5
    CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.turn_id: str | None = None
        self.idle_hint: str | None = None
        self.at_prompt = False
        """A prompt waits for input on stdout's current line (``turns chat``)."""
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
        if self.at_prompt:  # the message goes on a line of its own, not after the prompt
            with contextlib.suppress(Exception):
                sys.stdout.write("\n")
                sys.stdout.flush()
        if turn is None:
            message = f"{name}: stopped" + (f"; {self.idle_hint}" if self.idle_hint else "")
        else:
            message = (
                f"{name}: detached; turn {turn} is left as it is. "
                f"Resume it with `{command_line('recover', turn)}`, follow it with "
                f"`{command_line('watch', turn)}`, or cancel it with `{command_line('cancel', turn)}`"
            )
        with contextlib.suppress(Exception):
            report_failure(self.args, self.code, message, turn, status="detached")
        return self.code

    def hard_exit(self) -> NoReturn:
        from turnclient.runtime.process import leave

        leave(self.report())


_INTERRUPTS: _Interrupts | None = None


def following(turn_id: str) -> None:
    """Name the turn this command works on, for the message a signal prints."""
    if _INTERRUPTS is not None:
        _INTERRUPTS.turn_id = turn_id
        _INTERRUPTS.idle_hint = None


@contextlib.contextmanager
def at_prompt() -> Iterator[None]:
    """A prompt is on stdout's current line for the block (a signal's message goes below)."""
    if _INTERRUPTS is not None:
        _INTERRUPTS.at_prompt = True
    yield  # a signal cancels the block: the prompt stays, for the message to go below
    if _INTERRUPTS is not None:
        _INTERRUPTS.at_prompt = False


def between_turns(hint: str) -> None:
    """No turn is in flight any more: a signal now just stops, printing ``hint``."""
    if _INTERRUPTS is not None:
        _INTERRUPTS.turn_id = None
        _INTERRUPTS.idle_hint = hint


def run_async(
    args: argparse.Namespace, body: Callable[[], Awaitable[int]], *, log_level: str = "ERROR"
) -> int:
    """Run an async command: errors become one line and an exit code; signals detach.

    Commands log at ``log_level`` unless ``TURNS_LOG_LEVEL`` says otherwise:
    ERROR, except the long-lived workers (INFO, as docs/operations.md says),
    whose warnings (a turn's workflow task failing) an operator must see.
    """
    import asyncio

    global _INTERRUPTS
    _quiet_logging(log_level)
    from turnclient.runtime.telemetry import install_default_runtime

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
        return closed_pipe()
    except (KeyboardInterrupt, asyncio.CancelledError):
        code = interrupts.report()
    except Exception as exc:
        if interrupts.received is None:
            code, message = _classify(exc)
            code = report_failure(args, code, message, getattr(exc, "turn_id", None))
            if code == EXIT_UNREACHABLE:
                # The SDK's connection threads may still be retrying: leave now,
                # even when called in-process (see turnclient.runtime.process).
                from turnclient.runtime.process import leave

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


def run_sync(args: argparse.Namespace, body: Callable[[], int]) -> int:
    try:
        return body()
    except BrokenPipeError:
        return closed_pipe()
    except Exception as exc:
        code, message = _classify(exc)
        return report_failure(args, code, message)


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


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


# ---------------------------------------------------------------- file helpers


def current_work_dir() -> Path:
    from turnclient.runtime.config import work_dir_from_env

    return work_dir_from_env()


def turn_files(path: str) -> Iterator[str]:
    """``path`` itself, or every ``*.jsonl`` under it if it is a directory (sorted)."""
    if os.path.isdir(path):
        for found in sorted(Path(path).rglob("*.jsonl")):
            yield str(found)
    else:
        yield path


def read_turn_file(path: str) -> tuple[list[TurnEvent] | None, str | None]:
    """The file's events, or the one-line problem ``PATH:LINE: rule`` / ``PATH: reason``."""
    from turncore.storage.repository import read_path

    try:
        return read_path(path), None
    except CorruptTurnError as exc:
        return None, f"{path}:{exc.line if exc.line is not None else 1}: {exc.rule}"
    except TurnNotFoundError:
        return None, f"{path}: no such file"
    except InfrastructureError as exc:
        return None, f"{path}: cannot be read: {exc.__cause__ or exc}"


_ID_PREFIX = re.compile(r"[0-9TZ-]{1,40}")


def stored_turn_ids(work_dir: Path) -> list[str]:
    """Every turn id stored in the work dir, oldest first (ids start with their UTC time)."""
    if (stored := _database_turn_ids()) is not None:
        return stored
    found = (p.stem for p in (work_dir / "storage" / "turns").glob("*/*/*/*.jsonl"))
    return sorted(t for t in found if is_turn_id(t))


def _is_summary_turn(work: Path, turn_id: str) -> bool:
    """Whether a stored turn is a summary turn (``turncore.budget``), by its first line."""
    from turncore.budget import is_summary_turn
    from turncore.events import TurnCreated

    try:
        with turn_path(work, turn_id).open("rb") as f:
            first = f.readline()
    except OSError:  # stored elsewhere (PostgreSQL): read it through the repository
        try:
            with stored_repository() as repo:
                events = repo.read(turn_id)
        except TurnError:
            return False
        return isinstance(events[0], TurnCreated) and is_summary_turn(events[0])
    try:
        return is_summary_turn(TurnCreated.model_validate_json(first))
    except ValueError:
        return False


def resolve_turn_id(given: str) -> str:
    """A turn id from what the user typed: an id, ``last`` (the newest), or a unique prefix."""
    if is_turn_id(given):
        return given
    # A prefix is shorter than an id; as long as one, it was meant as one (and
    # validate_turn_id says what is wrong with it, not "no turn starts with").
    if given == "last" or (len(given) < len(TURN_ID_SHAPE) and _ID_PREFIX.fullmatch(given)):
        work = current_work_dir()
        known = stored_turn_ids(work)
        if given == "last":
            if not known:
                raise Failure(f"no turns in {work} yet", EXIT_USAGE)
            # The newest turn of a conversation: a summary of what a context budget
            # dropped is a turn too, written after the turn it serves; skip those.
            for turn_id in reversed(known):
                if not _is_summary_turn(work, turn_id):
                    return turn_id
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


def names_a_turn(given: str) -> bool:
    """Whether ``given`` (no such path) is a turn id, ``last`` or an id's prefix."""
    return given == "last" or is_turn_id(given) or bool(_ID_PREFIX.fullmatch(given))


def path_of(given: str) -> Path:
    """A turn (id, ``last`` or prefix) in the work dir, or a path to a turn file."""
    if given.endswith(".jsonl") or os.sep in given:
        return Path(given)
    return turn_path(current_work_dir(), resolve_turn_id(given))


def load_turn(given: str) -> tuple[str, list[TurnEvent]]:
    """(the path as shown, its events) or a Failure with the one-line problem."""
    if in_database(given):
        return _load_stored(resolve_turn_id(given))
    resolved = path_of(given)
    path = str(resolved)
    events, problem = read_turn_file(path)
    if events is None:
        missing = problem is not None and problem.endswith("no such file")
        if missing and is_turn_id(resolved.stem) and not given.endswith(".jsonl"):
            raise Failure(f"no turn {resolved.stem} in {current_work_dir()}", EXIT_USAGE)
        raise Failure(problem or path, EXIT_USAGE if missing else EXIT_PROBLEM)
    return path, events


def open_runtime(*, migrate: bool = False) -> Runtime:
    from turnclient.runtime.connection import Runtime

    return Runtime.from_work_dir(migrate=migrate)


# ---------------------------------------------------------------- turn storage
# [storage] kind = "postgres" keeps turns in PostgreSQL (docs/operations.md,
# "Choosing turn storage"). File commands given a turn id read it from the
# configured storage; a path always means a file. `turns db`, `turns export`
# and `turns import` live here too.


def storage_config() -> Config:
    """The work dir's configuration as reading turns needs it: storage, providers,
    prices and the elision policy. The app (``TURNS_APP``, ``app =``) is left
    out: it adds agents, tools and models, none of which a read uses."""
    from turnclient.runtime.config import load_config

    return load_config(current_work_dir(), with_app=False)


def in_database(given: str) -> bool:
    """Whether ``given`` names a turn (not a path) and turns live in PostgreSQL."""
    if given.endswith(".jsonl") or os.sep in given:
        return False
    return storage_config().storage.kind == "postgres"


def _database_turn_ids() -> list[str] | None:
    """Every turn id in the turn database, oldest first; None with file storage."""
    if storage_config().storage.kind != "postgres":
        return None
    with stored_repository() as repo:
        ids: list[str] = repo.turn_ids()
    return ids


@contextlib.contextmanager
def stored_repository(config: Config | None = None) -> Iterator[Any]:
    """The configured turn repository (``config``: one the command loaded already)."""
    from turnclient.runtime.storage import close, open_repository

    repo = open_repository(config or storage_config())
    try:
        yield repo
    finally:
        close(repo)


def _load_stored(turn_id: str) -> tuple[str, list[TurnEvent]]:
    from turnclient.runtime.storage import where

    with stored_repository() as repo:
        try:
            return f"postgres:{turn_id}", repo.read(turn_id)
        except TurnNotFoundError:
            raise Failure(f"no turn {turn_id} in {where(storage_config())}", EXIT_USAGE) from None


def migrate_requested(args: argparse.Namespace) -> bool:
    from turnclient.runtime.storage import MIGRATE_ENV

    return bool(getattr(args, "migrate", False)) or os.environ.get(MIGRATE_ENV, "") in ("1", "true")


# ---------------------------------------------------------------- cost (derived, never stored)


def _pricer() -> tuple[Any, Config | None]:
    """Prices for the work dir's providers, and the configuration they come from
    (None: a broken turns.toml, which leaves every price unknown)."""
    from turnclient.lib.cost import Pricer
    from turnclient.runtime.config import ConfigError

    try:
        cfg = storage_config()
    except ConfigError as exc:
        print(f"{PROG}: cost unknown: {_one_line(str(exc))}", file=sys.stderr)
        return Pricer({}), None
    return Pricer(cfg.providers, cfg.prices), cfg


def settled_state(turn_id: str) -> TurnState | None:
    """The turn as the configured storage holds it (files or PostgreSQL)."""
    from turncore.reducer import reduce_turn

    try:
        with stored_repository() as repo:
            return reduce_turn(repo.read(turn_id))
    except TurnError:
        return None  # not in this work dir's storage (workers elsewhere): no cost to show


def _session_states(session_id: str, config: Config | None) -> list[TurnState]:
    """Every turn of the session in the configured storage (the first line names it)."""
    from turncore.reducer import reduce_turn

    with stored_repository(config) as repo:
        return [reduce_turn(repo.read(t)) for t in repo.session_turn_ids(session_id)]


def _session_cost(pricer: Any, session_id: str, config: Config | None) -> dict[str, Any]:
    from turnclient.lib.cost import session_report

    try:
        return session_report(pricer, session_id, _session_states(session_id, config))
    except TurnError as exc:  # one of its turns cannot be read: the total is unknown
        return {"sessionId": session_id, "turns": None, "cost": None, "error": str(exc)}


def cost_json(state: TurnState, *, session: bool = False) -> dict[str, Any]:
    from turnclient.lib.cost import turn_report

    pricer, cfg = _pricer()
    doc = turn_report(pricer, state)
    session_id = state.definition.session_id
    if session and session_id:
        doc["session"] = _session_cost(pricer, session_id, cfg)
    return doc


def cost_text(state: TurnState, *, known_only: bool = False) -> list[str]:
    from turnclient.lib.cost import cost_lines

    pricer, cfg = _pricer()
    if known_only and pricer.turn_costs(state)[0] is None:
        return []
    session_id = state.definition.session_id
    session = _session_cost(pricer, session_id, cfg) if session_id and not known_only else None
    return cost_lines(pricer, state, session)
