"""Typed model-call failures (seed 003, "Failures say what they know").

A failure has two independent axes: its *kind* (what went wrong) and its
*dispatch evidence* (how far the request got). Every message is authored
here from fixed phrases; nothing in a failure is copied from an upstream
response body, a request body or a header. The only upstream-derived values
kept are an HTTP status, an error *code* token from a fixed allowlist and a
server delay hint — and a delay hint is a hint, never permission to retry.

Failures are raised outside the ``except`` block that observed the cause, so
no chained exception (which could hold an ``httpx.Request`` and its headers)
travels with them.
"""

from __future__ import annotations

from enum import StrEnum

from turncore.errors import InvalidInputError, TurnError
from turncore.events import TurnUsage


class FailureKind(StrEnum):
    INVALID_INPUT = "invalid-input"
    TRANSPORT = "transport"
    PROTOCOL = "protocol"
    AUTHENTICATION = "authentication"
    RATE_LIMIT = "rate-limit"
    REFUSAL = "refusal"
    BOUNDS = "bounds"
    UNSUPPORTED = "unsupported"
    CANCELLED = "cancelled"
    DEADLINE = "deadline"
    CONTEXT_BUDGET = "context-budget"
    """The request does not fit the agent's context budget; refused before dispatch."""


class Dispatch(StrEnum):
    NOT_SENT = "not-sent"
    """Nothing reached the upstream."""
    REJECTED = "rejected"
    """The upstream refused before accepting work."""
    UNKNOWN = "unknown"
    """The upstream may have accepted the request and may bill it."""
    ACCEPTED = "accepted"
    """The upstream accepted the request."""


# Provider error type/code tokens that may be kept on a failure. Anything else
# an upstream sends is dropped: the token is only a diagnostic aid.
PROVIDER_CODE_ALLOWLIST: frozenset[str] = frozenset(
    {
        # OpenAI (type and code fields)
        "invalid_request_error",
        "invalid_api_key",
        "insufficient_quota",
        "rate_limit_exceeded",
        "context_length_exceeded",
        "model_not_found",
        "server_error",
        "server_is_overloaded",
        "content_filter",
        "invalid_prompt",
        # Anthropic (error.type)
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "overloaded_error",
        "billing_error",
        "timeout_error",
    }
)

UNATTRIBUTED_REFUSAL = (
    "opaque provider state with no binding cannot be sent; bind it explicitly with "
    "bind_unattributed() or remove it"
)
"""The one fixed message every egress path uses to refuse unattributed opaque state."""


def check_usage(usage: TurnUsage) -> str | None:
    """Describe a contradiction in ``usage``, or None when it is consistent."""
    values = usage.model_dump()
    for name, value in values.items():
        if value is not None and value < 0:
            return f"{name} is negative"
    i, o, t = usage.input_tokens, usage.output_tokens, usage.total_tokens
    if i is not None and usage.cached_input_tokens is not None and usage.cached_input_tokens > i:
        return "cached input tokens exceed input tokens"
    if o is not None and usage.reasoning_tokens is not None and usage.reasoning_tokens > o:
        return "reasoning tokens exceed output tokens"
    if t is not None and i is not None and o is not None and t < i + o:
        return "total tokens are fewer than input plus output"
    return None


def allowed_code(token: object) -> str | None:
    """The token if it is on the allowlist, else None."""
    if isinstance(token, str) and token in PROVIDER_CODE_ALLOWLIST:
        return token
    return None


