"""A real MCP server for the tests, written with the official SDK's server side.

``python -m tests.mcp_server stdio LOG`` serves over stdio;
``python -m tests.mcp_server http LOG PORT`` serves streamable HTTP on
127.0.0.1:PORT (path ``/mcp``). LOG is a file the server appends one line to
per event (``started slow``, ``cancelled slow``...), so tests can see what
reached the server. If ``MCP_TOOLS_FILE`` names a file that exists when the
tools are listed, its first line replaces the ``echo`` tool's description and
a line ``extra`` lists the ``extra`` tool too (a server whose tools change
while it runs); LOG.pid holds the process id; ``MCP_TOKEN`` (when set) is required as the HTTP
``Authorization`` header.
"""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import BlobResourceContents, EmbeddedResource, TextContent

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def build(log: Path) -> MCPServer:
    def note(line: str) -> None:
        with log.open("a", encoding="utf-8") as f:
            f.write(line + "\n")

    server = ChangingServer("turncore-test")

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        note(f"echo {text}")
        return text

    @server.tool()
    def weather(city: str) -> dict[str, Any]:
        """The weather in a city, as JSON."""
        note(f"weather {city}")
        return {"city": city, "celsius": 21}

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails with the given reason."""
        raise ToolError(f"failed: {reason}")

    @server.tool()
    def picture() -> Image:
        """A one-pixel PNG."""
        return Image(data=PNG, format="png")

    @server.tool()
    def document() -> list[Any]:
        """A text block and an embedded binary resource."""
        return [
            TextContent(type="text", text="here it is"),
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(
                    uri="file:///docs/report.pdf",
                    mime_type="application/pdf",
                    blob=base64.b64encode(b"%PDF-1.4").decode(),
                ),
            ),
        ]

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        note("started slow")
        try:
            await anyio.sleep(seconds)
        except BaseException:
            note("cancelled slow")
            raise
        note("finished slow")
        return f"slept {seconds}"

    @server.tool()
    async def steps(count: int, ctx: Context) -> str:
        """Report progress COUNT times, then answer."""
        for i in range(count):
            await ctx.report_progress(i + 1, count, f"step {i + 1}")
        return f"{count} steps"

    @server.tool()
    def crash() -> str:
        """Kill the server in the middle of the call."""
        note("crash called")
        os._exit(3)

    @server.tool()
    def garbage() -> str:
        """Write something that is not JSON-RPC where the answer should be."""
        note("garbage called")
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
        os._exit(0)

    @server.tool()
    def extra() -> str:
        """A tool that appears later (listed once MCP_TOOLS_FILE says ``extra``)."""
        return "extra"

    return server


class ChangingServer(MCPServer):
    """Lists what ``MCP_TOOLS_FILE`` says at the moment it is asked."""

    async def list_tools(self) -> list[Any]:
        tools_file = os.environ.get("MCP_TOOLS_FILE")
        path = Path(tools_file) if tools_file else None
        lines = path.read_text().splitlines() if path is not None and path.exists() else []
        out = []
        for t in await super().list_tools():
            if t.name == "extra" and "extra" not in lines:
                continue
            if t.name == "echo" and lines:
                t = t.model_copy(update={"description": lines[0]})
            out.append(t)
        return out


def main() -> None:
    transport, log = sys.argv[1], Path(sys.argv[2])
    log.with_name(log.name + ".pid").write_text(str(os.getpid()))  # tests check it stops
    server = build(log)
    if transport == "stdio":
        server.run("stdio")
        return
    port = int(sys.argv[3])
    app = server.streamable_http_app()
    token = os.environ.get("MCP_TOKEN")
    if token is not None:
        inner = app

        async def guarded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = dict(scope.get("headers") or [])
                if headers.get(b"authorization") != f"Bearer {token}".encode():
                    await send({"type": "http.response.start", "status": 401, "headers": []})
                    await send({"type": "http.response.body", "body": b"no"})
                    return
            await inner(scope, receive, send)

        app = guarded  # type: ignore[assignment]
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
