"""What a model chooses cannot act through the operator's terminal.

A provider on 127.0.0.1 speaks the OpenAI chat wire format and answers with
tool call ids that are shell code and text full of terminal escapes. The real
``turns`` commands print hints the operator pastes: each is pasted into
``bash -c`` and must do exactly what it says (answer that call, nothing else);
every human-readable output shows control characters as escapes, while
``--json``, ``log`` and the file keep the bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.test_cli_turns import (  # noqa: F401  (fixtures)
    TIMEOUT,
    as_json,
    environment,
    held,
    home,
    lines,
    turn_file,
)

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\x1b]8;;http://evil/\x1b\\link\x9b31m"
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J"


def _sse(body: Any) -> bytes:
    return b"data: " + orjson.dumps(body) + b"\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return _sse(
        {
            "id": "x",
            "model": "m1",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


class Provider:
    """A chat-completions endpoint answering with a script of SSE bodies, in order."""

    def __init__(self, script: list[list[bytes]]) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["content-length"]))
                provider.requests.append(json.loads(body))
                chunks = provider.script[min(len(provider.requests), len(provider.script)) - 1]
                data = b"".join(chunks) + b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _calls(calls: list[tuple[str, str, dict[str, Any]]], text: str) -> list[bytes]:
    out = [_chunk({"role": "assistant", "content": text})]
    for index, (call_id, name, args) in enumerate(calls):
        fn = {"name": name, "arguments": orjson.dumps(args).decode()}
        out.append(
            _chunk(
                {
                    "tool_calls": [
                        {"index": index, "id": call_id, "type": "function", "function": fn}
                    ]
                }
            )
        )
    return out + [_chunk({}, "tool_calls")]


@pytest.fixture
def provider_home(held: Path, tmp_path: Path) -> Iterator[tuple[Path, Path, list[str]]]:  # noqa: F811
    sentinel = tmp_path / "pwned"
    ids = [
        f"c;touch {sentinel};d",
        f"$(touch {sentinel})`touch {sentinel}`'\"x",
        f"e\\'|touch {sentinel} #",
    ]
    provider = Provider(
        [
            _calls(
                [
                    (ids[0], "write_file", {"path": "a.txt", "content": "A"}),
                    (ids[1], "ask_human", {"question": f"name?{ESCAPES}"}),
                    (ids[2], "write_file", {"path": "b.txt", "content": f"B{ESCAPES}"}),
                ],
                f"Working{ESCAPES}",
            ),
            [_chunk({"role": "assistant", "content": f"Done{ESCAPES}"}), _chunk({}, "stop")],
        ]
    )
    (held / "turns.toml").write_text(
        f'[providers.evil]\nkind = "openai-chat"\nbase_url = "{provider.url}"\napi_key_env = "EVIL_KEY"\n'
    )
    try:
        yield held, sentinel, ids
    finally:
        provider.close()


def _env(work: Path, bindir: Path) -> dict[str, str]:
    return {
        **environment(work),
        "EVIL_KEY": "k",
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
    }


def _turns(work: Path, bindir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnclient.cli", *args],
        cwd=work.parent,
        env=_env(work, bindir),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _paste(work: Path, bindir: Path, line: str) -> subprocess.CompletedProcess[str]:
    """What an operator does: paste the printed line into a shell."""
    return subprocess.run(
        ["bash", "-c", line],
        cwd=work.parent,
        env=_env(work, bindir),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _no_raw_controls(text: str) -> None:
    raw = [c for c in text if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]
    assert raw == [], f"raw control characters reach the terminal: {raw!r}"


def test_pasted_hints_do_what_they_say_and_model_text_cannot_drive_the_terminal(
    provider_home: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    work, sentinel, ids = provider_home
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "turns"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m turnclient.cli "$@"\n')
    shim.chmod(0o755)
    assert shutil.which("turns", path=str(bindir)) == str(shim)

    r = _turns(work, bindir, "run", "--model", "evil/m1", "go")
    assert r.returncode == 3, (r.stdout, r.stderr)
    _no_raw_controls(r.stdout + r.stderr)
    assert SHOWN in r.stdout  # the model's text, visibly
    turn_id = r.stdout.split()[1]
    hints = [x.strip() for x in r.stdout.splitlines() if " turns " in x and turn_id in x]
    approve = [h for h in hints if " approve " in h]
    complete = [h for h in hints if " complete " in h]
    assert len(approve) == 2 and len(complete) == 1, r.stdout

    # --json and the file keep every byte the model sent
    r = _turns(work, bindir, "show", turn_id, "--json")
    assert r.returncode == 0, r.stderr
    shown = as_json(r)
    assert {t["toolCallId"] for t in shown["state"]["toolCalls"]} == set(ids)
    assert turn_file(work, turn_id).read_text().count("\\u001b]0;pwned") >= 1
    r = _turns(work, bindir, "log", turn_id)
    assert r.stdout.encode() == turn_file(work, turn_id).read_bytes()

    # the human views show the escapes, never emit them
    for args in (("show", turn_id), ("inspect", turn_id), ("state", turn_id), ("list",)):
        r = _turns(work, bindir, *args)
        assert r.returncode == 0, (args, r.stderr)
        _no_raw_controls(r.stdout + r.stderr)

    # an error message quoting a hostile id shows it visibly too
    r = _turns(work, bindir, "complete", turn_id, ids[2], "--text", "x")
    assert r.returncode == 6 and "awaits approval first" in r.stderr, r.stderr
    _no_raw_controls(r.stderr)

    # each pasted hint answers exactly its call and runs nothing else
    for hint, call_id in zip(approve, (ids[0], ids[2]), strict=True):
        r = _paste(work, bindir, hint)
        assert r.returncode in (0, 3), (hint, r.stdout, r.stderr)
        _no_raw_controls(r.stdout + r.stderr)
        resolved = [e for e in lines(work, turn_id) if e["type"] == "tool_permission_resolved"]
        assert resolved[-1]["toolCallId"] == call_id and resolved[-1]["decision"] == "allow"
    assert not sentinel.exists()
    r = _paste(work, bindir, complete[0])
    assert r.returncode == 0, (complete[0], r.stdout, r.stderr)
    _no_raw_controls(r.stdout + r.stderr)
    assert "Done\\x1b]0;pwned" in r.stdout
    events = lines(work, turn_id)
    results = {e["toolCallId"]: e["result"]["output"] for e in events if e["type"] == "tool_result"}
    assert results[ids[1]] == "your answer"
    assert events[-1]["type"] == "turn_completed"
    assert not sentinel.exists()
    assert (work / "workspace" / "b.txt").read_text() == f"B{ESCAPES}"
