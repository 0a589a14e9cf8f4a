"""Structured output's pure rules, without Temporal: what the loop decides after a
final answer, what the reducer accepts after one, and what the composer sends back."""

from __future__ import annotations

import pytest

from tests.builders import TurnBuilder, ts
from turncore import advance
from turncore.compose import compose_model_request
from turncore.errors import CorruptTurnError
from turncore.events import ResolvedAgent, TurnCancelled
from turncore.messages import UserMessage
from turncore.output import (
    FEEDBACK_LEAD,
    OUTPUT_INVALID_CODE,
    OutputSpec,
    strict_compatible,
    with_output,
)
from turncore.reducer import TurnReducer

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def structured(retries: int = 1) -> TurnBuilder:
    b = TurnBuilder()
    requested = with_output(b.created.agent.requested, OutputSpec(SCHEMA, retries))
    b.created = b.created.model_copy(
        update={"agent": b.created.agent.model_copy(update={"requested": requested})}
    )
    b.events[0] = b.created
    return b


def decide(b: TurnBuilder) -> advance.Action:
    return advance.next_action(TurnReducer.of(b.events).state, ts=ts(999))


def test_a_valid_answer_completes_and_an_invalid_one_is_answered_again() -> None:
    b = structured()
    b.model_call('{"ok": "yes"}')
    assert decide(b) == advance.CallModel(1)
    b.model_call('{"ok": true}')  # call 1 references only assistant:0
    requests = [e.request.messages for e in b.events if e.type == "model_call_requested"]
    assert requests[1] == ["assistant:0"]
    assert decide(b) == advance.Complete()


def test_an_answer_invalid_past_its_retries_fails_the_turn() -> None:
    b = structured(retries=1)
    b.model_call("not json")
    b.model_call('{"ok": 1}')
    action = decide(b)
    assert isinstance(action, advance.FailLimit)
    assert action.event.code == OUTPUT_INVALID_CODE
    assert "at ok: 1 is not of type 'boolean'" in action.event.error
    reducer = TurnReducer.of(b.events)
    reducer.apply(action.event)  # the reducer takes the failure in such a turn
    assert reducer.state.terminal == action.event

    none = structured(retries=0)
    none.model_call("not json")
    assert isinstance(decide(none), advance.FailLimit)


def test_the_reducer_relaxes_its_rule_only_for_structured_turns() -> None:
    plain = TurnBuilder()
    plain.model_call('{"ok": "yes"}')
    with pytest.raises(CorruptTurnError, match="follows a response without tool calls"):
        TurnReducer.of([*plain.events, plain.request()])
    # Even in a structured turn a final answer is never followed by a cancellation.
    b = structured()
    b.model_call('{"ok": "yes"}')
    reducer = TurnReducer.of(b.events)
    cancelled = TurnCancelled(turn_id=b.turn_id, ts=ts(999), usage=reducer.state.usage)
    with pytest.raises(CorruptTurnError, match="completes the turn"):
        reducer.apply(cancelled)
    assert reducer.state.terminal is None  # refused, and nothing changed


def test_the_composer_sends_the_invalid_answer_back_with_its_errors() -> None:
    b = structured()
    b.model_call('{"ok": "yes"}')
    b.request()
    state = TurnReducer.of(b.events).state
    resolved = state.definition.agent.resolved
    assert isinstance(resolved, ResolvedAgent)
    composed = compose_model_request(resolved, state.definition.context or [], state, 1)  # type: ignore[arg-type]
    assert composed.output_schema == SCHEMA
    *_, answer, feedback = composed.messages
    assert answer.role == "assistant"
    assert isinstance(feedback, UserMessage) and isinstance(feedback.content, str)
    assert feedback.content.startswith(FEEDBACK_LEAD)
    assert "- at ok: 'yes' is not of type 'boolean'" in feedback.content


def test_strict_mode_only_for_schemas_that_meet_its_rules() -> None:
    closed = {**SCHEMA, "additionalProperties": False}
    assert strict_compatible(closed)
    assert not strict_compatible(SCHEMA)  # additionalProperties left open
    nested = {**closed, "properties": {"ok": {"type": "object", "properties": {"x": {}}}}}
    assert not strict_compatible(nested)
