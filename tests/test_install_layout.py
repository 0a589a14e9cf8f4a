"""The installed distribution adds no generic top-level module names.

Temporal applications very often have their own ``workflows``,
``activities`` and ``worker`` modules; turncore's live under
``turncore_temporal`` so neither shadows the other. This builds a real wheel
from the working tree and reads its file list.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_has_only_project_namespaces(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("turncore-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
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
