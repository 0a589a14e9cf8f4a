"""The turn repository (spec §5, §27.1; DESIGN §3).

One contract suite runs against both implementations (the ``store``
fixture); the file-only behaviour (paths, hard-link creation, the single
``os.write``, OS file locks across processes, the prefix cache) follows it.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg_pool import ConnectionPool

from tests.builders import (
    OTHER_TURN_ID,
    TURN_ID,
    TurnBuilder,
    completed_turn,
    open_sync_calls,
    tool_progress,
    tool_result,
    turn_created,
)
from tests.children import run_children
from tests.postgres import PostgresServer
from turncore.errors import (
    AppendConflictError,
    CorruptTurnError,
    InfrastructureError,
    InvalidTurnIdError,
    TurnExistsError,
    TurnNotFoundError,
)
from turncore.events import ToolProgress, ToolResult, TurnEvent
from turncore.reducer import reduce_turn
from turncore.storage.postgres import PostgresTurnRepository, migrate
from turncore.storage.repository import (
    MAX_LINE_DEPTH,
    FileTurnRepository,
    InMemoryTurnRepository,
    TurnRepository,
    read_path,
)

ROOT = Path(__file__).resolve().parents[1]


def line(event: TurnEvent) -> bytes:
    """The canonical line of an event: compact JSON with wire names, then a newline."""
    return orjson.dumps(event.to_wire()) + b"\n"


def lines(events: list[TurnEvent]) -> bytes:
    return b"".join(line(e) for e in events)


@dataclass
class Store:
    """A repository plus raw access to the bytes behind it."""

    repo: TurnRepository
    put_raw: Callable[[str, bytes], None]
    raw: Callable[[str], bytes]
    where: Callable[[str], str]

    def seed(self, events: list[TurnEvent], turn_id: str = TURN_ID) -> None:
        self.put_raw(turn_id, lines(events))


def file_store(work_dir: Path) -> Store:
    repo = FileTurnRepository(work_dir)

    def put_raw(turn_id: str, data: bytes) -> None:
        path = repo.path_for(turn_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    return Store(
        repo,
        put_raw,
        lambda turn_id: repo.path_for(turn_id).read_bytes(),
        lambda turn_id: str(repo.path_for(turn_id)),
    )


def memory_store() -> Store:
    repo = InMemoryTurnRepository()
    return Store(repo, repo.put_raw, repo.raw, lambda turn_id: f"memory:{turn_id}")


class Unrepresentable(ValueError):
    """Bytes a PostgreSQL repository cannot hold: rows are whole lines of valid UTF-8."""


def postgres_store(pool: ConnectionPool[Any], label: str) -> Store:
    repo = PostgresTurnRepository(pool, label=label)

    def put_raw(turn_id: str, data: bytes) -> None:
        # The database's side of a corrupt "file": rows, each one line. A torn
        # final line or invalid UTF-8 has no rows that could hold it.
        if data and not data.endswith(b"\n"):
            raise Unrepresentable("a row is always a whole line")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise Unrepresentable("a row holds UTF-8 text") from None
        pieces = text.split("\n")[:-1]
        with pool.connection() as conn:
            conn.execute("DELETE FROM turns WHERE turn_id = %s", (turn_id,))
            conn.execute("INSERT INTO turns (turn_id) VALUES (%s)", (turn_id,))
            pos = 0
            for seq, piece in enumerate(pieces, start=1):
                conn.execute(
                    "INSERT INTO turn_events (turn_id, seq, pos, line) VALUES (%s, %s, %s, %s)",
                    (turn_id, seq, pos, piece),
                )
                pos += len(piece.encode()) + 1

    return Store(repo, put_raw, repo.raw, lambda turn_id: f"postgres:{turn_id}")


@pytest.fixture(scope="session")
def postgres_pool(postgres_server: PostgresServer) -> Iterator[ConnectionPool[Any]]:
    """One migrated database for the contract suite; each test starts from empty tables."""
    url = postgres_server.create_database("contract")
    migrate(url)
    pool: ConnectionPool[Any] = ConnectionPool(url, min_size=1, max_size=12, open=True)
    try:
        yield pool
    finally:
        pool.close()


STORES = ["file", "memory", "postgres"]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "file":
        return file_store(tmp_path)
    if request.param == "memory":
        return memory_store()
    pool = request.getfixturevalue("postgres_pool")
    with pool.connection() as conn:
        conn.execute("TRUNCATE turns, turn_events, turn_events_broken, turn_staged")
    return postgres_store(pool, "contract")


def representable(kind: str, data: bytes) -> bool:
    """Whether ``kind`` can hold ``data`` at all (see ``Unrepresentable``)."""
    if kind != "postgres":
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not data or data.endswith(b"\n")


# ================================================================ contract


class TestCreate:
    def test_create_writes_exactly_one_line(self, store: Store) -> None:
        created = turn_created()
        store.repo.create(created)
        assert store.raw(TURN_ID) == line(created)
        assert store.repo.read(TURN_ID) == [created]
        assert store.repo.line_count(TURN_ID) == 1
        assert store.repo.exists(TURN_ID)
        assert not store.repo.exists(OTHER_TURN_ID)

    def test_create_refuses_an_existing_turn_and_leaves_it_alone(self, store: Store) -> None:
        store.repo.create(turn_created())
        before = store.raw(TURN_ID)
        with pytest.raises(TurnExistsError, match=TURN_ID):
            store.repo.create(turn_created(input_text="a different turn with the same id"))
        assert store.raw(TURN_ID) == before

    def test_create_refuses_a_path_like_id(self, store: Store) -> None:
        with pytest.raises(InvalidTurnIdError, match="path separator"):
            store.repo.create(turn_created("../../etc/2025-11-11T04-36-29Z-0001234-000"))

    def test_create_needs_a_turn_created_event(self, store: Store) -> None:
        with pytest.raises(CorruptTurnError, match="starts with turn_created"):
            store.repo.create(tool_progress(TURN_ID, "call_1"))  # type: ignore[arg-type]
        assert not store.repo.exists(TURN_ID)

    def test_turns_are_independent(self, store: Store) -> None:
        store.repo.create(turn_created(TURN_ID))
        store.repo.create(turn_created(OTHER_TURN_ID))
        assert [e.turn_id for e in store.repo.read(OTHER_TURN_ID)] == [OTHER_TURN_ID]

    def test_a_sessions_turns_are_listed_from_their_first_lines(self, store: Store) -> None:
        third = "2025-11-11T04-36-31Z-0001234-000"
        broken = "2025-11-11T04-36-32Z-0001234-000"
        store.repo.create(turn_created(OTHER_TURN_ID, session_id="s-1"))
        store.repo.create(turn_created(TURN_ID, session_id="s-1"))
        store.repo.create(turn_created(third, session_id="s-2"))
        store.put_raw(broken, b'{"not json "s-1"\n')  # unreadable: never in any session
        assert store.repo.session_turn_ids("s-1") == sorted([TURN_ID, OTHER_TURN_ID])
        assert store.repo.session_turn_ids("s-2") == [third]
        assert store.repo.session_turn_ids("s-3") == []
        assert store.repo.session_turn_ids('s-1"') == []


_fresh = itertools.count(1)


class TestAppendAndRead:
    def test_batches_land_in_order_and_read_back_equal(self, store: Store) -> None:
        history = completed_turn()
        store.repo.create(history[0])  # type: ignore[arg-type]
        assert store.repo.append(TURN_ID, history[1:4]) == 4
        assert store.repo.append(TURN_ID, history[4:5]) == 5
        assert store.repo.append(TURN_ID, history[5:]) == len(history)
        assert store.repo.read(TURN_ID) == history
        assert store.raw(TURN_ID) == lines(history)
        assert store.repo.line_count(TURN_ID) == len(history)
        assert reduce_turn(store.repo.read(TURN_ID)).terminal is not None

    def test_an_empty_batch_writes_nothing(self, store: Store) -> None:
        store.repo.create(turn_created())
        assert store.repo.append(TURN_ID, []) == 1
        assert store.raw(TURN_ID) == line(turn_created())

    def test_read_of_a_seeded_log(self, store: Store) -> None:
        history = completed_turn()
        store.seed(history)
        assert store.repo.read(TURN_ID) == history

    def test_a_missing_turn_is_not_found_and_named(self, store: Store) -> None:
        with pytest.raises(TurnNotFoundError, match=TURN_ID):
            store.repo.read(TURN_ID)
        with pytest.raises(TurnNotFoundError, match=TURN_ID):
            store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")])
        with pytest.raises(TurnNotFoundError, match=TURN_ID):
            store.repo.line_count(TURN_ID)

    @pytest.mark.parametrize(
        "bad", ["..", f"../{TURN_ID}", f"{TURN_ID}/x", "2025-13-01T00-00-00Z-0000000-000"]
    )
    def test_every_entry_point_validates_the_id(self, store: Store, bad: str) -> None:
        calls: list[Callable[[], Any]] = [
            lambda: store.repo.read(bad),
            lambda: store.repo.append(bad, []),
            lambda: store.repo.exists(bad),
            lambda: store.repo.line_count(bad),
            lambda: store.repo.with_lock(bad),
        ]
        for call in calls:
            with pytest.raises(InvalidTurnIdError):
                call()

    @given(cuts=st.sets(st.integers(min_value=1, max_value=20)))
    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    def test_any_split_into_batches_gives_the_same_file(self, store: Store, cuts: set[int]) -> None:
        # The fixture outlives one example, so each example uses a turn of its own.
        turn_id = f"2025-11-11T04-36-29Z-{next(_fresh):07d}-001"
        history = completed_turn(turn_id)
        store.repo.create(history[0])  # type: ignore[arg-type]
        bounds = [1, *sorted(c for c in cuts if c < len(history)), len(history)]
        for start, end in zip(bounds, bounds[1:], strict=False):
            assert store.repo.append(turn_id, history[start:end]) == end
        assert store.raw(turn_id) == lines(history)
        assert store.repo.read(turn_id) == history


def _mutate_line(events: list[TurnEvent], index: int, **changes: Any) -> bytes:
    """The history's bytes with one line's JSON object changed."""
    parts = [line(e) for e in events]
    obj = orjson.loads(parts[index])
    obj.update(changes)
    parts[index] = orjson.dumps(obj) + b"\n"
    return b"".join(parts)


def _replace_line(events: list[TurnEvent], index: int, raw: bytes) -> bytes:
    parts = [line(e) for e in events]
    parts[index] = raw
    return b"".join(parts)


def _edit_line(
    events: list[TurnEvent], index: int, edit: Callable[[dict[str, Any]], None]
) -> bytes:
    """The history's bytes with one line's decoded JSON object edited in place by ``edit``."""
    parts = [line(e) for e in events]
    obj = orjson.loads(parts[index])
    edit(obj)
    parts[index] = orjson.dumps(obj) + b"\n"
    return b"".join(parts)


def _rename(obj: dict[str, Any], old: str, new: str) -> None:
    obj[new] = obj.pop(old)


HISTORY = completed_turn()
N = len(HISTORY)
# The first tool_progress (call_1's, progress {"bytesRead": 512}) stands for "a middle line".
MIDDLE = next(i for i, e in enumerate(HISTORY) if isinstance(e, ToolProgress))
RESULT_1 = next(i for i, e in enumerate(HISTORY) if isinstance(e, ToolResult))
PROGRESS_AFTER_RESULT = tool_progress(TURN_ID, "call_1", at=999)
NAN_LINE = line(HISTORY[MIDDLE]).replace(b'{"bytesRead":512}', b"NaN")
assert b"NaN" in NAN_LINE

COMPLETED_0 = next(i for i, e in enumerate(HISTORY) if e.type == "model_call_completed")


def _replace_in_line(events: list[TurnEvent], index: int, old: bytes, new: bytes) -> bytes:
    """The history's bytes with ``old`` replaced by ``new`` in one line (JSON orjson cannot
    write: a key twice, an integer past 64 bits)."""
    raw = line(events[index])
    assert old in raw
    return _replace_line(events, index, raw.replace(old, new))


# A line must mean the same to every JSON reader, since other implementations
# of the spec read these files: no key twice in one object (RFC 8259 leaves
# which value counts to the reader; some take the first, some the last, some
# refuse), and no integer a 64-bit reader cannot hold (orjson, like
# JavaScript, would quietly turn it into a float).
AMBIGUOUS: list[tuple[str, bytes, int, str]] = [
    (
        "a key twice in a nested object",
        _replace_in_line(HISTORY, MIDDLE, b'{"bytesRead":512}', b'{"bytesRead":1,"bytesRead":512}'),
        MIDDLE + 1,
        "repeats the key 'bytesRead'",
    ),
    (
        "the event type twice",
        _replace_in_line(
            HISTORY,
            MIDDLE,
            b'"type":"tool_progress"',
            b'"type":"turn_failed","type":"tool_progress"',
        ),
        MIDDLE + 1,
        "repeats the key 'type'",
    ),
    (
        "an integer past 64 bits in a JSON value",
        _replace_in_line(
            HISTORY, MIDDLE, b'"bytesRead":512', b'"bytesRead":100000000000000000000000'
        ),
        MIDDLE + 1,
        "integer 100000000000000000000000 does not fit in 64 bits",
    ),
    (
        "a negative integer past 64 bits",
        _replace_in_line(HISTORY, MIDDLE, b'"bytesRead":512', b'"bytesRead":-9223372036854775809'),
        MIDDLE + 1,
        "integer -9223372036854775809 does not fit in 64 bits",
    ),
    (
        "a token count past 64 bits",
        _replace_in_line(
            HISTORY, COMPLETED_0, b'"inputTokens":120', b'"inputTokens":18446744073709551616'
        ),
        COMPLETED_0 + 1,
        "integer 18446744073709551616 does not fit in 64 bits",
    ),
]


# Reads validate every line strictly (§5.2): wire names only, JSON types as
# the schema states them (no "false" for false, "10" for 10, true for 1), and
# every ``ts`` an ISO-8601 UTC timestamp. Lines 2.. are checked as strictly
# as line 1, by the same validators the fast path uses.
STRICTNESS: list[tuple[str, bytes, int, str]] = [
    (
        "snake_case turn_id",
        _edit_line(HISTORY, MIDDLE, lambda o: _rename(o, "turnId", "turn_id")),
        MIDDLE + 1,
        "invalid tool_progress event",
    ),
    (
        "snake_case model_call_index",
        _edit_line(HISTORY, 1, lambda o: _rename(o, "modelCallIndex", "model_call_index")),
        2,
        "invalid model_call_requested event",
    ),
    (
        "snake_case finish_reason",
        _edit_line(HISTORY, COMPLETED_0, lambda o: _rename(o, "finishReason", "finish_reason")),
        COMPLETED_0 + 1,
        "invalid model_call_completed event",
    ),
    (
        "nested snake_case is_error",
        _edit_line(HISTORY, RESULT_1, lambda o: _rename(o["result"], "isError", "is_error")),
        RESULT_1 + 1,
        "invalid tool_result event: result",
    ),
    (
        "isError as a string",
        _edit_line(HISTORY, RESULT_1, lambda o: o["result"].update(isError="false")),
        RESULT_1 + 1,
        "invalid tool_result event: result.isError",
    ),
    (
        "usage as a string",
        _edit_line(HISTORY, COMPLETED_0, lambda o: o["usage"].update(inputTokens="10")),
        COMPLETED_0 + 1,
        "invalid model_call_completed event: usage.inputTokens",
    ),
    (
        "modelCallIndex as a string",
        _mutate_line(HISTORY, 1, modelCallIndex="0"),
        2,
        "invalid model_call_requested event: modelCallIndex",
    ),
    (
        "modelCallIndex as a boolean",
        _mutate_line(HISTORY, 1, modelCallIndex=False),
        2,
        "invalid model_call_requested event: modelCallIndex",
    ),
    (
        "modelCallIndex as a float",
        _mutate_line(HISTORY, 1, modelCallIndex=0.0),
        2,
        "invalid model_call_requested event: modelCallIndex",
    ),
    (
        "schemaVersion true",
        _mutate_line(HISTORY, 0, schemaVersion=True),
        1,
        "unsupported schemaVersion True",
    ),
    (
        "an optional field written as null",
        _edit_line(HISTORY, 1, lambda o: o["request"].update(contextRef=None)),
        2,
        "invalid model_call_requested event: request.contextRef",
    ),
    (
        "humanAvailable as a string",
        _edit_line(HISTORY, 0, lambda o: o["config"].update(humanAvailable="true")),
        1,
        "invalid turn_created event: config.humanAvailable",
    ),
    *(
        (
            f"ts {ts!r}",
            _mutate_line(HISTORY, MIDDLE, ts=ts),
            MIDDLE + 1,
            "invalid tool_progress event: ts",
        )
        for ts in (
            "yesterday",
            "",
            "2025-11-11T04:36:29.011",  # no zone: not a UTC instant
            "2025-11-11T06:36:29.011+02:00",  # an instant, but not written in UTC
            "2025-13-11T04:36:29.011Z",
            "2025-02-30T04:36:29.011Z",
            "2025-11-11 04:36:29Z",
            " 2025-11-11T04:36:29.011Z",
        )
    ),
    (
        "ts not a string",
        _mutate_line(HISTORY, MIDDLE, ts=1762835789),
        MIDDLE + 1,
        "invalid tool_progress event: ts",
    ),
    (
        "first line ts",
        _mutate_line(HISTORY, 0, ts="now"),
        1,
        "invalid turn_created event: ts",
    ),
    *(
        (
            f"previousTurnId {bad!r}",
            _edit_line(HISTORY, 0, lambda o, bad=bad: o.update(context={"previousTurnId": bad})),
            1,
            f"invalid turn_created event: context.previousTurnId: Value error, {rule}",
        )
        for bad, rule in (
            ("../../etc/passwd", "turn id '../../etc/passwd' contains a path separator"),
            (
                "2025-11-11T04-36-29Z-0001234-000/..",
                "turn id '2025-11-11T04-36-29Z-0001234-000/..' contains a path separator",
            ),
            (
                "2025-02-30T04-36-29Z-0001234-000",
                "turn id '2025-02-30T04-36-29Z-0001234-000' names a time that does not exist",
            ),
            ("previous", "turn id 'previous' does not have the shape"),
        )
    ),
    (
        "schemaVersion 1.0",
        _mutate_line(HISTORY, 0, schemaVersion=1.0),
        1,
        "unsupported schemaVersion 1.0",
    ),
    *AMBIGUOUS,
]


def _nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


CORRUPTIONS: list[tuple[str, bytes, int, str]] = [
    ("empty file", b"", 1, "empty"),
    # A value the workflow's payload decoding could not take (past ~200 levels
    # it fails the task on every retry), orjson could not write back (past 254),
    # or the standard library could not parse (near 1000).
    *(
        (
            f"a value nested {levels} levels deep",
            _replace_in_line(HISTORY, MIDDLE, b'{"bytesRead":512}', _nested(levels)),
            MIDDLE + 1,
            f"the line nests arrays and objects deeper than {MAX_LINE_DEPTH} levels",
        )
        for levels in (MAX_LINE_DEPTH, 300, 1000)  # the line is one level more
    ),
    ("malformed first line", b"{not json\n" + lines(HISTORY[1:]), 1, "not valid JSON"),
    (
        "malformed middle line",
        _replace_line(HISTORY, MIDDLE, b'{"type": "tool_pro\n'),
        MIDDLE + 1,
        "not valid JSON",
    ),
    ("malformed final line", _replace_line(HISTORY, N - 1, b"}}\n"), N, "not valid JSON"),
    (
        "final line without newline",
        lines(HISTORY)[:-1],
        N,
        "torn write; `turns repair` moves it aside",
    ),
    ("final line cut mid-way", lines(HISTORY)[:-7], N, "torn write; `turns repair` moves it aside"),
    ("only line cut mid-way", line(HISTORY[0])[:40], 1, "torn write"),
    ("blank middle line", _replace_line(HISTORY, MIDDLE, b"\n"), MIDDLE + 1, "not valid JSON"),
    ("NaN literal", _replace_line(HISTORY, MIDDLE, NAN_LINE), MIDDLE + 1, "not valid JSON"),
    (
        "invalid UTF-8",
        _replace_line(HISTORY, MIDDLE, b'{"type":"\xff"}\n'),
        MIDDLE + 1,
        "not valid JSON",
    ),
    (
        "a JSON array",
        _replace_line(HISTORY, MIDDLE, b"[1, 2]\n"),
        MIDDLE + 1,
        "not an event object",
    ),
    ("no event type", _mutate_line(HISTORY, MIDDLE, type=None), MIDDLE + 1, "no event type"),
    (
        "unknown event type",
        _mutate_line(HISTORY, MIDDLE, type="tool_exploded"),
        MIDDLE + 1,
        "unknown event type 'tool_exploded'",
    ),
    (
        "unsupported schema version",
        _mutate_line(HISTORY, 0, schemaVersion=2),
        1,
        "unsupported schemaVersion 2",
    ),
    (
        "missing schema version",
        _mutate_line(HISTORY, 0, schemaVersion=None),
        1,
        "unsupported schemaVersion None",
    ),
    (
        "invalid field",
        _mutate_line(HISTORY, MIDDLE, toolCallId=7),
        MIDDLE + 1,
        "invalid tool_progress event: toolCallId",
    ),
    (
        "unknown field",
        _mutate_line(HISTORY, 1, color="red"),
        2,
        "invalid model_call_requested event: color",
    ),
    ("first line is not turn_created", lines(HISTORY[1:]), 1, "first line must be turn_created"),
    (
        "first line of another turn",
        _mutate_line(HISTORY, 0, turnId=OTHER_TURN_ID),
        1,
        "does not match this file's turn",
    ),
    (
        "middle line of another turn",
        _mutate_line(HISTORY, MIDDLE, turnId=OTHER_TURN_ID),
        MIDDLE + 1,
        "turnId",
    ),
    (
        "second turn_created",
        lines([HISTORY[0], HISTORY[0], *HISTORY[1:]]),
        2,
        "exactly one turn_created",
    ),
    (
        "reducer invariant",
        lines([*HISTORY[: RESULT_1 + 1], PROGRESS_AFTER_RESULT, *HISTORY[RESULT_1 + 1 :]]),
        RESULT_1 + 2,
        "after its terminal result",
    ),
    (
        "event after the terminal event",
        lines([*HISTORY, PROGRESS_AFTER_RESULT]),
        N + 1,
        "follows the terminal event",
    ),
    *STRICTNESS,
]


class TestOtherWriters:
    """Another implementation of the spec spells JSON its own way; its lines read alike."""

    def test_any_spelling_of_the_same_json_reads_as_the_same_events(self, store: Store) -> None:
        objects = [orjson.loads(line(e)) for e in HISTORY]
        # Past JavaScript's safe range but within 64 bits: not re-checked on read.
        objects[MIDDLE]["progress"] = {"bytesRead": 2**64 - 1, "note": "café ☕"}
        ours = b"".join(orjson.dumps(o) + b"\n" for o in objects)
        theirs = b"".join(json.dumps(o).encode() + b"\n" for o in objects)  # ", ", \\u00e9
        assert theirs != ours
        store.put_raw(TURN_ID, ours)
        expected = store.repo.read(TURN_ID)
        store.put_raw(TURN_ID, theirs)
        assert store.repo.read(TURN_ID) == expected
        assert expected[MIDDLE].progress == {"bytesRead": 2**64 - 1, "note": "café ☕"}  # type: ignore[union-attr]


def _edit_first(edit: Callable[[dict[str, Any]], None]) -> bytes:
    return _edit_line(HISTORY, 0, edit)


def _input_parts(*parts: dict[str, Any]) -> bytes:
    return _edit_first(lambda o: o["input"].update(content=list(parts)))


# What a refusal says: the problem and where it is in the line, in the wire's
# terms. Never the schema's regular expression, never a union branch the line
# did not take (``content.str`` when the content is a list), never orjson's
# "line 1" inside a line that is not line 1.
MESSAGES: list[tuple[str, bytes, int, str]] = [
    (
        "ts with a space",
        _mutate_line(HISTORY, MIDDLE, ts="2025-11-11 04:36:29.011Z"),
        MIDDLE + 1,
        "invalid tool_progress event: ts: '2025-11-11 04:36:29.011Z' is not an ISO-8601 UTC "
        "instant like 2025-11-11T04:36:29.000Z",
    ),
    (
        "a media part with two sources",
        _input_parts({"type": "image", "mediaType": "image/png", "url": "u", "data": "AAAA"}),
        1,
        "invalid turn_created event: input.content.0: Value error, a media part needs exactly "
        "one source of url, data or fileId; got 2",
    ),
    (
        "a part a user message cannot hold",
        _input_parts({"type": "reasoning", "text": "hm"}),
        1,
        "invalid turn_created event: input.content.0: Input tag 'reasoning' found using 'type'",
    ),
    (
        "an empty media type",
        _input_parts({"type": "audio", "mediaType": "", "fileId": "f"}),
        1,
        "invalid turn_created event: input.content.0.mediaType: String should have at least 1",
    ),
    (
        "a tool message without results in the context",
        _edit_first(lambda o: o.update(context=[{"role": "tool", "content": []}])),
        1,
        "invalid turn_created event: context.0.content: List should have at least 1 item",
    ),
    (
        "a context reference without its id",
        _edit_first(lambda o: o.update(context={})),
        1,
        "invalid turn_created event: context.previousTurnId: Field required",
    ),
    (
        "bytes that are not UTF-8",
        _replace_in_line(HISTORY, MIDDLE, b'"source":"sync"', b'"source":"sy\xffnc"'),
        MIDDLE + 1,
        "the line is not valid JSON: byte 0xff at column "
        f"{line(HISTORY[MIDDLE]).index(b'sync') + 3} is not UTF-8",
    ),
    (
        "something after the object",
        _replace_in_line(HISTORY, MIDDLE, b"512}}", b"512}} x"),
        MIDDLE + 1,
        "the line is not valid JSON: unexpected content after document at column "
        f"{len(line(HISTORY[MIDDLE])) + 1}",  # the x, after the space
    ),
]


@pytest.mark.parametrize(
    ("name", "data", "line_no", "rule"), MESSAGES, ids=[m[0] for m in MESSAGES]
)
def test_a_refusal_says_what_is_wrong_in_the_lines_terms(
    name: str, data: bytes, line_no: int, rule: str
) -> None:
    repo = InMemoryTurnRepository()
    repo.put_raw(TURN_ID, data)
    with pytest.raises(CorruptTurnError) as info:
        repo.read(TURN_ID)
    assert info.value.line == line_no
    assert info.value.rule.startswith(rule), info.value.rule
    assert "(?:" not in info.value.rule and "line 1 column" not in info.value.rule


# Torn lines and invalid UTF-8 cannot be stored in PostgreSQL rows (each row
# is one whole line of text), so those corruptions run on the other stores;
# TestPostgres shows the database refusing them.
class TestCorruption:
    @pytest.mark.parametrize(
        ("store", "data", "line_no", "rule"),
        [
            pytest.param(k, d, n, r, id=f"{k}-{name}")
            for k in STORES
            for name, d, n, r in CORRUPTIONS
            if representable(k, d)
        ],
        indirect=["store"],
    )
    def test_read_rejects_the_first_offending_line_and_repairs_nothing(
        self, store: Store, data: bytes, line_no: int, rule: str
    ) -> None:
        store.put_raw(TURN_ID, data)
        with pytest.raises(CorruptTurnError) as info:
            store.repo.read(TURN_ID)
        assert info.value.line == line_no
        assert rule in info.value.rule
        assert info.value.path == store.where(TURN_ID)
        assert store.raw(TURN_ID) == data  # nothing truncated, skipped or repaired

    @pytest.mark.parametrize(
        ("store", "data", "line_no"),
        [
            pytest.param(k, d, n, id=f"{k}-{name}")
            for k in STORES
            for name, d, n, _ in CORRUPTIONS
            if representable(k, d)
        ],
        indirect=["store"],
    )
    def test_append_to_a_corrupt_log_is_refused(
        self, store: Store, data: bytes, line_no: int
    ) -> None:
        store.put_raw(TURN_ID, data)
        with pytest.raises(CorruptTurnError) as info:
            store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_1")])
        assert info.value.line == line_no
        assert store.raw(TURN_ID) == data

    @pytest.mark.parametrize("store", ["file", "memory"], indirect=True)  # a torn line
    def test_the_first_of_two_bad_lines_is_reported(self, store: Store) -> None:
        parts = [line(e) for e in HISTORY]
        parts[3] = b"{}\n"  # invalid event (reported first)
        parts[N - 1] = parts[N - 1][:-1]  # and a torn final line
        store.put_raw(TURN_ID, b"".join(parts))
        with pytest.raises(CorruptTurnError) as info:
            store.repo.read(TURN_ID)
        assert info.value.line == 4


class TestAppendGate:
    def _open(self, store: Store) -> TurnBuilder:
        builder = open_sync_calls(n=2)
        store.seed(builder.events)
        return builder

    def test_an_illegal_event_rejects_the_whole_batch_and_writes_nothing(
        self, store: Store
    ) -> None:
        builder = self._open(store)
        before = store.raw(TURN_ID)
        batch: list[TurnEvent] = [
            tool_progress(TURN_ID, "call_0"),
            tool_result(TURN_ID, "call_0", "read_file"),
            tool_progress(TURN_ID, "call_0"),  # after its terminal result
        ]
        with pytest.raises(CorruptTurnError, match="after its terminal result") as info:
            store.repo.append(TURN_ID, batch)
        assert info.value.line == len(builder.events) + 3
        assert info.value.path == store.where(TURN_ID)
        assert store.raw(TURN_ID) == before
        # The repository is not poisoned by what it saw of the rejected batch.
        assert store.repo.append(TURN_ID, batch[:2]) == len(builder.events) + 2
        assert store.repo.read(TURN_ID) == [*builder.events, *batch[:2]]

    @pytest.mark.parametrize(
        ("event", "rule"),
        [
            (tool_progress(OTHER_TURN_ID, "call_0"), "turnId"),
            (tool_progress(TURN_ID, "call_99"), "unknown tool call"),
            (turn_created(), "exactly one turn_created"),
            (tool_result(TURN_ID, "call_0", "read_file", source="async"), "async result for sync"),
        ],
    )
    def test_events_the_reducer_rejects(self, store: Store, event: TurnEvent, rule: str) -> None:
        builder = self._open(store)
        before = store.raw(TURN_ID)
        with pytest.raises(CorruptTurnError, match=rule) as info:
            store.repo.append(TURN_ID, [event])
        assert info.value.line == len(builder.events) + 1
        assert store.raw(TURN_ID) == before

    def test_nothing_is_appended_after_a_terminal_event(self, store: Store) -> None:
        store.seed(HISTORY)
        with pytest.raises(CorruptTurnError, match="follows the terminal event"):
            store.repo.append(TURN_ID, [PROGRESS_AFTER_RESULT])
        assert store.raw(TURN_ID) == lines(HISTORY)

    @pytest.mark.parametrize(
        ("progress", "rule"),
        [
            ({"ratio": float("nan")}, "does not read back"),
            ({"ratio": float("inf")}, "does not read back"),
            ({"blob": b"\x00\x01"}, "does not read back"),
            ({1: "non-string key"}, "does not read back"),
            ({"n": 2**70}, "not JSON-serializable"),
        ],
    )
    def test_a_value_that_would_not_read_back_is_refused(
        self, store: Store, progress: Any, rule: str
    ) -> None:
        self._open(store)
        before = store.raw(TURN_ID)
        # model_construct skips validation, as a buggy producer might.
        sneaky = ToolProgress.model_construct(
            turn_id=TURN_ID,
            ts="2025-11-11T04:36:30.000Z",
            tool_call_id="call_0",
            source="sync",
            progress=progress,
        )
        with pytest.raises(CorruptTurnError, match=rule):
            store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0"), sneaky])
        assert store.raw(TURN_ID) == before

    def test_an_event_missing_a_field_is_refused(self, store: Store) -> None:
        self._open(store)
        before = store.raw(TURN_ID)
        partial = ToolProgress.model_construct(  # type: ignore[call-arg]  # deliberately partial
            turn_id=TURN_ID, ts="2025-11-11T04:36:30.000Z", source="sync"
        )
        with pytest.raises(CorruptTurnError, match="invalid tool_progress event"):
            store.repo.append(TURN_ID, [partial])
        assert store.raw(TURN_ID) == before

    def test_a_non_event_is_refused(self, store: Store) -> None:
        self._open(store)
        with pytest.raises(CorruptTurnError, match="not a turn event"):
            store.repo.append(TURN_ID, [{"type": "tool_progress"}])  # type: ignore[list-item]


class TestIdempotentRetry:
    def _prefix(self, store: Store) -> int:
        builder = open_sync_calls(n=2)
        store.seed(builder.events)
        return len(builder.events)

    def test_a_retried_batch_that_landed_is_not_written_twice(self, store: Store) -> None:
        n = self._prefix(store)
        batch: list[TurnEvent] = [
            tool_progress(TURN_ID, "call_0"),
            tool_result(TURN_ID, "call_0", "read_file"),
        ]
        assert store.repo.append(TURN_ID, batch, known_offset=n) == n + 2
        after = store.raw(TURN_ID)
        assert store.repo.append(TURN_ID, batch, known_offset=n) == n + 2
        assert store.raw(TURN_ID) == after

    def test_a_landed_batch_is_recognised_after_later_appends(self, store: Store) -> None:
        n = self._prefix(store)
        batch: list[TurnEvent] = [tool_result(TURN_ID, "call_0", "read_file")]
        store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_1")])  # a running tool's
        store.repo.append(TURN_ID, batch, known_offset=n)
        store.repo.append(TURN_ID, [tool_result(TURN_ID, "call_1", "read_file")], known_offset=n)
        after = store.raw(TURN_ID)
        assert store.repo.append(TURN_ID, batch, known_offset=n) == n + 3
        assert store.raw(TURN_ID) == after

    def test_the_known_offset_appends(self, store: Store) -> None:
        n = self._prefix(store)
        assert (
            store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")], known_offset=n) == n + 1
        )

    def test_a_different_batch_after_the_known_offset_is_appended(self, store: Store) -> None:
        n = self._prefix(store)
        store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0", progress={"step": 1})])
        assert (
            store.repo.append(
                TURN_ID, [tool_progress(TURN_ID, "call_0", progress={"step": 2})], known_offset=n
            )
            == n + 2
        )

    def test_an_offset_beyond_the_file_conflicts(self, store: Store) -> None:
        n = self._prefix(store)
        before = store.raw(TURN_ID)
        with pytest.raises(AppendConflictError, match="only"):
            store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")], known_offset=n + 1)
        assert store.raw(TURN_ID) == before

    def test_a_conflict_is_an_infrastructure_error(self) -> None:
        assert issubclass(AppendConflictError, InfrastructureError)

    def test_a_negative_offset_is_a_caller_bug(self, store: Store) -> None:
        self._prefix(store)
        with pytest.raises(ValueError):
            store.repo.append(TURN_ID, [], known_offset=-1)


class TestLocking:
    def test_with_lock_excludes_other_threads(self, store: Store) -> None:
        store.repo.create(turn_created())
        entered = threading.Event()
        order: list[str] = []

        def contender() -> None:
            entered.wait()
            with store.repo.with_lock(TURN_ID):
                order.append("contender")

        thread = threading.Thread(target=contender)
        thread.start()
        with store.repo.with_lock(TURN_ID):
            entered.set()
            thread.join(timeout=0.3)
            assert thread.is_alive(), "the contender got in while the lock was held"
            order.append("holder")
        thread.join(timeout=10)
        assert order == ["holder", "contender"]

    def test_appends_from_other_threads_wait_for_the_lock(self, store: Store) -> None:
        builder = open_sync_calls(n=1)
        store.seed(builder.events)
        done = threading.Event()

        def append() -> None:
            store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")])
            done.set()

        with store.repo.with_lock(TURN_ID):
            thread = threading.Thread(target=append)
            thread.start()
            assert not done.wait(0.3)
            assert store.repo.line_count(TURN_ID) == len(builder.events)
        thread.join(timeout=10)
        assert done.is_set()

    def test_with_lock_is_reentrant_for_its_holder(self, store: Store) -> None:
        builder = open_sync_calls(n=1)
        store.seed(builder.events)
        with store.repo.with_lock(TURN_ID), store.repo.with_lock(TURN_ID):
            n = store.repo.line_count(TURN_ID)
            assert (
                store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")], known_offset=n)
                == n + 1
            )

    def test_other_turns_are_not_blocked(self, store: Store) -> None:
        store.repo.create(turn_created(TURN_ID))
        store.repo.create(turn_created(OTHER_TURN_ID))
        got_in = threading.Event()

        def other() -> None:
            with store.repo.with_lock(OTHER_TURN_ID):
                got_in.set()

        with store.repo.with_lock(TURN_ID):
            thread = threading.Thread(target=other)
            thread.start()
            assert got_in.wait(10)
        thread.join()

    def test_concurrent_appends_from_threads_are_whole_and_complete(self, store: Store) -> None:
        builder = open_sync_calls(n=1)
        store.seed(builder.events)
        threads, per_thread = 8, 25

        def work(who: int) -> None:
            for k in range(per_thread):
                store.repo.append(
                    TURN_ID, [tool_progress(TURN_ID, "call_0", progress={"who": who, "k": k})]
                )

        pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        events = store.repo.read(TURN_ID)
        assert len(events) == len(builder.events) + threads * per_thread
        progress = [e.progress for e in events if isinstance(e, ToolProgress)]
        for who in range(threads):
            assert [p["k"] for p in progress if p["who"] == who] == list(range(per_thread))

    def test_racing_results_for_one_call_admit_exactly_one(self, store: Store) -> None:
        builder = open_sync_calls(n=1)
        store.seed(builder.events)
        start = threading.Barrier(8)
        outcomes: list[str] = []

        def race(who: int) -> None:
            start.wait()
            try:
                store.repo.append(
                    TURN_ID, [tool_result(TURN_ID, "call_0", "read_file", output=who)]
                )
                outcomes.append("won")
            except CorruptTurnError:
                outcomes.append("refused")

        pool = [threading.Thread(target=race, args=(i,)) for i in range(8)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        assert sorted(outcomes) == ["refused"] * 7 + ["won"]
        assert len(store.repo.read(TURN_ID)) == len(builder.events) + 1


# ================================================================ files only


@pytest.fixture
def repo(tmp_path: Path) -> FileTurnRepository:
    return FileTurnRepository(tmp_path)


class TestFiles:
    def test_the_file_lives_at_its_date_partitioned_path(
        self, repo: FileTurnRepository, tmp_path: Path
    ) -> None:
        repo.create(turn_created())
        expected = tmp_path / "storage" / "turns" / "2025" / "11" / "11" / f"{TURN_ID}.jsonl"
        assert repo.path_for(TURN_ID) == expected
        assert expected.read_bytes() == line(turn_created())
        # Creation goes through a private temporary file that is gone afterwards.
        assert os.listdir(expected.parent) == [expected.name]

    def test_a_relative_work_dir_is_pinned_at_construction(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        repo = FileTurnRepository("work")
        monkeypatch.chdir("/")
        assert repo.path_for(TURN_ID).is_relative_to(tmp_path / "work")

    def test_create_works_without_hard_links(
        self, repo: FileTurnRepository, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def no_links(src: Any, dst: Any) -> None:
            raise OSError(errno.EPERM, "hard links are not supported here")

        monkeypatch.setattr(os, "link", no_links)
        repo.create(turn_created())
        assert repo.read(TURN_ID) == [turn_created()]
        with pytest.raises(TurnExistsError):
            repo.create(turn_created())
        assert os.listdir(repo.path_for(TURN_ID).parent) == [f"{TURN_ID}.jsonl"]

    def test_a_batch_is_one_write(
        self, repo: FileTurnRepository, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        builder = open_sync_calls(n=3)
        repo.create(builder.created)
        real_write = os.write
        writes: list[int] = []

        def spy(fd: int, data: Any) -> int:
            if bytes(data[:10]) == b'{"turnId":':  # ours, not pytest's
                writes.append(len(data))
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", spy)
        repo.append(TURN_ID, builder.events[1:])
        assert writes == [len(lines(builder.events[1:]))]
        assert repo.read(TURN_ID) == builder.events

    def test_a_short_write_is_finished_so_lines_stay_whole(
        self, repo: FileTurnRepository, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        builder = open_sync_calls(n=3)
        repo.create(builder.created)
        real_write = os.write

        def short(fd: int, data: Any) -> int:
            return real_write(fd, bytes(data[: max(1, len(data) // 3)]))

        monkeypatch.setattr(os, "write", short)
        repo.append(TURN_ID, builder.events[1:])
        monkeypatch.undo()
        assert repo.read(TURN_ID) == builder.events

    def test_a_failed_write_is_an_infrastructure_error_and_not_cached(
        self, repo: FileTurnRepository, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        builder = open_sync_calls(n=1)
        repo.create(builder.created)
        repo.append(TURN_ID, builder.events[1:])

        def full(fd: int, data: Any) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "write", full)
        with pytest.raises(InfrastructureError, match="No space left"):
            repo.append(TURN_ID, [tool_result(TURN_ID, "call_0", "read_file")])
        monkeypatch.undo()
        # The gate accepted the result in memory, but it never landed: a
        # second attempt must be judged against the file, not that memory.
        assert (
            repo.append(TURN_ID, [tool_result(TURN_ID, "call_0", "read_file")])
            == len(builder.events) + 1
        )

    def test_appends_see_what_another_repository_wrote(self, tmp_path: Path) -> None:
        mine, theirs = FileTurnRepository(tmp_path), FileTurnRepository(tmp_path)
        builder = open_sync_calls(n=1)
        mine.create(builder.created)
        mine.append(TURN_ID, builder.events[1:])  # warms mine's cache
        theirs.append(TURN_ID, [tool_result(TURN_ID, "call_0", "read_file")])
        with pytest.raises(CorruptTurnError, match="duplicate terminal result"):
            mine.append(TURN_ID, [tool_result(TURN_ID, "call_0", "read_file")])
        with pytest.raises(CorruptTurnError, match="after its terminal result"):
            mine.append(TURN_ID, [tool_progress(TURN_ID, "call_0")])

    def test_appends_notice_a_replaced_file(self, repo: FileTurnRepository) -> None:
        builder = open_sync_calls(n=1)
        repo.create(builder.created)
        repo.append(TURN_ID, builder.events[1:])
        repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")])  # cached: call_0 still open
        # Someone swaps in a file (a new inode) where call_0 has its result instead.
        path = repo.path_for(TURN_ID)
        path.with_suffix(".new").write_bytes(
            lines([*builder.events, tool_result(TURN_ID, "call_0", "read_file")])
        )
        os.replace(path.with_suffix(".new"), path)
        with pytest.raises(CorruptTurnError, match="after its terminal result"):
            repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")])

    def test_a_torn_tail_written_by_someone_else_is_refused(self, repo: FileTurnRepository) -> None:
        builder = open_sync_calls(n=1)
        repo.create(builder.created)
        repo.append(TURN_ID, builder.events[1:])
        with open(repo.path_for(TURN_ID), "ab") as f:
            f.write(line(tool_progress(TURN_ID, "call_0"))[:20])
        before = repo.path_for(TURN_ID).read_bytes()
        with pytest.raises(CorruptTurnError, match="torn write") as info:
            repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")])
        assert info.value.line == len(builder.events) + 1
        assert repo.path_for(TURN_ID).read_bytes() == before


class TestReadPath:
    def test_any_path(self, tmp_path: Path) -> None:
        path = tmp_path / "exported.jsonl"
        path.write_bytes(lines(HISTORY))
        assert read_path(path) == HISTORY
        assert read_path(str(path)) == HISTORY

    def test_a_file_named_like_a_turn_must_hold_that_turn(self, tmp_path: Path) -> None:
        path = tmp_path / f"{OTHER_TURN_ID}.jsonl"
        path.write_bytes(lines(HISTORY))
        with pytest.raises(CorruptTurnError, match="does not match this file's turn") as info:
            read_path(path)
        assert info.value.line == 1
        assert info.value.path == str(path)

    def test_the_first_lines_id_must_be_well_formed(self, tmp_path: Path) -> None:
        path = tmp_path / "odd.jsonl"
        path.write_bytes(lines(completed_turn("turn-1")))
        with pytest.raises(CorruptTurnError, match="shape") as info:
            read_path(path)
        assert info.value.line == 1

    def test_every_line_is_checked_against_the_first(self, tmp_path: Path) -> None:
        path = tmp_path / "mixed.jsonl"
        path.write_bytes(_mutate_line(HISTORY, 4, turnId=OTHER_TURN_ID))
        with pytest.raises(CorruptTurnError, match="turnId") as info:
            read_path(path)
        assert info.value.line == 5

    def test_a_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(TurnNotFoundError, match="nope.jsonl"):
            read_path(tmp_path / "nope.jsonl")


# ================================================================ processes

CHILD = """
import sys
import time
from pathlib import Path
from tests.builders import TURN_ID, tool_progress, tool_result
from turncore.errors import CorruptTurnError
from turncore.storage.repository import FileTurnRepository