class ModelFailure(TurnError):
    """One model attempt failed.

    ``kind`` and ``dispatch`` are independent. ``status`` is the HTTP status when
    the upstream answered with one; ``provider_code`` an allowlisted error token;
    ``retry_after`` a server delay hint in seconds; ``usage`` the last valid usage
    snapshot reported before the failure (possibly partial; ``usage_final`` says the
    provider had sent its terminal report). ``attempts`` counts the attempts the
    router made for this call, this one included.

    Construction refuses what cannot be true (seed 003, "Evidence, not inference"):
    a not-sent failure carries no upstream evidence at all (no status, code, delay
    hint or usage), usage must not contradict itself, and final usage needs usage.
    """

    def __init__(
        self,
        kind: FailureKind,
        dispatch: Dispatch,
        detail: str,
        *,
        status: int | None = None,
        provider_code: str | None = None,
        retry_after: float | None = None,
        usage: TurnUsage | None = None,
        usage_final: bool = False,
        attempts: int = 1,
    ) -> None:
        if dispatch is Dispatch.NOT_SENT and (
            status is not None
            or provider_code is not None
            or retry_after is not None
            or usage is not None
        ):
            raise ValueError("a not-sent failure cannot carry upstream evidence")
        if usage is not None:
            problem = check_usage(usage)
            if problem is not None:
                raise ValueError(f"a failure's usage snapshot is contradictory: {problem}")
        if usage_final and usage is None:
            raise ValueError("a failure cannot claim final usage without usage")
        if attempts < 1:
            raise ValueError("a failure needs at least one attempt")
        self.kind = kind
        self.dispatch = dispatch
        self.detail = detail
        self.status = status
        self.provider_code = allowed_code(provider_code)
        self.retry_after = retry_after
        self.usage = usage
        self.usage_final = usage_final
        self.attempts = attempts
        super().__init__(self.summary())

    def summary(self) -> str:
        """One line for ``model_call_failed.error``: kind, evidence, then the fixed detail."""
        facts = [self.dispatch.value]
        if self.status is not None:
            facts.append(f"HTTP {self.status}")
        if self.provider_code is not None:
            facts.append(self.provider_code)
        if self.retry_after is not None:
            facts.append(f"retry-after hint {self.retry_after:g}s")
        if self.attempts > 1:
            facts.append(f"{self.attempts} attempts")
        return f"model call failed: {self.kind.value} ({', '.join(facts)}): {self.detail}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.summary()!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # Pickling (process pools, some serialisers) keeps every field.
        return (
            _rebuild,
            (
                type(self),
                self.kind,
                self.dispatch,
                self.detail,
                self.status,
                self.provider_code,
                self.retry_after,
                self.usage,
                self.usage_final,
                self.attempts,
            ),
        )

    def again(self, attempts: int) -> ModelFailure:
        """The same failure, as the last of ``attempts`` attempts (routing's view)."""
        return ModelFailure(
            self.kind,
            self.dispatch,
            self.detail,
            status=self.status,
            provider_code=self.provider_code,
            retry_after=self.retry_after,
            usage=self.usage,
            usage_final=self.usage_final,
            attempts=attempts,
        )


def _rebuild(
    cls: type[ModelFailure],
    kind: FailureKind,
    dispatch: Dispatch,
    detail: str,
    status: int | None,
    provider_code: str | None,
    retry_after: float | None,
    usage: TurnUsage | None,
    usage_final: bool,
    attempts: int,
) -> ModelFailure:
    return cls(
        kind,
        dispatch,
        detail,
        status=status,
        provider_code=provider_code,
        retry_after=retry_after,
        usage=usage,
        usage_final=usage_final,
        attempts=attempts,
    )


class ModelRequestError(ModelFailure, InvalidInputError):
    """The request was refused before any network I/O: the caller's fault.

    Kind is invalid-input, unsupported or bounds; dispatch is always not-sent.
    """

    def __init__(self, kind: FailureKind, detail: str) -> None:
        ModelFailure.__init__(self, kind, Dispatch.NOT_SENT, detail)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.kind, self.detail))


class SinkFailure(ModelFailure):
    """The caller's sink raised; the attempt was ended. The sink's own exception is
    the ``__cause__`` (it is the caller's, so it carries nothing of ours)."""

    def __init__(
        self, dispatch: Dispatch, usage: TurnUsage | None = None, usage_final: bool = False
    ) -> None:
        ModelFailure.__init__(
            self,
            FailureKind.CANCELLED,
            dispatch,
            "the caller's sink failed, so the attempt was ended",
            usage=usage,
            usage_final=usage_final,
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.dispatch, self.usage, self.usage_final))


def invalid(detail: str) -> ModelRequestError:
    return ModelRequestError(FailureKind.INVALID_INPUT, detail)


def unsupported(detail: str) -> ModelRequestError:
    return ModelRequestError(FailureKind.UNSUPPORTED, detail)


def too_large(detail: str) -> ModelRequestError:
    return ModelRequestError(FailureKind.BOUNDS, detail)
