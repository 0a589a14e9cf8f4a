"""``repair_torn_tail``: the one repair, on request only, of a torn final line."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.histories import to_line, tool_turn, write_turn
from turncore.errors import CorruptTurnError, TurnNotFoundError
from turncore.storage.repository import RepairRefusedError, read_path, repair_torn_tail

HISTORY = tool_turn().events
"""A valid, completed turn (8 lines)."""


def whole(directory: Path, n: int | None = None) -> Path:
    return write_turn(directory, HISTORY[:n] if n is not None else HISTORY)


def test_a_partial_final_line_moves_to_the_sidecar(tmp_path: Path) -> None:
    path = whole(tmp_path, 5)
    good = path.read_bytes()
    torn = to_line(HISTORY[5])[:33]
    path.write_bytes(good + torn)
    with pytest.raises(CorruptTurnError, match="torn write"):
        read_path(path)

    report = repair_torn_tail(path)

    assert path.read_bytes() == good
    assert read_path(path) == HISTORY[:5]
    assert report.sidecar == path.with_name(path.name + ".broken")
    assert report.sidecar.read_bytes() == torn
    assert (report.removed, report.removed_bytes, report.line, report.kept_lines) == (
        torn,
        33,
        6,
        5,
    )
    assert report.preview() == torn.decode()


def test_a_whole_final_line_that_is_not_json_moves_with_its_newline(tmp_path: Path) -> None:
    path = whole(tmp_path, 4)
    good = path.read_bytes()
    bad = b'{"type": "tool_result", "turnId": \xff\n'
    path.write_bytes(good + bad)

    report = repair_torn_tail(path)

    assert path.read_bytes() == good
    assert report.removed == bad
    assert report.preview() == '{"type": "tool_result", "turnId": \\xff\\n'


def test_a_final_line_that_is_json_but_no_event_counts_as_torn(tmp_path: Path) -> None:
    path = whole(tmp_path, 4)
    good = path.read_bytes()
    path.write_bytes(good + b'{"type": "tool_resu"}\n')
    assert repair_torn_tail(path).line == 5
    assert path.read_bytes() == good


def test_the_sidecar_is_appended_to_never_overwritten(tmp_path: Path) -> None:
    path = whole(tmp_path, 3)
    good = path.read_bytes()
    path.write_bytes(good + b"first tear")
    repair_torn_tail(path)
    path.write_bytes(good + b"second tear")
    report = repair_torn_tail(path)
    assert report.sidecar.read_bytes() == b"first tearsecond tear"
    assert path.read_bytes() == good


@pytest.mark.parametrize(
    "damage, message",
    [
        ("middle line", "not valid JSON"),
        ("reducer violation on the final line", "only a torn final line is repaired"),
        ("torn tail after a corrupt middle line", ":3: the line is a JSON array"),
        ("nothing wrong", "nothing to repair"),
        ("empty file", "empty"),
        ("only line torn", "no valid turn would remain"),
    ],
)
def test_everything_else_is_reported_and_left_alone(
    tmp_path: Path, damage: str, message: str
) -> None:
    path = whole(tmp_path)
    lines = [to_line(e) for e in HISTORY]
    if damage == "middle line":
        lines[3] = b"{not json\n"
    elif damage == "reducer violation on the final line":
        lines.append(lines[-1])  # a second terminal event: parses, but is illegal
    elif damage == "torn tail after a corrupt middle line":
        lines[2] = b"[]\n"
        lines[-1] = lines[-1][:10]
    elif damage == "empty file":
        lines = []
    elif damage == "only line torn":
        lines = [lines[0][:50]]
    data = b"".join(lines)
    path.write_bytes(data)

    with pytest.raises(RepairRefusedError, match=message):
        repair_torn_tail(path)

    assert path.read_bytes() == data
    assert not path.with_name(path.name + ".broken").exists()


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TurnNotFoundError):
        repair_torn_tail(tmp_path / "2025-11-11T04-36-29Z-0001234-000.jsonl")


def test_the_turn_id_of_the_file_name_is_enforced_before_cutting(tmp_path: Path) -> None:
    path = whole(tmp_path, 3)
    other = tmp_path / "2025-11-11T04-36-29Z-0009999-000.jsonl"
    other.write_bytes(path.read_bytes() + b"torn")
    with pytest.raises(RepairRefusedError, match="does not match"):
        repair_torn_tail(other)
    assert other.read_bytes().endswith(b"torn")


def test_the_kept_file_reads_back_as_the_events_before_the_tear(tmp_path: Path) -> None:
    path = whole(tmp_path, 6)
    raw = path.read_bytes()
    path.write_bytes(raw + to_line(HISTORY[6])[:-1])  # whole JSON, only the newline missing
    report = repair_torn_tail(path)
    assert orjson.loads(report.removed) == HISTORY[6].to_wire()
    assert read_path(path) == HISTORY[:6]
