"""Deploying new worker code (issue 29): a worker running changed workflow
code (one more timer before the model call, tests/changed_workflow.py) fails
every workflow task that replays an older turn's history. The turn is then
stuck: commands say so within seconds, inputs are applied or certainly not,
and ``recover`` rebuilds the run from the file.

Every test runs the real dev server and real workers; only the model's
decisions are scripted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import BrowserContext, expect
from temporalio.api.enums.v1 import RoutingConfigUpdateState, VersioningBehavior
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from tests.changed_workflow import BROKEN, changed_workflow
from tests.harness import Harness, sync_tool
from tests.test_web_browser import WAIT, browser, open_page  # noqa: F401 (the fixture)
from tests.webui import running_ui
from turnclient.cli.replaycheck import open_turn_ids, replay_turns
from turnclient.lib.stuck import NON_DETERMINISM, stuck_run
from turnclient.runtime.config import ConfigError, WorkerVersioning, load_config
from turnclient.runtime.connection import Runtime
from turncore.errors import StuckTurnError
from turncore.tools import ToolContext
from turncore_temporal.worker import build_worker

ROOT = Path(__file__).resolve().parents[1]

SCRIPT: list[Any] = [
    {"toolCalls": [{"toolName": "write_file", "input": {"path": "x"}}]},
    {"text": "written"},
]
ALLOW = {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"}


def write(value: Any, ctx: ToolContext) -> Any:
    return "ok"


def harness(env: WorkflowEnvironment, work: Path) -> Harness:
    return Harness(
        env.client,
        work,
        SCRIPT,
        tools=[sync_tool("write_file", requires_human=True)],
        implementations={"write_file": write},
    )


async def suspended_then_changed(h: Harness, tmp_path: Path) -> str:
    """A turn suspended for approval under the installed code, then its worker
    replaced by one running the changed workflow."""
    turn_id, outcome = await h.run("write it")
    assert outcome.status == "suspended"
    await h.stop_worker()
    h.workflow = changed_workflow(tmp_path)
    h.start_worker()
    return turn_id


async def roll_back(h: Harness) -> None:
    await h.stop_worker()
    h.workflow = None
    h.start_worker()


async def until(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.2)


async def test_an_input_to_a_stuck_run_is_refused_within_seconds_and_never_applied_later(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with harness(temporal_env, tmp_path) as h:
        turn_id = await suspended_then_changed(h, tmp_path)
        before = h.repo.path_for(turn_id).read_bytes()
        started = time.monotonic()
        with pytest.raises(StuckTurnError) as caught:
            await h.send(turn_id, ALLOW)
        took = time.monotonic() - started
        message = str(caught.value)
        assert "\n" not in message
        assert f"turn {turn_id} is stuck" in message
        assert "non-determinism after a code change" in message
        assert "TMPRL1100" in message
        assert f"turns recover {turn_id}" in message
        assert "was not applied" in message and "send it again" in message
        assert caught.value.applied is False
        assert took < 30, took
        assert h.repo.path_for(turn_id).read_bytes() == before

        stuck = await stuck_run(temporal_env.client, turn_id)
        assert stuck is not None and stuck.kind == NON_DETERMINISM

        # A rollback: the old code replays the run, which sees the input only
        # after its deadline and refuses it. It is never applied.
        await roll_back(h)
        await until(lambda: _not_stuck(temporal_env, turn_id))
        assert h.repo.path_for(turn_id).read_bytes() == before
        assert (await h.turns.state(turn_id)).pending_permissions()
        # Sent again, it is applied once.
        done = await h.send(turn_id, ALLOW)
        assert done.status == "completed"
        await h.assert_file_matches_query(turn_id)


async def _not_stuck(env: WorkflowEnvironment, turn_id: str) -> bool:
    desc = await env.client.get_workflow_handle(turn_id).describe()
    pending = desc.raw_description.pending_workflow_task
    return not desc.raw_description.HasField("pending_workflow_task") or pending.attempt <= 1


async def test_recover_rebuilds_a_stuck_run_from_its_file(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with harness(temporal_env, tmp_path) as h:
        turn_id = await suspended_then_changed(h, tmp_path)
        with pytest.raises(StuckTurnError):
            await h.send(turn_id, ALLOW)
        before = h.repo.path_for(turn_id).read_bytes()
        rebuilt = await h.turns.rebuild(turn_id)
        assert rebuilt is not None and rebuilt.kind == NON_DETERMINISM
        again = await h.turns.recover(turn_id)
        assert again.status == "suspended"
        assert h.repo.path_for(turn_id).read_bytes() == before  # the input was not applied
        assert await stuck_run(temporal_env.client, turn_id) is None
        # The new run, on the changed code, takes the input sent again.
        done = await h.send(turn_id, ALLOW)
        assert done.status == "completed"
        assert h.types(turn_id).count("tool_permission_resolved") == 1
        await h.assert_file_matches_query(turn_id)


async def test_the_worker_says_once_which_turn_fails_and_how_to_fix_it(
    temporal_env: WorkflowEnvironment, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="turncore.worker")
    async with harness(temporal_env, tmp_path) as h:
        turn_id = await suspended_then_changed(h, tmp_path)
        with pytest.raises(StuckTurnError):
            await h.send(turn_id, ALLOW)  # it waits past the second attempt (deliver window)

        def said() -> list[logging.LogRecord]:
            return [
                r
                for r in caplog.records
                if r.name == "turncore.worker" and turn_id in r.getMessage()
            ]

        async def retried_twice() -> bool:
            stuck = await stuck_run(temporal_env.client, turn_id)
            return stuck is not None and stuck.attempts >= 3

        await until(retried_twice)
        assert len(said()) == 1
        record = said()[0]
        assert record.levelno == logging.WARNING
        message = record.getMessage()
        assert "non-determinism after a code change" in message and "TMPRL1100" in message
        assert f"turns recover {turn_id}" in message


async def test_replay_names_each_open_turn_the_changed_code_cannot_replay(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with harness(temporal_env, tmp_path) as h:
        suspended, outcome = await h.run("write it")
        assert outcome.status == "suspended"
        # A turn that has not reached a model call yet replays under either code.
        fresh = await h.create("later")
        changed = changed_workflow(tmp_path)
        open_ids = await open_turn_ids(temporal_env.client, h.task_queue)
        assert suspended in open_ids
        same = await replay_turns(temporal_env.client, [suspended])
        assert [r.ok for r in same] == [True]
        results = await replay_turns(temporal_env.client, [suspended, fresh], workflow=changed)
        by_id = {r.turn_id: r for r in results}
        assert not by_id[suspended].ok
        assert "TMPRL1100" in (by_id[suspended].failure or "")
        assert by_id[fresh].failure == "no workflow on the server"


async def make_current(env: WorkflowEnvironment, name: str, build_id: str) -> None:
    """``temporal worker deployment set-current-version``, once the version's worker polls."""
    request = SetWorkerDeploymentCurrentVersionRequest(
        namespace=env.client.namespace, deployment_name=name, build_id=build_id, identity="test"
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            await env.client.workflow_service.set_worker_deployment_current_version(request)
            break
        except RPCError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)

    async def propagated() -> bool:
        # The routing change reaches the task queue's partitions asynchronously.
        desc = await env.client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=env.client.namespace, deployment_name=name)
        )
        info = desc.worker_deployment_info
        return (
            info.routing_config.current_deployment_version.build_id == build_id
            and info.routing_config_update_state
            == RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_COMPLETED
        )

    await until(propagated)


