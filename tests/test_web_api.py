"""The web UI's JSON and SSE API over real HTTP, a real worker and the session's dev server.

Every error path answers with a specific status and message and leaves the
turn file byte-for-byte unchanged; the SSE stream resumes with Last-Event-ID
without a gap or a duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.builders import nested
from tests.stream_worker import stream_worker
from tests.webui import Ui, running_ui
from turnclient.cli import main
from turnclient.servers.ui import MAX_BODY, UiConfigError, check_token, cookie_name
from turncore.jsonvalue import MAX_JSON_DEPTH

MISSING = "2026-01-02T03-04-05Z-0000001-000"
SAVE = "Save 'hello' to notes.txt"  # the demo model asks to run write_file: an approval


@pytest.fixture
async def ui(temporal_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Ui]:
    async with running_ui(temporal_env, tmp_path) as running:
        yield running


@dataclass
class Sse:
    id: str | None
    event: str
    data: Any


async def read_sse(
    http: httpx.AsyncClient,
    path: str,
    *,
    last_id: str | None = None,
    stop: int | None = None,
    until: Callable[[Sse], bool] | None = None,
) -> list[Sse]:
    """The stream's events (without comments and ``retry``), on one connection, until it
    ends, ``stop`` are read or an event satisfies ``until``.

    Waiting for an event reads one connection: reconnecting to read one more each time
    would count on the server sending the same order on every resume, which it does not
    promise (a resume sends the durable backlog before the open call's deltas)."""
    headers = {"Accept": "text/event-stream"}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    out: list[Sse] = []
    async with http.stream("GET", path, headers=headers) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        fields: dict[str, str] = {}
        async for line in r.aiter_lines():
            if line == "":
                if "event" in fields:
                    out.append(Sse(fields.get("id"), fields["event"], orjson.loads(fields["data"])))
                    if (stop is not None and len(out) >= stop) or (until and until(out[-1])):
                        return out  # leaving the block drops the connection
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
    return out


def lines(ui: Ui, turn_id: str) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in ui.file(turn_id).splitlines()]


# ---------------------------------------------------------------- reading


async def test_a_suspended_turn_lists_what_it_waits_for(
    ui: Ui, temporal_env: WorkflowEnvironment
) -> None:
    # A Turn workflow under an id that is no turn id is not a turn: never listed.
    stray = await temporal_env.client.start_workflow(
        "Turn", {"turnId": "zz-not-a-turn"}, id=f"zz-{uuid.uuid4()}", task_queue="nowhere"
    )
    turn_id, view = await ui.suspended("Save '<b>bold</b>' to notes.txt")
    (permission,) = view["pending"]["permissions"]
    assert permission["toolName"] == "write_file"
    assert permission["input"] == {"path": "notes.txt", "content": "<b>bold</b>\n"}
    assert view["offset"] == len(lines(ui, turn_id))
    assert (await ui.http.get(f"/api/turns/{turn_id}/pending")).json()["permissions"] == [
        permission
    ]

    async def waiting() -> list[str]:
        r = await ui.http.get("/api/pending")
        return [t["turnId"] for t in r.json()["turns"]]

    deadline = asyncio.get_running_loop().time() + 30
    while turn_id not in await waiting():  # visibility catches up with the settle point
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)

    newer = await ui.create("What time is it in Tokyo?")
    await ui.until(newer, lambda v: v["status"] == "completed")
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        listed = (await ui.http.get("/api/turns", params={"pageSize": 500})).json()["turns"]
        ids = [t["turnId"] for t in listed]
        if newer in ids and turn_id in ids:
            break
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)
    assert stray.id not in ids
    await stray.terminate("test over")
    assert ids == sorted(ids, reverse=True)  # newest first
    assert ids.index(newer) < ids.index(turn_id)
    assert listed[ids.index(turn_id)]["input"] == "Save '<b>bold</b>' to notes.txt"  # the memo
    suspended = (await ui.http.get("/api/turns", params={"status": "suspended"})).json()["turns"]
    assert turn_id in [t["turnId"] for t in suspended]
    assert all(t["status"] == "suspended" for t in suspended)
    # Pages: one turn a page, the second starts below the first.
    first = (await ui.http.get("/api/turns", params={"pageSize": 1})).json()
    assert len(first["turns"]) == 1 and first["nextBefore"] == first["turns"][0]["turnId"]
    second = (
        await ui.http.get("/api/turns", params={"pageSize": 1, "before": first["nextBefore"]})
    ).json()
    assert second["turns"][0]["turnId"] < first["turns"][0]["turnId"]


