"""The ``turns`` command line.

Every command is one function, registered with ``@command``: its name, a
one-line help, and the arguments it takes (``arg(...)``, the arguments of
``ArgumentParser.add_argument``). ``main`` builds one argparse subparser per
registered command and calls the function with the parsed namespace; the
function returns the exit code. Adding a command is writing one decorated
function; a command that talks to Temporal imports the client inside itself,
so file-only commands never pay for it.

Exit codes: 0 success, 1 the command ran and found a problem (an invalid or
unreadable turn file), 2 a usage error.

File commands read through ``turncore.repository.read_path``, the same
strict reader the runtime uses: every line is parsed and validated and the
whole log reduced, so a file ``turns validate`` accepts is one the runtime
can load.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from turncore.errors import CorruptTurnError, InfrastructureError, TurnNotFoundError
from turncore.events import TurnEvent
from turncore.reducer import reduce_turn
from turncore.repository import read_path

from .summary import summarize

PROG = "turns"

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
    parser = argparse.ArgumentParser(prog=PROG, description="Inspect and run durable agent turns.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for c in COMMANDS.values():
        p = sub.add_parser(c.name, help=c.help, description=c.help)
        for a in c.args:
            p.add_argument(*a.flags, **a.options)
        p.set_defaults(run=c.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already reported
        return exc.code if isinstance(exc.code, int) else 2
    run: Run | None = getattr(args, "run", None)
    if run is None:
        parser.print_help(sys.stderr)
        return 2
    return run(args)


# ---------------------------------------------------------------- file helpers


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


# ---------------------------------------------------------------- commands


@command(
    "validate",
    "check turn files; print PATH:LINE: rule for each invalid one",
    arg("paths", nargs="+", metavar="PATH", help="a turn file, or a directory of them"),
)
def validate(args: argparse.Namespace) -> int:
    bad = 0
    for given in args.paths:
        for path in _turn_files(given):
            _, problem = _read(path)
            if problem is not None:
                print(problem)
                bad += 1
    return 1 if bad else 0


@command(
    "state",
    "print the state a turn file reduces to",
    arg("path", metavar="PATH", help="a turn file"),
    arg("--json", action="store_true", help="the TurnState as JSON (spec §14.2 names)"),
)
def state(args: argparse.Namespace) -> int:
    events, problem = _read(args.path)
    if events is None:
        print(problem, file=sys.stderr)
        return 1
    reduced = reduce_turn(events)
    if args.json:
        sys.stdout.write(orjson.dumps(reduced.to_wire(), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        print(summarize(reduced))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
