"""`turns dev` and `turns worker` notice their embedded server dying (issue 9 §6).

The server is SIGKILLed under a running `turns worker`: the command starts a
new one on the same database (under the lock, so never two), serves it, and
a `turns run --no-worker` afterwards is served by that worker instead of
hanging.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from tests.test_cli_turns import environment, home, kill_stragglers  # noqa: F401
from turnclient.runtime.embedded import is_server_process, servers_on

pytestmark = pytest.mark.temporal  # starts embedded dev servers through the CLI

ROOT = Path(__file__).resolve().parent.parent


def _next_json(stream: IO[str]) -> dict[str, object]:
    text = ""
    for line in stream:
        if not text and line != "{\n":
            continue  # the SDK core's own log lines (retries against the dead port)
        text += line
        if line.startswith("}"):
            try:
                return json.loads(text)  # type: ignore[no-any-return]
            except ValueError:
                raise AssertionError(f"not JSON: {text!r}") from None
    raise AssertionError(f"the command ended before printing JSON: {text!r}")


def _serve(work: Path, *args: str) -> subprocess.Popen[str]:
    """``turns ARGS --json`` in the background, on the work dir ``work``."""
    return subprocess.Popen(
        [sys.executable, "-m", "turnclient.cli", *args, "--json"],
        cwd=work.parent,
        env=environment(work),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, as a service manager stops it; killed only if it outlives a minute."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("command", [["worker"], ["dev", "--ui-port", "0"]])
def test_a_killed_embedded_server_is_replaced_on_the_same_database(
    home: Path,  # noqa: F811
    command: list[str],
) -> None:
    home.mkdir(parents=True)
    proc = _serve(home, *command)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        first = _next_json(proc.stdout)
        state = json.loads((home / "temporal" / "server.json").read_text())
        db = state["db"]
        os.kill(state["pid"], signal.SIGKILL)
        second = _next_json(proc.stdout)  # ready again, on a new server
        if command[0] == "dev":  # turns dev keeps its port across a restart of the server
            assert second["address"] == first["address"]
        else:
            assert second["address"] != first["address"]
        assert servers_on(db) and len(servers_on(db)) == 1  # one server per database
        new = json.loads((home / "temporal" / "server.json").read_text())
        assert new["pid"] != state["pid"] and is_server_process(new["pid"], db)
        r = subprocess.run(
            [sys.executable, "-m", "turnclient.cli", "run", "--no-worker", "What time is it?"],
            cwd=home.parent,
            env=environment(home),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert "✔ completed" in r.stdout
    finally:
        _stop(proc)
    err = proc.stderr.read()
    assert proc.returncode == 0, err
    assert "embedded Temporal server" in err and "died" in err
    deadline = time.monotonic() + 30
    while servers_on(db) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert servers_on(db) == []


def test_turns_dev_keeps_the_port_it_fell_back_to_across_a_restart(
    home: Path,  # noqa: F811
) -> None:
    """Seen in a full suite run: another command held `turns dev`'s preferred
    port, so the first server took a free one; when that server died, its
    replacement asked for the preferred port again, found it still taken and
    took yet another, so every client of the first address lost the server.
    The replacement now asks for the ports the command was serving (Temporal
    Web's too)."""
    home.mkdir(parents=True)
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held,
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held_ui,
    ):
        for s in (held, held_ui):
            s.bind(("127.0.0.1", 0))
            s.listen()
        wanted, wanted_ui = held.getsockname()[1], held_ui.getsockname()[1]
        proc = _serve(home, "dev", "--no-web", "--port", str(wanted), "--ui-port", str(wanted_ui))
        assert proc.stdout is not None and proc.stderr is not None
        try:
            first = _next_json(proc.stdout)
            # Both taken: free ones instead.
            assert first["address"] != f"127.0.0.1:{wanted}"
            assert first["uiUrl"] != f"http://127.0.0.1:{wanted_ui}"
            state = json.loads((home / "temporal" / "server.json").read_text())
            os.kill(state["pid"], signal.SIGKILL)
            second = _next_json(proc.stdout)  # ready again, on a new server
            assert (second["address"], second["uiUrl"]) == (first["address"], first["uiUrl"])
        finally:
            _stop(proc)
    assert proc.returncode == 0, proc.stderr.read()
