"""Model fallback: ``model = ["down/m1", "up/m2"]`` through the real ``turns`` command.

Each provider is a real HTTP server on 127.0.0.1 speaking Chat Completions
(``tests/model``); the command runs against the session's dev server. A
transient or unavailable failure before any output moves the call to the next
model, and the answer records which model gave it and what failed before.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.cli_process import cli_env, run_cli
from tests.model.conftest import FakeProvider, Reply
from tests.model.wire import ChatWire
from turnclient import Agent, ConfigError, Turns

JSON_BODY = {"content-type": "application/json"}


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeProvider, FakeProvider]]:
    down, up = FakeProvider(), FakeProvider()
    await down.start()
    await up.start()
    yield down, up
    await down.stop()
    await up.stop()


def _home(tmp_path: Path, down: FakeProvider, up: FakeProvider) -> Path:
    home = tmp_path / ".turns"
    home.mkdir()
    providers = ""
    for name, server in (("down", down), ("up", up)):
        providers += (
            f'[providers.{name}]\nkind = "openai-chat"\nbase_url = "{server.base_url}"\n'
            "max_retries = 0\n\n"
        )
    (home / "turns.toml").write_text(
        providers
        + '[agents.fb]\nsystem_prompt = "You answer."\nmodel = ["down/m1", "up/m2"]\ntools = []\n'
    )
    return home


async def _turns(home: Path, temporal_env: WorkflowEnvironment, *args: str) -> tuple[int, str, str]:
    return await run_cli(cli_env(home, temporal_env, "fallback"), *args)


@pytest.mark.parametrize(
    "failure",
    [
        Reply(status=429, headers=JSON_BODY, body=ChatWire().error_body(429)),
        Reply(status=529, headers=JSON_BODY, body=ChatWire().error_body(529)),
        Reply(status=500, headers=JSON_BODY, body=ChatWire().error_body(500)),
        Reply(reset_before_headers=True),
    ],
    ids=["rate-limited", "overloaded", "server-error", "no-answer"],
)
async def test_an_unavailable_model_falls_back_to_the_next_and_show_says_which_answered(
    temporal_env: WorkflowEnvironment,
    servers: tuple[FakeProvider, FakeProvider],
    tmp_path: Path,
    failure: Reply,
) -> None:
    down, up = servers
    home = _home(tmp_path, down, up)
    down.queue(failure)
    up.queue(Reply(chunks=list(ChatWire().text())))

    code, out, err = await _turns(home, temporal_env, "run", "--agent", "fb", "hi", "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "completed"
    assert len(down.received) == 1 and len(up.received) == 1
    assert down.received[0].json()["model"] == "m1"
    assert up.received[0].json()["model"] == "m2"

    code, out, err = await _turns(home, temporal_env, "show", "last", "--json")
    assert code == 0, err
    doc = json.loads(out)
    ((row),) = doc["models"]
    assert row["answeredBy"] == "up/m2"
    ((before),) = row["fallbackFrom"]
    assert before["model"] == "down/m1"
    assert before["code"].startswith("model-call-failed:")
    assert "provider down, model m1" in before["error"]
    assert len(doc["state"]["modelCalls"]) == 1  # one call, answered by the fallback

    code, out, _ = await _turns(home, temporal_env, "show", "last")
    assert "model call 0 answered by up/m2 (fell back after down/m1 (model-call-failed:" in out

    # The file stays wire-exact: the chain is the requested agent's composition.
    (path,) = (home / "storage").rglob("*.jsonl")
    created = json.loads(path.read_text().splitlines()[0])
    composition = created["agent"]["requested"]["overrides"]["composition"]
    assert composition == {"fallbackModels": [{"provider": "up", "model": "m2"}]}
    code, _, err = await _turns(home, temporal_env, "validate", str(path))
    assert code == 0, err


async def test_no_fallback_once_output_streamed_or_for_a_request_the_provider_refused(
    temporal_env: WorkflowEnvironment,
    servers: tuple[FakeProvider, FakeProvider],
    tmp_path: Path,
) -> None:
    down, up = servers
    home = _home(tmp_path, down, up)
    broken = ChatWire().mid_stream_error()
    down.queue(Reply(chunks=list(broken.chunks)))
    code, out, err = await _turns(home, temporal_env, "run", "--agent", "fb", "hi", "--json")
    assert code == 4, (out, err)  # failed: text had streamed, so no other model answers
    assert up.received == []

    down.queue(Reply(status=400, headers=JSON_BODY, body=ChatWire().error_body(400)))
    code, out, err = await _turns(home, temporal_env, "run", "--agent", "fb", "hi", "--json")
    assert code == 4, (out, err)  # the request itself was refused: another model would too
    assert up.received == []

    # When every model fails, the last failure ends the turn and names the earlier ones.
    down.queue(Reply(status=429, headers=JSON_BODY, body=ChatWire().error_body(429)))
    up.queue(Reply(status=503, headers=JSON_BODY, body=ChatWire().error_body(503)))
    code, out, err = await _turns(home, temporal_env, "run", "--agent", "fb", "hi", "--json")
    assert code == 4, (out, err)
    assert len(up.received) == 1
    code, out, _ = await _turns(home, temporal_env, "show", "last", "--json")
    (call,) = json.loads(out)["state"]["modelCalls"]
    assert "provider up, model m2" in call["error"]
    assert "fallback after down/m1: model-call-failed:rate-limit:rejected" in call["error"]


async def test_a_model_override_replaces_the_whole_chain(
    temporal_env: WorkflowEnvironment,
    servers: tuple[FakeProvider, FakeProvider],
    tmp_path: Path,
) -> None:
    down, up = servers
    home = _home(tmp_path, down, up)
    down.queue(Reply(status=429, headers=JSON_BODY, body=ChatWire().error_body(429)))
    code, out, err = await _turns(
        home, temporal_env, "run", "--agent", "fb", "--model", "down/m9", "hi", "--json"
    )
    assert code == 4, (out, err)
    assert up.received == []


def test_a_fallback_list_naming_an_unknown_provider_names_its_index(tmp_path: Path) -> None:
    home = tmp_path / ".turns"
    home.mkdir()
    (home / "turns.toml").write_text(
        '[agents.fb]\nsystem_prompt = "s"\nmodel = ["scripted/demo", "nope/m"]\n'
    )
    with pytest.raises(ConfigError, match=r"agents\.fb\.model\[1\]: provider 'nope'"):
        Turns(home, env={})
    (home / "turns.toml").write_text('[agents.fb]\nsystem_prompt = "s"\nmodel = []\n')
    with pytest.raises(ConfigError, match="an empty list names no model"):
        Turns(home, env={})
    (home / "turns.toml").unlink()
    with pytest.raises(ConfigError, match=r"agents\.py\.model\[0\]: provider 'gone'"):
        Turns(home, agents=[Agent(name="py", system_prompt="s", model=["gone/x"])], env={})
    ok = Turns(
        home, agents=[Agent(name="py", system_prompt="s", model=["scripted/a", "scripted/b"])]
    )
    definition = ok.runtime.resolver.agents["py"]
    assert [m.label() for m in (definition.model, *definition.fallbacks) if m] == [
        "scripted/a",
        "scripted/b",
    ]
