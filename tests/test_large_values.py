"""Large values live only in the file: no payload in the workflow history exceeds 256 KiB."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, sync_tool
from turncore.elision import elide_event, is_elided
from turncore.model.port import Limits
from turncore.reducer import TurnReducer
from turncore.tools import ToolContext

BIG = Limits(
    max_field_bytes=64 << 20,
    max_request_bytes=64 << 20,
    max_response_bytes=64 << 20,
    max_sse_event_bytes=64 << 20,
)
PAYLOAD_LIMIT = 256 * 1024


def _payloads(message: Any) -> list[Payload]:
    """Every Payload inside a history event (walks the protobuf, maps and lists included)."""
    if isinstance(message, Payload):
        return [message]
    found: list[Payload] = []
    for _descriptor, value in message.ListFields():
        if hasattr(value, "ListFields"):
            found.extend(_payloads(value))
        elif hasattr(value, "keys"):
            found.extend(
                p for v in value.values() if hasattr(v, "ListFields") for p in _payloads(v)
            )
        elif isinstance(value, (str, bytes, int, float, bool)):
            continue
        else:
            found.extend(p for v in value if hasattr(v, "ListFields") for p in _payloads(v))
    return found


async def test_large_tool_output_and_model_response(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    ten_mb = "x" * (10 * 1024 * 1024)
    five_mb = "y" * (5 * 1024 * 1024)

    def dump(value: Any, ctx: ToolContext) -> Any:
        return {"data": ten_mb}

    script = [{"toolCalls": [{"toolName": "dump", "input": {}}]}, {"text": five_mb}]
    async with Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=[sync_tool("dump")],
        implementations={"dump": dump},
        permissions={"builtin:dump": "none"},
        limits=BIG,
    ) as h:
        turn_id, outcome = await h.run("make it big")
        # The caller gets the answer whole, though the run holds it elided.
        assert outcome.status == "completed" and outcome.output.text() == five_mb
        events = h.repo.read(turn_id)
        state = TurnReducer.of(events).state
        assert state.tool_calls[0].result is not None
        assert state.tool_calls[0].result.result.output == {
            "data": ten_mb
        }  # the file keeps the value
        assert state.terminal is not None and state.terminal.type == "turn_completed"
        assert state.terminal.output.text() == five_mb
        # The state query shows the same turn with the large values marked elided.
        queried = await h.query_state(turn_id)
        queried.pop("rejectedInputs")
        expected = TurnReducer.of([elide_event(e) for e in events]).state.to_wire()
        assert queried == expected
        assert is_elided(queried["toolCalls"][0]["result"]["result"]["output"])
        assert "elided by turncore" in queried["terminal"]["output"]["content"][0]["text"]
        history = await h.client.get_workflow_handle(turn_id).fetch_history()
        sizes = [p.ByteSize() for e in history.events for p in _payloads(e)]
        assert sizes, "the walk found no payloads at all"
        assert max(sizes) < PAYLOAD_LIMIT, max(sizes)


async def test_long_files_load_in_pages_that_fit_payloads(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    def eight_kb(value: Any, ctx: ToolContext) -> Any:
        return {"i": value.get("i")}

    # Tool-call inputs are never elided (invocations copy them): 8 KB each, the
    # file's events stay under the budget and load as they are, in pages.
    rounds = [
        {
            "toolCalls": [
                {"toolName": "dump", "input": {"i": 10 * r + i, "pad": "x" * 8_000}}
                for i in range(10)
            ]
        }
        for r in range(4)
    ]
    script = [
        *rounds,
        {"toolCalls": [{"toolName": "ask", "input": {}}]},
        {"text": "done"},
    ]
    tools = [sync_tool("dump"), sync_tool("ask")]
    async with Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=tools,
        implementations={"dump": eight_kb, "ask": eight_kb},
        permissions={"builtin:dump": "none"},
    ) as h:
        turn_id, outcome = await h.run("many chunks")
        assert outcome.status == "suspended"
        assert h.repo.path_for(turn_id).stat().st_size > 300_000
        # A new run for the same file must load it in several pages.
        await h.client.get_workflow_handle(turn_id).terminate("reload from the file")
        assert (await h.turns.recover(turn_id)).status == "suspended"
        history = await h.client.get_workflow_handle(turn_id).fetch_history()
        loads = [
            e
            for e in history.events
            if e.HasField("marker_recorded_event_attributes")
            and b"load_turn" in e.SerializeToString()
        ]
        assert len(loads) >= 3
        sizes = [p.ByteSize() for e in history.events for p in _payloads(e)]
        assert max(sizes) < PAYLOAD_LIMIT
        await h.assert_file_matches_query(turn_id)


@pytest.mark.parametrize("fast", [False, True], ids=["plain", "fast"])
async def test_history_per_model_call_is_flat_whatever_the_tools_return(
    temporal_env: WorkflowEnvironment, tmp_path: Path, fast: bool
) -> None:
    """Tool outputs of 100 B, 10 KB and 100 KB: history grows by the same bytes per
    model call (within 10%), because outputs the file holds stay out of it."""
    size = [0]

    def blob(value: Any, ctx: ToolContext) -> Any:
        return "x" * size[0]

    iterations = 3
    script = [
        *({"toolCalls": [{"toolName": "blob", "input": {"i": i}}]} for i in range(iterations)),
        {"text": "done"},
    ]
    per_call: dict[int, float] = {}
    for output in (100, 10_000, 100_000):
        size[0] = output
        async with Harness(
            temporal_env.client,
            tmp_path / str(output),
            script,
            tools=[sync_tool("blob")],
            implementations={"blob": blob},
            fast={"blob": 5.0} if fast else {},
            permissions={"builtin:blob": "none"},
        ) as h:
            turn_id, outcome = await h.run("go")
            assert outcome.status == "completed"
            if output <= 1000:  # under the budget: the central invariant exactly
                await h.assert_file_matches_query(turn_id)
            history = await h.client.get_workflow_handle(turn_id).fetch_history()
        per_call[output] = sum(e.ByteSize() for e in history.events) / (iterations + 1)
    assert max(per_call.values()) / min(per_call.values()) <= 1.10, per_call
    assert max(per_call.values()) < 8_000, per_call


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "plain"])
async def test_history_leaves_out_the_turn_id_and_provider_metadata_the_file_holds(
    temporal_env: WorkflowEnvironment, tmp_path: Path, fast: bool
) -> None:
    """Events reach the workflow without their turn id (it knows its own) and without
    a response's provider metadata (no state comes from it). The file keeps both,
    the state query still equals the file's reduction, and the run records one
    patch marker, with one change-version upsert, for every patch it passes."""
    script = [
        {"toolCalls": [{"toolName": "echo", "input": {"i": 0}}]},
        {"toolCalls": [{"toolName": "echo", "input": {"i": 1}}]},
        {"text": "done"},
    ]
    async with Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=[sync_tool("echo")],
        implementations={"echo": lambda value, ctx: value},
        fast={"echo": 5.0} if fast else {},
        permissions={"builtin:echo": "none"},
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "completed"
        await h.assert_file_matches_query(turn_id)
        on_file = h.repo.read(turn_id)
        history = await h.client.get_workflow_handle(turn_id).fetch_history()
    assert all(e.turn_id == turn_id for e in on_file)
    assert any(e.type == "model_call_completed" and e.provider_metadata for e in on_file)
    results = [
        p.data
        for e in history.events
        if e.HasField("activity_task_completed_event_attributes")
        or e.marker_recorded_event_attributes.marker_name == "core_local_activity"
        for p in _payloads(e.activity_task_completed_event_attributes)
        + _payloads(e.marker_recorded_event_attributes.details["result"])
    ]
    assert sum(b'"type":"model_call_completed"' in d for d in results) == 3
    assert sum(b'"type":"tool_result"' in d for d in results) == 2
    for data in results:
        assert turn_id.encode() not in data
        assert b"providerMetadata" not in data
    patches = [
        e for e in history.events if e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    upserts = [
        e
        for e in history.events
        if "TemporalChangeVersion"
        in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    ]
    assert len(patches) == 1 and len(upserts) == 1
