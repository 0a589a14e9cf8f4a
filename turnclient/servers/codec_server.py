"""``turns codec-server``: Temporal's remote codec endpoints over the payload codec.

Temporal Web and ``temporal workflow show --codec-endpoint`` POST
``{"payloads": [...]}`` (payloads in protobuf JSON: base64 metadata values
and data) to ``/decode`` (and ``/encode``) and show what comes back. This
server answers with the same ``EncryptionCodec`` the client and workers use,
so whoever can reach it and holds its token reads the turn's payloads in
clear — which is why it needs a token (``Authorization: Bearer …``) and
answers browsers only from the origins it is told (Temporal Web's;
``http://localhost:8233`` by default), and binds to loopback unless told
otherwise. Without a token (``--no-token``, loopback only) it answers only
requests addressed to a loopback host name, so a web page elsewhere cannot
reach it by rebinding its own name to 127.0.0.1 (DNS rebinding).

A request is authorised before its body is read, and a body must announce its
length (at most ``MAX_BODY``). A whole request — the wait for it on a kept-alive
connection, its request line, headers and body — must arrive within
``BODY_TIMEOUT`` seconds, however slowly its bytes trickle in, and at most
``MAX_CONNECTIONS`` connections are served at once (more are answered 503 at
once, without a thread), so a caller without the token can hold neither memory
nor more than a bounded number of threads for a bounded time.

It is the standard library's threading HTTP server, not an ASGI app: two
JSON endpoints with a synchronous codec need no framework, and the command
then works in any turncore install, without the web extra.
"""

from __future__ import annotations

import contextlib
import hmac
import io
import ipaddress
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads
from temporalio.exceptions import ApplicationError

from turnclient.runtime.codec import EncryptionCodec

log = logging.getLogger("turncore.codec_server")

MAX_BODY = 8 * 1024 * 1024
BODY_TIMEOUT = 30.0
"""Seconds a whole request (the wait for it, its headers, then its body) may take to arrive."""
MAX_CONNECTIONS = 32
"""Connections served at once; one more is answered 503 and closed."""
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
DEFAULT_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"


class CodecServer:
    """A running codec server (started by ``start``, stopped by ``stop``)."""

    def __init__(
        self,
        codec: EncryptionCodec,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None,
        origins: Sequence[str] = DEFAULT_ORIGINS,
        body_timeout: float = BODY_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.codec = codec
        self.token = token
        self.origins = frozenset(o.rstrip("/") for o in origins)
        self.body_timeout = body_timeout
        self._httpd = _Server((host, port), _handler(self), max_connections)
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> CodecServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def authorised(self, header: str | None) -> bool:
        if self.token is None:
            return True
        expected = f"Bearer {self.token}"
        return header is not None and hmac.compare_digest(header.encode(), expected.encode())

    def host_allowed(self, header: str | None) -> bool:
        """With a token, any ``Host``; without one, only a loopback name (no DNS rebinding)."""
        return self.token is not None or _loopback_host(header or "")

    def transform(self, path: str, body: bytes) -> bytes:
        """The answer to ``/encode`` or ``/decode``; raises ValueError on a bad request."""
        try:
            message = json_format.Parse(body, Payloads(), ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a JSON {{payloads: [...]}} document: {exc}") from None
        if path == "/encode":
            out = self.codec.encode_sync(list(message.payloads))
        else:
            out = self.codec.decode_sync(list(message.payloads))
        return json_format.MessageToJson(Payloads(payloads=out), indent=None).encode()


def _loopback_host(header: str) -> bool:
    """Whether a ``Host`` header names loopback: ``localhost``, ``[::1]``, 127.0.0.0/8."""
    host = header.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else ""
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_BUSY_BODY = b'{"error": "too many connections: retry in a moment"}'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nConnection: close\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)


class _Server(ThreadingHTTPServer):
    """The stdlib's threading server with a cap on the threads it starts."""

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], slots: int
    ) -> None:
        self._slots = threading.BoundedSemaphore(slots)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            # Answered here, on the accepting thread: no thread for a connection over the cap.
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(_BUSY)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A caller that hangs up mid-answer (Temporal Web closing a tab) is routine:
        nothing to report. Anything else goes to the ``turncore.codec_server`` log
        rather than straight to stderr."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            return
        log.error("codec server: a request from %s failed", client_address[0], exc_info=exc)


