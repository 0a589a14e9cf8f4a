"""Live deltas across hosts: two work dirs that share nothing but PostgreSQL (and Temporal).

A worker process on "host A" runs the model call (its model streams one chunk
and then waits at a gate); the web UI's SSE API on "host B", with a work dir
of its own, shows that chunk while the call is still open, and the call's
rows are gone from the database once it closes.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.stream_worker import stream_worker
from tests.test_web_api import read_sse
from tests.webui import running_ui
from turnclient.lib.pgdeltas import DatabaseDeltaReader, DatabaseDeltas
from turncore.events import TextDelta
from turncore.storage.postgres import PostgresTurnRepository, migrate

POSTGRES = '[storage]\nkind = "postgres"\n'


async def test_deltas_from_a_worker_on_one_host_reach_the_sse_api_on_another(
    temporal_env: WorkflowEnvironment,
    postgres_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    migrate(postgres_url)
    monkeypatch.setenv("TURNS_DATABASE_URL", postgres_url)  # the worker process inherits it
    queue = f"hosts-{uuid.uuid4()}"
    host_a, host_b = tmp_path / "a", tmp_path / "b"
    host_a.mkdir()
    host_b.mkdir()
    (host_a / "turns.toml").write_text(POSTGRES)
    async with (
        stream_worker(temporal_env, queue, host_a),
        running_ui(
            temporal_env,
            host_b,
            worker=False,
            task_queue=queue,
            toml=POSTGRES,
            environ={"TURNS_DATABASE_URL": postgres_url},
        ) as ui,
    ):
        turn_id = await ui.create("hello there")  # the demo streams its help text
        events = f"/api/turns/{turn_id}/events?follow=1"
        # held at A's gate after one chunk
        first = await read_sse(ui.http, events, until=lambda e: e.event == "delta")
        delta = first[-1]
        assert delta.data["type"] == "text_delta" and delta.data["seq"] == 1
        assert "I am" in delta.data["delta"]
        # Host B's work dir has no spool: the delta came through the database.
        spool_b = host_b / "home" / "live"
        assert not spool_b.exists() or not list(spool_b.iterdir())
        assert list((host_a / "live").glob(f"{turn_id}.deltas"))  # A's own watchers' spool
        (host_a / "gate").write_text("open")
        rest = await read_sse(ui.http, events, last_id=delta.id)
        assert all(e.data["seq"] > 1 for e in rest if e.event == "delta")
        assert rest[-1].event == "end"
        text = delta.data["delta"] + "".join(e.data["delta"] for e in rest if e.event == "delta")
        completed = next(e for e in rest if e.data.get("type") == "model_call_completed")
        content = completed.data["message"]["content"]
        final = content if isinstance(content, str) else content[0]["text"]
        # Best effort, as the spool: what streamed is the answer's beginning, in order (a
        # delta still on its way when the call closed is not sent: the completion says it).
        assert final.startswith(text) and len(text) > len("I am")

        # Pruned when the call closed (the worker's writer thread does it).
        store = PostgresTurnRepository.connect(postgres_url)
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while store.get_deltas(turn_id, (-1, 0)):
                assert asyncio.get_running_loop().time() < deadline, "deltas were never pruned"
                await asyncio.sleep(0.05)
        finally:
            store.close()


def test_the_database_keeps_a_bounded_tail_of_each_call(postgres_url: str) -> None:
    migrate(postgres_url)
    store = PostgresTurnRepository.connect(postgres_url)
    try:
        turn = "2026-12-02T00-00-00Z-0000001-000"
        mirror = DatabaseDeltas(store, keep=10)
        for i in range(25):
            mirror.publish(TextDelta(turn_id=turn, model_call_index=0, delta=f"<{i}>"))
        mirror.flush()
        kept = store.get_deltas(turn, (-1, 0))
        assert [seq for _, seq, _ in kept] == list(range(16, 26))  # the newest ten
        reader = DatabaseDeltaReader(store, turn, (0, 20))
        assert [d.delta.delta for d in reader.read()] == [f"<{i}>" for i in range(20, 25)]
        assert reader.read() == []  # each once
        mirror.publish(TextDelta(turn_id=turn, model_call_index=1, delta="next call"))
        mirror.finish(turn, 0)
        mirror.flush()
        assert [(i, seq) for i, seq, _ in store.get_deltas(turn, (-1, 0))] == [(1, 1)]
        assert [d.delta.delta for d in reader.read()] == ["next call"]
        mirror.finish(turn, 1)
        mirror.flush()
        assert store.get_deltas(turn, (-1, 0)) == []
    finally:
        store.close()
