"""The PostgreSQL repository beyond the shared contract (tests/test_repository.py).

Against a real server: appenders in other processes (as on other hosts),
a connection killed in the middle of an append, the rows the database
refuses, rows that fail validation, the schema and its migration, an
unreachable server, and credentials kept out of every message.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.builders import (
    OTHER_TURN_ID,
    TURN_ID,
    completed_turn,
    open_sync_calls,
    tool_progress,
    tool_result,
)
from tests.children import run_children
from tests.postgres import PASSWORD, PostgresServer, free_port
from turncore.errors import CorruptTurnError, InfrastructureError, TurnExistsError
from turncore.events import ToolProgress, TurnEvent
from turncore.reducer import reduce_turn
from turncore.storage.postgres import (
    PG_SCHEMA_VERSION,
    DatabaseUnavailableError,
    PostgresTurnRepository,
    SchemaMismatchError,
    migrate,
)
from turncore.storage.repository import FileTurnRepository, RepairRefusedError

ROOT = Path(__file__).resolve().parents[1]


def lines(events: list[TurnEvent]) -> bytes:
    import orjson

    return b"".join(orjson.dumps(e.to_wire()) + b"\n" for e in events)


@pytest.fixture
def url(postgres_url: str) -> str:
    migrate(postgres_url)
    return postgres_url


@pytest.fixture
def repo(url: str) -> Iterator[PostgresTurnRepository]:
    r = PostgresTurnRepository.connect(url, variable="TURNS_DATABASE_URL")
    try:
        yield r
    finally:
        r.close()


def admin(server: PostgresServer, url: str) -> psycopg.Connection[Any]:
    """A plain connection to the test's database, outside the repository."""
    return psycopg.connect(url, autocommit=True)


def seed(repo: PostgresTurnRepository, events: list[TurnEvent]) -> None:
    repo.create(events[0])  # type: ignore[arg-type]
    if len(events) > 1:
        repo.append(TURN_ID, events[1:])


# ================================================================ hosts


CHILD = """
import sys, time
from pathlib import Path
from tests.builders import TURN_ID, tool_progress, tool_result
from turncore.errors import CorruptTurnError
from turncore.storage.postgres import PostgresTurnRepository

url, mode, who, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
repo = PostgresTurnRepository.connect(url)
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
repo.close()
print(won)
"""


def _run_children(tmp_path: Path, url: str, mode: str, count: int, children: int = 3) -> list[int]:
    return run_children(CHILD, url, tmp_path, mode, count, children)


class TestOtherHosts:
    """Processes with their own pools stand in for hosts: they share only the database."""

    def test_appends_from_several_processes_are_whole_and_complete(
        self, repo: PostgresTurnRepository, url: str, tmp_path: Path
    ) -> None:
        builder = open_sync_calls(n=1)
        seed(repo, builder.events)
        assert _run_children(tmp_path, url, "progress", 60) == [60, 60, 60]
        events = repo.read(TURN_ID)
        assert len(events) == len(builder.events) + 180
        progress = [e.progress for e in events if isinstance(e, ToolProgress)]
        for who in range(3):
            assert [p["k"] for p in progress if p["who"] == who] == list(range(60))

    def test_the_gate_holds_across_processes(
        self, repo: PostgresTurnRepository, url: str, tmp_path: Path
    ) -> None:
        calls = 30
        builder = open_sync_calls(n=calls)
        seed(repo, builder.events)
        wins = _run_children(tmp_path, url, "results", calls)
        # Every call got exactly one result: a loser re-reduced and was refused.
        assert sum(wins) == calls
        events = repo.read(TURN_ID)
        assert len(events) == len(builder.events) + 2 * calls
        assert reduce_turn(events).unresolved_tool_calls() == []

    def test_a_cached_repository_sees_what_another_appended(
        self, repo: PostgresTurnRepository, url: str
    ) -> None:
        builder = open_sync_calls(n=1)
        seed(repo, builder.events)
        other = PostgresTurnRepository.connect(url)
        try:
            other.append(TURN_ID, [tool_result(TURN_ID, "call_0", "read_file")])
            with pytest.raises(CorruptTurnError, match="after its terminal result"):
                repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")])
        finally:
            other.close()


# ================================================================ faults


