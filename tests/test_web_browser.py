"""The web UI end to end in a real headless Chromium (Debian's, driven by Playwright).

Each test serves the real app (uvicorn, a worker, the session's dev server,
the demo model making real tool calls) and works the page as a person would:
by role and name. Nothing reloads the page after it opens: a marker set on
``window`` at the start must still be there at the end.
"""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from playwright.async_api import BrowserContext, Page, Route, async_playwright, expect
from temporalio.testing import WorkflowEnvironment

from tests.builders import TurnBuilder
from tests.stream_worker import stream_worker
from tests.webui import Ui, running_ui
from turnclient.builtins.demo import DEMO_MODEL, demo_model
from turnclient.runtime.connection import Runtime
from turnclient.servers.ui import create_app, web_ui
from turncore.events import ModelCallCompleted, TurnCreated
from turncore.messages import AssistantMessage, FilePart, ImagePart, TextPart, UserMessage
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index
from turncore_temporal.worker import serving

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
WAIT = 30_000  # ms: every expectation waits on the page's state, never sleeps


@pytest.fixture
async def ui(temporal_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Ui]:
    async with running_ui(temporal_env, tmp_path) as running:
        yield running


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[BrowserContext]:
    assert os.path.exists(CHROMIUM), "install Debian's chromium: apt-get install -y chromium"
    profile = tmp_path / "chromium-profile"  # a fresh --user-data-dir every test
    async with async_playwright() as p:
        context = await p.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            args=FLAGS,
            headless=True,
            viewport={"width": 1100, "height": 900},
        )
        try:
            yield context
        finally:
            await context.close()


async def open_page(context: BrowserContext, url: str) -> Page:
    page = await context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("dialog", lambda d: problems.append(f"dialog: {d.message}"))
    await page.goto(url)
    await page.evaluate("window.__noReload = true")
    page.problems = problems  # type: ignore[attr-defined]
    return page


async def still_same_page(page: Page) -> None:
    assert await page.evaluate("window.__noReload === true"), "the page was reloaded"
    assert await page.evaluate("window.__xss === undefined"), "a script from a turn ran"
    assert page.problems == []  # type: ignore[attr-defined]


SCRIPTED = "<script>window.__xss = 1</script><img src=x onerror=window.__xss=2>"


async def test_approve_from_waiting_for_you_and_watch_it_complete(
    ui: Ui, browser: BrowserContext, tmp_path: Path
) -> None:
    turn_id, _ = await ui.suspended(f"Save '{SCRIPTED}' to notes.txt")
    page = await open_page(browser, ui.url + "/")
    waiting = page.get_by_role("region", name="Waiting for you")
    await expect(waiting.get_by_role("link", name=turn_id)).to_be_visible(timeout=WAIT)
    # The session's server has other turns: the row whose link is this turn's.
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=turn_id))
    await expect(row.get_by_text("suspended")).to_be_visible(timeout=WAIT)
    await expect(row.get_by_text("approve write_file")).to_be_visible()
    await page.get_by_role("link", name=turn_id).first.click()
    await expect(page.get_by_role("heading", name=f"Turn {turn_id}")).to_be_visible(timeout=WAIT)
    await page.evaluate("window.__noReload = true")
    # The tool input is shown as text: markup and script arrive verbatim and never run.
    pending = page.get_by_role("region", name="Waiting for you")
    await expect(pending.locator("pre.input")).to_contain_text(SCRIPTED, timeout=WAIT)
    assert await page.locator("main img").count() == 0

    await page.get_by_role("button", name="Approve").click()
    outcome = page.get_by_role("region", name="Outcome")
    await expect(outcome).to_contain_text("Wrote", timeout=WAIT)
    await expect(page.get_by_role("status")).to_have_text("completed", timeout=WAIT)
    conversation = page.get_by_role("region", name="Conversation")
    await expect(conversation).to_contain_text('"created": true', timeout=WAIT)  # the tool result
    await expect(conversation).to_contain_text("allowed by human")  # the permission record
    await expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    await expect(page.get_by_role("button", name="Cancel turn")).to_be_hidden()
    await still_same_page(page)


