"""Turn repositories: one append-only JSONL file per turn (spec §5, DESIGN §3).

Theory of operation
-------------------
A turn log is a byte string of complete lines, one event per line, the first
a ``turn_created``. Both implementations keep exactly those bytes (a file
under ``work_dir/storage/turns/YYYY/MM/DD/``, or a buffer in memory) and
share everything above the bytes: serialization, strict parsing, the reducer
gate, idempotent retries and locking. So the in-memory repository exercises
the same code paths as the file one.

Reading validates every line: ``orjson.loads`` (strict JSON, no NaN), then
``parse_event``, then the line's ``turnId``, then the reducer, in one pass, so
an error names the first offending line. A line that ``orjson.dumps`` does
not reproduce byte for byte (not written by this project) is parsed once
more to make sure it means one thing to every reader: no repeated key, no
integer past 64 bits (``_two_meanings``). A file that is empty, that ends in a
line without its newline (a torn write), or that has any bad line is
corrupt. Nothing is truncated, skipped or repaired.

Appending serializes each event as ``orjson.dumps(event.to_wire()) + b"\\n"``
and parses the line back, so a value that would not read back the same (NaN,
bytes, a non-string key) is refused before anything is written. It then folds
the batch into the reducer of the current log (the gate, §4.5); one illegal
event rejects the whole batch. If every event passes, the batch is written with
a single ``os.write`` on an ``O_APPEND`` descriptor.

Writers are serialized per turn twice over: an in-process re-entrant lock
(``with_lock``) and ``fcntl.flock`` on the file, because append activities may
run in several worker processes. Readers take a shared ``flock``, so they never
see half of a batch.

To keep an append from re-reading a long log, the repository caches, per turn,
the reducer of the prefix it last saw, with that prefix's byte size and the
file's identity (device, inode). Under the write lock it only parses bytes
added since then, by anyone. Files are append-only, so a prefix that still
has the same identity and at most the current size is unchanged. A reducer is
taken out of the cache while it is in use and only put back after a
successful append. One that saw a rejected batch is dropped, which is why the
gate needs no ``copy()``.

``known_offset`` makes retries idempotent (DESIGN §3). The caller names the
line count it last saw; a file shorter than that raises
``AppendConflictError``. It is a lower bound, since running tools append
concurrently. A retry is recognised if the batch already follows the
offset anywhere, comparing every field *except* ``ts``: a workflow task that
is replayed after a crash (its local activity wrote, the task never
completed) stamps the same decision with a later ``workflow.now()``. The
caller keeps the offset at the file length it last saw, so every line after it
came from a concurrent tool or from an earlier attempt of this very batch;
an equal event the workflow wrote before (a repeated progress) lies before
the offset and is never mistaken for it. ``append_once`` returns the lines as
they are on file, so the caller folds the first attempt's timestamps.

Staged values (the claim check of large inputs, ``turncore.inputs``) are
kept beside the logs, per turn and by content: ``stage`` stores bytes under
their SHA-256 digest, ``fetch_staged`` returns them only if they still hash
to it. Files: ``work_dir/storage/staged/YYYY/MM/DD/<turnId>/sha256-<hex>``,
written to a temporary file, flushed and renamed into place, so a reader
finds all of a value or none of it; staging the same bytes again rewrites
nothing. Staged values are kept after use (docs/file-format.md says why).

POSIX only (``fcntl``).
"""

from __future__ import annotations

import errno
import fcntl
import gc
import io
import itertools
import os
import re
import secrets
import stat
import threading
import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol, get_args

import orjson
from pydantic import BaseModel, ValidationError

from turncore.errors import (
    AppendConflictError,
    CorruptTurnError,
    InfrastructureError,
    InputTooLargeError,
    InvalidInputError,
    InvalidTurnIdError,
    StagedValueError,
    TurnExistsError,
    TurnNotFoundError,
)
from turncore.events import (
    EVENT_TYPES,
    MAX_STAGED_BYTES,
    SCHEMA_VERSION,
    STAGED_DIGEST_PATTERN,
    TRUSTED_EVENT_VALIDATORS,
    StagedValue,
    TurnCreated,
    TurnEvent,
    parse_event,
)
from turncore.ids import is_turn_id, turn_path, validate_turn_id
from turncore.inputs import staged_digest
from turncore.jsonvalue import MAX_JSON_DEPTH
from turncore.reducer import TurnReducer

__all__ = [
    "AppendOutcome",
    "FileTurnRepository",
    "InMemoryTurnRepository",
    "JsonlRepository",
    "LockTable",
    "LogWriter",
    "RepairRefusedError",
    "RemovedTail",
    "RepairReport",
    "TurnRepository",
    "decode_log",
    "read_path",
    "repair_torn_tail",
    "validate_log",
]

_EVENT_CLASSES: tuple[type[BaseModel], ...] = get_args(get_args(TurnEvent)[0])

TAIL_CACHE_SIZE = 64
"""How many turns' reducers a repository keeps warm for appends."""


class TurnRepository(Protocol):
    """The loop-facing storage contract (spec §5.3), synchronous."""

    def create(self, event: TurnCreated) -> None:
        """Write a new turn's first line; ``TurnExistsError`` if the turn already exists."""
        ...

    def read(self, turn_id: str) -> list[TurnEvent]:
        """Every event of the turn, each line validated and the whole log reduced.

        ``TurnNotFoundError`` if there is no such turn; ``CorruptTurnError``
        naming the first offending line otherwise.
        """
        ...

    def read_after(self, turn_id: str, offset: int) -> list[TurnEvent]:
        """The events after line ``offset``, for followers (each line validated)."""
        ...

    def reduced(self, turn_id: str) -> TurnReducer:
        """``TurnReducer.of(read(turn_id))``, reading only what was appended since
        this process last reduced the turn; the caller's own copy."""
        ...

    def append(
        self,
        turn_id: str,
        events: Sequence[TurnEvent],
        *,
        known_offset: int | None = None,
    ) -> int:
        """Append ``events`` as one whole batch or not at all; return the new line count."""
        ...

    def append_once(
        self, turn_id: str, events: Sequence[TurnEvent], *, known_offset: int
    ) -> AppendOutcome:
        """``append`` with ``known_offset``, saying whether an earlier attempt had landed."""
        ...

    def with_lock(self, turn_id: str) -> AbstractContextManager[None]:
        """Exclude other threads of this process from the turn (re-entrant)."""
        ...

    def exists(self, turn_id: str) -> bool: ...

    def line_count(self, turn_id: str) -> int:
        """The number of complete lines in the turn's log (not validated)."""
        ...

    def stage(self, turn_id: str, data: bytes) -> StagedValue:
        """Keep ``data`` for the turn under its digest (idempotent); return the reference.

        ``TurnNotFoundError`` if there is no such turn; ``InputTooLargeError``
        past ``MAX_STAGED_BYTES``.
        """
        ...

    def fetch_staged(self, turn_id: str, ref: StagedValue) -> bytes:
        """The bytes staged for the turn under ``ref``; ``StagedValueError`` if they are
        missing or no longer match its digest and size."""
        ...


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """What ``append_once`` did."""

    lines: int
    """The file's line count afterwards."""
    end: int
    """The line the batch ends at. After a landed earlier attempt that may be
    before the file's end: later lines are other writers' or later batches'."""
    landed: list[TurnEvent] | None
    """None if the batch was written now; else the batch as an earlier attempt
    wrote it (equal but for ``ts``), and nothing was written."""


