"""Conversations from the command line: `turns chat` on a scripted stdin, `turns run
--continue/--session`, `turns list --session`, and the refusal to continue an open turn.
Each command is its own process on the work dir's embedded server (held up by `held`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli_turns import TIMEOUT, as_json, environment, held, home, lines, turns

__all__ = ["held", "home"]  # fixtures used by name

pytestmark = pytest.mark.temporal  # every command starts or shares an embedded server


def chat(home: Path, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnclient.cli", "chat", *args],
        cwd=home.parent,
        env=environment(home),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def created(home: Path, turn_id: str) -> dict[str, object]:
    return lines(home, turn_id)[0]


def test_a_chat_answers_approvals_and_questions_inline_and_continues(held: Path) -> None:
    home = held
    said = chat(
        home,
        "Calculate (17 + 3) * 23\nSave 'hi there' to notes.txt\ny\nAsk me for my name\nAda\n",
    )
    assert said.returncode == 0, said.stderr
    out = said.stdout
    assert "(17 + 3) * 23 = 460" in out
    assert "allow write_file" in out and "Wrote 9 bytes to notes.txt." in out
    assert "What is your name? > " in out and "You answered: Ada" in out
    assert (home / "workspace" / "notes.txt").read_text() == "hi there\n"
    last = out.strip().splitlines()[-1].split()[-1]
    assert out.strip().endswith(f"turns chat --continue {last}")

    listed = as_json(turns(home, "list", "--json", "--limit", "10"))
    first = min(r["turnId"] for r in listed)
    session = as_json(turns(home, "list", "--session", first, "--json"))
    ids = [r["turnId"] for r in session]
    assert len(ids) == 3 and ids[0] == first and ids[-1] == last
    for before, after in zip(ids, ids[1:], strict=False):
        definition = created(home, after)
        assert definition["context"] == {"previousTurnId": before}
        assert definition["sessionId"] == first

    # Ctrl-D left it continuable: a second chat picks up after the last turn.
    again = chat(home, "What time is it in Tokyo?\n", "--continue", last)
    assert again.returncode == 0, again.stderr
    newest = again.stdout.strip().splitlines()[-1].split()[-1]
    assert created(home, newest)["context"] == {"previousTurnId": last}

    # A denial with a reason, typed inline, reaches the model.
    denied = chat(home, "Save 'x' to y.txt\nnot today\n", "--continue", newest)
    assert denied.returncode == 0, denied.stderr
    assert "not today" in denied.stdout
    assert not (home / "workspace" / "y.txt").exists()


def test_run_continue_session_and_the_refusal_of_an_open_turn(held: Path) -> None:
    home = held
    first = as_json(turns(home, "run", "--session", "s-42", "--json", "Calculate 2 + 3"))
    assert first["status"] == "completed"
    second = as_json(turns(home, "run", "--session", "s-42", "--json", "Calculate 4 * 5"))
    third = as_json(turns(home, "run", "--continue", second["turnId"], "--json", "Calculate 1 + 1"))
    assert created(home, second["turnId"])["context"] == {"previousTurnId": first["turnId"]}
    assert created(home, third["turnId"])["sessionId"] == "s-42"
    listed = turns(home, "list", "--session", "s-42")
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        first["turnId"],
        second["turnId"],
        third["turnId"],
    ]

    suspended = turns(home, "run", "--session", "s-42", "--json", "Save 'x' to z.txt")
    assert suspended.returncode == 3
    open_id = json.loads(suspended.stdout)["turnId"]
    refused = turns(home, "run", "--continue", open_id, "Calculate 1 + 1")
    assert refused.returncode == 2
    message = refused.stderr
    assert f"turn {open_id} has not ended" in message
    assert f"turns approve {open_id} call_0_0 (or deny)" in message
    assert f"turns cancel {open_id}" in message
    by_session = turns(home, "run", "--session", "s-42", "Calculate 1 + 1")
    assert by_session.returncode == 2 and f"turn {open_id} has not ended" in by_session.stderr
    both = turns(home, "run", "--continue", open_id, "--session", "s-42", "x")
    assert both.returncode == 2 and "not both" in both.stderr
    # A chat picks a turn that waits for its human up at the question (here: denied).
    resumed = chat(home, "n\n", "--continue", open_id)
    assert resumed.returncode == 0, resumed.stderr
    assert "allow write_file" in resumed.stdout
    assert not (home / "workspace" / "z.txt").exists()
