"""A real web UI for one test: a work dir in tmp, a worker on a fresh task queue of
the session's dev server, and the Starlette app served by uvicorn on 127.0.0.1.

Only the model's decisions are scripted (the built-in demo model); Temporal,
the files, the activities and HTTP are the real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from temporalio.testing import WorkflowEnvironment

from turnclient.runtime.connection import Runtime
from turnclient.servers.ui import BODY_TIMEOUT, Tokens, create_app, web_ui
from turncore_temporal.worker import serving


@dataclass
class Ui:
    url: str
    runtime: Runtime
    http: httpx.AsyncClient

    def file(self, turn_id: str) -> bytes:
        return self.runtime.repository.path_for(turn_id).read_bytes()

    async def create(self, prompt: str, **extra: Any) -> str:
        r = await self.http.post("/api/turns", json={"prompt": prompt, **extra})
        assert r.status_code == 201, r.text
        return str(r.json()["turnId"])

    async def view(self, turn_id: str) -> dict[str, Any]:
        r = await self.http.get(f"/api/turns/{turn_id}")
        assert r.status_code == 200, r.text
        doc: dict[str, Any] = r.json()
        return doc

    async def until(
        self, turn_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 60
    ) -> dict[str, Any]:
        """The turn's view once ``check`` holds (polled against a deadline)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            view = await self.view(turn_id)
            if check(view):
                return view
            assert asyncio.get_running_loop().time() < deadline, (
                f"turn never got there: {view['status']}"
            )
            await asyncio.sleep(0.05)

    async def suspended(self, prompt: str) -> tuple[str, dict[str, Any]]:
        turn_id = await self.create(prompt)
        return turn_id, await self.until(turn_id, lambda v: v["status"] == "suspended")


@asynccontextmanager
async def running_ui(
    env: WorkflowEnvironment,
    tmp_path: Path,
    *,
    token: str | None = None,
    tokens: Tokens | None = None,
    toml: str | None = None,
    worker: bool = True,
    task_queue: str | None = None,
    host: str = "127.0.0.1",
    body_timeout: float = BODY_TIMEOUT,
    environ: dict[str, str] | None = None,
) -> AsyncIterator[Ui]:
    """``worker=False``: workers run elsewhere (another process on the same task queue);
    ``toml``: the work dir's ``turns.toml``."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    if toml is not None:
        (home / "turns.toml").write_text(toml)
    queue = task_queue or f"ui-{uuid.uuid4()}"
    runtime = Runtime.from_work_dir(home, env={"TURNS_TASK_QUEUE": queue, **(environ or {})})
    async with contextlib.AsyncExitStack() as stack:
        if worker:
            await stack.enter_async_context(serving(runtime, env.client))
        app = create_app(runtime, env.client, token=token, tokens=tokens, body_timeout=body_timeout)
        async with web_ui(app, host, 0) as web:
            headers = {"X-Turns-Token": token} if token else {}
            async with httpx.AsyncClient(base_url=web.url, timeout=60, headers=headers) as http:
                yield Ui(web.url, runtime, http)
