"""The HTTP side every adapter shares: one POST, SSE, statuses, evidence.

Dispatch evidence follows what the client can know:

- before ``send`` nothing left the process (not-sent); a connection that
  could not be established, or a pooled one that never became free, is
  still not-sent;
- once bytes may have been written and no status came back, the upstream
  may have accepted and may bill (unknown);
- a 4xx, 429, 503 or 529 status is a refusal before work (rejected); other
  5xx statuses leave it unknown;
- a 2xx status means the upstream accepted the request (accepted), so a
  stream that breaks later is a transport failure with accepted evidence.

Error bodies are read (bounded) only to pick an allowlisted error token;
their text is never kept. The API key lives in a :class:`Secret` and is placed
only into request headers.
"""

from __future__ import annotations

import dataclasses
import email.utils
import re
import time
from abc import abstractmethod
from typing import Any

import httpx
import orjson

from turncore.events import TurnUsage
from turncore.model._attempt import Attempt, run_attempt
from turncore.model.binding import Binding
from turncore.model.failures import Dispatch, FailureKind, ModelFailure, allowed_code
from turncore.model.port import (
    DEFAULT_LIMITS,
    CancellationToken,
    Limits,
    Model,
    ModelCallRequest,
    ModelOutcome,
    OpaqueView,
    Sink,
    check_request_size,
    validate_request,
)
from turncore.model.sse import SseDecoder, SseError, SseEvent

_ERROR_BODY_LIMIT = 64 * 1024


class Secret:
    """A credential that never shows itself in ``repr``, ``str`` or pickles."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a Secret cannot be serialised")


_CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "proxy-authorization"})

# A header value is visible ASCII, with spaces or tabs only inside (RFC 9110
# §5.5); the HTTP stack refuses anything else only once it starts the request,
# quoting the value in its debug log. The key itself obeys the same rule, so a
# space pasted before it is caught even where a prefix ("Bearer ") hides it.
_HEADER_VALUE = re.compile(r"[\x21-\x7e]([\x20\x21-\x7e\t]*[\x21-\x7e])?")


def unsendable_header(headers: dict[str, str], key: Secret | None = None) -> str | None:
    """The name of the first header whose value (or, for the credential header,
    whose ``key``) cannot be sent, or None."""
    for name, value in headers.items():
        if not _HEADER_VALUE.fullmatch(value):
            return name
        if key is not None and name.lower() in _CREDENTIAL_HEADERS:
            if not _HEADER_VALUE.fullmatch(key.reveal()):
                return name
    return None


class StreamDecoder:
    """Turns one provider's SSE events into parts, events and an outcome."""

    @abstractmethod
    async def feed(self, event: SseEvent) -> bool:
        """Handle one event; True when the provider signalled the end of the stream."""

    @abstractmethod
    def finish(self, terminal: bool) -> ModelOutcome:
        """Build the outcome once the stream ended (``terminal``: an end marker was seen)."""


class HttpModel(Model):
    """Base of the three HTTP adapters. The client is the caller's (tests hand one
    pointed at 127.0.0.1); it must not retry (``httpx.AsyncHTTPTransport(retries=0)``,
    the default)."""

    path: str = ""
    protocol: str = ""
    tool_name_pattern: str = r"[A-Za-z0-9_-]{1,64}"

    def __init__(
        self,
        binding: Binding,
        client: httpx.AsyncClient,
        api_key: Secret | None = None,
        *,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        if binding.protocol != self.protocol:
            raise ValueError(f"{type(self).__name__} serves {self.protocol} bindings only")
        self._binding = binding
        self._client = client
        self._api_key = api_key
        self._limits = dataclasses.replace(limits, tool_name_pattern=self.tool_name_pattern)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._binding.label()!r})"

    @property
    def binding(self) -> Binding:
        return self._binding

    @abstractmethod
    def encode(self, request: ModelCallRequest, opaque: OpaqueView) -> dict[str, Any]:
        """The provider's JSON body (validation has already passed)."""

    @abstractmethod
    def headers(self) -> dict[str, str]:
        """Protocol headers, including the credential when there is one."""

    @abstractmethod
    def decoder(self, attempt: Attempt, request: ModelCallRequest) -> StreamDecoder: ...

    def wire_request(self, request: ModelCallRequest) -> dict[str, Any]:
        """What ``turn`` would send for ``request``, with every credential redacted:
        ``{"method", "url", "headers", "body"}``. No I/O; validation errors raise as in ``turn``.
        """
        opaque = validate_request(request, self._binding, self._limits)
        headers = {
            name: "<redacted>" if name.lower() in _CREDENTIAL_HEADERS else value
            for name, value in self.headers().items()
        }
        return {
            "method": "POST",
            "url": self._binding.endpoint + self.path,
            "headers": headers,
            "body": self.encode(request, opaque),
        }

    async def turn(
        self, request: ModelCallRequest, sink: Sink, cancel: CancellationToken
    ) -> ModelOutcome:
        attempt = Attempt(sink, self._limits)
        if cancel.cancelled:
            raise attempt.failure(
                FailureKind.CANCELLED, "the attempt was cancelled before it started"
            )
        opaque = validate_request(request, self._binding, self._limits)
        body = orjson.dumps(self.encode(request, opaque))
        check_request_size(body, self._limits)
        url = self._binding.endpoint + self.path
        headers = self.headers()
        bad = unsendable_header(headers, self._api_key)
        if bad is not None:
            # Typically a key pasted with a newline or a stray space: refuse it
            # here, not sent, and never hand the value to the HTTP stack.
            credential = bad.lower() in _CREDENTIAL_HEADERS
            raise attempt.failure(
                FailureKind.AUTHENTICATION if credential else FailureKind.INVALID_INPUT,
                "the API key cannot be sent: it starts or ends with whitespace, or holds "
                "a line break, a control character or a non-ASCII character"
                if credential
                else "a request header cannot be sent",
            )
        decoder = self.decoder(attempt, request)

        async def work() -> ModelOutcome:
            return await _stream(self._client, url, headers, body, attempt, decoder)

        return await run_attempt(work, attempt, cancel, request.deadline_seconds)


