"""An app (``--app MODULE:ATTR``, ``TURNS_APP``, ``app =``) served by every process.

Each test runs the real ``turns`` command, the real worker module and the
real web UI as processes, against the session's dev server on a task queue
of its own. The app is a module in the directory the commands run in: a
``Turns`` whose agent uses a Python (scripted) model and a tool that needs
approval, so a turn it creates suspends and must be finished by another
process that loads the same app.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.test_web_cli import environment, serving

APP = '''
from turnclient import Agent, Turns, tool


@tool  # permission "ask": a human approves each call
def send_email(to: str, subject: str) -> str:
    """Send an email."""
    return f"sent {subject!r} to {to}"


def model(request):
    last = request.messages[-1]
    if last.role == "user":
        return {"toolCalls": [{"toolName": "send_email", "input": {"to": "bob", "subject": "hi"}}]}
    return {"text": last.content[0].output.value}


mailer = Agent(
    name="mailer", system_prompt="You send mail.", tools=(send_email,), model="scripted/mail"
)
turns = Turns(agents=[mailer], models={"mail": model})
'''


def turns(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "turnclient.cli", *args],
        cwd=home.parent,
        env=environment(home, **env),
        capture_output=True,
        text=True,
        timeout=180,
    )


def project(tmp_path: Path) -> Path:
    """A project directory with ``app.py``; its work dir is ``.turns`` inside it."""
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    return tmp_path / ".turns"


def turn_file(home: Path) -> Path:
    (found,) = (home / "storage" / "turns").rglob("*.jsonl")
    return found


# ---------------------------------------------------------------- naming the app


@pytest.mark.parametrize(
    ("spec", "files", "code", "message"),
    [
        ("app", {}, 2, "'app' is not MODULE:ATTR"),
        ("nosuch:turns", {}, 2, "no module named 'nosuch'"),
        ("app:nosuch", {}, 2, "module app has no attribute 'nosuch'"),
        ("three:x", {"three.py": "x = 3\n"}, 2, "three:x is an int, not a turnclient Turns or App"),
        (
            "boom:turns",
            {"boom.py": "raise ValueError('the app is broken')\n"},
            1,
            "importing boom raised ValueError: the app is broken",
        ),
        (
            "needs:turns",
            {"needs.py": "import a_module_nobody_installed\n"},
            1,
            "importing needs failed: ModuleNotFoundError",
        ),
        ("leaves:turns", {"leaves.py": "raise SystemExit(3)\n"}, 1, "raised SystemExit"),
    ],
)
def test_an_app_that_does_not_load_is_one_line_by_every_route(
    tmp_path: Path, spec: str, files: dict[str, str], code: int, message: str
) -> None:
    home = project(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    routes = {
        "--app": turns(home, "config", "--app", spec),
        "TURNS_APP": turns(home, "config", TURNS_APP=spec),
    }
    (home / "turns.toml").write_text(f'app = "{spec}"\n', encoding="utf-8")
    routes["app ="] = turns(home, "config")
    for where, done in routes.items():
        assert done.returncode == code, (where, done.stderr)
        (line,) = done.stderr.strip().splitlines()  # one line, no traceback
        assert message in line, (where, line)
        assert where in line, (where, line)
    (home / "turns.toml").unlink()
    worker = subprocess.run(
        [sys.executable, "-m", "turncore_temporal.worker", "--app", spec],
        cwd=tmp_path,
        env=environment(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker.returncode == code, worker.stderr
    (line,) = worker.stderr.strip().splitlines()
    assert message in line and "--app" in line


def test_an_app_agent_named_like_a_turns_toml_agent_is_refused_naming_both(
    tmp_path: Path,
) -> None:
    home = project(tmp_path)
    home.mkdir()
    (home / "turns.toml").write_text(
        '[agents.mailer]\nsystem_prompt = "another mailer"\nmodel = "scripted/demo"\n',
        encoding="utf-8",
    )
    done = turns(home, "config", "--app", "app:turns")
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"[agents.mailer] in {home / 'turns.toml'}" in line
    assert "app app:turns" in line and "rename one" in line


def test_turns_config_says_where_each_agent_tool_and_model_came_from(tmp_path: Path) -> None:
    home = project(tmp_path)
    home.mkdir()
    (home / "turns.toml").write_text(
        '[agents.writer]\nsystem_prompt = "You write."\nmodel = "scripted/demo"\n',
        encoding="utf-8",
    )
    done = turns(home, "config", "--json", TURNS_APP="app:turns")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["app"] == "app:turns"
    assert doc["agents"]["mailer"]["origin"] == "app app:turns"
    assert doc["agents"]["writer"]["origin"] == "turns.toml"
    assert doc["agents"]["demo"]["origin"] == "built-in"
    assert doc["tools"]["send_email"]["origin"] == "app app:turns"
    assert doc["tools"]["read_file"]["origin"] == "built-in"
    assert doc["models"]["scripted/mail"]["origin"] == "app app:turns"
    text = turns(home, "config", "--app", "app:turns").stdout
    assert "app           app:turns" in text
    assert "mailer" in text and "from app app:turns" in text


# ---------------------------------------------------------------- serving it


@contextmanager
def worker(home: Path, *args: str, **env: str) -> Iterator[None]:
    """``python -m turncore_temporal.worker ARGS`` until it says it serves; stopped after."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "turncore_temporal.worker", *args],
        cwd=home.parent,
        env=environment(home, TURNS_LOG_LEVEL="INFO", **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        seen = ""
        for line in proc.stderr:
            seen += line
            if "serving turns of" in line:
                break
        else:
            raise AssertionError(f"the worker did not start: {seen}")
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=60)


