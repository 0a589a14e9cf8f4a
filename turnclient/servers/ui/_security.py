"""Who may use the web UI, and how a state change must arrive.

Every request, page or API, passes ``Guard`` before any handler runs:

- With a token (required whenever the server binds to anything but
  loopback), the request must carry it — ``Authorization: Bearer <token>``,
  ``X-Turns-Token: <token>``, or the cookie that opening a page with
  ``?token=<token>`` sets (HttpOnly, SameSite=Strict) before it redirects to
  the same page without the token in the address. Every comparison is
  constant-time (``hmac.compare_digest``).
- That cookie is named for the port the browser sees (``cookie_name``):
  browsers keep cookies by host name, whatever the port, so two UIs on one
  host would otherwise replace each other's. Over https (the scheme uvicorn
  takes from a trusted proxy's ``X-Forwarded-Proto``) it is ``Secure`` and
  ``__Host-``-prefixed, so no plain-http page of the host and no sibling
  domain can set it. Nothing can keep a browser from sending it to other
  services on the same host name: docs/operations.md says so.
- Without a token (loopback only), the ``Host`` header must be ``localhost`` or a loopback
  address, so a web page on another site cannot reach the UI through DNS
  rebinding.
- A POST must send ``Content-Type: application/json`` (no HTML form can, and
  a cross-site script cannot without a CORS preflight this server never
  answers), and if it carries an ``Origin`` it must be this server's own.
  A POST authenticated only by the cookie must carry a same-origin
  ``Origin``; a token in a header (a script or ``curl``) needs none.
- Only GET, HEAD and POST exist.

Every response carries a Content-Security-Policy that allows scripts and
styles from this server only, no inline script, no framing.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from urllib.parse import parse_qsl, quote, urlencode

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._tokens import Tokens

COOKIE = "turns_ui_token"
"""The token cookie's base name; ``cookie_name`` gives the one a page uses."""
_DEFAULT_PORTS = {"http": "80", "https": "443"}
TOKEN_HEADER = "x-turns-token"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
        b"form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)


def same_token(given: str | None, token: str) -> bool:
    """Constant-time: the time taken does not depend on how much of ``given`` matches."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode())


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in scope.get("headers", []):
        out[k.decode("latin-1").lower()] = v.decode("latin-1")
    return out


def _loopback_address(host: str) -> bool:
    """A loopback IP literal (all of 127.0.0.0/8, ``[::1]``): every address ``turns ui``
    binds without a token. A literal cannot be rebound; only names need the list."""
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if ":" in host else host


def cookie_name(scheme: str, host: str) -> str:
    """The token cookie's name for pages at ``scheme://host``.

    ``turns_ui_token_<port>`` with the port the browser sees (from ``Host``, or
    the scheme's default), so each UI on a host has its own; over https
    ``__Host-turns_ui_token_<port>``, a name browsers take only from a secure
    page, for the whole host and no wider.
    """
    rest = host[host.find("]") + 1 :] if host.startswith("[") else host
    _, colon, port = rest.rpartition(":")
    if not (colon and port.isascii() and port.isdigit() and len(port) <= 5):
        port = _DEFAULT_PORTS.get(scheme, "80")
    name = f"{COOKIE}_{int(port)}"
    return f"__Host-{name}" if scheme == "https" else name


def _cookie_of(scope: Scope, headers: dict[str, str]) -> tuple[str, bool]:
    """The token cookie's name for this request, and whether it came over https."""
    scheme = scope.get("scheme", "http")
    return cookie_name(scheme, headers.get("host", "")), scheme == "https"


USER = "turns_user"
"""Where ``Guard`` leaves who is asking (``request.state.turns_user``): the name from the
tokens file, the OS user running a loopback UI without a token, None for the shared token."""


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        tokens: Tokens | None = None,
        local_user: str | None = None,
    ) -> None:
        self._app = app
        self._token = token
        self._tokens = tokens
        self._local_user = local_user

    @property
    def _guarded(self) -> bool:
        return self._token is not None or self._tokens is not None

    def _holder(self, given: str | None) -> tuple[bool, str | None]:
        """Whether ``given`` opens the UI, and the name it belongs to (None: the shared
        token). Both checks always run, so the time taken says nothing about which matched."""
        shared = self._token is not None and same_token(given, self._token)
        name = self._tokens.holder(given) if self._tokens is not None else None
        return shared or name is not None, name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = _headers(scope)
        method = scope["method"]

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        problem, user = self._check(scope, headers, method)
        if problem is not None:
            status, text = problem
            await _deny(secured, status, text)
            return
        scope.setdefault("state", {})[USER] = user
        if self._guarded and method == "GET":
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            if "token" in query and not scope["path"].startswith("/api/"):
                # Opening a page with ?token=… : keep it in a cookie, drop it from the address.
                rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
                name, secure = _cookie_of(scope, headers)
                where = _same_site(scope) + (f"?{rest}" if rest else "")
                # Only a token that opens the UI becomes the cookie (the request may have
                # passed by its header with anything at all in ?token=).
                valid, _ = self._holder(query["token"])
                cookie = query["token"] if valid else None
                await _redirect(secured, where, name, cookie, secure=secure)
                return
        await self._app(scope, receive, secured)

    def _check(
        self, scope: Scope, headers: dict[str, str], method: str
    ) -> tuple[tuple[int, str] | None, str | None]:
        """A refusal (status, message), or None and who is asking."""
        if method not in ("GET", "HEAD", "POST"):
            return (405, f"{method} is not allowed"), None
        header_token = headers.get(TOKEN_HEADER)
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            header_token = auth[7:].strip()
        user = self._local_user
        if self._guarded:
            by_header, user = self._holder(header_token)
            by_cookie = False
            if not by_header:
                for value in _cookies(headers.get("cookie"), _cookie_of(scope, headers)[0]):
                    by_cookie, user = self._holder(value)
                    if by_cookie:
                        break
            by_query = False
            if not (by_header or by_cookie):
                query_token = None
                if method == "GET" and not scope["path"].startswith("/api/"):
                    query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
                    query_token = dict(query).get("token")
                by_query, user = self._holder(query_token)
            if not (by_header or by_cookie or by_query):
                return (
                    401,
                    "a valid token is required (Authorization: Bearer, X-Turns-Token, or open the page with ?token=)",
                ), None
        else:
            by_header = False
            host = _host_name(headers.get("host", ""))
            if host not in LOOPBACK_HOSTS and not _loopback_address(host):
                return (
                    403,
                    f"host {host!r} is not localhost or a loopback address; bind elsewhere only with a token",
                ), None
        if method == "POST":
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                return (
                    415,
                    "state-changing requests take a JSON body (Content-Type: application/json)",
                ), None
            origin = headers.get("origin")
            if origin is not None and not _same_origin(origin, scope, headers):
                return (403, f"cross-origin request from {origin!r} refused"), None
            if self._guarded and not by_header and origin is None:
                return (
                    403,
                    "a request authenticated by cookie must come from this server's pages",
                ), None
        return None, user