async def _stream(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    body: bytes,
    attempt: Attempt,
    decoder: StreamDecoder,
) -> ModelOutcome:
    failure: ModelFailure | None = None
    request = client.build_request("POST", url, headers=headers, content=body)
    attempt.dispatch = Dispatch.UNKNOWN
    try:
        response = await client.send(request, stream=True)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol):
        failure = attempt.failure(
            FailureKind.TRANSPORT,
            "could not connect to the provider",
            dispatch=Dispatch.NOT_SENT,
        )
    except httpx.PoolTimeout:
        # Every pooled connection stayed busy: the request never left the process.
        failure = attempt.failure(
            FailureKind.TRANSPORT,
            "no connection to the provider became free in time",
            dispatch=Dispatch.NOT_SENT,
        )
    except httpx.TimeoutException:
        failure = attempt.failure(FailureKind.TRANSPORT, "the provider did not answer in time")
    except httpx.HTTPError:
        failure = attempt.failure(
            FailureKind.TRANSPORT, "the connection failed before the provider answered"
        )
    if failure is not None:
        if failure.dispatch is Dispatch.NOT_SENT:
            attempt.dispatch = Dispatch.NOT_SENT
        raise failure
    try:
        if not 200 <= response.status_code < 300:
            raise await _status_failure(response, attempt)
        attempt.dispatch = Dispatch.ACCEPTED
        ctype = response.headers.get("content-type", "")
        if "text/event-stream" not in ctype:
            raise attempt.failure(
                FailureKind.PROTOCOL, "the provider did not answer with an event stream"
            )
        return await _consume(response, attempt, decoder)
    finally:
        await response.aclose()


async def _consume(
    response: httpx.Response, attempt: Attempt, decoder: StreamDecoder
) -> ModelOutcome:
    sse = SseDecoder(attempt.limits.max_sse_event_bytes)
    failure: ModelFailure | None = None
    terminal = False
    received = 0
    chunks = response.aiter_bytes()
    while not terminal:
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            break
        except httpx.TimeoutException:
            failure = attempt.failure(FailureKind.TRANSPORT, "the provider stopped streaming")
        except httpx.HTTPError:
            failure = attempt.failure(
                FailureKind.TRANSPORT, "the connection broke while the response streamed"
            )
        if failure is not None:
            raise failure
        received += len(chunk)
        if received > attempt.limits.max_response_bytes:
            raise attempt.failure(
                FailureKind.BOUNDS, "the response exceeds the configured size bound"
            )
        try:
            events = sse.feed(chunk)
        except SseError as exc:
            failure = attempt.failure(
                FailureKind.BOUNDS if exc.too_large else FailureKind.PROTOCOL,
                "the provider's event stream is oversized"
                if exc.too_large
                else "the provider's event stream is malformed",
            )
        if failure is not None:
            raise failure
        for event in events:
            if await decoder.feed(event):
                terminal = True
                break
    if not terminal:
        for event in sse.close():  # a final event ended by a lone CR
            if await decoder.feed(event):
                terminal = True
                break
    return decoder.finish(terminal)


