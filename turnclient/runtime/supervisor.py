"""The embedded server's supervisor: the one process the dev server may not outlive.

Theory of operation
-------------------
A command that needs the work dir's embedded server (``embedded.py``) does not
start ``temporal server start-dev`` itself: it starts this small process, and
this process starts the server as its own child. The server's life is then
tied to the supervisor's from both ends:

- **The supervisor dies, the server dies.** On Linux the server is started
  with the parent-death signal set to SIGKILL (``prctl(PR_SET_PDEATHSIG)``),
  so the kernel kills it whenever the supervisor ends — a clean exit, an
  exception, or a SIGKILL that runs no code at all.
- **The supervisor stops the server before it leaves**, on every path it can
  run code on (``finally``; SIGTERM, SIGINT and SIGHUP are turned into an
  orderly stop): SIGTERM, then SIGKILL after a grace.
- **It watches the server's reasons to live** four times a second:
  the server exits → the supervisor exits; the work dir, the ``temporal/``
  folder or the database file is gone or replaced (another inode) → stop;
  no live command has held the server (``users/`` locks, see ``embedded.py``)
  for the idle grace → stop (grace 0: as soon as none is left, so a command
  that was SIGKILLed never leaves a server behind).

It imports only the standard library, so it starts in a few tens of
milliseconds and stays small for as long as the server runs. It reports the
server's pid on its standard output (one line, then closes it); the command
that started it waits for the server to answer and writes ``server.json``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_POLL = 0.25


class _Stop(Exception):
    """A signal asked the supervisor to stop its server and leave."""


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A ``preexec_fn`` that has the kernel SIGKILL the child when ``parent`` dies (Linux)."""

    def preexec() -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        # The parent may have died between fork and prctl: then nobody would
        # ever send the signal, so do not start at all.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def live_users(users: Path, mine: Path | None = None) -> list[str]:
    """The user files of live commands (``mine`` counts as live); a dead one's file is removed.

    A command holds an ``flock`` on its user file for as long as it lives and
    the kernel drops it when the command dies, however it dies: a file whose
    lock can be taken belongs to a dead command.
    """
    live: list[str] = []
    if not users.is_dir():
        return live
    for path in sorted(users.iterdir()):
        if path == mine:
            live.append(path.name)
            continue
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            live.append(path.name)
        else:
            path.unlink(missing_ok=True)  # its command died without leaving
        finally:
            os.close(fd)
    return live


class Supervisor:
    """Run the server in ``argv`` for the work dir's ``temporal/`` folder ``home``."""

    def __init__(self, home: Path, idle_grace: float, argv: list[str], log: Path) -> None:
        self.home = home
        self.db = home / "dev.db"
        self.idle_grace = idle_grace
        self.argv = argv
        self.log = log
        self.server: subprocess.Popen[bytes] | None = None
        self._db_inode: int | None = None
        self._idle_since: float | None = None

    def run(self, announce: Callable[[int], None]) -> str:
        """Start the server, watch it, stop it; returns why it stopped."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        try:
            with open(self.log, "ab") as log:
                self.server = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    close_fds=True,
                    preexec_fn=_die_with_parent(os.getpid()),
                )
            announce(self.server.pid)
            return self._watch()
        except _Stop:
            return "asked to stop"
        finally:
            self._stop_server()
            if self.server is not None:
                self._forget_server()

    def _on_signal(self, signum: int, _frame: object) -> None:
        raise _Stop(signal.Signals(signum).name)

    def _watch(self) -> str:
        assert self.server is not None
        while True:
            if self.server.poll() is not None:
                return f"the server exited with code {self.server.returncode}"
            gone = self._gone()
            if gone:
                return gone
            try:
                idle_for = self._idle_step()
            except OSError as exc:
                return f"its work dir cannot be used ({exc.strerror}: {exc.filename})"
            if idle_for is not None:
                return f"no command used it for {idle_for:g}s"
            time.sleep(_POLL)

    def _gone(self) -> str | None:
        """Why the server's files no longer exist as it started on them, if so."""
        try:
            inode = os.stat(self.db).st_ino
        except FileNotFoundError:
            if self._db_inode is None and self.home.is_dir():
                return None  # the server has not created its database yet
            return f"its database {self.db} was deleted"
        except OSError as exc:
            return f"its database {self.db} cannot be read ({exc.strerror})"
        if self._db_inode is None:
            self._db_inode = inode
        elif inode != self._db_inode:
            return f"its database {self.db} was replaced"
        return None

    def _idle_step(self) -> float | None:
        """Look for live users under the work dir's join lock; stop an idle server there.

        Returns how long the server had been idle if it was stopped. The stop
        happens under the lock, so a command that joins meanwhile waits and
        then starts a new server instead of reusing one about to go.
        """
        fd = os.open(self.home / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            # A joining command creates its user file, then locks it; looking
            # between the two would take the file for a dead command's.
            fcntl.flock(fd, fcntl.LOCK_EX)
            now = time.monotonic()
            if live_users(self.home / "users"):
                self._idle_since = None
                return None
            if self._idle_since is None:
                self._idle_since = now
            if now - self._idle_since < self.idle_grace:
                return None
            self._stop_server()
            self._forget_server()
            return now - self._idle_since
        finally:
            os.close(fd)

    def _forget_server(self) -> None:
        """Remove ``server.json`` if it still names our server (called under the lock)."""
        assert self.server is not None
        state = self.home / "server.json"
        try:
            recorded = json.loads(state.read_text()).get("pid")
        except (OSError, ValueError, AttributeError):
            return
        if recorded == self.server.pid:
            state.unlink(missing_ok=True)

    def _stop_server(self, grace: float = 15.0) -> None:
        server = self.server
        if server is None or server.poll() is not None:
            return
        # Block the signals that would interrupt the stop half-way.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                server.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(wait)
                return


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print(
            "usage: python -m turnclient.supervisor HOME IDLE_GRACE -- SERVER_ARGV...",
            file=sys.stderr,
        )
        return 2
    home = Path(argv[0])
    supervisor = Supervisor(home, float(argv[1]), argv[3:], home / "server.log")

    def announce(pid: int) -> None:
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()
        sys.stdout.close()

    why = supervisor.run(announce)
    with contextlib.suppress(OSError):
        with open(supervisor.log, "ab") as log:
            log.write(f"--- supervisor {os.getpid()} stopped the server: {why}\n".encode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
