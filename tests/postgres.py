"""A real PostgreSQL server for the tests, started from the machine's binaries.

``PostgresServer.start()`` runs ``initdb`` into a fresh temporary directory
and ``pg_ctl start`` on a free port of 127.0.0.1, with the socket in that
directory; ``stop()`` shuts it down and removes the directory. PostgreSQL
refuses to run as root, so as root both run as the ``postgres`` user through
``runuser`` (the directory is handed to that user first).

TCP connections need a password (SCRAM), so the tests can check that the
password never leaks into errors, logs or files; the socket is trusted.
Durability settings are relaxed (``fsync=off``): a test server never has to
survive a machine crash, and the suite shares two cores with other jobs.
``start(durable=True)`` keeps PostgreSQL's defaults instead, for the tests
that crash-stop the server and expect every committed row back.

The binaries are looked up under ``/usr/lib/postgresql/<version>/bin`` (15
first) and on ``PATH``; ``.ci/run`` installs ``postgresql-15`` if none is
there.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

PASSWORD = "s3cret-Pg-pass"
"""The superuser's password: tests assert it never appears in any output."""


def find_bin_dir() -> Path:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    preferred = [p for p in candidates if p.parent.name == "15"]
    for path in [*preferred, *candidates]:
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            return path
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise RuntimeError(
        "PostgreSQL server binaries not found (looked in /usr/lib/postgresql/*/bin and PATH); "
        "install them: apt-get install -y postgresql-15"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresServer:
    """One throwaway cluster; ``url(db)`` is a libpq URL with the password in it."""

    directory: Path
    port: int
    bin_dir: Path
    user: str = "postgres"
    durable: bool = False

    @classmethod
    def start(cls, *, durable: bool = False) -> PostgresServer:
        bin_dir = find_bin_dir()
        directory = Path(tempfile.mkdtemp(prefix="turncore-pg-"))
        server = cls(directory=directory, port=free_port(), bin_dir=bin_dir, durable=durable)
        try:
            server._init_and_start()
        except BaseException:
            server.stop()
            raise
        return server

    def _as_owner(self, *argv: str) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *argv]
        return list(argv)

    def _init_and_start(self) -> None:
        data = self.directory / "data"
        pwfile = self.directory / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
        pwfile.chmod(0o600)
        subprocess.run(
            self._as_owner(
                str(self.bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                self.user,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                f"--pwfile={pwfile}",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ),
            check=True,
            capture_output=True,
        )
        options = self._options()
        subprocess.run(
            self._as_owner(
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(self.directory / "server.log"),
                "-w",
                "start",
            ),
            check=True,
            capture_output=True,
        )

    def pause(self, mode: str = "fast") -> None:
        """Shut the server down (every connection drops); ``resume`` brings it back.
        ``mode="immediate"`` is a crash-stop: no checkpoint, recovery at the next start."""
        subprocess.run(
            self._as_owner(
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.directory / "data"),
                "-m",
                mode,
                "-w",
                "stop",
            ),
            check=True,
            capture_output=True,
        )

    def resume(self) -> None:
        subprocess.run(
            self._as_owner(
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.directory / "data"),
                "-o",
                self._options(),
                "-l",
                str(self.directory / "server.log"),
                "-w",
                "start",
            ),
            check=True,
            capture_output=True,
        )

    def _options(self) -> str:
        relaxed = (
            ""
            if self.durable
            else "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
        )
        return f"-p {self.port} -k {self.directory} -h 127.0.0.1 {relaxed}-c max_connections=300"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}:{quote(PASSWORD)}@127.0.0.1:{self.port}/{database}"

    def psql_url(self, database: str = "postgres") -> str:
        """The same database over the trusted socket (no password), for test plumbing."""
        return f"host={self.directory} port={self.port} user={self.user} dbname={database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.psql_url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log_text(self) -> str:
        path = self.directory / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        data = self.directory / "data"
        if (data / "postmaster.pid").exists():
            subprocess.run(
                self._as_owner(
                    str(self.bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"
                ),
                check=False,
                capture_output=True,
            )
        shutil.rmtree(self.directory, ignore_errors=True)
