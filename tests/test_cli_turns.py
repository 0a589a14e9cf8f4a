"""The ``turns`` CLI end to end, each command a separate process on the embedded default.

No TEMPORAL_ADDRESS: every command that needs Temporal starts (or shares)
the dev server on ``TURNS_HOME/temporal/dev.db`` and runs its own worker.
The first test lets each command start and stop its own server, as a user's
first session does; the others keep one server up with a background
``turns dev --no-worker`` (a user of the server like any other command), so
the commands under test reuse it. A fixture kills any server left behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey

from tests.histories import TURN_ID, created, to_line, tool_turn
from tests.test_embedded import kill_stragglers
from turnclient.cli import main
from turnclient.lib.api import start_details
from turnclient.runtime.embedded import servers_on
from turncore.ids import turn_path

pytestmark = pytest.mark.temporal  # starts its own dev servers

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    work = tmp_path / "home"
    yield work
    assert kill_stragglers(work) == [], "a command left its embedded server running"


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    env.update({"TURNS_HOME": str(home), "PYTHONPATH": str(ROOT), "NO_COLOR": "1"})
    return env


def turns(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnclient.cli", *args],
        cwd=home.parent,
        env=environment(home) if env is None else env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def as_json(r: subprocess.CompletedProcess[str]) -> Any:
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {r.returncode}): {r.stdout!r} {r.stderr!r}") from None


def turn_file(home: Path, turn_id: str) -> Path:
    (found,) = home.glob(f"storage/turns/*/*/*/{turn_id}.jsonl")
    return found


def lines(home: Path, turn_id: str) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in turn_file(home, turn_id).read_bytes().splitlines()]


def no_server(home: Path) -> bool:
    return (
        servers_on(str(home.absolute() / "temporal" / "dev.db")) == []
        and not (home / "temporal" / "server.json").exists()
    )


async def describe(home: Path, turn_id: str) -> dict[str, Any]:
    """What Temporal Web shows of the turn: its memo and search attributes."""
    server = json.loads((home / "temporal" / "server.json").read_text())
    client = await Client.connect(f"127.0.0.1:{server['port']}")
    desc = await client.get_workflow_handle(turn_id).describe()
    attributes = {
        name: desc.typed_search_attributes.get(SearchAttributeKey.for_keyword(name))
        for name in ("TurnStatus", "TurnAgent", "TurnModel", "TurnSession", "TurnPendingInputs")
    }
    return {
        "memo": await desc.memo(),
        "attributes": {k: v for k, v in attributes.items() if v is not None},
    }


def test_a_started_workflow_shows_its_input_and_running_status() -> None:
    definition = created(TURN_ID, input="Summarise the quarterly report, please", session_id="s-1")
    details = start_details(definition)
    assert details["memo"] == {
        "turnId": TURN_ID,
        "input": "Summarise the quarterly report, please",
        "agent": definition.agent.resolved.agent_id,
        "model": "openai/gpt-4.1",
        "session": "s-1",
    }
    pairs = {p.key.name: p.value for p in details["search_attributes"]}
    assert pairs["TurnStatus"] == "running"
    assert pairs["TurnSession"] == "s-1" and pairs["TurnModel"] == "openai/gpt-4.1"


@pytest.fixture
def held(home: Path) -> Iterator[Path]:
    """Keep the work dir's embedded server up for the whole test."""
    home.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnclient.cli", "dev", "--no-worker", "--json"],
        cwd=home.parent,
        env=environment(home),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    text = ""
    for line in proc.stdout:
        text += line
        if line.startswith("}"):
            break
    info = json.loads(text)
    assert info["embedded"] is True and info["worker"] is False and info["uiUrl"]
    try:
        yield home
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert no_server(home)