async def versioning_of(env: WorkflowEnvironment, turn_id: str) -> tuple[int, str]:
    desc = await env.client.get_workflow_handle(turn_id).describe()
    versioning = desc.raw_description.workflow_execution_info.versioning_info
    return versioning.behavior, versioning.deployment_version.build_id


@pytest.mark.parametrize("behavior", ["auto-upgrade", "pinned"])
async def test_versioned_workers_move_turns_or_keep_them_as_configured(
    temporal_env: WorkflowEnvironment, tmp_path: Path, behavior: str
) -> None:
    name = f"turns-{uuid.uuid4().hex[:8]}"
    old = harness(temporal_env, tmp_path)
    old.versioning = WorkerVersioning(name, "build-1", behavior)
    async with old:
        await make_current(temporal_env, name, "build-1")
        turn_id, outcome = await old.run("write it")
        assert outcome.status == "suspended"
        expected = (
            VersioningBehavior.VERSIONING_BEHAVIOR_PINNED
            if behavior == "pinned"
            else VersioningBehavior.VERSIONING_BEHAVIOR_AUTO_UPGRADE
        )
        assert await versioning_of(temporal_env, turn_id) == (expected, "build-1")
        # The rollout: workers of build 2 join the same task queue, then build 2
        # becomes current.
        new = harness(temporal_env, tmp_path)
        new.task_queue = old.task_queue
        new.turns._task_queue = old.task_queue
        new.versioning = WorkerVersioning(name, "build-2", behavior)
        async with new:
            await make_current(temporal_env, name, "build-2")
            done = await new.send(turn_id, ALLOW)
            assert done.status == "completed"
            kept = "build-1" if behavior == "pinned" else "build-2"
            assert (await versioning_of(temporal_env, turn_id))[1] == kept
            # Build 1 retires once its turns are done. (Stopped first: this process's
            # eager starts could otherwise hand a new turn's first task to it.)
            await old.stop_worker()
            fresh, outcome = await new.run("write it")
            assert outcome.status == "suspended"
            assert (await versioning_of(temporal_env, fresh))[1] == "build-2"


