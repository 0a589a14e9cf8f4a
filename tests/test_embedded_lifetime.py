"""The embedded server never outlives its work dir, its database or its supervisor.

Each test runs the real ``turns`` command on a work dir with a long idle
grace (so only the condition under test can stop the server), makes that
condition happen, and then watches the process table until no process on
the work dir's database is left — neither the dev server nor its supervisor.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_cli_terminal import environment, start, turns, wait_for
from tests.test_embedded import kill_stragglers

pytestmark = pytest.mark.temporal  # starts embedded dev servers through the CLI

IDLE = {"TURNS_SERVER_IDLE": "600"}  # far longer than any wait below
GONE_WITHIN = 20.0  # seconds: the supervisor looks four times a second; SIGTERM takes a moment


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    work = tmp_path / "home"
    work.mkdir()
    yield work
    assert kill_stragglers(work) == [], "the embedded server outlived the test"


def processes_on(home: Path) -> dict[int, list[str]]:
    """Every live process whose command line names the work dir's database."""
    db = str(home.absolute() / "temporal" / "dev.db")
    found: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = [a.decode() for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if db in argv and state != "Z":
            found[int(entry.name)] = argv
    return found


def server_and_supervisor(home: Path) -> tuple[int, int]:
    procs = processes_on(home)
    servers = [pid for pid, argv in procs.items() if argv[1:3] == ["server", "start-dev"]]
    others = [pid for pid in procs if pid not in servers]
    assert len(servers) == 1 and len(others) == 1, procs
    return servers[0], others[0]


def ran_a_turn(home: Path) -> tuple[int, int]:
    r = turns(home, "run", "What time is it in Chicago?", "--json", **IDLE)
    assert r.returncode == 0, r.stderr
    # The idle grace keeps the server (and what watches it) up after the command.
    return server_and_supervisor(home)


def rm_rf(path: Path) -> None:
    """Delete ``path`` as ``rm -rf`` does while the server still writes in it: a file
    that vanished meanwhile (SQLite's journal, removed by the server itself) is
    already gone; one created after the listing is deleted by the next pass."""

    def vanished(
        _: object, name: str, exc: tuple[type[BaseException], BaseException, object]
    ) -> None:
        if not issubclass(exc[0], FileNotFoundError):
            raise exc[1]

    for attempt in range(20):
        try:
            shutil.rmtree(path, onerror=vanished)
            return
        except OSError as error:  # a directory refilled between listing and removal
            if error.errno != errno.ENOTEMPTY or attempt == 19:
                raise


def test_deleting_the_work_dir_stops_the_server(home: Path) -> None:
    ran_a_turn(home)
    rm_rf(home)
    wait_for(
        "every process on the deleted work dir to end",
        lambda: not processes_on(home),
        timeout=GONE_WITHIN,
    )


def test_deleting_the_database_stops_the_server(home: Path) -> None:
    ran_a_turn(home)
    (home / "temporal" / "dev.db").unlink()
    wait_for(
        "every process on the deleted database to end",
        lambda: not processes_on(home),
        timeout=GONE_WITHIN,
    )
    log = (home / "temporal" / "server.log").read_text()
    assert "was deleted" in log, log[-2000:]


def test_a_supervisor_killed_with_sigkill_takes_the_server_with_it(home: Path) -> None:
    server, supervisor = ran_a_turn(home)
    os.kill(supervisor, signal.SIGKILL)
    wait_for(
        "the server to end with its supervisor", lambda: not processes_on(home), timeout=GONE_WITHIN
    )
    assert server not in processes_on(home)


def test_a_command_killed_with_sigkill_leaves_no_server_without_an_idle_grace(
    home: Path,
) -> None:
    # The web UI command joins the embedded server; killed outright it cannot
    # leave, so only the supervisor can notice that nobody uses the server.
    proc = start(home, "ui", "--port", "0", TURNS_SERVER_IDLE="0")
    try:
        wait_for("the UI's server to start", lambda: len(processes_on(home)) == 2, timeout=60)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    wait_for(
        "the server of the killed command to end",
        lambda: not processes_on(home),
        timeout=GONE_WITHIN,
    )


def test_the_supervisor_needs_only_the_standard_library(home: Path) -> None:
    # It lives as long as the server: it must start fast and stay small.
    supervisor = Path(__file__).resolve().parent.parent / "turnclient" / "runtime" / "supervisor.py"
    probe = (
        "import runpy, sys; sys.argv = ['supervisor']; "
        f"runpy.run_path({str(supervisor)!r}, run_name='probe'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'turnclient', 'turncore', 'temporalio', 'pydantic', 'httpx'}))"
    )
    r = subprocess.run(
        [sys.executable, "-I", "-c", probe], capture_output=True, text=True, env=environment(home)
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
