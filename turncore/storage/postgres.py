"""Turn logs in PostgreSQL, with the file repository's exact contract (DESIGN §3).

Theory of operation
-------------------
A turn is a row of ``turns`` (its id, and a ``generation`` number fixed when
the row is created) plus one row of ``turn_events`` per line of its JSONL
log: the line's exact text without its newline, its 1-based ``seq`` and its
byte position ``pos`` in the JSONL form. Concatenating the lines in ``seq``
order, each followed by a newline, gives byte for byte the file the file
repository would hold. Everything above the bytes (strict parsing with
``line N`` errors, the reducer gate, idempotent retries, the prefix cache,
follower offsets) is the shared ``JsonlRepository``; this module only
stores and loads bytes, as the file and memory repositories do.

Serialization across hosts: an append locks the turn's ``turns`` row
(``SELECT … FOR NO KEY UPDATE``: exclusive among appenders, yet it does not
wait for the key-share locks foreign keys take) in its transaction, reads what it has not seen,
folds the batch through the reducer, inserts the lines and commits. Another
appender to the same turn, on any host, waits on the row lock and then
re-reduces what the first one wrote before applying its own batch, so its
batch either applies after the other or is rejected exactly as a stale
input would be; lines are never interleaved or lost. The in-process lock
(``with_lock``) still excludes this process's threads first, so they queue
in Python rather than holding pool connections while they wait. A writer
that stops inside its transaction (a frozen process, a host cut off) would
hold the row lock until TCP gave up on it; the server ends such a session
after ``IDLE_IN_TRANSACTION_SECONDS``, so the others wait that long at most.

A read is one statement, hence one snapshot: it sees whole batches only.
A connection that dies in the middle of an append rolls its transaction
back, so nothing of the batch is stored; if it dies after the commit was
sent, the batch may have landed, and a retry with ``known_offset``
recognises it like a retry against a file.

Why synchronous psycopg: the repository port (``TurnRepository``) is
synchronous. Activities and the client call it through
``asyncio.to_thread``, and the CLI calls it directly. A thread-safe
``psycopg_pool.ConnectionPool`` serves those threads without bridging an
event loop into every call. The pool checks a connection before handing it
out, so connections the server dropped are replaced.

Staged values (large inputs sent by claim check) are rows of
``turn_staged``: the turn, the digest, the size and the bytes (``bytea``),
one row per turn and digest. Staging the same bytes again rewrites the row
in one statement, so a reader sees the old bytes or the new, never a mix.
They belong to their turn (deleting the turn deletes them) and are kept after
use, like staged files.

Text: the database must be UTF8 (``migrate`` and ``connect`` refuse another
encoding, which could not hold every line or would not check it), and every
session sets ``client_encoding`` to UTF8, so a line crosses unchanged and
``pos`` counts its UTF-8 bytes whatever the environment says.

Outages: every operation rides out a lost database for up to ``timeout``
seconds (15 by default). A connection error (the server restarting, a
connection it dropped, no connection to be had) retries the whole operation
on a fresh connection until the server answers again or the time is up;
only then does the error reach the caller. Retrying is safe because an
interrupted transaction is rolled back, so nothing of it is stored — except
when the connection is lost while the commit is in flight: then the batch
may have landed, and only what is idempotent is retried (an append with
``known_offset`` finds its batch, as a retry against a file does; staging
rewrites the same bytes; a ``create`` whose row is there holds our line).

Failures: any database error becomes ``InfrastructureError`` naming the
server as ``host:port/database``. The URL, and with it any password, never
appears in a message. Rows PostgreSQL cannot hold (invalid UTF-8, a NUL,
a newline inside a line) cannot exist, and there are no torn writes;
everything else a row can hold is validated on every read like a file line.
"""

from __future__ import annotations

import atexit
import functools
import logging
import time
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout
from pydantic import ValidationError

from turncore.errors import (
    CorruptTurnError,
    InfrastructureError,
    TurnExistsError,
    TurnNotFoundError,
)
from turncore.events import StagedValue, TurnCreated, TurnEvent, parse_event
from turncore.ids import validate_turn_id

from .repository import (
    AppendOutcome,
    JsonlRepository,
    LockTable,
    LogWriter,
    RemovedTail,
    decode_log,
)