# ---------------------------------------------------------------- lines


def _shorten(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_JSON_KINDS = {dict: "object", list: "array", str: "string", int: "number", float: "number"}


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _wire_location(obj: Any, loc: Sequence[int | str], missing: bool) -> str:
    """Where in the line an error is, as its keys and indexes.

    pydantic's locations also name the union branches it tried: ``str`` or
    ``list[…]`` for a ``str | list`` field, a tag such as ``image`` or ``ref``.
    None of those is in the line, so the walk along the decoded object keeps
    only the steps that are (and, for a missing field, its name).
    """
    steps: list[str] = []
    here = obj
    for i, step in enumerate(loc):
        if isinstance(here, list) and isinstance(step, int) and 0 <= step < len(here):
            here = here[step]
        elif isinstance(here, dict) and isinstance(step, str) and step in here:
            here = here[step]
        elif not (missing and i == len(loc) - 1):
            continue  # a branch label, not a step into the line
        steps.append(str(step))
    return ".".join(steps) or "(event)"


def _explain(obj: Any, exc: ValidationError) -> str:
    """A one-line reason why a decoded JSON value is not a valid turn event."""
    if not isinstance(obj, dict):
        return f"the line is a JSON {_json_kind(obj)}, not an event object"
    kind = obj.get("type")
    if kind is None:
        return "the line has no event type"
    if kind not in EVENT_TYPES:
        return f"unknown event type {_shorten(kind)}"
    version = obj.get("schemaVersion")
    if kind == "turn_created" and (type(version) is not int or version != SCHEMA_VERSION):
        return (
            f"unsupported schemaVersion {_shorten(version)}; "
            f"this runtime reads version {SCHEMA_VERSION}"
        )
    problems = exc.errors(include_url=False)
    # A union reports one error per branch; the deepest is the branch the line
    # took (a list's bad part, not "content should be a string").
    first = max(problems, key=lambda p: len(p["loc"]))
    where = _wire_location(obj, first["loc"][1:], first["type"] == "missing")
    if first["type"] == "string_pattern_mismatch" and where.endswith("ts"):
        message = (
            f"{_shorten(first['input'])} is not an ISO-8601 UTC instant like "
            "2025-11-11T04:36:29.000Z (a real date, hours, minutes and seconds with an "
            "optional fraction, then Z or +00:00)"
        )
    elif first["type"] == "string_pattern_mismatch":
        message = f"{_shorten(first['input'])} does not have the form this field needs"
    else:
        message = first["msg"]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"invalid {kind} event: {where}: {message}{more}"


def _not_json(raw: bytes, exc: orjson.JSONDecodeError) -> str:
    """Why the line is not JSON, with a column in the line (orjson counts the line
    it was given as "line 1", whatever its number in the file)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return (
            f"the line is not valid JSON: byte 0x{raw[bad.start]:02x} at column "
            f"{bad.start + 1} is not UTF-8"
        )
    return f"the line is not valid JSON: {exc.msg} at column {exc.colno}"


_INT_RANGE = (-(2**63), 2**64 - 1)
"""The integers orjson reads exactly; it reads any other integer as a float."""


class _TwoMeanings(ValueError):
    """A line that other JSON readers may read as different values (``_two_meanings``)."""


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _TwoMeanings(
                f"the line repeats the key {_shorten(key)} in one object, and JSON readers "
                "differ on which value counts (RFC 8259 §4); write each key once"
            )
        seen.add(key)
    return dict(pairs)


def _exact_integer(text: str) -> int:
    digits = len(text.lstrip("-"))
    # No JSON integer has leading zeros, so more than 20 digits is past 2**64.
    if digits > 20 or not _INT_RANGE[0] <= int(text) <= _INT_RANGE[1]:
        shown = text if digits <= 40 else f"of {digits} digits"
        raise _TwoMeanings(
            f"the integer {shown} does not fit in 64 bits, so a JSON reader would round it "
            "to a float; write it as a string"
        )
    return int(text)


def _two_meanings(raw: bytes) -> str | None:
    """Why a line orjson parsed could mean something else to another reader, or None.

    A file must read the same in every implementation of the spec (DESIGN
    §1), so a line may not repeat a key within an object (readers take the
    first, the last, or refuse) or hold an integer past 64 bits (orjson, like
    JavaScript, quietly reads it as a float). orjson reports neither, so the
    line is parsed again by the standard library, which sees both. Only lines
    that ``orjson.dumps`` does not reproduce byte for byte come here: every
    line this project writes does, so the check costs the hot path one dumps.
    """
    import json

    try:
        json.loads(raw, object_pairs_hook=_no_repeated_keys, parse_int=_exact_integer)
    except _TwoMeanings as exc:
        return str(exc)
    return None


MAX_LINE_DEPTH = MAX_JSON_DEPTH + 16
"""The most levels of arrays and objects a line may nest: its values' limit plus
room for the event's own levels above them (a context message's tool result
sits eight levels down). Every line this project writes fits."""


def _check_depth(obj: Any, raw: bytes, where: str, line: int) -> None:
    """Raise if the line nests deeper than ``MAX_LINE_DEPTH``: a value that deep
    could not cross into the workflow (see ``turncore.jsonvalue``)."""
    # Each level takes a bracket, so a line with few brackets (every line this
    # project writes but those with long lists) is shallow without a walk.
    if len(raw) <= 2 * MAX_LINE_DEPTH or raw.count(b"[") + raw.count(b"{") <= MAX_LINE_DEPTH:
        return
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_LINE_DEPTH:
            raise CorruptTurnError(
                f"the line nests arrays and objects deeper than {MAX_LINE_DEPTH} levels; "
                f"a value may nest at most {MAX_JSON_DEPTH} (flatten it, or hold the deep "
                "part as a string)",
                path=where,
                line=line,
            )
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))


def _check_one_meaning(obj: Any, raw: bytes, where: str, line: int) -> None:
    """Raise unless the line ``raw`` (which orjson parsed as ``obj``) means one thing."""
    # ``_check_depth`` came first: the line is shallow enough for both parsers.
    if orjson.dumps(obj) != raw:
        why = _two_meanings(raw)
        if why is not None:
            raise CorruptTurnError(why, path=where, line=line)


def _decode_line(raw: bytes, where: str, line: int) -> TurnEvent:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptTurnError(_not_json(raw, exc), path=where, line=line) from None
    _check_depth(obj, raw, where, line)
    _check_one_meaning(obj, raw, where, line)
    try:
        return parse_event(obj, trusted_json=True)
    except ValidationError as exc:
        raise CorruptTurnError(_explain(obj, exc), path=where, line=line) from None


def _fold(reducer: TurnReducer, event: TurnEvent, where: str, line: int) -> None:
    """``reducer.apply(event)``, with a violation located at ``where``:``line``."""
    try:
        reducer.apply(event)
    except CorruptTurnError as exc:
        raise CorruptTurnError(exc.rule, path=where, line=line) from None


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk decode, then file what it
    made among the old objects.

    Decoding a long log creates hundreds of thousands of long-lived objects
    that form no cycles (events, their parts, the reducer's records).
    Reference counting frees them; the collector would only walk them, over
    and over. Two walks are avoided:

    - during the decode, every young collection (each few hundred
      allocations) and the full ones it would trigger: the collector is
      off, as ``gc.disable`` documents for code that makes no cycles;
    - at the end, the first young collection after ``gc.enable``, which
      would walk everything the decode made (at 100k events, a third of the
      read's time, and more per event the more there is: it is the step that
      made reading superlinear). ``gc.freeze`` then ``gc.unfreeze`` moves the
      tracked objects into the oldest generation instead: two list splices,
      no walk. Full collections still examine them as they do every
      long-lived object, so a cycle among them (none are made here) would
      still be found.

    Why a library may do this. Nothing is left off: only the thread that found
    the collector running pauses it and it switches it back on in
    ``finally``; a thread that finds it paused decodes without touching it.
    The splice also ages the caller's own young objects: garbage cycles among
    them wait for the next full collection instead of the next young one
    (later, never lost). It is skipped when the application has frozen
    objects itself (``gc.get_freeze_count()``, e.g. a server that freezes
    before forking), since unfreezing would undo that; and from then on for
    the life of the process (``_AppFreezes``).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if not _AppFreezes.seen:
            if gc.get_freeze_count():
                _AppFreezes.seen = True
            else:
                gc.freeze()
                gc.unfreeze()
        gc.enable()


class _AppFreezes:
    """Whether this process's application was seen to freeze objects (``gc.freeze``).

    Such an application does so once, at start-up, and counting its frozen
    objects walks all of them, so after the first sighting reads neither count
    nor splice (``_collector_paused``)."""

    seen = False


class _BoundValidators(dict[str, Callable[[Any], Any]]):
    """Each fast validator's bound ``validate_python``: one lookup per line, not two.

    Filled as lines need them (``TRUSTED_EVENT_VALIDATORS`` builds each on first
    use); a ``KeyError`` sends the line to ``_decode_line``."""

    def __missing__(self, kind: str) -> Callable[[Any], Any]:
        bound = self[kind] = TRUSTED_EVENT_VALIDATORS[kind].validate_python
        return bound


_VALIDATE = _BoundValidators()

_FIELDS_SET = BaseModel.__dict__["__pydantic_fields_set__"]
_ALL_FIELDS: dict[type[BaseModel], set[str]] = {c: set(c.model_fields) for c in _EVENT_CLASSES}
_FIELD_COUNTS: dict[type[BaseModel], int] = {c: len(f) for c, f in _ALL_FIELDS.items()}
"""Every event a read keeps shares one ``__pydantic_fields_set__`` per class
when all its fields were on the line (most events): pydantic makes a set per
instance, and at five or more names that set is 728 bytes, a third of what a
read event keeps in memory. A subset of the fields with as many names is all
of them, so comparing sizes suffices. Shared as the reducer shares its
records' (``turncore.reducer._record``): events are frozen, so pydantic never
changes the set, and ``model_copy`` copies it before adding to it."""


def decode_log(
    data: bytes,
    where: str,
    turn_id: str | None,
    *,
    first_line: int = 1,
    reducer: TurnReducer | None = None,
) -> tuple[list[TurnEvent], TurnReducer, str]:
    """Validate and reduce ``data``, the lines from ``first_line`` on.

    From line 1, ``turn_id`` None means "whatever the first line says" (the
    id must still be well-formed). Continuing (``first_line`` > 1) needs the
    reducer of the lines before and the turn id. Returns the events, the
    reducer after them and the turn id.
    """
    # Lines are taken one at a time, each with its newline, from a stream over
    # ``data`` (no copy): a list of them all would double the read's transient
    # memory, which a long log pays in page faults and cache misses.
    end = data.rfind(b"\n") + 1  # what follows the last newline is a torn write
    lines = io.BytesIO(data if end == len(data) else data[:end])
    events: list[TurnEvent] = []
    if first_line == 1:
        if not data:
            raise CorruptTurnError(
                "the file is empty; its first line must be turn_created", path=where, line=1
            )
        if end:
            first = _decode_line(lines.readline()[:-1], where, 1)
            if not isinstance(first, TurnCreated):
                raise CorruptTurnError(
                    f"the first line must be turn_created, not {first.type}", path=where, line=1
                )
            if turn_id is None:
                try:
                    turn_id = validate_turn_id(first.turn_id)
                except InvalidTurnIdError as exc:
                    raise CorruptTurnError(str(exc), path=where, line=1) from None
            elif first.turn_id != turn_id:
                raise CorruptTurnError(
                    f"turnId {_shorten(first.turn_id)} does not match this file's turn {turn_id}",
                    path=where,
                    line=1,
                )
            reducer = TurnReducer()
            _fold(reducer, first, where, 1)
            events.append(first)
        else:
            raise CorruptTurnError(
                "the only line has no trailing newline (a torn write)", path=where, line=1
            )
    if reducer is None or turn_id is None:
        raise AssertionError("continuing a log needs its reducer and turn id")

    # The hot loop: one pass, so the first offending line is the one reported.
    # ``_decode_line`` and ``_fold`` are inlined here; this loop runs once per
    # line of every read. The fast path is ``parse_event(obj, trusted_json=True)``
    # without its checks of ``obj``: anything unusual (not JSON, not an object,
    # no or an unknown type, invalid) takes ``_decode_line``, which raises the
    # precise error (or, should the fast path ever be unavailable, decodes).
    # Each ``raw`` ends in its newline: orjson reads it as trailing whitespace,
    # and ``dumps`` appends one to compare; the slow paths get the line without it.
    apply, add = reducer.apply, events.append
    loads, dumps, validate = orjson.loads, orjson.dumps, _VALIDATE
    newline = orjson.OPT_APPEND_NEWLINE
    fields_set, share_fields_set = _FIELDS_SET.__get__, _FIELDS_SET.__set__
    all_fields, field_counts = _ALL_FIELDS, _FIELD_COUNTS
    depth_floor = 2 * MAX_LINE_DEPTH  # a shorter line cannot nest too deep
    with _collector_paused():
        for line, raw in enumerate(lines, start=first_line + len(events)):
            try:
                obj = loads(raw)
                event: TurnEvent = validate[obj["type"]](obj)
                if len(raw) > depth_floor:
                    _check_depth(obj, raw, where, line)
                if dumps(obj, option=newline) != raw:  # not as this project writes it
                    _check_one_meaning(obj, raw[:-1], where, line)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValidationError):
                event = _decode_line(raw[:-1], where, line)
            # ``apply`` checks the line's turnId against line 1's (already
            # checked against this file's turn), so the loop does not repeat it.
            try:
                apply(event)
            except CorruptTurnError as exc:
                raise CorruptTurnError(exc.rule, path=where, line=line) from None
            kind = type(event)
            if len(fields_set(event)) == field_counts[kind]:  # every field: share the set
                share_fields_set(event, all_fields[kind])
            add(event)
    if end < len(data):
        raise CorruptTurnError(
            "the final line has no trailing newline (a torn write; `turns repair` moves it aside)",
            path=where,
            line=first_line + len(events),
        )
    return events, reducer, turn_id


def _encode(event: TurnEvent, where: str, line: int) -> tuple[bytes, TurnEvent]:
    """The event's line (with its newline) and the event as a reader will parse it back."""
    if not isinstance(event, _EVENT_CLASSES):
        raise CorruptTurnError(f"{type(event).__name__} is not a turn event", path=where, line=line)
    try:
        raw = orjson.dumps(event.to_wire())
    except (TypeError, ValueError) as exc:  # orjson.JSONEncodeError, PydanticSerializationError
        raise CorruptTurnError(
            f"{event.type} event is not JSON-serializable: {exc}", path=where, line=line
        ) from None
    back = _decode_line(raw, where, line)
    if back != event:
        raise CorruptTurnError(
            f"{event.type} event does not read back as written "
            "(a NaN, infinity, bytes or non-string key became something else)",
            path=where,
            line=line,
        )
    return raw + b"\n", back


