"""MCP tools against real MCP servers (the SDK's server side, ``tests/mcp_server.py``),
over stdio and streamable HTTP on 127.0.0.1, on the real dev server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.webui import running_ui
from turnclient import Agent, ConfigError, McpServer, Turns
from turnclient.cli.render import continue_commands
from turnclient.lib.api import CreateTurnInput, TurnClient
from turnclient.lib.turnview import pending_inputs
from turnclient.runtime.config import load_config
from turnclient.runtime.connection import Runtime
from turnclient.runtime.mcp import call_result
from turncore.advance import INTERRUPTED_TOOL_RESULT
from turncore.errors import DependencyError
from turncore.events import RequestedAgent, ResolvedAgent, SuspendedOutcome
from turncore.messages import UserMessage
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index
from turncore.reducer import TurnReducer

ROOT = Path(__file__).resolve().parent.parent


def _stdio(name: str, log: Path, **keys: Any) -> str:
    lines = [
        f"[mcp.{name}]",
        f"command = {sys.executable!r}",
        f'args = ["-m", "tests.mcp_server", "stdio", {str(log)!r}]',
        f"cwd = {str(ROOT)!r}",
    ]
    lines += [f"{k} = {_toml(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return repr(value).replace("'", '"')
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def calling(*calls: dict[str, Any]) -> Any:
    """A scripted model: the given tool calls, then the results it saw as text."""

    def model(request: ModelCallRequest) -> dict[str, Any]:
        if call_index(request.messages) == 0:
            return {"text": "calling", "toolCalls": list(calls)}
        return {"text": "done"}

    return model


def turns_for(
    temporal: WorkflowEnvironment,
    work: Path,
    toml: str,
    *calls: dict[str, Any],
    env: dict[str, str] | None = None,
    **kwargs: Any,
) -> Turns:
    work.mkdir(parents=True, exist_ok=True)
    (work / "turns.toml").write_text(toml)
    process_env = {**os.environ, "TURNS_TASK_QUEUE": f"tq-{uuid.uuid4()}", **(env or {})}
    return Turns(
        work,
        client=temporal.client,
        env=process_env,
        models={"mcp": calling(*calls), **kwargs.pop("models", {})},
        **kwargs,
    )


def _agent(*servers: str) -> str:
    return (
        '[agents.helper]\nsystem_prompt = "You help."\nmodel = "scripted/mcp"\ntools = []\n'
        f"mcp = {_toml(list(servers))}\n"
    )


def _results(events: list[Any]) -> dict[str, Any]:
    return {e.tool_call_id: e.result for e in events if e.type == "tool_result"}


def _log(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _turn_files(work: Path) -> list[Path]:
    return sorted(work.rglob("*.jsonl"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped) is not running.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


async def _until(check: Any, what: str, seconds: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------- stdio


async def test_listing_snapshot_and_a_call_with_approval(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    toml = _stdio("tools", log, deny=["garbage", "crash"]) + _agent("tools")
    call = {"toolCallId": "c1", "toolName": "echo", "input": {"text": "hello"}}
    async with turns_for(temporal_env, tmp_path / "w", toml, call) as turns:
        result = await turns.run("echo hello", agent="helper")
        assert result.status == "suspended"
        assert _log(log) == []  # nothing ran before the approval
        events = await turns.events(result.turn_id)
        snapshot = events[0].agent.resolved  # type: ignore[union-attr]
        assert isinstance(snapshot, ResolvedAgent)
        by_name = {t.name: t for t in snapshot.tools}
        assert set(by_name) == {"echo", "weather", "fail", "picture", "document", "slow", "steps"}
        echo = by_name["echo"]
        assert echo.tool_id == "mcp:tools/echo"
        assert echo.description == "Echo the text back."
        assert echo.input_schema["properties"]["text"]["type"] == "string"  # type: ignore[index]
        requested = [e for e in events if e.type == "tool_permission_required"]
        assert requested[0].request == {  # type: ignore[union-attr]
            "kind": "mcp",
            "server": "tools",
            "tool": "echo",
            "toolName": "echo",
            "input": {"text": "hello"},
        }
        # The CLI's and the web UI's words for the approval (the API's "label").
        waiting = pending_inputs(await turns.state(result.turn_id))["permissions"]
        assert waiting[0]["label"] == "MCP tools · echo"
        suspended = await turns.outcome(result.turn_id)
        assert isinstance(suspended, SuspendedOutcome)
        (what, _), *_ = continue_commands(result.turn_id, suspended)
        assert what.startswith("approval: MCP tools · echo (c1)")
        outcome = await turns.approve(result.turn_id, "c1")
        assert outcome.status == "completed"
        events = await turns.events(result.turn_id)
        assert _results(events)["c1"].output == {"result": "hello"}
        assert _log(log) == ["echo hello"]
        pid = int(log.with_name("server.log.pid").read_text())
        assert _alive(pid)
    # The worker started the stdio server; it stops with the worker.
    await _until(lambda: not _alive(pid), "the stdio server to stop with the worker")


async def test_allowed_calls_errors_images_and_resources(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    allowed = ["steps", "weather", "fail", "picture", "document"]
    toml = _stdio("tools", log, allow=allowed) + _agent("tools")
    calls = [
        {"toolCallId": "s", "toolName": "steps", "input": {"count": 2}},
        {"toolCallId": "w", "toolName": "weather", "input": {"city": "Oslo"}},
        {"toolCallId": "f", "toolName": "fail", "input": {"reason": "no"}},
        {"toolCallId": "p", "toolName": "picture", "input": {}},
        {"toolCallId": "d", "toolName": "document", "input": {}},
    ]
    async with turns_for(temporal_env, tmp_path / "w", toml, *calls) as turns:
        result = await turns.run("go", agent="helper")
        assert result.status == "completed"
        events = await turns.events(result.turn_id)
        assert not [e for e in events if e.type == "tool_permission_required"]
        results = _results(events)
        # MCP progress notifications are the call's durable progress.
        progress = [e.progress for e in events if e.type == "tool_progress"]
        assert progress == [
            {"progress": 1, "total": 2, "message": "step 1"},
            {"progress": 2, "total": 2, "message": "step 2"},
        ]
        assert results["s"].output == {"result": "2 steps"}
        assert results["w"].output == {"city": "Oslo", "celsius": 21}
        assert not results["w"].is_error
        assert results["f"].is_error
        assert "failed: no" in results["f"].output
        image = results["p"].output["content"][0]
        assert image["type"] == "image" and image["mediaType"] == "image/png"
        assert image["data"].startswith("iVBOR")
        document = results["d"].output["content"]
        assert document[0] == {"type": "text", "text": "here it is"}
        assert document[1]["type"] == "file" and document[1]["filename"] == "report.pdf"
        assert document[1]["mediaType"] == "application/pdf"


async def test_a_crash_a_hang_and_the_turn_goes_on(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    log, hung = tmp_path / "server.log", tmp_path / "hung.log"
    toml = (
        _stdio("tools", log, permission="none")
        + _stdio("hang", hung, permission="none", timeout=2, prefix="h")
        + _agent("tools", "hang")
        + '[agents.after]\nsystem_prompt = "p"\nmodel = "scripted/after"\nmcp = ["tools"]\n'
    )
    calls = [
        {"toolCallId": "c", "toolName": "crash", "input": {}},
        {"toolCallId": "s", "toolName": "h_slow", "input": {"seconds": 60}},
    ]
    after = calling({"toolCallId": "e", "toolName": "echo", "input": {"text": "back"}})
    async with turns_for(
        temporal_env, tmp_path / "w", toml, *calls, models={"after": after}
    ) as turns:
        result = await turns.run("go", agent="helper")
        assert result.status == "completed"
        results = _results(await turns.events(result.turn_id))
        assert results["c"].is_error
        assert "its outcome is unknown and it was not retried" in results["c"].output
        assert results["s"].is_error
        assert "did not answer slow within 2 s" in results["s"].output
        # Neither was run twice; the hung call was cancelled at the server.
        await _until(lambda: "cancelled slow" in _log(hung), "the server to see the cancel")
        assert _log(log) == ["crash called"]
        assert _log(hung) == ["started slow", "cancelled slow"]
        # The worker starts the crashed stdio server again for the next call.
        again = await turns.run("again", agent="after")
        assert _results(await turns.events(again.turn_id))["e"].output == {"result": "back"}
        assert _log(log) == ["crash called", "echo back"]


async def test_cancelling_the_turn_cancels_the_call_at_the_server(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    toml = _stdio("tools", log, permission="none") + _agent("tools")
    call = {"toolCallId": "s", "toolName": "slow", "input": {"seconds": 120}}
    async with turns_for(temporal_env, tmp_path / "w", toml, call) as turns:
        turn_id = await turns.start("go", agent="helper")
        running = asyncio.ensure_future(turns.advance(turn_id))
        await _until(lambda: "started slow" in _log(log), "the call to start")
        outcome = await turns.cancel(turn_id, "enough")
        assert outcome.status == "cancelled"
        await _until(lambda: "cancelled slow" in _log(log), "the server to see the cancel")
        await asyncio.wait_for(running, 30)
        result = _results(await turns.events(turn_id))["s"]
        assert result.is_error  # the workflow's synthetic result
        assert "finished slow" not in _log(log)


async def test_a_changed_tool_list_never_changes_a_created_turn(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    tools_file = tmp_path / "tools.txt"
    toml = _stdio("tools", log, env=["MCP_TOOLS_FILE"]) + _agent("tools")
    call = {"toolCallId": "c1", "toolName": "echo", "input": {"text": "x"}}
    env = {"MCP_TOOLS_FILE": str(tools_file)}
    async with turns_for(temporal_env, tmp_path / "w", toml, call, env=env) as turns:
        first = await turns.run("one", agent="helper")
        assert first.status == "suspended"
        tools_file.write_text("Echo, but described anew.\nextra\n")
        second = await turns.run("two", agent="helper")
        created = [(await turns.events(t))[0] for t in (first.turn_id, second.turn_id)]
        before, after = (
            {t.name: t.description for t in c.agent.resolved.tools}  # type: ignore[union-attr]
            for c in created
        )
        assert before["echo"] == "Echo the text back." and "extra" not in before
        assert after["echo"] == "Echo, but described anew." and "extra" in after
        outcome = await turns.approve(first.turn_id, "c1")
        assert outcome.status == "completed"
        again = (await turns.events(first.turn_id))[0]
        assert again.agent.resolved.tools == created[0].agent.resolved.tools  # type: ignore[union-attr]


async def test_two_tools_under_one_name_and_a_server_down_create_no_turn(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    toml = (
        _stdio("one", log)
        + _stdio("two", log)
        + _stdio("three", log, prefix="t3")
        + "[mcp.down]\ncommand = 'no-such-mcp-server-binary'\n"
        + _agent("one", "two")
        + '[agents.prefixed]\nsystem_prompt = "p"\nmodel = "scripted/mcp"\ntools = []\n'
        + 'mcp = ["one", "three"]\n'
        + '[agents.broken]\nsystem_prompt = "p"\nmodel = "scripted/mcp"\nmcp = ["down"]\n'
    )
    async with turns_for(temporal_env, tmp_path / "w", toml) as turns:
        with pytest.raises(DependencyError) as clash:
            await turns.start("go", agent="helper")
        assert "'echo'" in str(clash.value)
        assert "mcp:one/echo" in str(clash.value) and "mcp:two/echo" in str(clash.value)
        with pytest.raises(DependencyError) as down:
            await turns.start("go", agent="broken")
        assert "MCP server down" in str(down.value)
        assert _turn_files(tmp_path / "w") == []
        prefixed = await turns.start("go", agent="prefixed")
        assert len(_turn_files(tmp_path / "w")) == 1  # where the refused ones would have been
        tools = (await turns.events(prefixed))[0].agent.resolved.tools  # type: ignore[union-attr]
        names = {t.name for t in tools}
        assert {"echo", "t3_echo"} <= names
        assert next(t for t in tools if t.name == "t3_echo").tool_id == "mcp:three/echo"


async def test_a_python_agent_attaches_an_mcp_server(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    server = McpServer(
        name="py",
        command=sys.executable,
        args=("-m", "tests.mcp_server", "stdio", str(log)),
        cwd=ROOT,
        allow=("echo",),
    )
    agent = Agent(name="py", system_prompt="p", model="scripted/mcp", mcp=(server,))
    call = {"toolCallId": "c1", "toolName": "echo", "input": {"text": "py"}}
    async with turns_for(temporal_env, tmp_path / "w", "", call, agents=[agent]) as turns:
        result = await turns.run("go", agent="py")
        assert result.status == "completed"
        assert _log(log) == ["echo py"]


# ---------------------------------------------------------------- streamable HTTP


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start_http(log: Path, port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp_server", "http", str(log), str(port)],
        cwd=ROOT,
        env={**os.environ, "MCP_TOKEN": "sesame"},
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("the MCP HTTP server did not start") from None
            time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(10)


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    log = tmp_path / "http.log"
    port = _free_port()
    process = _start_http(log, port)
    try:
        yield f"http://127.0.0.1:{port}/mcp", log
    finally:
        _stop(process)


async def test_over_streamable_http_with_a_header_from_the_environment(
    temporal_env: WorkflowEnvironment, tmp_path: Path, http_server: tuple[str, Path]
) -> None:
    url, log = http_server
    toml = (
        f'[mcp.web]\nurl = "{url}"\nheaders_env = {{ Authorization = "WEB_TOKEN" }}\n'
        'allow = ["weather"]\n' + _agent("web")
    )
    call = {"toolCallId": "w", "toolName": "weather", "input": {"city": "Rome"}}
    env = {"WEB_TOKEN": "Bearer sesame"}
    async with turns_for(temporal_env, tmp_path / "w", toml, call, env=env) as turns:
        result = await turns.run("go", agent="helper")
        assert result.status == "completed"
        assert _results(await turns.events(result.turn_id))["w"].output == {
            "city": "Rome",
            "celsius": 21,
        }
        assert _log(log) == ["weather Rome"]
    wrong = {"WEB_TOKEN": "Bearer wrong"}
    async with turns_for(temporal_env, tmp_path / "x", toml, call, env=wrong) as turns:
        with pytest.raises(DependencyError, match="MCP server web"):
            await turns.start("go", agent="helper")
    async with turns_for(temporal_env, tmp_path / "y", toml, call, env={}) as turns:
        os.environ.pop("WEB_TOKEN", None)
        with pytest.raises(ConfigError, match=r"mcp\.web\.headers_env\.Authorization"):
            await turns.start("go", agent="helper")
        assert _turn_files(tmp_path / "y") == []


async def test_a_server_that_answers_garbage_creates_no_turn(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "mcp").write_text("<html>not MCP</html>")
    port = _free_port()
    site = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path / "site",
        stderr=subprocess.DEVNULL,
    )
    try:
        toml = f'[mcp.odd]\nurl = "http://127.0.0.1:{port}/mcp"\n' + _agent("odd")
        async with turns_for(temporal_env, tmp_path / "w", toml) as turns:
            await _until(lambda: _listening(port), "the HTTP server")
            with pytest.raises(DependencyError, match="MCP server odd .* cannot list its tools"):
                await turns.start("go", agent="helper")
            assert _turn_files(tmp_path / "w") == []
    finally:
        _stop(site)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


async def test_a_refused_connection_at_creation_and_during_a_call(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    toml = f'[mcp.web]\nurl = "{url}"\nheaders_env = {{ Authorization = "WEB_TOKEN" }}\n'
    toml += _agent("web")
    call = {"toolCallId": "e", "toolName": "echo", "input": {"text": "x"}}
    env = {"WEB_TOKEN": "Bearer sesame"}
    async with turns_for(temporal_env, tmp_path / "w", toml, call, env=env) as turns:
        with pytest.raises(DependencyError, match="MCP server web"):
            await turns.start("go", agent="helper")
        assert _turn_files(tmp_path / "w") == []
        process = _start_http(tmp_path / "http.log", port)
        try:
            result = await turns.run("go", agent="helper")
            assert result.status == "suspended"
        finally:
            _stop(process)
        outcome = await turns.approve(result.turn_id, "e")
        assert outcome.status == "completed"  # the turn goes on
        output = _results(await turns.events(result.turn_id))["e"]
        assert output.is_error
        # The worker's session (opened to list the tools) either notices the server
        # went away before the call, or the call's request finds it gone.
        assert output.output.startswith("MCP server web")
        assert output.output.endswith(
            ("The tool was not called.", "its outcome is unknown and it was not retried.")
        )


# ---------------------------------------------------------------- bad input and mapping


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[mcp.x]\nurl = "http://127.0.0.1:1/mcp"\ncommand = "srv"\n', "mcp.x: give either"),
        ("[mcp.x]\ntimeout = 5\n", "mcp.x: give either command"),
        ('[mcp.x]\ncommand = "srv"\nport = 1\n', "mcp.x: unknown key port"),
        ('[mcp.x]\ncommand = "srv"\nheaders_env = { A = "B" }\n', "headers_env applies only"),
        ('[mcp.x]\nurl = "http://h/mcp"\nheaders_env = { A = "secret value" }\n', "names an"),
        ('[mcp.x]\ncommand = "srv"\nallow = ["a"]\ndeny = ["a"]\n', "both allowed and denied"),
        ('[mcp.x]\ncommand = "srv"\ntimeout = 0\n', "mcp.x.timeout"),
        ('[mcp.x]\ncommand = "srv"\npermission = "always"\n', "mcp.x.permission"),
        ('[agents.a]\nsystem_prompt = "p"\nmcp = ["nope"]\n', "agents.a.mcp: unknown MCP server"),
        ('[permissions]\nallow = ["mcp:nope/x"]\n', "permissions.allow: unknown MCP server"),
    ],
)
def test_bad_mcp_tables_name_the_key(tmp_path: Path, table: str, message: str) -> None:
    (tmp_path / "turns.toml").write_text(table)
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path, env={})
    assert message in str(error.value)


def test_a_python_agent_naming_an_unknown_server_is_refused(tmp_path: Path) -> None:
    agent = Agent(name="a", system_prompt="p", model="scripted/x", mcp=("nope",))
    with pytest.raises(ConfigError, match="agents.a.mcp: unknown MCP server 'nope'"):
        Turns(tmp_path, agents=[agent], env={})


def test_results_map_to_outputs_and_parts() -> None:
    from mcp_types import CallToolResult, ImageContent, TextContent

    text = call_result("s", "t", CallToolResult(content=[TextContent(type="text", text="hi")]))
    assert (text.output, text.is_error) == ("hi", False)
    error = call_result(
        "s", "t", CallToolResult(content=[TextContent(type="text", text="no")], is_error=True)
    )
    assert (error.output, error.is_error) == ("no", True)
    both = call_result(
        "s",
        "t",
        CallToolResult(
            content=[ImageContent(type="image", data="AAAA", mime_type="image/gif")],
            structured_content={"n": 1},
        ),
    )
    assert both.output == {
        "content": [{"type": "image", "mediaType": "image/gif", "data": "AAAA"}],
        "structuredContent": {"n": 1},
    }
    assert both.metadata == {"mcp": {"server": "s", "tool": "t"}}


async def test_the_classifier_sees_mcp_metadata(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    toml = (
        _stdio("tools", log)
        + _agent("tools")
        + '[permissions]\nallow = ["mcp:tools/echo"]\ndeny = ["mcp:tools/weather"]\n'
    )
    calls = [
        {"toolCallId": "e", "toolName": "echo", "input": {"text": "auto"}},
        {"toolCallId": "w", "toolName": "weather", "input": {"city": "Bern"}},
    ]
    async with turns_for(temporal_env, tmp_path / "w", toml, *calls) as turns:
        result = await turns.run("go", agent="helper", auto_permission=True)
        assert result.status == "completed"
        events = await turns.events(result.turn_id)
        decided = {
            e.tool_call_id: e.decision for e in events if e.type == "tool_permission_classified"
        }
        assert decided == {"e": "allow", "w": "deny"}
        assert _log(log) == ["echo auto"]


def _cli(work: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnclient.cli", *argv],
        env={**os.environ, "TURNS_HOME": str(work)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_turns_mcp_list_and_turns_config(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    (tmp_path / "turns.toml").write_text(
        _stdio("tools", log, deny=["crash", "garbage"], allow=["echo"], prefix="t")
        + _agent("tools")
    )
    listed = _cli(tmp_path, "mcp", "list", "tools", "--json")
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    rows = {r["name"]: r for r in doc["tools"]}
    assert rows["t_echo"]["toolId"] == "mcp:tools/echo"
    assert rows["t_echo"]["permission"] == "none" and rows["t_weather"]["permission"] == "ask"
    assert rows["t_echo"]["inputSchema"]["required"] == ["text"]
    assert doc["denied"] == ["crash", "garbage"]
    text = _cli(tmp_path, "mcp", "list", "tools")
    assert "t_echo  (mcp:tools/echo · permission none)" in text.stdout
    unknown = _cli(tmp_path, "mcp", "list", "nope")
    assert (
        unknown.returncode != 0 and "no MCP server 'nope' is configured (tools)" in unknown.stderr
    )
    shown = _cli(tmp_path, "config")
    assert shown.returncode == 0, shown.stderr
    assert "mcp servers" in shown.stdout and "agents: helper" in shown.stdout
    assert "mcp: tools" in shown.stdout
    as_json = json.loads(_cli(tmp_path, "config", "--json").stdout)
    assert as_json["mcp"]["tools"]["deny"] == ["crash", "garbage"]
    assert as_json["agents"]["helper"]["mcp"] == ["tools"]


async def test_a_worker_killed_mid_call_never_calls_again(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """``turns worker`` runs the call in its own process and is SIGKILLed while the
    MCP server works; a new worker closes the call as interrupted (§23)."""
    work, log = tmp_path / "w", tmp_path / "server.log"
    work.mkdir()
    (work / "script.json").write_text(
        json.dumps(
            {
                "responses": [
                    {
                        "toolCalls": [
                            {"toolCallId": "s", "toolName": "slow", "input": {"seconds": 120}}
                        ]
                    },
                    {"text": "done"},
                ]
            }
        )
    )
    (work / "turns.toml").write_text(
        _stdio("tools", log, permission="none")
        + '[agents.helper]\nsystem_prompt = "p"\nmodel = "scripted/script.json"\nmcp = ["tools"]\n'
    )
    queue = f"tq-{uuid.uuid4()}"
    env = {
        **os.environ,
        "TURNS_HOME": str(work),
        "TURNS_TASK_QUEUE": queue,
        "TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": temporal_env.client.namespace,
    }
    runtime = Runtime.from_work_dir(work, env=env)
    client = TurnClient(
        temporal_env.client,
        runtime.repository,
        runtime.resolver,
        task_queue=queue,
        workflow_options={"heartbeat_timeout_seconds": 2.0},
        listed=runtime.listing,
    )
    turn_id = await client.create_turn(
        CreateTurnInput(
            agent=RequestedAgent(agent_id="helper"),
            input=UserMessage(content="go"),
            human_available=True,
        )
    )

    async def worker() -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "turnclient.cli", "worker", cwd=ROOT, env=env
        )

    first = await worker()
    try:
        outcome = asyncio.ensure_future(client.recover(turn_id))
        await _until(lambda: "started slow" in _log(log), "the call to reach the server", 90)
        first.send_signal(signal.SIGKILL)
        await asyncio.wait_for(first.wait(), 30)
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
    second = await worker()
    try:
        result = await asyncio.wait_for(outcome, 90)
        assert result.status == "completed", result
    finally:
        second.send_signal(signal.SIGTERM)
        await asyncio.wait_for(second.wait(), 30)
    state = TurnReducer.of(runtime.repository.read(turn_id)).state
    call = state.tool_calls[0]
    assert call.result is not None and call.result.result.output == INTERRUPTED_TOOL_RESULT
    assert _log(log).count("started slow") == 1  # never called a second time


async def test_the_web_ui_creates_mcp_turns_and_labels_their_approvals(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    log, home = tmp_path / "server.log", tmp_path / "home"
    home.mkdir()
    (home / "script.json").write_text(
        json.dumps(
            {
                "responses": [
                    {
                        "toolCalls": [
                            {"toolCallId": "e", "toolName": "echo", "input": {"text": "ui"}}
                        ]
                    },
                    {"text": "done"},
                ]
            }
        )
    )
    (home / "turns.toml").write_text(
        _stdio("tools", log)
        + '[agents.helper]\nsystem_prompt = "p"\nmodel = "scripted/script.json"\nmcp = ["tools"]\n'
    )
    async with running_ui(temporal_env, tmp_path) as ui:
        turn_id = await ui.create("echo", agent="helper")
        view = await ui.until(turn_id, lambda v: v["status"] == "suspended")
        (waiting,) = view["pending"]["permissions"]
        assert waiting["label"] == "MCP tools · echo"
        assert waiting["request"]["kind"] == "mcp"
        r = await ui.http.post(f"/api/turns/{turn_id}/calls/e/approve", json={})
        assert r.status_code == 200, r.text
        await ui.until(turn_id, lambda v: v["status"] == "completed")
    assert _log(log) == ["echo ui"]


async def test_a_sub_agent_gets_its_mcp_tools_when_it_is_spawned(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    log, work = tmp_path / "server.log", tmp_path / "w"
    work.mkdir()
    (work / "turns.toml").write_text(
        _stdio("tools", log, allow=["echo"])
        + '[agents.parent]\nsystem_prompt = "p"\nmodel = "scripted/parent"\n'
        + 'tools = ["spawn_agent"]\n'
        + '[agents.child]\nsystem_prompt = "c"\nmodel = "scripted/child"\nmcp = ["tools"]\n'
    )
    spawn = {
        "toolCallId": "k",
        "toolName": "spawn_agent",
        "input": {"agent": "child", "prompt": "go"},
    }
    echo = {"toolCallId": "e", "toolName": "echo", "input": {"text": "sub"}}
    turns = Turns(
        work,
        client=temporal_env.client,
        env={**os.environ, "TURNS_TASK_QUEUE": f"tq-{uuid.uuid4()}"},
        models={"parent": calling(spawn), "child": calling(echo)},
    )
    async with turns:
        result = await turns.run("delegate", agent="parent")
        assert result.status == "completed", [
            (e.type, getattr(e, "result", None) or getattr(e, "request", None))
            for e in await turns.events(result.turn_id)
            if e.type != "model_step_event"
        ]
        assert _log(log) == ["echo sub"]
        parent_events = await turns.events(result.turn_id)
        assert "mcp:tools/echo" not in str(parent_events[0].agent.resolved)  # type: ignore[union-attr]


async def test_a_worker_without_the_server_refuses_the_turn_and_changes_nothing(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    log, work = tmp_path / "server.log", tmp_path / "w"
    call = {"toolCallId": "c1", "toolName": "echo", "input": {"text": "x"}}
    queue = {"TURNS_TASK_QUEUE": f"tq-{uuid.uuid4()}"}
    async with turns_for(
        temporal_env, work, _stdio("tools", log) + _agent("tools"), call, env=queue
    ) as turns:
        result = await turns.run("go", agent="helper")
        assert result.status == "suspended"
    (path,) = _turn_files(work)
    before = path.read_bytes()
    without = '[agents.helper]\nsystem_prompt = "You help."\nmodel = "scripted/mcp"\n'
    async with turns_for(temporal_env, work, without, call, env=queue) as turns:
        # §15.3: the decision is refused, naming the missing server once; nothing is written.
        with pytest.raises(DependencyError) as refused:
            await turns.approve(result.turn_id, "c1")
        assert str(refused.value).count("need MCP server 'tools'") == 1
    assert path.read_bytes() == before
    assert _log(log) == []


async def test_a_restarted_http_server_gets_a_new_session(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The worker's session outlives the server's: the server refuses the old session
    without running the call (404), and the worker opens a new one for it."""
    port, log = _free_port(), tmp_path / "http.log"
    toml = (
        f'[mcp.web]\nurl = "http://127.0.0.1:{port}/mcp"\npermission = "none"\n'
        'headers_env = { Authorization = "WEB_TOKEN" }\n' + _agent("web")
    )
    call = {"toolCallId": "e", "toolName": "echo", "input": {"text": "again"}}
    env = {"WEB_TOKEN": "Bearer sesame"}
    process = _start_http(log, port)
    try:
        async with turns_for(temporal_env, tmp_path / "w", toml, call, env=env) as turns:
            first = await turns.run("one", agent="helper")
            assert _results(await turns.events(first.turn_id))["e"].output == {"result": "again"}
            _stop(process)
            process = _start_http(log, port)
            second = await turns.run("two", agent="helper")
            result = _results(await turns.events(second.turn_id))["e"]
            assert (result.is_error, result.output) == (False, {"result": "again"})
        assert _log(log) == ["echo again", "echo again"]
    finally:
        _stop(process)


