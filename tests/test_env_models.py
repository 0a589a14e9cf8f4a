"""Models from the environment: ``openai/MODEL`` and ``anthropic/MODEL`` with no file.

The real ``turns`` command runs against the session's dev server; each
provider is a real HTTP server on 127.0.0.1 speaking that provider's
streaming wire format (``tests/model``), reached through the variables the
providers' own SDKs read: ``OPENAI_BASE_URL`` (with ``/v1``) and
``ANTHROPIC_BASE_URL`` (without).
"""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from tests.cli_process import cli_env, run_cli
from tests.model.conftest import FakeProvider, Reply, provider  # noqa: F401  (fixture)
from tests.model.wire import AnthropicWire, ChatWire


def _env(home: Path, temporal_env: WorkflowEnvironment, **extra: str) -> dict[str, str]:
    return cli_env(home, temporal_env, "env-models", **extra)


_turns = run_cli


async def test_openai_from_the_environment_serves_the_assistant_with_no_file(
    temporal_env: WorkflowEnvironment,
    provider: FakeProvider,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / ".turns"
    env = _env(
        home, temporal_env, OPENAI_API_KEY="sk-env-CANARY", OPENAI_BASE_URL=provider.base_url
    )
    provider.queue(Reply(chunks=list(ChatWire().text())), Reply(chunks=list(ChatWire().text())))

    code, out, err = await _turns(env, "run", "--agent", "assistant", "hi", "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "completed"
    (request,) = provider.received
    assert request.path == "/v1/chat/completions"  # OPENAI_BASE_URL: a compatible server
    assert request.headers["authorization"] == "Bearer sk-env-CANARY"
    assert request.json()["model"] == "gpt-4.1"  # the default model follows the key

    code, out, err = await _turns(
        env, "run", "--agent", "assistant", "--model", "openai/my-local-model", "hi", "--json"
    )
    assert code == 0, err
    assert provider.received[1].json()["model"] == "my-local-model"
    assert not (home / "turns.toml").exists()

    code, out, err = await _turns(env, "config", "--json")
    doc = json.loads(out)
    assert doc["defaultModel"] == "openai/gpt-4.1"
    assert doc["providers"]["openai"]["baseUrl"] == provider.base_url
    assert doc["providers"]["openai"]["origin"] == "environment"
    assert "sk-env-CANARY" not in out


async def test_anthropic_from_the_environment_takes_its_base_url_without_v1(
    temporal_env: WorkflowEnvironment,
    provider: FakeProvider,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / ".turns"
    base = provider.base_url.removesuffix("/v1")
    env = _env(home, temporal_env, ANTHROPIC_API_KEY="sk-ant-CANARY", ANTHROPIC_BASE_URL=base)
    provider.queue(Reply(chunks=list(AnthropicWire().text())))

    code, out, err = await _turns(env, "run", "--agent", "assistant", "hi", "--json")
    assert code == 0, err
    (request,) = provider.received
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-CANARY"
    assert request.json()["model"] == "claude-sonnet-4-5"


async def test_without_a_key_the_error_names_the_variable(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    home = tmp_path / ".turns"
    env = _env(home, temporal_env)
    code, _, err = await _turns(env, "run", "--agent", "assistant", "hi")
    assert code == 2
    assert "OPENAI_API_KEY or ANTHROPIC_API_KEY" in err
    code, _, err = await _turns(
        env, "run", "--agent", "assistant", "--model", "openai/gpt-4.1", "x"
    )
    assert code == 1
    (line,) = err.strip().splitlines()
    assert "OPENAI_API_KEY, which is not set" in line
    code, _, err = await _turns(env, "run", "--model", "anthropic/claude-sonnet-4-5", "x")
    assert code == 1 and "ANTHROPIC_API_KEY, which is not set" in err
    assert not list(home.rglob("*.jsonl"))  # nothing was created


async def test_a_providers_table_overrides_the_environment(
    temporal_env: WorkflowEnvironment,
    provider: FakeProvider,  # noqa: F811
    tmp_path: Path,
) -> None:
    home = tmp_path / ".turns"
    home.mkdir()
    (home / "turns.toml").write_text(
        f'[providers.openai]\nkind = "openai-chat"\nbase_url = "{provider.base_url}"\n'
        'api_key_env = "MY_GATEWAY_KEY"\n'
    )
    env = _env(
        home,
        temporal_env,
        OPENAI_API_KEY="sk-not-this-one",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",  # nothing listens: the table wins
        MY_GATEWAY_KEY="gw-CANARY",
    )
    provider.queue(Reply(chunks=list(ChatWire().text())))
    code, out, err = await _turns(env, "run", "--model", "openai/gpt-4.1", "hi", "--json")
    assert code == 0, err
    (request,) = provider.received
    assert request.headers["authorization"] == "Bearer gw-CANARY"
    code, out, _ = await _turns(env, "config", "--json")
    assert json.loads(out)["providers"]["openai"]["origin"] == "turns.toml"


async def test_a_bad_base_url_in_the_environment_is_a_config_error_naming_it(
    tmp_path: Path, temporal_env: WorkflowEnvironment
) -> None:
    env = _env(tmp_path / ".turns", temporal_env, OPENAI_BASE_URL="not a url")
    code, _, err = await _turns(env, "config")
    assert code == 1
    (line,) = err.strip().splitlines()
    assert "OPENAI_BASE_URL" in line