def _untimed(event: TurnEvent) -> dict[str, Any]:
    """The event's wire form without its timestamp: what a retried decision keeps."""
    wire = event.to_wire()
    wire.pop("ts", None)
    return wire


# ---------------------------------------------------------------- locks and cache


class LockTable:
    """One re-entrant lock per key, alive while anyone holds or waits on it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: weakref.WeakValueDictionary[Hashable, Any] = weakref.WeakValueDictionary()

    @contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        with self._guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = threading.RLock()
                self._locks[key] = lock
        with lock:
            yield


# Files are shared by every FileTurnRepository in the process, so their
# in-process locks are too (keyed by absolute path).
_FILE_LOCKS = LockTable()


@dataclass(slots=True)
class _Tail:
    """The reduced prefix of a log: ``size`` bytes, ``lines`` lines, of storage ``identity``."""

    identity: Hashable
    size: int
    lines: int
    reducer: TurnReducer


class LogWriter(ABC):
    """Exclusive access to one turn's bytes for the length of an append."""

    identity: Hashable

    @abstractmethod
    def size(self) -> int: ...

    @abstractmethod
    def read_from(self, start: int) -> bytes: ...

    @abstractmethod
    def write(self, data: bytes) -> None: ...


# ---------------------------------------------------------------- shared logic


