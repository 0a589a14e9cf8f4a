"""§26.1 and friends on a real dev server."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness
from turncore.events import TextDelta


async def test_plain_model_response(temporal_env: WorkflowEnvironment, tmp_path: Path) -> None:
    async with Harness(temporal_env.client, tmp_path, ["Hello there, how are you today?"]) as h:
        turn_id = await h.create("hi")
        lifecycle = h.hub.lifecycle()
        execution = h.turns.advance_turn(turn_id)
        streamed = [e async for e in execution.events]
        outcome = await execution.outcome
        assert outcome.status == "completed"
        types = h.types(turn_id)
        assert types[0] == "turn_created"
        assert types[1] == "model_call_requested"
        assert types[-2:] == ["model_call_completed", "turn_completed"]
        assert set(types[2:-2]) == {"model_step_event"}
        lines = h.lines(turn_id)
        assert lines[1]["request"] == {"messages": ["input"], "parameters": {}}
        assert "text_delta" not in types
        completed = lines[-2]
        assert completed["finishReason"] == "stop"
        assert completed["usage"]["totalTokens"] > 0
        assert lines[-1]["output"] == completed["message"]
        assert lines[-1]["usage"] == completed["usage"]
        deltas = [e for e in streamed if isinstance(e, TextDelta)]
        assert "".join(d.delta for d in deltas) == "Hello there, how are you today?"
        await h.assert_file_matches_query(turn_id)
        # Processing events are published on the bus but never persisted (§17, §26.1).
        published = [lifecycle.get_nowait().type for _ in range(lifecycle.qsize())]
        assert published == ["turn-processing-start", "turn-processing-end"]
        assert not {"turn-processing-start", "turn-processing-end"} & set(types)
        assert turn_id not in h.hub.active


async def test_running_a_turn_asks_temporal_for_its_answer_once(
    temporal_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settle carries no input: its one update request waits for the answer,
    with no second request to poll for it (a round trip per turn run)."""
    service = temporal_env.client.workflow_service
    calls: Counter[str] = Counter()
    for name in ("update_workflow_execution", "poll_workflow_execution_update"):
        original = getattr(service, name)

        async def counted(*args: Any, _call: Any = original, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return await _call(*args, **kw)

        monkeypatch.setattr(service, name, counted)
    async with Harness(temporal_env.client, tmp_path, ["Hello."]) as h:
        _, outcome = await h.run("hi")
    assert outcome.status == "completed"
    assert calls == {"update_workflow_execution": 1}
