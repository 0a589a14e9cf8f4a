"""The stock `temporal` CLI can drive a suspended turn: signal it and query its state."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, sync_tool
from turnclient.runtime.devserver import find_temporal_cli
from turncore.tools import ToolContext


async def _cli(env: WorkflowEnvironment, *args: str) -> str:
    # Never block the worker's event loop: run the CLI as an async subprocess.
    proc = await asyncio.create_subprocess_exec(
        find_temporal_cli(),
        *args,
        "--address",
        env.client.service_client.config.target_host,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


def _empty_lists_as_null(value: Any) -> Any:
    if isinstance(value, list):
        return [_empty_lists_as_null(v) for v in value] if value else None
    if isinstance(value, dict):
        return {k: _empty_lists_as_null(v) for k, v in value.items()}
    return value


async def test_signal_and_query_with_the_stock_cli(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    def write(value: Any, ctx: ToolContext) -> Any:
        return "written"

    script = [
        {"toolCalls": [{"toolName": "write_file", "input": {"path": "a.txt"}}]},
        {"text": "saved it"},
    ]
    async with Harness(
        temporal_env.client,
        tmp_path,
        script,
        tools=[sync_tool("write_file")],
        implementations={"write_file": write},
    ) as h:
        turn_id, outcome = await h.run("save a file")
        assert outcome.status == "suspended"
        raw = await _cli(
            temporal_env,
            "workflow",
            "query",
            "--workflow-id",
            turn_id,
            "--type",
            "state",
            "-o",
            "json",
        )
        queried = json.loads(raw)["queryResult"][0]
        assert queried["toolCalls"][0]["permission"]["required"]["toolName"] == "write_file"
        decision = {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"}
        await _cli(
            temporal_env,
            "workflow",
            "signal",
            "--workflow-id",
            turn_id,
            "--name",
            "permission_decision",
            "--input",
            json.dumps(decision),
        )
        result = await h.client.get_workflow_handle(turn_id).result()
        assert result["status"] == "completed"
        assert result["output"]["content"][0]["text"] == "saved it"
        raw = await _cli(
            temporal_env,
            "workflow",
            "query",
            "--workflow-id",
            turn_id,
            "--type",
            "state",
            "-o",
            "json",
        )
        final = json.loads(raw)["queryResult"][0]
        final.pop("rejectedInputs")
        # The CLI prints empty arrays as null; everything else must match the file.
        assert final == _empty_lists_as_null(h.file_state(turn_id).to_wire())