# ---------------------------------------------------------------- errors change nothing


async def test_every_error_path_has_its_status_and_appends_nothing(ui: Ui) -> None:
    turn_id, view = await ui.suspended(SAVE)
    call = view["pending"]["permissions"][0]["toolCallId"]
    before = ui.file(turn_id)
    base = f"/api/turns/{turn_id}"

    async def expect(status: int, method: str, path: str, **kw: Any) -> str:
        r = await ui.http.request(method, path, **kw)
        assert r.status_code == status, (path, r.status_code, r.text)
        assert r.json()["status"] == status
        return str(r.json()["error"])

    # unknown turns: 404, for reads and decisions alike
    for path in (f"/api/turns/{MISSING}", f"/api/turns/{MISSING}/pending", f"/turns/{MISSING}"):
        assert "no turn" in await expect(404, "GET", path)
    await expect(404, "GET", f"/api/turns/{MISSING}/events")
    await expect(404, "POST", f"/api/turns/{MISSING}/calls/{call}/approve", json={})
    await expect(404, "GET", "/api/turns/not-a-turn-id")
    await expect(404, "POST", "/api/turns/not-a-turn-id/cancel", json={})
    # malformed bodies: 400 with what is wrong
    approve = f"{base}/calls/{call}/approve"
    json_header = {"Content-Type": "application/json"}
    assert "not JSON" in await expect(400, "POST", approve, content=b"{nope", headers=json_header)
    assert "JSON object" in await expect(400, "POST", approve, content=b"[1]", headers=json_header)
    assert "empty" in await expect(400, "POST", approve, content=b"", headers=json_header)
    assert "extra" in (await expect(400, "POST", approve, json={"decision": "allow"})).lower()
    deny = f"{base}/calls/{call}/deny"
    assert "reason" in await expect(400, "POST", deny, json={"reason": 7})
    complete = f"{base}/calls/{call}/complete"
    assert "exactly one" in await expect(400, "POST", complete, json={})
    assert "exactly one" in await expect(400, "POST", complete, json={"text": "a", "output": 1})
    assert "data" in await expect(400, "POST", f"{base}/calls/{call}/progress", json={})
    await expect(400, "GET", "/api/turns", params={"status": "sleeping"})
    await expect(400, "GET", "/api/turns", params={"before": "yesterday"})
    await expect(400, "GET", f"{base}/events", params={"after": "x"})
    await expect(400, "POST", "/api/turns", json={"prompt": ""})
    await expect(400, "POST", "/api/turns", json={"prompt": "hi", "humanAvailable": "yes"})
    await expect(400, "POST", "/api/turns", json={"prompt": "hi", "maxModelCalls": "3"})
    assert "unknown agent" in await expect(
        400, "POST", "/api/turns", json={"prompt": "hi", "agent": "nobody"}
    )
    assert "continueFrom" in await expect(
        400, "POST", "/api/turns", json={"prompt": "hi", "continueFrom": MISSING}
    )
    # too large, not JSON, wrong method
    big = b'{"reason": "' + b"x" * MAX_BODY + b'"}'
    assert "over" in await expect(413, "POST", deny, content=big, headers=json_header)
    await expect(
        415,
        "POST",
        approve,
        content=b"decision=allow",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    await expect(405, "PUT", approve, json={})
    await expect(405, "GET", approve)
    # decisions for calls that are not pending: 409, nothing appended
    message = await expect(409, "POST", f"{base}/calls/call_9_9/approve", json={})
    assert message.startswith("rejected:") and "call_9_9" in message
    assert "async" in await expect(409, "POST", complete, json={"text": "done"})
    assert ui.file(turn_id) == before

    # A decided call cannot be decided again, and a settled turn takes nothing more.
    r = await ui.http.post(approve, json={})
    assert r.status_code == 200 and r.json()["outcome"]["status"] == "completed", r.text
    after = ui.file(turn_id)
    assert "already ended" in await expect(409, "POST", approve, json={})
    assert "already ended" in await expect(409, "POST", deny, json={"reason": "late"})
    assert "already ended" in await expect(409, "POST", f"{base}/cancel", json={})
    assert ui.file(turn_id) == after


async def test_a_body_is_taken_exactly_or_refused_never_rounded_or_crashed_on(ui: Ui) -> None:
    asking, view = await ui.suspended("Ask me for my name")
    base = f"/api/turns/{asking}/calls/{view['pending']['asyncTools'][0]['toolCallId']}"
    before = ui.file(asking)
    json_header = {"Content-Type": "application/json"}

    async def refused(path: str, body: bytes) -> str:
        r = await ui.http.post(path, content=body, headers=json_header)
        assert r.status_code == 400, (r.status_code, r.text)
        assert r.json()["status"] == 400
        return str(r.json()["error"])

    # Past 64 bits a JSON number is an integer no reader holds: refused with the
    # reason `turns complete` gives, never recorded as a rounded float.
    for huge in (b"123456789012345678901234567890", b"-99999999999999999999"):
        assert "safe integer range" in await refused(
            f"{base}/complete", b'{"output": ' + huge + b"}"
        )
        assert "safe integer range" in await refused(
            f"{base}/progress", b'{"data": [' + huge + b"]}"
        )
    # Nesting no turn can carry is a bad body (400 with the reason), not a crash (500)
    # and not "Temporal is unavailable" (503).
    for depth in (MAX_JSON_DEPTH + 1, 300, 1000):
        deep = b'{"data": ' + b"[" * depth + b"]" * depth + b"}"
        assert "nested" in await refused(f"{base}/progress", deep)
        deep = b'{"output": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"
        assert "nested" in await refused(f"{base}/complete", deep)
    assert ui.file(asking) == before
    # A float stays a float, and modest nesting goes through unchanged.
    value = {
        "ratio": 0.5,
        "big": 1e30,
        "path": [[[[{"ok": True}]]]],
        "deep": nested(MAX_JSON_DEPTH - 1),
    }
    r = await ui.http.post(
        f"{base}/progress", content=orjson.dumps({"data": value}), headers=json_header
    )
    assert r.status_code == 200, r.text
    assert lines(ui, asking)[-2]["progress"] == value


async def test_a_body_trickled_in_past_the_read_limit_is_408_and_changes_nothing(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with running_ui(temporal_env, tmp_path, body_timeout=1.0) as ui:
        turn_id, view = await ui.suspended(SAVE)
        call = view["pending"]["permissions"][0]["toolCallId"]
        before = ui.file(turn_id)
        port = int(ui.url.rsplit(":", 1)[1])
        # A valid approval, were it ever to arrive whole: "{", 98 spaces, "}".
        body = b"{" + b" " * 98 + b"}"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = (
            f"POST /api/turns/{turn_id}/calls/{call}/approve HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode())
        sent, answer = 0, b""
        try:
            # One byte every 0.1 s, as long as the server lets us: the whole body would
            # take 10 s, ten times the limit.
            while not answer and sent < len(body):
                writer.write(body[sent : sent + 1])
                await writer.drain()
                sent += 1
                with contextlib.suppress(TimeoutError):
                    answer = await asyncio.wait_for(reader.read(65536), 0.1)
            assert answer, "the server waited for the whole trickled body"
            while chunk := await asyncio.wait_for(reader.read(65536), 30):
                answer += chunk  # until the server closes the connection
        finally:
            writer.close()
        status, _, rest = answer.partition(b"\r\n")
        assert status == b"HTTP/1.1 408 Request Timeout", answer
        assert sent < len(body), sent
        doc = orjson.loads(rest.partition(b"\r\n\r\n")[2])
        assert doc == {"error": "the request body took over 1 s to arrive", "status": 408}
        assert b"connection: close" in rest.lower()
        assert ui.file(turn_id) == before
        assert (await ui.view(turn_id))["pending"]["permissions"][0]["toolCallId"] == call
        # The call is still there to decide, at a normal pace.
        r = await ui.http.post(f"/api/turns/{turn_id}/calls/{call}/approve", json={})
        assert r.status_code == 200 and r.json()["outcome"]["status"] == "completed", r.text


async def test_deny_reason_progress_complete_and_cancel(ui: Ui) -> None:
    turn_id, view = await ui.suspended(SAVE)
    call = view["pending"]["permissions"][0]["toolCallId"]
    r = await ui.http.post(
        f"/api/turns/{turn_id}/calls/{call}/deny", json={"reason": "not without a review"}
    )
    assert r.status_code == 200, r.text
    assert "not without a review" in orjson.dumps(r.json()["outcome"]["output"]).decode()

    asking, view = await ui.suspended("Ask me for my name")
    (question,) = view["pending"]["asyncTools"]
    assert question["question"] == "What is your name?"
    base = f"/api/turns/{asking}/calls/{question['toolCallId']}"
    r = await ui.http.post(f"{base}/progress", json={"data": {"typing": True}})
    assert r.status_code == 200 and r.json()["outcome"]["status"] == "suspended", r.text
    view = await ui.view(asking)
    assert view["pending"]["asyncTools"][0]["progress"] == [{"typing": True}]
    r = await ui.http.post(f"{base}/complete", json={"output": {"name": "Ada"}})
    assert r.status_code == 200, r.text
    assert "Ada" in orjson.dumps(r.json()["outcome"]).decode()

    cancelled, _ = await ui.suspended(SAVE)
    r = await ui.http.post(f"/api/turns/{cancelled}/cancel", json={"reason": "changed my mind"})
    assert r.status_code == 200 and r.json()["outcome"] == {
        "status": "cancelled",
        "reason": "changed my mind",
        "usage": r.json()["outcome"]["usage"],
    }


async def test_a_turn_continues_from_another(ui: Ui) -> None:
    first = await ui.create("What is 6 * 7?")
    await ui.until(first, lambda v: v["status"] == "completed")
    second = await ui.create("What is 2 + 2?", continueFrom=first, session="s-9")
    view = await ui.until(second, lambda v: v["status"] == "completed")
    assert view["state"]["definition"]["context"] == {"previousTurnId": first}
    assert view["session"] == "s-9"


# ---------------------------------------------------------------- SSE


async def test_sse_resumes_after_a_disconnect_without_gap_or_duplicate(ui: Ui) -> None:
    turn_id, view = await ui.suspended(SAVE)
    call = view["pending"]["permissions"][0]["toolCallId"]
    events = f"/api/turns/{turn_id}/events?follow=1"
    first = await read_sse(ui.http, events, stop=3)  # then the client goes away
    assert [e.id for e in first] == ["1", "2", "3"]
    r = await ui.http.post(f"/api/turns/{turn_id}/calls/{call}/approve", json={})
    assert r.status_code == 200, r.text
    rest = await read_sse(ui.http, events, last_id=first[-1].id)
    durable = [e for e in first + rest if e.event == "turn-event"]
    assert [int(e.id or 0) for e in durable] == list(range(1, len(lines(ui, turn_id)) + 1))
    assert [e.data for e in durable] == lines(ui, turn_id)
    assert rest[-1].event == "end" and rest[-2].event == "settled"
    assert rest[-2].data["status"] == "completed"


async def test_sse_without_follow_ends_at_the_settle_point(ui: Ui) -> None:
    turn_id, _ = await ui.suspended(SAVE)
    got = await read_sse(ui.http, f"/api/turns/{turn_id}/events")
    assert [e.event for e in got][-2:] == ["settled", "end"]
    assert got[-2].data["status"] == "suspended"
    assert len([e for e in got if e.event == "turn-event"]) == len(lines(ui, turn_id))
    # The JSON (non-SSE) form of the same endpoint pages by offset.
    page = (await ui.http.get(f"/api/turns/{turn_id}/events", params={"after": 2})).json()
    assert [e["offset"] for e in page["events"]] == list(range(3, len(lines(ui, turn_id)) + 1))


async def test_the_surface_format_over_sse_and_json_lines(ui: Ui) -> None:
    turn_id = await ui.create("What is 6 * 7?")
    await ui.until(turn_id, lambda v: v["status"] == "completed")
    sse = await read_sse(ui.http, f"/api/turns/{turn_id}/events?format=surface")
    body = (await ui.http.get(f"/api/turns/{turn_id}/events?format=surface")).content
    jsonl = [orjson.loads(x) for x in body.splitlines()]
    assert [e.data for e in sse if e.event != "end"] == jsonl
    assert jsonl[0]["type"] == "turn_started" and jsonl[-1]["type"] == "turn_completed"
    assert jsonl[-1]["payload"]["final"] is True
    # A client that drops after any event and resumes with the last id it saw gets
    # exactly the rest, with the same item ids — also when one turn event made
    # several surface events (a tool result's item_started and item_completed).
    ids = [e.id for e in sse if e.event != "end"]
    assert len(set(ids)) == len(ids), ids  # an id names one point of the stream
    for seen in range(1, len(sse) - 1):
        resumed = await read_sse(
            ui.http, f"/api/turns/{turn_id}/events?format=surface", last_id=sse[seen - 1].id
        )
        assert [e.data for e in resumed] == [e.data for e in sse[seen:]], seen
        page = await ui.http.get(
            f"/api/turns/{turn_id}/events", params={"format": "surface", "after": sse[seen - 1].id}
        )
        assert [orjson.loads(x) for x in page.content.splitlines()] == jsonl[seen:], seen


async def test_a_resume_point_is_taken_only_as_the_server_writes_it(ui: Ui) -> None:
    turn_id = await ui.create("What is 6 * 7?")
    await ui.until(turn_id, lambda v: v["status"] == "completed")
    events = f"/api/turns/{turn_id}/events"
    stream = {"Accept": "text/event-stream"}
    for good in ("0", "3", "2:1", "3:0:1"):  # the forms the server writes in its ids
        for fmt in ("turn", "surface"):
            r = await ui.http.get(events, params={"after": good, "format": fmt})
            assert r.status_code == 200, (good, fmt, r.text)
        assert (await read_sse(ui.http, events, last_id=good))[-1].event == "end", good
    # int() reads these as numbers ("1_0" as 10, "\u0663" as 3, "+5", " 5"): none is an id
    # the server gives, so none is guessed at.
    malformed = (
        "1_0", "+5", " 5", "5 ", "-1", "\u0663", "\uff15", "0x5", "05", "1e3", "1.0", "",
        "1:", ":1", "1::2", "1:2:3:4", "1:+2", "3:0_0:1", "1:0", "0:1", "9" * 16, "1:2:" + "9" * 16,
    )  # fmt: skip
    for bad in malformed:
        for fmt in ("turn", "surface"):
            r = await ui.http.get(events, params={"after": bad, "format": fmt})
            assert r.status_code == 400, (bad, fmt, r.text)
            assert r.json()["error"] == (
                f"bad ?after= {bad!r}: expected N, N:J or N:CALL:SEQ "
                "(decimal numbers as the server writes them)"
            )
    # A browser sends back only an id the server gave it: any other is refused the same
    # way, streaming or not, and takes precedence over ?after= (which would resume elsewhere).
    for bad in ("1_0", "+5", "0x5", "05", "1:_1:2", "1:2:3:4", "9" * 16):
        for headers in (stream, {}):
            r = await ui.http.get(
                events, params={"after": "0"}, headers={**headers, "Last-Event-ID": bad}
            )
            assert r.status_code == 400, (bad, headers, r.text)
            assert r.json()["error"].startswith(f"bad Last-Event-ID {bad!r}: expected N,")


# ---------------------------------------------------------------- security


async def test_a_token_guards_every_request(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    token = "t0ken-" + "x" * 20
    async with running_ui(temporal_env, tmp_path, token=token) as ui:
        async with httpx.AsyncClient(base_url=ui.url) as anon:
            for path in ("/", "/api/turns", "/static/app.js", f"/api/turns/{MISSING}"):
                assert (await anon.get(path)).status_code == 401
            assert (
                await anon.get("/api/agents", headers={"X-Turns-Token": token + "x"})
            ).status_code == 401
            assert (
                await anon.get("/api/agents", headers={"Authorization": f"Bearer {token}"})
            ).status_code == 200
            # Opening a page with ?token= sets the cookie and drops the token from the address.
            r = await anon.get("/?token=" + token)
            assert r.status_code == 303 and r.headers["location"] == "/"
            assert (
                "HttpOnly" in r.headers["set-cookie"]
                and "SameSite=Strict" in r.headers["set-cookie"]
            )
            assert (await anon.get("/api/agents")).status_code == 200  # the cookie now
            approve = f"/api/turns/{MISSING}/calls/c/approve"
            # A cookie alone is not enough for a state change: it must come from our own page.
            assert (await anon.post(approve, json={})).status_code == 403
            assert (
                await anon.post(approve, json={}, headers={"Origin": "http://evil.example"})
            ).status_code == 403
            assert (
                await anon.post(approve, json={}, headers={"Origin": ui.url})
            ).status_code == 404
        r = await ui.http.get("/api/agents")
        assert r.status_code == 200
        assert "default-src 'self'" in r.headers["content-security-policy"]


async def test_the_token_cookie_is_secure_over_https_and_its_own_per_port(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # A browser keeps cookies by host name, not port: two UIs on one host need two
    # names, or the second link opened replaces the first UI's token.
    token = "t0ken-" + "c" * 20
    async with running_ui(temporal_env, tmp_path, token=token) as ui:
        port = int(ui.url.rsplit(":", 1)[1])
        attributes = "Path=/; HttpOnly; SameSite=Strict"
        async with httpx.AsyncClient(base_url=ui.url) as anon:
            r = await anon.get("/?token=" + token)
            assert r.status_code == 303
            assert r.headers["set-cookie"] == f"turns_ui_token_{port}={token}; {attributes}"
            # Behind a TLS proxy (X-Forwarded-Proto, trusted from FORWARDED_ALLOW_IPS):
            # Secure, and __Host- so neither a plain-http page of that host nor a
            # sibling domain can set it. The port is the one the browser sees.
            tls = {"X-Forwarded-Proto": "https"}
            for host, name in (
                ("ui.example", "__Host-turns_ui_token_443"),
                ("ui.example:8443", "__Host-turns_ui_token_8443"),
                ("[2001:db8::1]:9443", "__Host-turns_ui_token_9443"),
            ):
                r = await anon.get("/?token=" + token, headers={**tls, "Host": host})
                assert r.status_code == 303, (host, r.text)
                assert r.headers["set-cookie"] == f"{name}={token}; {attributes}; Secure", host
            anon.cookies.clear()

            async def status(cookie: str, **headers: str) -> int:
                r = await anon.get("/api/agents", headers={"Cookie": cookie, **headers})
                return r.status_code

            assert await status(f"turns_ui_token_{port}={token}") == 200
            assert (
                await status(f"__Host-turns_ui_token_443={token}", Host="ui.example", **tls) == 200
            )
            # Every other name is another UI's (or any app's) cookie, never this one:
            for cookie, headers in (
                (f"turns_ui_token={token}", {}),  # the old name, shared by every port
                (f"turns_ui_token_{port + 1}={token}", {}),
                (f"__Host-turns_ui_token_{port}={token}", {}),  # https's name over http
                (f"turns_ui_token_443={token}", {"Host": "ui.example", **tls}),  # not Secure
                (f"__Host-turns_ui_token_8443={token}", {"Host": "ui.example", **tls}),
            ):
                assert await status(cookie, **headers) == 401, cookie


async def test_the_token_cookie_counts_whatever_other_cookies_the_browser_sends(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # A browser sends every cookie of the host name, whichever port or app set it,
    # and browsers accept values RFC 6265 does not (spaces, quotes, JSON).
    token = "t0ken-" + "y" * 20
    async with running_ui(temporal_env, tmp_path, token=token) as ui:
        name = cookie_name("http", ui.url.removeprefix("http://"))
        async with httpx.AsyncClient(base_url=ui.url) as anon:
            for cookie in (
                f"prefs=dark mode; {name}={token}",
                f'{name}={token}; cart={{"items": [1, 2]}}',
                f'quoted="open; {name}={token}',
                f"back=sl\\ash; we@ird=1; {name}={token}",
                f"{name}=stale-token-from-an-older-run; {name}={token}",
            ):
                r = await anon.get("/api/agents", headers={"Cookie": cookie})
                assert r.status_code == 200, (cookie, r.text)
            for cookie in (f"prefs=dark mode; {name}={token}x", f"x{name}={token}"):
                r = await anon.get("/api/agents", headers={"Cookie": cookie})
                assert r.status_code == 401, cookie


async def test_dropping_the_token_from_the_address_redirects_only_within_the_ui(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    token = "t0ken-" + "z" * 20
    async with running_ui(temporal_env, tmp_path, token=token) as ui:
        async with httpx.AsyncClient(base_url=ui.url) as anon:
            # The cookie alone lets `?token=<anything>` redirect: a link in a mail or a
            # chat, opened in the browser, carries the SameSite=Strict cookie along.
            anon.cookies.set(cookie_name("http", ui.url.removeprefix("http://")), token)
            for path, where in (
                ("/%2F%2Fevil.example/x", "/%2F%2Fevil.example/x"),
                ("/%5Cevil.example", "/%5Cevil.example"),
                ("/turns/a%3Fb", "/turns/a%3Fb"),
                ("/turns/%E2%9C%93", "/turns/%E2%9C%93"),
                ("//evil.example/y", "/evil.example/y"),
                ("/\\evil.example/z", "/%5Cevil.example/z"),
            ):
                r = await anon.get(f"{ui.url}{path}?token=whatever&x=1")
                assert r.status_code == 303, (path, r.text)
                location = r.headers["location"]
                # `//host`, `///host` and `/\\host` all leave the site in a browser.
                assert location.startswith("/") and location[1:2] not in ("/", "\\"), location
                assert location == f"{where}?x=1"
                # A `?token=` that opens nothing never replaces the cookie that does.
                assert "set-cookie" not in r.headers


async def test_without_a_token_only_loopback_names_and_same_origin_posts(ui: Ui) -> None:
    r = await ui.http.get("/api/agents", headers={"Host": "attacker.example:8300"})
    assert r.status_code == 403  # DNS rebinding
    r = await ui.http.post(
        f"/api/turns/{MISSING}/cancel", json={}, headers={"Origin": "http://attacker.example"}
    )
    assert r.status_code == 403


@pytest.mark.parametrize("host", ["127.0.0.2", "127.8.9.10", "::1"])
async def test_every_loopback_address_turns_ui_accepts_is_a_host_it_answers_to(
    temporal_env: WorkflowEnvironment, tmp_path: Path, host: str
) -> None:
    assert check_token(host, None) is None  # loopback: no token needed to bind it
    async with running_ui(temporal_env, tmp_path, host=host) as ui:
        assert (await ui.http.get("/api/agents")).status_code == 200, ui.url
        assert (await ui.http.get("/")).status_code == 200
        r = await ui.http.post(f"/api/turns/{MISSING}/cancel", json={}, headers={"Origin": ui.url})
        assert r.status_code == 404, r.text  # same-origin: past the guard
        # A name is still not an address: rebinding needs a name, and names stay refused.
        r = await ui.http.get("/api/agents", headers={"Host": "127.0.0.2.evil.example"})
        assert r.status_code == 403


async def test_behind_a_tls_proxy_the_pages_origin_is_https(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # docs/operations.md: the proxy passes Host and X-Forwarded-Proto (trusted from
    # FORWARDED_ALLOW_IPS, 127.0.0.1 by default: this client).
    token = "t0ken-" + "p" * 20
    async with running_ui(temporal_env, tmp_path, token=token) as ui:
        host = ui.url.removeprefix("http://")
        cookies = {cookie_name(scheme, host): token for scheme in ("http", "https")}
        async with httpx.AsyncClient(base_url=ui.url, cookies=cookies) as page:
            cancel = f"/api/turns/{MISSING}/cancel"
            origin = {"Origin": f"https://{host}"}
            r = await page.post(cancel, json={}, headers=origin)
            assert r.status_code == 403, r.text  # no scheme from the proxy: cross-origin
            r = await page.post(cancel, json={}, headers={**origin, "X-Forwarded-Proto": "https"})
            assert r.status_code == 404, r.text  # past the guard


def test_binding_beyond_loopback_requires_a_token(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UiConfigError, match="requires a token"):
        check_token("0.0.0.0", None)
    with pytest.raises(UiConfigError, match="16 to 512"):
        check_token("127.0.0.1", "short")
    assert check_token("127.0.0.1", None) is None
    assert check_token("10.1.2.3", "a" * 16) == "a" * 16
    assert main(["ui", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "requires a token" in capsys.readouterr().err


async def test_sse_carries_deltas_from_another_process_and_resumes_after_one(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    queue = f"sse-{uuid.uuid4()}"
    home = tmp_path / "home"
    home.mkdir()
    async with (
        stream_worker(temporal_env, queue, home),
        running_ui(temporal_env, tmp_path, worker=False, task_queue=queue) as ui,
    ):
        turn_id = await ui.create("hello there")  # the demo streams its help text
        events = f"/api/turns/{turn_id}/events?follow=1"
        # held at the gate after one chunk
        first = await read_sse(ui.http, events, until=lambda e: e.event == "delta")
        delta = first[-1]
        offset = len([e for e in first if e.event == "turn-event"])
        assert delta.id == f"{offset}:0:1" and delta.data["type"] == "text_delta"
        assert delta.data["seq"] == 1 and delta.data["modelCallIndex"] == 0
        (home / "gate").write_text("open")
        rest = await read_sse(ui.http, events, last_id=delta.id)
        assert all(e.data["seq"] > 1 for e in rest if e.event == "delta")  # none repeated
        durable = [e for e in first + rest if e.event == "turn-event"]
        # Line N's id is N, or N:CALL:SEQ once deltas of the open call were sent.
        assert [int((e.id or "0").split(":")[0]) for e in durable] == list(
            range(1, len(lines(ui, turn_id)) + 1)
        )
        completed = next(
            i for i, e in enumerate(rest) if e.data.get("type") == "model_call_completed"
        )
        assert not [e for e in rest[completed:] if e.event == "delta"]
        streamed = delta.data["delta"] + "".join(
            e.data["delta"] for e in rest if e.event == "delta"
        )
        answer = rest[completed].data["message"]["content"]
        text = answer if isinstance(answer, str) else "".join(p["text"] for p in answer)
        assert text.startswith(streamed)


@contextlib.asynccontextmanager
async def _opening(*gates: Path) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for gate in gates:
            gate.write_text("open")


async def test_a_resume_from_a_durable_event_repeats_no_delta_already_sent(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # A model call's durable step events land between its deltas: its text's end comes
    # after the text streamed, while the call is still open.
    queue = f"sse-{uuid.uuid4()}"
    home = tmp_path / "home"
    home.mkdir()
    (home / "hold-tools").write_text("hold")  # the model waits at its tool call
    async with (
        stream_worker(temporal_env, queue, home),
        running_ui(temporal_env, tmp_path, worker=False, task_queue=queue) as ui,
        _opening(home / "gate", home / "tools-gate"),  # however the test ends
    ):
        turn_id = await ui.create(SAVE)  # "I will write notes.txt.", then write_file
        events = f"/api/turns/{turn_id}/events?follow=1"
        # held after the first chunk
        seen = await read_sse(ui.http, events, until=lambda e: e.event == "delta")
        (home / "gate").write_text("open")

        def text_end(e: Sse) -> bool:
            return e.event == "turn-event" and e.data.get("event", {}).get("type") == "text-end"

        # then held at the tool call
        rest = await read_sse(ui.http, events, last_id=seen[-1].id, until=text_end)
        seen += rest
        sent = {(e.data["modelCallIndex"], e.data["seq"]) for e in seen if e.event == "delta"}
        assert sent
        # The client drops after the text's end and comes back with its id. The stream
        # reads the live spool before it answers anything, so once the client sees the
        # stream open, what it will resend is decided; only then may the call go on.
        resumed: list[Sse] = []
        headers = {"Accept": "text/event-stream", "Last-Event-ID": seen[-1].id or ""}
        until_settled = f"/api/turns/{turn_id}/events"  # it suspends for the approval
        async with ui.http.stream("GET", until_settled, headers=headers) as r:
            fields: dict[str, str] = {}
            async for line in r.aiter_lines():
                if line.startswith("retry:"):
                    (home / "tools-gate").write_text("open")
                elif line == "":
                    if "event" in fields:
                        resumed.append(
                            Sse(fields.get("id"), fields["event"], orjson.loads(fields["data"]))
                        )
                    fields = {}
                elif not line.startswith(":"):
                    name, _, value = line.partition(": ")
                    fields[name] = value
        again = [(e.data["modelCallIndex"], e.data["seq"]) for e in resumed if e.event == "delta"]
        assert not sent & set(again), (sorted(sent), again)
        durable = [e for e in seen + resumed if e.event == "turn-event"]
        assert [e.data for e in durable] == lines(ui, turn_id)  # once each, in order
        assert resumed[-1].event == "end"


async def test_a_corrupt_turn_file_is_reported_not_guessed(ui: Ui) -> None:
    turn_id = await ui.create("What is 6 * 7?")
    await ui.until(turn_id, lambda v: v["status"] == "completed")
    path = ui.runtime.repository.path_for(turn_id)
    path.write_bytes(path.read_bytes() + b'{"type": "nonsense"}\n')
    before = path.read_bytes()
    for where in (f"/api/turns/{turn_id}", f"/api/turns/{turn_id}/events"):
        r = await ui.http.get(where)
        assert r.status_code == 500 and "turns repair" in r.json()["error"], r.text
    r = await ui.http.post(f"/api/turns/{turn_id}/cancel", json={})
    assert r.status_code == 500, r.text
    assert path.read_bytes() == before
