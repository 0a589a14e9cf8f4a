"""The installed distribution adds no generic top-level module names.

Temporal applications very often have their own ``workflows``,
``activities`` and ``worker`` modules; turncore's live under
``turncore_temporal`` so neither shadows the other. This builds a real wheel
from the working tree and reads its file list.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_has_only_project_namespaces(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    # setuptools says what it would ignore or is deprecated as warnings in the verbose log
    # (a data folder that is not a declared package, a licence table, ...): none may appear.
    warnings = [
        line
        for line in (built.stdout + built.stderr).splitlines()
        if "warning" in line.lower()
        and "byte-compiling is disabled" not in line  # pip's own choice for wheels
        and "is ignored: it is neither a file nor a directory" not in line  # pip's index config
    ]
    assert warnings == []
    (wheel,) = tmp_path.glob("turncore-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    # The licence travels in the wheel and its metadata says which one it is.
    (licence,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert archive.read(licence) == (ROOT / "LICENSE").read_bytes()
    assert b"Apache License" in archive.read(licence)
    (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    metadata = archive.read(metadata_name).decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Project-URL: Source, " in metadata
    assert "Classifier: Programming Language :: Python :: 3.11" in metadata
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"turncore", "turncore_temporal", "turnclient"}
    assert "turncore_temporal/worker.py" in names
    assert "turncore_temporal/workflows/turn.py" in names
    assert "turncore_temporal/activities/turn_activities.py" in names
    # The web UI's pages ship as package data: no build step, nothing fetched at run time.
    for static in ("index.html", "turn.html", "app.js", "app.css"):
        assert f"turnclient/servers/ui/static/{static}" in names
    # Nothing else from the repository root rides along (tests, bench, docs).
    assert not [
        n
        for n in names
        if n.startswith("turncore_temporal/")
        and n.count("/") == 1
        and n not in {"turncore_temporal/worker.py"}
    ]


def test_modules_are_imported_once_under_their_installed_names() -> None:
    code = (
        "import sys, turncore_temporal.worker, turnclient.cli;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('workflows','activities','worker'));"
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd="/"
    )
    assert out.stdout.strip() == "[]"


def test_install_hints_name_installable_requirements(tmp_path: Path) -> None:
    """A missing extra's hint names the extra's own requirements, not ``turncore[ui]``.

    turncore is installed from a clone or a wheel and is on no package index, so
    ``pip install 'turncore[ui]'`` would fail; the requirements themselves install
    anywhere. The web UI's packages are hidden here by a module that refuses to load,
    and the real command prints the hint.
    """
    from turnclient.runtime.extras import extra_requirements

    blocker = tmp_path / "block"
    for name in ("starlette", "uvicorn"):
        (blocker / name).mkdir(parents=True)
        (blocker / name / "__init__.py").write_text(f"raise ImportError('{name} is hidden')\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(blocker),
        "TURNS_HOME": str(tmp_path / "home"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "turnclient.cli", "ui", "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "turncore[" not in line
    requirements = extra_requirements("ui")
    assert {r.split(">=")[0] for r in requirements} == {"starlette", "uvicorn", "ag-ui-protocol"}
    assert line.endswith(
        "pip install " + " ".join(f"'{r}'" for r in requirements) + " (turncore's ui extra)"
    )
    for extra in ("postgres", "otel", "encryption"):
        assert extra_requirements(extra), extra
