"""The built-in tools and the demo model, called directly (no Temporal)."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from turnclient.builtins.demo import demo_model, plan
from turnclient.builtins.tools import (
    BUILTIN_NAMES,
    builtin_tools,
    evaluate,
    http_get_tool,
)
from turncore.events import ToolResultData
from turncore.messages import (
    AssistantMessage,
    TextPart,
    ToolCallPart,
    ToolMessage,
    ToolResultOutput,
    ToolResultPart,
    UserMessage,
)
from turncore.model import ModelCallRequest, ToolDefinition
from turncore.tools import Tool, ToolContext

NOON_UTC = datetime(2025, 7, 4, 17, 30, 5, tzinfo=UTC)


def call(tool: Tool, input: Any) -> ToolResultData:
    context = ToolContext("turn", "call_1", asyncio.Event(), lambda p: asyncio.sleep(0))
    return asyncio.run(tool.execute(input, context))


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, Tool]:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("beta")
    (tmp_path / "secret.txt").write_text("do not read")
    return builtin_tools(root, now=lambda: NOON_UTC)


def test_every_builtin_is_declared_and_implemented_or_async(tools: dict[str, Tool]) -> None:
    assert tuple(tools) == BUILTIN_NAMES
    for name, t in tools.items():
        assert t.input_schema["type"] == "object" and t.tool_id == f"builtin:{name}"
        assert (t.function is not None) == (t.execution == "sync")
    assert tools["ask_human"].requires_human and tools["ask_human"].execution == "async"
    assert tools["clock"].input_schema["properties"] == {
        "timeZone": {"type": "string", "description": "An IANA time zone name.", "default": "UTC"}
    }
    assert [n for n, t in tools.items() if t.permission == "ask"] == ["write_file", "http_get"]


def test_clock_in_a_time_zone(tools: dict[str, Tool]) -> None:
    r = call(tools["clock"], {"timeZone": "America/Chicago"})
    assert not r.is_error
    assert r.output == {
        "timeZone": "America/Chicago",
        "iso": "2025-07-04T12:30:05-05:00",
        "display": "12:30 PM on Friday, 4 July 2025",
        "abbreviation": "CDT",
        "utcOffset": "-05:00",
    }
    assert call(tools["clock"], {}).output["timeZone"] == "UTC"  # type: ignore[index]
    bad = call(tools["clock"], {"timeZone": "Mars/Olympus"})
    assert bad.is_error and "unknown time zone 'Mars/Olympus'" in str(bad.output)


@pytest.mark.parametrize(
    "expression, result",
    [
        ("17 * 23", 391),
        ("(1 + 2) ** 3 - 4 / 2", 25.0),
        ("2^10", 1024),
        ("-7 // 2", -4),
        ("sqrt(16) + abs(-2)", 6.0),
        ("round(pi, 2)", 3.14),
    ],
)
def test_calculator(expression: str, result: float) -> None:
    assert evaluate(expression) == result


@pytest.mark.parametrize(
    "expression, problem",
    [
        ("1 / 0", "division by zero"),
        ("__import__('os')", "is not allowed"),
        ("2 ** 100000", "too large"),
        ("x + 1", "is not allowed"),
        ("1 +", "not an arithmetic expression"),
        ("sqrt(-1)", "cannot evaluate"),
    ],
)
def test_calculator_refuses(tools: dict[str, Tool], expression: str, problem: str) -> None:
    r = call(tools["calculator"], {"expression": expression})
    assert r.is_error and problem in str(r.output)


def test_files_inside_the_workspace(tools: dict[str, Tool], tmp_path: Path) -> None:
    r = call(tools["read_file"], {"path": "a.txt"})
    assert r.output == {"path": "a.txt", "size": 6, "content": "alpha\n", "truncated": False}
    r = call(tools["list_dir"], {})
    assert r.output == {
        "path": ".",
        "entries": [
            {"name": "a.txt", "type": "file", "size": 6},
            {"name": "sub", "type": "dir"},
        ],
        "truncated": False,
    }
    r = call(tools["write_file"], {"path": "new/c.txt", "content": "gamma"})
    assert r.output == {"path": "new/c.txt", "bytes": 5, "created": True, "appended": False}
    call(tools["write_file"], {"path": "new/c.txt", "content": "!", "append": True})
    assert (tmp_path / "ws" / "new" / "c.txt").read_text() == "gamma!"
    assert call(tools["read_file"], {"path": "sub/../sub/b.txt"}).output["content"] == "beta"  # type: ignore[index]


@pytest.mark.parametrize("tool", ["read_file", "list_dir", "write_file"])
@pytest.mark.parametrize("path", ["../secret.txt", "/etc/passwd", "sub/../../secret.txt", "link"])
def test_escapes_are_refused(tools: dict[str, Tool], tmp_path: Path, tool: str, path: str) -> None:
    os.symlink(tmp_path / "secret.txt", tmp_path / "ws" / "link")
    before = (tmp_path / "secret.txt").read_text()
    args = {"path": path, "content": "overwritten"} if tool == "write_file" else {"path": path}
    r = call(tools[tool], args)
    assert r.is_error and "outside the workspace" in str(r.output)
    assert (tmp_path / "secret.txt").read_text() == before


def test_file_tool_problems_are_error_results(tools: dict[str, Tool]) -> None:
    assert "does not exist" in str(call(tools["read_file"], {"path": "nope.txt"}).output)
    assert "is not a file" in str(call(tools["read_file"], {"path": "sub"}).output)
    assert "path: Field required" in str(call(tools["read_file"], {}).output)
    assert "content: Input should be a valid string" in str(
        call(tools["write_file"], {"path": "x", "content": 3}).output
    )
    assert "is a directory" in str(call(tools["write_file"], {"path": ".", "content": ""}).output)


def test_http_get_through_a_transport() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url == "https://example.test/page"
        return httpx.Response(200, text="hello", headers={"content-type": "text/plain"})

    fn = http_get_tool(lambda: httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    r = call(fn, {"url": "https://example.test/page"})
    assert r.output == {
        "url": "https://example.test/page",
        "status": 200,
        "contentType": "text/plain",
        "body": "hello",
        "truncated": False,
    }
    assert "only http and https" in str(call(fn, {"url": "file:///etc/passwd"}).output)


# ---------------------------------------------------------------- the demo model

ALL = {"clock", "calculator", "read_file", "list_dir", "write_file", "http_get", "ask_human"}


@pytest.mark.parametrize(
    "prompt, tool, input",
    [
        ("What time is it in Chicago?", "clock", {"timeZone": "America/Chicago"}),
        ("what's the date in Europe/Vienna", "clock", {"timeZone": "Europe/Vienna"}),
        ("Calculate (17 + 3) * 23", "calculator", {"expression": "(17 + 3) * 23"}),
        ("List the files", "list_dir", {"path": "."}),
        ("Read a.txt please", "read_file", {"path": "a.txt"}),
        (
            "Save 'hi there' to notes.txt",
            "write_file",
            {"path": "notes.txt", "content": "hi there\n"},
        ),
        ("Fetch https://example.com.", "http_get", {"url": "https://example.com"}),
        ("Ask me for my name", "ask_human", {"question": "What is your name?"}),
    ],
)
def test_the_demo_plans_one_tool_call(prompt: str, tool: str, input: dict[str, Any]) -> None:
    chosen = plan(prompt, ALL)
    assert chosen is not None and chosen[:2] == (tool, input)


def test_the_demo_uses_only_advertised_tools() -> None:
    assert plan("What time is it in Chicago?", {"calculator"}) is None
    assert plan("Hello!", ALL) is None


def _request(*messages: Any, tools: set[str] = ALL) -> ModelCallRequest:
    return ModelCallRequest(
        model="demo",
        system="s",
        messages=list(messages),
        tools=[ToolDefinition(name=n, description="", input_schema={}) for n in sorted(tools)],
    )


def test_the_demo_answers_from_the_real_tool_result() -> None:
    user = UserMessage(content="What time is it in Chicago?")
    first = demo_model(_request(user))
    assert first["toolCalls"] == [{"toolName": "clock", "input": {"timeZone": "America/Chicago"}}]
    assistant = AssistantMessage(
        content=[
            TextPart(text=first["text"]),
            ToolCallPart(
                tool_call_id="c0", tool_name="clock", input=first["toolCalls"][0]["input"]
            ),
        ]
    )
    result = {"timeZone": "America/Chicago", "display": "9:41 AM on Tuesday", "abbreviation": "CST"}
    tool = ToolMessage(
        content=[
            ToolResultPart(
                tool_call_id="c0",
                tool_name="clock",
                output=ToolResultOutput(type="json", value=result),
            )
        ]
    )
    second = demo_model(_request(user, assistant, tool))
    assert second == {"text": "It is 9:41 AM on Tuesday in Chicago (America/Chicago, CST)."}
    denied = ToolMessage(
        content=[
            ToolResultPart(
                tool_call_id="c0",
                tool_name="clock",
                output=ToolResultOutput(type="error-json", value="Permission was denied."),
            )
        ]
    )
    assert demo_model(_request(user, assistant, denied)) == {
        "text": "The clock call did not succeed: Permission was denied."
    }


# ---------------------------------------------------------------- symlink races


class _Flipper:
    """Flips ``path`` between a regular file (or directory) and a symlink to ``outside``,
    atomically (rename over it), as fast as it can, in a thread."""

    def __init__(self, path: Path, outside: Path, *, directory: bool = False) -> None:
        self.path, self.outside, self.directory = path, outside, directory
        self.stop = threading.Event()
        self.flips = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        spare = self.path.with_name(self.path.name + ".spare")
        while not self.stop.is_set():
            for make in (self._real, self._link):
                make(spare)
                os.replace(spare, self.path) if not self.directory else self._swap(spare)
                self.flips += 1

    def _real(self, spare: Path) -> None:
        if self.directory:
            spare.mkdir()
            (spare / "inside.txt").write_text("inside")
        else:
            spare.write_text("inside")

    def _link(self, spare: Path) -> None:
        os.symlink(self.outside, spare)

    def _swap(self, spare: Path) -> None:
        # A directory cannot be renamed over a non-empty one: move the old away first.
        old = self.path.with_name(self.path.name + ".old")
        if self.path.is_symlink() or self.path.exists():
            os.rename(self.path, old)
        os.rename(spare, self.path)
        if old.is_symlink():
            old.unlink()
        elif old.exists():
            shutil.rmtree(old)

    def __enter__(self) -> _Flipper:
        self._real(self.path.with_name(self.path.name + ".spare"))
        os.replace(self.path.with_name(self.path.name + ".spare"), self.path)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def test_read_file_never_follows_a_link_swapped_in_meanwhile(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    with _Flipper(tmp_path / "ws" / "race.txt", secret) as flipper:
        outputs = [call(tools["read_file"], {"path": "race.txt"}).output for _ in range(300)]
    assert flipper.flips > 50
    leaked = [o for o in outputs if isinstance(o, dict) and o["content"] == secret.read_text()]
    assert leaked == []
    assert any(isinstance(o, dict) and o["content"] == "inside" for o in outputs)


def test_write_file_never_follows_a_link_swapped_in_meanwhile(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    before = secret.read_text()
    with _Flipper(tmp_path / "ws" / "race.txt", secret) as flipper:
        for _ in range(300):
            call(tools["write_file"], {"path": "race.txt", "content": "overwritten"})
    assert flipper.flips > 50
    assert secret.read_text() == before


def test_list_dir_never_follows_a_link_swapped_in_meanwhile(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private.key").write_text("k")
    with _Flipper(tmp_path / "ws" / "d", outside, directory=True) as flipper:
        listed = [call(tools["list_dir"], {"path": "d"}).output for _ in range(300)]
        # The same through an intermediate component.
        read = [call(tools["read_file"], {"path": "d/private.key"}).output for _ in range(300)]
    assert flipper.flips > 50
    names = {e["name"] for o in listed if isinstance(o, dict) for e in o["entries"]}
    assert "private.key" not in names and "inside.txt" in names
    assert [o for o in read if isinstance(o, dict)] == []  # never found through the link


def test_a_link_inside_the_workspace_is_not_followed_either(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    os.symlink(tmp_path / "ws" / "a.txt", tmp_path / "ws" / "alias")
    r = call(tools["read_file"], {"path": "alias"})
    assert r.is_error and "symbolic link" in str(r.output)
    entries = call(tools["list_dir"], {}).output["entries"]  # type: ignore[index]
    assert {"name": "alias", "type": "link"} in entries
