"""``turns validate`` and ``turns state``, run as the user runs them: a subprocess.

Expected problem lines are ``PATH:LINE: rule`` with the rule exactly as the
repository's reader reports it and the line from ``golden/broken/expected.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.histories import History, created, write_turn
from turnclient import cli
from turnclient.cli import common
from turncore.errors import CorruptTurnError
from turncore.reducer import reduce_turn
from turncore.storage.repository import read_path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path("tests/golden")  # relative: the CLI must echo paths as given
BROKEN = GOLDEN / "broken"
EXPECTED = orjson.loads((ROOT / BROKEN / "expected.json").read_bytes())
GOOD = sorted(str(p.relative_to(ROOT)) for p in (ROOT / GOLDEN).glob("*.jsonl"))
BAD = sorted(str(p.relative_to(ROOT)) for p in (ROOT / BROKEN).glob("*.jsonl"))


def turns(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "turnclient.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def problem_line(path: str) -> str:
    """What ``turns validate`` must print for a broken file."""
    with pytest.raises(CorruptTurnError) as info:
        read_path(ROOT / path)
    expected = EXPECTED[Path(path).name]
    assert info.value.line == expected["line"]
    assert expected["rule"] in info.value.rule
    return f"{path}:{expected['line']}: {info.value.rule}"


# ---------------------------------------------------------------- validate


def test_validate_accepts_every_good_file() -> None:
    r = turns("validate", *GOOD)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"all {len(GOOD)} turn files valid\n", "")


def test_validate_reports_each_bad_file_once_in_argument_order() -> None:
    mixed = [GOOD[0], *reversed(BAD), GOOD[-1]]
    r = turns("validate", *mixed)
    assert r.returncode == 1
    assert r.stderr == ""
    assert r.stdout.splitlines() == [problem_line(p) for p in reversed(BAD)]


@pytest.mark.parametrize(
    "name", ["2025-11-12T00-00-01Z-0000001-000.jsonl", "2025-11-12T00-00-06Z-0000001-000.jsonl"]
)
def test_validate_one_bad_file(name: str) -> None:
    path = str(BROKEN / name)
    r = turns("validate", path)
    assert r.returncode == 1
    assert r.stdout == problem_line(path) + "\n"


def test_validate_a_directory_checks_every_turn_file_under_it() -> None:
    r = turns("validate", str(GOLDEN))
    assert r.returncode == 1
    assert r.stdout.splitlines() == [problem_line(p) for p in BAD]


def test_validate_a_missing_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "2025-11-11T04-36-29Z-0001234-000.jsonl")
    r = turns("validate", GOOD[0], missing)
    assert r.returncode == 1
    assert r.stdout == f"{missing}: no such file\n"


def test_validate_reports_a_fifo_instead_of_hanging_on_it(tmp_path: Path) -> None:
    # Opening a FIFO for reading blocks until a writer comes; only regular files are read.
    good = tmp_path / "good.jsonl"
    good.write_bytes((ROOT / GOOD[0]).read_bytes())
    fifo = tmp_path / "2025-11-11T04-36-29Z-0001234-000.jsonl"
    os.mkfifo(fifo)
    for given in (str(tmp_path), str(fifo)):
        r = turns("validate", given)
        assert r.returncode == 1
        assert f"{fifo}: cannot be read: " in r.stdout and "not a regular file" in r.stdout


def test_validate_files_written_by_hand(tmp_path: Path) -> None:
    h = History()
    h.request()
    h.complete("", [("j", "run_job", {})])
    h.invoke("j")
    h.suspend()
    good = write_turn(tmp_path, h.events)
    r = turns("validate", str(good))
    assert (r.returncode, r.stdout) == (0, "all 1 turn file valid\n")
    # Append an illegal line (a sync result for the async tool) by hand.
    with open(good, "a", encoding="utf-8") as f:
        f.write(
            orjson.dumps(
                {
                    "type": "tool_result",
                    "turnId": h.turn_id,
                    "ts": "2025-11-11T05:10:00.000Z",
                    "toolCallId": "j",
                    "toolName": "run_job",
                    "source": "sync",
                    "result": {"output": 1, "isError": False},
                }
            ).decode()
            + "\n"
        )
    r = turns("validate", str(good))
    assert r.returncode == 1
    assert r.stdout == f"{good}:6: sync result for async tool call 'j'\n"


def test_validate_needs_a_path() -> None:
    r = turns("validate")
    assert r.returncode == 2
    assert r.stdout == ""
    assert "PATH" in r.stderr


# ---------------------------------------------------------------- state

PLAIN = """\
turn 2025-11-11T04-36-29Z-0001234-000
  created    2025-11-11T04:36:29.000Z
  session    session-7
  agent      assistant (requested assistant, model override openai/gpt-4.1, composition {"workDir":"repo-1","voice":false})
  model      openai/gpt-4.1
  tools      read_file (sync), write_file (sync), ask_human (async, human)
  config     autoPermission=false humanAvailable=true maxModelCalls=20
  context    2 inline messages
  input      Summarise README.md in one sentence.

