"""Appends under faults: a batch retried after an ambiguous failure is written once,
and a torn final line makes the turn corrupt without any automatic repair."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, sync_tool
from turncore.errors import CorruptTurnError, InfrastructureError
from turncore.events import TurnEvent
from turncore.storage.repository import FileTurnRepository
from turncore.tools import ToolContext
from turncore_temporal.activities.payloads import (
    AppendInput,
    AppendResult,
    ModelCallInput,
    ModelCallResult,
)
from turncore_temporal.activities.turn_activities import TurnActivities


async def test_a_retried_append_writes_nothing_twice(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    failed_once: set[int] = set()
    calls: Counter[int] = Counter()

    class FlakyAppend(TurnActivities):
        @activity.defn
        async def append_events(self, input: AppendInput) -> AppendResult:
            # The write lands, then the activity dies before reporting: an ambiguous failure.
            result = await super().append_events(input)
            key = hash((input.known_offset, len(input.events), input.derive))
            calls[key] += 1
            if key not in failed_once:
                failed_once.add(key)
                raise ApplicationError("lost the reply after writing")
            return result

    def noop(value: Any, ctx: ToolContext) -> Any:
        return 1

    script = [{"toolCalls": [{"toolName": "t", "input": {}}]}, {"text": "done"}]
    h = Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=[sync_tool("t")],
        implementations={"t": noop},
        activities=FlakyAppend,
    )
    async with h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        done = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"}
        )
        assert done.status == "completed"
        assert calls and all(n == 2 for n in calls.values())  # every batch was retried once
        lines = h.repo.path_for(turn_id).read_bytes().splitlines()
        assert len(lines) == len(set(lines))  # and landed exactly once
        types = h.types(turn_id)
        assert types.count("tool_permission_required") == 1
        assert types.count("tool_permission_resolved") == 1
        assert types.count("tool_invocation_requested") == 1
        assert types.count("turn_suspended") == 1
        await h.assert_file_matches_query(turn_id)


async def test_a_torn_final_line_makes_the_turn_corrupt(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(temporal_env.client, tmp_path, ["hi"]) as h:
        turn_id, outcome = await h.run("go")
        path = h.repo.path_for(turn_id)
        intact = path.read_bytes()
        path.write_bytes(intact + b'{"type":"turn_fail')
        n = intact.count(b"\n") + 1
        for _ in range(2):  # every read fails the same way; nothing is repaired
            with pytest.raises(CorruptTurnError) as info:
                h.repo.read(turn_id)
            assert info.value.line == n and str(path) in str(info.value)
        with pytest.raises(CorruptTurnError):
            await h.turns.get_turn(turn_id)
        assert path.read_bytes() == intact + b'{"type":"turn_fail'


async def test_a_model_activity_that_keeps_dying_fails_the_run_not_the_turn(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    attempts: list[int] = []

    class BrokenModel(TurnActivities):
        @activity.defn
        async def call_model(self, input: ModelCallInput) -> ModelCallResult:
            attempts.append(input.model_call_index)
            raise RuntimeError("the model activity crashed before recording anything")

    async with Harness(temporal_env.client, tmp_path, ["hi"], activities=BrokenModel) as h:
        turn_id = await h.create("go")
        before = h.repo.path_for(turn_id).read_bytes()
        with pytest.raises(InfrastructureError, match="3 times in a row"):
            await h.turns.recover(turn_id)
        assert len(attempts) == 3
        assert h.repo.path_for(turn_id).read_bytes() == before  # no false turn_failed


class _StepAppendFailsOnce(FileTurnRepository):
    """The first append of a streamed step event fails, as a full disk or a lost
    database connection would; every other append works."""

    def __init__(self, work_dir: Path) -> None:
        super().__init__(work_dir)
        self.failed = False

    def append(
        self, turn_id: str, events: Sequence[TurnEvent], *, known_offset: int | None = None
    ) -> int:
        if not self.failed and any(e.type == "model_step_event" for e in events):
            self.failed = True
            raise InfrastructureError("the disk is full")
        return super().append(turn_id, events, known_offset=known_offset)


async def test_a_step_event_that_cannot_be_stored_does_not_fail_the_turn(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """§21.4: a repository failure while the model streams is not the turn's
    failure. The call stays open for the recovery table (interrupted, then
    re-issued); nothing says the call was cancelled or the turn failed."""
    repo = _StepAppendFailsOnce(tmp_path)
    async with Harness(temporal_env.client, tmp_path, ["hello there"], repository=repo) as h:
        turn_id, outcome = await h.run("go")
        assert repo.failed
        assert outcome.status == "completed", outcome
        types = h.types(turn_id)
        assert "turn_failed" not in types
        failed = [e for e in h.lines(turn_id) if e["type"] == "model_call_failed"]
        assert [e["modelCallIndex"] for e in failed] == [0]
        assert "cancelled" not in failed[0]["error"]  # the recovery table closed it
        assert types.count("model_call_completed") == 1
        await h.assert_file_matches_query(turn_id)
