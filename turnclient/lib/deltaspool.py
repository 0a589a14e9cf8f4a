"""Live deltas across processes on one host: a bounded spool per turn.

The process that runs a model call publishes its text, reasoning and
tool-input deltas to its ``LiveHub``; the hub mirrors them into this spool
so that a web UI or ``turns watch`` in *another* process on the same host
can show them as they stream.

Layout, under ``<work dir>/live/``:

- ``<turnId>.deltas``    the current segment: a header line ``{"segment": "<random id>"}``,
  then JSON lines ``{"seq": n, "delta": {…}}``
- ``<turnId>.deltas.1``  the previous segment

The header names the segment, so a reader knows whether the file it
continues is the one it was reading (inode numbers are reused too soon to
tell).

A segment that reaches ``segment_bytes`` is renamed to ``.1`` (replacing the
older one) and a new one is started, so a turn's spool never holds more than
two segments: a ring of two. The writer numbers lines ``seq`` 1, 2, … per
model call (each line also carries its ``modelCallIndex``), so a reader
orders, resumes and drops duplicates by ``(modelCallIndex, seq)`` alone,
whatever renames it raced with. When the model call ends the writer deletes
both segments: the durable ``model_call_completed`` (or ``_failed``) now
says everything the deltas said. A spool left by a process that died is
replaced by the next call's first delta and is pruned when it is older than
``STALE_AFTER`` seconds by the next process that opens the spool directory.

What the spool is not: it is never the turn file and never Temporal
history; nothing durable reads it. Delivery is best effort — a write that
fails is logged and dropped, and a reader slower than two segments skips
what was overwritten (the completed message shows the whole text anyway).
Only processes that see the same ``live/`` directory share the spool; with
a PostgreSQL repository deltas also travel through the database to
watchers on other hosts (``turnclient.lib.pgdeltas``).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import orjson
from pydantic import TypeAdapter, ValidationError

from turncore.events import TurnDelta
from turncore.ids import validate_turn_id

log = logging.getLogger(
    "turnclient.deltaspool"
)  # its name before the move: logging configs keep working

SEGMENT_BYTES = 128 * 1024
"""A segment is rotated once it holds this many bytes: at most 2× per turn on disk."""

STALE_AFTER = 3600.0
"""Spool files untouched for this long are left over from a process that died."""

_delta_adapter: TypeAdapter[TurnDelta] = TypeAdapter(TurnDelta)


def spool_dir(work_dir: Path) -> Path:
    return work_dir / "live"


@dataclass
class _Writing:
    model_call_index: int
    seq: int
    size: int


def _header() -> bytes:
    return orjson.dumps({"segment": secrets.token_hex(8)}) + b"\n"


class DeltaSpool:
    """The writing side: a ``DeltaMirror`` for the hub of a process that runs model calls."""

    def __init__(self, directory: Path, *, segment_bytes: int = SEGMENT_BYTES) -> None:
        self._dir = directory
        self._segment_bytes = segment_bytes
        self._writing: dict[str, _Writing] = {}
        self._pruned = False

    def _paths(self, turn_id: str) -> tuple[Path, Path]:
        main = self._dir / f"{turn_id}.deltas"
        return main, main.with_name(main.name + ".1")

    def publish(self, delta: TurnDelta) -> None:
        try:
            self._publish(delta)
        except OSError as exc:  # best effort: a full disk never fails a model call
            log.warning("live delta of turn %s dropped: %s", delta.turn_id, exc)

    def _publish(self, delta: TurnDelta) -> None:
        turn_id = validate_turn_id(delta.turn_id)  # a file name: never a path
        main, older = self._paths(turn_id)
        state = self._writing.get(turn_id)
        if state is None or state.model_call_index != delta.model_call_index:
            # A new call (or a process that did not write the old spool): start afresh.
            self._prepare()
            older.unlink(missing_ok=True)
            main.unlink(missing_ok=True)
            state = self._writing[turn_id] = _Writing(delta.model_call_index, 0, 0)
        elif state.size >= self._segment_bytes:
            os.replace(main, older)
            state.size = 0
        state.seq += 1
        line = orjson.dumps({"seq": state.seq, "delta": delta.to_wire()}) + b"\n"
        if state.size == 0:
            line = _header() + line
        fd = os.open(main, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)  # one write per line: a reader never sees half of one
        finally:
            os.close(fd)
        state.size += len(line)

    def finish(self, turn_id: str, model_call_index: int) -> None:
        state = self._writing.get(turn_id)
        if state is None or state.model_call_index != model_call_index:
            return
        del self._writing[turn_id]
        for path in self._paths(turn_id):
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("could not drop the live spool %s: %s", path, exc)

    def _prepare(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        if self._pruned:
            return
        self._pruned = True
        cutoff = time.time() - STALE_AFTER
        for path in self._dir.glob("*.deltas*"):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
            except OSError:
                pass  # another process pruned it, or it is in use: either way fine


@dataclass(frozen=True)
class SpooledDelta:
    seq: int
    delta: TurnDelta

    @property
    def position(self) -> tuple[int, int]:
        """Where this delta sits in its turn's live stream: (model call, seq)."""
        return (self.delta.model_call_index, self.seq)


