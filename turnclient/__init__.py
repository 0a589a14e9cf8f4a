"""The client side of turncore: the ``turns`` command line, the Temporal client API,
and the library entry point ``Turns``.

Modules here may import ``temporalio`` (``turncore`` may not). ``cli`` keeps
its Temporal imports inside the commands that need them, so file-only
commands such as ``turns validate`` start quickly and work without a server;
for the same reason the library names below are imported on first use.

    from turnclient import Agent, Turns, tool
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from turncore._lazy import lazy_exports

if TYPE_CHECKING:
    from turncore.errors import (
        DependencyError,
        InvalidInputError,
        InvalidTurnIdError,
        RejectedInputError,
        TurnError,
        TurnNotFoundError,
    )
    from turncore.tools import Tool, ToolContext, ToolError, tool

    from .app import App, AppError
    from .config import Agent, ConfigError
    from .listing import TurnSummary
    from .turns import TurnResult, Turns

_EXPORTS = {
    "Agent": ".config",
    "App": ".app",
    "AppError": ".app",
    "ConfigError": ".config",
    "Turns": ".turns",
    "TurnResult": ".turns",
    "TurnSummary": ".listing",
    "Tool": "turncore.tools",
    "ToolContext": "turncore.tools",
    "ToolError": "turncore.tools",
    "tool": "turncore.tools",
    "DependencyError": "turncore.errors",
    "InvalidInputError": "turncore.errors",
    "InvalidTurnIdError": "turncore.errors",
    "RejectedInputError": "turncore.errors",
    "TurnError": "turncore.errors",
    "TurnNotFoundError": "turncore.errors",
}


__all__ = [
    "Agent",
    "App",
    "AppError",
    "ConfigError",
    "DependencyError",
    "InvalidInputError",
    "InvalidTurnIdError",
    "RejectedInputError",
    "Tool",
    "ToolContext",
    "ToolError",
    "TurnError",
    "TurnNotFoundError",
    "TurnResult",
    "TurnSummary",
    "Turns",
    "tool",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