async def _status_failure(response: httpx.Response, attempt: Attempt) -> ModelFailure:
    status = response.status_code
    code = await _error_code(response)
    retry_after = retry_after_hint(response.headers)
    if status in (401, 403):
        kind, dispatch, detail = (
            FailureKind.AUTHENTICATION,
            Dispatch.REJECTED,
            "the provider refused the credentials",
        )
    elif status == 429:
        kind, dispatch, detail = (
            FailureKind.RATE_LIMIT,
            Dispatch.REJECTED,
            "the provider throttled the request",
        )
    elif status in (503, 529):
        kind, dispatch, detail = (
            FailureKind.RATE_LIMIT,
            Dispatch.REJECTED,
            "the provider is overloaded",
        )
    elif status == 413 or code in ("request_too_large", "context_length_exceeded"):
        kind, dispatch, detail = (
            FailureKind.BOUNDS,
            Dispatch.REJECTED,
            "the provider refused the request as too large",
        )
    elif 400 <= status < 500 and status != 408:
        kind, dispatch, detail = (
            FailureKind.INVALID_INPUT,
            Dispatch.REJECTED,
            "the provider refused the request as invalid",
        )
    elif status == 408 or status >= 500:
        kind, dispatch, detail = (
            FailureKind.TRANSPORT,
            Dispatch.UNKNOWN,
            "the provider failed while handling the request",
        )
    else:
        kind, dispatch, detail = (
            FailureKind.PROTOCOL,
            Dispatch.UNKNOWN,
            "the provider answered with an unexpected status",
        )
    attempt.dispatch = dispatch
    return attempt.failure(kind, detail, status=status, provider_code=code, retry_after=retry_after)


async def _error_code(response: httpx.Response) -> str | None:
    """An allowlisted error token from a JSON error body, or None. Never the text."""
    data = bytearray()
    try:
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > _ERROR_BODY_LIMIT:
                return None
    except httpx.HTTPError:
        return None
    try:
        body = orjson.loads(bytes(data))
    except orjson.JSONDecodeError:
        return None
    return error_token(body)


def error_token(body: object) -> str | None:
    """The first allowlisted token among the usual error-object fields."""
    if not isinstance(body, dict):
        return None
    err = body.get("error", body)
    if not isinstance(err, dict):
        return None
    for key in ("code", "type"):
        token = allowed_code(err.get(key))
        if token is not None:
            return token
    return None


def retry_after_hint(headers: httpx.Headers) -> float | None:
    """A server delay hint in seconds (``retry-after-ms`` or ``retry-after``), kept as a hint."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms) / 1000.0
        except ValueError:
            value = -1.0
        if 0.0 <= value <= 86400.0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        value = max(0.0, when.timestamp() - time.time())
    if 0.0 <= value <= 86400.0:
        return value
    return None


# ---------------------------------------------------------------- wire helpers


def as_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def bounded_token(value: object, limit: int = 256) -> str | None:
    """A provider-reported identifier (response id, model) when it is a sane string."""
    if isinstance(value, str) and 0 < len(value) <= limit and value.isprintable():
        return value
    return None


def usage_total(usage: TurnUsage) -> TurnUsage:
    """Fill ``total_tokens`` from input and output when the provider did not."""
    if (
        usage.total_tokens is None
        and usage.input_tokens is not None
        and usage.output_tokens is not None
    ):
        return usage.model_copy(update={"total_tokens": usage.input_tokens + usage.output_tokens})
    return usage


def parse_json_event(event: SseEvent, attempt: Attempt) -> dict[str, Any]:
    failure: ModelFailure | None = None
    try:
        value = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        failure = attempt.failure(
            FailureKind.PROTOCOL, "the provider sent an event that is not JSON"
        )
        value = None
    if failure is not None:
        raise failure
    if not isinstance(value, dict):
        raise attempt.failure(
            FailureKind.PROTOCOL, "the provider sent an event that is not an object"
        )
    return value


def stream_error(attempt: Attempt, token: str | None, *, default_detail: str) -> ModelFailure:
    """A failure for an error the provider reported inside an accepted stream."""
    kind = FailureKind.PROTOCOL
    detail = default_detail
    if token in ("rate_limit_error", "rate_limit_exceeded", "insufficient_quota"):
        kind, detail = FailureKind.RATE_LIMIT, "the provider throttled the request mid-stream"
    elif token in ("overloaded_error", "server_is_overloaded"):
        kind, detail = FailureKind.RATE_LIMIT, "the provider was overloaded mid-stream"
    elif token in ("api_error", "server_error", "timeout_error"):
        kind, detail = FailureKind.TRANSPORT, "the provider failed mid-stream"
    elif token in ("invalid_request_error", "invalid_prompt", "not_found_error"):
        kind, detail = FailureKind.INVALID_INPUT, "the provider refused the request mid-stream"
    elif token in ("request_too_large", "context_length_exceeded"):
        kind, detail = FailureKind.BOUNDS, "the provider refused the request as too large"
    elif token in ("authentication_error", "permission_error", "invalid_api_key"):
        kind, detail = FailureKind.AUTHENTICATION, "the provider refused the credentials mid-stream"
    elif token == "content_filter":
        kind, detail = FailureKind.REFUSAL, "the provider filtered the response"
    return attempt.failure(kind, detail, provider_code=token)
