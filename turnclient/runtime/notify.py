"""Webhook notifications: tell a person that a turn waits for them (and, if asked, that
it ended), from the worker, at least once, never in the turn's way.

How it works. ``[notify]`` in ``turns.toml`` names two environment variables,
one holding the webhook URL and one the signing secret. A worker with it set
observes every batch its append activity lands (``TurnDependencies.on_appended``):
a ``turn_suspended`` line (and a terminal line, with ``events = ["waiting",
"ended"]``) becomes one delivery, written to the work dir's outbox
(``notify/outbox/``, one JSON file per delivery, written whole by rename)
before the activity returns. A background task in the same process sends
each outbox entry: ``POST`` of a JSON body, signed with HMAC-SHA256 over the
exact body bytes (``X-Turns-Signature: sha256=<hex>``), with the delivery id
in ``X-Turns-Delivery``. A 2xx answer removes the entry. A 5xx, 408, 429, a
refused connection or no answer within ``timeout_seconds`` is tried again
after ``backoff_seconds``, doubling up to ``max_backoff_seconds``, until
``max_attempts``; any other 4xx is final at once (the receiver refuses the
body: retrying it would only repeat the refusal). A final failure is logged
once and the entry is moved to ``notify/failed/``.

At least once, and de-duplicable: the delivery id is the turn id and the
line number of the event (``TURN_ID:LINE``), so the retried append of an
activity (which finds its lines already landed and reports them again)
makes the same id, and so does an entry resent after a crash. The outbox
survives a worker restart; a worker entering ``serving`` resumes the entries
it finds. Several workers sharing one work dir each lock an entry
(``flock``) while they send it, so two never send one entry at once.

Never in the way: observing only writes a small file (a failure to write it
is logged, and the turn goes on); sending runs in its own task, outside any
activity and outside the workflow, so a slow or dead receiver delays
nothing and fails nothing. Notifications are not spec events and never
enter the turn's log or Temporal history.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, urlsplit

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from turncore.events import (
    TerminalEvent,
    TurnCancelled,
    TurnCompleted,
    TurnCreated,
    TurnEvent,
    TurnFailed,
    TurnSuspended,
)
from turncore.storage.repository import TurnRepository

if TYPE_CHECKING:
    # Loaded where webhooks are sent: reading a config (every `turns show`)
    # needs neither the HTTP client nor the event loop.
    import asyncio

    import httpx

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Turns-Signature"
DELIVERY_HEADER = "X-Turns-Delivery"
EVENT_HEADER = "X-Turns-Event"
ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"

NotifyOn = Literal["waiting", "ended"]


class NotifyTable(BaseModel):
    """``[notify]`` in ``turns.toml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    webhook_url_env: str = Field(pattern=f"^{ENV_NAME_PATTERN}$")
    """The environment variable holding the webhook URL (http or https)."""
    secret_env: str = Field(pattern=f"^{ENV_NAME_PATTERN}$")
    """The environment variable holding the HMAC-SHA256 signing secret."""
    events: list[NotifyOn] = ["waiting"]
    """``waiting``: a turn starts waiting for a person; ``ended``: a turn ends."""
    ui_url: str | None = None
    """The web UI's address as people reach it (links in the body); none: paths only."""
    max_attempts: int = Field(default=8, ge=1, le=100)
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    backoff_seconds: float = Field(default=2.0, gt=0, le=3600)
    max_backoff_seconds: float = Field(default=300.0, gt=0, le=86400)

    @field_validator("events")
    @classmethod
    def _some(cls, value: list[NotifyOn]) -> list[NotifyOn]:
        if not value:
            raise ValueError('name at least one of "waiting", "ended"')
        return value

    @field_validator("ui_url")
    @classmethod
    def _http_ui(cls, value: str | None) -> str | None:
        if value is not None and not _is_http(value):
            raise ValueError(f"ui_url must be an http(s) URL, got {value!r}")
        return value.rstrip("/") if value is not None else None


class NotifyConfigError(ValueError):
    """``[notify]`` cannot be used as configured; the message names the key."""


