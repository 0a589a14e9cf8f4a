"""§27.3: the hot TurnExecution stream of `advance_turn`."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness
from turncore.errors import CorruptTurnError
from turncore.events import TextDelta

SLOW_TEXT = ["one two three four five six seven eight nine ten"]


async def test_outcome_needs_no_consumer(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    async with Harness(temporal_env.client, tmp_path, SLOW_TEXT) as h:
        turn_id = await h.create()
        execution = h.turns.advance_turn(turn_id)  # events are never touched
        assert (await execution.outcome).status == "completed"
        assert h.types(turn_id)[-1] == "turn_completed"


async def test_events_are_the_durable_lines_in_order_plus_deltas(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(temporal_env.client, tmp_path, SLOW_TEXT, delay=0.05) as h:
        turn_id = await h.create()
        execution = h.turns.advance_turn(turn_id)
        durable = []
        deltas = []
        async for event in execution.events:
            if isinstance(event, TextDelta):
                deltas.append(event.delta)
                continue
            durable.append(event.to_wire())
            # A durable event is only ever seen after it is in the file.
            on_disk = [orjson.loads(x) for x in h.repo.path_for(turn_id).read_bytes().splitlines()]
            assert durable[-1] in on_disk
        assert execution.outcome.done()  # the stream closes when the producer completes
        assert (
            durable == h.lines(turn_id)[1:]
        )  # everything after the offset it started at, once, in order
        assert "".join(deltas) == SLOW_TEXT[0]


async def test_closing_the_consumer_cancels_nothing(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(temporal_env.client, tmp_path, SLOW_TEXT, delay=0.2) as h:
        turn_id = await h.create()
        execution = h.turns.advance_turn(turn_id)
        events = execution.events
        first = await anext(events)  # type: ignore[arg-type]
        assert first is not None
        await events.aclose()  # type: ignore[attr-defined]
        outcome = await execution.outcome
        assert outcome.status == "completed"  # cancellation stays explicit


async def test_infrastructure_failure_errors_both(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(temporal_env.client, tmp_path, SLOW_TEXT) as h:
        turn_id = await h.create()
        path = h.repo.path_for(turn_id)
        path.write_bytes(path.read_bytes() + b"not json\n")
        execution = h.turns.advance_turn(turn_id)
        with pytest.raises(CorruptTurnError) as from_events:
            async for _ in execution.events:
                pass
        with pytest.raises(CorruptTurnError) as from_outcome:
            await execution.outcome
        assert from_events.value is from_outcome.value
        assert from_outcome.value.line == 2


async def test_unread_events_do_not_keep_a_subscription(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(temporal_env.client, tmp_path, SLOW_TEXT) as h:
        turn_id = await h.create()
        execution = h.turns.advance_turn(turn_id)
        assert turn_id in h.hub._subscribers  # deltas are collected from the start
        await execution.outcome
        assert turn_id not in h.hub._subscribers  # and no longer once it settled
