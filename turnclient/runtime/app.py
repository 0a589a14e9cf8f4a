"""An app: the agents, tools and Python models one codebase defines, named ``MODULE:ATTR``.

Every process that serves or resolves turns — a worker, the ``turns``
command, the web UI — must know the same agents, tools and models, or a
turn one of them created cannot be advanced by another. An app is named
once, by ``--app MODULE:ATTR`` on a command, ``TURNS_APP`` in the
environment or ``app = "MODULE:ATTR"`` at the top of ``turns.toml`` (in that
order of precedence), and ``turnclient.config.load_config`` adds what it
holds to the configuration through the same checks as Python agents
(``config.with_python``), recording where each agent, tool and model came
from (``turns config`` shows it).

ATTR names a ``Turns`` object (it is not entered: only its agents, tools,
models and permission lists are taken) or an ``App``. The module is imported
with the current directory and the work dir on ``sys.path``. What can go
wrong is an ``AppError`` of one line: a malformed name, a missing module, a
missing attribute or an object of the wrong kind are the caller's mistake
(``usage``: exit 2); a module that raises while it is imported is a problem
in the app (exit 1).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from turnclient.runtime.errors import ConfigError
from turncore.tools import Tool

if TYPE_CHECKING:
    from turnclient.runtime.config import Agent
    from turncore.model.scripted import ScriptFunction

APP_ENV = "TURNS_APP"
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
APP_SPEC = re.compile(rf"({_DOTTED}):({_DOTTED})")


class AppError(ConfigError):
    """The app named by ``--app``/``TURNS_APP``/``app =`` cannot be loaded (one line)."""

    def __init__(self, message: str, *, usage: bool) -> None:
        super().__init__(message)
        self.usage = usage
        """The name given is wrong (exit 2), rather than the app itself (exit 1)."""


@dataclass(frozen=True)
class App:
    """What an app defines: agents, tools, Python models and permission lists.

    ``models`` maps a name to a Python function, served as ``scripted/NAME``.
    ``Turns(...)`` holds one (``Turns.app``); define an ``App`` directly for a
    module that should not construct a runtime at import.
    """

    agents: Sequence[Agent] = ()
    tools: Sequence[Tool] = ()
    models: Mapping[str, ScriptFunction] = field(default_factory=dict)
    default_agent: str | None = None
    default_model: str | None = None
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()


def parse_app_spec(spec: str, where: str = "--app") -> tuple[str, str]:
    """``(module, attribute)`` of ``MODULE:ATTR``; an ``AppError`` naming ``where`` if not."""
    found = APP_SPEC.fullmatch(spec.strip())
    if found is None:
        raise AppError(
            f"{where} {spec!r} is not MODULE:ATTR (for example app:turns, "
            "a module app.py whose `turns` is a Turns or an App)",
            usage=True,
        )
    return found.group(1), found.group(2)


def load_app(spec: str, search: Sequence[Path], where: str = "--app") -> App:
    """Import ``MODULE:ATTR`` (``search`` folders first on ``sys.path``) and return its ``App``."""
    module_name, attr = parse_app_spec(spec, where)
    for folder in reversed(search):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (
            module_name == exc.name or module_name.startswith(exc.name + ".")
        ):
            looked = ", ".join(str(s) for s in search)
            raise AppError(
                f"{where} {spec}: no module named {module_name!r} (looked in {looked} "
                "and the installed packages)",
                usage=True,
            ) from None
        raise AppError(
            f"{where} {spec}: importing {module_name} failed: {type(exc).__name__}: {exc}",
            usage=False,
        ) from None
    except BaseException as exc:  # SystemExit too: an app's import never ends the process
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise AppError(
            f"{where} {spec}: importing {module_name} raised {type(exc).__name__}: {exc}",
            usage=False,
        ) from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise AppError(
                f"{where} {spec}: module {module_name} has no attribute {attr!r}", usage=True
            )
        target = getattr(target, part)
    app = app_of(target)
    if app is None:
        raise AppError(
            f"{where} {spec} is {_a(type(target).__name__)}, not a turnclient Turns or App",
            usage=True,
        )
    return app


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def app_of(target: Any) -> App | None:
    """The ``App`` an object holds: itself, or a ``Turns``'s; None for anything else.

    A ``Turns`` is known by what it holds (its ``app``, an ``App``), not by
    its class: ``Turns`` wires the runtime, so the runtime does not import it
    (docs/architecture.md, the layout)."""
    if isinstance(target, App):
        return target
    held = getattr(target, "app", None)
    return held if isinstance(held, App) else None


__all__ = ["APP_ENV", "App", "AppError", "app_of", "load_app", "parse_app_spec"]
