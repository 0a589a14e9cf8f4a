"""The summary turn: what the context budget drops, summarised by a recorded model call.

The model activity runs one before it writes the main call's request, when the
agent summarises what it drops (``turncore.budget``, "Summarising what is
dropped"). It is an ordinary turn with one model call — ``turn_created`` whose
inline context is the dropped messages, ``model_call_requested``, then
``model_call_completed`` and ``turn_completed``, or ``model_call_failed`` and
``turn_failed`` — so every reader of the spec's files sees the call, its exact
request and its usage. It is not a workflow: the model activity that needs it
writes it, the same way it writes its own call, and the main call's record
names it (``contextBudget.summary.turnId``).

The result is the record the main call keeps: ``turnId``, the summary ``text``
(or ``error``), and the ``model`` and ``usage`` the cost report prices.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from temporalio import activity

from turncore.advance import (
    cancellation_events,
    completion_event,
    failure_event,
    limit_failure_event,
    unusable_call_results,
)
from turncore.budget import SUMMARY_AGENT_SUFFIX, RecordedSummary, Summariser, summary_input
from turncore.compose import compose_model_request, next_model_request
from turncore.events import (
    SCHEMA_VERSION,
    AgentSnapshot,
    ModelCallCompleted,
    ModelCallFailed,
    ModelCallRequested,
    RequestedAgent,
    ResolvedAgent,
    TurnConfig,
    TurnCreated,
    TurnEvent,
)
from turncore.jsonvalue import JsonValue
from turncore.messages import ConversationMessage
from turncore.model import (
    CancellationToken,
    Model,
    ModelFailure,
    StreamEvent,
    build_request,
    completion_fields,
    failure_code,
    failure_message,
)
from turncore.reducer import TurnReducer
from turncore.storage.repository import TurnRepository


@dataclass(frozen=True)
class SummaryTurns:
    """What writing a summary turn needs (the model activity's own dependencies)."""

    repository: TurnRepository
    model: Callable[..., Model]
    """Resolves a ``ModelDescriptor`` to its model."""
    clock: Callable[[], str]
    new_id: Callable[[], Awaitable[str]]
    """A turn id no file has yet."""
    append: Callable[[str, Sequence[TurnEvent]], Awaitable[int]]


async def summarise(
    turns: SummaryTurns,
    agent: ResolvedAgent,
    summariser: Summariser,
    span: Sequence[ConversationMessage],
    earlier: RecordedSummary | None,
    max_tokens: int,
) -> dict[str, JsonValue]:
    """Write and run the summary turn of ``span`` (given the ``earlier`` summary of the
    messages before it), asking for at most ``max_tokens``; return the main call's
    ``summary`` record."""
    model_descriptor = summariser.model or agent.model
    turn_id = await turns.new_id()
    resolved = ResolvedAgent(
        agent_id=agent.agent_id + SUMMARY_AGENT_SUFFIX,
        system_prompt=summariser.prompt,
        model=model_descriptor,
        tools=[],
    )
    created = TurnCreated(
        turn_id=turn_id,
        ts=turns.clock(),
        schema_version=SCHEMA_VERSION,
        # No session: the summary's cost is counted in the turn that ran it, not twice.
        session_id=None,
        agent=AgentSnapshot(
            requested=RequestedAgent(agent_id=resolved.agent_id), resolved=resolved
        ),
        context=list(span),
        input=summary_input(len(span), earlier),
        config=TurnConfig(auto_permission=False, human_available=False, max_model_calls=1),
    )
    await asyncio.to_thread(turns.repository.create, created)
    reducer = TurnReducer.of([created])

    async def commit(*events: TurnEvent) -> None:
        for e in events:
            reducer.apply(e)
        await turns.append(turn_id, events)

    await commit(
        ModelCallRequested(
            turn_id=turn_id,
            ts=turns.clock(),
            model_call_index=0,
            request=next_model_request(reducer.state, {"maxOutputTokens": max_tokens}),
        )
    )
    record: dict[str, JsonValue] = {"turnId": turn_id, "model": model_descriptor.label()}
    model = turns.model(model_descriptor)
    composed = compose_model_request(resolved, list(span), reducer.state, 0)
    request = build_request(
        model=composed.model,
        system_prompt=composed.system,
        tools=[],
        messages=composed.messages,
        parameters=dict(composed.parameters),
        binding=model.binding,
    )

    async def sink(event: StreamEvent) -> None:
        activity.heartbeat()

    try:
        outcome = await model.turn(request, sink, CancellationToken())
    except asyncio.CancelledError:
        # The model call it serves is being cancelled, or its worker is stopping:
        # close the summary turn (§22) rather than leave it open for a recovery.
        await commit(*cancellation_events(reducer.state, "the call it served ended", turns.clock()))
        raise
    except ModelFailure as exc:
        message = failure_message(exc, model.binding)
        failed = ModelCallFailed(
            turn_id=turn_id, ts=turns.clock(), model_call_index=0, error=message
        )
        probe = reducer.copy()
        probe.apply(failed)
        await commit(failed, failure_event(probe.state, message, turns.clock(), failure_code(exc)))
        record["error"] = message
        return record
    fields = completion_fields(outcome)
    await commit(
        ModelCallCompleted(
            turn_id=turn_id,
            ts=turns.clock(),
            model_call_index=0,
            message=fields.message,
            finish_reason=fields.finish_reason,
            usage=fields.usage,
            provider_metadata=fields.provider_metadata,
        )
    )
    record["usage"] = fields.usage.to_wire()
    text = fields.message.text().strip()
    if fields.message.tool_calls():
        # It has no tools: the calls are unusable, and its one call is spent (§20).
        await commit(*unusable_call_results(reducer.state, turns.clock()))
        await commit(limit_failure_event(reducer.state, turns.clock()))
        record["error"] = "the summariser answered with tool calls instead of a summary"
    elif not text:
        await commit(completion_event(reducer.state, turns.clock()))
        record["error"] = "the summariser answered with no text"
    else:
        await commit(completion_event(reducer.state, turns.clock()))
        record["text"] = text
    return record


__all__ = ["SummaryTurns", "summarise"]