@pytest.mark.temporal  # the command starts the work dir's embedded server
def test_the_terminal_asks_about_mcp_name_tool(tmp_path: Path) -> None:
    """``turns chat`` (and the renderer ``turns run`` uses) on the embedded server."""
    log, home = tmp_path / "server.log", tmp_path / "home"
    home.mkdir()
    (home / "script.json").write_text(
        json.dumps(
            {
                "responses": [
                    {
                        "toolCalls": [
                            {"toolCallId": "e", "toolName": "echo", "input": {"text": "tty"}}
                        ]
                    },
                    {"text": "echoed"},
                ]
            }
        )
    )
    (home / "turns.toml").write_text(
        _stdio("tools", log)
        + '[agents.helper]\nsystem_prompt = "p"\nmodel = "scripted/script.json"\nmcp = ["tools"]\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    said = subprocess.run(
        [sys.executable, "-m", "turnclient.cli", "chat", "--agent", "helper"],
        cwd=tmp_path,
        env={**env, "TURNS_HOME": str(home), "NO_COLOR": "1"},
        input="echo it\ny\n",
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert said.returncode == 0, said.stderr
    assert '? MCP tools · echo (e) needs approval: {"text":"tty"}' in said.stdout
    assert 'allow MCP tools · echo {"text":"tty"}? [y/n/reason]' in said.stdout
    assert "echoed" in said.stdout
    assert _log(log) == ["echo tty"]
