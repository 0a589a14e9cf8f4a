"""turncore's one public import root: everything a user's code writes.

    from turnclient import Agent, Turns, tool

``Turns`` runs turns from Python; ``Agent`` and ``tool`` declare what a turn
may do; the typed errors are what its calls raise; ``run_worker`` serves
turns (what ``turns worker`` runs); ``TurnOutcome`` and ``ModelCallRequest``
are the types a result and a scripted model's decisions are written in.

The package is laid out by role (``docs/architecture.md`` has the table):
``turnclient.cli`` (the ``turns`` command), ``turnclient.lib`` (the library),
``turnclient.runtime`` (configuration, connection, embedded server, storage,
telemetry), ``turnclient.servers`` (the web UI, the codec server) and
``turnclient.builtins`` (what runs inside workers: built-in tools, the demo
model). Modules here may import ``temporalio`` (``turncore`` may not).

Every name below is imported on first use (``turncore.lazy``), so
``import turnclient.cli`` for a command that only reads a file loads
neither Temporal nor the library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from turncore.lazy import lazy_exports

if TYPE_CHECKING:
    from turnclient.lib.listing import TurnSummary
    from turnclient.runtime.app import App, AppError
    from turnclient.runtime.config import Agent, ConfigError, McpServer, SummariseDropped
    from turnclient.runtime.connection import Runtime
    from turnclient.turns import TurnResult, Turns
    from turncore.errors import (
        DependencyError,
        InvalidInputError,
        InvalidTurnIdError,
        RejectedInputError,
        StuckTurnError,
        TurnError,
        TurnNotFoundError,
    )
    from turncore.events import TurnOutcome
    from turncore.model import ModelCallRequest
    from turncore.tools import Tool, ToolContext, ToolError, tool
    from turncore_temporal.worker import run_worker

_EXPORTS = {
    "Agent": "turnclient.runtime.config",
    "App": "turnclient.runtime.app",
    "AppError": "turnclient.runtime.app",
    "ConfigError": "turnclient.runtime.config",
    "McpServer": "turnclient.runtime.config",
    "SummariseDropped": "turnclient.runtime.config",
    "Turns": "turnclient.turns",
    "TurnResult": "turnclient.turns",
    "TurnSummary": "turnclient.lib.listing",
    "Runtime": "turnclient.runtime.connection",
    "run_worker": "turncore_temporal.worker",
    "TurnOutcome": "turncore.events",
    "ModelCallRequest": "turncore.model",
    "Tool": "turncore.tools",
    "ToolContext": "turncore.tools",
    "ToolError": "turncore.tools",
    "tool": "turncore.tools",
    "DependencyError": "turncore.errors",
    "InvalidInputError": "turncore.errors",
    "InvalidTurnIdError": "turncore.errors",
    "RejectedInputError": "turncore.errors",
    "StuckTurnError": "turncore.errors",
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
    "McpServer",
    "RejectedInputError",
    "StuckTurnError",
    "SummariseDropped",
    "ModelCallRequest",
    "Runtime",
    "Tool",
    "ToolContext",
    "ToolError",
    "TurnError",
    "TurnNotFoundError",
    "TurnOutcome",
    "TurnResult",
    "TurnSummary",
    "Turns",
    "run_worker",
    "tool",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)
