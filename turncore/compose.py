"""The request composer (spec §8.3): durable file in, provider-neutral request out.

The model activity transmits exactly what ``compose_model_request`` returns,
and ``turns inspect`` calls the same function, so the durable file plus the
composer reproduce what the model was sent; the two views cannot diverge.

``next_model_request`` is the other half: the refs a new model call must
record (what is new since the previous call), derived from the state alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._wire import Opt, WireModel
from .budget import BUDGET_KEY, recorded_drop, recorded_summary, summary_message
from .errors import CorruptTurnError
from .events import (
    ContextRef,
    ModelDescriptor,
    ModelRequest,
    ResolvedAgent,
    ToolDescriptor,
)
from .jsonvalue import JsonObject, JsonValue
from .messages import (
    AssistantMessage,
    ConversationMessage,
    ToolMessage,
    ToolResultOutput,
    ToolResultPart,
)
from .output import OutputSpec, answer_errors, feedback_message, output_spec
from .reducer import ModelCallState, ToolCallState, TurnState


class ToolDefinition(WireModel):
    """What the model sees of a tool: name, description and JSON Schema; no authority."""

    name: str
    description: str
    input_schema: JsonValue

    @classmethod
    def of(cls, descriptor: ToolDescriptor) -> ToolDefinition:
        return cls(
            name=descriptor.name,
            description=descriptor.description,
            input_schema=descriptor.input_schema,
        )


class ComposedRequest(WireModel):
    """The exact provider-neutral request of one model call."""

    model: ModelDescriptor
    system: str
    tools: list[ToolDefinition]
    messages: list[ConversationMessage]
    parameters: JsonObject
    model_call_index: int
    reasoning_effort: Opt[str] = None
    output_schema: Opt[JsonObject] = None
    """The JSON Schema the final answer must match (``turncore.output``)."""


def next_model_request(
    state: TurnState, parameters: dict[str, JsonValue] | None = None
) -> ModelRequest:
    """The ``request`` of the next model call: only what is new since the previous call.

    Call 0 is ``["context"?, "input"]`` (with ``contextRef`` for a referenced
    prefix); call N is the previous response and its batch's results in the
    model's order; a re-issue after an interrupted call is ``[]``.
    """
    params = dict(parameters or {})
    if not state.model_calls:
        context = state.definition.context
        if isinstance(context, ContextRef):
            return ModelRequest(context_ref=context, messages=["input"], parameters=params)
        refs = ["context", "input"] if context else ["input"]
        return ModelRequest(messages=refs, parameters=params)
    previous = state.model_calls[-1]
    if previous.response is None:
        return ModelRequest(messages=[], parameters=params)
    refs = [f"assistant:{previous.index}"]
    refs += [
        f"toolResult:{t.tool_call_id}"
        for t in sorted(
            (t for t in state.tool_calls if t.model_call_index == previous.index),
            key=lambda t: t.order,
        )
    ]
    return ModelRequest(messages=refs, parameters=params)


@dataclass(frozen=True)
class ComposedPrefix:
    """The messages of a composed request before its own call's refs, kept to
    compose that call again or a later one.

    Call N's messages are call N-1's followed by what call N's refs add, so a
    caller that keeps the prefix (the model activity, per turn) composes each
    call from the previous one instead of from call 0: O(new refs), not
    O(turn). The prefix is used only for the same state lineage: the same
    definition and context objects, and the same ``request`` object of its
    last call (a request never changes once recorded, and a reducer's states
    share it); anything else composes from the start. Either way the result is
    the same.
    """

    definition: object
    context: Sequence[ConversationMessage]
    index: int
    """The last call whose refs are in ``messages`` (-1: none)."""
    request: object
    """That call's ``request``, by identity."""
    messages: tuple[ConversationMessage, ...]


def compose_model_request(
    agent: ResolvedAgent,
    context: Sequence[ConversationMessage],
    state: TurnState,
    model_call_index: int,
    prefix: ComposedPrefix | None = None,
) -> ComposedRequest:
    """Rebuild the request of model call ``model_call_index`` from durable state.

    ``agent`` is the materialized agent snapshot (§6.7) and ``context`` the
    materialized context as transmitted (``ContextResolver.resolve``): it is
    placed where call 0's ``contextRef`` or ``context`` ref puts it. With a
    ``prefix`` from composing an earlier or the same call of the same state
    lineage (``compose_incrementally``), only the later calls' refs are composed.
    """
    return compose_incrementally(agent, context, state, model_call_index, prefix)[0]


