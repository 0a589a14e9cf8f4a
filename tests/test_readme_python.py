"""The README's "Use it from Python" examples run as written and print what it says.

Each ```python block of the section is run as a script in a fresh directory
(its own work dir, the embedded dev server: no key, nothing to set up), and
its output must equal the ```text block that follows it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def examples() -> list[tuple[str, str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(python|text)\n(.*?)```", section, flags=re.S)
    pairs = []
    for (kind, code), (next_kind, output) in zip(blocks, blocks[1:], strict=False):
        if kind == "python" and code.startswith("# app.py\n"):
            continue  # a module served by commands (served_app), not a script
        if kind == "python":
            assert next_kind == "text", "every Python example is followed by its output"
            pairs.append((code, output))
    return pairs


def test_the_section_has_both_examples() -> None:
    codes = [code for code, _ in examples()]
    assert len(codes) == 3
    assert "turns.approve(" in codes[1]
    assert "output_type=Weather" in codes[2]


def served_app() -> tuple[str, list[str], list[str]]:
    """The section's last example: ``app.py``, the shell lines that serve it, what they print."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    app, shell, output = re.findall(
        r"```python\n(# app\.py\n.*?)```\s*```sh\n(.*?)```\s*```text\n(.*?)```", section, re.S
    )[0]
    return app, shell.splitlines(), output.splitlines()


@pytest.mark.temporal  # the example starts the embedded dev server
@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_readme_example_runs_as_written(tmp_path: Path, index: int) -> None:
    code, expected = examples()[index]
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected
    assert list((tmp_path / ".turns" / "storage").rglob("*.jsonl"))  # the turn's file is there


@pytest.mark.temporal
def test_the_app_is_served_to_the_cli_and_the_web_ui_as_written(tmp_path: Path) -> None:
    """``export TURNS_APP=app:turns``, then each ``turns`` line of the block, in a shell;
    ``turns ui`` is started and asked for the app's agents and the turn's approval."""
    app, shell, output = served_app()
    (tmp_path / "app.py").write_text(app, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["NO_COLOR"] = "1"
    (export,) = [line for line in shell if line.startswith("export ")]
    name, _, value = export.removeprefix("export ").partition("=")
    env[name] = value
    commands = [line.split("#", 1)[0].strip() for line in shell if line.startswith("turns ")]
    assert commands[-1] == "turns ui"
    printed = ""
    for command, code in zip(commands[:-1], (3, 0), strict=True):
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == code, (command, done.stdout, done.stderr)
        printed += done.stdout
    for line in output:
        assert line in printed.splitlines(), (line, printed)
    ui = subprocess.Popen(
        ["bash", "-c", "exec turns ui --port 0 --json"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert ui.stdout is not None
        doc = ""
        for line in ui.stdout:
            doc += line
            if line.startswith("}"):
                break
        url = json.loads(doc)["url"]
        agents = httpx.get(f"{url}/api/agents", timeout=60).json()["agents"]
        assert "mailer" in [a["name"] for a in agents]
    finally:
        ui.terminate()
        ui.wait(timeout=60)
