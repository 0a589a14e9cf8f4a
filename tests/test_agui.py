"""``GET /api/turns/{id}/events?format=ag-ui`` over real HTTP, parsed with the
``ag-ui-protocol`` package's own models (its discriminated ``Event`` union).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from ag_ui.core import (
    CustomEvent,
    Event,
    EventType,
    MessagesSnapshotEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from pydantic import TypeAdapter
from temporalio.testing import WorkflowEnvironment

from tests.stream_worker import stream_worker
from tests.webui import Ui, running_ui

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)
SAVE = "Save 'hello' to notes.txt"


@pytest.fixture
async def ui(temporal_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Ui]:
    async with running_ui(temporal_env, tmp_path) as running:
        yield running


@dataclass
class Got:
    id: str | None
    event: Any


async def read_agui(
    http: httpx.AsyncClient,
    path: str,
    *,
    last_id: str | None = None,
    until: Any = None,
) -> list[Got]:
    """The stream's events, each validated by AG-UI's ``Event`` union, until it ends (or
    ``until(event)`` holds)."""
    headers = {"Accept": "text/event-stream"}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    out: list[Got] = []
    async with http.stream("GET", path, headers=headers) as r:
        assert r.status_code == 200, await r.aread()
        fields: dict[str, str] = {}
        async for line in r.aiter_lines():
            if line == "":
                if "data" in fields:
                    assert "event" not in fields  # AG-UI framing: the type is in the data
                    out.append(Got(fields.get("id"), EVENTS.validate_json(fields["data"])))
                    if until is not None and until(out[-1].event):
                        return out
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
    return out


def types(got: list[Got]) -> list[str]:
    return [g.event.type.value for g in got]


async def test_an_approval_turn_as_ag_ui_runs_messages_tools_and_an_interrupt(ui: Ui) -> None:
    turn_id, view = await ui.suspended(SAVE)
    call = view["pending"]["permissions"][0]["toolCallId"]
    path = f"/api/turns/{turn_id}/events?format=ag-ui&follow=1"

    def interrupted(e: Any) -> bool:
        return isinstance(e, RunFinishedEvent) and isinstance(
            e.outcome, RunFinishedInterruptOutcome
        )

    first = await read_agui(ui.http, path, until=interrupted)
    assert types(first) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "RUN_FINISHED",
    ]
    started = first[0].event
    assert isinstance(started, RunStartedEvent)
    assert (started.thread_id, started.run_id) == (turn_id, f"{turn_id}:1")
    text = first[2].event
    assert isinstance(text, TextMessageContentEvent) and text.delta == "I will write notes.txt."
    tool = first[4].event
    assert isinstance(tool, ToolCallStartEvent)
    assert (tool.tool_call_id, tool.tool_call_name) == (call, "write_file")
    args = first[5].event
    assert isinstance(args, ToolCallArgsEvent)
    assert orjson.loads(args.delta) == {"path": "notes.txt", "content": "hello\n"}
    finished = first[-1].event
    assert isinstance(finished.outcome, RunFinishedInterruptOutcome)
    (interrupt,) = finished.outcome.interrupts
    assert (interrupt.id, interrupt.reason, interrupt.tool_call_id) == (
        f"permission:{call}",
        "tool_approval",
        call,
    )
    assert interrupt.message == "approve write_file"
    assert interrupt.response_schema is not None
    assert interrupt.response_schema["properties"]["decision"]["enum"] == ["allow", "deny"]

    r = await ui.http.post(f"/api/turns/{turn_id}/calls/{call}/approve", json={})
    assert r.status_code == 200, r.text
    # Resumed after the interrupt, by its id: the next run, and nothing sent twice.
    rest = await read_agui(ui.http, path, last_id=first[-1].id)
    assert types(rest)[:3] == ["RUN_STARTED", "CUSTOM", "TOOL_CALL_RESULT"]
    assert types(rest)[-1] == "RUN_FINISHED"
    resumed = rest[0].event
    assert isinstance(resumed, RunStartedEvent) and resumed.run_id != started.run_id
    custom = rest[1].event
    assert isinstance(custom, CustomEvent) and custom.name == "turncore.permission_resolved"
    assert custom.value["decision"] == "allow" and custom.value["via"] == "web"
    result = rest[2].event
    assert isinstance(result, ToolCallResultEvent) and result.tool_call_id == call
    assert orjson.loads(result.content)["created"] is True
    done = rest[-1].event
    assert isinstance(done, RunFinishedEvent) and done.run_id == resumed.run_id
    assert isinstance(done.outcome, RunFinishedSuccessOutcome)
    assert done.result == "Wrote 6 bytes to notes.txt."
    assert done.usage and done.usage[0].model == "demo" and done.usage[0].input_tokens

    # The same stream read whole, and the log form (NDJSON), agree event for event.
    whole = await read_agui(ui.http, path)
    assert types(whole) == types(first) + types(rest)
    r = await ui.http.get(f"/api/turns/{turn_id}/events", params={"format": "ag-ui"})
    assert r.headers["content-type"].startswith("application/x-ndjson")
    logged = [EVENTS.validate_json(x) for x in r.content.splitlines()]
    assert [e.type.value for e in logged] == types(whole)


async def test_text_streams_as_ag_ui_content_deltas_from_a_worker_in_another_process(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    queue = f"agui-{uuid.uuid4()}"
    home = tmp_path / "home"
    home.mkdir()
    async with (
        stream_worker(temporal_env, queue, home),
        running_ui(temporal_env, tmp_path, worker=False, task_queue=queue) as ui,
    ):
        turn_id = await ui.create("hello there")  # the demo streams its help text
        path = f"/api/turns/{turn_id}/events?format=ag-ui&follow=1"
        # Held at the gate after one chunk: that chunk arrives live, before the call ends.
        first = await read_agui(
            ui.http, path, until=lambda e: e.type == EventType.TEXT_MESSAGE_CONTENT
        )
        assert types(first) == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
        chunk = first[-1].event.delta
        (home / "gate").write_text("open")
        # Read on from the start: the file and the rest of the deltas make one message.
        whole = await read_agui(ui.http, path)
        text = "".join(
            g.event.delta for g in whole if g.event.type == EventType.TEXT_MESSAGE_CONTENT
        )
        assert text.startswith(chunk)
        done = whole[-1].event
        assert isinstance(done, RunFinishedEvent) and done.result == text
        assert types(whole)[-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
        # Resumed inside the message after the call closed (its deltas gone): what the
        # client holds of the text is unknown, so the message ends and the thread comes
        # whole in a snapshot, never the text again on top of what it has.
        await ui.until(turn_id, lambda v: v["status"] == "completed")
        rest = await read_agui(ui.http, path, last_id=first[-1].id)
        assert types(rest) == ["TEXT_MESSAGE_END", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
        snapshot = rest[1].event
        assert isinstance(snapshot, MessagesSnapshotEvent)
        user, answer = snapshot.messages
        assert (user.role, user.content) == ("user", "hello there")
        assert (answer.role, answer.content) == ("assistant", text)


async def test_an_unknown_format_is_400_naming_the_formats(ui: Ui) -> None:
    turn_id, _ = await ui.suspended(SAVE)
    r = await ui.http.get(f"/api/turns/{turn_id}/events", params={"format": "agui"})
    assert r.status_code == 400
    assert r.json()["error"] == "format must be one of turn, surface, ag-ui"
