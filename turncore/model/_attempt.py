"""One attempt: cancellation, deadline, dispatch evidence, sink and part assembly.

Shared by every adapter (and the scripted model). ``run_attempt`` races the
attempt's work against the cancellation token and the local deadline; the
work itself records how far the request got (``Attempt.dispatch``) so that a
failure raised at any point carries the right evidence. A cancellation that
is observed together with a completion wins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from turncore.events import TurnUsage
from turncore.jsonvalue import json_problem, loads_exact
from turncore.messages import ReasoningPart, TextPart, ToolCallPart
from turncore.model.failures import (
    Dispatch,
    FailureKind,
    ModelFailure,
    SinkFailure,
    check_usage,
)
from turncore.model.port import (
    CancellationToken,
    Limits,
    ModelOutcome,
    OutcomePart,
    ReasoningDeltaEvent,
    Sink,
    StreamEvent,
    TextDeltaEvent,
    ToolCallArgsDeltaEvent,
    ToolCallStartEvent,
)


class Attempt:
    """Mutable facts about the running attempt."""

    def __init__(self, sink: Sink, limits: Limits) -> None:
        self.sink = sink
        self.limits = limits
        self.dispatch = Dispatch.NOT_SENT
        self.usage: TurnUsage | None = None
        """The last *valid* usage snapshot the provider reported (seed 003: a failure
        may retain it). A contradictory report is never kept."""
        self.usage_final = False
        """``usage`` came from the provider's terminal report."""

    def observe_usage(self, usage: TurnUsage, *, final: bool) -> None:
        """Keep a usage report as the attempt's snapshot when it is consistent."""
        if check_usage(usage) is None:
            self.usage = usage
            self.usage_final = final

    def failure(
        self,
        kind: FailureKind,
        detail: str,
        *,
        status: int | None = None,
        provider_code: str | None = None,
        retry_after: float | None = None,
        dispatch: Dispatch | None = None,
    ) -> ModelFailure:
        dispatch = dispatch or self.dispatch
        # Nothing reached the upstream, so nothing it reported can be attached.
        sent = dispatch is not Dispatch.NOT_SENT
        return ModelFailure(
            kind,
            dispatch,
            detail,
            status=status,
            provider_code=provider_code,
            retry_after=retry_after,
            usage=self.usage if sent else None,
            usage_final=self.usage_final and sent,
        )

    async def emit(self, event: StreamEvent) -> None:
        """Await the caller's sink; a failing sink ends the attempt."""
        cause: Exception | None = None
        try:
            await self.sink(event)
        except Exception as exc:  # the sink is the caller's code
            cause = exc
        if cause is not None:
            sent = self.dispatch is not Dispatch.NOT_SENT
            raise SinkFailure(
                self.dispatch, self.usage if sent else None, self.usage_final and sent
            ) from cause


async def run_attempt(
    work: Callable[[], Awaitable[ModelOutcome]],
    attempt: Attempt,
    cancel: CancellationToken,
    deadline_seconds: float | None,
) -> ModelOutcome:
    if cancel.cancelled:
        raise attempt.failure(FailureKind.CANCELLED, "the attempt was cancelled before it started")
    task = asyncio.ensure_future(work())
    waiter = asyncio.ensure_future(cancel.wait())
    try:
        done, _ = await asyncio.wait(
            {task, waiter}, timeout=deadline_seconds, return_when=asyncio.FIRST_COMPLETED
        )
    except asyncio.CancelledError:
        # The caller dropped the attempt: stop local work, then propagate.
        task.cancel()
        waiter.cancel()
        await asyncio.gather(task, waiter, return_exceptions=True)
        raise
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    if task not in done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if cancel.cancelled:
            raise attempt.failure(FailureKind.CANCELLED, "the attempt was cancelled")
        raise attempt.failure(FailureKind.DEADLINE, "the attempt exceeded its local deadline")
    # Taken before the cancel check: a failure the cancel outranks must still be
    # retrieved, or asyncio reports it from whatever code the GC next interrupts.
    error = task.exception()
    if cancel.cancelled:
        # Cancellation wins over a simultaneous completion (or failure).
        raise attempt.failure(FailureKind.CANCELLED, "the attempt was cancelled")
    if error is None:
        return task.result()
    if isinstance(error, ModelFailure):
        raise error
    # Anything else is an adapter defect or an unparseable wire value; its text
    # may quote upstream bytes, so it is replaced rather than propagated.
    raise attempt.failure(
        FailureKind.PROTOCOL, "the adapter could not interpret the provider's response"
    )


# ---------------------------------------------------------------- assembly