def test_demo_then_approval_across_processes_with_a_server_per_command(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The README's first command, on a fresh work dir: a real tool round trip.
    r = turns(home, "run", "What time is it in Chicago?")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("turn ")
    assert '→ clock (call_0_0) {"timeZone":"America/Chicago"}' in out
    assert "← clock (call_0_0) ok:" in out
    assert "in Chicago (America/Chicago, C" in out and "✔ completed" in out
    demo_id = out.split()[1]
    results = [e for e in lines(home, demo_id) if e["type"] == "tool_result"]
    final = lines(home, demo_id)[-1]
    assert final["type"] == "turn_completed"
    display = results[0]["result"]["output"]["display"]
    assert display in final["output"]["content"][0]["text"]  # the answer quotes the tool
    assert no_server(home)  # the command stopped the server it started

    # A turn that needs approval suspends; the server goes, the workflow stays.
    r = turns(home, "run", "Save 'hello from the test' to notes.txt", "--json")
    assert r.returncode == 3, r.stderr
    suspended = as_json(r)
    turn_id = suspended["turnId"]
    assert suspended["status"] == "suspended"
    assert [p["toolCallId"] for p in suspended["pendingPermissions"]] == ["call_0_0"]
    assert suspended["pendingAsyncTools"] == [] and "usage" in suspended
    assert no_server(home)

    # Visibility finds it through the search attributes.
    r = turns(home, "list", "--status", "suspended", "--json")
    assert r.returncode == 0, r.stderr
    listed = as_json(r)
    assert [t["turnId"] for t in listed] == [turn_id]
    assert listed[0]["status"] == "suspended"
    assert listed[0]["agent"] == "demo" and listed[0]["model"] == "scripted/demo"
    assert listed[0]["pendingInputs"] == ["permission:call_0_0"]

    # A separate process approves; the turn completes.
    r = turns(home, "approve", turn_id, "call_0_0")
    assert r.returncode == 0, r.stderr
    assert "✓ write_file (call_0_0) allowed by a human" in r.stdout
    assert "Wrote 20 bytes to notes.txt." in r.stdout
    assert (home / "workspace" / "notes.txt").read_text() == "hello from the test\n"
    assert no_server(home)

    # A second approval is rejected and changes nothing.
    before = turn_file(home, turn_id).read_bytes()
    r = turns(home, "approve", turn_id, "call_0_0", "--json")
    assert r.returncode == 6
    assert as_json(r)["status"] == "rejected" and "already ended" in as_json(r)["error"]
    assert len(r.stderr.strip().splitlines()) == 1
    assert turn_file(home, turn_id).read_bytes() == before

    # File commands read the same turn (in process: they never touch Temporal).
    def cli(*args: str) -> tuple[int, str]:
        code = main(list(args))
        return code, capsys.readouterr().out

    monkeypatch.setenv("TURNS_HOME", str(home))
    code, out = cli("show", turn_id)
    assert code == 0
    assert "permission  required · allowed by human" in out
    assert "outcome  completed" in out
    code, out = cli("show", turn_id, "--json")
    shown = json.loads(out)
    assert shown["status"] == "completed" and shown["turnId"] == turn_id
    assert json.loads(cli("state", turn_id, "--json")[1]) == shown["state"]
    assert json.loads(cli("log", turn_id, "--json")[1]) == lines(home, turn_id)
    assert cli("log", turn_id)[1].encode() == turn_file(home, turn_id).read_bytes()
    code, out = cli("inspect", turn_id, "--call", "1", "--json")
    request = json.loads(out)
    assert request["modelCallIndex"] == 1
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "tool"]
    assert request["messages"][2]["content"][0]["output"]["value"]["path"] == "notes.txt"
    assert no_server(home)


