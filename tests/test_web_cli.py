"""``turns ui``, ``turns dev``'s web UI and ``turns watch --surface``, each a real process.

``turns ui`` runs against the session's dev server (``TEMPORAL_ADDRESS``) with
its own worker; ``turns dev`` starts the work dir's embedded server and
serves the web UI next to Temporal Web.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.test_embedded import kill_stragglers

ROOT = Path(__file__).resolve().parent.parent


def environment(home: Path, **extra: str) -> dict[str, str]:
    ours = ("TURNS_HOME", "TURNS_TASK_QUEUE", "TURNS_UI_TOKEN", "TURNS_CONFIG")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_") and k not in ours}
    env.update({"TURNS_HOME": str(home), "PYTHONPATH": str(ROOT), "NO_COLOR": "1", **extra})
    return env


@contextmanager
def serving(home: Path, *args: str, **env: str) -> Iterator[dict[str, Any]]:
    """Run ``turns ARGS --json`` until its first JSON document; SIGTERM it afterwards."""
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnclient.cli", *args, "--json"],
        cwd=home.parent,
        env=environment(home, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        text = ""
        for line in proc.stdout:
            text += line
            if line.startswith("}"):
                break
        assert text, proc.stderr.read()
        yield json.loads(text)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        assert code == 0, proc.stderr.read()


def test_turns_ui_serves_the_api_with_its_own_worker_and_watch_speaks_surface(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    address = temporal_env.client.service_client.config.target_host
    queue = f"cli-ui-{uuid.uuid4()}"
    with serving(
        home, "ui", "--port", "0", TEMPORAL_ADDRESS=address, TURNS_TASK_QUEUE=queue
    ) as info:
        assert info["worker"] is True and info["url"].startswith("http://127.0.0.1:")
        with httpx.Client(base_url=info["url"], timeout=60) as http:
            assert "Waiting for you" in http.get("/").text
            r = http.post("/api/turns", json={"prompt": "Save 'from the cli' to notes.txt"})
            assert r.status_code == 201, r.text
            turn_id = r.json()["turnId"]
            with httpx.Client(base_url=info["url"], timeout=60) as sse:
                with sse.stream(
                    "GET", f"/api/turns/{turn_id}/events", headers={"Accept": "text/event-stream"}
                ) as stream:
                    for line in stream.iter_lines():  # ends at the settle point
                        if line.startswith("data:") and '"status":"suspended"' in line:
                            break
            view = http.get(f"/api/turns/{turn_id}").json()
            call = view["pending"]["permissions"][0]["toolCallId"]
            r = http.post(f"/api/turns/{turn_id}/calls/{call}/approve", json={})
            assert r.status_code == 200 and r.json()["outcome"]["status"] == "completed", r.text
            surface = http.get(f"/api/turns/{turn_id}/events?format=surface").content

    watched = subprocess.run(
        [sys.executable, "-m", "turnclient.cli", "watch", turn_id, "--surface", "--no-worker"],
        cwd=home.parent,
        env=environment(home),
        capture_output=True,
        timeout=60,
    )
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout == surface
    kinds = [orjson.loads(x)["type"] for x in watched.stdout.splitlines()]
    assert kinds[0] == "turn_started" and kinds[-1] == "turn_completed"


@pytest.mark.temporal  # starts the work dir's embedded dev server
def test_turns_dev_serves_the_web_ui_next_to_temporal_web(tmp_path: Path) -> None:
    home = tmp_path / "home"
    try:
        with serving(home, "dev", "--no-worker", "--web-port", "0") as info:
            assert info["uiUrl"] and info["webUrl"].startswith("http://127.0.0.1:")
            with httpx.Client(base_url=info["webUrl"], timeout=30) as http:
                r = http.get("/api/agents")
                assert r.status_code == 200 and r.json()["defaultAgent"] == "demo"
    finally:
        assert kill_stragglers(home) == []
