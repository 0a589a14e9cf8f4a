"""examples/webapp.py in process (ASGI) against the real dev server."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
from temporalio.testing import WorkflowEnvironment

from examples.webapp import OPS, create_app, ops_model
from turnclient import Turns


async def _until_listed(http: httpx.AsyncClient) -> list[dict[str, object]]:
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        pending: list[dict[str, object]] = (await http.get("/approvals")).json()
        if pending or asyncio.get_running_loop().time() > deadline:
            return pending
        await asyncio.sleep(0.1)


async def test_start_list_approve_and_errors(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    turns = Turns(
        tmp_path,
        agents=[OPS],
        models={"ops": ops_model},
        client=temporal_env.client,
        env={"TURNS_TASK_QUEUE": f"tq-{uuid.uuid4()}"},
    )
    async with turns:
        app = create_app(turns)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            started = await http.post("/turns", json={"prompt": "please restart web"})
            assert started.status_code == 201, started.text
            body = started.json()
            assert body["status"] == "suspended"
            turn_id = body["turnId"]

            # Approvals are found through visibility, which is eventually consistent:
            # wait (with a deadline) until the just-suspended turn is listed.
            pending = await _until_listed(http)
            assert [(p["turnId"], p["toolName"]) for p in pending] == [(turn_id, "restart_service")]
            call = pending[0]["toolCallId"]

            done = await http.post(f"/turns/{turn_id}/approvals/{call}", json={"decision": "allow"})
            assert done.status_code == 200, done.text
            assert (done.json()["status"], done.json()["text"]) == (
                "completed",
                "done: web restarted",
            )
            assert (await http.get(f"/turns/{turn_id}")).json()["status"] == "completed"
            assert (await http.get("/approvals")).json() == []

            again = await http.post(
                f"/turns/{turn_id}/approvals/{call}", json={"decision": "allow"}
            )
            assert again.status_code == 409
            assert (await http.get("/turns/2025-01-01T00-00-00Z-0000001-000")).status_code == 404
            assert (await http.get("/turns/not-a-turn-id")).status_code == 400
            assert (
                await http.post("/turns", json={"prompt": "x", "agent": "nobody"})
            ).status_code == 409
            assert (await http.post("/turns", json={"nope": 1})).status_code == 400
