"""The approval inbox in a real Chromium (Debian's, through Playwright) and over HTTP.

Deciding from the home page's list (approve, deny with a reason, answer an
async tool), the live pending count in the header and the title, a decision
for a call decided meanwhile, the list at a phone's 390 px by touch, who
decided (``via``/``by``/``at``) from a tokens file, and cost and duration.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from playwright.async_api import BrowserContext, Page, Route, async_playwright, expect
from temporalio.testing import WorkflowEnvironment

from tests.test_web_browser import CHROMIUM, FLAGS, WAIT, open_page, still_same_page
from tests.webui import Ui, running_ui
from turnclient.cli import main
from turnclient.lib.api import os_user
from turnclient.servers.ui import Tokens, TokensFileError, UiConfigError, load_tokens

SAVE = "Save 'hello' to notes.txt"  # the demo model asks to run write_file: an approval
ASK = "Ask me for my name"  # the demo model calls ask_human: an async tool to answer
TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture
async def ui(temporal_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[Ui]:
    async with running_ui(temporal_env, tmp_path) as running:
        yield running


async def _context(tmp_path: Path, **options: Any) -> AsyncIterator[BrowserContext]:
    assert os.path.exists(CHROMIUM), "install Debian's chromium: apt-get install -y chromium"
    async with async_playwright() as p:
        context = await p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            args=FLAGS,
            headless=True,
            **options,
        )
        try:
            yield context
        finally:
            await context.close()


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[BrowserContext]:
    async for context in _context(tmp_path, viewport={"width": 1100, "height": 900}):
        yield context


@pytest.fixture
async def phone(tmp_path: Path) -> AsyncIterator[BrowserContext]:
    """A 390 px wide touch screen, as a phone's browser reports it."""
    async for context in _context(
        tmp_path, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    ):
        yield context


def events(ui: Ui, turn_id: str) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in ui.file(turn_id).splitlines()]


def resolved(ui: Ui, turn_id: str) -> list[dict[str, Any]]:
    return [e for e in events(ui, turn_id) if e["type"] == "tool_permission_resolved"]


def card_of(page: Page, turn_id: str, label: str) -> Any:
    """The "Waiting for you" card of ``turn_id`` that asks for ``label``."""
    waiting = page.get_by_role("region", name="Waiting for you")
    return (
        waiting.get_by_role("article", name=label)
        .filter(has=page.get_by_role("link", name=turn_id))
        .first
    )


async def no_sideways_scroll(page: Page) -> None:
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide at a 390 px viewport"


# ---------------------------------------------------------------- the list


async def test_approve_deny_and_answer_from_the_list_with_a_live_count(
    ui: Ui, browser: BrowserContext
) -> None:
    approve_id, _ = await ui.suspended(SAVE)
    deny_id, _ = await ui.suspended(SAVE)
    ask_id, _ = await ui.suspended(ASK)
    page = await open_page(browser, ui.url + "/")
    count = page.get_by_role("banner").get_by_role("link", name="3 waiting")
    await expect(count).to_be_visible(timeout=WAIT)
    await expect(page).to_have_title("(3) turns")

    # Readable labels, a relative time with the exact one on hover, a short id that expands.
    card = card_of(page, approve_id, "approve write_file")
    await expect(card).to_be_visible()
    assert await card.locator("time").text_content() in ("just now", "1 min ago")
    assert TS.search(await card.locator("time").get_attribute("title") or "")
    link = card.get_by_role("link", name=approve_id)
    assert (await link.text_content() or "").startswith("…")
    assert len(await link.text_content() or "") < 16
    await card.get_by_role("button", name="Show the full turn id").click()
    await expect(link).to_have_text(approve_id)
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=ask_id))
    await expect(row.get_by_text("answer ask_human")).to_be_visible(timeout=WAIT)

    await card.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("banner").get_by_role("link", name="2 waiting")).to_be_visible(
        timeout=WAIT
    )
    await expect(page).to_have_title("(2) turns")
    await ui.until(approve_id, lambda v: v["status"] == "completed")

    reason = card_of(page, deny_id, "approve write_file").get_by_label("Reason for denying")
    await reason.fill("not today")
    await reason.press("Enter")
    await expect(page.get_by_role("banner").get_by_role("link", name="1 waiting")).to_be_visible(
        timeout=WAIT
    )
    done = await ui.until(deny_id, lambda v: v["status"] == "completed")
    assert "not today" in orjson.dumps(done["state"]["terminal"]).decode()

    answer = card_of(page, ask_id, "answer ask_human")
    await expect(answer).to_contain_text("What is your name?")
    await answer.get_by_label("Your answer").fill("Ada")
    await answer.get_by_role("button", name="Complete").click()
    waiting = page.get_by_role("region", name="Waiting for you")
    await expect(waiting).to_contain_text("Nothing is waiting for you.", timeout=WAIT)
    await expect(page.get_by_role("banner").get_by_role("link")).to_have_count(1)  # brand only
    await expect(page).to_have_title("turns")
    answered = await ui.until(ask_id, lambda v: v["status"] == "completed")
    assert "You answered: Ada" in orjson.dumps(answered["state"]["terminal"]).decode()

    # Who decided: the web UI, the OS user of a loopback UI without a token, and when.
    (allowed,) = resolved(ui, approve_id)
    (denied,) = resolved(ui, deny_id)
    me = os_user()
    assert allowed["metadata"]["via"] == denied["metadata"]["via"] == "web"
    assert allowed["metadata"].get("by") == denied["metadata"].get("by") == me
    assert TS.fullmatch(allowed["metadata"]["at"]) and TS.fullmatch(denied["metadata"]["at"])
    assert denied["metadata"]["reason"] == denied["reason"] == "not today"
    (result,) = [
        e for e in events(ui, ask_id) if e["type"] == "tool_result" and e["source"] == "async"
    ]
    assert result["result"]["metadata"]["via"] == "web"
    assert result["result"]["metadata"].get("by") == me
    await still_same_page(page)


