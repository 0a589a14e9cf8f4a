"""The seed-001 surface format, checked against the seed's own statements.

The seed (../shared/seeds/001_…) gives the v0 ``loop`` vocabulary with each
type's payload keys, turn-scoped distinct item ids (``i1``, ``i2``, …),
``item_delta`` as the one ephemeral event, ``turn_completed{final: true}``
closing the run, a newline-terminated JSON line encoding, and the evidence
decoder's rules; each test below is one of those statements, on histories
built event by event.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.histories import History, created, tool_turn
from turncore.events import (
    ReasoningDelta,
    StepReasoningEnd,
    StepReasoningStart,
    StepTextEnd,
    StepTextStart,
    StepToolCall,
    TextDelta,
    ToolInputDelta,
    TurnStreamEvent,
)
from turncore.messages import AssistantMessage, ReasoningPart, TextPart, ToolCallPart
from turncore.surface import SurfaceEvent, SurfaceProjector, encode_line, evidence_status

PAYLOAD_KEYS = {
    "turn_started": {"prompt"},
    "item_started": {"item_id", "item_type"},
    "item_delta": {"item_id", "chunk"},
    "item_completed": {"item_id", "item_type"},
    "turn_completed": {"usage", "iteration", "final"},
    "error": {"reason"},
}
ITEM_TYPES = {"message", "reasoning", "tool_use", "tool_result"}


def project(stream: list[TurnStreamEvent]) -> list[dict[str, Any]]:
    projector = SurfaceProjector()
    return [s.to_wire() for e in stream for s in projector.feed(e)]


def streamed_tool_turn() -> tuple[History, list[TurnStreamEvent]]:
    """A call that thinks, talks and calls a tool as it streams; then a streamed answer."""
    h = History(created(input="Read a.txt"))
    h.request()
    turn_id = h.turn_id
    stream: list[TurnStreamEvent] = list(h.events)
    start = len(h.events)
    h.step(StepReasoningStart())
    stream += [h.events[-1], ReasoningDelta(turn_id=turn_id, model_call_index=0, delta="hmm")]
    h.step(StepReasoningEnd())
    h.step(StepTextStart())
    stream += h.events[start + 1 :]
    stream += [
        TextDelta(turn_id=turn_id, model_call_index=0, delta="Read"),
        TextDelta(turn_id=turn_id, model_call_index=0, delta="ing."),
    ]
    mark = len(h.events)
    h.step(StepTextEnd())
    h.step(StepToolCall(tool_call_id="c1", tool_name="read_file", input={"path": "a.txt"}))
    stream += h.events[mark:]
    stream.append(
        ToolInputDelta(
            turn_id=turn_id, model_call_index=0, tool_call_id="c1", tool_name="read_file", delta="{"
        )
    )
    mark = len(h.events)
    h.complete("Reading.", [("c1", "read_file", {"path": "a.txt"})])
    # the completed message as the provider gave it: reasoning, text, tool call
    h.events[-1] = h.events[-1].model_copy(
        update={
            "message": AssistantMessage(
                content=[
                    ReasoningPart(text="hmm"),
                    TextPart(text="Reading."),
                    ToolCallPart(tool_call_id="c1", tool_name="read_file", input={"path": "a.txt"}),
                ]
            )
        }
    )
    h.invoke("c1")
    h.result("c1", "hi")
    h.request()
    stream += h.events[mark:]
    mark = len(h.events)
    h.step(StepTextStart())
    stream += h.events[mark:]
    stream.append(TextDelta(turn_id=turn_id, model_call_index=1, delta="It says hi."))
    mark = len(h.events)
    h.complete("It says hi.")
    h.finish()
    stream += h.events[mark:]
    return h, stream


def test_every_event_is_the_v0_vocabulary_with_its_payload_keys() -> None:
    _, stream = streamed_tool_turn()
    out = project(stream)
    for e in out:
        assert e["family"] == "loop" and e["turn_id"] == stream[0].turn_id
        assert PAYLOAD_KEYS[e["type"]] <= set(e["payload"]), e
        if e["type"] in ("item_started", "item_completed"):
            assert e["payload"]["item_type"] in ITEM_TYPES
    assert [e["type"] for e in out] == [
        "turn_started",
        "item_started",  # reasoning i1
        "item_delta",
        "item_started",  # message i2
        "item_delta",
        "item_delta",
        "item_started",  # tool_use i3
        "item_completed",
        "item_completed",
        "item_completed",
        "item_started",  # tool_result i4
        "item_completed",
        "item_started",  # message i5
        "item_delta",
        "item_completed",
        "turn_completed",
    ]
    assert out[0]["payload"] == {"prompt": "Read a.txt"}
    assert out[-1]["payload"]["final"] is True and out[-1]["payload"]["iteration"] == 2


def test_item_ids_are_turn_scoped_distinct_and_every_item_opens_before_it_completes() -> None:
    _, stream = streamed_tool_turn()
    out = project(stream)
    started = [e["payload"]["item_id"] for e in out if e["type"] == "item_started"]
    assert started == [f"i{n}" for n in range(1, len(started) + 1)]
    completed = [e["payload"]["item_id"] for e in out if e["type"] == "item_completed"]
    assert sorted(completed) == sorted(started)
    for e in out:
        if e["type"] in ("item_delta", "item_completed"):
            opened = next(
                i
                for i, x in enumerate(out)
                if x["type"] == "item_started"
                and x["payload"]["item_id"] == e["payload"]["item_id"]
            )
            assert opened < out.index(e)
    by_id = {e["payload"]["item_id"]: e["payload"] for e in out if e["type"] == "item_completed"}
    assert by_id["i1"] == {"item_id": "i1", "item_type": "reasoning", "text": "hmm"}
    assert by_id["i2"]["text"] == "Reading."
    assert by_id["i3"]["tool_call_id"] == "c1" and by_id["i3"]["input"] == {"path": "a.txt"}
    assert by_id["i4"]["item_type"] == "tool_result" and by_id["i4"]["output"] == "hi"


def test_item_delta_is_the_one_ephemeral_event_replay_gives_the_same_items() -> None:
    history, stream = streamed_tool_turn()
    live = project(stream)
    replayed = project(list(history.events))  # the file alone: no deltas
    assert not any(e["type"] == "item_delta" for e in replayed)
    assert [e for e in live if e["type"] != "item_delta"] == replayed
    chunks = "".join(
        e["payload"]["chunk"]
        for e in live
        if e["type"] == "item_delta" and e["payload"]["item_id"] == "i2"
    )
    assert chunks == "Reading."


def test_only_a_terminal_event_closes_the_run() -> None:
    h = History(created(input="Ask"))
    h.request()
    h.complete("Asking.", [("q1", "ask_human", {"question": "Name?"})])
    h.invoke("q1")
    h.suspend()
    out = project(list(h.events))
    suspended = out[-1]
    assert suspended["type"] == "turn_completed" and suspended["payload"]["final"] is False
    assert suspended["payload"]["status"] == "suspended"
    assert suspended["payload"]["pending"] == [
        {"kind": "async_tool", "tool_call_id": "q1", "tool_name": "ask_human"}
    ]
    assert "evidence" not in suspended["payload"]
    done = project(list(tool_turn().events))
    assert [e["payload"]["final"] for e in done if e["type"] == "turn_completed"] == [True]
    assert done[-1]["type"] == "turn_completed"


def test_faults_are_error_events_and_a_failed_turn_still_closes() -> None:
    h = History(created())
    h.request()
    h.fail_call("the provider timed out")
    h.fail_turn("the provider failed twice")
    out = project(list(h.events))
    assert [e["type"] for e in out] == ["turn_started", "error", "error", "turn_completed"]
    assert out[1]["payload"] == {"reason": "the provider timed out"}
    assert out[-1]["payload"]["final"] is True and out[-1]["payload"]["status"] == "failed"
    cancelled = History(created())
    cancelled.cancel("stop")
    last = project(list(cancelled.events))[-1]
    assert last["payload"]["status"] == "cancelled" and last["payload"]["reason"] == "stop"


def test_a_line_is_newline_terminated_json() -> None:
    event = SurfaceEvent("error", "t", {"reason": "x"})
    line = encode_line(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert orjson.loads(line) == {
        "type": "error",
        "family": "loop",
        "turn_id": "t",
        "payload": {"reason": "x"},
    }


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"final": True, "evidence": "accepted", "refs": ["r1"]}, "accepted"),
        ({"final": True, "evidence": "absent"}, "absent"),
        (
            {
                "final": True,
                "evidence": "rejected",
                "evidence_rejected": {"refs": ["r1"], "reason": "stale_evidence", "ref": None},
            },
            "rejected",
        ),
        ({"final": True, "evidence": "rejected", "refs": ["r1"]}, "rejected"),  # the key wins
        ({"final": True, "refs": ["r1"]}, "accepted"),  # legacy: the refs carrier never lied
        ({"final": True}, "unknown"),  # legacy with neither: never "absent"
        ({"final": True, "evidence": "proven"}, "unknown"),  # a future or forged value
        ({"final": True, "evidence": 1}, "unknown"),
        ({"final": True, "evidence": None, "refs": ["r1"]}, "unknown"),  # present is authoritative
        ("not a map", "unknown"),
    ],
)
def test_evidence_status_follows_the_grandfather_rule(payload: Any, expected: str) -> None:
    assert evidence_status(payload) == expected


def test_our_final_turn_completed_decodes_as_absent() -> None:
    final = project(list(tool_turn().events))[-1]["payload"]
    assert evidence_status(final) == "absent"