__all__ = [
    "PG_SCHEMA_VERSION",
    "DatabaseUnavailableError",
    "PostgresRepairReport",
    "PostgresTurnRepository",
    "SchemaMismatchError",
    "database_label",
    "migrate",
]

log = logging.getLogger("turncore.postgres")

_T = TypeVar("_T")

PG_SCHEMA_VERSION = 3
"""The schema version this runtime reads and writes (``turncore_schema.version``)."""

# Each entry migrates from version i to i + 1; they only ever get appended.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE turns (
            turn_id    text PRIMARY KEY,
            generation bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
            created_at timestamptz NOT NULL DEFAULT now()
        )""",
        """CREATE TABLE turn_events (
            turn_id text   NOT NULL REFERENCES turns (turn_id) ON DELETE CASCADE,
            seq     bigint NOT NULL CHECK (seq >= 1),
            pos     bigint NOT NULL CHECK (pos >= 0),
            line    text   NOT NULL CHECK (strpos(line, E'\\n') = 0),
            PRIMARY KEY (turn_id, seq)
        )""",
        """CREATE TABLE turn_events_broken (
            turn_id  text        NOT NULL,
            seq      bigint      NOT NULL,
            line     text        NOT NULL,
            moved_at timestamptz NOT NULL DEFAULT now()
        )""",
    ),
    (
        # 1 → 2: staged input values (the claim check of large inputs).
        """CREATE TABLE turn_staged (
            turn_id   text        NOT NULL REFERENCES turns (turn_id) ON DELETE CASCADE,
            digest    text        NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
            size      bigint      NOT NULL CHECK (size >= 0),
            data      bytea       NOT NULL CHECK (octet_length(data) = size),
            staged_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (turn_id, digest)
        )""",
    ),
    (
        # 2 → 3: live deltas across hosts (never the log). UNLOGGED: deltas are
        # ephemeral by design (best effort, dropped when their call closes), so
        # they skip the WAL; a server crash empties the table, which loses only
        # the text of calls that were streaming at that moment.
        """CREATE UNLOGGED TABLE turn_live_deltas (
            turn_id          text        NOT NULL,
            model_call_index integer     NOT NULL CHECK (model_call_index >= 0),
            seq              bigint      NOT NULL CHECK (seq >= 1),
            delta            text        NOT NULL,
            written_at       timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (turn_id, model_call_index, seq)
        )""",
    ),
)

# Serializes concurrent migrations (two workers starting with migrate on).
_MIGRATION_LOCK = 0x7475726E73  # "turns"

# Every session speaks UTF-8 whatever PGCLIENTENCODING or the server's default
# says: a line's text must cross unchanged, and ``pos`` counts its UTF-8 bytes.
_CLIENT_ENCODING = "UTF8"


class DatabaseUnavailableError(InfrastructureError):
    """The database cannot be reached (at start, or in the middle of a call)."""


class _CommitUncertain(DatabaseUnavailableError):
    """The connection was lost while a commit was in flight: it may have landed."""


class SchemaMismatchError(InfrastructureError):
    """The database has no turncore schema, or another version of it."""


def database_label(url: str) -> str:
    """``host:port/database`` of a libpq URL or conninfo: how errors name the server.

    Never the user or password. A URL libpq cannot parse is named as such,
    without repeating it (it may hold a password).
    """
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(an unparseable database URL)"
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or "5432")
    db = str(params.get("dbname") or params.get("user") or "")
    return f"{host}:{port}/{db}"


def _misread(url: str) -> str | None:
    """Why libpq's reading of ``url`` may hold pieces of its password, or None.

    A user name or password that is not percent-encoded makes a URL libpq
    cannot parse (a ``%`` or a space), or one it reads differently (an ``@``
    or ``/`` moves the rest into the host, port or database). Its messages
    then quote what it read, so they are not repeated.
    """
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "libpq cannot parse it"
    if any("@" in str(params.get(key) or "") for key in ("host", "hostaddr", "port", "dbname")):
        return "its host, port or database name holds an '@'"
    return None


def _secrets_of(url: str) -> list[str]:
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return [url]
    password = params.get("password")
    return [url, *([str(password)] if password else [])]


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return " ".join(text.split())


# ---------------------------------------------------------------- migration


def _check_encoding(conn: psycopg.Connection[Any], label: str, variable: str) -> None:
    """Refuse a database that cannot hold every line as the file would (not UTF8).

    A LATIN1 database cannot store most characters a line may hold, and an
    SQL_ASCII one stores bytes without checking them, so neither keeps lines
    byte for byte.
    """
    row = conn.execute("SHOW server_encoding").fetchone()
    encoding = str(row[0]) if row is not None else "unknown"
    if encoding.upper() not in ("UTF8", "UTF-8"):
        raise InfrastructureError(
            f"PostgreSQL {label} (from {variable}) has the encoding {encoding}; turn logs "
            "need a UTF8 database: CREATE DATABASE … ENCODING 'UTF8' TEMPLATE template0"
        )


def _current_version(conn: psycopg.Connection[Any]) -> int | None:
    """The schema version, or None when turncore's tables are not there at all."""
    row = conn.execute("SELECT to_regclass('turncore_schema') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return None
    found = conn.execute("SELECT version FROM turncore_schema").fetchone()
    return int(found[0]) if found is not None else 0


def migrate(url: str, *, variable: str = "the database URL") -> tuple[int, int]:
    """Create or upgrade the schema; return (version before, version after).

    Idempotent and safe to run from several processes at once (an advisory
    lock serializes them); a database newer than this runtime is refused.
    """
    label = database_label(url)
    with _connect(url, variable) as conn, _translated(label, _secrets_of(url)):
        _check_encoding(conn, label, variable)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(
                """CREATE TABLE IF NOT EXISTS turncore_schema (
                    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                    version   integer NOT NULL
                )"""
            )
            before = _current_version(conn) or 0
            if before > PG_SCHEMA_VERSION:
                raise SchemaMismatchError(
                    f"PostgreSQL {label}: the turn schema is version {before}, newer than "
                    f"this runtime's {PG_SCHEMA_VERSION}; upgrade turncore"
                )
            for statements in _MIGRATIONS[before:]:
                for statement in statements:
                    conn.execute(statement)
            conn.execute(
                """INSERT INTO turncore_schema (version) VALUES (%s)
                   ON CONFLICT (singleton) DO UPDATE SET version = excluded.version""",
                (PG_SCHEMA_VERSION,),
            )
    if before != PG_SCHEMA_VERSION:
        log.info("migrated the turn schema of %s from %d to %d", label, before, PG_SCHEMA_VERSION)
    return before, PG_SCHEMA_VERSION


@contextmanager
def _translated(label: str, secrets: list[str]) -> Iterator[None]:
    """Database errors as ``InfrastructureError`` naming ``label``, never the URL."""
    try:
        yield
    except PoolTimeout as exc:
        raise DatabaseUnavailableError(
            f"PostgreSQL {label}: no database connection became available ({_scrub(str(exc), secrets)})"
        ) from None
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailableError(
            f"PostgreSQL {label}: {_scrub(str(exc), secrets) or type(exc).__name__}"
        ) from None
    except psycopg.Error as exc:
        raise InfrastructureError(
            f"PostgreSQL {label}: {type(exc).__name__}: {_scrub(str(exc), secrets)}"
        ) from None


@contextmanager
def _connect(url: str, variable: str, timeout: float = 10.0) -> Iterator[psycopg.Connection[Any]]:
    """One direct connection, or a one-line error naming ``variable`` and the server."""
    label = database_label(url)
    secrets = _secrets_of(url)
    try:
        conn = psycopg.connect(
            url, connect_timeout=max(1, int(timeout)), client_encoding=_CLIENT_ENCODING
        )
    except psycopg.Error as exc:
        misread = _misread(url)
        if misread is not None:
            raise DatabaseUnavailableError(
                f"cannot connect to PostgreSQL (from {variable}): the URL is malformed "
                f"({misread}); percent-encode its user name and password (@ as %40, % as "
                "%25, / as %2F, : as %3A, a space as %20)"
            ) from None
        raise DatabaseUnavailableError(
            f"cannot connect to PostgreSQL at {label} (from {variable}): "
            f"{_scrub(str(exc), secrets) or type(exc).__name__}"
        ) from None
    with conn:
        yield conn


# ---------------------------------------------------------------- the repository


IDLE_IN_TRANSACTION_SECONDS = 60.0
"""How long the server lets a session of the repository sit idle inside a
transaction before it ends the session and rolls back. An append holds the
turn's row lock for the length of its transaction, which takes milliseconds
and at most seconds (decoding a long log between two statements); a writer
whose process froze or whose host lost the network in the middle would
otherwise hold the lock, and so every other writer of the turn, until TCP
gave up on it (hours). The frozen writer's batch is rolled back; its commit
fails, and its retry with ``known_offset`` finds what is stored."""


def _configure_session(conn: psycopg.Connection[Any], *, idle_ms: int) -> None:
    """Settings of every pooled session (``IDLE_IN_TRANSACTION_SECONDS``)."""
    conn.execute(
        "SELECT set_config('idle_in_transaction_session_timeout', %s, false)", (str(idle_ms),)
    )
    conn.commit()  # the pool takes only idle connections


def _close_quietly(ref: weakref.ref[ConnectionPool[Any]]) -> None:
    pool = ref()
    if pool is not None and not pool.closed:
        pool.close(timeout=1.0)


@dataclass(frozen=True, kw_only=True)
class PostgresRepairReport(RemovedTail):
    """What ``PostgresTurnRepository.repair_tail`` moved into ``turn_events_broken``."""

    turn_id: str
    where: str


class _PgWriter(LogWriter):
    """The turn's rows under its row lock, in one transaction that ``write`` commits."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        turn_id: str,
        generation: int,
        lines: int,
        size: int,
        where: str,
    ) -> None:
        self._conn = conn
        self._turn_id = turn_id
        self._where = where
        self.identity = generation
        self._lines = lines
        self._size = size

    def size(self) -> int:
        # Exact: nobody else writes this turn while we hold its row lock, and
        # after ``write`` it is the size our commit left.
        return self._size

    def read_from(self, start: int) -> bytes:
        rows = self._conn.execute(
            "SELECT seq, line FROM turn_events WHERE turn_id = %s AND pos >= %s ORDER BY seq",
            (self._turn_id, start),
        ).fetchall()
        # The rows must end at the last line and, from the start, be numbered
        # 1, 2, 3…: appending past a missing row would write after a log that
        # reads as corrupt (a cached prefix was checked when it was read).
        first = 1 if start == 0 else self._lines - len(rows) + 1
        _check_sequence(self._where, first, [seq for seq, _ in rows])
        return "".join(line + "\n" for _, line in rows).encode()

    def write(self, data: bytes) -> None:
        rows = _insert_lines(
            self._conn, self._turn_id, data, first_seq=self._lines + 1, first_pos=self._size
        )
        # Commit here, inside the append: the caller caches the reducer only
        # after ``write`` returns, so it never caches a batch that was not stored.
        self._conn.commit()
        self._lines += rows
        self._size += len(data)

    def move_last_to_broken(self) -> None:
        """Move the last line into ``turn_events_broken`` and commit (``repair_tail``)."""
        self._conn.execute(
            """WITH moved AS (
                   DELETE FROM turn_events WHERE turn_id = %s AND seq = %s
                   RETURNING turn_id, seq, line)
               INSERT INTO turn_events_broken (turn_id, seq, line)
               SELECT turn_id, seq, line FROM moved""",
            (self._turn_id, self._lines),
        )
        self._conn.commit()


def _check_sequence(where: str, first: int, seqs: list[int]) -> None:
    """Rows numbered ``first``, ``first + 1``…: a gap is a missing line, reported at its number."""
    for expected, seq in enumerate(seqs, start=first):
        if seq != expected:
            raise CorruptTurnError(
                f"line {expected} is missing (the next stored line is number {seq})",
                path=where,
                line=expected,
            )


def _insert_lines(
    conn: psycopg.Connection[Any], turn_id: str, data: bytes, *, first_seq: int, first_pos: int
) -> int:
    """Store ``data`` (whole lines, each ending in a newline) as ``turn_events`` rows;
    return how many.

    One statement, not ``executemany``: that pipelines its inserts, and a
    session waiting inside a pipeline is not "idle in transaction" to the
    server, so ``IDLE_IN_TRANSACTION_SECONDS`` would not end a writer that
    froze there.
    """
    if data and not data.endswith(b"\n"):
        raise AssertionError("only whole lines are stored")
    seqs: list[int] = []
    positions: list[int] = []
    lines: list[str] = []
    pos = first_pos
    for i, raw in enumerate(data.split(b"\n")[:-1]):
        seqs.append(first_seq + i)
        positions.append(pos)
        lines.append(raw.decode("utf-8"))
        pos += len(raw) + 1
    conn.execute(
        """INSERT INTO turn_events (turn_id, seq, pos, line)
           SELECT %s, * FROM unnest(%s::bigint[], %s::bigint[], %s::text[])""",
        (turn_id, seqs, positions, lines),
    )
    return len(lines)


class PostgresTurnRepository(JsonlRepository):
    """Turn logs in a PostgreSQL database (see the module docstring).

    ``connect`` opens it from a URL; ``close`` releases its connections.
    """

    def __init__(
        self,
        pool: ConnectionPool[psycopg.Connection[Any]],
        *,
        label: str,
        secrets: list[str] | None = None,
        timeout: float = 15.0,
    ) -> None:
        super().__init__()
        self._pool = pool
        self.label = label
        self._secrets = secrets or []
        self._timeout = timeout
        self._locks = LockTable()

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        variable: str = "the database URL",
        pool_size: int = 16,
        migrate_schema: bool = False,
        timeout: float = 15.0,
        idle_in_transaction_timeout: float = IDLE_IN_TRANSACTION_SECONDS,
    ) -> PostgresTurnRepository:
        """Open the database at ``url``; a clear one-line error if it cannot be used.

        Connects once directly first, so an unreachable server, a refused
        login or a missing schema is reported at once, naming ``variable``
        and the server, instead of surfacing later from a pool thread.
        ``idle_in_transaction_timeout``: see ``IDLE_IN_TRANSACTION_SECONDS``.
        """
        label = database_label(url)
        if migrate_schema:
            migrate(url, variable=variable)
        with _connect(url, variable) as conn, _translated(label, _secrets_of(url)):
            _check_encoding(conn, label, variable)
            version = _current_version(conn)
        if version != PG_SCHEMA_VERSION:
            found = "no turn schema" if version is None else f"turn schema version {version}"
            raise SchemaMismatchError(
                f"PostgreSQL {label} (from {variable}) has {found}; this runtime needs "
                f"version {PG_SCHEMA_VERSION}: run `turns db migrate`"
            )
        pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"client_encoding": _CLIENT_ENCODING},
            configure=functools.partial(
                _configure_session, idle_ms=max(1, round(idle_in_transaction_timeout * 1000))
            ),
            open=False,
            check=ConnectionPool.check_connection,
            name="turncore",
            timeout=timeout,
        )
        pool.open(wait=False)
        # The pool's threads must stop before the interpreter finalizes, or
        # the C extension aborts the process at exit; a process that never
        # called close() (a CLI command, a killed worker's parent) still exits
        # cleanly.
        atexit.register(_close_quietly, weakref.ref(pool))
        return cls(pool, label=label, secrets=_secrets_of(url), timeout=timeout)

    def close(self) -> None:
        self._pool.close()

    # -- riding out outages --------------------------------------------------

    def _riding_out(self, what: str, op: Callable[[], _T], *, idempotent: bool) -> _T:
        """``op()``, again on a fresh connection while the database is unreachable,
        for up to ``timeout`` seconds from the first failure (module docstring)."""
        deadline: float | None = None
        pause = 0.1
        while True:
            try:
                return op()
            except DatabaseUnavailableError as exc:
                if isinstance(exc, _CommitUncertain) and not idempotent:
                    raise
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self._timeout
                    log.warning(
                        "PostgreSQL %s unreachable during %s (%s); retrying for up to %g s",
                        self.label,
                        what,
                        exc,
                        self._timeout,
                    )
                if now >= deadline:
                    raise
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, 1.0)

    def create(self, event: TurnCreated) -> None:
        op = super().create
        uncertain = False

        def attempt() -> None:
            nonlocal uncertain
            try:
                op(event)
            except _CommitUncertain:
                uncertain = True
                raise
            except TurnExistsError:
                # An attempt whose commit answer was lost may have stored it: ours if
                # the stored turn is exactly our first line.
                if not (uncertain and self.read(event.turn_id) == [event]):
                    raise

        self._riding_out("create", attempt, idempotent=True)

    def read(self, turn_id: str) -> list[TurnEvent]:
        op = super().read
        return self._riding_out("read", lambda: op(turn_id), idempotent=True)

    def read_after(self, turn_id: str, offset: int) -> list[TurnEvent]:
        op = super().read_after
        return self._riding_out("read", lambda: op(turn_id, offset), idempotent=True)

    def append(
        self, turn_id: str, events: Sequence[TurnEvent], *, known_offset: int | None = None
    ) -> int:
        op = super().append
        return self._riding_out(
            "append",
            lambda: op(turn_id, events, known_offset=known_offset),
            idempotent=known_offset is not None,
        )

    def append_once(
        self, turn_id: str, events: Sequence[TurnEvent], *, known_offset: int
    ) -> AppendOutcome:
        op = super().append_once
        return self._riding_out(
            "append", lambda: op(turn_id, events, known_offset=known_offset), idempotent=True
        )

    def exists(self, turn_id: str) -> bool:
        op = super().exists
        return self._riding_out("read", lambda: op(turn_id), idempotent=True)

    def raw(self, turn_id: str) -> bytes:
        op = super().raw
        return self._riding_out("read", lambda: op(turn_id), idempotent=True)

    def turn_ids(self) -> list[str]:
        return self._riding_out("listing", super().turn_ids, idempotent=True)

    def session_turn_ids(self, session_id: str) -> list[str]:
        op = super().session_turn_ids
        return self._riding_out("listing", lambda: op(session_id), idempotent=True)

    def stage(self, turn_id: str, data: bytes) -> StagedValue:
        op = super().stage
        return self._riding_out("staging", lambda: op(turn_id, data), idempotent=True)

    def fetch_staged(self, turn_id: str, ref: StagedValue) -> bytes:
        op = super().fetch_staged
        return self._riding_out("staged read", lambda: op(turn_id, ref), idempotent=True)

    # -- storage hooks -------------------------------------------------------

    @contextmanager
    def _connection(self, *, reading: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; ``reading``: one statement, so no BEGIN/COMMIT round trips."""
        with _translated(self.label, self._secrets):
            with self._pool.connection(timeout=self._timeout) as conn:
                conn.autocommit = reading  # the pool hands out idle connections only
                yield conn
                if not reading:
                    # Committed here rather than by the pool, so that a commit whose
                    # answer is lost is told apart from a transaction rolled back.
                    try:
                        conn.commit()
                    except psycopg.OperationalError as exc:
                        raise _CommitUncertain(
                            f"PostgreSQL {self.label}: the connection was lost while "
                            f"committing ({_scrub(str(exc), self._secrets)})"
                        ) from None

    def _where(self, turn_id: str) -> str:
        return f"postgres:{turn_id}"

    def _lock(self, turn_id: str) -> AbstractContextManager[None]:
        return self._locks.hold(turn_id)

    def _missing(self, turn_id: str) -> TurnNotFoundError:
        return TurnNotFoundError(f"turn {turn_id} does not exist (in PostgreSQL {self.label})")

    def _store_new(self, turn_id: str, data: bytes) -> None:
        with self._connection() as conn:
            row = conn.execute(
                "INSERT INTO turns (turn_id) VALUES (%s) ON CONFLICT DO NOTHING RETURNING 1",
                (turn_id,),
            ).fetchone()
            if row is None:
                raise TurnExistsError(f"turn {turn_id} already exists (in PostgreSQL {self.label})")
            _insert_lines(conn, turn_id, data, first_seq=1, first_pos=0)

    def _load(self, turn_id: str) -> tuple[Hashable, bytes]:
        return self._load_from(turn_id, 0)

    def _load_from(self, turn_id: str, start: int) -> tuple[Hashable, bytes]:
        # One statement: one snapshot, so never half of a batch.
        with self._connection(reading=True) as conn:
            rows = conn.execute(
                """SELECT t.generation, e.seq, e.line
                     FROM turns t
                     LEFT JOIN turn_events e ON e.turn_id = t.turn_id AND e.pos >= %s
                    WHERE t.turn_id = %s
                    ORDER BY e.seq""",
                (start, turn_id),
            ).fetchall()
        if not rows:
            raise self._missing(turn_id)
        generation = rows[0][0]
        if rows[0][1] is None:
            return generation, b""
        if start == 0:
            _check_sequence(self._where(turn_id), 1, [seq for _, seq, _ in rows])
        return generation, "".join(line + "\n" for _, _, line in rows).encode()

    @contextmanager
    def _writer(self, turn_id: str) -> Iterator[LogWriter]:
        with self._connection() as conn:
            row = conn.execute(
                "SELECT generation FROM turns WHERE turn_id = %s FOR NO KEY UPDATE", (turn_id,)
            ).fetchone()
            if row is None:
                raise self._missing(turn_id)
            # A separate statement: under READ COMMITTED it takes a fresh
            # snapshot, so it sees every line committed before we got the lock.
            # (Asked in the locking statement, it would see the snapshot from
            # before the wait.)
            last = conn.execute(
                """SELECT seq, pos + octet_length(line) + 1 FROM turn_events
                    WHERE turn_id = %s ORDER BY seq DESC LIMIT 1""",
                (turn_id,),
            ).fetchone()
            lines, size = last if last is not None else (0, 0)
            yield _PgWriter(conn, turn_id, row[0], lines, size, self._where(turn_id))

    def _has(self, turn_id: str) -> bool:
        with self._connection(reading=True) as conn:
            return (
                conn.execute("SELECT 1 FROM turns WHERE turn_id = %s", (turn_id,)).fetchone()
                is not None
            )

    def _ids(self) -> list[str]:
        with self._connection(reading=True) as conn:
            return [r[0] for r in conn.execute("SELECT turn_id FROM turns").fetchall()]

    def _first_lines(self, session_id: str) -> Iterator[tuple[str, bytes]]:
        # A JSON string holds these characters as they are, so a first line that
        # names the session contains them; the caller parses what is found.
        verbatim = (
            session_id.isascii() and session_id.isprintable() and not set('"\\') & set(session_id)
        )
        with self._connection(reading=True) as conn:
            rows = conn.execute(
                "SELECT turn_id, line FROM turn_events WHERE seq = 1 AND strpos(line, %s) > 0",
                (session_id if verbatim else "",),
            ).fetchall()
        for turn_id, line in rows:
            yield turn_id, line.encode()

    # -- live deltas (not the log: see turn_live_deltas) -----------------------

    def put_deltas(self, rows: list[tuple[str, int, int, str]], keep: int) -> None:
        """Store deltas (turn, model call, seq, JSON text) in one transaction, and drop
        those of each call that fell ``keep`` or more behind its newest."""
        with self._connection() as conn:
            with conn.cursor() as cur:
                cur.executemany(
                    """INSERT INTO turn_live_deltas (turn_id, model_call_index, seq, delta)
                       VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING""",
                    rows,
                )
            newest: dict[tuple[str, int], int] = {}
            for turn_id, index, seq, _ in rows:
                newest[(turn_id, index)] = max(seq, newest.get((turn_id, index), 0))
            for (turn_id, index), seq in newest.items():
                if seq > keep:
                    conn.execute(
                        """DELETE FROM turn_live_deltas
                            WHERE turn_id = %s AND model_call_index = %s AND seq <= %s""",
                        (turn_id, index, seq - keep),
                    )

    def drop_deltas(self, turn_id: str, model_call_index: int | None = None) -> None:
        """Drop a call's deltas (its durable record says it all now); None: the turn's."""
        with self._connection(reading=True) as conn:
            if model_call_index is None:
                conn.execute("DELETE FROM turn_live_deltas WHERE turn_id = %s", (turn_id,))
            else:
                conn.execute(
                    "DELETE FROM turn_live_deltas WHERE turn_id = %s AND model_call_index = %s",
                    (turn_id, model_call_index),
                )

    def drop_stale_deltas(self, older_than_seconds: float) -> None:
        """Drop deltas a process that died left behind."""
        with self._connection(reading=True) as conn:
            conn.execute(
                "DELETE FROM turn_live_deltas WHERE written_at < now() - make_interval(secs => %s)",
                (older_than_seconds,),
            )

    def get_deltas(self, turn_id: str, after: tuple[int, int]) -> list[tuple[int, int, str]]:
        """The turn's stored deltas after position ``after`` (model call, seq), in order."""
        index, seq = after
        with self._connection(reading=True) as conn:
            rows = conn.execute(
                """SELECT model_call_index, seq, delta FROM turn_live_deltas
                    WHERE turn_id = %s AND (model_call_index, seq) > (%s, %s)
                    ORDER BY model_call_index, seq""",
                (turn_id, index, seq),
            ).fetchall()
        return [(int(i), int(n), str(d)) for i, n, d in rows]

    def _put_staged(self, turn_id: str, digest: str, data: bytes) -> None:
        with self._connection() as conn:
            row = conn.execute(
                """INSERT INTO turn_staged (turn_id, digest, size, data)
                   SELECT turn_id, %s, %s, %s FROM turns WHERE turn_id = %s
                   ON CONFLICT (turn_id, digest) DO UPDATE
                      SET size = excluded.size, data = excluded.data
                    WHERE turn_staged.data IS DISTINCT FROM excluded.data
                   RETURNING 1""",
                (digest, len(data), data, turn_id),
            ).fetchone()
            # Nothing written: staged before, or no such turn. Asked on this
            # connection: a second checkout could wait for a pool that is all in use.
            if row is None:
                found = conn.execute("SELECT 1 FROM turns WHERE turn_id = %s", (turn_id,))
                if found.fetchone() is None:
                    raise self._missing(turn_id)

    def _get_staged(self, turn_id: str, digest: str) -> bytes | None:
        with self._connection(reading=True) as conn:
            row = conn.execute(
                "SELECT data FROM turn_staged WHERE turn_id = %s AND digest = %s",
                (turn_id, digest),
            ).fetchone()
        return None if row is None else bytes(row[0])

    def line_count(self, turn_id: str) -> int:
        """The number of stored lines; not validated."""
        validate_turn_id(turn_id)
        return self._riding_out("read", lambda: self._line_count(turn_id), idempotent=True)

    def _line_count(self, turn_id: str) -> int:
        with self._connection(reading=True) as conn:
            row = conn.execute(
                """SELECT count(e.seq) FROM turns t
                     LEFT JOIN turn_events e ON e.turn_id = t.turn_id
                    WHERE t.turn_id = %s GROUP BY t.turn_id""",
                (turn_id,),
            ).fetchone()
        if row is None:
            raise self._missing(turn_id)
        return int(row[0])

    # -- repair --------------------------------------------------------------

    def repair_tail(self, turn_id: str) -> PostgresRepairReport:
        return self._riding_out("repair", lambda: self._repair_tail(turn_id), idempotent=False)

    def _repair_tail(self, turn_id: str) -> PostgresRepairReport:
        """Move an unparseable final line into ``turn_events_broken`` (``turns repair``).

        The same rule as ``repair_torn_tail`` for files: only a final line
        that is not JSON or not a valid event is moved, and only if every line
        before it is a valid turn log; anything else raises
        ``RepairRefusedError`` and changes nothing. (A row is never torn: each
        append is one transaction.)
        """
        from .repository import RepairRefusedError

        validate_turn_id(turn_id)
        where = self._where(turn_id)
        with self._lock(turn_id), self._writer(turn_id) as writer:
            assert isinstance(writer, _PgWriter)
            data = writer.read_from(0)
            if not data:
                raise RepairRefusedError(
                    f"{where}: the turn has no lines; there is no turn to keep"
                )
            body = data[:-1]
            start = body.rfind(b"\n") + 1
            prefix, tail = data[:start], data[start:]
            line = prefix.count(b"\n") + 1
            try:
                parse_event(orjson.loads(tail), trusted_json=True)
            except (orjson.JSONDecodeError, ValidationError):
                pass
            else:
                try:
                    decode_log(data, where, turn_id)
                except CorruptTurnError as exc:
                    raise RepairRefusedError(
                        f"{exc}; only an unreadable final line is repaired, so nothing changed"
                    ) from None
                raise RepairRefusedError(f"{where}: the final line is valid; nothing to repair")
            if not prefix:
                raise RepairRefusedError(
                    f"{where}:1: the only line is unreadable; no valid turn would remain"
                )
            try:
                decode_log(prefix, where, turn_id)
            except CorruptTurnError as exc:
                raise RepairRefusedError(
                    f"{exc}; only an unreadable final line is repaired, so nothing changed"
                ) from None
            writer.move_last_to_broken()
        with self._tails_guard:
            self._tails.pop(turn_id, None)
            self._follow.pop(turn_id, None)
        return PostgresRepairReport(
            turn_id=turn_id, where=where, line=line, removed=tail, kept_lines=line - 1
        )