def test_versioning_comes_from_turns_toml_or_the_environment(tmp_path: Path) -> None:
    assert load_config(tmp_path, env={}).versioning is None
    (tmp_path / "turns.toml").write_text(
        '[temporal]\ndeployment_name = "turns"\nbuild_id = "2026-12-02.1"\nversioning = "pinned"\n'
    )
    assert load_config(tmp_path, env={}).versioning == WorkerVersioning(
        "turns", "2026-12-02.1", "pinned"
    )
    env = {"TURNS_BUILD_ID": "abc123", "TURNS_VERSIONING": "auto-upgrade"}
    assert load_config(tmp_path, env=env).versioning == WorkerVersioning(
        "turns", "abc123", "auto-upgrade"
    )
    with pytest.raises(ConfigError, match="build_id \\(TURNS_BUILD_ID\\) is not set"):
        load_config(tmp_path / "x", env={"TURNS_DEPLOYMENT_NAME": "turns"})
    with pytest.raises(ConfigError, match="versioning is 'sticky'"):
        load_config(tmp_path, env={"TURNS_VERSIONING": "sticky"})


# ================================================================ the turns CLI


def cli_env(temporal_env: WorkflowEnvironment, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "NO_COLOR": "1",
            "TURNS_HOME": str(home),
            "TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
            "TURNS_TASK_QUEUE": f"deploys-{uuid.uuid4()}",
        }
    )
    return env


