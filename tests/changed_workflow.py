"""A changed copy of the turn workflow, as a deploy of new worker code would bring.

``changed_workflow(directory)`` writes a copy of ``workflows/turn.py`` whose
model call first sleeps for a moment (one more timer command than any
recorded history has), imports it under a fresh module name (the sandbox
imports it again by that name) and returns its workflow class: a worker
running it fails every workflow task that replays an older history with
Temporal's non-determinism error (TMPRL1100), as after a careless deploy.
"""

from __future__ import annotations

import importlib
import sys
import uuid
from pathlib import Path
from typing import Any

import turncore_temporal.workflows.turn as turn

ANCHOR = "    async def _call_model(self, index: int) -> None:\n"
EXTRA = "        await workflow.sleep(timedelta(milliseconds=1))  # the change\n"

BROKEN = '        raise RuntimeError("the new code is broken")  # the change\n'
"""Another change: the model call raises (every workflow task replaying one fails)."""


def changed_workflow(directory: Path, change: str = EXTRA) -> Any:
    source = Path(turn.__file__).read_text()
    assert source.count(ANCHOR) == 1, "the model call moved: update tests/changed_workflow.py"
    name = f"changed_turn_{uuid.uuid4().hex}"
    (directory / f"{name}.py").write_text(source.replace(ANCHOR, ANCHOR + change))
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    module = importlib.import_module(name)
    return module.TurnWorkflow
