"""The terminal experience, driven through the real ``turns`` command in subprocesses.

Signals detach: a command that is stopped by Ctrl-C (once or repeatedly),
SIGTERM or a closed terminal (SIGHUP) leaves its turn exactly as it is,
exits quickly without a traceback, says how to go on, and never orphans the
embedded server (its supervisor stops it).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
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

pytestmark = pytest.mark.temporal  # starts embedded dev servers through the CLI

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
    assert written[-1] == "model_call_requested", (written, path.read_text(), err)
    # The supervisor stops the embedded server once nothing uses it.
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
    # … and left it to the supervisor, which stops it once it has been idle for
    # the grace.
    assert not no_server(home)
    wait_for("the idle server to stop", lambda: no_server(home), timeout=60)


# ---------------------------------------------------------------- errors say what to do


def test_an_unreachable_temporal_address_names_itself_and_the_fix(home: Path) -> None:
    r = turns(home, "run", "hi", TEMPORAL_ADDRESS="127.0.0.1:1")
    assert r.returncode == 7, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "cannot reach Temporal at 127.0.0.1:1 (from TEMPORAL_ADDRESS)" in r.stderr
    assert "unset TEMPORAL_ADDRESS to use the embedded one" in r.stderr
    r = turns(home, "list", "--json", TEMPORAL_ADDRESS="127.0.0.1:1")
    assert r.returncode == 7
    assert json.loads(r.stdout)["exitCode"] == 7
    assert turn_files(home) == []


def test_no_worker_and_nobody_polling_says_so_within_seconds(home: Path) -> None:
    started = time.monotonic()
    r = turns(home, "run", "--no-worker", "What time is it?")
    assert r.returncode == 1, r.stderr
    assert time.monotonic() - started < 60
    assert "no worker polls task queue 'turns'" in r.stderr
    assert "turns worker" in r.stderr and "--wait-for-worker" in r.stderr
    assert turn_files(home) == []  # refused before the turn was created


def test_usage_errors_honour_json_and_mistakes_in_names_exit_2(home: Path) -> None:
    r = turns(home, "run", "--bogus", "--json")
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert doc["status"] == "error" and doc["exitCode"] == 2 and "--bogus" in doc["error"]
    assert r.stderr.count("\n") == 1
    for wrong in (("--agent", "nosuch"), ("--model", "nosuch/x")):
        r = turns(home, "run", "hi", *wrong)
        assert r.returncode == 2, (wrong, r.stderr)
        assert "nosuch" in r.stderr and "known" in r.stderr or "configured" in r.stderr
    assert turn_files(home) == []


def test_an_empty_prompt_is_refused_and_prompts_come_from_stdin_or_a_file(home: Path) -> None:
    for args, stdin in ((("run", ""), ""), (("run", "-"), "  \n"), (("run",), "")):
        r = subprocess.run(
            [sys.executable, "-m", "turnclient.cli", *args],
            cwd=home,
            env=environment(home),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert r.returncode == 2 and "the prompt is empty" in r.stderr, (args, r.stderr)
    big = "Calculate (17 + 3) * 23. " + "x" * 200_000
    r = subprocess.run(
        [sys.executable, "-m", "turnclient.cli", "run", "-", "--json"],
        cwd=home,
        env=environment(home),
        input=big,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stderr
    (path,) = turn_files(home)
    assert events(path)[0]["input"]["content"] == big
    (home / "prompt.txt").write_text("What time is it in Chicago?")
    r = turns(home, "run", "--file", "prompt.txt", "--json")
    assert r.returncode == 0, r.stderr
    assert len(turn_files(home)) == 2


def test_output_into_a_closed_pipe_ends_quietly(home: Path) -> None:
    from tests.histories import tool_turn, write_turn

    history = tool_turn(output="x" * 400_000)
    path = write_turn(home, history.events)
    for args in (("log", str(path)), ("watch", str(path.stem), "--no-follow", "--json")):
        if args[0] == "watch":
            stored = home / "storage" / "turns" / "2025" / "11" / "11"
            stored.mkdir(parents=True, exist_ok=True)
            path.replace(stored / path.name)
            path = stored / path.name
        proc = start(home, *args)
        assert proc.stdout is not None
        assert proc.stdout.readline()
        proc.stdout.close()  # the reader goes away, like `| head -1`
        assert proc.wait(timeout=TIMEOUT) == 0, args
        assert proc.stderr is not None
        assert proc.stderr.read() == "", args


def test_rejections_use_the_commands_words_and_list_what_is_pending(home: Path) -> None:
    idle = {"TURNS_SERVER_IDLE": "60"}
    r = turns(home, "run", "Save 'q' to q.txt", "--json", **idle)
    assert r.returncode == 3, r.stderr
    saving = json.loads(r.stdout)["turnId"]
    r = turns(home, "run", "Ask me for my name", "--json", **idle)
    assert r.returncode == 3, r.stderr
    asking = json.loads(r.stdout)["turnId"]
    before = {p: p.read_bytes() for p in turn_files(home)}

    r = turns(home, "approve", saving, "call_9_9", **idle)
    assert r.returncode == 6
    assert r.stderr.startswith("rejected: an approval or denial for call_9_9: ")
    assert "has no tool call call_9_9" in r.stderr
    assert f"turns approve {saving} call_0_0" in r.stderr  # what is pending, and how

    r = turns(home, "complete", saving, "call_0_0", "--text", "x", **idle)
    assert r.returncode == 6
    assert "awaits approval first: `TURNS_HOME=" in r.stderr
    assert f" turns approve {saving} call_0_0` (or deny it)" in r.stderr

    r = turns(home, "approve", asking, "call_0_0", **idle)
    assert r.returncode == 6
    assert (
        f"it awaits its result: `TURNS_HOME={home} turns complete {asking} call_0_0 --text"
        in r.stderr
    )
    assert "permission_decision" not in r.stderr
    # The suspended hint names the same flag as the README (--text).
    r = turns(home, "show", asking)
    assert {p: p.read_bytes() for p in turn_files(home)} == before  # nothing changed

    r = turns(home, "cancel", "last", "--json")  # idle grace 0: the server stops after
    assert r.returncode == 5, r.stderr
    assert json.loads(r.stdout)["turnId"] == asking


def test_a_decision_for_an_async_call_that_needs_none_says_what_the_call_awaits(
    home: Path,
) -> None:
    """An approval for an async call is refused in words that fit the call: one
    with its result does not await it, and one approved already did need approval."""
    from tests.histories import History, created, write_turn

    h = History(created())
    h.request()
    h.complete("", [("c1", "run_job", {}), ("c2", "run_job", {}), ("c3", "run_job", {})])
    h.invoke("c1")
    h.require("c2")
    h.resolve("c2", "allow")
    h.invoke("c2")
    h.invoke("c3")
    h.result("c1", "done", source="async")
    h.suspend()
    stored = home / "storage" / "turns" / "2025" / "11" / "11"
    stored.mkdir(parents=True)
    path = write_turn(stored, h.events)
    before = path.read_bytes()

    r = turns(home, "approve", h.turn_id, "c1")
    assert r.returncode == 6, r.stderr
    assert "already has a result" in r.stderr, r.stderr
    assert f"complete {h.turn_id} c1" not in r.stderr, r.stderr

    r = turns(home, "approve", h.turn_id, "c2")
    assert r.returncode == 6, r.stderr
    assert "run_job (c2) was already approved; it awaits its result: " in r.stderr, r.stderr
    assert "needs no approval" not in r.stderr, r.stderr

    r = turns(home, "approve", h.turn_id, "c3")
    assert r.returncode == 6, r.stderr
    assert (
        f"needs no approval, it awaits its result: `TURNS_HOME={home} turns complete {h.turn_id} c3"
        in r.stderr
    )
    assert path.read_bytes() == before


# ---------------------------------------------------------------- finding turns


def test_last_prefixes_and_the_work_dir_found_upward(tmp_path: Path) -> None:
    from tests.histories import simple_turn, tool_turn, write_turn

    project = tmp_path / "project"
    stored = project / ".turns" / "storage" / "turns" / "2025" / "11" / "11"
    stored.mkdir(parents=True)
    older = simple_turn("2025-11-11T04-36-29Z-0001234-000").events
    newer = tool_turn("2025-11-11T05-00-00Z-0000001-000").events
    write_turn(stored, older)
    write_turn(stored, newer)
    deep = project / "src" / "pkg"
    deep.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "turnclient.cli", *args],
            cwd=deep,
            env={**env, "NO_COLOR": "1"},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )

    r = run("show", "last", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["turnId"] == "2025-11-11T05-00-00Z-0000001-000"
    r = run("state", "2025-11-11T04", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["definition"]["turnId"] == "2025-11-11T04-36-29Z-0001234-000"
    r = run("log", "2025-11-11T05")
    assert (
        r.returncode == 0
        and r.stdout.encode() == (stored / f"{newer[0].turn_id}.jsonl").read_bytes()
    )
    r = run("show", "2025")
    assert r.returncode == 2 and "is the start of 2 turns (newest first: " in r.stderr
    assert r.stderr.index(newer[0].turn_id) < r.stderr.index(older[0].turn_id)
    # validate takes a turn like every other command: `last`, a prefix, an id
    for given, turn in (("last", newer), ("2025-11-11T04", older), (older[0].turn_id, older)):
        r = run("validate", given, "--json")
        assert r.returncode == 0, (given, r.stdout, r.stderr)
        assert json.loads(r.stdout) == {"valid": [turn[0].turn_id], "invalid": []}, given
    r = run("validate", "2024")
    assert r.returncode == 1 and "no turn in" in r.stdout, r.stdout
    r = run("show", "nosuch")
    assert r.returncode == 2
    assert "by its id, `last` (the newest) or a unique prefix of its id" in r.stderr
    r = run("show", "2024")
    assert r.returncode == 2 and "no turn in" in r.stderr and "starts with '2024'" in r.stderr
    r = run("show", "../etc")
    assert r.returncode == 2
    assert not (deep / ".turns").exists()  # nothing was created in the subdirectory


def test_a_misspelled_command_gets_a_suggestion_and_help_lists_common_commands_first(
    home: Path,
) -> None:
    r = turns(home, "vaildate", "last")
    assert r.returncode == 2
    assert r.stderr == "turns: unknown command 'vaildate' (did you mean `turns validate`?)\n"
    r = turns(home, "xyzzy")
    assert r.returncode == 2 and "unknown command 'xyzzy' (see `turns --help`)" in r.stderr
    r = turns(home, "--help")
    assert r.returncode == 0
    listed = [
        line.split()[0]
        for line in r.stdout.split("COMMAND\n", 1)[1].split("\n\n", 1)[0].splitlines()
        if line.startswith("    ") and not line.startswith("     ")
    ]
    assert listed[:4] == ["run", "chat", "approve", "deny"], listed
    assert listed.index("recover") < listed.index("show") < listed.index("repair")
    assert listed.index("repair") < listed.index("db") < listed.index("export")
    # the work dir default, as the README says
    assert "nearest .turns/ here or above" in r.stdout


def test_the_readmes_suspended_sample_is_what_run_prints(home: Path) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    command = """$ turns run "Save 'hello' to notes.txt"\n"""
    sample = readme.split(command, 1)[1].split("```", 1)[0].splitlines()
    shown_id = sample[0].split()[1]
    r = turns(home, "run", "Save 'hello' to notes.txt")
    assert r.returncode == 3, r.stderr
    turn_id = r.stdout.split()[1]
    printed = r.stdout.replace(turn_id, shown_id).replace(f"TURNS_HOME={home} turns", "turns")
    assert printed.splitlines() == sample


def test_log_prints_only_turn_files(home: Path) -> None:
    r = turns(home, "log", "/etc/passwd")
    assert r.returncode == 2 and "is not a turn file" in r.stderr and r.stdout == ""
    fifo = home / "pipe.jsonl"
    os.mkfifo(fifo)
    r = turns(home, "log", str(fifo))  # would block forever if it were opened
    assert r.returncode == 2 and "not a regular file" in r.stderr


# ---------------------------------------------------------------- small things


def test_version_completion_and_summaries(home: Path) -> None:
    from tests.histories import tool_turn, write_turn

    r = turns(home, "--version")
    assert r.returncode == 0 and r.stdout.startswith("turns ")
    script = turns(home, "completion", "bash").stdout
    probe = (
        f"{script}\nCOMP_WORDS=(turns ap); COMP_CWORD=1; _turns; echo ${{COMPREPLY[@]}};"
        "COMP_WORDS=(turns run --ag); COMP_CWORD=2; _turns; echo ${COMPREPLY[@]}"
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["approve", "--agent"]
    assert turns(home, "completion", "zsh").stdout.startswith("autoload -U +X bashcompinit")

    path = write_turn(home, tool_turn().events)
    r = turns(home, "validate", str(home))
    assert r.returncode == 0 and r.stdout == "all 1 turn file valid\n"
    # a copy outside the work dir: repair must not suggest `turns recover <file name>`
    copy = home / "copy" / path.name
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes()[:-20])
    r = turns(home, "repair", str(copy))
    assert r.returncode == 0, r.stderr
    assert "turns recover" not in r.stdout.replace("`turns recover` continues", "")
    assert "not " in r.stdout and "copy of the turn" in r.stdout


def test_colour_only_on_a_terminal_and_never_with_no_color(home: Path) -> None:
    import pty

    def on_a_terminal(extra: dict[str, str]) -> str:
        env = environment(home, **extra)
        if "NO_COLOR" in env and extra.get("NO_COLOR") is None:
            del env["NO_COLOR"]
        leader, follower = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "turnclient.cli", "run", "Calculate 6 * 7"],
            cwd=home,
            env=env,
            stdin=follower,
            stdout=follower,
            stderr=follower,
        )
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        os.close(leader)
        assert proc.wait(timeout=TIMEOUT) == 0
        return out.decode(errors="replace")

    coloured = on_a_terminal({})
    assert "\x1b[32m✔ completed" in coloured
    plain = on_a_terminal({"NO_COLOR": "1"})
    assert "\x1b[" not in plain and "✔ completed" in plain
    piped = turns(home, "run", "Calculate 6 * 7", NO_COLOR="")
    assert "\x1b[" not in piped.stdout


def test_inspect_wire_shows_the_provider_body_with_the_key_redacted(home: Path) -> None:
    from tests.histories import tool_turn, write_turn

    (home / "turns.toml").write_text(
        '[providers.openai]\nkind = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "TEST_SECRET_KEY"\n'
    )
    history = tool_turn()
    stored = home / "storage" / "turns" / "2025" / "11" / "11"
    stored.mkdir(parents=True)
    write_turn(stored, history.events)
    r = turns(home, "inspect", history.turn_id, "--wire", "--json", TEST_SECRET_KEY="sk-TOPSECRET")
    assert r.returncode == 0, r.stderr
    wire = json.loads(r.stdout)
    assert wire["url"] == "http://127.0.0.1:9/v1/chat/completions"
    assert wire["headers"]["authorization"] == "<redacted>"
    assert "sk-TOPSECRET" not in r.stdout
    assert wire["body"]["model"] == history.first.agent.resolved.model.model
    assert wire["body"]["messages"][-1]["role"] == "tool"
    r = turns(home, "inspect", history.turn_id)
    assert "provider-neutral" in r.stdout and "exact" not in r.stdout


def test_dev_serves_on_the_port_asked_for(home: Path) -> None:
    from turnclient.cli.serving import DEV_PORT
    from turnclient.runtime.embedded import free_port

    assert DEV_PORT == 7233
    port = free_port()
    proc = start(home, "dev", "--no-worker", "--json", "--port", str(port))
    assert proc.stdout is not None
    text = ""
    for line in proc.stdout:
        text += line
        if line.startswith("}"):
            break
    try:
        assert json.loads(text)["address"] == f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    wait_for("the server to stop", lambda: no_server(home), timeout=30)


def _time_wait_on(port: int) -> None:
    """Leave a connection of ``port`` in TIME_WAIT, as a server that just stopped does."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        served, _ = listener.accept()
        served.close()  # the side that closes first keeps TIME_WAIT on the port
        client.close()
    with socket.socket() as probe:
        with pytest.raises(OSError):  # without SO_REUSEADDR the port looks taken
            probe.bind(("127.0.0.1", port))