def _handler(server: CodecServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "turns-codec-server"
        timeout = server.body_timeout  # the socket's: headers and body alike

        deadline = 0.0
        """When the request being read must have arrived (monotonic seconds)."""

        def setup(self) -> None:
            super().setup()
            self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self))

        def handle_one_request(self) -> None:
            # The socket timeout alone is per read: a sender dripping a header
            # line every few seconds would hold the thread forever.
            self.deadline = time.monotonic() + server.body_timeout
            super().handle_one_request()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # never log request lines; payloads stay out of logs

        def _cors(self) -> None:
            origin = (self.headers.get("Origin") or "").rstrip("/")
            if origin and origin in server.origins:
                self.send_header("Access-Control-Allow-Origin", origin)
                self.send_header("Access-Control-Allow-Credentials", "true")
                self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
                self.send_header("Access-Control-Allow-Headers", ALLOWED_HEADERS)
                self.send_header("Vary", "Origin")

        def _reply(self, status: HTTPStatus, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self._cors()
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: HTTPStatus, message: str) -> None:
            self._reply(status, json.dumps({"error": message}).encode())

        def do_OPTIONS(self) -> None:  # noqa: N802 (the stdlib's naming)
            self.send_response(HTTPStatus.NO_CONTENT)
            self._cors()
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _refuse(self, status: HTTPStatus, message: str) -> None:
            # The body (if any) is left unread, so the connection cannot be reused.
            self.close_connection = True
            self._error(status, message)

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0].rstrip("/")
            if not server.host_allowed(self.headers.get("Host")):
                self._refuse(HTTPStatus.FORBIDDEN, "without a token, only a loopback Host")
                return
            if not server.authorised(self.headers.get("Authorization")):
                self._refuse(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
                return
            if path not in ("/encode", "/decode"):
                self._refuse(HTTPStatus.NOT_FOUND, "POST /encode or /decode")
                return
            announced = self.headers.get("Content-Length")
            if announced is None:
                self._refuse(HTTPStatus.LENGTH_REQUIRED, "a body with a Content-Length")
                return
            announced = announced.strip()
            if not (announced.isascii() and announced.isdigit()):
                self._refuse(HTTPStatus.BAD_REQUEST, "Content-Length is not a byte count")
                return
            length = int(announced)
            if length > MAX_BODY:
                self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body over {MAX_BODY} bytes")
                return
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                self._refuse(
                    HTTPStatus.REQUEST_TIMEOUT, f"the request took over {server.body_timeout:g} s"
                )
                return
            if len(body) < length:
                self.close_connection = True  # the caller hung up mid-body
                return
            try:
                answer = server.transform(path, body)
            except ValueError as exc:
                self._error(HTTPStatus.BAD_REQUEST, str(exc))
                return
            except ApplicationError as exc:  # a payload under a key this server lacks
                self._error(HTTPStatus.UNPROCESSABLE_ENTITY, exc.message)
                return
            self._reply(HTTPStatus.OK, answer)

        def do_GET(self) -> None:  # noqa: N802
            self._error(HTTPStatus.METHOD_NOT_ALLOWED, "POST /encode or /decode")

    return Handler


class _DeadlineReader(io.RawIOBase):
    """A connection's bytes, each read bounded by what is left of the request's time."""

    def __init__(self, sock: socket.socket, handler: Any) -> None:
        super().__init__()
        self._sock = sock
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._handler.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's time is up")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


__all__ = ["DEFAULT_ORIGINS", "CodecServer"]
