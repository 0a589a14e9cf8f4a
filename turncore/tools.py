"""Live tool implementations and their registry (spec §6.5, §10.1).

Descriptors are snapshotted in ``turn_created``; the registry materializes
them into live implementations when a turn advances. Only sync tools have an
executor; an async tool's request is exposed and its result arrives later as
an external input.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import DependencyError
from .events import ToolDescriptor, ToolResultData
from .jsonvalue import JsonValue, json_problem
from .subagents import SPAWN_AGENT_TOOL_ID, WORKFLOW_TOOL_PREFIX

ReportProgress = Callable[[JsonValue], Awaitable[None]]


@dataclass(frozen=True)
class ToolContext:
    """What a running sync tool may use: its identity, a cancellation signal and
    a progress callback that returns only once the progress is durable (§10.4)."""

    turn_id: str
    tool_call_id: str
    cancelled: asyncio.Event
    report_progress: ReportProgress


class SyncTool(Protocol):
    async def execute(self, input: JsonValue, context: ToolContext) -> ToolResultData: ...


ToolFunction = Callable[[Any, ToolContext], Any]
"""``fn(input, context)``, sync or async, returning a JSON output or a ToolResultData."""


class FunctionTool:
    """A sync tool from a plain function. Exceptions become error results (§21.2)."""

    def __init__(self, fn: ToolFunction) -> None:
        self._fn = fn

    async def execute(self, input: JsonValue, context: ToolContext) -> ToolResultData:
        if inspect.iscoroutinefunction(self._fn):
            value = await self._fn(input, context)
        else:
            value = await asyncio.to_thread(self._fn, input, context)
        if isinstance(value, ToolResultData):
            return value
        problem = json_problem(value, "output")
        if problem is not None:
            return ToolResultData(
                output=f"Tool returned a non-JSON value: {problem}", is_error=True
            )
        return ToolResultData(output=value, is_error=False)


class ToolRegistry:
    """Maps stable ``toolId`` values to live sync implementations.

    Async tools need no implementation, only a matching declaration: a
    descriptor whose ``toolId`` is unknown here, or whose execution mode
    differs from what is registered, is a dependency mismatch (§15.3).
    """

    def __init__(
        self,
        sync_tools: Mapping[str, SyncTool] | None = None,
        async_tools: frozenset[str] | set[str] = frozenset(),
    ) -> None:
        self._sync = dict(sync_tools or {})
        self._async = frozenset(async_tools)

    def register(self, tool_id: str, tool: SyncTool) -> None:
        self._sync[tool_id] = tool

    def sync_tool(self, descriptor: ToolDescriptor) -> SyncTool:
        self.check(descriptor)
        return self._sync[descriptor.tool_id]

    def check(self, descriptor: ToolDescriptor) -> None:
        """Raise ``DependencyError`` unless the descriptor can run here as snapshotted."""
        tid = descriptor.tool_id
        if tid.startswith(WORKFLOW_TOOL_PREFIX):
            if tid != SPAWN_AGENT_TOOL_ID:
                raise DependencyError(f"no workflow-native tool {tid!r} exists in this runtime")
            return  # implemented by the turn workflow itself
        if descriptor.execution == "sync":
            if tid not in self._sync:
                hint = " (it is registered as async)" if tid in self._async else ""
                raise DependencyError(
                    f"no sync implementation is registered for tool {tid!r}{hint}"
                )
        elif tid not in self._async:
            hint = " (it is registered as sync)" if tid in self._sync else ""
            raise DependencyError(f"async tool {tid!r} is not declared in this runtime{hint}")

    def check_all(self, descriptors: list[ToolDescriptor]) -> None:
        for d in descriptors:
            self.check(d)