model calls (1)
  #0 completed · finish stop · usage in=120 out=30 total=150 reasoning=8 cached=64 · 5 step events
      refs      context, input
      response  turncore runs LLM agent turns as durable Temporal workflows, with one a…

tool calls (0)
  none

suspension
  none

terminal
  completed · finish stop · turncore runs LLM agent turns as durable Temporal workflows, with one a…

usage in=120 out=30 total=150 reasoning=8 cached=64
"""


def test_state_summary_of_a_plain_turn() -> None:
    r = turns("state", str(GOLDEN / "2025-11-11T04-36-29Z-0001234-000.jsonl"))
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == PLAIN


def test_state_summary_of_a_turn_with_tools_permissions_and_a_limit() -> None:
    r = turns("state", str(GOLDEN / "2025-11-11T05-30-00Z-0000001-000.jsonl"))
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert (
        "  #1 completed · finish tool-calls · usage in=70 out=15 total=85 · 0 step events" in lines
    )
    assert "      refs      assistant:0, toolResult:l1" in lines
    assert "  l2  read_file (builtin:read_file, sync) · model call 1, position 0" in lines
    assert '      result      error from sync: "No such file: config.toml"' in lines
    assert lines[-3:] == [
        "  failed [model-call-limit] · The turn reached its limit of 2 model calls.",
        "",
        "usage in=120 out=25 total=145",
    ]
    r = turns("state", str(GOLDEN / "2025-11-11T05-10-00Z-0000001-000.jsonl"))
    lines = r.stdout.splitlines()
    assert "      permission  required → classified defer → resolved allow by human" in lines
    assert (
        "      permission  required → resolved deny by human (Leave the changelog alone.)" in lines
    )


def test_state_summary_of_a_suspended_turn(tmp_path: Path) -> None:
    h = History(created(auto_permission=False))
    h.request()
    h.complete("", [("p", "write_file", {"path": "x"}), ("j", "run_job", {"cmd": "make"})])
    h.require("p", {"kind": "write"}, checker_error="checker down")
    h.invoke("j")
    h.progress("j", {"pct": 10})
    h.progress("j", {"pct": 20})
    h.suspend()
    h.resolve("p", "allow")
    h.invoke("p")
    h.suspend()
    path = write_turn(tmp_path, h.events)
    r = turns("state", str(path))
    assert r.returncode == 0
    out = r.stdout.split("\n\n")
    assert out[2].splitlines() == [
        "tool calls (2)",
        "  p  write_file (builtin:write_file, sync) · model call 0, position 0",
        '      input       {"path":"x"}',
        "      permission  required (checker error: checker down) → resolved allow by human",
        f"      invoked     {h.events[9].ts}",
        "      result      none yet",
        "  j  run_job (builtin:run_job, async) · model call 0, position 1",
        '      input       {"cmd":"make"}',
        f"      invoked     {h.events[4].ts}",
        '      progress    2 update(s), last {"pct":20}',
        "      result      none yet",
    ]
    assert out[3].splitlines() == [
        "suspension",
        f"  since {h.events[10].ts}",
        "  awaiting result      run_job (j)",
    ]
    assert out[4] == "terminal\n  none"


def test_state_summary_of_an_open_model_call(tmp_path: Path) -> None:
    h = History()
    h.request()
    path = write_turn(tmp_path, h.events)
    r = turns("state", str(path))
    assert "  #0 no outcome recorded · 0 step events" in r.stdout.splitlines()
    assert "running" not in r.stdout


@pytest.mark.parametrize("path", [GOOD[0], GOOD[-1]])
def test_state_json_is_the_turn_state_with_wire_names(path: str) -> None:
    r = turns("state", path, "--json")
    assert (r.returncode, r.stderr) == (0, "")
    expected = reduce_turn(read_path(ROOT / path)).to_wire()
    assert r.stdout == orjson.dumps(expected, option=orjson.OPT_INDENT_2).decode() + "\n"
    assert set(expected) >= {"definition", "modelCalls", "toolCalls", "usage"}


def test_state_json_of_every_golden_file_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    for path in GOOD:
        assert cli.main(["state", str(ROOT / path), "--json"]) == 0
        expected = reduce_turn(read_path(ROOT / path)).to_wire()
        assert orjson.loads(capsys.readouterr().out) == expected
        assert cli.main(["state", str(ROOT / path)]) == 0
        assert capsys.readouterr().out.startswith(f"turn {Path(path).stem}\n")


def test_state_of_a_broken_file_reports_on_stderr() -> None:
    path = str(BROKEN / "2025-11-12T00-00-12Z-0000001-000.jsonl")
    r = turns("state", path)
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr == problem_line(path) + "\n"
    r = turns("state", path, "--json")
    assert r.returncode == 1
    assert orjson.loads(r.stdout) == {
        "status": "error",
        "error": problem_line(path),
        "exitCode": 1,
    }


def test_log_json_has_one_object_per_line_or_names_the_line_that_is_none(
    tmp_path: Path,
) -> None:
    """``turns log --json`` does not validate, but line N is element N-1 (offsets are
    line numbers, §17.1): a blank or non-JSON line is named, never dropped."""
    good = (ROOT / GOOD[0]).read_bytes()
    lines = good.split(b"\n")[:-1]
    r = turns("log", str(ROOT / GOOD[0]), "--json")
    assert r.returncode == 0 and len(orjson.loads(r.stdout)) == len(lines)
    for name, bad in (("blank", b""), ("spaces", b"   "), ("not JSON", b"{oops")):
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(b"\n".join([*lines[:3], bad, *lines[3:]]) + b"\n")
        r = turns("log", str(path), "--json")
        assert r.returncode == 1, (name, r.stdout[:200])
        assert r.stderr.startswith(f"{path}:4: the line is not JSON"), r.stderr
        assert f"turns validate {path}" in r.stderr
        assert orjson.loads(r.stdout) == {
            "status": "error",
            "error": r.stderr.strip(),
            "exitCode": 1,
        }


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("2025-13-11T04-36-29Z-0001234-000", "names a time that does not exist"),
        ("2025-02-30T04-36-29Z-0001234-000", "names a time that does not exist"),
        ("2025-11-11T04-36-29Z-0001234-0000", "does not have the shape"),
    ],
)
def test_a_malformed_full_id_is_named_as_such_not_searched_as_a_prefix(
    tmp_path: Path, given: str, reason: str
) -> None:
    for command in ("state", "show", "log"):
        r = subprocess.run(
            [sys.executable, "-m", "turnclient.cli", command, given],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), "TURNS_HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2, (command, r.stderr)
        assert r.stderr.startswith(f"turn id {given!r} {reason}"), (command, r.stderr)


def test_usage_errors_exit_2() -> None:
    r = turns()
    assert r.returncode == 2 and "validate" in r.stderr and "state" in r.stderr
    r = turns("frobnicate")
    assert r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr
    r = turns("--help")
    assert r.returncode == 0 and "validate" in r.stdout


# ---------------------------------------------------------------- in process


def test_main_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", *[str(ROOT / p) for p in GOOD]]) == 0
    assert capsys.readouterr().out == f"all {len(GOOD)} turn files valid\n"
    assert cli.main(["validate", str(ROOT / BAD[0])]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{ROOT / BAD[0]}:1: ")


def test_a_new_command_is_one_decorated_function(capsys: pytest.CaptureFixture[str]) -> None:
    @common.command("echo-count", "count paths", common.arg("paths", nargs="*"))
    def echo_count(args: argparse.Namespace) -> int:
        print(len(args.paths))
        return 3

    try:
        assert cli.main(["echo-count", "a", "b"]) == 3
        assert capsys.readouterr().out == "2\n"
        with pytest.raises(ValueError, match="registered twice"):
            common.command("echo-count", "again")(echo_count)
    finally:
        del common.COMMANDS["echo-count"]


def test_validate_json_lists_valid_and_invalid_files() -> None:
    r = turns("validate", GOOD[0], BAD[0], "--json")
    assert r.returncode == 1
    assert orjson.loads(r.stdout) == {
        "valid": [GOOD[0]],
        "invalid": [{"path": BAD[0], "problem": problem_line(BAD[0])}],
    }


def test_the_worker_module_prints_help_instead_of_serving() -> None:
    for args, code in ((["--help"], 0), (["--bogus"], 2)):
        r = subprocess.run(
            [sys.executable, "-m", "turncore_temporal.worker", *args],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == code, (args, r.stdout, r.stderr)
    r = subprocess.run(
        [sys.executable, "-m", "turncore_temporal.worker", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "TEMPORAL_ADDRESS" in r.stdout and "TURNS_HOME" in r.stdout, r.stdout