def test_deny_complete_progress_cancel_and_rejections(held: Path) -> None:
    home = held
    # deny, with a reason the model sees
    r = turns(home, "run", "Fetch https://example.test/", "--json")
    assert r.returncode == 3, r.stderr
    fetch = as_json(r)["turnId"]
    r = turns(home, "deny", fetch, "call_0_0", "--reason", "no network in tests", "--json")
    assert r.returncode == 0, r.stderr
    denied = as_json(r)
    assert denied["status"] == "completed" and denied["turnId"] == fetch
    assert "no network in tests" in denied["output"]["content"][0]["text"]
    resolved = next(e for e in lines(home, fetch) if e["type"] == "tool_permission_resolved")
    assert (resolved["decision"], resolved["reason"]) == ("deny", "no network in tests")

    # an async tool: progress keeps it suspended (accepted: exit 0), complete answers it
    r = turns(home, "run", "Ask me for my name", "--json")
    assert r.returncode == 3, r.stderr
    ask = as_json(r)
    asked = ask["turnId"]
    assert [a["toolName"] for a in ask["pendingAsyncTools"]] == ["ask_human"]
    described = asyncio.run(describe(home, asked))
    assert described["memo"]["input"] == "Ask me for my name"
    assert described["attributes"] == {
        "TurnStatus": "suspended",
        "TurnAgent": "demo",
        "TurnModel": "scripted/demo",
        "TurnPendingInputs": "async:call_0_0",
    }
    r = turns(home, "progress", asked, "call_0_0", "--data", '{"typing": true}', "--json")
    assert r.returncode == 0, r.stderr
    assert as_json(r)["status"] == "suspended"
    before = turn_file(home, asked).read_bytes()
    for bad in (
        ("progress", asked, "call_9_9", "--data", "1"),  # no such call
        ("approve", asked, "call_0_0"),  # an async call needs no approval
    ):
        r = turns(home, *bad, "--json")
        assert r.returncode == 6, (bad, r.stderr)
        assert as_json(r)["status"] == "rejected"
        assert r.stderr.startswith("rejected: ") and r.stderr.count("\n") == 1
    r = turns(home, "complete", asked, "call_0_0", "--output", "not json")
    assert r.returncode == 2 and "is not JSON" in r.stderr
    # Values no turn may hold: one line saying why, exit 2, never a traceback.
    (home / "deep.json").write_text("[" * 129 + "]" * 129)
    (home / "deeper.json").write_text("[" * 5000 + "]" * 5000)
    for bad, why in (
        (("--data", f"@{home / 'deep.json'}"), "nested deeper than 128 levels"),
        (("--data", f"@{home / 'deeper.json'}"), "is not JSON: depth limit exceeded"),
        (("--data", '{"n": 123456789012345678901234567890}'), "safe integer range"),
        (("--data", '"\\ud800"'), "is not JSON"),
    ):
        r = turns(home, "progress", asked, "call_0_0", *bad)
        assert r.returncode == 2, (bad, r.stderr)
        assert why in r.stderr and r.stderr.count("\n") == 1, (bad, r.stderr)
    assert turn_file(home, asked).read_bytes() == before  # rejections change nothing

    # a late watcher sees everything once while another process completes the turn
    watcher = subprocess.Popen(
        [sys.executable, "-m", "turnclient.cli", "watch", asked, "--json"],
        cwd=home.parent,
        env=environment(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    r = turns(home, "complete", asked, "call_0_0", "--output", '"Ada"', "--json")
    assert r.returncode == 0, r.stderr
    done = as_json(r)
    assert done["output"]["content"][0]["text"] == "You answered: Ada"
    out, err = watcher.communicate(timeout=TIMEOUT)
    assert watcher.returncode == 0, err
    seen = [json.loads(line) for line in out.splitlines()]
    durable = [e for e in seen[:-1] if e["type"] not in ("text_delta", "reasoning_delta")]
    assert durable == lines(home, asked)  # no gaps, no duplicates
    assert seen[-1]["status"] == "completed" and seen[-1]["turnId"] == asked

    # a failed turn: the model-call limit stops the demo after its tool call (exit 4)
    r = turns(home, "run", "What time is it in Tokyo?", "--max-model-calls", "1", "--json")
    assert r.returncode == 4, r.stderr
    failed = as_json(r)
    assert (failed["status"], failed["code"]) == ("failed", "model-call-limit")
    assert lines(home, failed["turnId"])[-2]["type"] == "tool_result"  # the batch finished first

    # cancel: exit 5, open calls closed; later inputs are rejected
    r = turns(home, "run", "Save 'x' to x.txt", "--json")
    assert r.returncode == 3
    saving = as_json(r)["turnId"]
    r = turns(home, "cancel", saving, "--reason", "changed my mind", "--json")
    assert r.returncode == 5, r.stderr
    assert as_json(r) | {"usage": None} == {
        "turnId": saving,
        "status": "cancelled",
        "reason": "changed my mind",
        "usage": None,
        # The demo model has no price: the estimate is unknown, never zero.
        "cost": {"currency": "USD", "turn": None, "calls": [{"modelCallIndex": 0, "cost": None}]},
    }
    cancelled = lines(home, saving)
    assert cancelled[-1]["type"] == "turn_cancelled"
    assert cancelled[-2]["type"] == "tool_result" and cancelled[-2]["result"]["isError"]
    r = turns(home, "approve", saving, "call_0_0")
    assert r.returncode == 6 and "already ended" in r.stderr
    assert not (home / "workspace" / "x.txt").exists()
    r = turns(home, "show", saving)
    assert r.returncode == 0, r.stderr
    assert "awaiting a decision" not in r.stdout
    assert "permission  required · never decided (the turn ended first)" in r.stdout


def test_usage_errors_exit_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TURNS_HOME", str(tmp_path))
    assert main(["approve", "not-a-turn", "call_0_0"]) == 2
    assert main(["show", "2025-01-01T00-00-00Z-0000000-000", "--json"]) == 2
    err = capsys.readouterr()
    assert json.loads(err.out) == {
        "status": "error",
        "error": f"no turn 2025-01-01T00-00-00Z-0000000-000 in {tmp_path}",
        "exitCode": 2,
        "turnId": "2025-01-01T00-00-00Z-0000000-000",
    }
    assert main(["run"]) == 2
    assert main(["run", "hi", "--max-model-calls", "0"]) == 2
    assert main(["run", "hi", "--agent", "nobody"]) == 2
    assert main(["complete", "2025-01-01T00-00-00Z-0000000-000", "call_0_0"]) == 2
    capsys.readouterr()
    assert main(["--help"]) == 0
    assert "3  the turn is suspended" in capsys.readouterr().out
    assert no_server(tmp_path)


def test_repair_moves_a_torn_tail_then_reports_the_file_healthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TURNS_HOME", str(tmp_path))
    history = tool_turn().events
    path = turn_path(tmp_path, TURN_ID)
    path.parent.mkdir(parents=True)
    whole = b"".join(to_line(e) for e in history[:4])
    path.write_bytes(whole + to_line(history[4])[:25])
    assert main(["validate", str(path)]) == 1
    capsys.readouterr()

    assert main(["repair", TURN_ID, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report == {
        "status": "repaired",
        "path": str(path),
        "sidecar": str(path) + ".broken",
        "line": 5,
        "removedBytes": 25,
        "preview": to_line(history[4])[:25].decode(),
        "keptLines": 4,
    }
    assert path.read_bytes() == whole
    assert main(["show", TURN_ID]) == 0
    capsys.readouterr()

    # A healthy file: nothing to do, and that is success.
    assert main(["repair", TURN_ID]) == 0
    out = capsys.readouterr().out
    assert out == f"{path} is healthy: every line is whole and valid; nothing to repair\n"
    assert path.read_bytes() == whole
