"""MCP tools: servers from ``[mcp.NAME]``, listed once per turn, called as sync tools.

How it works:

- **Listing** (``McpListing``, the ``ListedTools`` of turn creation). Creating
  a turn lists the tools of each server the agent attaches (every page,
  bounded by ``CONNECT_TIMEOUT``): through the worker's session when a worker
  of the same process serves (``McpPool.active``), else over a short
  connection of its own. The
  tools become ordinary descriptors (``toolId`` ``mcp:NAME/TOOL``, the
  advertised name ``PREFIX_TOOL`` or ``TOOL``, the server's description and
  input schema verbatim) that ``turn_created`` snapshots; nothing lists again
  during the turn, and replay never talks to a server. A server that cannot
  be reached, or answers garbage, fails the creation with a
  ``DependencyError`` naming it, before any file is written.
- **Calls** (``McpPool``). Each worker keeps one session per server, opened
  on the first call that needs it (a stdio server is started then, by the
  worker) and closed when the worker stops (``serving``), which stops the
  stdio server too. A session whose transport died is replaced on the next
  call. The session lives in a task of its own because the SDK's transports
  are anyio task groups that must be entered and left by the same task.
- **Results** (``call_result``). ``isError`` is the error flag; text alone is
  the output as a string; ``structuredContent`` (with only text beside it,
  the SDK's mirror of it) is the output as JSON; images, audio and embedded
  resources keep their content parts (seed 000 ``image``/``audio``/``file``
  with one source; a text resource is a ``text`` part with its ``uri``), as
  ``{"content": [...], "structuredContent"?: ...}``.
- **Failures are results.** A server that refuses the connection, crashes,
  hangs past ``timeout`` or answers something that is not MCP gives an error
  result saying whether the call may have run (it is never retried: §23);
  the turn goes on. Cancelling the turn cancels the in-flight request, which
  sends MCP's ``notifications/cancelled``, and leaves the result to the
  workflow's synthetic one.
- **Permissions** (``McpPermissionChecker``) fail closed: an MCP tool needs
  approval unless its server says ``permission = "none"`` or lists it in
  ``allow``; the request carries ``{"kind": "mcp", "server", "tool", ...}``
  so surfaces show ``MCP NAME · TOOL`` and the classifier sees the same.

The SDK (the ``mcp`` extra) is imported where a connection is made, so a
configuration without ``[mcp.*]`` never needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from turnclient.runtime.config import ConfigError, McpServer
from turncore.errors import DependencyError
from turncore.events import ToolDescriptor, ToolResultData
from turncore.jsonvalue import JsonValue
from turncore.permissions import PermissionCheck, PermissionChecker, PermissionCheckInput
from turncore.tools import TOOL_NAME, ToolContext

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import CallToolResult
    from mcp_types import Tool as McpToolInfo

log = logging.getLogger("turnclient.mcp")

TOOL_ID_PREFIX = "mcp:"
CONNECT_TIMEOUT = 30.0
"""Seconds at most to start or reach a server and list its tools, or open a session for calls
(``timeout`` bounds each call, once connected: a slow-starting stdio server is not a hang)."""
CLOSE_TIMEOUT = 5.0
"""Seconds a closing session may take before its task is cancelled."""
_LIST_PAGES = 100
"""Pages of ``tools/list`` at most: a server whose cursor never ends cannot hang a creation."""


def tool_id(server: str, tool: str) -> str:
    return f"{TOOL_ID_PREFIX}{server}/{tool}"


def split_tool_id(value: str) -> tuple[str, str] | None:
    """``(server, tool)`` of an ``mcp:SERVER/TOOL`` id, or None for any other id."""
    if not value.startswith(TOOL_ID_PREFIX):
        return None
    server, sep, tool = value[len(TOOL_ID_PREFIX) :].partition("/")
    if not sep or not server or not tool:
        return None
    return server, tool


def _sdk() -> Any:
    try:
        import mcp
    except ImportError:
        from turnclient.runtime.extras import install_hint

        raise DependencyError(
            f"MCP servers ([mcp.*] in turns.toml) need the MCP SDK: {install_hint('mcp')}"
        ) from None
    return mcp


# ---------------------------------------------------------------- connecting


def _resolved_env(server: McpServer, env: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in server.env:
        value = env.get(name)
        if value is None:
            raise ConfigError(
                f"mcp.{server.name}.env: variable {name} is not set in this process "
                "(set it, or remove it from env)"
            )
        out[name] = value
    return out


def _headers(server: McpServer, env: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for header, variable in server.headers_env.items():
        value = env.get(variable)
        if value is None:
            raise ConfigError(
                f"mcp.{server.name}.headers_env.{header}: variable {variable} is not set in "
                "this process (set it, or remove the header)"
            )
        out[header] = value
    return out


@contextlib.asynccontextmanager
async def connect(server: McpServer, env: Mapping[str, str]) -> AsyncIterator[Client]:
    """An initialised client session to ``server`` for the block (stdio: the process runs
    for the block). Unset variables are ``ConfigError``s naming the key."""
    mcp = _sdk()
    target: Any
    if server.command is not None:
        target = mcp.StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=_resolved_env(server, env),
            cwd=str(server.cwd) if server.cwd is not None else None,
        )
        transport = mcp.stdio_client(target, errlog=sys.stderr)
    else:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        assert server.url is not None
        http = create_mcp_http_client(headers=_headers(server, env))
        transport = streamable_http_client(server.url, http_client=http)
        target = transport
    # "legacy" is the initialize handshake every MCP server speaks; no response
    # cache: a listing is taken once per turn and must be the server's own.
    client = mcp.Client(transport, mode="legacy", cache=None, read_timeout_seconds=None)
    async with client:
        yield client


def _describe(exc: BaseException) -> str:
    """An exception (or a group of them, from the SDK's task groups) in one line."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc).strip()
    if exc.__class__.__name__ == "MCPError":
        return text or "MCP error"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def list_tools(
    server: McpServer, env: Mapping[str, str], pool: McpPool | None = None
) -> list[McpToolInfo]:
    """Every tool ``server`` lists, in its order, asked now.

    Through ``pool``'s session when a worker in this process serves it (a
    stdio server is not started again for every turn), else over a
    connection of its own, closed after.
    """
    timeout = CONNECT_TIMEOUT
    try:
        async with asyncio.timeout(timeout):
            if pool is not None and pool.active:
                for attempt in (1, 2):
                    try:
                        return await _pages(server, await pool.client(server))
                    except BaseException as exc:
                        await pool.discard(server)  # the next call reconnects
                        if attempt == 2 or not _is_session_gone(exc):
                            raise
                        # the HTTP server ended the session: list on a new one
            async with connect(server, env) as client:
                return await _pages(server, client)
    except (ConfigError, DependencyError):
        raise
    except TimeoutError:
        raise DependencyError(
            f"MCP server {server.name} ({server.where}) did not list its tools within {timeout:g} s"
        ) from None
    except Exception as exc:
        raise DependencyError(
            f"MCP server {server.name} ({server.where}) cannot list its tools: {_describe(exc)}"
        ) from None


async def _pages(server: McpServer, client: Client) -> list[McpToolInfo]:
    tools: list[McpToolInfo] = []
    cursor: str | None = None
    for _ in range(_LIST_PAGES):
        page = await client.session.list_tools(params=_page(cursor))
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise DependencyError(f"MCP server {server.name} lists more than {_LIST_PAGES} pages of tools")


def _page(cursor: str | None) -> Any:
    from mcp_types import PaginatedRequestParams

    return PaginatedRequestParams(cursor=cursor) if cursor is not None else None


def descriptors(server: McpServer, tools: Iterable[McpToolInfo]) -> list[ToolDescriptor]:
    """The snapshot of ``tools``: denied ones left out, names prefixed, schemas verbatim.

    A tool whose advertised name models cannot call (1-64 letters, digits,
    ``_`` or ``-``) is a ``DependencyError`` that says to deny it or rename it.
    """
    out: list[ToolDescriptor] = []
    for t in tools:
        if t.name in server.deny:
            continue
        name = f"{server.prefix}_{t.name}" if server.prefix else t.name
        if not TOOL_NAME.fullmatch(name):
            raise DependencyError(
                f"MCP server {server.name} lists tool {t.name!r}, which models cannot call as "
                f"{name!r} (1-64 letters, digits, '_' or '-'); add it to mcp.{server.name}.deny "
                "or shorten the prefix"
            )
        out.append(
            ToolDescriptor(
                tool_id=tool_id(server.name, t.name),
                name=name,
                description=t.description or t.title or "",
                input_schema=t.input_schema,
                execution="sync",
                requires_human=False,
            )
        )
    return out


class McpListing:
    """``ListedTools`` for turn creation: each agent's servers, listed once, in its order."""

    def __init__(
        self,
        servers: Mapping[str, McpServer],
        attached: Mapping[str, Sequence[str]],
        env: Mapping[str, str],
        pool: McpPool | None = None,
    ) -> None:
        self._servers = dict(servers)
        self._attached = {agent: tuple(names) for agent, names in attached.items()}
        self._env = env
        self._pool = pool

    def attached(self, agent_id: str) -> tuple[str, ...]:
        return self._attached.get(agent_id, ())

    async def tools_for(self, agent_id: str) -> list[ToolDescriptor]:
        names = self.attached(agent_id)
        if not names:
            return []
        listed = await asyncio.gather(
            *(list_tools(self._servers[n], self._env, self._pool) for n in names),
            return_exceptions=True,
        )
        out: list[ToolDescriptor] = []
        for name, result in zip(names, listed, strict=True):
            if isinstance(result, BaseException):
                raise result
            out.extend(descriptors(self._servers[name], result))
        return out


# ---------------------------------------------------------------- results


def _part(block: Any) -> JsonValue:
    kind = getattr(block, "type", None)
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind in ("image", "audio"):
        return {"type": kind, "mediaType": block.mime_type, "data": block.data}
    if kind == "resource":
        resource = block.resource
        if hasattr(resource, "text"):
            return {"type": "text", "text": resource.text, "uri": str(resource.uri)}
        part: dict[str, JsonValue] = {
            "type": "file",
            "mediaType": resource.mime_type or "application/octet-stream",
            "data": resource.blob,
        }
        filename = PurePosixPath(str(resource.uri)).name
        if filename:
            part["filename"] = filename
        return part
    if kind == "resource_link":
        link: dict[str, JsonValue] = {
            "type": "file",
            "mediaType": block.mime_type or "application/octet-stream",
            "url": str(block.uri),
        }
        if block.name:
            link["filename"] = block.name
        return link
    return {"type": "text", "text": f"[unsupported MCP content {kind!r}]"}


def call_result(server: str, tool: str, result: CallToolResult) -> ToolResultData:
    """What the model sees of a ``tools/call`` result (see the module's docstring)."""
    parts = [_part(b) for b in result.content]
    texts = [p["text"] for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    only_text = len(texts) == len(parts) and not any(
        isinstance(p, dict) and "uri" in p for p in parts
    )
    output: JsonValue
    if result.structured_content is not None and only_text:
        output = result.structured_content
    elif only_text:
        output = "\n".join(t for t in texts if isinstance(t, str))
    else:
        envelope: dict[str, JsonValue] = {"content": parts}
        if result.structured_content is not None:
            envelope["structuredContent"] = result.structured_content
        output = envelope
    try:
        return ToolResultData(
            output=output,
            is_error=bool(result.is_error),
            metadata={"mcp": {"server": server, "tool": tool}},
        )
    except ValidationError as exc:
        return ToolResultData(
            output=f"MCP server {server} answered {tool} with a result that is not JSON: "
            f"{exc.errors(include_url=False)[0]['msg']}",
            is_error=True,
        )


# ---------------------------------------------------------------- sessions and calls


class _Session:
    """One open client session, owned by a task of its own (see the module's docstring)."""

    def __init__(self, server: McpServer, env: Mapping[str, str]) -> None:
        self.server = server
        self._env = env
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._own(), name=f"mcp session {server.name}")

    @property
    def alive(self) -> bool:
        return not self._task.done() and not self._stop.is_set()

    async def _own(self) -> None:
        try:
            async with connect(self.server, self._env) as client:
                self._ready.set_result(client)
                await self._stop.wait()
        except BaseException as exc:  # the transport died, or could not start
            if not self._ready.done():
                self._ready.set_exception(
                    exc if isinstance(exc, ConfigError) else ConnectionError(_describe(exc))
                )
            elif not isinstance(exc, asyncio.CancelledError):
                log.info("MCP server %s: session ended: %s", self.server.name, _describe(exc))
        finally:
            if not self._ready.done():
                self._ready.set_exception(ConnectionError("the session closed"))

    async def client(self, timeout: float) -> Client:
        async with asyncio.timeout(timeout):
            return await asyncio.shield(self._ready)

    async def close(self) -> None:
        self._stop.set()
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await asyncio.shield(self._task)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        except BaseException:
            pass
        if self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # retrieved: never "exception was never retrieved"


class McpPool:
    """One session per server for this process's worker; ``close`` stops them all."""

    def __init__(self, servers: Mapping[str, McpServer], env: Mapping[str, str]) -> None:
        self.servers = dict(servers)
        self._env = env
        self._sessions: dict[str, _Session] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._serving: asyncio.AbstractEventLoop | None = None

    @property
    def active(self) -> bool:
        """Whether a worker of this process serves through the pool, on the running loop."""
        try:
            return self._serving is asyncio.get_running_loop()
        except RuntimeError:
            return False

    def serve(self) -> None:
        """A worker starts serving in this loop: listings may use (and open) its sessions."""
        self._serving = asyncio.get_running_loop()

    def tool_for(self, descriptor: ToolDescriptor) -> McpTool:
        """The ``ToolRegistry`` family factory for ``mcp:`` ids."""
        parts = split_tool_id(descriptor.tool_id)
        if parts is None:
            raise DependencyError(f"{descriptor.tool_id!r} is not an MCP tool id (mcp:SERVER/TOOL)")
        server, tool = parts
        if server not in self.servers:
            known = ", ".join(sorted(self.servers)) or "none"
            # One message per server (not per tool): a turn lists many of its tools.
            raise DependencyError(
                f"the turn's tools mcp:{server}/* need MCP server {server!r}, which this "
                f"runtime does not configure ([mcp.{server}] in turns.toml; configured: {known})"
            )
        return McpTool(self, self.servers[server], tool)

    def _session(self) -> dict[str, _Session]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # sessions belong to the loop that opened them
            self._sessions, self._loop = {}, loop
        return self._sessions

    async def client(self, server: McpServer) -> Client:
        sessions = self._session()
        session = sessions.get(server.name)
        if session is None or not session.alive:
            dead, session = session, _Session(server, self._env)
            sessions[server.name] = session  # before any await: concurrent calls share it
            if dead is not None:
                await dead.close()
        try:
            return await session.client(CONNECT_TIMEOUT)
        except BaseException:
            if sessions.get(server.name) is session:
                del sessions[server.name]
            await session.close()
            raise

    async def discard(self, server: McpServer) -> None:
        """Forget a session whose connection failed; the next call opens a new one."""
        session = self._sessions.pop(server.name, None)
        if session is not None:
            await session.close()

    async def close(self) -> None:
        self._serving = None
        sessions, self._sessions = self._sessions, {}
        if self._loop is None or self._loop is not asyncio.get_running_loop():
            return
        await asyncio.gather(*(s.close() for s in sessions.values()))


def _session_gone(call: asyncio.Task[Any]) -> bool:
    """Whether the request failed because the HTTP server ended the session (404 on it)."""
    if call.cancelled():
        return False
    exc = call.exception()
    return exc is not None and _is_session_gone(exc)


def _is_session_gone(exc: BaseException) -> bool:
    if exc.__class__.__name__ != "MCPError":
        return False
    from mcp_types import INVALID_REQUEST

    message = str(getattr(getattr(exc, "error", None), "message", ""))
    return getattr(exc, "code", None) == INVALID_REQUEST and message in (
        "Session not found",
        "Session terminated",
    )


class McpTool:
    """A snapshotted MCP tool, run through the pool's session (a ``SyncTool``)."""

    def __init__(self, pool: McpPool, server: McpServer, tool: str) -> None:
        self._pool = pool
        self._server = server
        self._tool = tool

    async def execute(self, input: JsonValue, context: ToolContext) -> ToolResultData:
        server, tool = self._server, self._tool
        if not isinstance(input, dict):
            return ToolResultData(
                output=f"Invalid arguments for MCP tool {tool}: not an object", is_error=True
            )
        call = await self._attempt(input, context)
        if isinstance(call, ToolResultData):
            return call
        if server.url is not None and _session_gone(call):
            # The HTTP server no longer knows the session (it restarted, or
            # expired it): it refused the request without running it, and MCP
            # says to start a new session. Once, on a new one.
            await self._pool.discard(server)
            call = await self._attempt(input, context)
            if isinstance(call, ToolResultData):
                return call
        return await self._result(call)

    async def _attempt(
        self, input: dict[str, JsonValue], context: ToolContext
    ) -> asyncio.Task[CallToolResult] | ToolResultData:
        """The finished request, or the error result when the server cannot be reached."""
        server = self._server
        try:
            client = await self._pool.client(server)
        except ConfigError as exc:
            return ToolResultData(output=f"{exc}. The tool was not called.", is_error=True)
        except (TimeoutError, ConnectionError, OSError) as exc:
            reason = (
                "it did not answer in time" if isinstance(exc, TimeoutError) else _describe(exc)
            )
            return ToolResultData(
                output=f"MCP server {server.name} ({server.where}) could not be reached: {reason}. "
                "The tool was not called.",
                is_error=True,
            )
        call = asyncio.create_task(self._call(client, input, context))
        stop = asyncio.create_task(context.cancelled.wait())
        try:
            await asyncio.wait({call, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not call.done():
            # The turn is being cancelled: cancelling the request sends MCP's
            # notifications/cancelled; the workflow records the synthetic result.
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            raise asyncio.CancelledError
        return call

    async def _call(
        self, client: Client, input: dict[str, JsonValue], context: ToolContext
    ) -> CallToolResult:
        from mcp_types import CallToolRequest, CallToolRequestParams, CallToolResult

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            # MCP progress notifications become the call's tool_progress events.
            update: dict[str, JsonValue] = {"progress": progress}
            if total is not None:
                update["total"] = total
            if message:
                update["message"] = message
            try:
                await context.report_progress(update)
            except Exception as exc:  # e.g. progress arriving after the result: not the call's
                log.warning("MCP server %s: progress not recorded: %s", self._server.name, exc)

        # send_request, not call_tool: the SDK's call_tool lists the server's
        # tools to validate structured output, and nothing lists during a turn.
        result: CallToolResult = await client.session.send_request(
            CallToolRequest(params=CallToolRequestParams(name=self._tool, arguments=input)),
            CallToolResult,
            request_read_timeout_seconds=self._server.timeout,
            progress_callback=on_progress,
        )
        return result

    async def _result(self, call: asyncio.Task[CallToolResult]) -> ToolResultData:
        server, tool = self._server, self._tool
        try:
            return call_result(server.name, tool, call.result())
        except ValidationError as exc:
            await self._pool.discard(server)
            problem = exc.errors(include_url=False)[0]["msg"] if exc.errors() else str(exc)
            text = (
                f"MCP server {server.name} answered {tool} with something that is not an MCP "
                f"result ({problem}); its outcome is unknown and it was not retried."
            )
        except Exception as exc:
            code = getattr(exc, "code", None)
            from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

            if code == REQUEST_TIMEOUT:
                text = (
                    f"MCP server {server.name} did not answer {tool} within {server.timeout:g} s; "
                    "the request was cancelled, its outcome is unknown and it was not retried."
                )
            elif code == CONNECTION_CLOSED or isinstance(exc, (ConnectionError, OSError)):
                await self._pool.discard(server)
                text = (
                    f"MCP server {server.name} closed the connection during {tool}; its outcome "
                    "is unknown and it was not retried."
                )
            elif code is not None:
                text = f"MCP server {server.name} refused {tool}: {_describe(exc)}"
            else:
                await self._pool.discard(server)
                text = (
                    f"MCP call {tool} on server {server.name} failed: {_describe(exc)}; its "
                    "outcome is unknown and it was not retried."
                )
        return ToolResultData(
            output=text, is_error=True, metadata={"mcp": {"server": server.name, "tool": tool}}
        )


# ---------------------------------------------------------------- permissions


class McpPermissionChecker:
    """Fail-closed permissions for ``mcp:`` tools, ``inner`` for every other tool."""

    def __init__(self, inner: PermissionChecker, servers: Mapping[str, McpServer]) -> None:
        self._inner = inner
        self._servers = dict(servers)

    async def check(self, input: PermissionCheckInput) -> PermissionCheck:
        parts = split_tool_id(input.tool_id)
        if parts is None:
            return await self._inner.check(input)
        server_name, tool = parts
        server = self._servers.get(server_name)
        if server is not None and (server.permission == "none" or tool in server.allow):
            return PermissionCheck(required=False)
        return PermissionCheck(
            required=True,
            request={
                "kind": "mcp",
                "server": server_name,
                "tool": tool,
                "toolName": input.tool_name,
                "input": input.input,
            },
        )


def mcp_rule_names(request: JsonValue) -> tuple[str, ...]:
    """The ``[permissions]`` names an MCP permission request matches: ``mcp:S/T``, ``mcp:S/*``."""
    if isinstance(request, dict) and request.get("kind") == "mcp":
        server, tool = request.get("server"), request.get("tool")
        if isinstance(server, str) and isinstance(tool, str):
            return (tool_id(server, tool), tool_id(server, "*"))
    return ()


__all__ = [
    "McpListing",
    "McpPermissionChecker",
    "McpPool",
    "McpTool",
    "call_result",
    "connect",
    "descriptors",
    "list_tools",
    "mcp_rule_names",
    "split_tool_id",
    "tool_id",
]
