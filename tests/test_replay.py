"""Committed histories replay against the current workflow code, so a change that
would break in-flight turns fails the build (use `workflow.patched` for
deliberate behaviour changes, then re-record with `python -m tests.replay.record`)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from turncore_temporal.activities import DATA_CONVERTER
from turncore_temporal.worker import workflow_runner
from turncore_temporal.workflows import TurnWorkflow

HISTORIES = sorted((Path(__file__).parent / "replay" / "histories").glob("*.json"))


def test_histories_are_committed() -> None:
    stems = {p.stem for p in HISTORIES}
    assert {
        "plain",
        "tools_and_inputs",
        "denied_and_cancelled",
        "provider_failure",
        # a parent fanning out to two sub-agents, and the children themselves
        "spawn_agent",
        "spawn_agent.child1",
        # the run that continued as new, and the run that took over
        "continued_as_new.run1",
        "continued_as_new.run2",
        # a tool activity that failed, so the workflow reloaded the file
        "reload_after_failure",
        # a batch of fast tools as one local activity, then a mixed batch run plainly
        "fast_tools",
        # the same, recorded with one patch marker and compact activity results
        "fast_tools_compact",
    } <= stems


def _turn_id(text: str) -> str:
    """The recorded run's turn id (its workflow id too: a Turn workflow runs under its turn id)."""
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    return str(json.loads(base64.b64decode(started["input"]["payloads"][0]["data"]))["turn_id"])


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays(path: Path) -> None:
    text = path.read_text()
    history = WorkflowHistory.from_json(_turn_id(text), text)
    replayer = Replayer(
        workflows=[TurnWorkflow], workflow_runner=workflow_runner(), data_converter=DATA_CONVERTER
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
