"""Webhook notifications against a real receiver on 127.0.0.1 (Starlette under uvicorn).

A worker with ``[notify]`` posts a signed JSON body when a turn starts waiting
for a person and when it ends; a receiver that fails first gets the same
delivery id again; one that never answers or refuses (4xx) is given up on
within the bound, logged once, and the turn is never held up.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from temporalio.testing import WorkflowEnvironment

from tests.webui import running_ui
from turnclient.runtime.config import ConfigError
from turnclient.runtime.connection import Runtime
from turnclient.runtime.notify import NotifyTable, Webhook, notify_dir, sign
from turnclient.servers.ui import web_ui
from turncore_temporal.worker import notifier_for

SECRET = "whsec-test-0123456789"
SAVE = "Save 'hello' to notes.txt"


@dataclass
class Receiver:
    url: str
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    def bodies(self) -> list[dict[str, Any]]:
        return [orjson.loads(b) for _, b in self.got]

    async def until(self, check: Callable[[], bool], timeout: float = 30) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while not check():
            assert asyncio.get_running_loop().time() < deadline, self.got
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def receiver(answer: Callable[[int], Any]) -> AsyncIterator[Receiver]:
    """A webhook receiver; ``answer(n)`` (n: requests so far for this delivery id) gives
    the status to answer, or None to never answer."""
    seen: dict[str, int] = {}
    hang = asyncio.Event()

    async def hook(request: Request) -> Response:
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        rec.got.append((headers, body))
        delivery = headers.get("x-turns-delivery", "")
        seen[delivery] = seen.get(delivery, 0) + 1
        status = answer(seen[delivery])
        if status is None:
            await hang.wait()  # never answers (until the test ends)
        return Response(status_code=status or 200)

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    async with web_ui(app, "127.0.0.1", 0) as web:
        rec = Receiver(web.url + "/hook")
        try:
            yield rec
        finally:
            hang.set()


def toml(**extra: Any) -> str:
    lines = ['webhook_url_env = "TEST_HOOK_URL"', 'secret_env = "TEST_HOOK_SECRET"']
    lines += [f"{k} = {orjson.dumps(v).decode()}" for k, v in extra.items()]
    return "[notify]\n" + "\n".join(lines) + "\n"


def verified(headers: dict[str, str], body: bytes) -> bool:
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["x-turns-signature"], expected)


@pytest.fixture
def hook_env(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    def set_url(url: str) -> None:
        monkeypatch.setenv("TEST_HOOK_URL", url)
        monkeypatch.setenv("TEST_HOOK_SECRET", SECRET)

    return set_url


async def test_waiting_and_ended_are_posted_signed_with_links_and_a_delivery_id(
    temporal_env: WorkflowEnvironment, tmp_path: Path, hook_env: Callable[[str], None]
) -> None:
    async with receiver(lambda n: 200) as rec:
        hook_env(rec.url)
        config = toml(events=["waiting", "ended"], ui_url="https://turns.example.test/")
        async with running_ui(temporal_env, tmp_path, toml=config) as ui:
            turn_id, view = await ui.suspended(SAVE)
            await rec.until(lambda: len(rec.got) >= 1)
            headers, raw = rec.got[0]
            assert verified(headers, raw)
            body = orjson.loads(raw)
            call = view["pending"]["permissions"][0]["toolCallId"]
            assert body["type"] == headers["x-turns-event"] == "turn.waiting"
            assert body["deliveryId"] == headers["x-turns-delivery"]
            lines = ui.file(turn_id).splitlines()
            line = next(i for i, x in enumerate(lines, 1) if b'"turn_suspended"' in x)
            assert body["deliveryId"] == f"{turn_id}:{line}"
            assert (body["turnId"], body["agent"]) == (turn_id, "demo")
            (waiting,) = body["waitingFor"]
            assert waiting["label"] == "approve write_file" and waiting["toolCallId"] == call
            base = f"https://turns.example.test/api/turns/{turn_id}/calls/{call}"
            assert waiting["links"] == {"approve": f"{base}/approve", "deny": f"{base}/deny"}
            assert body["links"]["turn"] == f"https://turns.example.test/turns/{turn_id}"

            r = await ui.http.post(f"/api/turns/{turn_id}/calls/{call}/approve", json={})
            assert r.status_code == 200, r.text
            await rec.until(lambda: any(b["type"] == "turn.ended" for b in rec.bodies()))
            ended = next(b for b in rec.bodies() if b["type"] == "turn.ended")
            assert ended["status"] == "completed" and ended["turnId"] == turn_id
            assert all(verified(h, b) for h, b in rec.got)
            ids = [b["deliveryId"] for b in rec.bodies()]
            assert len(ids) == len(set(ids)) == 2  # each event once, to a receiver that took it
            outbox = notify_dir(ui.runtime.work_dir) / "outbox"
            await rec.until(lambda: not list(outbox.glob("*.json")))
            assert b"deliveryId" not in ui.file(turn_id)  # never in the turn's log


async def test_a_receiver_that_fails_first_gets_the_same_delivery_again(
    temporal_env: WorkflowEnvironment, tmp_path: Path, hook_env: Callable[[str], None]
) -> None:
    async with receiver(lambda n: 503 if n == 1 else 200) as rec:
        hook_env(rec.url)
        config = toml(backoff_seconds=0.2, max_attempts=5)
        async with running_ui(temporal_env, tmp_path, toml=config) as ui:
            turn_id, _ = await ui.suspended(SAVE)
            await rec.until(lambda: len(rec.got) >= 2)
            first, second = rec.bodies()[:2]
            assert first == second  # the very same body, and id, resent
            assert rec.got[0][0]["x-turns-delivery"] == rec.got[1][0]["x-turns-delivery"]
            assert first["turnId"] == turn_id
            outbox = notify_dir(ui.runtime.work_dir) / "outbox"
            await rec.until(lambda: not list(outbox.glob("*.json")))
            assert not (notify_dir(ui.runtime.work_dir) / "failed").exists()


async def test_a_receiver_that_never_answers_holds_up_nothing_and_is_given_up_on(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    hook_env: Callable[[str], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="turnclient.runtime.notify")
    async with receiver(lambda n: None) as rec:
        hook_env(rec.url)
        config = toml(timeout_seconds=0.5, backoff_seconds=0.1, max_attempts=2)
        async with running_ui(temporal_env, tmp_path, toml=config) as ui:
            turn_id, view = await ui.suspended(SAVE)
            call = view["pending"]["permissions"][0]["toolCallId"]
            await rec.until(lambda: len(rec.got) >= 1)
            # The receiver hangs; the turn goes on as if there were none.
            r = await ui.http.post(f"/api/turns/{turn_id}/calls/{call}/approve", json={})
            assert r.status_code == 200, r.text
            assert r.json()["outcome"]["status"] == "completed"
            failed = notify_dir(ui.runtime.work_dir) / "failed"
            await rec.until(lambda: failed.is_dir() and len(list(failed.glob("*.json"))) == 1)
            assert len(rec.got) == 2  # max_attempts, then no more
            given_up = [r for r in caplog.records if "given up" in r.getMessage()]
            assert len(given_up) == 1, given_up
            assert "ReadTimeout" in given_up[0].getMessage()
            assert rec.url not in caplog.text  # the URL may hold a secret


async def test_a_receiver_answering_4xx_is_tried_once_and_logged_once(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    hook_env: Callable[[str], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="turnclient.runtime.notify")
    async with receiver(lambda n: 400) as rec:
        hook_env(rec.url)
        config = toml(backoff_seconds=0.05, max_attempts=10)
        async with running_ui(temporal_env, tmp_path, toml=config) as ui:
            await ui.suspended(SAVE)
            failed = notify_dir(ui.runtime.work_dir) / "failed"
            await rec.until(lambda: failed.is_dir() and len(list(failed.glob("*.json"))) == 1)
            # Given up at once: nothing is left in the outbox to send again.
            assert not list((notify_dir(ui.runtime.work_dir) / "outbox").glob("*.json"))
            assert len(rec.got) == 1
            given_up = [r for r in caplog.records if "given up" in r.getMessage()]
            assert len(given_up) == 1 and "refused" in given_up[0].getMessage()
            assert "HTTP 400" in given_up[0].getMessage()


async def test_an_entry_left_by_a_stopped_worker_is_sent_by_the_next(
    tmp_path: Path, hook_env: Callable[[str], None]
) -> None:
    async with receiver(lambda n: 200) as rec:
        hook_env(rec.url)
        (tmp_path / "turns.toml").write_text(toml())
        runtime = Runtime.from_work_dir(tmp_path)
        left = notifier_for(runtime)
        assert left is not None
        body = {"type": "turn.waiting", "deliveryId": "T:3", "turnId": "T"}
        left._write([("T:3", "turn.waiting", body)])  # queued; that process then died
        left._write([("T:3", "turn.waiting", body)])  # its retried append: queued once
        assert len(list((notify_dir(tmp_path) / "outbox").glob("*.json"))) == 1
        after = notifier_for(runtime)
        assert after is not None
        async with after.running():
            await rec.until(lambda: len(rec.got) == 1)
        assert rec.bodies() == [body] and verified(*rec.got[0])


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TEST_HOOK_SECRET": SECRET}, "webhook_url_env names $TEST_HOOK_URL, which is not set"),
        (
            {
                "TEST_HOOK_URL": "ftp://hooks.example.test/x?token=SECRETPATH",
                "TEST_HOOK_SECRET": "s",
            },
            "must be an http(s) URL (its scheme is 'ftp')",
        ),
        ({"TEST_HOOK_URL": "http://127.0.0.1:9/hook"}, "secret_env names $TEST_HOOK_SECRET"),
    ],
)
def test_a_webhook_that_cannot_be_used_is_a_config_error(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    (tmp_path / "turns.toml").write_text(toml())
    runtime = Runtime.from_work_dir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        notifier_for(runtime, env)
    assert message in str(caught.value)
    assert "SECRETPATH" not in str(caught.value)


@pytest.mark.parametrize(
    ("table", "where"),
    [
        ('[notify]\nwebhook_url_env = "A"\n', "secret_env"),
        ('[notify]\nwebhook_url_env = "not a name"\nsecret_env = "B"\n', "webhook_url_env"),
        ('[notify]\nwebhook_url_env = "A"\nsecret_env = "B"\nevents = ["later"]\n', "events"),
        ('[notify]\nwebhook_url_env = "A"\nsecret_env = "B"\nui_url = "ftp://x"\n', "ui_url"),
        ('[notify]\nwebhook_url_env = "A"\nsecret_env = "B"\nmax_attempts = 0\n', "max_attempts"),
    ],
)
def test_a_malformed_notify_table_names_its_key(tmp_path: Path, table: str, where: str) -> None:
    (tmp_path / "turns.toml").write_text(table)
    with pytest.raises(ConfigError) as caught:
        Runtime.from_work_dir(tmp_path)
    assert f"notify.{where}" in str(caught.value)


def test_the_signature_is_hmac_sha256_of_the_exact_body() -> None:
    table = NotifyTable(webhook_url_env="A", secret_env="B")
    hook = Webhook.resolve(table, {"A": "http://127.0.0.1/x", "B": SECRET})
    body = b'{"a":1}'

    assert sign(hook.secret, body) == (
        "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    )
    assert sign(hook.secret, body + b" ") != sign(hook.secret, body)