def _same_site(scope: Scope) -> str:
    """The request's path as a redirect target that stays on this server.

    The path as sent (still percent-encoded: a decoded ``%3F`` or ``%E2%9C%93``
    would change or break it), with backslashes encoded and leading slashes
    collapsed: a browser reads ``//host``, ``///host`` and ``/\\host`` as
    another site.
    """
    raw = scope.get("raw_path") or quote(scope["path"]).encode()
    path = raw.decode("latin-1").split("?", 1)[0].replace("\\", "%5C")
    return "/" + path.lstrip("/")


def _same_origin(origin: str, scope: Scope, headers: dict[str, str]) -> bool:
    scheme = scope.get("scheme", "http")
    host = headers.get("host", "")
    return hmac.compare_digest(origin.encode(), f"{scheme}://{host}".encode())


def _cookies(raw: str | None, name: str) -> list[str]:
    """Every value the ``Cookie`` header gives the cookie ``name``.

    Parsed the way browsers write the header, not by ``http.cookies``: that
    stops at the first cookie RFC 6265 disallows (a space, a quote, JSON) and
    would lose the token to any other app's cookie on the same host name. Two
    values (a stale cookie beside the current one) are both tried.
    """
    values: list[str] = []
    for pair in (raw or "").split(";"):
        key, eq, value = pair.partition("=")
        if eq and key.strip() == name:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            values.append(value)
    return values


async def _deny(send: Send, status: int, text: str) -> None:
    body = orjson.dumps({"error": text, "status": status})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": _plain(
                [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ]
            ),
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _redirect(
    send: Send, location: str, name: str, token: str | None, *, secure: bool
) -> None:
    headers = [(b"location", location.encode("latin-1", "replace")), (b"content-length", b"0")]
    if token is not None:
        cookie = f"{name}={token}; Path=/; HttpOnly; SameSite=Strict" + (
            "; Secure" if secure else ""
        )
        headers.append((b"set-cookie", cookie.encode("latin-1", "replace")))
    await send({"type": "http.response.start", "status": 303, "headers": _plain(headers)})
    await send({"type": "http.response.body", "body": b""})


def _plain(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return list(headers)


__all__ = ["COOKIE", "Guard", "TOKEN_HEADER", "USER", "cookie_name", "same_token"]