class JsonlRepository(ABC):
    """Every repository's common base (file, memory, PostgreSQL): everything
    above the bytes; subclasses store them."""

    def __init__(self) -> None:
        self._tails: OrderedDict[str, _Tail] = OrderedDict()
        self._tails_guard = threading.Lock()
        # Followers' positions: turn id -> (identity, line offset, byte offset),
        # so a follower polling read_after reads only what was appended since.
        self._follow: OrderedDict[str, tuple[Hashable, int, int]] = OrderedDict()

    # -- storage hooks -------------------------------------------------------

    @abstractmethod
    def _where(self, turn_id: str) -> str:
        """How errors name the turn's storage (a path for files)."""

    @abstractmethod
    def _lock(self, turn_id: str) -> AbstractContextManager[None]: ...

    @abstractmethod
    def _store_new(self, turn_id: str, data: bytes) -> None:
        """Store ``data`` as a new turn atomically; TurnExistsError if it exists."""

    @abstractmethod
    def _load(self, turn_id: str) -> tuple[Hashable, bytes]:
        """The identity and bytes of the turn, read consistently; TurnNotFoundError if absent."""

    def _load_from(self, turn_id: str, start: int) -> tuple[Hashable, bytes]:
        """The identity and the bytes from byte ``start`` on (subclasses may avoid
        reading the prefix)."""
        identity, data = self._load(turn_id)
        return identity, data[start:]

    def _sized_from(self, turn_id: str, start: int) -> tuple[Hashable, int, bytes]:
        """``_load_from`` and the size of the whole log, so a reader can tell a log
        that shrank (rewritten in place) from one that did not grow."""
        identity, data = self._load_from(turn_id, start)
        return identity, start + len(data), data

    @abstractmethod
    def _writer(self, turn_id: str) -> AbstractContextManager[LogWriter]: ...

    @abstractmethod
    def _has(self, turn_id: str) -> bool: ...

    @abstractmethod
    def _ids(self) -> list[str]: ...

    # -- the contract --------------------------------------------------------

    def create(self, event: TurnCreated) -> None:
        """Write the turn's first line; ``TurnExistsError`` if it exists already."""
        if not isinstance(event, TurnCreated):
            kind = getattr(event, "type", type(event).__name__)
            raise CorruptTurnError(f"a turn starts with turn_created, not {kind}", line=1)
        turn_id = validate_turn_id(event.turn_id)
        where = self._where(turn_id)
        raw, parsed = _encode(event, where, 1)
        _fold(TurnReducer(), parsed, where, 1)
        with self._lock(turn_id):
            self._store_new(turn_id, raw)

    def read(self, turn_id: str) -> list[TurnEvent]:
        """Every event, each line validated strictly and the whole log reduced."""
        validate_turn_id(turn_id)
        identity, data = self._load(turn_id)
        events, reducer, _ = decode_log(data, self._where(turn_id), turn_id)
        known = self._take_tail(turn_id)
        if known is not None and known.identity == identity and known.size <= len(data):
            # Keep the cached prefix (``reduced`` catches it up): its records are
            # the ones the states built so far share (``TurnReducer.state``).
            self._put_tail(turn_id, known)
        else:
            self._put_tail(turn_id, _Tail(identity, len(data), len(events), reducer))
        return events

    def reduced(self, turn_id: str) -> TurnReducer:
        """The whole log validated and reduced, as ``TurnReducer.of(read(turn_id))``.

        Only the lines appended since this process last reduced the turn (a
        read, an append or this) are read and validated: the reduced prefix is
        cached by storage identity, byte size and line count, and shared with
        the append gate. Activities call this once per model call and per tool
        call, so a long turn's iterations cost the same at call 500 as at call
        50. The caller gets its own copy (``TurnReducer.copy``: the settled
        records are shared, never changed).
        """
        validate_turn_id(turn_id)
        where = self._where(turn_id)
        tail = self._take_tail(turn_id)
        data = b""
        if tail is not None:
            identity, size, data = self._sized_from(turn_id, tail.size)
            if identity != tail.identity or size < tail.size:
                tail = None  # another file now, or rewritten: start over
        if tail is None:
            identity, data = self._load(turn_id)
            events, reducer, _ = decode_log(data, where, turn_id)
            tail = _Tail(identity, len(data), len(events), reducer)
        elif data:
            # On error the half-advanced reducer is simply not put back.
            events, _, _ = decode_log(
                data, where, turn_id, first_line=tail.lines + 1, reducer=tail.reducer
            )
            tail.size += len(data)
            tail.lines += len(events)
        # The cached reducer makes the copies of settled records that every
        # state built from it shares (``TurnReducer.state``); the caller's copy
        # builds its own state on those.
        _ = tail.reducer.state
        self._put_tail(turn_id, tail)
        return tail.reducer.copy(fresh_state=True)

    def read_after(self, turn_id: str, offset: int) -> list[TurnEvent]:
        """The complete lines after line ``offset``, each validated (DESIGN §7).

        Followers call this repeatedly; the whole log was validated by every
        writer's gate, so only the new lines are parsed. Offsets are 1-based
        line numbers as in spec §17.1: ``offset`` lines are skipped.
        """
        validate_turn_id(turn_id)
        if offset < 0:
            raise ValueError(f"offset must not be negative, got {offset}")
        with self._tails_guard:
            known = self._follow.get(turn_id)
        if known is not None and known[1] == offset:
            identity, data = self._load_from(turn_id, known[2])
            if identity != known[0]:
                known = None  # another file now: start over
        if known is None or known[1] != offset:
            identity, data = self._load(turn_id)
            start = 0
            for line in range(offset):
                nl = data.find(b"\n", start)
                if nl < 0:
                    raise ValueError(f"offset {offset} is past the end: the log has {line} lines")
                start = nl + 1
            data = data[start:]
            known = (identity, offset, start)
        end = data.rfind(b"\n") + 1  # a final piece without its newline is not a line yet
        lines = data[:end].split(b"\n")[:-1]
        where = self._where(turn_id)
        events = [_decode_line(raw, where, offset + 1 + i) for i, raw in enumerate(lines)]
        with self._tails_guard:
            self._follow[turn_id] = (identity, offset + len(events), known[2] + end)
            self._follow.move_to_end(turn_id)
            while len(self._follow) > TAIL_CACHE_SIZE:
                self._follow.popitem(last=False)
        return events

    def append(
        self,
        turn_id: str,
        events: Sequence[TurnEvent],
        *,
        known_offset: int | None = None,
    ) -> int:
        """Append ``events`` as one batch, or nothing at all; return the new line count.

        Every event is serialized, parsed back and folded into the reducer of
        the current log before anything is written. An event that cannot be
        written or would be illegal raises ``CorruptTurnError`` with the line
        it would have had.

        ``known_offset`` makes a retry idempotent (DESIGN §3). It is a lower
        bound, for writers that share the file with concurrent appenders such
        as running tools: if the batch already follows that offset anywhere
        (equal in every field but ``ts``), the earlier attempt landed and
        nothing is written; otherwise the batch is appended. A file shorter
        than the known offset raises ``AppendConflictError``.
        """
        return self._append(turn_id, events, known_offset).lines

    def append_once(
        self, turn_id: str, events: Sequence[TurnEvent], *, known_offset: int
    ) -> AppendOutcome:
        """``append`` with ``known_offset``; the outcome names a batch that had landed."""
        return self._append(turn_id, events, known_offset)

    def _append(
        self,
        turn_id: str,
        events: Sequence[TurnEvent],
        known_offset: int | None,
    ) -> AppendOutcome:
        validate_turn_id(turn_id)
        where = self._where(turn_id)
        batch = list(events)
        if known_offset is not None and known_offset < 0:
            raise ValueError(f"known_offset must not be negative, got {known_offset}")
        with self._lock(turn_id), self._writer(turn_id) as writer:
            tail = self._catch_up(turn_id, writer, where)
            count = tail.lines
            if known_offset is not None and batch:
                if count < known_offset:
                    self._put_tail(turn_id, tail)
                    raise AppendConflictError(
                        f"{where}: the caller knew {known_offset} lines but the file has only {count}"
                    )
                landed = (
                    self._landed(writer, where, batch, known_offset, count)
                    if count > known_offset
                    else None
                )
                if landed is not None:
                    self._put_tail(turn_id, tail)
                    return AppendOutcome(count, landed[0], landed[1])
            if not batch:
                self._put_tail(turn_id, tail)
                return AppendOutcome(count, count, None)
            lines: list[bytes] = []
            for i, event in enumerate(batch):
                raw, parsed = _encode(event, where, count + 1 + i)
                if parsed.turn_id != turn_id:
                    raise CorruptTurnError(
                        f"{parsed.type} has turnId {_shorten(parsed.turn_id)}, not {turn_id}",
                        path=where,
                        line=count + 1 + i,
                    )
                # If this raises, the reducer holds the batch's earlier events,
                # so it is not put back in the cache.
                _fold(tail.reducer, parsed, where, count + 1 + i)
                lines.append(raw)
            data = b"".join(lines)
            writer.write(data)
            tail.size += len(data)
            tail.lines += len(batch)
            # Only a file that is exactly prefix + batch is known; a writer that
            # ignores the lock could have slipped in, so then forget it all.
            if writer.size() == tail.size:
                self._put_tail(turn_id, tail)
            return AppendOutcome(tail.lines, tail.lines, None)

    def with_lock(self, turn_id: str) -> AbstractContextManager[None]:
        """In-process exclusion per turn (spec §5.3).

        Re-entrant: the holding thread may call ``append`` (which takes the
        same lock) without deadlocking. Other threads wait. It does not exclude
        other processes; ``append`` takes the file lock itself.
        """
        validate_turn_id(turn_id)
        return self._lock(turn_id)

    def exists(self, turn_id: str) -> bool:
        return self._has(validate_turn_id(turn_id))

    def location(self, turn_id: str) -> str:
        """How errors name the turn's log: its path, ``postgres:<turnId>``, ``memory:<turnId>``."""
        return self._where(validate_turn_id(turn_id))

    def raw(self, turn_id: str) -> bytes:
        """The turn's log exactly as stored (``turns log``, ``turns export``); not validated."""
        return self._load(validate_turn_id(turn_id))[1]

    def turn_ids(self) -> list[str]:
        """Every stored turn's id, sorted (ids sort by creation time)."""
        return sorted(self._ids())

    def session_turn_ids(self, session_id: str) -> list[str]:
        """The stored turns whose ``turn_created`` names ``session_id``, sorted.

        Only each turn's first line is read; a turn whose first line is not a JSON
        object is in no session (reading it says what is wrong).
        """
        found = []
        for turn_id, first in self._first_lines(session_id):
            try:
                head = orjson.loads(first)
            except orjson.JSONDecodeError:
                continue
            if isinstance(head, dict) and head.get("sessionId") == session_id:
                found.append(turn_id)
        return sorted(found)

    def _first_lines(self, session_id: str) -> Iterator[tuple[str, bytes]]:
        """Each stored turn's id and first line; a subclass may leave out turns that
        cannot name ``session_id`` and may avoid reading the rest of each log."""
        for turn_id in self._ids():
            try:
                _, data = self._load(turn_id)
            except TurnNotFoundError:
                continue  # removed meanwhile
            yield turn_id, data.split(b"\n", 1)[0]

    def import_log(self, data: bytes, where: str) -> str:
        """Store a whole turn log as a new turn, byte for byte; return its turn id.

        The log is validated first, as a read would (``where`` names it in
        errors), so only a log the runtime can load is imported. An existing
        turn is never replaced (``TurnExistsError``).
        """
        _, _, turn_id = decode_log(data, where, None)
        with self._lock(turn_id):
            self._store_new(turn_id, data)
        return turn_id

    def line_count(self, turn_id: str) -> int:
        """The number of complete lines (newlines) in the log; not validated."""
        validate_turn_id(turn_id)
        _, data = self._load(turn_id)
        return data.count(b"\n")

    # -- internals -----------------------------------------------------------

    # -- staged values (claim check) ------------------------------------------

    @abstractmethod
    def _put_staged(self, turn_id: str, digest: str, data: bytes) -> None:
        """Store ``data`` under ``digest`` for an existing turn, atomically."""

    @abstractmethod
    def _get_staged(self, turn_id: str, digest: str) -> bytes | None:
        """The bytes stored under ``digest`` for the turn, or None."""

    def stage(self, turn_id: str, data: bytes) -> StagedValue:
        validate_turn_id(turn_id)
        if len(data) > MAX_STAGED_BYTES:
            raise InputTooLargeError(
                f"a staged value may be at most {MAX_STAGED_BYTES} bytes, this one is "
                f"{len(data)}: keep the data elsewhere and send a reference to it instead"
            )
        ref = StagedValue(digest=staged_digest(data), size=len(data))
        self._put_staged(turn_id, ref.digest, data)
        return ref

    def fetch_staged(self, turn_id: str, ref: StagedValue) -> bytes:
        validate_turn_id(turn_id)
        data = self._get_staged(turn_id, ref.digest)
        if data is None:
            raise StagedValueError(
                f"turn {turn_id} has no staged value {ref.digest} ({self._where(turn_id)}): "
                "stage it again and resend the input"
            )
        if len(data) != ref.size or staged_digest(data) != ref.digest:
            raise StagedValueError(
                f"the staged value {ref.digest} of turn {turn_id} ({len(data)} bytes, "
                f"{ref.size} expected) does not match its digest: stage it again and resend "
                "the input"
            )
        return data

    def _take_tail(self, turn_id: str) -> _Tail | None:
        with self._tails_guard:
            return self._tails.pop(turn_id, None)

    def _put_tail(self, turn_id: str, tail: _Tail) -> None:
        with self._tails_guard:
            self._tails[turn_id] = tail
            self._tails.move_to_end(turn_id)
            while len(self._tails) > TAIL_CACHE_SIZE:
                self._tails.popitem(last=False)

    def _catch_up(self, turn_id: str, writer: LogWriter, where: str) -> _Tail:
        """The reduced log as it is now, reusing the cached prefix when it is still valid."""
        size = writer.size()
        tail = self._take_tail(turn_id)
        if tail is None or tail.identity != writer.identity or tail.size > size:
            data = writer.read_from(0)
            events, reducer, _ = decode_log(data, where, turn_id)
            return _Tail(writer.identity, len(data), len(events), reducer)
        if tail.size < size:
            data = writer.read_from(tail.size)
            # On error the half-advanced reducer is simply not put back.
            events, _, _ = decode_log(
                data, where, turn_id, first_line=tail.lines + 1, reducer=tail.reducer
            )
            tail.size += len(data)
            tail.lines += len(events)
        return tail

    def _landed(
        self, writer: LogWriter, where: str, batch: list[TurnEvent], known_offset: int, lines: int
    ) -> tuple[int, list[TurnEvent]] | None:
        """Where the batch ends and how it reads on file, if it already follows line
        ``known_offset`` (``ts`` aside); the first such place counts."""
        ours = [_untimed(_encode(e, where, known_offset + 1 + i)[1]) for i, e in enumerate(batch)]
        raw = _last_lines(writer, lines - known_offset)
        width = len(ours)
        for i in range(len(raw) - width + 1):
            # Cheap prefilter on the event type before decoding a window.
            window = raw[i : i + width]
            if all(
                b'"%s"' % o["type"].encode() in line for o, line in zip(ours, window, strict=True)
            ):
                on_file = [
                    _decode_line(line, where, known_offset + 1 + i + j)
                    for j, line in enumerate(window)
                ]
                if [_untimed(e) for e in on_file] == ours:
                    return known_offset + i + width, on_file
        return None


