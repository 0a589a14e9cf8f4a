"""The embedded dev server: shared by concurrent commands, never two on one database.

Commands are played by ``EmbeddedServer`` objects in this process and by
short helper processes (``python -c``), so "a command killed with SIGKILL"
is a real process dying with its user file's lock held.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from turnclient.runtime.embedded import (
    EmbeddedServer,
    ServerInfo,
    is_server_process,
    listens_on,
    servers_on,
)
from turncore_temporal.workflows import SEARCH_ATTRIBUTES

pytestmark = pytest.mark.temporal  # starts its own dev servers

ROOT = Path(__file__).resolve().parent.parent

HOLDER = """
import asyncio, sys
from turnclient.runtime.embedded import EmbeddedServer
from turncore_temporal.workflows import SEARCH_ATTRIBUTES

async def main():
    server = EmbeddedServer(sys.argv[1], SEARCH_ATTRIBUTES)
    info = await server.acquire()
    print(info.pid, info.port, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def kill_stragglers(home: Path) -> list[int]:
    """Kill every dev server left on the work dir's database; return their pids."""
    db = str(home.absolute() / "temporal" / "dev.db")
    found = servers_on(db)
    for pid in found:
        os.kill(pid, signal.SIGKILL)
    return found


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    work = tmp_path / "home"
    yield work
    kill_stragglers(work)


def holder(home: Path) -> tuple[subprocess.Popen[str], int]:
    """A helper process that joins the work dir's server and holds it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(home)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the holder process did not join"
    return proc, int(line.split()[0])


def manager(home: Path) -> EmbeddedServer:
    return EmbeddedServer(home, SEARCH_ATTRIBUTES, stop_grace=10.0)


def test_concurrent_commands_share_one_server_and_the_last_out_stops_it(home: Path) -> None:
    async def scenario() -> None:
        a, b, c = manager(home), manager(home), manager(home)
        infos = await asyncio.gather(a.acquire(), b.acquire(), c.acquire())
        assert len({i.pid for i in infos}) == 1
        assert [m.started for m in (a, b, c)].count(True) == 1
        db = str(home.absolute() / "temporal" / "dev.db")
        assert servers_on(db) == [infos[0].pid]
        assert sorted(a.live_users()) == sorted(
            p.name for p in (home / "temporal" / "users").iterdir()
        )
        assert len(a.live_users()) == 3
        starter = next(m for m in (a, b, c) if m.started)
        others = [m for m in (a, b, c) if m is not starter]
        # The command that started it leaves first: the others keep it.
        assert await starter.release() is False
        assert is_server_process(infos[0].pid, db)
        assert await others[0].release() is False
        assert await others[1].release() is True
        assert servers_on(db) == []
        assert not (home / "temporal" / "server.json").exists()
        assert list((home / "temporal" / "users").iterdir()) == []

    asyncio.run(scenario())


def test_a_server_left_by_a_killed_command_is_stopped_by_its_supervisor(home: Path) -> None:
    proc, pid = holder(home)
    proc.kill()  # SIGKILL: no cleanup, its user file stays behind with a dead lock
    proc.wait()
    db = str(home.absolute() / "temporal" / "dev.db")
    deadline = time.monotonic() + 20
    while servers_on(db) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert servers_on(db) == [], "the server outlived the only command using it"
    assert list((home / "temporal" / "users").iterdir()) == []  # the dead file was swept


def test_a_live_command_in_another_process_keeps_the_server(home: Path) -> None:
    proc, pid = holder(home)
    try:

        async def scenario() -> None:
            m = manager(home)
            info = await m.acquire()
            assert info.pid == pid and not m.started
            assert await m.release() is False  # the holder still uses it

        asyncio.run(scenario())
        assert is_server_process(pid, str(home.absolute() / "temporal" / "dev.db"))
    finally:
        proc.kill()
        proc.wait()


def test_a_dead_server_is_replaced(home: Path) -> None:
    state = home / "temporal" / "server.json"
    state.parent.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = ServerInfo(
        pid=dead.pid, port=1, db=str(home.absolute() / "temporal" / "dev.db"), started="then"
    )
    state.write_text(json.dumps(stale.__dict__))

    async def scenario() -> None:
        m = manager(home)
        info = await m.acquire()
        assert m.started and info.pid != dead.pid
        assert any("died" in n for n in m.notes)
        assert json.loads(state.read_text())["pid"] == info.pid
        await m.release()

    asyncio.run(scenario())


def test_a_stray_server_on_the_database_is_stopped_before_another_starts(home: Path) -> None:
    proc, pid = holder(home)
    proc.kill()
    proc.wait()
    (home / "temporal" / "server.json").unlink()  # its record is lost, the server is not
    db = str(home.absolute() / "temporal" / "dev.db")

    async def scenario() -> None:
        m = manager(home)
        info = await m.acquire()
        assert m.started and info.pid != pid
        assert servers_on(db) == [info.pid]  # never two servers on one database
        await m.release()

    asyncio.run(scenario())
    deadline = time.monotonic() + 5
    while is_server_process(pid, db) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert servers_on(db) == []


def test_a_port_is_ours_only_while_our_process_listens_on_it() -> None:
    # Another command's server can take a port chosen free before ours binds it and
    # then answer our probe: only our own listening socket makes the address ours.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        assert not listens_on(os.getpid(), port)  # bound, not listening
        listener.listen()
        assert listens_on(os.getpid(), port)
        holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert not listens_on(holder.pid, port)  # another process: not its socket
        finally:
            holder.kill()
            holder.wait()
    assert not listens_on(os.getpid(), port)
