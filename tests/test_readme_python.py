"""The README's "Use it from Python" examples run as written and print what it says.

Each ```python block of the section is run as a script in a fresh directory
(its own work dir, the embedded dev server: no key, nothing to set up), and
its output must equal the ```text block that follows it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def examples() -> list[tuple[str, str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(python|text)\n(.*?)```", section, flags=re.S)
    pairs = []
    for (kind, code), (next_kind, output) in zip(blocks, blocks[1:], strict=False):
        if kind == "python":
            assert next_kind == "text", "every Python example is followed by its output"
            pairs.append((code, output))
    return pairs


def test_the_section_has_both_examples() -> None:
    codes = [code for code, _ in examples()]
    assert len(codes) == 2
    assert "turns.approve(" in codes[1]


@pytest.mark.temporal  # the example starts the embedded dev server
@pytest.mark.parametrize("index", [0, 1])
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
