"""turns.toml + environment -> a live model; keys referenced, never persisted."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from turncore.errors import DependencyError
from turncore.events import ModelDescriptor
from turncore.messages import UserMessage
from turncore.model import (
    AnthropicModel,
    CancellationToken,
    ModelCallRequest,
    ModelRegistry,
    OpenAIChatModel,
    OpenAIResponsesModel,
    ProviderConfigError,
    RetryingModel,
    ScriptedModel,
    load_providers,
    parse_model_ref,
)

from .conftest import API_KEY, Collect, FakeProvider, Reply
from .wire import WIRES

TOML = """
[agents.default]
something = "owned by another part of the project"

[providers.openai]
kind = "openai-responses"
api_key_env = "OPENAI_API_KEY"

[providers.claude]
kind = "anthropic"
api_key_env = "ANTHROPIC_API_KEY"
max_output_tokens = 2048

[providers.local]
kind = "openai-chat"
base_url = "http://127.0.0.1:11434/v1/"
max_tokens_field = "max_tokens"
reasoning = false

[providers.demo]
kind = "scripted"
delay = 0.01
"""


def write(tmp_path: Path, text: str = TOML) -> Path:
    path = tmp_path / "turns.toml"
    path.write_text(text)
    return path


async def test_resolves_each_kind(tmp_path: Path) -> None:
    env = {"OPENAI_API_KEY": API_KEY, "ANTHROPIC_API_KEY": API_KEY}
    registry = ModelRegistry.from_file(write(tmp_path), env=env)
    try:
        openai = registry.resolve(parse_model_ref("openai/gpt-5"))
        claude = registry.resolve(ModelDescriptor(provider="claude", model="claude-sonnet-4-5"))
        local = registry.resolve(parse_model_ref("local/qwen3:8b"))
        # routing (retries, max_retries default 2) wraps each HTTP adapter
        for routed in (openai, claude, local):
            assert isinstance(routed, RetryingModel) and routed.policy.max_retries == 2
        assert isinstance(openai, RetryingModel) and isinstance(openai.inner, OpenAIResponsesModel)
        assert isinstance(claude, RetryingModel) and isinstance(claude.inner, AnthropicModel)
        assert isinstance(local, RetryingModel) and isinstance(local.inner, OpenAIChatModel)
        assert openai.binding.endpoint == "https://api.openai.com/v1"
        assert claude.binding.endpoint == "https://api.anthropic.com/v1"
        assert claude.binding.option("max_output_tokens") == 2048
        assert local.binding.endpoint == "http://127.0.0.1:11434/v1"
        assert local.binding.account == "anonymous" and local.binding.auth_ref is None
        assert not local.binding.capabilities.reasoning
        assert openai.binding.account == "OPENAI_API_KEY"
        for model in (openai, claude, local):
            assert API_KEY not in repr(model) and API_KEY not in repr(model.binding)
        assert parse_model_ref("local/library/qwen:7b").model == "library/qwen:7b"
    finally:
        await registry.aclose()


def test_clear_dependency_errors(tmp_path: Path) -> None:
    registry = ModelRegistry.from_file(write(tmp_path), env={})
    with pytest.raises(DependencyError, match="OPENAI_API_KEY"):
        registry.resolve(parse_model_ref("openai/gpt-5"))
    with pytest.raises(DependencyError, match="unknown model provider 'nope'"):
        registry.resolve(parse_model_ref("nope/x"))
    with pytest.raises(DependencyError, match="neither a registered function nor a script file"):
        registry.resolve(parse_model_ref("scripted/missing.json"))
    with pytest.raises(ProviderConfigError):
        parse_model_ref("no-slash")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('kind = "openai-chat"\napi_key = "sk-live-oops"', "never written to configuration"),
        ('kind = "grpc"', "unknown provider kind"),
        ('kind = "openai-chat"\nbase_url = "http://u:p@host/v1"', "credentials"),
        ('kind = "openai-chat"\ncolour = "blue"', "unknown settings"),
        ('kind = "anthropic"\napi_key_env = "not a name"', "environment variable name"),
        ('base_url = "http://h/v1"', "needs a kind"),
    ],
)
def test_bad_declarations(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ProviderConfigError, match=message) as info:
        load_providers(write(tmp_path, f"[providers.x]\n{table}\n"))
    assert "sk-live-oops" not in str(info.value)


async def test_scripted_provider_by_file_and_function(tmp_path: Path) -> None:
    (tmp_path / "hello.json").write_bytes(orjson.dumps({"responses": [{"text": "hi there"}]}))
    registry = ModelRegistry.from_file(write(tmp_path), env={})
    registry.register_function("echo", lambda request: {"text": "echo"})
    request = ModelCallRequest(model="hello.json", system="", messages=[UserMessage(content="x")])

    for ref in ("scripted/hello.json", "demo/hello.json"):
        model = registry.resolve(parse_model_ref(ref))
        assert isinstance(model, ScriptedModel)
        outcome = await model.turn(request, Collect(), CancellationToken())
        assert outcome.message().text() == "hi there"

    echo = registry.resolve(parse_model_ref("scripted/echo"))
    outcome = await echo.turn(
        ModelCallRequest(model="echo", system="", messages=[UserMessage(content="x")]),
        Collect(),
        CancellationToken(),
    )
    assert outcome.message().text() == "echo"


async def test_registry_end_to_end_against_a_local_server(
    tmp_path: Path, provider: FakeProvider
) -> None:
    toml = f'[providers.local]\nkind = "openai-chat"\nbase_url = "{provider.base_url}"\napi_key_env = "LOCAL_KEY"\n'
    made: list[httpx.AsyncClient] = []

    def factory(config: object) -> httpx.AsyncClient:
        client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(retries=0))
        made.append(client)
        return client

    registry = ModelRegistry.from_file(
        write(tmp_path, toml), env={"LOCAL_KEY": API_KEY}, client_factory=factory
    )
    provider.queue(Reply(chunks=list(WIRES["openai-chat"].text())))
    model = registry.resolve(parse_model_ref("local/llama3.2"))
    request = ModelCallRequest(model="llama3.2", system="", messages=[UserMessage(content="x")])
    outcome = await model.turn(request, Collect(), CancellationToken())
    assert outcome.message().text() == "Hello, world"
    assert provider.received[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert provider.received[0].path == "/v1/chat/completions"
    registry.resolve(parse_model_ref("local/other"))
    assert len(made) == 1  # one client per provider
    await registry.aclose()
    assert made[0].is_closed