def test_dev_keeps_its_port_when_only_time_wait_connections_remain(home: Path) -> None:
    from turnclient.runtime.embedded import free_port

    port = free_port()
    _time_wait_on(port)
    proc = start(home, "dev", "--no-worker", "--json", "--port", str(port))
    assert proc.stdout is not None
    text = ""
    for line in proc.stdout:
        text += line
        if line.startswith("}"):
            break
    try:
        assert json.loads(text)["address"] == f"127.0.0.1:{port}", text
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert "is taken" not in err
    wait_for("the server to stop", lambda: no_server(home), timeout=30)


def test_a_server_that_cannot_write_its_database_is_named_with_the_fix_at_once(
    home: Path,
) -> None:
    """The embedded server answers but cannot store anything (its dev.db on a mount
    made read-only under it: "shard status unknown", every write retried as if the
    server restarted): commands say so in one line and exit."""
    db = home / "temporal" / "dev.db"
    dev = start(home, "dev", "--no-worker", "--json")
    assert dev.stdout is not None
    text = ""
    for line in dev.stdout:
        text += line
        if line.startswith("}"):
            break
    try:
        assert json.loads(text)["embedded"] is True
        pid = json.loads((home / "temporal" / "server.json").read_text())["pid"]
        r = turns(home, "run", "Save 'x' to x.txt", "--json")
        assert r.returncode == 3, r.stderr
        suspended = json.loads(r.stdout)["turnId"]
        subprocess.run(["mount", "--bind", str(db), str(db)], check=True)
        subprocess.run(["mount", "-o", "remount,ro,bind", str(db)], check=True)
        for args in (("run", "What time is it in Tokyo?"), ("recover", suspended)):
            began = time.monotonic()
            r = turns(home, *args)
            assert r.returncode == 7, (args, r.stdout, r.stderr)
            assert time.monotonic() - began < 60, args
            [message] = r.stderr.strip().splitlines()
            assert "answers but cannot store anything" in message, message
            assert "(or its folder) is not writable. Make it writable" in message
            assert f"`kill {pid}`" in message
    finally:
        subprocess.run(["umount", str(db)], check=False)
        dev.send_signal(signal.SIGTERM)
        dev.communicate(timeout=60)
    wait_for("the server to stop", lambda: no_server(home), timeout=30)