class DeltaReader(Protocol):
    """Where a watcher reads a turn's live deltas: each after the last read, in order."""

    blocking: bool
    """``read`` does network I/O: call it from a thread."""

    def read(self) -> list[SpooledDelta]: ...


class DeltaSpoolReader:
    """The reading side: every delta spooled for one turn after a position, once, in order."""

    blocking = False

    def __init__(self, directory: Path, turn_id: str, after: tuple[int, int] = (-1, 0)) -> None:
        validate_turn_id(turn_id)
        self._main = directory / f"{turn_id}.deltas"
        self._older = self._main.with_name(self._main.name + ".1")
        self._after = after
        self._segment: bytes | None = None
        self._offset = 0

    def read(self) -> list[SpooledDelta]:
        """What was spooled since the last read (or ``after``), ordered by position."""
        found: list[SpooledDelta] = []
        data = _read(self._main)
        segment = _segment_of(data)
        if segment is None or segment != self._segment:
            # Rotated, started afresh or gone: finish the segment we were in
            # if it is ``.1`` now; a reader new to this segment reads ``.1`` whole.
            older = _read(self._older)
            if self._segment is None or _segment_of(older) == self._segment:
                found += _lines(older, self._offset if self._segment is not None else 0)[0]
            self._segment, self._offset = segment, 0
        if segment is not None:
            lines, self._offset = _lines(data, self._offset)
            found += lines
        fresh = sorted((d for d in found if d.position > self._after), key=lambda d: d.position)
        if fresh:
            self._after = fresh[-1].position
        return fresh


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()  # a segment is small (``SEGMENT_BYTES``)
    except FileNotFoundError:
        return b""


def _segment_of(data: bytes) -> bytes | None:
    end = data.find(b"\n")
    return data[:end] if end > 0 else None


def _lines(data: bytes, offset: int) -> tuple[list[SpooledDelta], int]:
    """The complete delta lines of ``data`` after byte ``offset`` (past the header), and the new offset."""
    if offset == 0:
        offset = data.find(b"\n") + 1
        if offset == 0:
            return [], 0
    end = data.rfind(b"\n") + 1  # a line still being written is read next time
    out: list[SpooledDelta] = []
    for raw in data[offset:end].splitlines():
        try:
            obj = orjson.loads(raw)
            delta = _delta_adapter.validate_python(obj["delta"], by_alias=True, by_name=False)
            out.append(SpooledDelta(int(obj["seq"]), delta))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, ValidationError):
            log.warning("skipped a malformed line in a live spool")
    return out, max(end, offset)


__all__ = ["DeltaSpool", "DeltaSpoolReader", "SpooledDelta", "spool_dir"]
