"""Turn ids: format, strict validation, date-partitioned paths, monotonic generation."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turncore.errors import InvalidInputError, InvalidTurnIdError
from turncore.ids import (
    TICKS_PER_SECOND,
    TurnIdGenerator,
    format_turn_id,
    is_turn_id,
    turn_id_timestamp,
    turn_path,
    validate_turn_id,
)

EXAMPLE = "2025-11-11T04-36-29Z-0001234-000"
EXAMPLE_SECOND = int(datetime(2025, 11, 11, 4, 36, 29, tzinfo=UTC).timestamp())


def ns(second: int, tick: int = 0) -> int:
    return second * 1_000_000_000 + tick * 100


# ---------------------------------------------------------------- validation


def test_the_spec_example_is_valid_and_returned_unchanged() -> None:
    assert validate_turn_id(EXAMPLE) is EXAMPLE
    assert is_turn_id(EXAMPLE)
    assert turn_id_timestamp(EXAMPLE) == datetime(2025, 11, 11, 4, 36, 29, tzinfo=UTC)


def test_a_leap_day_is_a_real_date() -> None:
    assert validate_turn_id("2024-02-29T23-59-59Z-9999999-999")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "empty"),
        ("..", r"'\.\.'"),
        (f"..{EXAMPLE}", r"'\.\.'"),
        (f"../{EXAMPLE}", "path separator"),
        (f"2025/11/11/{EXAMPLE}", "path separator"),
        (f"..\\{EXAMPLE}", "path separator"),
        (f"{EXAMPLE}\x00", "NUL"),
        (f" {EXAMPLE}", "whitespace"),
        (f"{EXAMPLE}\n", "whitespace"),
        ("2025-11-11T04-36-29Z-0001234-000\t", "whitespace"),
        ("2025-11-11T04-36-29Z 0001234-000", "whitespace"),
        ("2025-13-11T04-36-29Z-0001234-000", "month must be in 1..12"),
        ("2025-00-11T04-36-29Z-0001234-000", "month must be in 1..12"),
        ("2025-02-30T04-36-29Z-0001234-000", "day is out of range"),
        ("2025-11-31T04-36-29Z-0001234-000", "day is out of range"),
        ("2025-11-11T24-36-29Z-0001234-000", "hour must be in"),
        ("2025-11-11T04-60-29Z-0001234-000", "minute must be in"),
        ("2025-11-11T04-36-60Z-0001234-000", "second must be in"),
        ("0000-11-11T04-36-29Z-0001234-000", "year 0 is out of range"),
        ("2025-11-11T04-36-29Z-001234-000", "shape"),
        ("2025-11-11T04-36-29Z-0001234-00", "shape"),
        ("2025-11-11T04-36-29Z-0001234", "shape"),
        ("2025-11-11T04:36:29Z-0001234-000", "shape"),
        ("2025-11-11t04-36-29z-0001234-000", "shape"),
        (f"{EXAMPLE}.jsonl", "shape"),
        ("٢٠٢٥-11-11T04-36-29Z-0001234-000", "shape"),  # non-ASCII digits
        ("turn-1", "shape"),
    ],
)
def test_malformed_and_path_like_ids_are_rejected_with_a_specific_message(
    value: str, message: str
) -> None:
    with pytest.raises(InvalidTurnIdError, match=message):
        validate_turn_id(value)
    assert not is_turn_id(value)


@pytest.mark.parametrize("value", [None, 20251111, b"2025-11-11T04-36-29Z-0001234-000"])
def test_non_strings_are_rejected(value: object) -> None:
    with pytest.raises(InvalidTurnIdError, match="must be a string"):
        validate_turn_id(value)  # type: ignore[arg-type]


def test_invalid_turn_id_is_an_input_error_and_a_value_error() -> None:
    with pytest.raises(InvalidInputError):
        validate_turn_id("..")
    with pytest.raises(ValueError):
        validate_turn_id("..")


def test_long_values_are_shortened_in_the_message() -> None:
    with pytest.raises(InvalidTurnIdError) as info:
        validate_turn_id("x" * 10_000)
    assert len(str(info.value)) < 200
    assert "10000 characters" in str(info.value)


# ---------------------------------------------------------------- paths


def test_turn_path_is_date_partitioned(tmp_path: Path) -> None:
    assert turn_path(tmp_path, EXAMPLE) == (
        tmp_path / "storage" / "turns" / "2025" / "11" / "11" / f"{EXAMPLE}.jsonl"
    )
    assert turn_path(str(tmp_path), EXAMPLE) == turn_path(tmp_path, EXAMPLE)


def test_turn_path_uses_the_ids_own_utc_date(tmp_path: Path) -> None:
    turn_id = "1999-01-02T23-59-59Z-0000000-007"
    assert turn_path(tmp_path, turn_id).relative_to(tmp_path).parts == (
        "storage",
        "turns",
        "1999",
        "01",
        "02",
        f"{turn_id}.jsonl",
    )


@pytest.mark.parametrize(
    "value", ["../../../etc/passwd", f"../{EXAMPLE}", "/etc/passwd", "..", f"{EXAMPLE}/.."]
)
def test_turn_path_validates_before_building_a_path(tmp_path: Path, value: str) -> None:
    with pytest.raises(InvalidTurnIdError):
        turn_path(tmp_path, value)


# ---------------------------------------------------------------- formatting and generation


def test_the_counter_is_the_sub_second_position_in_100ns_ticks() -> None:
    generator = TurnIdGenerator(lambda: EXAMPLE_SECOND * 1_000_000_000 + 123_400, instance=0)
    assert generator.next_id() == EXAMPLE


def test_format_turn_id_and_its_bounds() -> None:
    assert format_turn_id(EXAMPLE_SECOND, 1234) == EXAMPLE
    assert format_turn_id(EXAMPLE_SECOND, TICKS_PER_SECOND - 1, 999).endswith("-9999999-999")
    with pytest.raises(ValueError, match="tick"):
        format_turn_id(EXAMPLE_SECOND, TICKS_PER_SECOND)
    with pytest.raises(ValueError, match="instance"):
        format_turn_id(EXAMPLE_SECOND, 0, 1000)


def test_ids_from_a_stopped_clock_still_strictly_increase() -> None:
    generator = TurnIdGenerator(lambda: ns(EXAMPLE_SECOND, 5), instance=0)
    ids = [generator.next_id() for _ in range(1000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert ids[0] == "2025-11-11T04-36-29Z-0000005-000"
    assert ids[1] == "2025-11-11T04-36-29Z-0000006-000"
    assert all(validate_turn_id(i) for i in ids)


def test_a_clock_that_goes_backwards_does_not_go_back_in_ids() -> None:
    readings = iter([ns(EXAMPLE_SECOND, 500), ns(EXAMPLE_SECOND - 3600), ns(EXAMPLE_SECOND, 400)])
    generator = TurnIdGenerator(lambda: next(readings), instance=0)
    a, b, c = (generator.next_id() for _ in range(3))
    assert a < b < c
    assert c.endswith("-0000502-000")


def test_the_counter_carries_into_the_next_second() -> None:
    generator = TurnIdGenerator(lambda: ns(EXAMPLE_SECOND, TICKS_PER_SECOND - 1), instance=0)
    first, second = generator.next_id(), generator.next_id()
    assert first == "2025-11-11T04-36-29Z-9999999-000"
    assert second == "2025-11-11T04-36-30Z-0000000-000"


def test_the_instance_number_is_the_suffix() -> None:
    generator = TurnIdGenerator(lambda: ns(EXAMPLE_SECOND, 1234), instance=42)
    assert generator.next_id() == "2025-11-11T04-36-29Z-0001234-042"
    with pytest.raises(ValueError):
        TurnIdGenerator(instance=1000)
    with pytest.raises(ValueError):
        TurnIdGenerator(instance=-1)


def test_the_default_clock_is_the_current_utc_time() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    minted = turn_id_timestamp(TurnIdGenerator().next_id())
    after = datetime.now(UTC)
    assert before <= minted <= after


def test_ids_are_unique_and_ordered_across_threads() -> None:
    generator = TurnIdGenerator(time.time_ns)
    per_thread: list[list[str]] = [[] for _ in range(8)]

    def mint(out: list[str]) -> None:
        for _ in range(500):
            out.append(generator.next_id())

    threads = [threading.Thread(target=mint, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for out in per_thread for i in out]
    assert len(set(every)) == len(every) == 4000
    assert all(out == sorted(out) for out in per_thread)


@given(st.lists(st.integers(min_value=0, max_value=4_000_000_000 * 1_000_000_000), min_size=1))
def test_any_clock_readings_give_strictly_increasing_valid_ids(readings: list[int]) -> None:
    clock = iter(readings)
    generator = TurnIdGenerator(lambda: next(clock), instance=0)
    ids = [generator.next_id() for _ in readings]
    assert all(a < b for a, b in zip(ids, ids[1:], strict=False))
    for turn_id, reading in zip(ids, readings, strict=True):
        validate_turn_id(turn_id)
        # Never earlier than the clock said (only ever pushed forward).
        assert turn_id_timestamp(turn_id).timestamp() >= reading // 1_000_000_000


def test_generators_draw_their_instance_number_unless_given() -> None:
    # Processes on many hosts mint at once; a shared "000" left only the 100 ns
    # tick between them. Unless a number is given, each generator draws one.
    suffixes = {TurnIdGenerator().next_id()[-3:] for _ in range(50)}
    assert len(suffixes) > 1 and all(s.isdigit() for s in suffixes)
    assert TurnIdGenerator(instance=0).next_id().endswith("-000")