def _backend_waiting(conn: psycopg.Connection[Any], needle: str) -> int | None:
    row = conn.execute(
        """SELECT pid FROM pg_stat_activity
            WHERE wait_event_type = 'Lock' AND query LIKE %s AND pid <> pg_backend_pid()""",
        (f"%{needle}%",),
    ).fetchone()
    return None if row is None else int(row[0])


def _wait_for(predicate: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError("condition never became true")


class TestConnectionKilledMidAppend:
    def _append_in_thread(
        self, repo: PostgresTurnRepository, batch: list[TurnEvent], known: int
    ) -> tuple[threading.Thread, list[BaseException | int]]:
        outcome: list[BaseException | int] = []

        def run() -> None:
            try:
                outcome.append(repo.append(TURN_ID, batch, known_offset=known))
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        return thread, outcome

    def test_killed_while_inserting_then_retried_lands_once(
        self, repo: PostgresTurnRepository, url: str, postgres_server: PostgresServer
    ) -> None:
        builder = open_sync_calls(n=2)
        seed(repo, builder.events)
        n = len(builder.events)
        batch: list[TurnEvent] = [
            tool_progress(TURN_ID, "call_0", progress={"step": 1}),
            tool_result(TURN_ID, "call_0", "read_file"),
        ]
        with admin(postgres_server, url) as blocker, admin(postgres_server, url) as killer:
            # An uncommitted row with the batch's key makes the append's INSERT
            # wait inside its transaction: after the row lock, before the commit.
            blocker.execute("BEGIN")
            blocker.execute(
                "INSERT INTO turn_events (turn_id, seq, pos, line) VALUES (%s, %s, 0, 'x')",
                (TURN_ID, n + 1),
            )
            thread, outcome = self._append_in_thread(repo, batch, n)
            pid = _wait_for(lambda: _backend_waiting(killer, "INSERT INTO turn_events"))
            killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            # The append rides it out: its retry, on a fresh pooled connection,
            # waits on the same uncommitted row.
            _wait_for(
                lambda: _backend_waiting(killer, "INSERT INTO turn_events") not in (None, pid)
            )
            assert outcome == [] and repo.line_count(TURN_ID) == n  # nothing stored yet
            blocker.execute("ROLLBACK")
            thread.join(30)
        assert outcome == [n + 2]  # applied exactly once
        assert repo.append(TURN_ID, batch, known_offset=n) == n + 2
        assert repo.read(TURN_ID) == [*builder.events, *batch]

    def test_killed_while_waiting_for_the_turn_lock(
        self, repo: PostgresTurnRepository, url: str, postgres_server: PostgresServer
    ) -> None:
        builder = open_sync_calls(n=1)
        seed(repo, builder.events)
        n = len(builder.events)
        batch: list[TurnEvent] = [tool_progress(TURN_ID, "call_0", progress={"step": 1})]
        with admin(postgres_server, url) as holder, admin(postgres_server, url) as killer:
            holder.execute("BEGIN")
            holder.execute("SELECT 1 FROM turns WHERE turn_id = %s FOR UPDATE", (TURN_ID,))
            thread, outcome = self._append_in_thread(repo, batch, n)
            pid = _wait_for(lambda: _backend_waiting(killer, "FOR NO KEY UPDATE"))
            killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            _wait_for(lambda: _backend_waiting(killer, "FOR NO KEY UPDATE") not in (None, pid))
            assert outcome == []  # retried on a fresh connection, waiting again
            holder.execute("ROLLBACK")
            thread.join(30)
        assert outcome == [n + 1]
        assert repo.append(TURN_ID, batch, known_offset=n) == n + 1
        assert repo.read(TURN_ID) == [*builder.events, *batch]

    def test_a_commit_whose_answer_was_lost_is_recognised_on_retry(
        self, repo: PostgresTurnRepository
    ) -> None:
        # The server committed but the client never heard: from the client's
        # side that is an append that raised after the rows landed.
        builder = open_sync_calls(n=1)
        seed(repo, builder.events)
        n = len(builder.events)
        batch: list[TurnEvent] = [tool_progress(TURN_ID, "call_0", progress={"once": True})]
        repo.append(TURN_ID, batch, known_offset=n)
        assert repo.append(TURN_ID, batch, known_offset=n) == n + 1
        assert repo.line_count(TURN_ID) == n + 1


FROZEN = """
import sys
from tests.builders import TURN_ID, tool_progress
from turncore.errors import InfrastructureError
from turncore.storage.postgres import PostgresTurnRepository

repo = PostgresTurnRepository.connect(sys.argv[1], idle_in_transaction_timeout=1.0)
print("ready", flush=True)
sys.stdin.readline()  # go
try:
    repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0", progress={"who": "frozen"})])
    print("appended", flush=True)
except InfrastructureError as exc:
    print("failed", exc, flush=True)
repo.close()
"""


class TestFrozenWriter:
    """A writer that stops in the middle of its transaction (its host froze, or lost
    the network) must not hold the turn's row lock, and so every other writer, forever."""

    def test_the_server_ends_a_frozen_writers_transaction(
        self, repo: PostgresTurnRepository, url: str, postgres_server: PostgresServer
    ) -> None:
        builder = open_sync_calls(n=1)
        seed(repo, builder.events)
        n = len(builder.events)
        ours = tool_progress(TURN_ID, "call_0", progress={"who": "us"})
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        frozen = subprocess.Popen(
            [sys.executable, "-c", FROZEN, url],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert frozen.stdin is not None and frozen.stdout is not None
            assert frozen.stdout.readline() == "ready\n"
            with admin(postgres_server, url) as blocker, admin(postgres_server, url) as watcher:
                # Hold the other writer inside its transaction (it has the turn's
                # row lock), stop its process there, then let its INSERT finish:
                # its session now sits idle in a transaction nobody will end.
                blocker.execute("BEGIN")
                blocker.execute(
                    "INSERT INTO turn_events (turn_id, seq, pos, line) VALUES (%s, %s, 0, 'x')",
                    (TURN_ID, n + 1),
                )
                frozen.stdin.write("go\n")
                frozen.stdin.flush()
                _wait_for(lambda: _backend_waiting(watcher, "INSERT INTO turn_events"))
                frozen.send_signal(signal.SIGSTOP)
                blocker.execute("ROLLBACK")
            done: list[int] = []
            appender = threading.Thread(target=lambda: done.append(repo.append(TURN_ID, [ours])))
            appender.start()
            appender.join(30)
            assert done == [n + 1], "an append waited on a frozen writer's lock"
            frozen.send_signal(signal.SIGCONT)
            out = frozen.stdout.read()
            frozen.wait(60)
            # The frozen writer's transaction was rolled back; its append rode that
            # out like any lost connection: retried whole, it landed once, after ours.
            assert out == "appended\n", out
            after = repo.read(TURN_ID)
            assert after[: n + 1] == [*builder.events, ours] and len(after) == n + 2
            assert isinstance(after[-1], ToolProgress) and after[-1].progress == {"who": "frozen"}
        finally:
            if frozen.poll() is None:
                frozen.kill()  # lets a blocked appender through, so the test can end
                frozen.wait()


# ================================================================ rows


class TestRows:
    def test_the_database_refuses_what_a_row_cannot_be(
        self, repo: PostgresTurnRepository, url: str, postgres_server: PostgresServer
    ) -> None:
        repo.create(completed_turn()[0])  # type: ignore[arg-type]
        with admin(postgres_server, url) as conn:
            with pytest.raises(psycopg.errors.CheckViolation):
                conn.execute(
                    "INSERT INTO turn_events (turn_id, seq, pos, line) VALUES (%s, 2, 0, %s)",
                    (TURN_ID, '{"a":1}\n{"b":2}'),
                )
            with pytest.raises(psycopg.DataError):  # NUL: text cannot hold it
                conn.execute(
                    "INSERT INTO turn_events (turn_id, seq, pos, line) VALUES (%s, 2, 0, %s)",
                    (TURN_ID, "{\x00}"),
                )
            with pytest.raises(psycopg.DataError):  # invalid UTF-8
                conn.execute(
                    "INSERT INTO turn_events (turn_id, seq, pos, line) "
                    "VALUES (%s, 2, 0, convert_from('\\xff'::bytea, 'UTF8'))",
                    (TURN_ID,),
                )
        assert repo.line_count(TURN_ID) == 1

    def test_a_missing_row_is_a_corrupt_line(
        self, repo: PostgresTurnRepository, url: str, postgres_server: PostgresServer
    ) -> None:
        history = completed_turn()
        seed(repo, history)
        with admin(postgres_server, url) as conn:
            conn.execute("DELETE FROM turn_events WHERE turn_id = %s AND seq = 3", (TURN_ID,))
        with pytest.raises(CorruptTurnError) as info:
            repo.read(TURN_ID)
        assert info.value.line == 3
        assert info.value.path == f"postgres:{TURN_ID}"
        assert "missing" in info.value.rule

    def test_an_append_after_a_missing_row_is_refused_and_writes_nothing(
        self, repo: PostgresTurnRepository, url: str, postgres_server: PostgresServer
    ) -> None:
        # The contract: an append to a log that reads as corrupt is refused, as
        # for a file with a bad line. A gap must not be appended past.
        builder = open_sync_calls(n=1)
        progress = [tool_progress(TURN_ID, "call_0", progress={"step": i}) for i in (1, 2)]
        seed(repo, [*builder.events, *progress])
        n = len(builder.events) + 2
        with admin(postgres_server, url) as conn:
            conn.execute(
                "DELETE FROM turn_events WHERE turn_id = %s AND seq = %s", (TURN_ID, n - 1)
            )
        # (A repository that has the prefix cached trusts it, as it trusts a
        # file's prefix: storage is append-only. One that reads it checks it.)
        fresh = PostgresTurnRepository.connect(url)
        try:
            with pytest.raises(CorruptTurnError, match="missing") as info:
                fresh.append(TURN_ID, [tool_result(TURN_ID, "call_0", "read_file")])
        finally:
            fresh.close()
        assert (info.value.path, info.value.line) == (f"postgres:{TURN_ID}", n - 1)
        with admin(postgres_server, url) as conn:
            seqs = conn.execute(
                "SELECT seq FROM turn_events WHERE turn_id = %s ORDER BY seq", (TURN_ID,)
            ).fetchall()
        assert [s for (s,) in seqs] == [*range(1, n - 1), n]

    def test_an_edited_row_is_reported_at_its_line(
        self, repo: PostgresTurnRepository, url: str, postgres_server: PostgresServer
    ) -> None:
        history = completed_turn()
        seed(repo, history)
        with admin(postgres_server, url) as conn:
            conn.execute(
                'UPDATE turn_events SET line = \'{"type":"tool_exploded"}\' '
                "WHERE turn_id = %s AND seq = 4",
                (TURN_ID,),
            )
        fresh = PostgresTurnRepository.connect(url)
        try:
            with pytest.raises(CorruptTurnError, match="unknown event type") as info:
                fresh.read(TURN_ID)
            assert info.value.line == 4
        finally:
            fresh.close()


class TestRepair:
    def test_an_unreadable_final_row_moves_to_the_broken_table(
        self, repo: PostgresTurnRepository, url: str, postgres_server: PostgresServer
    ) -> None:
        builder = open_sync_calls(n=1)
        seed(repo, builder.events)
        n = len(builder.events)
        before = repo.raw(TURN_ID)
        with admin(postgres_server, url) as conn:
            conn.execute(
                "INSERT INTO turn_events (turn_id, seq, pos, line) VALUES (%s, %s, %s, %s)",
                (TURN_ID, n + 1, len(before), '{"type":"tool_pro'),
            )
        with pytest.raises(CorruptTurnError):
            repo.read(TURN_ID)
        report = repo.repair_tail(TURN_ID)
        assert (report.line, report.kept_lines, report.removed) == (
            n + 1,
            n,
            b'{"type":"tool_pro\n',
        )
        assert repo.raw(TURN_ID) == before
        assert repo.read(TURN_ID) == builder.events
        with admin(postgres_server, url) as conn:
            assert conn.execute("SELECT seq, line FROM turn_events_broken").fetchall() == [
                (n + 1, '{"type":"tool_pro')
            ]
        # The turn continues as if the line had never been there.
        assert repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")]) == n + 1

    def test_anything_else_is_refused_and_nothing_changes(
        self, repo: PostgresTurnRepository, url: str, postgres_server: PostgresServer
    ) -> None:
        seed(repo, completed_turn())
        before = repo.raw(TURN_ID)
        with pytest.raises(RepairRefusedError, match="nothing to repair"):
            repo.repair_tail(TURN_ID)
        with admin(postgres_server, url) as conn:
            conn.execute(
                "UPDATE turn_events SET line = '{}' WHERE turn_id = %s AND seq = 2", (TURN_ID,)
            )
        with pytest.raises(RepairRefusedError, match=":2:"):
            repo.repair_tail(TURN_ID)
        assert repo.raw(TURN_ID) != before  # the edit stays for a person to look at
        assert repo.line_count(TURN_ID) == len(completed_turn())


def test_staging_again_needs_one_connection(url: str) -> None:
    """Restaging the same bytes (a resent large input) works with a pool of one."""
    small = PostgresTurnRepository.connect(url, pool_size=1, timeout=3.0)
    try:
        seed(small, open_sync_calls(n=1).events)
        ref = small.stage(TURN_ID, b"x" * 1000)
        assert small.stage(TURN_ID, b"x" * 1000) == ref
        assert small.fetch_staged(TURN_ID, ref) == b"x" * 1000
        from turncore.errors import TurnNotFoundError

        with pytest.raises(TurnNotFoundError):
            small.stage(OTHER_TURN_ID, b"x" * 1000)
    finally:
        small.close()


# ================================================================ moving turns


def test_export_and_import_are_byte_identical(repo: PostgresTurnRepository, tmp_path: Path) -> None:
    files = FileTurnRepository(tmp_path)
    history = completed_turn()
    files.create(history[0])  # type: ignore[arg-type]
    for event in history[1:]:
        files.append(TURN_ID, [event])
    data = files.raw(TURN_ID)
    assert repo.import_log(data, "import") == TURN_ID
    assert repo.raw(TURN_ID) == data
    assert repo.turn_ids() == [TURN_ID]
    with pytest.raises(TurnExistsError):
        repo.import_log(data, "import")
    back = FileTurnRepository(tmp_path / "back")
    back.import_log(repo.raw(TURN_ID), "postgres")
    assert back.raw(TURN_ID) == data == lines(history)


def test_import_validates_first(repo: PostgresTurnRepository) -> None:
    history = completed_turn()
    with pytest.raises(CorruptTurnError) as info:
        repo.import_log(lines(history) + b"[1]\n", "some.jsonl")
    assert info.value.line == len(history) + 1
    assert info.value.path == "some.jsonl"
    assert repo.turn_ids() == []


# ================================================================ schema and connection


class TestSchema:
    def test_a_database_without_the_schema_is_refused_by_name(self, postgres_url: str) -> None:
        with pytest.raises(SchemaMismatchError, match="turns db migrate") as info:
            PostgresTurnRepository.connect(postgres_url, variable="TURNS_DATABASE_URL")
        assert "TURNS_DATABASE_URL" in str(info.value)
        assert PASSWORD not in str(info.value)

    def test_migrate_is_idempotent_and_concurrent(self, postgres_url: str) -> None:
        results: list[tuple[int, int]] = []
        threads = [
            threading.Thread(target=lambda: results.append(migrate(postgres_url))) for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert (
            sorted(results)
            == [(0, PG_SCHEMA_VERSION)] + [(PG_SCHEMA_VERSION, PG_SCHEMA_VERSION)] * 3
        )
        PostgresTurnRepository.connect(postgres_url).close()

    def test_a_newer_schema_is_refused(self, url: str) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE turncore_schema SET version = 99")
        with pytest.raises(SchemaMismatchError, match="version 99"):
            migrate(url)
        with pytest.raises(SchemaMismatchError, match="version 99"):
            PostgresTurnRepository.connect(url)


class TestEncoding:
    """Rows hold the lines' exact text, so the database and every session speak UTF-8."""

    @pytest.mark.parametrize("encoding", ["LATIN1", "SQL_ASCII"])
    def test_a_database_that_is_not_utf8_is_refused_by_name(
        self, postgres_server: PostgresServer, encoding: str
    ) -> None:
        name = f"enc_{encoding.lower()}"
        with psycopg.connect(postgres_server.psql_url(), autocommit=True) as conn:
            conn.execute(
                f"CREATE DATABASE {name} ENCODING '{encoding}' TEMPLATE template0 "
                "LC_COLLATE 'C' LC_CTYPE 'C'"
            )
        url = postgres_server.url(name)
        with pytest.raises(InfrastructureError, match=f"encoding {encoding}.*UTF8") as info:
            migrate(url, variable="TURNS_DATABASE_URL")
        assert "TURNS_DATABASE_URL" in str(info.value) and PASSWORD not in str(info.value)
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT to_regclass('turns')").fetchone() == (None,)
        with pytest.raises(InfrastructureError, match=f"encoding {encoding}.*UTF8"):
            PostgresTurnRepository.connect(url, variable="TURNS_DATABASE_URL")

    def test_a_client_encoding_from_the_environment_does_not_change_the_lines(
        self, url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
        builder = open_sync_calls(n=1)
        note = {"note": "café ☕ \u2028 \U0001f600 日本語"}
        events = [*builder.events, tool_progress(TURN_ID, "call_0", progress=note)]
        repo = PostgresTurnRepository.connect(url)
        try:
            seed(repo, events)
            assert repo.read(TURN_ID) == events
            files = FileTurnRepository(tmp_path)
            files.create(events[0])  # type: ignore[arg-type]
            files.append(TURN_ID, events[1:])
            assert repo.raw(TURN_ID) == files.raw(TURN_ID) == lines(events)
        finally:
            repo.close()


class TestUnreachable:
    def test_no_server_is_a_one_line_error_naming_variable_and_host(self) -> None:
        port = free_port()
        url = f"postgresql://turns:{PASSWORD}@127.0.0.1:{port}/turns"
        with pytest.raises(DatabaseUnavailableError) as info:
            PostgresTurnRepository.connect(url, variable="TURNS_DATABASE_URL")
        message = str(info.value)
        assert "TURNS_DATABASE_URL" in message and f"127.0.0.1:{port}/turns" in message
        assert PASSWORD not in message and "\n" not in message

    def test_a_wrong_password_is_not_repeated(self, postgres_server: PostgresServer) -> None:
        url = postgres_server.url().replace(PASSWORD, "not-the-" + PASSWORD)
        with pytest.raises(DatabaseUnavailableError) as info:
            PostgresTurnRepository.connect(url, variable="TURNS_DATABASE_URL")
        assert "password authentication failed" in str(info.value)
        assert PASSWORD not in str(info.value)

    @pytest.mark.parametrize(
        "password", ["50%off-Secret", "with a space-Secret", "at@Secret-host", "a/Secret-path"]
    )
    def test_a_password_the_url_does_not_percent_encode_is_not_repeated(
        self, postgres_server: PostgresServer, password: str
    ) -> None:
        # libpq cannot parse these URLs, or reads part of the password as the
        # host, port or database; its messages quote what it read.
        url = f"postgresql://postgres:{password}@127.0.0.1:{postgres_server.port}/turns"
        for attempt in (
            lambda: migrate(url, variable="TURNS_DATABASE_URL"),
            lambda: PostgresTurnRepository.connect(url, variable="TURNS_DATABASE_URL"),
        ):
            with pytest.raises(DatabaseUnavailableError) as info:
                attempt()
            message = str(info.value)
            assert "Secret" not in message, message
            assert "TURNS_DATABASE_URL" in message and "percent-encode" in message

    def test_a_server_that_goes_away_is_an_infrastructure_error_and_comes_back(
        self, repo: PostgresTurnRepository, url: str, postgres_server: PostgresServer
    ) -> None:
        builder = open_sync_calls(n=1)
        seed(repo, builder.events)
        n = len(builder.events)
        # Every connection of the repository's pool is cut, as a restart would.
        with admin(postgres_server, url) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        # The pool notices on checkout and reconnects; the append goes through.
        assert repo.append(TURN_ID, [tool_progress(TURN_ID, "call_0")], known_offset=n) == n + 1


def test_export_refuses_a_corrupt_turn_and_writes_nothing(
    repo: PostgresTurnRepository, url: str, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    from turnclient.runtime.storage import export_turns

    history = completed_turn()
    seed(repo, history)
    other = completed_turn(OTHER_TURN_ID)
    seed_other = other[0]
    repo.create(seed_other)  # type: ignore[arg-type]
    repo.append(OTHER_TURN_ID, other[1:])
    with admin(postgres_server, url) as conn:
        conn.execute(
            "UPDATE turn_events SET line = '[]' WHERE turn_id = %s AND seq = 2", (OTHER_TURN_ID,)
        )
    with pytest.raises(CorruptTurnError) as info:
        export_turns(repo, [TURN_ID, OTHER_TURN_ID], tmp_path / "out")
    assert (info.value.path, info.value.line) == (f"postgres:{OTHER_TURN_ID}", 2)
    assert not (tmp_path / "out").exists()