@pytest.mark.temporal
def test_a_turn_of_an_app_is_finished_by_any_process_that_loads_the_app(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    home = project(tmp_path)
    address = temporal_env.client.service_client.config.target_host
    queue = f"app-{uuid.uuid4()}"
    env = {"TEMPORAL_ADDRESS": address, "TURNS_TASK_QUEUE": queue}

    started = turns(home, "run", "--app", "app:turns", "--agent", "mailer", "Say hi", **env)
    assert started.returncode == 3, started.stderr  # suspended: send_email awaits approval
    path = turn_file(home)
    before = path.read_bytes()

    # A command without the app would serve the turn with a worker that lacks its
    # model: a dependency error at once, naming it and the fix; nothing sent or written.
    lacking = turns(home, "approve", "last", "call_0_0", **env)
    assert lacking.returncode == 1, lacking.stderr
    (line,) = lacking.stderr.strip().splitlines()
    assert "scripted model 'mail'" in line and "--app MODULE:ATTR or TURNS_APP" in line
    assert "rejected" not in line
    assert path.read_bytes() == before

    # A worker elsewhere without the app: the workflow answers with the same kind of error.
    with worker(home, **env):
        remote = turns(home, "approve", "--no-worker", "last", "call_0_0", **env)
    assert remote.returncode == 1, remote.stderr
    (line,) = remote.stderr.strip().splitlines()
    assert "scripted model 'mail'" in line and "the worker that took the turn lacks it" in line
    assert path.read_bytes() == before

    # A worker started with the app serves it; the command needs no worker of its own.
    with worker(home, "--app", "app:turns", **env):
        done = turns(home, "approve", "--no-worker", "last", "call_0_0", "--json", **env)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "completed"
    assert "sent 'hi' to bob" in done.stdout


@pytest.mark.temporal
def test_the_web_ui_serves_an_app_named_in_the_environment(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    home = project(tmp_path)
    address = temporal_env.client.service_client.config.target_host
    queue = f"app-ui-{uuid.uuid4()}"
    env = {"TEMPORAL_ADDRESS": address, "TURNS_TASK_QUEUE": queue}
    started = turns(home, "run", "--agent", "mailer", "Say hi", TURNS_APP="app:turns", **env)
    assert started.returncode == 3, started.stderr
    turn_id = turn_file(home).stem
    before = turn_file(home).read_bytes()

    with serving(home, "ui", "--port", "0", **env) as info:  # no app: 503, nothing written
        with httpx.Client(base_url=info["url"], timeout=60) as http:
            r = http.post(f"/api/turns/{turn_id}/calls/call_0_0/approve", json={})
    assert r.status_code == 503, r.text
    assert "scripted model 'mail'" in r.json()["error"]
    assert turn_file(home).read_bytes() == before

    with serving(home, "ui", "--port", "0", TURNS_APP="app:turns", **env) as info:
        with httpx.Client(base_url=info["url"], timeout=60) as http:
            agents = http.get("/api/agents")
            r = http.post(f"/api/turns/{turn_id}/calls/call_0_0/approve", json={})
    assert r.status_code == 200, r.text
    assert r.json()["outcome"]["status"] == "completed"
    assert agents.status_code == 200, agents.text  # the UI lists the app's agents too
    assert "mailer" in [a["name"] for a in agents.json()["agents"]]


def test_the_environment_is_not_read_by_a_turns_object_itself(tmp_path: Path) -> None:
    """``Turns(...)`` is an app: TURNS_APP naming it (or another app) never recurses."""
    home = project(tmp_path)
    code = "import app; print(sorted(app.turns.runtime.config.agents))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=environment(home, TURNS_APP="app:turns"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "mailer" in done.stdout
    assert os.environ.get("TURNS_APP") is None