work, mode, who, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
repo = FileTurnRepository(work)
Path(f"{go}.ready.{who}").touch()
while not go.exists():
    time.sleep(0.001)
won = 0
for k in range(count):
    if mode == "progress":
        repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0", progress={"who": who, "k": k})])
        won += 1
    else:
        call = f"call_{k}"
        try:
            repo.append(TURN_ID, [
                tool_progress(TURN_ID, call, progress={"who": who}),
                tool_result(TURN_ID, call, "read_file", output=who),
            ])
            won += 1
        except CorruptTurnError:
            pass
print(won)
"""


def _run_children(tmp_path: Path, mode: str, count: int, children: int = 2) -> list[int]:
    return run_children(CHILD, str(tmp_path), tmp_path, mode, count, children)


class TestProcesses:
    def test_appends_from_two_processes_are_whole_lines(self, tmp_path: Path) -> None:
        repo = FileTurnRepository(tmp_path)
        builder = open_sync_calls(n=1)
        repo.create(builder.created)
        repo.append(TURN_ID, builder.events[1:])
        assert _run_children(tmp_path, "progress", 150) == [150, 150]
        events = repo.read(TURN_ID)
        assert len(events) == len(builder.events) + 300
        progress = [e.progress for e in events if isinstance(e, ToolProgress)]
        for who in (0, 1):
            assert [p["k"] for p in progress if p["who"] == who] == list(range(150))

    def test_the_gate_holds_across_processes(self, tmp_path: Path) -> None:
        repo = FileTurnRepository(tmp_path)
        calls = 40
        builder = open_sync_calls(n=calls)
        repo.create(builder.created)
        repo.append(TURN_ID, builder.events[1:])
        wins = _run_children(tmp_path, "results", calls)
        assert sum(wins) == calls  # every call got exactly one result, from one process
        events = repo.read(TURN_ID)  # and the file is a valid history
        assert len(events) == len(builder.events) + 2 * calls
        assert reduce_turn(events).unresolved_tool_calls() == []


def test_both_implementations_write_identical_bytes(tmp_path: Path) -> None:
    history = completed_turn()
    stores = [file_store(tmp_path), memory_store()]
    for s in stores:
        s.repo.create(history[0])  # type: ignore[arg-type]
        for event in history[1:]:
            s.repo.append(TURN_ID, [event])
    assert stores[0].raw(TURN_ID) == stores[1].raw(TURN_ID) == lines(history)


class TestKnownOffset:
    """``known_offset``: a lower bound for writers that share the file with concurrent appenders."""

    def _prefix(self, store: Store) -> int:
        builder = open_sync_calls(n=2)
        store.seed(builder.events)
        return len(builder.events)

    def test_retry_is_recognised_after_other_writers_appended(self, store: Store) -> None:
        n = self._prefix(store)
        batch = [tool_progress(TURN_ID, "call_0", progress={"mine": 1})]
        assert store.repo.append(TURN_ID, batch, known_offset=n) == n + 1
        other = [tool_progress(TURN_ID, "call_0", progress={"theirs": 1})]
        store.repo.append(TURN_ID, other)
        before = store.repo.line_count(TURN_ID)
        # The ambiguous first attempt landed; the retry writes nothing.
        assert store.repo.append(TURN_ID, batch, known_offset=n) == before
        assert store.repo.line_count(TURN_ID) == before

    def test_a_retry_with_a_fresh_timestamp_is_recognised(self, store: Store) -> None:
        # A workflow task replayed after a crash stamps its batch anew
        # (workflow.now() moved on); the earlier attempt must still count.
        n = self._prefix(store)
        first = [tool_progress(TURN_ID, "call_0", progress={"mine": 1}, at=1)]
        assert store.repo.append(TURN_ID, first, known_offset=n) == n + 1
        store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_1", progress={"theirs": 1})])
        before = store.raw(TURN_ID)
        retry = [tool_progress(TURN_ID, "call_0", progress={"mine": 1}, at=9)]
        outcome = store.repo.append_once(TURN_ID, retry, known_offset=n)
        assert store.raw(TURN_ID) == before
        assert (outcome.lines, outcome.end) == (n + 2, n + 1)
        assert outcome.landed == first  # as on file, with the first attempt's ts
        assert store.repo.append(TURN_ID, retry, known_offset=n) == n + 2

    def test_a_new_batch_reports_what_it_wrote(self, store: Store) -> None:
        n = self._prefix(store)
        batch = [tool_progress(TURN_ID, "call_0", progress={"mine": 1})]
        outcome = store.repo.append_once(TURN_ID, batch, known_offset=n)
        assert (outcome.lines, outcome.end, outcome.landed) == (n + 1, n + 1, None)

    def test_an_equal_batch_before_the_known_offset_is_appended_again(self, store: Store) -> None:
        # Progress may repeat: only lines after the offset can be an earlier attempt.
        n = self._prefix(store)
        batch = [tool_progress(TURN_ID, "call_0", progress={"same": 1})]
        store.repo.append(TURN_ID, batch, known_offset=n)
        again = [tool_progress(TURN_ID, "call_0", progress={"same": 1}, at=3)]
        assert store.repo.append(TURN_ID, again, known_offset=n + 1) == n + 2

    def test_new_batch_after_other_writers_is_appended(self, store: Store) -> None:
        n = self._prefix(store)
        store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0", progress={"theirs": 1})])
        mine = [tool_progress(TURN_ID, "call_0", progress={"mine": 1})]
        assert store.repo.append(TURN_ID, mine, known_offset=n) == n + 2

    def test_file_shorter_than_known_offset_conflicts(self, store: Store) -> None:
        n = self._prefix(store)
        before = store.raw(TURN_ID)
        with pytest.raises(AppendConflictError, match="only"):
            store.repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")], known_offset=n + 5)
        assert store.raw(TURN_ID) == before


def test_snake_case_field_names_are_not_the_wire_format(tmp_path: Path) -> None:
    from tests.builders import turn_created
    from turncore.storage.repository import FileTurnRepository as Repo

    repo = Repo(tmp_path)
    created = turn_created(TURN_ID)
    repo.create(created)
    path = repo.path_for(TURN_ID)
    line = b'{"type":"model_call_failed","turn_id":"%s","ts":"2025-11-11T04:36:29.000Z","modelCallIndex":0,"error":"x"}\n'
    path.write_bytes(path.read_bytes() + line % TURN_ID.encode())
    with pytest.raises(CorruptTurnError) as info:
        repo.read(TURN_ID)
    assert info.value.line == 2
    assert "invalid model_call_failed event: turnId" in info.value.rule


class TestReadAfter:
    """Followers read only what follows their offset (spec §17.1, DESIGN §7)."""

    def test_polling_returns_each_event_once_in_order(self, store: Store) -> None:
        builder = open_sync_calls(n=2)
        store.seed(builder.events)
        n = len(builder.events)
        assert store.repo.read_after(TURN_ID, 0) == store.repo.read(TURN_ID)
        assert store.repo.read_after(TURN_ID, n) == []
        new = [tool_progress(TURN_ID, "call_0", progress={"step": i}) for i in range(3)]
        store.repo.append(TURN_ID, new[:1])
        assert store.repo.read_after(TURN_ID, n) == new[:1]
        store.repo.append(TURN_ID, new[1:])
        assert store.repo.read_after(TURN_ID, n + 1) == new[1:]
        assert store.repo.read_after(TURN_ID, n + 3) == []
        # An offset the follower did not reach by polling works as well.
        assert store.repo.read_after(TURN_ID, 1) == store.repo.read(TURN_ID)[1:]

    # A row is never an incomplete line, so this is about files (and memory).
    @pytest.mark.parametrize("store", ["file", "memory"], indirect=True)
    def test_an_incomplete_final_line_waits(self, store: Store) -> None:
        builder = open_sync_calls(n=1)
        store.seed(builder.events)
        n = len(builder.events)
        complete = store.raw(TURN_ID)
        store.put_raw(TURN_ID, complete + b'{"type":"tool_prog')
        assert store.repo.read_after(TURN_ID, n) == []

    def test_an_offset_past_the_end_is_refused(self, store: Store) -> None:
        builder = open_sync_calls(n=1)
        store.seed(builder.events)
        with pytest.raises(ValueError, match="past the end"):
            store.repo.read_after(TURN_ID, len(builder.events) + 2)


class TestReduced:
    """``reduced`` is ``reduce_turn(read())``, reading only what was appended since."""

    def test_reduced_follows_appends_by_any_writer(self, store: Store) -> None:
        builder = open_sync_calls(n=2)
        store.seed(builder.events)
        first = store.repo.reduced(TURN_ID)
        assert first.state.to_wire() == reduce_turn(store.repo.read(TURN_ID)).to_wire()
        new = [tool_progress(TURN_ID, "call_0", progress={"step": i}) for i in range(3)]
        store.repo.append(TURN_ID, new[:1])
        # Another writer (another process) appends behind this repository's back.
        store.put_raw(TURN_ID, store.raw(TURN_ID) + b"".join(line(e) for e in new[1:]))
        after = store.repo.reduced(TURN_ID)
        assert after.event_count == first.event_count + 3
        assert after.state.to_wire() == reduce_turn(store.repo.read(TURN_ID)).to_wire()
        # Each caller gets its own copy: folding into it changes nothing stored.
        after.apply(tool_progress(TURN_ID, "call_1", progress={"mine": True}))
        assert store.repo.reduced(TURN_ID).event_count == first.event_count + 3

    def test_a_bad_line_appended_behind_its_back_is_reported(self, store: Store) -> None:
        builder = open_sync_calls(n=1)
        store.seed(builder.events)
        store.repo.reduced(TURN_ID)
        store.put_raw(TURN_ID, store.raw(TURN_ID) + b'{"type":"nonsense"}\n')
        with pytest.raises(CorruptTurnError):
            store.repo.reduced(TURN_ID)
