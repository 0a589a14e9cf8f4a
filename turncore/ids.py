"""Turn ids and the paths derived from them (spec §5.1).

A turn id looks like ``2025-11-11T04-36-29Z-0001234-000``::

    2025-11-11T04-36-29Z   UTC time of minting, to the second
    0001234                sub-second position in 100-nanosecond ticks (0..9999999)
    000                    generator instance number (0..999)

Every field is fixed-width, so sorting ids as strings sorts them by time.

``TurnIdGenerator`` makes the ids of one generator strictly increasing. If the
clock has not moved past the last id, or has gone backwards, the tick count is
bumped by one, carrying into the next second when it overflows. A burst of ids
therefore stays unique and ordered even with a coarse or stepped clock, and
the printed time runs ahead of the wall clock by at most the size of the burst
(in 100 ns units). The instance number keeps two generators that run at once
(two processes sharing a work dir) from ever minting the same id. ``create``
refuses an existing file (O_EXCL), so a collision between two generators with
the same number is never silently shared: the creator mints another id.

``validate_turn_id`` is strict because ids become file names. It rejects
path-like values (``..``, ``/``, ``\\``, NUL, whitespace) with a message that
says which rule was broken, and it rejects timestamps that cannot exist,
such as month 13 or 30 February. ``turn_path`` validates the id before it
derives ``work_dir/storage/turns/YYYY/MM/DD/<turnId>.jsonl``.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from .errors import InvalidTurnIdError

TICKS_PER_SECOND = 10_000_000
"""Sub-second resolution of the counter field: one tick is 100 ns."""

MAX_INSTANCE = 999

MINT_ATTEMPTS = 5
"""Ids a creator mints for one new turn before an id collision is its error."""

TURN_ID_SHAPE = "YYYY-MM-DDTHH-MM-SSZ-NNNNNNN-NNN"

_TURN_ID_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2})-([0-9]{2})-([0-9]{2})Z-([0-9]{7})-([0-9]{3})"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NS_PER_TICK = 1_000_000_000 // TICKS_PER_SECOND

Clock = Callable[[], int]
"""Returns the current time as integer nanoseconds since the Unix epoch (like ``time.time_ns``)."""


def _show(value: str) -> str:
    """A bounded repr for error messages (ids come from callers and may be large)."""
    if len(value) <= 64:
        return repr(value)
    return f"{value[:64]!r}… ({len(value)} characters)"


def _parse(turn_id: object) -> datetime:
    """Check ``turn_id`` and return its UTC timestamp, or raise InvalidTurnIdError."""
    if not isinstance(turn_id, str):
        raise InvalidTurnIdError(f"a turn id must be a string, not {type(turn_id).__name__}")
    if not turn_id:
        raise InvalidTurnIdError("the turn id is empty")
    shown = _show(turn_id)
    # Path-like values first, with their own messages: they are the dangerous ones.
    if "\x00" in turn_id:
        raise InvalidTurnIdError(f"turn id {shown} contains a NUL character")
    if "/" in turn_id or "\\" in turn_id:
        raise InvalidTurnIdError(f"turn id {shown} contains a path separator")
    if ".." in turn_id:
        raise InvalidTurnIdError(f"turn id {shown} contains '..'")
    if any(c.isspace() for c in turn_id):
        raise InvalidTurnIdError(f"turn id {shown} contains whitespace")
    m = _TURN_ID_RE.fullmatch(turn_id)
    if m is None:
        raise InvalidTurnIdError(f"turn id {shown} does not have the shape {TURN_ID_SHAPE}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError as e:
        raise InvalidTurnIdError(f"turn id {shown} names a time that does not exist: {e}") from None


def validate_turn_id(turn_id: str) -> str:
    """Return ``turn_id`` unchanged if it is a well-formed turn id; raise InvalidTurnIdError otherwise."""
    _parse(turn_id)
    return turn_id


def is_turn_id(value: str) -> bool:
    """Whether ``value`` is a well-formed turn id (never raises)."""
    try:
        _parse(value)
    except InvalidTurnIdError:
        return False
    return True


def turn_id_timestamp(turn_id: str) -> datetime:
    """The UTC time, to the second, at which ``turn_id`` was minted."""
    return _parse(turn_id)


def turn_path(work_dir: str | os.PathLike[str], turn_id: str) -> Path:
    """``work_dir/storage/turns/YYYY/MM/DD/<turnId>.jsonl``, after validating ``turn_id``."""
    when = _parse(turn_id)
    return (
        Path(work_dir)
        / "storage"
        / "turns"
        / f"{when.year:04d}"
        / f"{when.month:02d}"
        / f"{when.day:02d}"
        / f"{turn_id}.jsonl"
    )


def format_turn_id(epoch_second: int, tick: int, instance: int = 0) -> str:
    """The id for a whole UTC second since the epoch, a tick within it and an instance number."""
    if not 0 <= tick < TICKS_PER_SECOND:
        raise ValueError(f"tick {tick} is outside 0..{TICKS_PER_SECOND - 1}")
    if not 0 <= instance <= MAX_INSTANCE:
        raise ValueError(f"instance {instance} is outside 0..{MAX_INSTANCE}")
    when = _EPOCH + timedelta(seconds=epoch_second)
    if not 1 <= when.year <= 9999:
        raise ValueError(f"second {epoch_second} is outside the years a turn id can name")
    return f"{when:%Y-%m-%dT%H-%M-%SZ}-{tick:07d}-{instance:03d}"


class TurnIdGenerator:
    """Mints strictly increasing turn ids; safe to share between threads.

    ``clock`` returns integer nanoseconds since the Unix epoch (default
    ``time.time_ns``); tests inject a fixed or stepping clock. ``instance``
    (0..999) becomes the id's last field; unset, the generator draws one at
    random, so processes minting at once on many hosts rarely share it. Two
    generators can still mint one id (same tick, same number): ``create``
    refuses the second file, and its caller mints again.
    """

    def __init__(self, clock: Clock = time.time_ns, *, instance: int | None = None) -> None:
        if instance is None:
            instance = secrets.randbelow(MAX_INSTANCE + 1)
        if not 0 <= instance <= MAX_INSTANCE:
            raise ValueError(f"instance {instance} is outside 0..{MAX_INSTANCE}")
        self._clock = clock
        self._instance = instance
        self._lock = threading.Lock()
        self._last = -1  # last issued position, in ticks since the epoch

    def next_id(self) -> str:
        """A new id, greater (as a string and in time) than every id this generator issued before."""
        with self._lock:
            now = self._clock() // _NS_PER_TICK
            position = now if now > self._last else self._last + 1
            self._last = position
        second, tick = divmod(position, TICKS_PER_SECOND)
        return format_turn_id(second, tick, self._instance)