def _last_lines(writer: LogWriter, count: int) -> list[bytes]:
    """The last ``count`` lines of a log of whole lines, read from its end.

    The workflow's known offset trails the file by the lines running tools
    wrote since it last looked, a few at most: reading from the end keeps an
    append's idempotency check O(those lines), not O(file).
    """
    if count <= 0:
        return []
    size = writer.size()
    chunk = 64 * 1024
    while True:
        start = max(0, size - chunk)
        raw = writer.read_from(start).split(b"\n")[:-1]
        if start == 0 or len(raw) > count:  # past the first, possibly partial, piece
            return raw[-count:]
        chunk *= 4


# ---------------------------------------------------------------- files


def _open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading, refusing anything but a regular file.

    Opening a FIFO for reading would block until a writer came (``turns
    validate DIR`` would hang on one named ``*.jsonl``), and a device could
    stream forever; so open without blocking and check what was opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory or device"
        raise OSError(errno.EINVAL, f"not a regular file ({kind})", str(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _read_shared(path: Path) -> tuple[Hashable, bytes]:
    """The file's identity and contents, read under a shared flock (never half a batch)."""
    with _open_regular(path) as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)
        st = os.fstat(f.fileno())
        return (st.st_dev, st.st_ino), f.read()


class _FileWriter(LogWriter):
    def __init__(self, fd: int, where: str) -> None:
        self._fd = fd
        self._where = where
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def read_from(self, start: int) -> bytes:
        chunks: list[bytes] = []
        offset = start
        while True:
            chunk = os.pread(self._fd, 1 << 20, offset)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            offset += len(chunk)

    def write(self, data: bytes) -> None:
        # One write on an O_APPEND descriptor puts the whole batch at the end.
        # A regular file only writes short on a full disk or a signal; then we
        # finish under the same lock, so the lines stay whole if it can be done.
        # If it cannot (ENOSPC, EDQUOT, EIO, a read-only remount), the file is
        # cut back to where the batch began: the batch is all or nothing, and
        # once space returns the next append (`turns recover`) simply goes on.
        start = os.fstat(self._fd).st_size  # under the exclusive lock: the batch's offset
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            written = len(data) - len(view)
            try:
                if written or os.fstat(self._fd).st_size != start:
                    os.ftruncate(self._fd, start)
            except OSError as cut:
                raise InfrastructureError(
                    f"{self._where}: append failed after {written} of {len(data)} bytes "
                    f"({exc}), and cutting it back failed too ({cut}); the file may end in "
                    "a partial line: `turns repair` moves it aside"
                ) from exc
            raise InfrastructureError(
                f"{self._where}: append failed ({exc}); nothing of the batch is kept, so "
                "the turn continues once the cause is fixed (`turns recover`)"
            ) from exc


class FileTurnRepository(JsonlRepository):
    """Turn files under ``work_dir/storage/turns/YYYY/MM/DD/<turnId>.jsonl``."""

    def __init__(self, work_dir: str | os.PathLike[str]) -> None:
        super().__init__()
        self.work_dir = Path(work_dir).absolute()

    def path_for(self, turn_id: str) -> Path:
        """The turn's file path (the id is validated first)."""
        return turn_path(self.work_dir, turn_id)

    def _where(self, turn_id: str) -> str:
        return str(self.path_for(turn_id))

    def _lock(self, turn_id: str) -> AbstractContextManager[None]:
        return _FILE_LOCKS.hold(self._where(turn_id))

    def _missing(self, turn_id: str) -> TurnNotFoundError:
        return TurnNotFoundError(
            f"turn {turn_id} does not exist (no file at {self._where(turn_id)})"
        )

    def _store_new(self, turn_id: str, data: bytes) -> None:
        # Write a private temporary file, then hard-link it into place: the
        # link fails if the turn exists, and a reader never sees the file
        # without its first line, even if this process dies half-way.
        path = self.path_for(turn_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.parent / f".{turn_id}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                try:
                    _FileWriter(fd, str(tmp)).write(data)
                finally:
                    os.close(fd)
                os.link(tmp, path)
            except FileExistsError:
                raise TurnExistsError(f"turn {turn_id} already exists at {path}") from None
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
                    raise
                self._store_new_without_link(turn_id, path, data)
            finally:
                tmp.unlink(missing_ok=True)
        except OSError as exc:
            raise InfrastructureError(f"{path}: could not create the turn file: {exc}") from exc

    def _store_new_without_link(self, turn_id: str, path: Path, data: bytes) -> None:
        """For file systems without hard links: exclusive create, then write under the lock."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            raise TurnExistsError(f"turn {turn_id} already exists at {path}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            _FileWriter(fd, str(path)).write(data)
        finally:
            os.close(fd)

    def _load(self, turn_id: str) -> tuple[Hashable, bytes]:
        path = self.path_for(turn_id)
        try:
            return _read_shared(path)
        except FileNotFoundError:
            raise self._missing(turn_id) from None
        except OSError as exc:
            raise InfrastructureError(f"{path}: could not read the turn file: {exc}") from exc

    def _load_from(self, turn_id: str, start: int) -> tuple[Hashable, bytes]:
        identity, _, data = self._sized_from(turn_id, start)
        return identity, data

    def _sized_from(self, turn_id: str, start: int) -> tuple[Hashable, int, bytes]:
        path = self.path_for(turn_id)
        try:
            with _open_regular(path) as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH)
                st = os.fstat(f.fileno())
                f.seek(start)
                return (st.st_dev, st.st_ino), st.st_size, f.read()
        except FileNotFoundError:
            raise self._missing(turn_id) from None
        except OSError as exc:
            raise InfrastructureError(f"{path}: could not read the turn file: {exc}") from exc

    @contextmanager
    def _writer(self, turn_id: str) -> Iterator[LogWriter]:
        path = self.path_for(turn_id)
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            raise self._missing(turn_id) from None
        except OSError as exc:
            raise InfrastructureError(f"{path}: could not open the turn file: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield _FileWriter(fd, str(path))
        finally:
            os.close(fd)  # also releases the flock

    def staged_path(self, turn_id: str, digest: str) -> Path:
        """``work_dir/storage/staged/YYYY/MM/DD/<turnId>/sha256-<hex>`` (both validated)."""
        if not re.fullmatch(STAGED_DIGEST_PATTERN, digest):
            raise InvalidInputError(
                f"{digest!r} is not a staged digest (sha256: and 64 hex digits)"
            )
        day = self.path_for(turn_id).parent.relative_to(self.work_dir / "storage" / "turns")
        return self.work_dir / "storage" / "staged" / day / turn_id / digest.replace(":", "-")

    def _put_staged(self, turn_id: str, digest: str, data: bytes) -> None:
        if not self._has(turn_id):
            raise self._missing(turn_id)
        path = self.staged_path(turn_id, digest)
        try:
            if self._get_staged(turn_id, digest) == data:
                return  # staged before: content-addressed, so nothing to do
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                try:
                    _FileWriter(fd, str(tmp)).write(data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                # A rename is atomic: readers see the old bytes (or none), then all
                # of the new. It also replaces a corrupt copy left by someone else.
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dir_fd)  # the rename itself survives a crash
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise InfrastructureError(f"{path}: could not stage the value: {exc}") from exc

    def _get_staged(self, turn_id: str, digest: str) -> bytes | None:
        path = self.staged_path(turn_id, digest)
        try:
            with _open_regular(path) as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise InfrastructureError(f"{path}: could not read the staged value: {exc}") from exc

    def _has(self, turn_id: str) -> bool:
        return self.path_for(turn_id).is_file()

    def _ids(self) -> list[str]:
        root = self.work_dir / "storage" / "turns"
        found = (p.name.removesuffix(".jsonl") for p in root.glob("*/*/*/*.jsonl"))
        return [turn_id for turn_id in found if is_turn_id(turn_id)]

    def _first_lines(self, session_id: str) -> Iterator[tuple[str, bytes]]:
        for turn_id in self._ids():
            try:
                with _open_regular(self.path_for(turn_id)) as f:
                    yield turn_id, f.readline().rstrip(b"\n")
            except OSError:
                continue  # removed meanwhile, or not a regular file


def validate_log(data: bytes, where: str, turn_id: str | None = None) -> list[TurnEvent]:
    """Validate a whole turn log held in memory, as a read would (``turns export``)."""
    return decode_log(data, where, turn_id)[0]


def read_path(path: str | os.PathLike[str]) -> list[TurnEvent]:
    """Read and validate any turn file, wherever it is (``turns validate PATH``).

    The turn id comes from the first line. If the file is named like a turn
    (``<turnId>.jsonl``), every line must belong to that turn.
    """
    p = Path(path)
    try:
        _, data = _read_shared(p)
    except FileNotFoundError:
        raise TurnNotFoundError(f"no turn file at {p}") from None
    except OSError as exc:
        raise InfrastructureError(f"{p}: could not read the turn file: {exc}") from exc
    stem = p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else None
    expected = stem if stem is not None and is_turn_id(stem) else None
    events, _, _ = decode_log(data, str(p), expected)
    return events


# ---------------------------------------------------------------- repair


class RepairRefusedError(InfrastructureError):
    """``repair_torn_tail`` found nothing it may repair; the file is unchanged."""


class NothingToRepairError(RepairRefusedError):
    """The file is a whole, valid turn log: there is nothing to repair."""


@dataclass(frozen=True, kw_only=True)
class RemovedTail:
    """What a repair moved out of a turn's log, wherever the log is stored."""

    line: int
    """The 1-based line number the removed tail had."""
    removed: bytes
    kept_lines: int
    """Complete, valid lines left in the log."""

    @property
    def removed_bytes(self) -> int:
        return len(self.removed)

    def preview(self, limit: int = 80) -> str:
        """The removed bytes as one printable line (undecodable bytes shown as \\x..)."""
        text = self.removed.decode("utf-8", errors="backslashreplace")
        text = text.replace("\n", "\\n").replace("\r", "\\r")
        return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, kw_only=True)
class RepairReport(RemovedTail):
    """What ``repair_torn_tail`` moved out of a turn file."""

    path: Path
    sidecar: Path
    """``<turnId>.jsonl.broken`` beside the file; the removed bytes were appended to it."""


def _unparseable(raw: bytes) -> bool:
    """Whether a complete line fails to parse as an event (a reducer violation does not count)."""
    try:
        parse_event(orjson.loads(raw), trusted_json=True)
    except (orjson.JSONDecodeError, ValidationError):
        return True
    return False


def repair_torn_tail(path: str | os.PathLike[str]) -> RepairReport:
    """Move a torn final line out of a turn file into its ``.broken`` sidecar.

    This is the one repair the project makes, and only on request (``turns
    repair``); reads never repair (§5.2). A tail is torn when the file does
    not end with a newline (the partial line after the last newline), or when
    its final line is not JSON or not a valid event. Everything before it must
    be a valid turn log; otherwise ``RepairRefusedError`` names the problem
    and nothing changes. So a corrupt middle line, a reducer violation (even
    on the final line) or an empty file is reported, never "repaired".

    The removed bytes are appended to ``<file>.broken`` and flushed to disk
    before the file is truncated, under the same locks appends take, so no
    byte is ever lost and no append interleaves with the surgery.
    """
    p = Path(path).absolute()
    where = str(p)
    with _FILE_LOCKS.hold(where):
        try:
            fd = os.open(p, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            raise TurnNotFoundError(f"no turn file at {p}") from None
        except OSError as exc:
            raise InfrastructureError(f"{p}: could not open the turn file: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = _FileWriter(fd, where).read_from(0)
            if not data:
                raise RepairRefusedError(f"{p}: the file is empty; there is no turn to keep")
            if data.endswith(b"\n"):
                body = data[:-1]
                start = body.rfind(b"\n") + 1
                if not _unparseable(body[start:]):
                    _refuse_unless_valid(data, p)
                    raise NothingToRepairError(f"{p}: the final line is whole; nothing to repair")
            else:
                start = data.rfind(b"\n") + 1
            prefix, tail = data[:start], data[start:]
            line = prefix.count(b"\n") + 1
            if not prefix:
                raise RepairRefusedError(
                    f"{p}:1: the only line is torn; no valid turn would remain"
                )
            _refuse_unless_valid(prefix, p)
            sidecar = p.with_name(p.name + ".broken")
            try:
                with open(sidecar, "ab") as side:
                    side.write(tail)
                    side.flush()
                    os.fsync(side.fileno())
                os.ftruncate(fd, len(prefix))
                os.fsync(fd)
            except OSError as exc:
                raise InfrastructureError(f"{p}: the repair failed: {exc}") from exc
            return RepairReport(
                path=p,
                sidecar=sidecar,
                line=line,
                removed=tail,
                kept_lines=prefix.count(b"\n"),
            )
        finally:
            os.close(fd)


def _refuse_unless_valid(data: bytes, p: Path) -> None:
    stem = p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else None
    expected = stem if stem is not None and is_turn_id(stem) else None
    try:
        decode_log(data, str(p), expected)
    except CorruptTurnError as exc:
        raise RepairRefusedError(
            f"{exc}; only a torn final line is repaired, so the file was left alone"
        ) from None


# ---------------------------------------------------------------- memory


@dataclass(slots=True)
class _MemoryLog:
    generation: int  # a fresh number per stored log, so a replaced log never looks cached
    buffer: bytearray


class _MemoryWriter(LogWriter):
    def __init__(self, log: _MemoryLog, guard: threading.Lock) -> None:
        self._buffer = log.buffer
        self._guard = guard
        self.identity = log.generation

    def size(self) -> int:
        return len(self._buffer)

    def read_from(self, start: int) -> bytes:
        with self._guard:
            return bytes(self._buffer[start:])

    def write(self, data: bytes) -> None:
        with self._guard:
            self._buffer += data


class InMemoryTurnRepository(JsonlRepository):
    """Turn logs held as bytes in memory, with the file repository's exact semantics.

    ``put_raw`` and ``raw`` reach the bytes directly, for tests and fixtures
    that need a corrupt or foreign log.
    """

    def __init__(self) -> None:
        super().__init__()
        self._logs: dict[str, _MemoryLog] = {}
        self._generations = itertools.count()
        self._guard = threading.Lock()
        self._locks = LockTable()
        self._staged: dict[tuple[str, str], bytes] = {}

    def put_raw(self, turn_id: str, data: bytes) -> None:
        """Store ``data`` as the turn's log, replacing any, without validating it."""
        validate_turn_id(turn_id)
        with self._guard:
            self._logs[turn_id] = _MemoryLog(next(self._generations), bytearray(data))

    def _where(self, turn_id: str) -> str:
        return f"memory:{turn_id}"

    def _lock(self, turn_id: str) -> AbstractContextManager[None]:
        return self._locks.hold(turn_id)

    def _store_new(self, turn_id: str, data: bytes) -> None:
        with self._guard:
            if turn_id in self._logs:
                raise TurnExistsError(f"turn {turn_id} already exists")
            self._logs[turn_id] = _MemoryLog(next(self._generations), bytearray(data))

    def _log(self, turn_id: str) -> _MemoryLog:
        log = self._logs.get(turn_id)
        if log is None:
            raise TurnNotFoundError(f"turn {turn_id} does not exist")
        return log

    def _load(self, turn_id: str) -> tuple[Hashable, bytes]:
        with self._guard:
            log = self._log(turn_id)
            return log.generation, bytes(log.buffer)

    @contextmanager
    def _writer(self, turn_id: str) -> Iterator[LogWriter]:
        # Exclusion comes from the per-turn lock that append already holds.
        with self._guard:
            log = self._log(turn_id)
        yield _MemoryWriter(log, self._guard)

    def _put_staged(self, turn_id: str, digest: str, data: bytes) -> None:
        with self._guard:
            self._log(turn_id)
            self._staged[(turn_id, digest)] = bytes(data)

    def _get_staged(self, turn_id: str, digest: str) -> bytes | None:
        with self._guard:
            return self._staged.get((turn_id, digest))

    def _has(self, turn_id: str) -> bool:
        with self._guard:
            return turn_id in self._logs

    def _ids(self) -> list[str]:
        with self._guard:
            return list(self._logs)
