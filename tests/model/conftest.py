"""A real HTTP/1.1 server on 127.0.0.1 that replays provider wire formats.

Each test queues :class:`Reply` objects; the server answers requests in order.
A reply can stream chunks (bytes, pauses, or an event to wait for), answer
with an error status and headers, or reset the connection (TCP RST) before
or after the response headers. Every request is recorded, and the server
notes when a client hangs up in the middle of a stream.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from turncore.model import ModelFailure, SinkFailure, StreamEvent

API_KEY = "sk-test-CANARY-0123456789abcdef"
UPSTREAM_TEXT = "UPSTREAM-DIAGNOSTIC-CANARY"


@dataclass
class Hold:
    """Pause the stream until ``release`` is set (or the client hangs up)."""

    release: asyncio.Event = field(default_factory=asyncio.Event)


Chunk = bytes | float | Hold


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    chunks: list[Chunk] = field(default_factory=list)
    body: bytes | None = None
    """A whole (non-streamed) body sent with content-length."""
    reset_before_headers: bool = False
    reset_after_chunks: bool = False


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


class FakeProvider:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self.client_hung_up = asyncio.Event()
        self.stream_finished = asyncio.Event()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            self.client_hung_up.set()
        finally:
            if not writer.transport.is_closing():
                writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        line = await reader.readline()
        if not line:
            return False
        method, path, _ = line.decode().split(" ", 2)
        headers: dict[str, str] = {}
        while True:
            h = await reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.received.append(Received(method, path, headers, body))
        reply = self.replies.popleft() if self.replies else Reply(status=599, body=b"{}")
        if reply.reset_before_headers:
            _reset(writer)
            return False
        head = [f"HTTP/1.1 {reply.status} X"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        if reply.body is not None:
            head.append(f"content-length: {len(reply.body)}")
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + reply.body)
            await writer.drain()
            return True
        head.append("transfer-encoding: chunked")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        await writer.drain()
        for chunk in reply.chunks:
            if isinstance(chunk, float):
                await asyncio.sleep(chunk)
            elif isinstance(chunk, Hold):
                if not await _hold(chunk, reader):
                    self.client_hung_up.set()
                    return False
            else:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
        if reply.reset_after_chunks:
            _reset(writer)
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        self.stream_finished.set()
        return True


async def _hold(hold: Hold, reader: asyncio.StreamReader) -> bool:
    """Wait for release; False when the client hung up first."""
    released = asyncio.ensure_future(hold.release.wait())
    eof = asyncio.ensure_future(reader.read(1))
    done, pending = await asyncio.wait({released, eof}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return released in done


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    server = FakeProvider()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(retries=0), timeout=10.0)
    yield client
    await client.aclose()


# ---------------------------------------------------------------- helpers


def sse(data: Any, event: str | None = None) -> bytes:
    """One SSE event; ``data`` is JSON-encoded unless it is already a string."""
    text = data if isinstance(data, str) else orjson.dumps(data).decode()
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def stream(events: Iterable[bytes]) -> list[Chunk]:
    return list(events)


class Collect:
    """A sink that records events; optional per-event hook."""

    def __init__(self) -> None:
        self.events: list[StreamEvent] = []

    async def __call__(self, event: StreamEvent) -> None:
        self.events.append(event)


def assert_redacted(failure: ModelFailure) -> None:
    """No secret, upstream text or request body anywhere on a failure."""
    texts = [
        str(failure),
        repr(failure),
        failure.summary(),
        failure.detail,
        *map(str, failure.args),
    ]
    texts += [repr(v) for v in vars(failure).values()]
    texts.append(repr(pickle.loads(pickle.dumps(failure)).__dict__))
    for text in texts:
        assert API_KEY not in text
        assert "CANARY" not in text
        assert "Bearer" not in text
        assert "x-api-key" not in text.lower()
    # nothing chained that could hold an httpx.Request (and so its headers)
    assert failure.__context__ is None
    assert failure.__cause__ is None or isinstance(failure, SinkFailure)