async def test_deny_with_a_reason_the_model_sees(ui: Ui, browser: BrowserContext) -> None:
    turn_id, _ = await ui.suspended("Save 'secrets' to notes.txt")
    page = await open_page(browser, f"{ui.url}/turns/{turn_id}")
    # By keyboard: type the reason, Tab to Deny, press Enter.
    await page.get_by_label("Reason for denying").fill("not without a code review")
    await page.keyboard.press("Tab")
    await expect(page.get_by_role("button", name="Deny")).to_be_focused()
    await page.keyboard.press("Enter")
    outcome = page.get_by_role("region", name="Outcome")
    # The demo model quotes the tool result it received: the denial with its reason.
    await expect(outcome).to_contain_text("not without a code review", timeout=WAIT)
    await expect(outcome).to_contain_text("did not succeed")
    await expect(page.get_by_role("status")).to_have_text("completed")
    await still_same_page(page)


async def test_enter_in_the_reason_field_denies_with_that_reason(
    ui: Ui, browser: BrowserContext
) -> None:
    turn_id, _ = await ui.suspended("Save 'secrets' to notes.txt")
    page = await open_page(browser, f"{ui.url}/turns/{turn_id}")
    reason = page.get_by_label("Reason for denying")
    await reason.fill("no writes on Fridays")
    await reason.press("Enter")  # the focus stays in the field
    outcome = page.get_by_role("region", name="Outcome")
    await expect(outcome).to_contain_text("no writes on Fridays", timeout=WAIT)
    await expect(outcome).to_contain_text("did not succeed")
    events = [orjson.loads(x) for x in ui.file(turn_id).splitlines()]
    resolved = [e for e in events if e["type"] == "tool_permission_resolved"]
    assert [e["decision"] for e in resolved] == ["deny"], resolved
    await still_same_page(page)


def _two_saves(request: ModelCallRequest) -> dict[str, Any]:
    """The demo model, but its first call asks to write two files at once: two approvals."""
    if call_index(request.messages) == 0:
        calls = [("first.txt", "one"), ("second.txt", "two")]
        return {
            "text": "Two files.",
            "toolCalls": [
                {"toolName": "write_file", "input": {"path": p, "content": c}} for p, c in calls
            ],
        }
    return demo_model(request)


async def test_after_a_decision_the_focus_moves_on_not_to_the_page(
    ui: Ui, browser: BrowserContext
) -> None:
    ui.runtime.models.register_function(DEMO_MODEL, _two_saves)
    turn_id, view = await ui.suspended("Save two files")
    first, second = (p["toolCallId"] for p in view["pending"]["permissions"])
    page = await open_page(browser, f"{ui.url}/turns/{turn_id}")
    cards = page.get_by_role("region", name="Waiting for you").get_by_role("article")
    await expect(cards).to_have_count(2, timeout=WAIT)
    await cards.filter(has_text=first).get_by_role("button", name="Approve").focus()
    await page.keyboard.press("Enter")
    # On to the next card still waiting: the card, not its Approve, so a second
    # Enter cannot decide a call nobody read. Tab reaches its buttons.
    next_card = page.get_by_role("article", name=f"Approve write_file? {second}")
    await expect(next_card).to_be_focused(timeout=WAIT)
    await expect(cards).to_have_count(1)
    await page.keyboard.press("Tab")
    await expect(next_card.get_by_role("button", name="Approve")).to_be_focused()
    # The last card: nothing is left waiting, so to the outcome the decision leads to.
    reason = next_card.get_by_label("Reason for denying")
    await reason.fill("one is enough")
    await reason.press("Enter")
    await expect(page.get_by_role("heading", name="Outcome")).to_be_focused(timeout=WAIT)
    await expect(page.get_by_role("status")).to_have_text("completed", timeout=WAIT)
    outcome = page.get_by_role("region", name="Outcome")
    await expect(outcome).to_contain_text("one is enough")
    await still_same_page(page)


async def test_cancel_turn_asks_first_and_no_stray_click_or_enter_answers(
    ui: Ui, browser: BrowserContext
) -> None:
    turn_id, _ = await ui.suspended("Save 'keep me' to notes.txt")
    page = await open_page(browser, f"{ui.url}/turns/{turn_id}")
    cancels: list[str] = []
    page.on("request", lambda r: cancels.append(r.url) if r.url.endswith("/cancel") else None)
    cancel = page.get_by_role("button", name="Cancel turn")
    await expect(cancel).to_be_visible(timeout=WAIT)
    dialog = page.get_by_role("dialog", name="Cancel this turn?")
    keep = dialog.get_by_role("button", name="Keep the turn")
    confirm = dialog.get_by_role("button", name="Cancel the turn")
    # A double click on "Cancel turn": the first click asks, and the second, even where
    # it lands on "Cancel the turn" (the question opened under the pointer), answers nothing.
    await cancel.scroll_into_view_if_needed()
    box = await cancel.bounding_box()
    assert box is not None
    await page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    await expect(dialog).to_be_visible()
    await expect(keep).to_be_focused()  # the safe answer has the focus
    box = await confirm.bounding_box()
    assert box is not None
    await page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    await page.mouse.down(click_count=2)
    await page.mouse.up(click_count=2)
    await expect(dialog).to_be_visible()
    # A stray Enter answers "Keep the turn"; the focus goes back where it was.
    await page.keyboard.press("Enter")
    await expect(dialog).to_be_hidden()
    await expect(cancel).to_be_focused()
    # By keyboard alone: Enter asks, Escape declines.
    await page.keyboard.press("Enter")
    await expect(keep).to_be_focused()
    await page.keyboard.press("Escape")
    await expect(dialog).to_be_hidden()
    await expect(cancel).to_be_focused()
    # Nothing was sent: the turn still takes its approval.
    await page.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("status")).to_have_text("completed", timeout=WAIT)
    assert cancels == []
    assert b"turn_cancelled" not in ui.file(turn_id)
    await still_same_page(page)


