"""The load-with-kills scenario, scaled down (issue 9 §1): ``bench/kills.py`` runs
the full one (200 turns, several worker and server kills)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.kills import run_kills

pytestmark = pytest.mark.temporal  # starts its own dev server


async def test_turns_survive_worker_and_server_kills(tmp_path: Path) -> None:
    # A few turns at a time, so progress is spread out and every kill (placed by
    # progress) lands while turns are still in flight, however fast the machine.
    result = await run_kills(
        turns=16, worker_kills=1, server_kills=1, concurrency=4, work=tmp_path / "w"
    )
    assert result["workerKills"] == 1 and result["serverKills"] == 1, result
    assert result["outcomes"] == {"completed": 16}, result
    assert result["failedRuns"] == 0, result
    assert result["duplicateEvents"] == 0, result
    assert result["duplicateToolRuns"] == 0, result
    assert result["invalidFiles"] == 0, result