async def test_a_decision_from_the_list_for_a_call_decided_meanwhile_is_409_and_the_list_refreshes(
    ui: Ui, browser: BrowserContext
) -> None:
    turn_id, view = await ui.suspended(SAVE)
    call = view["pending"]["permissions"][0]["toolCallId"]
    page = await open_page(browser, ui.url + "/")
    card = card_of(page, turn_id, "approve write_file")
    await expect(card).to_be_visible(timeout=WAIT)

    async def decided_elsewhere_first(route: Route) -> None:
        # Someone else (the CLI, another tab) denies it while this click is on its way.
        r = await ui.http.post(f"/api/turns/{turn_id}/calls/{call}/deny", json={})
        assert r.status_code in (200, 202), r.text
        await route.continue_()

    await page.route(f"**/api/turns/{turn_id}/calls/{call}/approve", decided_elsewhere_first)
    await card.get_by_role("button", name="Approve").click()
    alert = page.get_by_role("alert")
    await expect(alert).to_contain_text("Rejected:", timeout=WAIT)
    await expect(alert).to_contain_text("already")
    await expect(card).to_have_count(0, timeout=WAIT)  # the list refreshed: nothing to decide
    assert [e["decision"] for e in resolved(ui, turn_id)] == ["deny"]
    await still_same_page(page)


# ---------------------------------------------------------------- phones


async def test_at_390_px_the_list_fits_and_approve_works_by_touch(
    ui: Ui, phone: BrowserContext, tmp_path: Path
) -> None:
    done = await ui.create("What is 6 * 7?")
    await ui.until(done, lambda v: v["status"] == "completed")
    turn_id, _ = await ui.suspended(SAVE)
    page = await open_page(phone, ui.url + "/")
    card = card_of(page, turn_id, "approve write_file")
    await expect(card).to_be_visible(timeout=WAIT)
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=done))
    await expect(row).to_contain_text("completed", timeout=WAIT)
    # A card per turn, each field named (the table's header is for screen readers only).
    await expect(row.get_by_role("cell", name=re.compile(r"^Duration: \d"))).to_be_visible()
    await expect(row.get_by_role("cell", name=re.compile(r"^Cost: "))).to_be_visible()
    await no_sideways_scroll(page)
    approve = card.get_by_role("button", name="Approve")
    box = await approve.bounding_box()
    assert box is not None and box["height"] >= 40 and box["width"] >= 300  # a touch target
    await page.screenshot(path=str(tmp_path / "phone-list.png"), full_page=True)
    await approve.tap()
    await expect(page.get_by_role("region", name="Waiting for you")).to_contain_text(
        "Nothing is waiting for you.", timeout=WAIT
    )
    await ui.until(turn_id, lambda v: v["status"] == "completed")
    await still_same_page(page)

    turn_page = await open_page(phone, f"{ui.url}/turns/{turn_id}")
    await expect(turn_page.get_by_role("status")).to_have_text("completed", timeout=WAIT)
    await expect(turn_page.get_by_role("region", name="Conversation")).to_contain_text("via web")
    await no_sideways_scroll(turn_page)
    await turn_page.screenshot(path=str(tmp_path / "phone-turn.png"), full_page=True)
    await still_same_page(turn_page)


