"""The ``turns`` parser and entry point: one argparse subparser per registered
command (``turnclient.cli.common.COMMANDS``), ``--version``, ``--help`` and
its epilog (the exit codes). The command modules register themselves when
``turnclient.cli`` imports them; ``main`` parses and runs one command.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from turnclient.cli.common import (
    COMMANDS,
    EXIT_PROBLEM,
    EXIT_USAGE,
    PROG,
    Arg,
    Command,
    Run,
    arg,
    closed_pipe,
    report_failure,
)
from turnclient.lib.terminal import VisibleText

if TYPE_CHECKING:
    pass


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
  TURNS_APP         MODULE:ATTR of the app whose agents, tools and models to serve
                    (like --app; default: app = in turns.toml)
  TURNS_DATABASE_URL  the turn database with [storage] kind = "postgres"

With --json, stdout carries one JSON document (JSON lines for `watch`); a
failure is {"status": "error"|"rejected", "error": ..., "exitCode": ...}.
"""


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


ORDER = (
    *("run", "chat", "approve", "deny", "complete", "progress", "cancel", "recover", "watch"),
    *("list", "show", "state", "log", "inspect", "validate", "repair"),
    *("dev", "worker", "ui", "config", "mcp", "db", "export", "import", "codec-server"),
    "completion",
)
"""The order of ``turns --help``: the order people reach for commands — running and
answering turns first, reading them next, operating the runtime last. A command
missing here is listed last."""


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


def listed() -> list[Command]:
    """Every registered command, in ``ORDER``."""
    return sorted(
        COMMANDS.values(), key=lambda c: ORDER.index(c.name) if c.name in ORDER else len(ORDER)
    )


APP_COMMANDS = frozenset(
    {"worker", "dev", "ui", "run", "chat", "approve", "deny", "complete", "progress", "cancel"}
    | {"recover", "config"}
)
"""The commands that serve turns or resolve agents: each takes ``--app MODULE:ATTR``."""
APP: Arg = arg(
    "--app",
    metavar="MODULE:ATTR",
    help="load the agents, tools and models of this app (a Turns or App object; "
    "default $TURNS_APP, or app = in turns.toml)",
)


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
    for c in listed() if only is None else [COMMANDS[only]]:
        p = sub.add_parser(c.name, help=c.help, description=c.help)
        for a in (*c.args, APP) if c.name in APP_COMMANDS else c.args:
            p.add_argument(*a.flags, **a.options)
        p.set_defaults(run=c.run)
    return parser


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
        return report_failure(argparse.Namespace(json="--json" in argv), EXIT_USAGE, message)
    run: Run | None = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if getattr(args, "app", None) is not None:
        import os
        from pathlib import Path

        from turnclient.runtime.app import AppError, load_app
        from turnclient.runtime.config import work_dir_from_env

        try:  # loaded here first, so a problem names --app rather than TURNS_APP
            load_app(args.app, [Path.cwd(), work_dir_from_env()], "--app")
        except AppError as exc:
            return report_failure(args, EXIT_USAGE if exc.usage else EXIT_PROBLEM, str(exc))
        # Through the environment, so every configuration this command loads, and
        # every process it starts, serves the same app.
        os.environ["TURNS_APP"] = args.app
    streams = sys.stdout, sys.stderr
    # What people read shows control characters (model text, tool output, ids)
    # as escapes; --json, `log` and `completion` keep their bytes exact.
    sys.stderr = VisibleText(sys.stderr)
    if not getattr(args, "json", False) and args.command not in _EXACT_OUTPUT:
        sys.stdout = VisibleText(sys.stdout)
    try:
        return run(args)
    except BrokenPipeError:
        return closed_pipe()
    finally:
        sys.stdout, sys.stderr = streams


_EXACT_OUTPUT = frozenset({"log", "completion"})
"""Commands whose plain output is data (a turn file, a shell script), written byte for byte."""


def entry() -> NoReturn:
    """The ``turns`` console script and ``python -m turnclient.cli``: run the command,
    then leave without finalising the interpreter under the Temporal SDK's threads
    (``turnclient.runtime.process``). ``main`` returns instead, for callers in a process
    of their own."""
    from turnclient.runtime.process import leave

    leave(main())
