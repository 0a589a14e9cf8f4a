"""`turnclient` is the one import a user's code needs, and it is lazy."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import turnclient

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("turncore", "turncore_temporal", "turnclient")


def _project_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [m for m in found if m.split(".")[0] in PROJECT]


def test_every_public_name_resolves() -> None:
    for name in turnclient.__all__:
        assert getattr(turnclient, name) is not None, name
    assert sorted(dir(turnclient)) == sorted(turnclient.__all__)


def test_readme_and_examples_import_the_project_from_turnclient_only() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sources = {
        f"README.md block {i}": code
        for i, code in enumerate(re.findall(r"```python\n(.*?)```", readme, flags=re.S))
    }
    sources |= {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "examples").glob("*.py")}
    assert len(sources) > 2
    wrong = {
        where: mods
        for where, code in sources.items()
        if (mods := [m for m in _project_imports(code) if m != "turnclient"])
    }
    assert not wrong, f"import these from turnclient instead: {wrong}"


def test_importing_turnclient_loads_neither_temporal_nor_the_turn_client() -> None:
    code = (
        "import sys, turnclient, turnclient.cli\n"
        "heavy = ('temporalio', 'httpx', 'turnclient.turns', 'turnclient.lib.api', 'turncore_temporal')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
