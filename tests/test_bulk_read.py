"""What a bulk read (``decode_log``) may do to the process for speed and memory.

A read pauses the cyclic garbage collector while it decodes and files what it
made among the old objects, so no young collection walks a long log's events;
and events with every field on their line share one fields set per class
(bench/replay.py measures both). These tests pin what that may and may not
do: the collector is left as the caller had it, an application's own frozen
objects stay frozen, garbage cycles are still collected, and each event still
says exactly which fields its line set.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.builders import TURN_ID, TurnBuilder, read_call
from turncore.events import TurnEvent, parse_event
from turncore.storage.repository import FileTurnRepository, _AppFreezes


def long_turn() -> list[TurnEvent]:
    """A completed turn of some 600 events: several times the objects that start
    a young collection (``gc.get_threshold()[0]``)."""
    b = TurnBuilder(max_model_calls=1_000)
    for n in range(100):
        call = read_call(f"r{n}")
        b.model_call(f"Step {n}.", [call])
        b.invoke(call.tool_call_id)
        b.progress(call.tool_call_id, {"done": False})
        b.result(call.tool_call_id, f"contents {n}")
    b.model_call("Done.")
    b.finish()
    return b.events


@pytest.fixture
def repo(tmp_path: Path) -> FileTurnRepository:
    repo = FileTurnRepository(tmp_path)
    events = long_turn()
    path = repo.path_for(TURN_ID)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(e.to_wire()) + b"\n" for e in events))
    return repo


@pytest.fixture
def collector_restored() -> Iterator[None]:
    """Whatever a test does to the collector, the next test finds it running."""
    yield
    gc.unfreeze()
    gc.enable()
    _AppFreezes.seen = False


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_read_files_its_events_among_the_old_objects(
    repo: FileTurnRepository, collector_restored: None
) -> None:
    gc.collect()
    events = repo.read(TURN_ID)
    assert gc.isenabled()
    # The caller goes on allocating: young collections run and find none of the
    # events, which were filed in the oldest generation without being walked.
    later = [[n] for n in range(3 * gc.get_threshold()[0])]
    young = {id(o) for g in (0, 1) for o in gc.get_objects(generation=g)}
    assert not any(id(e) in young for e in events)
    # Still tracked: a full collection examines them like any old object.
    assert all(gc.is_tracked(e) for e in events)
    assert len(later) == 3 * gc.get_threshold()[0]
    assert len(events) == len(long_turn())


def test_a_read_leaves_a_paused_collector_paused(
    repo: FileTurnRepository, collector_restored: None
) -> None:
    gc.disable()
    events = repo.read(TURN_ID)
    assert not gc.isenabled()
    assert len(events) == len(long_turn())


def test_a_read_keeps_the_applications_frozen_objects_frozen(
    repo: FileTurnRepository, collector_restored: None
) -> None:
    gc.freeze()  # as a server does before forking workers
    frozen = gc.get_freeze_count()
    assert frozen > 0
    repo.read(TURN_ID)
    assert gc.get_freeze_count() == frozen
    assert gc.isenabled()
    # Once seen, the process's freezing is remembered: reads no longer count the
    # frozen objects (a walk of them all), even after the application unfroze them.
    gc.unfreeze()
    gc.collect()
    events = repo.read(TURN_ID)
    young = {id(o) for g in (0, 1) for o in gc.get_objects(generation=g)}
    assert any(id(e) in young for e in events)


def test_garbage_cycles_made_before_a_read_are_still_collected(
    repo: FileTurnRepository, collector_restored: None
) -> None:
    cycle = _Cycle()
    alive = weakref.ref(cycle)
    del cycle
    repo.read(TURN_ID)
    gc.collect()
    assert alive() is None


def test_a_failed_read_switches_the_collector_back_on(
    repo: FileTurnRepository, collector_restored: None
) -> None:
    path = repo.path_for(TURN_ID)
    path.write_bytes(path.read_bytes() + b"{not json}\n")
    with pytest.raises(Exception, match="not valid JSON"):
        repo.read(TURN_ID)
    assert gc.isenabled()


def test_read_events_say_which_fields_their_line_set(repo: FileTurnRepository) -> None:
    events = repo.read(TURN_ID)
    for event in events:
        alone = parse_event(orjson.loads(orjson.dumps(event.to_wire())))
        assert event.model_fields_set == alone.model_fields_set
        assert event == alone
    # Sharing one set between events of a class must not let a copy reach the others.
    progress = [e for e in events if e.type == "tool_progress"]
    assert progress[0].model_fields_set is progress[1].model_fields_set  # shared
    changed = progress[0].model_copy(update={"tool_call_id": "other"})
    assert changed.tool_call_id == "other"
    assert progress[1].model_fields_set == alone_fields(progress[1])
    assert changed.model_fields_set is not progress[0].model_fields_set


def alone_fields(event: TurnEvent) -> set[str]:
    return parse_event(orjson.loads(orjson.dumps(event.to_wire()))).model_fields_set
