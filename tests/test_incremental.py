"""Work per model call and per turn that does not grow with the turn or the conversation.

Each cache here must give exactly what the full computation gives: the
repository's reduced prefix (``reduced``) against ``reduce_turn(read())``, a
request composed from the previous call's against one composed from call 0,
and a conversation materialized from cached predecessors against a fresh
resolver's. And each must do less: the file is read from where it was left,
and turn N of a conversation reads one predecessor, not N.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.histories import History, created
from tests.test_compose_context import Store, answered, ref, tid, with_tool
from turncore.compose import compose_incrementally, compose_model_request
from turncore.context import ContextResolver, ElisionPolicy
from turncore.events import ResolvedAgent
from turncore.reducer import TurnReducer, TurnState, reduce_turn
from turncore.storage.repository import FileTurnRepository


def _long_history(batches: int) -> History:
    h = History(created(context=[], max_model_calls=100))
    for i in range(batches):
        h.request()
        h.complete(f"step {i}", [(f"c{i}", "read_file", {"n": i})])
        h.invoke(f"c{i}")
        h.result(f"c{i}", {"n": i})
    h.request()
    return h


def test_reduced_reads_only_what_was_appended_and_equals_a_full_read(tmp_path: Path) -> None:
    h = _long_history(30)
    repo = FileTurnRepository(tmp_path)
    repo.create(h.events[0])  # type: ignore[arg-type]
    for n, event in enumerate(h.events[1:], start=2):
        repo.append(h.events[0].turn_id, [event])
        if n % 7 == 0:
            reduced = repo.reduced(h.events[0].turn_id)
            assert reduced.event_count == n
            assert reduced.state.to_wire() == reduce_turn(h.events[:n]).to_wire()
    # The copy is the caller's: applying to it changes neither the cache nor the file.
    mine = repo.reduced(h.events[0].turn_id)
    h.complete("done")
    mine.apply(h.events[-1])
    again = repo.reduced(h.events[0].turn_id)
    assert again.event_count == len(h.events) - 1
    assert again.state.to_wire() == reduce_turn(h.events[:-1]).to_wire()


def test_reduced_starts_over_for_a_file_that_was_replaced(tmp_path: Path) -> None:
    h = _long_history(3)
    turn_id = h.events[0].turn_id
    repo = FileTurnRepository(tmp_path)
    repo.create(h.events[0])  # type: ignore[arg-type]
    repo.append(turn_id, h.events[1:])
    assert repo.reduced(turn_id).event_count == len(h.events)
    # Replaced by a shorter file with the same id (a new inode): read from the start.
    path = repo.path_for(turn_id)
    shorter = path.read_bytes().split(b"\n")[:3]
    path.unlink()
    path.write_bytes(b"\n".join(shorter) + b"\n")
    assert repo.reduced(turn_id).event_count == 3


def test_states_share_settled_records_and_copy_only_the_open_ones() -> None:
    h = _long_history(5)
    reducer = TurnReducer.of(h.events)
    first = reducer.state
    h.complete("more", [("x", "read_file", {})])
    reducer.apply(h.events[-1])
    second = reducer.state
    assert all(a is b for a, b in zip(first.model_calls[:5], second.model_calls[:5], strict=True))
    assert first.model_calls[5] is not second.model_calls[5]  # it was open, then closed
    assert second.to_wire() == reduce_turn(h.events).to_wire()


def _agent() -> ResolvedAgent:
    first = created()
    assert isinstance(first.agent.resolved, ResolvedAgent)
    return first.agent.resolved


def test_composing_from_the_previous_call_equals_composing_from_call_zero() -> None:
    h = _long_history(12)
    reducer = TurnReducer.of(h.events[:1])
    prefix = None
    agent = _agent()
    calls = 0
    for event in h.events[1:]:
        reducer.apply(event)
        if event.type != "model_call_requested":
            continue
        state = reducer.state  # a new state: the open call is a new copy, settled ones not
        index = len(state.model_calls) - 1
        incremental, prefix = compose_incrementally(agent, [], state, index, prefix)
        assert incremental == compose_model_request(agent, [], state, index)
        assert prefix.index == index - 1 and len(prefix.messages) >= index  # it was used
        again, _ = compose_incrementally(agent, [], reducer.state, index, prefix)
        assert again == incremental  # the same call again, from its own prefix
        calls += 1
    assert calls == 13


def test_a_prefix_from_another_turn_or_state_is_not_used() -> None:
    agent = _agent()
    h = _long_history(4)
    state = TurnReducer.of(h.events).state
    _, prefix = compose_incrementally(agent, [], state, 2)
    other: TurnState = TurnReducer.of(_long_history(4).events).state  # equal, not the same
    assert compose_model_request(agent, [], other, 4, prefix) == compose_model_request(
        agent, [], other, 4
    )
    # A different context object: composed from the start, with that context.
    context = [created().input]
    assert compose_model_request(agent, context, state, 4, prefix) == compose_model_request(
        agent, context, state, 4
    )


class CountingStore(Store):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.loads: list[str] = []

    def load(self, turn_id: str) -> TurnState:
        self.loads.append(turn_id)
        return super().load(turn_id)


@pytest.mark.parametrize(
    "policy", [None, ElisionPolicy(elide_historic_tool_results_threshold_chars=3)]
)
def test_a_conversation_materializes_one_new_turn_per_turn(
    tmp_path: Path, policy: ElisionPolicy | None
) -> None:
    store = CountingStore(tmp_path)
    resolver = ContextResolver(store.load, policy)
    turns = [tid(n) for n in range(1, 21)]
    store.put(answered(turns[0], [], "q0", "a0").events)
    resolver.resolve(ref(turns[0]))  # what turn 1 of the conversation resolved
    for n in range(1, len(turns)):
        events = (
            with_tool(turns[n], ref(turns[n - 1]), output=f"out {n}").events
            if n % 3 == 0
            else answered(turns[n], ref(turns[n - 1]), f"q{n}", f"a{n}").events
        )
        store.put(events)
        store.loads.clear()
        got = resolver.resolve(ref(turns[n]))
        assert store.loads == [turns[n]]  # only the new turn is read
        assert got == ContextResolver(store.load, policy).resolve(ref(turns[n]))


def test_inherited_snapshots_walk_one_new_link_per_turn(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    resolver = ContextResolver(store.load)
    turns = [tid(n) for n in range(1, 12)]
    store.put(answered(turns[0], [], "q", "a", system_prompt="BASE").events)
    for n in range(1, len(turns)):
        store.put(
            answered(turns[n], ref(turns[n - 1]), "q", "a", inherited_from=turns[n - 1]).events
        )
        top = created(tid(40 + n), context=ref(turns[n]), inherited_from=turns[n])
        store.loads.clear()
        agent = resolver.resolve_agent(top)
        assert agent.system_prompt == "BASE"
        assert len(store.loads) == (2 if n == 1 else 1)  # then one new link per turn
        assert agent == ContextResolver(store.load).resolve_agent(top)


def test_a_full_read_keeps_the_cached_prefix_the_states_share(tmp_path: Path) -> None:
    """A ``read`` (a reload, a fast-tool batch) must not swap the cached prefix for a
    fresh one: the composer finds its prefix by the records' identity."""
    h = _long_history(5)
    turn_id = h.events[0].turn_id
    repo = FileTurnRepository(tmp_path)
    repo.create(h.events[0])  # type: ignore[arg-type]
    repo.append(turn_id, h.events[1:])
    before = repo.reduced(turn_id).state
    repo.read(turn_id)
    after = repo.reduced(turn_id).state
    assert after.model_calls[0] is before.model_calls[0]
    assert after.model_calls[0].request is before.model_calls[0].request
