"""Live deltas across hosts: with PostgreSQL storage, through the database.

The file spool (``deltaspool``) reaches only watchers that see the same
``live/`` directory. With a PostgreSQL repository the workers and the
watchers (``turns watch``, the web UI and its SSE API) may be on different
hosts that share nothing but the database, so the process running a model
call also writes its deltas to ``turn_live_deltas``, an UNLOGGED table (no
WAL: deltas are ephemeral), and watchers read them from there.

Why a table rather than LISTEN/NOTIFY alone: a watcher that opens a turn
while its model call streams must see the text so far (the spool gives it
that too), and a client resuming after ``N:CALL:SEQ`` must get exactly the
deltas after it. A notification reaches only those listening when it is
sent; a table row is there for whoever asks next. Watchers already poll the
log for durable events every 50 ms; the delta query rides next to it.

Bounded: at most ``KEEP`` rows per model call (older ones are deleted as new
ones arrive — a watcher slower than that skips what was dropped, and the
completed message carries the whole text), and a call's rows are deleted
when the call closes (``finish``). Rows a dead process left are deleted when
they are older than ``STALE_AFTER`` by the next process that writes.

Never in the model call's way: ``publish`` only puts the delta on an
in-memory queue (bounded; full means dropped, logged once per call); a
thread of its own writes batches to the database. A database error is
logged and the batch dropped: best effort, as the spool is.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Protocol

import orjson
from pydantic import TypeAdapter, ValidationError

from turnclient.lib.deltaspool import SpooledDelta
from turncore.errors import TurnError
from turncore.events import TurnDelta
from turncore.live import DeltaMirror

log = logging.getLogger(__name__)

KEEP = 4096
"""Most deltas kept per model call."""

QUEUE = 10_000
"""Most deltas waiting to be written; past that a delta is dropped."""

STALE_AFTER = 3600.0
"""Seconds after which rows are taken as left by a process that died."""

_delta_adapter: TypeAdapter[TurnDelta] = TypeAdapter(TurnDelta)


class DeltaStore(Protocol):
    """What the database side offers (``PostgresTurnRepository``)."""

    def put_deltas(self, rows: list[tuple[str, int, int, str]], keep: int) -> None: ...

    def drop_deltas(self, turn_id: str, model_call_index: int | None = None) -> None: ...

    def drop_stale_deltas(self, older_than_seconds: float) -> None: ...

    def get_deltas(self, turn_id: str, after: tuple[int, int]) -> list[tuple[int, int, str]]: ...


@dataclass
class _Finish:
    turn_id: str
    model_call_index: int


@dataclass
class DatabaseDeltas:
    """The writing side: a ``DeltaMirror`` that sends deltas to the database."""

    store: DeltaStore
    keep: int = KEEP
    _queue: queue.Queue[object] = field(default_factory=lambda: queue.Queue(QUEUE))
    _seq: dict[str, tuple[int, int]] = field(default_factory=dict)
    _dropped: set[tuple[str, int]] = field(default_factory=set)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, delta: TurnDelta) -> None:
        key = delta.turn_id
        index, seq = self._seq.get(key, (delta.model_call_index, 0))
        if index != delta.model_call_index:
            index, seq = delta.model_call_index, 0
        seq += 1
        self._seq[key] = (index, seq)
        row = (delta.turn_id, index, seq, orjson.dumps(delta.to_wire()).decode())
        self._start()
        try:
            self._queue.put_nowait(row)
        except queue.Full:
            if (delta.turn_id, index) not in self._dropped:
                self._dropped.add((delta.turn_id, index))
                log.warning("live deltas of turn %s dropped: the database is behind", key)

    def finish(self, turn_id: str, model_call_index: int) -> None:
        current = self._seq.get(turn_id)
        if current is not None and current[0] == model_call_index:
            del self._seq[turn_id]
        self._dropped.discard((turn_id, model_call_index))
        self._start()
        try:
            self._queue.put_nowait(_Finish(turn_id, model_call_index))
        except queue.Full:
            log.warning("live deltas of turn %s not dropped: the database is behind", turn_id)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="turncore-live-deltas", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        try:
            self.store.drop_stale_deltas(STALE_AFTER)
        except TurnError as exc:
            log.warning("could not drop stale live deltas: %s", exc)
        while True:
            item = self._queue.get()
            batch = [item]
            while len(batch) < 500:  # whatever else is waiting goes in the same round trip
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            rows: list[tuple[str, int, int, str]] = []
            for entry in batch:
                if isinstance(entry, _Flush):
                    self._write(rows)
                    rows = []
                    entry.done.set()
                elif isinstance(entry, _Finish):
                    self._write(rows)
                    rows = []
                    try:
                        self.store.drop_deltas(entry.turn_id, entry.model_call_index)
                    except TurnError as exc:
                        log.warning("live deltas of turn %s not dropped: %s", entry.turn_id, exc)
                elif isinstance(entry, tuple):
                    rows.append(entry)
            self._write(rows)

    def _write(self, rows: list[tuple[str, int, int, str]]) -> None:
        if not rows:
            return
        try:
            self.store.put_deltas(rows, self.keep)
        except TurnError as exc:
            log.warning("%d live delta(s) dropped: %s", len(rows), exc)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until everything published so far is written (tests, shutdown)."""
        done = threading.Event()
        self._start()
        self._queue.put(_Flush(done))
        done.wait(timeout)


@dataclass
class _Flush:
    done: threading.Event


class BothMirrors:
    """Deltas to the local spool (watchers on this host) and the database (others)."""

    def __init__(self, *mirrors: DeltaMirror) -> None:
        self._mirrors = mirrors

    def publish(self, delta: TurnDelta) -> None:
        for m in self._mirrors:
            m.publish(delta)

    def finish(self, turn_id: str, model_call_index: int) -> None:
        for m in self._mirrors:
            m.finish(turn_id, model_call_index)


class DatabaseDeltaReader:
    """The reading side: the turn's deltas after a position, once, in order.

    ``read`` asks the database: call it from a thread (``blocking``).
    """

    blocking = True

    def __init__(self, store: DeltaStore, turn_id: str, after: tuple[int, int] = (-1, 0)) -> None:
        self._store = store
        self._turn_id = turn_id
        self._after = after

    def read(self) -> list[SpooledDelta]:
        try:
            rows = self._store.get_deltas(self._turn_id, self._after)
        except TurnError as exc:  # best effort, as the spool: durable events still flow
            log.warning("live deltas of turn %s unavailable: %s", self._turn_id, exc)
            return []
        found: list[SpooledDelta] = []
        for _, seq, text in rows:
            try:
                delta = _delta_adapter.validate_json(text)
            except ValidationError:
                continue  # not ours to interpret; the durable events carry the truth
            found.append(SpooledDelta(seq, delta))
        if found:
            self._after = found[-1].position
        return found


__all__ = ["KEEP", "BothMirrors", "DatabaseDeltaReader", "DatabaseDeltas", "DeltaStore"]
