"""The terminal experience, driven through the real ``turns`` command in subprocesses.

Signals detach: a command that is stopped by Ctrl-C (once or repeatedly),
SIGTERM or a closed terminal (SIGHUP) leaves its turn exactly as it is,
exits quickly without a traceback, says how to go on, and never orphans the
embedded server (its idle watchdog stops it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.test_cli_turns import no_server
from tests.test_embedded import kill_stragglers

TIMEOUT = 120


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    work = tmp_path / "home"
    work.mkdir()
    yield work
    assert kill_stragglers(work) == [], "a command left its embedded server running"


def environment(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))}
    env.update({"TURNS_HOME": str(home), "NO_COLOR": "1", "TURNS_SERVER_IDLE": "0"})
    env.update(extra)
    return env


def turns(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnclient.cli", *args],
        cwd=home,
        env=environment(home, **env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def start(home: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "turnclient.cli", *args],
        cwd=home,
        env=environment(home, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def turn_files(home: Path) -> list[Path]:
    return sorted(home.glob("storage/turns/*/*/*/*.jsonl"))


def events(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


SLOW_AGENT = """
default_agent = "slow"

[agents.slow]
system_prompt = "Answer slowly."
model = "scripted/slow.json"
"""


def slow_home(home: Path, delay: float) -> None:
    (home / "turns.toml").write_text(SLOW_AGENT)
    script = {"delay": delay, "responses": [{"text": "one two three four five six"}]}
    (home / "slow.json").write_text(json.dumps(script))


def first_model_call_started(home: Path) -> Path | None:
    for path in turn_files(home):
        if any(e["type"] == "model_call_requested" for e in events(path)):
            return path
    return None


@pytest.mark.parametrize(
    "signals",
    [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM,), (signal.SIGHUP,)],
    ids=["ctrl-c-twice", "sigterm", "sighup"],
)
def test_a_signal_detaches_quickly_and_leaves_the_turn_as_it_is(
    home: Path, signals: tuple[signal.Signals, ...]
) -> None:
    slow_home(home, delay=2.0)
    proc = start(home, "run", "Count to six", TURNS_SERVER_IDLE="1")
    path = wait_for("the model call to start", lambda: first_model_call_started(home))
    for i, sig in enumerate(signals):
        if i:
            time.sleep(0.1)
        proc.send_signal(sig)
    last = time.monotonic()
    out, err = proc.communicate(timeout=30)
    took = time.monotonic() - last
    assert took < 2.0, f"exited {took:.2f}s after the last signal"
    turn_id = path.stem
    assert "Traceback" not in err and "Error" not in err.replace("rror:", ""), err
    assert f"detached; turn {turn_id} is left as it is" in err
    assert f"turns recover {turn_id}" in err and f"turns cancel {turn_id}" in err
    assert (
        proc.returncode
        == {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}[signals[-1]]
    )
    written = [e["type"] for e in events(path)]
    assert written[-1] == "model_call_requested", written  # nothing recorded, nothing cancelled
    # The watchdog stops the embedded server once nothing uses it.
    wait_for("the idle server to stop", lambda: no_server(home), timeout=30)

    # The printed next step works: recover finishes the turn.
    r = turns(home, "recover", turn_id, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "completed"
    kinds = [e["type"] for e in events(path)]
    assert "turn_cancelled" not in kinds and kinds[-1] == "turn_completed"


def test_the_embedded_server_outlives_a_command_by_its_idle_grace(home: Path) -> None:
    r = turns(home, "run", "What time is it in Chicago?", "--json", TURNS_SERVER_IDLE="8")
    assert r.returncode == 0, r.stderr
    server = json.loads((home / "temporal" / "server.json").read_text())
    r = turns(home, "run", "Calculate 6 * 7", "--json", TURNS_SERVER_IDLE="8")
    assert r.returncode == 0, r.stderr
    # The second command reused the idle server instead of starting another …
    assert json.loads((home / "temporal" / "server.json").read_text())["pid"] == server["pid"]
    # … and left it to the watchdog, which stops it once it has been idle for
    # the grace.
    assert not no_server(home)
    wait_for("the idle server to stop", lambda: no_server(home), timeout=60)
