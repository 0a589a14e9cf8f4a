"""Live deltas across processes: the per-turn spool, and follow_turn over a real worker process.

The spool tests use real files; the end-to-end test runs the model call in a
separate worker process (tests/stream_worker.py) on the session's dev server
and watches from this one, as a web UI or ``turns watch`` on the same host would.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
from temporalio.testing import WorkflowEnvironment

from tests.stream_worker import stream_worker
from turnclient.lib.api import CreateTurnInput
from turnclient.lib.deltaspool import DeltaSpool, DeltaSpoolReader, spool_dir
from turnclient.lib.follow import Durable, FollowItem, Live, Settled, follow_turn
from turnclient.runtime.connection import Runtime
from turncore.events import ReasoningDelta, RequestedAgent, TextDelta
from turncore.messages import UserMessage

ROOT = Path(__file__).resolve().parent.parent
TURN = "2026-01-02T03-04-05Z-0000001-000"


def text(i: int, delta: str) -> TextDelta:
    return TextDelta(turn_id=TURN, model_call_index=i, delta=delta)


def test_a_reader_gets_each_spooled_delta_once_in_order(tmp_path: Path) -> None:
    spool = DeltaSpool(tmp_path)
    reader = DeltaSpoolReader(tmp_path, TURN)
    assert reader.read() == []
    spool.publish(text(0, "Hel"))
    spool.publish(ReasoningDelta(turn_id=TURN, model_call_index=0, delta="hmm"))
    first = reader.read()
    spool.publish(text(0, "lo"))
    second = reader.read()
    assert [(d.seq, d.delta.delta) for d in first] == [(1, "Hel"), (2, "hmm")]
    assert [(d.seq, d.delta.delta) for d in second] == [(3, "lo")]
    assert reader.read() == []


def test_the_spool_is_a_bounded_ring_and_a_late_reader_gets_what_it_holds(tmp_path: Path) -> None:
    spool = DeltaSpool(tmp_path, segment_bytes=400)
    steady = DeltaSpoolReader(tmp_path, TURN)
    seen: list[int] = []
    for n in range(200):
        spool.publish(text(0, f"chunk {n:03d} "))
        if n % 3 == 0:  # often enough: two segments hold more than three lines
            seen += [d.seq for d in steady.read()]
        files = list(tmp_path.iterdir())
        assert len(files) <= 2
        assert sum(f.stat().st_size for f in files) <= 2 * 400 + 200
    seen += [d.seq for d in steady.read()]
    # A reader that keeps up across rotations misses nothing and repeats nothing.
    assert seen == list(range(1, 201))
    # A reader that joins late gets what the ring still holds: the newest, in order, gap-free.
    late = [d.seq for d in DeltaSpoolReader(tmp_path, TURN).read()]
    assert late and late[-1] == 200 and late == list(range(late[0], 201))


def test_a_reader_resumes_after_a_position_and_a_new_call_starts_afresh(tmp_path: Path) -> None:
    spool = DeltaSpool(tmp_path)
    for piece in ("a", "b", "c"):
        spool.publish(text(0, piece))
    resumed = DeltaSpoolReader(tmp_path, TURN, after=(0, 2))
    assert [d.delta.delta for d in resumed.read()] == ["c"]
    spool.finish(TURN, 0)
    assert list(tmp_path.iterdir()) == []  # dropped when the call ends
    spool.publish(text(1, "d"))
    assert [(d.position, d.delta.delta) for d in resumed.read()] == [((1, 1), "d")]


def test_a_spool_write_that_fails_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    DeltaSpool(blocker).publish(text(0, "lost"))  # best effort: logged, dropped


async def next_item(stream: AsyncIterator[FollowItem]) -> FollowItem:
    return await asyncio.wait_for(anext(stream), 60)


async def test_deltas_from_a_worker_process_reach_a_watcher_in_another(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    work = tmp_path / "home"
    work.mkdir()
    queue = f"live-{uuid.uuid4()}"
    runtime = Runtime.from_work_dir(work, env={"TURNS_TASK_QUEUE": queue})
    async with stream_worker(temporal_env, queue, work):
        turns = runtime.turn_client(temporal_env.client)
        turn_id = await turns.create_turn(
            CreateTurnInput(
                agent=RequestedAgent(agent_id="demo"),
                input=UserMessage(content="hello there"),  # the demo answers with its help text
                human_available=True,
            )
        )
        outcome = turns.advance_turn(turn_id).outcome
        watcher = follow_turn(runtime.repository, spool_dir(work), turn_id)
        durable: list[str] = []
        while True:
            item = await next_item(watcher)
            if isinstance(item, Live):
                break
            assert isinstance(item, Durable)
            durable.append(item.event.type)
        # The first chunk arrived while the call is still open (the worker holds it at the gate).
        assert isinstance(item.delta, TextDelta) and item.delta.model_call_index == 0
        assert "model_call_requested" in durable and "model_call_completed" not in durable
        streamed = item.delta.delta

        # A watcher joining now gets every durable event, then the live text so far.
        late = follow_turn(runtime.repository, spool_dir(work), turn_id)
        late_items = [await next_item(late)]
        while not isinstance(late_items[-1], Live):
            late_items.append(await next_item(late))
        assert [i.event.type for i in late_items[:-1] if isinstance(i, Durable)] == durable
        assert late_items[-1].delta.delta == streamed  # type: ignore[union-attr]
        await late.aclose()

        (work / "gate").write_text("open")
        after_completion: list[FollowItem] = []
        completed = False
        while True:
            item = await next_item(watcher)
            if isinstance(item, Live):
                assert not completed, "a delta after its call completed"
                streamed += item.delta.delta
            elif isinstance(item, Durable):
                completed = completed or item.event.type == "model_call_completed"
                after_completion.append(item)
            else:
                assert isinstance(item, Settled)
                break
        result = await asyncio.wait_for(outcome, 60)
        assert result.status == "completed"
        final = result.output.content
        final_text = final if isinstance(final, str) else "".join(p.text for p in final)  # type: ignore[union-attr]
        assert final_text.startswith(streamed) and streamed
        # Deltas are never durable: not in the file, not in Temporal history, and the
        # spool is gone once the call ended.
        lines = runtime.repository.path_for(turn_id).read_bytes().splitlines()
        assert all(orjson.loads(x)["type"] not in ("text_delta",) for x in lines)
        history = await temporal_env.client.get_workflow_handle(turn_id).fetch_history()
        assert b"text_delta" not in history.to_json().encode()
        assert list(spool_dir(work).glob(f"{turn_id}*")) == []