async def test_cancel_turn_by_keyboard_when_meant(ui: Ui, browser: BrowserContext) -> None:
    turn_id, _ = await ui.suspended("Save 'stop me' to notes.txt")
    page = await open_page(browser, f"{ui.url}/turns/{turn_id}")
    cancel = page.get_by_role("button", name="Cancel turn")
    await expect(cancel).to_be_visible(timeout=WAIT)
    await cancel.focus()
    await page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="Cancel this turn?")
    await expect(dialog).to_contain_text("open tool calls")
    await page.keyboard.press("Tab")
    await expect(dialog.get_by_role("button", name="Cancel the turn")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("status")).to_have_text("cancelled", timeout=WAIT)
    await expect(dialog).to_be_hidden()
    await expect(cancel).to_be_hidden()
    await expect(page.get_by_role("heading", name="Outcome")).to_be_focused()
    assert ui.file(turn_id).count(b'"type":"turn_cancelled"') == 1
    await still_same_page(page)


async def test_complete_an_ask_human_with_text(ui: Ui, browser: BrowserContext) -> None:
    turn_id, _ = await ui.suspended("Ask me for my name")
    page = await open_page(browser, f"{ui.url}/turns/{turn_id}")
    pending = page.get_by_role("region", name="Waiting for you")
    await expect(pending.get_by_text("What is your name?")).to_be_visible(timeout=WAIT)
    answer = page.get_by_label("Your answer")
    await answer.click()
    await page.keyboard.type("Ada")
    # A live update lands while the person types: progress from the tool's side.
    view = await ui.view(turn_id)
    call = view["pending"]["asyncTools"][0]["toolCallId"]
    r = await ui.http.post(
        f"/api/turns/{turn_id}/calls/{call}/progress", json={"data": {"note": "still waiting"}}
    )
    assert r.status_code == 200, r.text
    await expect(pending.get_by_text("still waiting")).to_be_visible(timeout=WAIT)
    await expect(answer).to_be_focused()  # the update left the field alone
    await page.keyboard.type(" <Lovelace>")
    await page.get_by_role("button", name="Complete").click()
    outcome = page.get_by_role("region", name="Outcome")
    await expect(outcome).to_contain_text("You answered: Ada <Lovelace>", timeout=WAIT)
    await still_same_page(page)


async def test_two_tabs_deciding_one_call_one_wins_one_is_told(
    ui: Ui, browser: BrowserContext
) -> None:
    turn_id, _ = await ui.suspended("Save 'twice' to notes.txt")
    tabs = [await open_page(browser, f"{ui.url}/turns/{turn_id}") for _ in range(2)]
    for tab in tabs:
        await expect(tab.get_by_role("button", name="Approve")).to_be_enabled(timeout=WAIT)
    # Both decisions leave their tabs before either reaches the server: a tab that
    # heard of the first decision before it clicked would have nothing to click.
    sent: list[Route] = []
    both_sent = asyncio.Event()

    async def hold(route: Route) -> None:
        sent.append(route)
        if len(sent) == len(tabs):
            both_sent.set()
        await both_sent.wait()
        await route.continue_()

    for tab in tabs:
        await tab.route(f"**/api/turns/{turn_id}/calls/*/approve", hold)
    await asyncio.gather(*(tab.get_by_role("button", name="Approve").click() for tab in tabs))
    await asyncio.wait_for(both_sent.wait(), WAIT / 1000)
    for tab in tabs:
        await expect(tab.get_by_role("status")).to_have_text("completed", timeout=WAIT)
    deadline = asyncio.get_running_loop().time() + 30
    while True:  # the losing tab's answer may land after the turn completed
        alerts = [await tab.locator("#alert").text_content() or "" for tab in tabs]
        rejected = [a for a in alerts if a.startswith("Rejected:")]
        if rejected or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)
    assert len(rejected) == 1, alerts
    await expect(tabs[alerts.index(rejected[0])].get_by_role("alert")).to_be_visible()
    assert "already" in rejected[0]
    assert [a for a in alerts if not a.startswith("Rejected:")] == [""]
    text = ui.file(turn_id).decode()
    assert text.count('"type":"tool_permission_resolved"') == 1  # exactly one decision recorded
    for tab in tabs:
        await still_same_page(tab)