def test_recover_and_watch_say_what_they_wait_for_after_an_interrupted_tool(home: Path) -> None:
    """Ctrl-C while a sync tool runs: the tool is recorded as interrupted only once
    its heartbeat is missed (30 s); until then the commands say what they wait for."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Event, Thread

    asked, release = Event(), Event()

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            asked.set()
            release.wait(120)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/slow"
    dev = start(home, "dev", "--no-worker", "--json")  # one server for every command
    commands: list[subprocess.Popen[str]] = []
    try:
        assert dev.stdout is not None
        for line in dev.stdout:
            if line.startswith("}"):
                break
        r = turns(home, "run", f"Fetch {url}", "--json")
        assert r.returncode == 3, r.stderr
        turn_id = json.loads(r.stdout)["turnId"]
        approving = start(home, "approve", turn_id, "call_0_0")
        commands.append(approving)
        wait_for("the tool to run", asked.is_set)
        approving.send_signal(signal.SIGINT)
        approving.communicate(timeout=30)
        for args in (("recover", turn_id), ("watch", turn_id, "--no-worker")):
            proc = start(home, *args)
            commands.append(proc)
            assert proc.stdout is not None
            seen = ""

            def said(proc: subprocess.Popen[str] = proc) -> bool:
                nonlocal seen
                ready, _, _ = select.select([proc.stdout], [], [], 0.05)
                if ready:
                    seen += os.read(proc.stdout.fileno(), 4096).decode()  # type: ignore[union-attr]
                return "… waiting for http_get (call_0_0), running since" in seen

            wait_for(f"{args[0]} to say what it waits for", said, timeout=15)
            assert "recorded as interrupted once its heartbeat is missed (within 30 s" in seen
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
    finally:
        release.set()
        for proc in commands:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        server.shutdown()
        dev.send_signal(signal.SIGTERM)
        dev.communicate(timeout=60)
    wait_for("the server to stop", lambda: no_server(home), timeout=60)


def test_live_output_keeps_the_files_order_when_deltas_overtake_it() -> None:
    import io

    from tests.histories import History, created
    from turnclient.cli.render import StreamRenderer
    from turncore.events import TextDelta

    h = History(created(human_available=False))
    h.request()
    h.complete("Saving.", [("c1", "write_file", {"path": "q.txt"})])
    h.require("c1")
    h.resolve("c1", "deny", source="human_unavailable")
    h.result("c1", "denied", is_error=True, source="runtime")
    second = h.request()
    out = io.StringIO()
    renderer = StreamRenderer(out)
    for e in h.events[:-3]:
        renderer.feed(e)
    # Model call 1 streams before the watcher has read the denial it answers.
    renderer.feed(TextDelta(turn_id=h.turn_id, model_call_index=1, delta="I could not "))
    for e in h.events[-3:]:
        renderer.feed(e)
    renderer.feed(TextDelta(turn_id=h.turn_id, model_call_index=1, delta="save it."))
    renderer.close()
    text = out.getvalue()
    denial = text.index("✗ write_file (c1) denied because no human was available to approve it")
    assert (
        denial
        < text.index(f"── model call {second.model_call_index}")
        < text.index("I could not save it.")
    )


def test_watch_detaches_on_ctrl_c(home: Path) -> None:
    idle = {"TURNS_SERVER_IDLE": "60"}
    r = turns(home, "run", "Ask me for my name", "--json", **idle)
    assert r.returncode == 3, r.stderr
    asking = json.loads(r.stdout)["turnId"]
    proc = start(home, "watch", asking, **idle)
    assert proc.stdout is not None
    wait_for("watch to print the history", lambda: proc.stdout.readline().startswith("‖"))
    proc.send_signal(signal.SIGINT)
    last = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - last < 2.0
    assert proc.returncode == 130 and "Traceback" not in err
    assert f"detached; turn {asking} is left as it is" in err
    r = turns(home, "cancel", asking)  # idle grace 0: the last command stops the server
    assert r.returncode == 5, r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_chat_stops_at_its_prompt_and_says_how_to_continue(home: Path, sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnclient.cli", "chat"],
        cwd=home,
        env=environment(home),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write("Calculate 2 + 3\n")
    proc.stdin.flush()  # stdin stays open: the chat waits at its prompt for more

    assert proc.stdout is not None
    seen = ""

    def prompting_again() -> bool:
        # The prompt has no newline: read what is there, a chunk at a time.
        nonlocal seen
        ready, _, _ = select.select([proc.stdout], [], [], 0.05)
        if ready:
            seen += os.read(proc.stdout.fileno(), 4096).decode()
        return "2 + 3 = 5" in seen and seen.endswith("you> ")

    wait_for("the chat to answer and prompt again", prompting_again)
    (path,) = turn_files(home)
    proc.send_signal(sig)
    last = time.monotonic()
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - last < 2.0
    assert proc.returncode == {signal.SIGINT: 130, signal.SIGHUP: 129}[sig], err
    assert "Traceback" not in err and out.strip() == ""
    assert (
        f"{sig.name}: stopped; continue this conversation with: "
        f"TURNS_HOME={home} turns chat --continue {path.stem}" in err
    )
    assert events(path)[-1]["type"] == "turn_completed"  # nothing was cancelled or added
    # The supervisor stops the embedded server once nothing uses it.
    wait_for("the idle server to stop", lambda: no_server(home), timeout=30)


def test_ctrl_c_at_a_chat_approval_leaves_the_turn_there_and_chat_continue_asks_again(
    home: Path,
) -> None:
    dev = start(home, "dev", "--no-worker", "--json")  # one server for both chats
    try:
        assert dev.stdout is not None
        for line in dev.stdout:
            if line.startswith("}"):
                break
        proc = subprocess.Popen(
            [sys.executable, "-m", "turnclient.cli", "chat"],
            cwd=home,
            env=environment(home),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("Save 'hi' to z.txt\n")
        proc.stdin.flush()
        seen = ""

        def asking() -> bool:
            nonlocal seen
            ready, _, _ = select.select([proc.stdout], [], [], 0.05)
            if ready:
                seen += os.read(proc.stdout.fileno(), 4096).decode()  # type: ignore[union-attr]
            return seen.endswith("? [y/n/reason] ")

        wait_for("the approval prompt", asking)
        (path,) = turn_files(home)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)  # stdin stays open: the chat must not read an end of input
        out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
        proc.stdin.close()
        assert proc.returncode == 130, err
        assert (seen + out).endswith("? [y/n/reason] \n")  # the message starts on a line of its own
        again = f"TURNS_HOME={home} turns chat --continue {path.stem}"
        assert f"SIGINT: stopped; the turn waits for your answer; pick it up with: {again}" in err
        assert events(path)[-1]["type"] == "turn_suspended"  # left at the approval

        # The hint works: the chat asks the same question again, and goes on.
        r = subprocess.run(
            ["bash", "-c", again],
            cwd=home,
            env={
                **environment(home),
                "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            },
            input="y\n",
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert "allow write_file" in r.stdout and "Wrote" in r.stdout, r.stdout
        assert (home / "workspace" / "z.txt").read_text() == "hi\n"
        assert events(path)[-1]["type"] == "turn_completed"
    finally:
        dev.send_signal(signal.SIGTERM)
        dev.communicate(timeout=60)
    wait_for("the server to stop", lambda: no_server(home), timeout=60)
