"""§26.1 and friends on a real dev server."""

from __future__ import annotations

from pathlib import Path

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