def _is_http(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


@dataclass(frozen=True)
class Webhook:
    """The resolved ``[notify]``: where to send, how to sign, and how hard to try."""

    url: str
    secret: bytes
    table: NotifyTable

    @classmethod
    def resolve(cls, table: NotifyTable, env: Mapping[str, str]) -> Webhook:
        url = env.get(table.webhook_url_env)
        if not url:
            raise NotifyConfigError(
                f"[notify] webhook_url_env names ${table.webhook_url_env}, which is not set"
            )
        if not _is_http(url):
            # The scheme only: the rest of the URL may hold a secret path or token.
            scheme = urlsplit(url).scheme or "none"
            raise NotifyConfigError(
                f"[notify] ${table.webhook_url_env} must be an http(s) URL (its scheme is {scheme!r})"
            )
        secret = env.get(table.secret_env)
        if not secret:
            raise NotifyConfigError(
                f"[notify] secret_env names ${table.secret_env}, which is not set"
            )
        return cls(url, secret.encode(), table)


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Turns-Signature`` value: ``sha256=`` and the hex HMAC-SHA256 of the body."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


# ---------------------------------------------------------------- what is sent


def _links(base: str | None, turn_id: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    prefix = base or ""
    turn = quote(turn_id)
    links: dict[str, Any] = {"turn": f"{prefix}/turns/{turn}"}
    for c in calls:
        call = f"{prefix}/api/turns/{turn}/calls/{quote(c['toolCallId'])}"
        c["links"] = (
            {"approve": f"{call}/approve", "deny": f"{call}/deny"}
            if c["kind"] == "permission"
            else {"complete": f"{call}/complete"}
        )
    return links


def _outcome(event: TerminalEvent) -> dict[str, Any]:
    match event:
        case TurnCompleted():
            return {"status": "completed", "finishReason": event.finish_reason}
        case TurnFailed():
            return {"status": "failed", "error": event.error[:500]}
        case TurnCancelled():
            return {"status": "cancelled", "reason": event.reason}


def bodies(
    table: NotifyTable, head: TurnEvent, turn_id: str, end: int, events: Sequence[TurnEvent]
) -> list[tuple[str, str, dict[str, Any]]]:
    """(delivery id, kind, body) for each event of a landed batch that notifies.

    ``head`` is the turn's ``turn_created``; ``end`` the batch's last line number.
    """
    out: list[tuple[str, str, dict[str, Any]]] = []
    first = end - len(events) + 1
    for i, event in enumerate(events):
        line = first + i
        delivery = f"{turn_id}:{line}"
        about: dict[str, Any] = {"deliveryId": delivery, "turnId": turn_id, "at": event.ts}
        if isinstance(head, TurnCreated):
            resolved = head.agent.resolved
            about |= {
                "agent": resolved.agent_id,
                "model": resolved.model.label(),
                "session": head.session_id,
            }
        if isinstance(event, TurnSuspended) and "waiting" in table.events:
            calls: list[dict[str, Any]] = [
                {
                    "kind": "permission",
                    "toolCallId": p.tool_call_id,
                    "toolName": p.tool_name,
                    "label": f"approve {p.tool_name}",
                }
                for p in event.pending_permissions
            ] + [
                {
                    "kind": "async",
                    "toolCallId": a.tool_call_id,
                    "toolName": a.tool_name,
                    "label": f"answer {a.tool_name}",
                }
                for a in event.pending_async_tools
            ]
            links = _links(table.ui_url, turn_id, calls)
            body = {"type": "turn.waiting", **about, "waitingFor": calls, "links": links}
            out.append((delivery, "turn.waiting", body))
        elif isinstance(event, TurnCompleted | TurnFailed | TurnCancelled) and (
            "ended" in table.events
        ):
            links = _links(table.ui_url, turn_id, [])
            body = {"type": "turn.ended", **about, **_outcome(event), "links": links}
            out.append((delivery, "turn.ended", body))
    return out


# ---------------------------------------------------------------- the outbox


def _wake_event() -> asyncio.Event:
    import asyncio

    return asyncio.Event()


@dataclass
class Notifier:
    """Writes deliveries to the outbox when the worker lands events; sends them."""

    webhook: Webhook
    root: Path
    repository: TurnRepository
    wake: asyncio.Event = field(default_factory=_wake_event)
    client: httpx.AsyncClient | None = None

    @property
    def outbox(self) -> Path:
        return self.root / "outbox"

    @property
    def failed(self) -> Path:
        return self.root / "failed"

    async def observe(self, turn_id: str, end: int, events: Sequence[TurnEvent]) -> None:
        """``TurnDependencies.on_appended``: queue what the batch notifies. Never raises."""
        import asyncio

        try:
            if not any(isinstance(e, _NOTIFYING) for e in events):
                return
            head = await asyncio.to_thread(self._head, turn_id)
            made = bodies(self.webhook.table, head, turn_id, end, events)
            if made:
                await asyncio.to_thread(self._write, made)
                self.wake.set()
        except Exception:
            log.exception("cannot queue the notification for turn %s (the turn goes on)", turn_id)

    def _head(self, turn_id: str) -> TurnEvent:
        return self.repository.read(turn_id)[0]

    def _write(self, made: list[tuple[str, str, dict[str, Any]]]) -> None:
        self.outbox.mkdir(parents=True, exist_ok=True)
        for delivery, kind, body in made:
            path = self._path(delivery)
            if path.exists():
                continue  # a retried append: queued already
            entry = {"deliveryId": delivery, "event": kind, "attempts": 0, "due": 0.0, "body": body}
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(orjson.dumps(entry))
            os.replace(tmp, path)

    def _path(self, delivery: str) -> Path:
        # Turn ids and line numbers only: safe as a file name once ':' is replaced.
        return self.outbox / (delivery.replace(":", "_") + ".json")

    # -- sending ------------------------------------------------------------------

    async def run(self) -> None:
        """Send outbox entries until cancelled; entries left by an earlier process too."""
        import asyncio

        import httpx  # only a worker that sends webhooks needs the HTTP client

        owned = self.client is None
        client = self.client or httpx.AsyncClient(
            timeout=self.webhook.table.timeout_seconds, follow_redirects=False
        )
        try:
            while True:
                self.wake.clear()
                wait = await self._round(client)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self.wake.wait()
        finally:
            if owned:
                await client.aclose()

    async def _round(self, client: httpx.AsyncClient) -> float:
        """Send every entry that is due; seconds until the next one is (at most 60)."""
        import asyncio

        now = time.time()
        wait = 60.0
        entries = sorted(self.outbox.glob("*.json")) if self.outbox.is_dir() else []
        gate = asyncio.Semaphore(SENDING_AT_ONCE)

        async def one(path: Path) -> float | None:
            async with gate:
                return await self._one(client, path, now)

        due = [asyncio.create_task(one(path)) for path in entries]
        for task in due:
            later = await task
            if later is not None:
                wait = min(wait, max(later - time.time(), 0.0))
        return wait

    async def _one(self, client: httpx.AsyncClient, path: Path, now: float) -> float | None:
        """Try one entry if it is due and nobody else holds it; when it is due next, if kept."""
        try:
            handle = open(path, "r+b")  # noqa: SIM115 (held across the send)
        except FileNotFoundError:
            return None  # sent by another worker meanwhile
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return now + 1.0  # another worker is sending it
            if not path.exists():
                return None
            entry = orjson.loads(handle.read())
            if entry["due"] > now:
                return float(entry["due"])
            body = orjson.dumps(entry["body"])
            entry["attempts"] += 1
            verdict = await self._send(client, entry, body)
            table = self.webhook.table
            if verdict == "sent":
                path.unlink(missing_ok=True)
                return None
            if verdict == "refused" or entry["attempts"] >= table.max_attempts:
                why = "refused" if verdict == "refused" else f"failed {entry['attempts']} times"
                log.warning(
                    "webhook delivery %s (%s) %s; given up: %s",
                    entry["deliveryId"],
                    entry["event"],
                    why,
                    entry.get("last", "no answer"),
                )
                self.failed.mkdir(parents=True, exist_ok=True)
                entry["gaveUp"] = time.time()
                (self.failed / path.name).write_bytes(orjson.dumps(entry))
                path.unlink(missing_ok=True)
                return None
            delay = min(
                table.backoff_seconds * 2 ** (entry["attempts"] - 1), table.max_backoff_seconds
            )
            entry["due"] = time.time() + delay
            handle.seek(0)
            handle.truncate()
            handle.write(orjson.dumps(entry))
            handle.flush()
            return float(entry["due"])

    async def _send(
        self, client: httpx.AsyncClient, entry: dict[str, Any], body: bytes
    ) -> Literal["sent", "retry", "refused"]:
        import httpx

        headers = {
            "content-type": "application/json",
            "user-agent": "turncore-webhook/1",
            SIGNATURE_HEADER: sign(self.webhook.secret, body),
            DELIVERY_HEADER: entry["deliveryId"],
            EVENT_HEADER: entry["event"],
        }
        try:
            r = await client.post(
                self.webhook.url,
                content=body,
                headers=headers,
                timeout=self.webhook.table.timeout_seconds,
            )
        except httpx.HTTPError as exc:
            entry["last"] = f"{type(exc).__name__}"  # never the URL: it may hold a secret
            return "retry"
        entry["last"] = f"HTTP {r.status_code}"
        if 200 <= r.status_code < 300:
            return "sent"
        if r.status_code in (408, 429) or r.status_code >= 500:
            return "retry"
        return "refused"

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Notifier]:
        import asyncio

        task = asyncio.create_task(self.run(), name="turncore-webhooks")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


_NOTIFYING = (TurnSuspended, TurnCompleted, TurnFailed, TurnCancelled)
SENDING_AT_ONCE = 8
"""Most deliveries one worker sends at the same time."""


def notify_dir(work_dir: Path) -> Path:
    return work_dir / "notify"


__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SIGNATURE_HEADER",
    "NotifyConfigError",
    "NotifyTable",
    "Notifier",
    "Webhook",
    "bodies",
    "notify_dir",
    "sign",
]