async def test_start_a_turn_from_the_page_and_see_it_stream(
    ui: Ui, browser: BrowserContext
) -> None:
    page = await open_page(browser, ui.url + "/")
    await page.get_by_label("Prompt").fill("What is 6 * 7?")
    await page.get_by_role("button", name="Start turn").click()
    await expect(page.get_by_role("region", name="Outcome")).to_contain_text("= 42", timeout=WAIT)
    await expect(page.get_by_role("status")).to_have_text("completed")
    await expect(page.get_by_role("region", name="Usage")).to_contain_text("total tokens")


async def test_text_streams_live_from_a_worker_in_another_process(
    temporal_env: WorkflowEnvironment, tmp_path: Path, browser: BrowserContext
) -> None:
    queue = f"stream-{uuid.uuid4()}"
    home = tmp_path / "home"
    home.mkdir()
    async with (
        stream_worker(temporal_env, queue, home),
        running_ui(temporal_env, tmp_path, worker=False, task_queue=queue) as ui,
    ):
        turn_id = await ui.create("hello there")  # the demo answers with its help text
        page = await open_page(browser, f"{ui.url}/turns/{turn_id}")
        # The worker holds the call after its first chunk: the page shows it streaming.
        streaming = page.locator(".msg.streaming .text")
        await expect(streaming).to_contain_text("I am", timeout=WAIT)
        await expect(page.get_by_role("status")).to_have_text("running")
        (home / "gate").write_text("open")
        outcome = page.get_by_role("region", name="Outcome")
        await expect(outcome).to_contain_text("built-in demo model", timeout=WAIT)
        await expect(streaming).to_have_count(0)
        await still_same_page(page)


async def test_behind_a_token_the_page_works_from_its_link_and_nothing_without_it(
    temporal_env: WorkflowEnvironment, tmp_path: Path, browser: BrowserContext
) -> None:
    token = "browser-token-" + uuid.uuid4().hex
    async with running_ui(temporal_env, tmp_path, token=token) as ui:
        turn_id, _ = await ui.suspended("Save 'guarded' to notes.txt")
        stranger = await browser.new_page()
        response = await stranger.goto(f"{ui.url}/turns/{turn_id}")
        assert response is not None and response.status == 401
        await stranger.close()
        # The link `turns ui` prints: the token becomes a cookie and leaves the address.
        page = await open_page(browser, f"{ui.url}/turns/{turn_id}?token={token}")
        assert page.url == f"{ui.url}/turns/{turn_id}"
        await page.get_by_role("button", name="Approve").click()  # a same-origin JSON POST
        await expect(page.get_by_role("status")).to_have_text("completed", timeout=WAIT)
        await still_same_page(page)


async def test_two_token_uis_on_one_host_each_keep_their_own_cookie(
    temporal_env: WorkflowEnvironment, tmp_path: Path, browser: BrowserContext
) -> None:
    # Two `turns ui` on two ports of one host, each with its token, opened from their
    # links in one browser. Cookies ignore ports: under one name the second link's
    # cookie would replace the first's, and the first page would be refused.
    homes = [tmp_path / "one", tmp_path / "two"]
    tokens = [f"ui-{n}-token-" + uuid.uuid4().hex for n in ("one", "two")]
    for home in homes:
        home.mkdir()
    async with (
        running_ui(temporal_env, homes[0], token=tokens[0]) as one,
        running_ui(temporal_env, homes[1], token=tokens[1]) as two,
    ):
        pages = []
        for ui, token in ((one, tokens[0]), (two, tokens[1])):
            turn_id, _ = await ui.suspended("Save 'mine' to notes.txt")
            pages.append(await open_page(browser, f"{ui.url}/turns/{turn_id}?token={token}"))
        for page in pages:  # the first page too, after the second link set its cookie
            await page.get_by_role("button", name="Approve").click()
            await expect(page.get_by_role("status")).to_have_text("completed", timeout=WAIT)
            await expect(page.get_by_role("alert")).to_be_hidden()
            await still_same_page(page)
        names = sorted(c["name"] for c in await browser.cookies())
        assert names == sorted(f"turns_ui_token_{ui.url.rsplit(':', 1)[1]}" for ui in (one, two))