async def turns(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "turnclient.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_the_commands_report_mark_and_rebuild_stuck_turns(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = cli_env(temporal_env, home)
    ids = []
    for _ in range(2):
        r = await turns(env, "run", "Ask me for my name", "--json")
        assert r.returncode == 3, r.stderr
        ids.append(json.loads(r.stdout)["turnId"])
    first, second = ids
    # The deploy: a worker running changed workflow code serves the task queue.
    runtime = Runtime.from_work_dir(home, env=env)
    worker = build_worker(
        temporal_env.client,
        runtime.deps,
        task_queue=env["TURNS_TASK_QUEUE"],
        workflow=changed_workflow(tmp_path),
    )
    async with worker:
        before = (await asyncio.to_thread(runtime.repository.read, first))[:]
        started = time.monotonic()
        r = await turns(env, "complete", first, "call_0_0", "--text", "Ada", "--no-worker")
        took = time.monotonic() - started
        assert r.returncode == 1, (r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert f"turn {first} is stuck: non-determinism after a code change" in lines[0]
        assert "was not applied" in lines[0] and f"turns recover {first}" in lines[0]
        assert took < 40, took
        assert await asyncio.to_thread(runtime.repository.read, first) == before
        # The second turn gets stuck too once anything reaches its run.
        await temporal_env.client.get_workflow_handle(second).signal("nudge")
        await until(lambda: _stuck(temporal_env, second))

        r = await turns(env, "list", "--json")
        marks = {row["turnId"]: row["stuck"] for row in json.loads(r.stdout)}
        assert "non-determinism" in (marks[first] or "") and marks[second]
        r = await turns(env, "list")
        assert "STUCK (non-determinism after a code change" in r.stdout
        r = await turns(env, "show", first)
        assert f"turn {first} is stuck" in r.stdout and f"turns recover {first}" in r.stdout
        r = await turns(env, "show", first, "--json")
        assert "non-determinism" in json.loads(r.stdout)["stuck"]["cause"]
        r = await turns(env, "state", first)
        assert f"turn {first} is stuck" in r.stdout
        r = await turns(env, "watch", first, "--no-worker")
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert r.stderr.strip().splitlines() == [
            next(x for x in r.stderr.splitlines() if f"turn {first} is stuck" in x)
        ]

        r = await turns(env, "recover", first, "--no-worker")
        assert r.returncode == 3, (r.stdout, r.stderr)
        assert (
            f"turn {first} was stuck (non-determinism after a code change" in r.stdout
            and "terminated its run and started a new one from the turn's file" in r.stdout
        )
        r = await turns(env, "recover", "--all-stuck", "--json")
        assert r.returncode == 0, r.stderr
        assert [t["turnId"] for t in json.loads(r.stdout)["rebuilt"]] == [second]
        r = await turns(env, "recover", "--all-stuck")
        assert r.stdout.strip() == "no stuck turns"
        # The new runs take inputs under the changed code.
        for turn_id in ids:
            r = await turns(env, "complete", turn_id, "call_0_0", "--text", "Ada", "--no-worker")
            assert r.returncode == 0, (r.stdout, r.stderr)
        r = await turns(env, "list", "--json")
        assert all(row["stuck"] is None for row in json.loads(r.stdout) if row["turnId"] in ids)


async def _stuck(env: WorkflowEnvironment, turn_id: str) -> bool:
    return await stuck_run(env.client, turn_id) is not None


async def test_turns_replay_checks_open_turns_against_the_installed_code(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = cli_env(temporal_env, home)
    r = await turns(env, "run", "Ask me for my name", "--json")
    assert r.returncode == 3, r.stderr
    turn_id = json.loads(r.stdout)["turnId"]
    r = await turns(env, "replay")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "all 1 turn replay against this code"
    r = await turns(env, "replay", turn_id, "2026-01-01T00-00-00Z-0000000-000", "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout) == {
        "replayed": 2,
        "incompatible": [
            {"turnId": "2026-01-01T00-00-00Z-0000000-000", "failure": "no workflow on the server"}
        ],
    }


async def test_the_web_ui_marks_a_stuck_turn_and_refuses_its_decisions(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    browser: BrowserContext,  # noqa: F811 (the fixture of tests/test_web_browser.py)
) -> None:
    queue = f"ui-{uuid.uuid4()}"
    async with running_ui(temporal_env, tmp_path, worker=False, task_queue=queue) as ui:
        runtime = ui.runtime

        def worker(workflow: Any = None) -> Any:
            extra = {"workflow": workflow} if workflow is not None else {}
            return build_worker(temporal_env.client, runtime.deps, task_queue=queue, **extra)

        async with worker():
            turn_id, view = await ui.suspended("Ask me for my name")
            assert view["stuck"] is None
        before = ui.file(turn_id)
        async with worker(changed_workflow(tmp_path)):
            r = await ui.http.post(
                f"/api/turns/{turn_id}/calls/call_0_0/complete", json={"text": "Ada"}
            )
            assert r.status_code == 503, r.text
            error = r.json()["error"]
            assert f"turn {turn_id} is stuck" in error and "was not applied" in error
            view = await ui.view(turn_id)
            assert "non-determinism" in view["stuck"]["cause"]
            assert view["stuck"]["fix"] == f"turns recover {turn_id}"
            r = await ui.http.get("/api/turns")
            (row,) = [t for t in r.json()["turns"] if t["turnId"] == turn_id]
            assert "non-determinism" in row["stuck"]
            assert ui.file(turn_id) == before
            # In a real browser: the list's badge, and the cause and fix on the turn's page.
            page = await open_page(browser, ui.url + "/")
            # The list shows a short id; the link's accessible name is the whole one.
            link = page.get_by_role("link", name=turn_id, exact=True)
            listed = page.get_by_role("row").filter(has=link)
            await expect(listed.get_by_text("stuck", exact=True)).to_be_visible(timeout=WAIT)
            await listed.get_by_role("link", name=turn_id).click()
            banner = page.locator("#stuck")
            await expect(banner).to_contain_text(
                "Stuck: non-determinism after a code change", timeout=WAIT
            )
            await expect(banner).to_contain_text(f"Fix: turns recover {turn_id}")
            assert page.problems == []  # type: ignore[attr-defined]


async def test_workers_rebuild_a_turn_after_repeated_nondeterminism_when_told_to(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with harness(temporal_env, tmp_path) as h:
        turn_id, outcome = await h.run("write it")
        assert outcome.status == "suspended"
        first_run = (await temporal_env.client.get_workflow_handle(turn_id).describe()).run_id
        await h.stop_worker()
        h.workflow = changed_workflow(tmp_path)
        h.rebuild_stuck_after = 2
        h.start_worker()
        before = h.repo.path_for(turn_id).read_bytes()
        await temporal_env.client.get_workflow_handle(turn_id).signal("nudge")

        async def rebuilt() -> bool:
            desc = await temporal_env.client.get_workflow_handle(turn_id).describe()
            return (
                desc.run_id != first_run and await stuck_run(temporal_env.client, turn_id) is None
            )

        await until(rebuilt, timeout=90)
        first = temporal_env.client.get_workflow_handle(turn_id, run_id=first_run)
        assert (await first.describe()).status == WorkflowExecutionStatus.TERMINATED
        assert h.repo.path_for(turn_id).read_bytes() == before
        done = await h.send(turn_id, ALLOW)
        assert done.status == "completed"
        await h.assert_file_matches_query(turn_id)


def test_the_self_heal_is_off_unless_configured(tmp_path: Path) -> None:
    assert load_config(tmp_path, env={}).rebuild_stuck_after is None
    (tmp_path / "turns.toml").write_text("[temporal]\nrebuild_stuck_after = 3\n")
    assert load_config(tmp_path, env={}).rebuild_stuck_after == 3
    assert (
        load_config(tmp_path, env={"TURNS_REBUILD_STUCK_AFTER": "off"}).rebuild_stuck_after is None
    )
    with pytest.raises(ConfigError, match="TURNS_REBUILD_STUCK_AFTER is 'soon'"):
        load_config(tmp_path, env={"TURNS_REBUILD_STUCK_AFTER": "soon"})


async def test_turns_worker_logs_at_info_by_default_as_the_docs_say(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = cli_env(temporal_env, home)
    docs = (ROOT / "docs" / "operations.md").read_text()
    assert "`TURNS_LOG_LEVEL` | log level (`INFO` for workers" in docs
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "turnclient.cli",
        "worker",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    while b"Ctrl-C to stop." not in await asyncio.wait_for(process.stdout.readline(), 60):
        pass
    process.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err
    assert b"INFO temporalio.worker._worker: Beginning worker shutdown" in err


async def test_any_other_failing_workflow_task_is_reported_in_its_own_words(
    temporal_env: WorkflowEnvironment, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="turncore.worker")
    async with harness(temporal_env, tmp_path) as h:
        turn_id, outcome = await h.run("write it")
        assert outcome.status == "suspended"
        await h.stop_worker()
        h.workflow = changed_workflow(tmp_path, BROKEN)
        h.start_worker()
        with pytest.raises(StuckTurnError) as caught:
            await h.send(turn_id, ALLOW)
        message = str(caught.value)
        assert f"turn {turn_id} is stuck: its workflow task fails: " in message
        assert "the new code is broken" in message and "non-determinism" not in message
        assert caught.value.applied is False
        said = [
            r.getMessage()
            for r in caplog.records
            if r.name == "turncore.worker" and turn_id in r.getMessage()
        ]
        assert len(said) == 1 and "the new code is broken" in said[0]


async def test_a_long_wait_checks_for_a_stuck_run_at_doubling_gaps(
    temporal_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each stuck check is a describe on the server: a wait of a second and a half,
    checked from 50 ms on, asks a handful of times, not thirty."""
    from turnclient.lib import api

    checks: list[float] = []

    async def counted(client: Any, turn_id: str) -> Any:
        checks.append(time.monotonic())
        return await stuck_run(client, turn_id)

    monkeypatch.setattr(api, "stuck_run", counted)

    def slow(value: Any, ctx: ToolContext) -> Any:
        time.sleep(1.5)
        return "done"

    script = [{"toolCalls": [{"toolName": "slow", "input": {}}]}, {"text": "finished"}]
    async with Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=[sync_tool("slow")],
        implementations={"slow": slow},
        permissions={"builtin:slow": "none"},
    ) as h:
        turns = api.TurnClient(
            h.client, h.repo, h.resolver, task_queue=h.task_queue, stuck_poll_seconds=0.05
        )
        started = time.monotonic()
        outcome = await turns.advance_turn(await h.create("go")).outcome
        waited = time.monotonic() - started
    assert outcome.status == "completed"
    # Doubling from 50 ms: about five checks in 1.5 s, under ten for waits up to
    # ~15 s on a loaded machine; a check every 50 ms would make thirty or more.
    assert waited >= 1.5
    assert 2 <= len(checks) <= 10, (len(checks), waited)