# ---------------------------------------------------------------- who decided


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def test_a_tokens_file_names_who_decided_on_the_page_and_in_turns_show(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    browser: BrowserContext,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ada, bob = "ada-token-0123456789abcdef", "bob-token-0123456789abcdef"
    file = tmp_path / "tokens"
    file.write_text(f"# people\nAda Lovelace  {_hash(ada)}\n\nbob\tsha256:{_hash(bob).upper()}\n")
    tokens = Tokens.load(file)
    async with running_ui(temporal_env, tmp_path, tokens=tokens) as ui:
        async with httpx.AsyncClient(base_url=ui.url) as stranger:
            assert (await stranger.get("/api/pending")).status_code == 401  # no token: nothing
            wrong = {"X-Turns-Token": "x" * 20}
            assert (await stranger.get("/api/pending", headers=wrong)).status_code == 401
        ui.http.headers["X-Turns-Token"] = ada
        assert (await ui.http.get("/api/me")).json() == {"by": "Ada Lovelace"}
        first, view = await ui.suspended(SAVE)
        second, _ = await ui.suspended(SAVE)
        call = view["pending"]["permissions"][0]["toolCallId"]
        r = await ui.http.post(f"/api/turns/{first}/calls/{call}/approve", json={})
        assert r.status_code == 200, r.text
        # Bob, in a browser, from the link with his token.
        page = await open_page(browser, f"{ui.url}/turns/{second}?token={bob}")
        await page.get_by_role("button", name="Approve").click()
        conversation = page.get_by_role("region", name="Conversation")
        await expect(conversation).to_contain_text("allowed by human · bob via web", timeout=WAIT)
        await expect(page.get_by_role("status")).to_have_text("completed")
        await still_same_page(page)
        page = await open_page(browser, f"{ui.url}/turns/{first}")
        await expect(page.get_by_role("region", name="Conversation")).to_contain_text(
            "Ada Lovelace via web", timeout=WAIT
        )
        (a,) = resolved(ui, first)
        (b,) = resolved(ui, second)
        assert (a["metadata"]["by"], b["metadata"]["by"]) == ("Ada Lovelace", "bob")
        monkeypatch.setenv("TURNS_HOME", str(ui.runtime.work_dir))
        assert main(["show", first]) == 0
        shown = capsys.readouterr().out
        assert f"allowed by human [Ada Lovelace via web at {a['metadata']['at']}]" in shown


async def test_the_cli_records_the_os_user(
    ui: Ui,
    temporal_env: WorkflowEnvironment,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    turn_id, view = await ui.suspended(ASK)
    call = view["pending"]["asyncTools"][0]["toolCallId"]
    monkeypatch.setenv("TURNS_HOME", str(ui.runtime.work_dir))
    monkeypatch.setenv("TURNS_TASK_QUEUE", ui.runtime.task_queue)
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_env.client.service_client.config.target_host)
    code = await asyncio.to_thread(
        main, ["complete", turn_id, call, "--text", "Grace", "--no-worker"]
    )
    assert code == 0
    (result,) = [
        e for e in events(ui, turn_id) if e["type"] == "tool_result" and e["source"] == "async"
    ]
    meta = result["result"]["metadata"]
    assert meta["via"] == "cli" and meta.get("by") == os_user() and TS.fullmatch(meta["at"])
    capsys.readouterr()
    assert main(["show", turn_id]) == 0
    assert f"answered    {os_user()} via cli at {meta['at']}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("ada\n", ":2: expected a name and the SHA-256"),
        ("ada 1234\n", ":2: expected a name and the SHA-256"),
        (f"{'0' * 64}\n", ":2: expected a name and the SHA-256"),
        (f"ada {'a' * 64}\nbob {'A' * 64}\n", ":3: the same token hash as line 2"),
        (f"{'x' * 101} {'a' * 64}\n", ":2: a name is 1 to 100 printable characters"),
        ("# nobody\n", ": no tokens"),
    ],
)
def test_a_malformed_tokens_file_refuses_to_start_naming_the_line(
    tmp_path: Path, text: str, problem: str
) -> None:
    file = tmp_path / "tokens"
    file.write_text("# header\n" + text)
    with pytest.raises(UiConfigError) as caught:
        load_tokens(str(file))
    assert str(caught.value).startswith(f"{file}{problem}")
    with pytest.raises(TokensFileError):
        Tokens.load(file)