PNG = base64.b64encode(b"\x89PNG-BYTES-CANARY-0123456789").decode()
URL = "https://media.example.test/signed?token=SIGNED-URL-CANARY"
FILE_ID = "file-ID-CANARY"


def _media_turn(ui: Ui) -> str:
    """A turn with media in its input and its answer, as a media-capable adapter writes it."""
    turn_id = "2026-01-02T03-04-05Z-0000042-000"
    b = TurnBuilder(turn_id)
    media_input = UserMessage(
        content=[
            TextPart(text="What is in these?"),
            ImagePart(media_type="image/png", data=PNG, filename="diagram.png"),
            ImagePart(media_type="image/jpeg", url=URL),
            FilePart(media_type="application/pdf", file_id=FILE_ID),
        ]
    )
    b.events[0] = TurnCreated.model_validate(
        {**b.created.to_wire(), "input": media_input.to_wire()}
    )
    b.model_call("A chart.")
    answer = AssistantMessage(
        content=[TextPart(text="A chart."), ImagePart(media_type="image/webp", url=URL)]
    )
    completed = b.events[-1]
    assert isinstance(completed, ModelCallCompleted)
    b.events[-1] = completed.model_copy(update={"message": answer})
    b.last_message = answer
    b.finish()
    path = ui.runtime.repository.path_for(turn_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(e.to_wire()) + b"\n" for e in b.events))
    return turn_id


async def test_media_parts_show_kind_source_type_and_size_never_bytes_urls_or_ids(
    ui: Ui, browser: BrowserContext
) -> None:
    turn_id = _media_turn(ui)
    page = await open_page(browser, f"{ui.url}/turns/{turn_id}")
    conversation = page.get_by_role("region", name="Conversation")
    size = len(base64.b64decode(PNG))
    for shown in (
        "What is in these?",
        f"[image · data · image/png · diagram.png · {size} bytes]",
        "[image · url · image/jpeg]",
        "[file · file_id · application/pdf]",
        "[image · url · image/webp]",
    ):
        await expect(conversation).to_contain_text(shown, timeout=WAIT)
    await expect(page.get_by_role("region", name="Outcome")).to_contain_text(
        "[image · url · image/webp]"
    )
    html = await page.content()
    for secret in (PNG, URL, FILE_ID, "CANARY"):
        assert secret not in html
    assert await page.locator("main img").count() == 0
    await still_same_page(page)


async def test_the_pages_say_when_the_server_is_gone_and_forget_it_once_it_is_back(
    temporal_env: WorkflowEnvironment, tmp_path: Path, browser: BrowserContext
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    runtime = Runtime.from_work_dir(home, env={"TURNS_TASK_QUEUE": f"ui-{uuid.uuid4()}"})
    async with serving(runtime, temporal_env.client):
        async with web_ui(create_app(runtime, temporal_env.client), "127.0.0.1", 0) as web:
            port = web.port
            async with httpx.AsyncClient(base_url=web.url, timeout=60) as http:
                turn_id, _ = await Ui(web.url, runtime, http).suspended("Save 'x' to notes.txt")
            page = await open_page(browser, f"{web.url}/turns/{turn_id}")
            index = await open_page(browser, f"{web.url}/")
            await expect(page.get_by_role("button", name="Approve")).to_be_enabled(timeout=WAIT)
            await expect(index.get_by_role("link", name=turn_id).first).to_be_visible(timeout=WAIT)
        # The server is gone (`turns ui` restarted, say): both pages say so on their own.
        for tab in (page, index):
            await expect(tab.get_by_role("alert")).to_contain_text(
                "cannot be reached", timeout=WAIT
            )
        async with web_ui(create_app(runtime, temporal_env.client), "127.0.0.1", port):
            # Back: the notice goes by itself, and the page works without a reload.
            for tab in (page, index):
                await expect(tab.get_by_role("alert")).to_be_hidden(timeout=WAIT)
            await page.get_by_role("button", name="Approve").click()
            await expect(page.get_by_role("status")).to_have_text("completed", timeout=WAIT)
            await expect(page.get_by_role("alert")).to_be_hidden()
            for tab in (page, index):
                await still_same_page(tab)
