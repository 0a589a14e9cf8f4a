"""Serving the web UI with uvicorn, inside an asyncio program that already runs.

``web_ui`` binds the socket itself (so a port already in use can fall back
to a free one, and port 0 works), then runs a ``uvicorn.Server`` on it as a
task for the block: ``turns ui``, ``turns dev`` and the tests all use it.
The caller owns the signals; leaving the block stops the server (open SSE
streams get ``timeout_graceful_shutdown`` seconds to finish).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import os
import re
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

from ._tokens import Tokens, TokensFileError

TOKEN_ENV = "TURNS_UI_TOKEN"
TOKENS_FILE_ENV = "TURNS_UI_TOKENS_FILE"
_TOKEN = re.compile(r"[A-Za-z0-9._~-]{16,512}")


class UiConfigError(ValueError):
    """The UI cannot be served as asked (a bad token, a non-loopback bind without one)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(host: str, token: str | None, *, tokens_file: bool = False) -> str | None:
    """The token to require, or None on loopback without one (or with a tokens file);
    raises ``UiConfigError``."""
    if token is not None and not _TOKEN.fullmatch(token):
        raise UiConfigError(
            "the UI token must be 16 to 512 characters of A-Z a-z 0-9 . _ ~ - "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)"
        )
    if token is None and not tokens_file and not is_loopback(host):
        raise UiConfigError(
            f"binding the UI to {host} (not loopback) requires a token: --token, "
            f"${TOKEN_ENV} or --tokens-file"
        )
    return token


def load_tokens(path: str | None) -> Tokens | None:
    """The tokens file at ``path`` (or ``$TURNS_UI_TOKENS_FILE``), None if neither is given;
    a malformed file raises ``UiConfigError`` naming the line."""
    given = path if path is not None else (os.environ.get(TOKENS_FILE_ENV) or None)
    if given is None:
        return None
    try:
        return Tokens.load(given)
    except TokensFileError as exc:
        raise UiConfigError(str(exc)) from None


def token_from(given: str | None) -> str | None:
    return given if given is not None else (os.environ.get(TOKEN_ENV) or None)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the program that runs the loop owns
    SIGINT/SIGTERM (``turns ui``, ``turns dev``) and ends the block to stop serving."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass(frozen=True)
class WebUi:
    url: str
    host: str
    port: int
    stopped: asyncio.Task[None]
    """Ends if the server stops on its own (it failed)."""


def _bind(host: str, port: int, *, fallback: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        if not (fallback and exc.errno == errno.EADDRINUSE):
            sock.close()
            raise
        sock.bind((host.strip("[]"), 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def web_ui(
    app: ASGIApp, host: str = "127.0.0.1", port: int = 8300, *, fallback: bool = False
) -> AsyncIterator[WebUi]:
    """Serve ``app`` for the block on ``host:port`` (any free port with ``fallback``)."""
    sock = _bind(host, port, fallback=fallback)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        access_log=False,
        timeout_graceful_shutdown=2,
        ws="none",
    )
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
                raise OSError("the web UI stopped while starting")
            await asyncio.sleep(0.01)
        shown = f"[{host.strip('[]')}]" if ":" in host.strip("[]") else host
        yield WebUi(f"http://{shown}:{bound}", host, bound, task)
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()


__all__ = [
    "TOKENS_FILE_ENV",
    "TOKEN_ENV",
    "UiConfigError",
    "WebUi",
    "check_token",
    "is_loopback",
    "load_tokens",
    "token_from",
    "web_ui",
]
