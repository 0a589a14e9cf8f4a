"""A failed model call in the terminal: what failed, where, whether anything was
sent, what to do — and ``turns run --continue`` to go on once it is fixed."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.test_cli_turns import (  # noqa: F401  (fixtures)
    TIMEOUT,
    as_json,
    environment,
    held,
    home,
    lines,
)

KEY = "sk-cli-CANARY-4242"


def _turns(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnclient.cli", *args],
        cwd=work.parent,
        env={**environment(work), "DOWN_API_KEY": KEY},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_a_failed_model_call_says_what_to_do_and_the_turn_can_be_continued(
    held: Path,  # noqa: F811
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    (held / "turns.toml").write_text(
        "[providers.down]\n"
        'kind = "openai-chat"\n'
        f'base_url = "{base_url}"\n'
        'api_key_env = "DOWN_API_KEY"\n'
        "max_retries = 1\n"
        "retry_backoff = 0.01\n"
    )
    r = _turns(held, "run", "--model", "down/m1", "hello there")
    assert r.returncode == 4, (r.stdout, r.stderr)
    out = r.stdout
    first = out.split("turn ", 1)[1].split(" ", 1)[0]
    failed = next(line for line in out.splitlines() if line.startswith("✗ failed"))
    assert "[model-call-failed:transport:not-sent]" in failed
    failed = next(line for line in out.splitlines() if line.startswith("✗ model call 0 failed"))
    assert f"provider down, model m1, base_url {base_url}" in failed
    assert "nothing was sent" in failed and "is running" in failed and "2 attempts" in failed
    assert f"run --continue {first} PROMPT" in out
    assert KEY not in out + r.stderr
    # The reason is printed once, with the model call; the outcome refers to it.
    assert out.count("nothing was sent") == 1, out
    assert "✗ failed [model-call-failed:transport:not-sent]: the model call's error above" in out
    r = _turns(held, "show", first)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("nothing was sent") == 1, r.stdout
    assert "outcome  failed [model-call-failed:transport:not-sent]: the model call's error" in (
        r.stdout
    )

    # once fixed (here: another model), the conversation goes on in a new turn
    r = _turns(held, "run", "--continue", first, "hello again", "--json")
    assert r.returncode == 0, (r.stdout, r.stderr)
    second = as_json(r)["turnId"]
    created = lines(held, second)[0]
    assert created["context"] == {"previousTurnId": first}
    for path in (held / "storage").rglob("*.jsonl"):
        assert KEY not in path.read_text()

    # a turn that has not ended cannot be continued
    r = _turns(held, "run", "Ask me for my name", "--json")
    assert r.returncode == 3, r.stderr
    pending = as_json(r)["turnId"]
    r = _turns(held, "run", "--continue", pending, "next")
    assert r.returncode == 2 and "has not ended" in r.stderr
