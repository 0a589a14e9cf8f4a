"""A turn file on a disk that fills up, or is remounted read-only, under a writer.

A small tmpfs (mounted here; the suite runs as root) is the disk. An append
that cannot be written whole leaves the file exactly as it was — never a
partial line that every later read would refuse — and once space returns
the same append simply goes on, with no ``turns repair``.
"""

from __future__ import annotations

import errno
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import TURN_ID, open_sync_calls, tool_result
from turncore.errors import InfrastructureError
from turncore.storage.repository import FileTurnRepository

PAGE = 4096


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def _fill(path: Path) -> None:
    """Take every free page of the file system ``path`` is on."""
    with path.open("wb", buffering=0) as f:
        while True:
            try:
                f.write(b"\0" * PAGE)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnclient.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_full_disk_cuts_the_append_back_and_the_turn_goes_on_once_space_returns(
    disk: Path,
) -> None:
    repo = FileTurnRepository(disk)
    builder = open_sync_calls(n=2)
    repo.create(builder.created)
    repo.append(TURN_ID, builder.events[1:])
    path = repo.path_for(TURN_ID)
    before = path.read_bytes()
    assert len(before) % PAGE, "the file's last page must have room for part of a batch"
    filler = disk / "filler"
    _fill(filler)

    big = tool_result(TURN_ID, "call_0", "read_file", output="x" * (3 * PAGE))
    with pytest.raises(InfrastructureError, match="nothing of the batch is kept"):
        repo.append(TURN_ID, [big], known_offset=len(builder.events))
    assert path.read_bytes() == before  # not a byte of the batch, no partial line
    assert repo.read(TURN_ID) == builder.events
    r = _validate(path)
    assert r.returncode == 0, r.stdout + r.stderr

    filler.unlink()  # space returns: the same append goes on
    assert repo.append(TURN_ID, [big], known_offset=len(builder.events)) == len(builder.events) + 1
    assert repo.read(TURN_ID) == [*builder.events, big]


def test_a_read_only_remount_refuses_the_append_and_keeps_the_file_whole(disk: Path) -> None:
    repo = FileTurnRepository(disk)
    builder = open_sync_calls(n=1)
    repo.create(builder.created)
    repo.append(TURN_ID, builder.events[1:])
    path = repo.path_for(TURN_ID)
    before = path.read_bytes()
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    result = tool_result(TURN_ID, "call_0", "read_file")
    with pytest.raises(InfrastructureError, match="Read-only file system"):
        repo.append(TURN_ID, [result], known_offset=len(builder.events))
    assert path.read_bytes() == before
    assert repo.read(TURN_ID) == builder.events
    subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
    assert (
        repo.append(TURN_ID, [result], known_offset=len(builder.events)) == len(builder.events) + 1
    )