def test_turns_ui_with_a_bad_tokens_file_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNS_HOME", str(tmp_path))
    file = tmp_path / "tokens"
    file.write_text(f"ada {_hash('a' * 20)}\nbob not-a-hash-but-a-token-by-mistake\n")
    assert main(["ui", "--tokens-file", str(file), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"{file}:2:" in err
    assert "not-a-hash-but-a-token-by-mistake" not in err  # a pasted token is not echoed


# ---------------------------------------------------------------- cost and time


async def test_the_list_and_the_turn_show_cost_and_duration(
    temporal_env: WorkflowEnvironment, tmp_path: Path, browser: BrowserContext
) -> None:
    toml = "[prices.scripted]\ninput_per_mtok = 2000.0\noutput_per_mtok = 8000.0\n"
    async with running_ui(temporal_env, tmp_path, toml=toml) as ui:
        turn_id = await ui.create("What is 6 * 7?")
        view = await ui.until(turn_id, lambda v: v["status"] == "completed")
        usage = view["state"]["usage"]
        expected = (usage["inputTokens"] * 2000 + usage["outputTokens"] * 8000) / 1e6
        assert view["cost"]["turn"]["amount"] == pytest.approx(expected)
        assert view["durationMs"] >= 0 and view["endedAt"] and view["createdAt"]
        page = await open_page(browser, f"{ui.url}/turns/{turn_id}")
        usage_box = page.get_by_role("region", name="Usage")
        await expect(usage_box).to_contain_text(f"~${expected:.3f}", timeout=WAIT)
        await expect(usage_box).to_contain_text("duration")
        await expect(page.locator("#meta")).to_contain_text("took")
        index = await open_page(browser, ui.url + "/")
        row = index.get_by_role("row").filter(has=index.get_by_role("link", name=turn_id))
        await expect(row.locator("td.cost")).to_have_text(f"~${expected:.3f}", timeout=WAIT)
        await expect(row.locator("td.duration")).to_have_text(re.compile(r"^\d+ (ms|s)$"))
        await still_same_page(page)
        await still_same_page(index)


# ---------------------------------------------------------------- the README's picture

SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "ui.png"
CHANGELOG = """# Changelog

## 2.3.0
- Approvals from the turn list, with who decided and when
- Webhooks when a turn waits for a person
- Cost and duration for every turn
"""


def _release_notes(request: Any) -> dict[str, Any]:
    """A realistic turn: look around, read the changelog, then ask to write the notes."""
    from turncore.model.scripted import call_index

    match call_index(request.messages):
        case 0:
            return {
                "text": "I'll check what the workspace has first.",
                "toolCalls": [{"toolName": "list_dir", "input": {"path": "."}}],
            }
        case 1:
            return {
                "text": "There is a changelog; reading the 2.3.0 entry.",
                "toolCalls": [{"toolName": "read_file", "input": {"path": "CHANGELOG.md"}}],
            }
        case 2:
            notes = (
                "# turncore 2.3\n\n- Approve, deny and answer from the inbox\n"
                "- Webhooks when a turn waits for you\n- Cost and duration per turn\n"
            )
            return {
                "text": "Here is a draft; saving it needs your approval.",
                "toolCalls": [
                    {
                        "toolName": "write_file",
                        "input": {"path": "RELEASE_NOTES.md", "content": notes},
                    }
                ],
            }
        case _:
            return {"text": "Saved RELEASE_NOTES.md."}


async def test_the_readme_screenshot_shows_a_realistic_turn(
    temporal_env: WorkflowEnvironment, tmp_path: Path, browser: BrowserContext
) -> None:
    from turnclient.builtins.demo import DEMO_MODEL

    toml = "[prices.scripted]\ninput_per_mtok = 3.0\noutput_per_mtok = 15.0\n"
    async with running_ui(temporal_env, tmp_path, toml=toml) as ui:
        workspace = ui.runtime.config.workspace
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "CHANGELOG.md").write_text(CHANGELOG)
        ui.runtime.models.register_function(DEMO_MODEL, _release_notes)
        turn_id, _ = await ui.suspended(
            "Draft short release notes for 2.3 from the changelog and save them"
        )
        page = await open_page(browser, f"{ui.url}/turns/{turn_id}")
        card = page.get_by_role("region", name="Waiting for you").get_by_role("article")
        await expect(card).to_contain_text("RELEASE_NOTES.md", timeout=WAIT)
        conversation = page.get_by_role("region", name="Conversation")
        await expect(conversation).to_contain_text("Approvals from the turn list")
        await expect(page.locator("#meta")).to_contain_text("cost ~$")
        await expect(page).to_have_title(re.compile(r"^\(1\) "))
        shot = tmp_path / "ui.png"
        await page.screenshot(path=str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("TURNS_UPDATE_SCREENSHOT"):
            SCREENSHOT.write_bytes(shot.read_bytes())
        await still_same_page(page)


async def test_the_favicon_is_served(ui: Ui) -> None:
    r = await ui.http.get("/favicon.ico")
    assert r.status_code == 200
    assert r.headers["content-type"] == "image/x-icon"
    assert r.content[:4] == b"\x00\x00\x01\x00"  # an ICO directory
    assert b"\x89PNG" in r.content  # its images
    svg = await ui.http.get("/static/favicon.svg")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    page = (await ui.http.get("/")).text
    assert '<link rel="icon" href="/favicon.ico"' in page