def compose_incrementally(
    agent: ResolvedAgent,
    context: Sequence[ConversationMessage],
    state: TurnState,
    model_call_index: int,
    prefix: ComposedPrefix | None = None,
) -> tuple[ComposedRequest, ComposedPrefix]:
    """``compose_model_request``, and the prefix to compose this call or a later one from."""
    if model_call_index >= len(state.model_calls):
        raise CorruptTurnError(f"model call {model_call_index} has not been requested")
    messages: list[ConversationMessage] = []
    definition = state.definition
    calls = state.model_calls
    first = 0
    if (
        prefix is not None
        and prefix.definition is definition
        and prefix.context is context
        and prefix.index < model_call_index
        and (prefix.index < 0 or calls[prefix.index].request is prefix.request)
    ):
        messages.extend(prefix.messages)
        first = prefix.index + 1
    before = len(messages)
    for call in calls[first : model_call_index + 1]:
        before = len(messages)
        _add_refs(messages, call, context, state)
    kept = ComposedPrefix(
        definition=definition,
        context=context,
        index=model_call_index - 1,
        request=calls[model_call_index - 1].request if model_call_index else None,
        messages=tuple(messages[:before]),
    )
    target = calls[model_call_index]
    params = dict(target.request.parameters)
    dropped = recorded_drop(params, len(context))
    summary = recorded_summary(params) if dropped else None
    params.pop(BUDGET_KEY, None)  # the composer's, never a provider's
    if dropped:
        messages = messages[dropped:]  # the prefix comes first (§6.6): its oldest
    if summary is not None and summary.sent and summary.text is not None:
        # What was dropped, summarised by its own recorded call: first, after the system prompt.
        messages.insert(0, summary_message(dropped, summary.text))
    effort = definition.config.reasoning_effort
    spec = output_spec(definition.agent.requested)
    # Constructed, not validated: every value is a validated model already, and
    # validating a long turn's messages again would cost O(turn) per call.
    composed = ComposedRequest.model_construct(
        model=definition.agent.resolved.model,
        system=agent.system_prompt,
        tools=[ToolDefinition.of(t) for t in agent.tools],
        messages=messages,
        parameters=params,
        model_call_index=model_call_index,
        reasoning_effort=effort,
        output_schema=spec.schema if spec is not None else None,
    )
    return composed, kept


def _add_refs(
    messages: list[ConversationMessage],
    call: ModelCallState,
    context: Sequence[ConversationMessage],
    state: TurnState,
) -> None:
    """Append the messages ``call``'s request refs name (§8.3)."""
    if call.request.context_ref is not None:
        messages.extend(context)
    pending_results: list[ToolResultPart] = []
    for ref in call.request.messages:
        if ref.startswith("toolResult:"):
            # Call N's results are those of call N-1's batch (§24); the
            # index matters because an id may recur in later responses.
            tool_call_id = ref.removeprefix("toolResult:")
            pending_results.append(
                _tool_result_part(state.tool_call(tool_call_id, call.index - 1), ref)
            )
            continue
        if pending_results:
            messages.append(ToolMessage(content=pending_results))
            pending_results = []
        if ref == "context":
            messages.extend(context)
        elif ref == "input":
            messages.append(state.definition.input)
        elif ref.startswith("assistant:"):
            answer = _assistant(state.model_calls, ref)
            messages.append(answer)
            messages.extend(_answered_back(output_spec(state.definition.agent.requested), answer))
        else:
            raise CorruptTurnError(f"unknown request ref {ref!r} in model call {call.index}")
    if pending_results:
        messages.append(ToolMessage(content=pending_results))


def _assistant(calls: Sequence[ModelCallState], ref: str) -> AssistantMessage:
    raw = ref.removeprefix("assistant:")
    if not raw.isdigit():
        raise CorruptTurnError(f"malformed request ref {ref!r}")
    index = int(raw)
    call = calls[index] if index < len(calls) else None  # a call's index is its place
    response = call.response if call is not None else None
    if response is None:
        raise CorruptTurnError(f"request ref {ref!r} names a model call without a response")
    return response


def _answered_back(spec: OutputSpec | None, answer: AssistantMessage) -> list[ConversationMessage]:
    """After an invalid final answer that a later call follows, the message that
    sends it back with its validation errors (``turncore.output``): derived from
    the file and the schema, never written, so the file stays the spec's."""
    if spec is None or answer.tool_calls():
        return []
    errors = answer_errors(spec, answer)
    return [feedback_message(spec, errors)] if errors else []


def _tool_result_part(call: ToolCallState | None, ref: str) -> ToolResultPart:
    if call is None or call.result is None:
        raise CorruptTurnError(f"request ref {ref!r} names no tool result")
    result = call.result.result
    return ToolResultPart(
        tool_call_id=call.tool_call_id,
        tool_name=call.tool_name,
        output=ToolResultOutput(
            type="error-json" if result.is_error else "json", value=result.output
        ),
    )


def closed_transcript(state: TurnState) -> list[ConversationMessage]:
    """This turn's own messages: its input and everything it produced, in model order.

    Tool results (including synthetic closure results) follow their
    assistant message grouped in one tool message, in the model's order.
    """
    out: list[ConversationMessage] = [state.definition.input]
    for call in state.model_calls:
        if call.response is None:
            continue
        out.append(call.response)
        if call.index + 1 < len(state.model_calls):
            out.extend(_answered_back(output_spec(state.definition.agent.requested), call.response))
        batch = sorted(
            (t for t in state.tool_calls if t.model_call_index == call.index), key=lambda t: t.order
        )
        parts = [
            _tool_result_part(t, f"toolResult:{t.tool_call_id}")
            for t in batch
            if t.result is not None
        ]
        if parts:
            out.append(ToolMessage(content=parts))
    return out