def parse_arguments(raw: str) -> Any:
    """Tool arguments as JSON; empty means ``{}``. Text that is not JSON, or is JSON
    no turn may hold (an integer outside ±(2**53 - 1), nesting past
    ``MAX_JSON_DEPTH``), is kept verbatim as a string so the tool layer can
    return an error result (§21.3) instead of the whole response failing."""
    if not raw.strip():
        return {}
    try:
        value = loads_exact(raw)  # integers past 64 bits stay exact, so they are refused
    except ValueError:
        return raw
    return raw if json_problem(value) is not None else value


@dataclass
class _Block:
    kind: str  # "text" | "reasoning" | "tool"
    text: list[str] = field(default_factory=list)
    state: Any = None
    has_state: bool = False
    call_id: str = ""
    name: str = ""
    args_override: str | None = None


class Assembler:
    """Collects parts in order of first appearance and streams their deltas."""

    def __init__(self, attempt: Attempt) -> None:
        self._attempt = attempt
        self._blocks: dict[object, _Block] = {}
        self._size = 0

    def _grow(self, n: int) -> None:
        self._size += n
        if self._size > self._attempt.limits.max_response_bytes:
            raise self._attempt.failure(
                FailureKind.BOUNDS, "the response exceeds the configured size bound"
            )

    def _block(self, key: object, kind: str) -> _Block:
        block = self._blocks.get(key)
        if block is None:
            block = _Block(kind)
            self._blocks[key] = block
        elif block.kind != kind:
            raise self._attempt.failure(
                FailureKind.PROTOCOL, "the provider changed the kind of a content block"
            )
        return block

    def has(self, key: object) -> bool:
        return key in self._blocks

    async def text(self, key: object, delta: str) -> None:
        block = self._block(key, "text")
        if delta:
            self._grow(len(delta))
            block.text.append(delta)
            await self._attempt.emit(TextDeltaEvent(delta))

    async def reasoning(self, key: object, delta: str) -> None:
        block = self._block(key, "reasoning")
        if delta:
            self._grow(len(delta))
            block.text.append(delta)
            await self._attempt.emit(ReasoningDeltaEvent(delta))

    def reasoning_state(self, key: object, state: Any) -> None:
        block = self._block(key, "reasoning")
        self._grow(len(orjson.dumps(state)))
        block.state = state
        block.has_state = True

    def tool_started(self, key: object) -> bool:
        return key in self._blocks

    async def tool_start(self, key: object, call_id: object, name: object) -> None:
        limit = self._attempt.limits.max_identifier
        for value in (call_id, name):
            if not isinstance(value, str) or not value or len(value) > limit:
                raise self._attempt.failure(
                    FailureKind.PROTOCOL,
                    "the provider started a tool call without a valid id and name",
                )
        assert isinstance(call_id, str) and isinstance(name, str)
        if key in self._blocks:
            raise self._attempt.failure(
                FailureKind.PROTOCOL, "the provider announced the same tool call twice"
            )
        if any(b.kind == "tool" and b.call_id == call_id for b in self._blocks.values()):
            raise self._attempt.failure(
                FailureKind.PROTOCOL, "the provider reused a tool call id within one response"
            )
        block = self._block(key, "tool")
        block.call_id = call_id
        block.name = name
        await self._attempt.emit(ToolCallStartEvent(call_id, name))

    async def tool_args(self, key: object, fragment: str) -> None:
        block = self._blocks.get(key)
        if block is None or block.kind != "tool":
            raise self._attempt.failure(
                FailureKind.PROTOCOL, "the provider sent tool arguments before announcing the call"
            )
        if fragment:
            self._grow(len(fragment))
            block.text.append(fragment)
            await self._attempt.emit(ToolCallArgsDeltaEvent(block.call_id, fragment))

    def tool_arguments_final(self, key: object, arguments: str) -> None:
        block = self._blocks.get(key)
        if block is None or block.kind != "tool":
            raise self._attempt.failure(
                FailureKind.PROTOCOL, "the provider completed a tool call it never announced"
            )
        self._grow(len(arguments))
        block.args_override = arguments

    def tool_count(self) -> int:
        return sum(1 for b in self._blocks.values() if b.kind == "tool")

    def parts(self, bind: Callable[[Any], Any]) -> tuple[OutcomePart, ...]:
        """The finished parts; ``bind`` turns an opaque payload into providerOptions."""
        out: list[OutcomePart] = []
        for block in self._blocks.values():
            text = "".join(block.text)
            if block.kind == "text":
                if text:
                    out.append(TextPart(text=text))
            elif block.kind == "reasoning":
                if block.has_state:
                    out.append(ReasoningPart(text=text, provider_options=bind(block.state)))
                elif text:
                    out.append(ReasoningPart(text=text))
            else:
                raw = block.args_override if block.args_override is not None else text
                out.append(
                    ToolCallPart(
                        tool_call_id=block.call_id,
                        tool_name=block.name,
                        input=parse_arguments(raw),
                    )
                )
        return tuple(out)
