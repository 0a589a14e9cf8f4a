"""Resolve a persisted ``{provider, model}`` descriptor to a live Model.

Providers are declared in ``turns.toml``::

    [providers.openai]
    kind = "openai-responses"          # openai-chat | openai-responses | anthropic | scripted
    api_key_env = "OPENAI_API_KEY"     # the variable's NAME; keys are never persisted

    [providers.local]
    kind = "openai-chat"
    base_url = "http://127.0.0.1:11434/v1"

A turn selects ``model = "NAME/model-id"``. The key is read from the
environment when a model is resolved and lives only in request headers.

The name ``scripted`` is built in (no table needed): its model names a
function registered with :meth:`ModelRegistry.register_function`, or a JSON
script file (relative paths are taken from the registry's base directory).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from turncore.errors import DependencyError
from turncore.events import ModelDescriptor
from turncore.model.binding import Binding, Capabilities, normalise_endpoint

if TYPE_CHECKING:
    # Loaded where a model or a client is made: reading providers (config
    # checks, `turns show`, cost) needs neither httpx nor any adapter.
    import httpx

    from turncore.model._http import HttpModel
    from turncore.model.port import Limits, Model
    from turncore.model.routing import RetryPolicy
    from turncore.model.scripted import ScriptedModel, ScriptFunction

ProviderKind = Literal["openai-chat", "openai-responses", "anthropic", "scripted"]
SCRIPTED = "scripted"

DEFAULT_BASE_URLS: dict[str, str] = {
    "openai-chat": "https://api.openai.com/v1",
    "openai-responses": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com/v1",
}


def _adapter(kind: str) -> type[HttpModel]:
    match kind:
        case "openai-chat":
            from turncore.model.openai_chat import OpenAIChatModel

            return OpenAIChatModel
        case "openai-responses":
            from turncore.model.openai_responses import OpenAIResponsesModel

            return OpenAIResponsesModel
        case "anthropic":
            from turncore.model.anthropic import AnthropicModel

            return AnthropicModel
    raise ProviderConfigError(f"no HTTP adapter for provider kind {kind!r}")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_PROVIDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class ProviderConfigError(DependencyError):
    """A provider declaration is unusable, or a descriptor names nothing resolvable."""


@dataclass(frozen=True)
class ProviderConfig:
    kind: ProviderKind
    base_url: str | None = None
    """Defaults to the vendor's public endpoint for openai-* and anthropic."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key; None for keyless local servers."""
    account: str | None = None
    """Account label for binding opaque state; defaults to ``api_key_env``."""
    tools: bool = True
    reasoning: bool = True
    sampling: bool = True
    max_output_tokens: int | None = None
    """Anthropic: the ``max_tokens`` sent when a request leaves it absent (4096)."""
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] | None = None
    """Chat Completions: which field carries the output limit (servers differ)."""
    timeout: float = 600.0
    """Seconds the HTTP client waits for a read; the connect timeout is 10 s."""
    delay: float = 0.0
    """Scripted: seconds before each streamed delta."""
    max_retries: int = 2
    """Further attempts after a failure that provably did no work upstream
    (not-sent, or a rejected 429/503/529); see :mod:`turncore.model.routing`."""
    retry_backoff: float = 1.0
    """Seconds before the first retry when the provider sends no ``Retry-After``."""
    retry_max_wait: float = 60.0
    """The longest single wait; a longer ``Retry-After`` hint fails the call at once."""
    context_window: int | None = None
    """The context window in tokens of this provider's models, as declared: the default
    context budget of agents on them (before the price table's; ``turncore.budget``)."""

    def __post_init__(self) -> None:
        if self.kind not in get_args(ProviderKind):
            raise ProviderConfigError(
                f"unknown provider kind {self.kind!r}; expected one of "
                + ", ".join(get_args(ProviderKind))
            )
        if self.api_key_env is not None and not _ENV_NAME.fullmatch(self.api_key_env):
            raise ProviderConfigError("api_key_env must be an environment variable name")
        if self.base_url is not None:
            try:
                object.__setattr__(self, "base_url", normalise_endpoint(self.base_url))
            except ValueError as exc:
                raise ProviderConfigError(f"base_url: {exc}") from None
        if self.max_output_tokens is not None and self.max_output_tokens <= 0:
            raise ProviderConfigError("max_output_tokens must be positive")
        if self.context_window is not None and (
            isinstance(self.context_window, bool)
            or not isinstance(self.context_window, int)
            or self.context_window <= 0
        ):
            raise ProviderConfigError("context_window must be a positive number of tokens")
        if not self.timeout > 0 or self.delay < 0:
            raise ProviderConfigError("timeout must be positive and delay not negative")
        if (
            isinstance(self.max_retries, bool)
            or not isinstance(self.max_retries, int)
            or not 0 <= self.max_retries <= 10
        ):
            raise ProviderConfigError("max_retries must be an integer from 0 to 10")
        for name in ("retry_backoff", "retry_max_wait"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ProviderConfigError(f"{name} must be a number of seconds, not negative")

    def retry_policy(self) -> RetryPolicy:
        from turncore.model.routing import RetryPolicy

        return RetryPolicy(
            max_retries=self.max_retries,
            backoff=float(self.retry_backoff),
            max_wait=float(self.retry_max_wait),
        )

    @classmethod
    def from_table(cls, name: str, table: Mapping[str, Any]) -> ProviderConfig:
        if "api_key" in table:
            raise ProviderConfigError(
                f"provider {name!r}: API keys are never written to configuration; "
                "name the environment variable with api_key_env"
            )
        allowed = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - allowed)
        if unknown:
            raise ProviderConfigError(f"provider {name!r}: unknown settings {unknown}")
        if "kind" not in table:
            raise ProviderConfigError(f"provider {name!r} needs a kind")
        try:
            return cls(**dict(table))
        except TypeError:
            raise ProviderConfigError(f"provider {name!r}: a setting has the wrong type") from None


def load_providers(path: str | Path) -> dict[str, ProviderConfig]:
    """The ``[providers.NAME]`` tables of a ``turns.toml`` (a missing file has none)."""
    p = Path(path)
    if not p.exists():
        return {}
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        raise ProviderConfigError(f"{p} is not valid TOML") from None
    tables = data.get("providers", {})
    if not isinstance(tables, dict):
        raise ProviderConfigError(f"{p}: [providers] must be a table of tables")
    out: dict[str, ProviderConfig] = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ProviderConfigError(f"{p}: providers.{name} must be a table")
        out[name] = ProviderConfig.from_table(name, table)
    return out


def parse_model_ref(ref: str) -> ModelDescriptor:
    """``"NAME/model-id"`` (the model id may itself contain slashes)."""
    provider, sep, model = ref.partition("/")
    if not sep or not provider or not model:
        raise ProviderConfigError(f"a model reference is PROVIDER/MODEL; got {ref!r}")
    return ModelDescriptor(provider=provider, model=model)


def default_client(config: ProviderConfig) -> httpx.AsyncClient:
    """One attempt, one port: the transport never retries."""
    import httpx

    return httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(retries=0),
        timeout=httpx.Timeout(config.timeout, connect=10.0),
        follow_redirects=False,
    )


class ModelRegistry:
    def __init__(
        self,
        providers: Mapping[str, ProviderConfig] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        client_factory: Callable[[ProviderConfig], httpx.AsyncClient] = default_client,
        base_dir: str | Path = ".",
        functions: Mapping[str, ScriptFunction] | None = None,
        limits: Limits | None = None,
    ) -> None:
        from turncore.model.port import DEFAULT_LIMITS

        self._providers = dict(providers or {})
        for name in self._providers:
            if not _PROVIDER_NAME.fullmatch(name):
                raise ProviderConfigError(f"provider name {name!r} is not a plain identifier")
        self._env = env if env is not None else os.environ
        self._client_factory = client_factory
        self._clients: dict[str, httpx.AsyncClient] = {}
        self._base_dir = Path(base_dir)
        self._functions: dict[str, ScriptFunction] = dict(functions or {})
        self._limits = DEFAULT_LIMITS if limits is None else limits

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ModelRegistry:
        """A registry over ``turns.toml``; scripts resolve relative to its folder."""
        kwargs.setdefault("base_dir", Path(path).parent)
        return cls(load_providers(path), **kwargs)

    def register_function(self, name: str, fn: ScriptFunction) -> None:
        """Make ``scripted/NAME`` answer with ``fn``."""
        self._functions[name] = fn

    def providers(self) -> dict[str, ProviderConfig]:
        return dict(self._providers)

    def _config(self, descriptor: ModelDescriptor) -> ProviderConfig:
        config = self._providers.get(descriptor.provider)
        if config is None and descriptor.provider == SCRIPTED:
            return ProviderConfig(kind="scripted")
        if config is None:
            known = ", ".join(sorted({*self._providers, SCRIPTED}))
            raise ProviderConfigError(
                f"unknown model provider {descriptor.provider!r} (configured: {known})"
            )
        return config

    def binding(self, descriptor: ModelDescriptor) -> Binding:
        """The binding a descriptor selects (no environment read, no client)."""
        config = self._config(descriptor)
        if config.kind == "scripted":
            return self._scripted(descriptor, config).binding
        options: list[tuple[str, str | int | bool]] = []
        if config.max_output_tokens is not None:
            options.append(("max_output_tokens", config.max_output_tokens))
        if config.max_tokens_field is not None:
            options.append(("max_tokens_field", config.max_tokens_field))
        return Binding(
            protocol=cast(Any, config.kind),
            provider=descriptor.provider,
            endpoint=config.base_url or DEFAULT_BASE_URLS[config.kind],
            model=descriptor.model,
            auth_ref=config.api_key_env,
            account=config.account or "",
            capabilities=Capabilities(
                tools=config.tools, reasoning=config.reasoning, sampling=config.sampling
            ),
            options=tuple(options),
        )

    def resolve(self, descriptor: ModelDescriptor, *, require_key: bool = True) -> Model:
        """A Model for the descriptor; raises ProviderConfigError (a DependencyError).

        ``require_key=False`` gives a model without its credential when the key
        variable is unset — for showing requests (``turns inspect --wire``), never
        for calling the provider.
        """
        config = self._config(descriptor)
        if config.kind == "scripted":
            return self._scripted(descriptor, config)
        from turncore.model._http import Secret
        from turncore.model.routing import RetryingModel

        binding = self.binding(descriptor)
        key: Secret | None = None
        if config.api_key_env is not None:
            value = self._env.get(config.api_key_env)
            if value:
                key = Secret(value)
            elif require_key:
                raise ProviderConfigError(
                    f"provider {descriptor.provider!r} reads its API key from the environment "
                    f"variable {config.api_key_env}, which is not set"
                )
        client = self._clients.get(descriptor.provider)
        if client is None:
            client = self._client_factory(config)
            self._clients[descriptor.provider] = client
        adapter = _adapter(config.kind)(binding, client, key, limits=self._limits)
        if config.max_retries == 0:
            return adapter
        return RetryingModel(adapter, config.retry_policy())

    def _scripted(self, descriptor: ModelDescriptor, config: ProviderConfig) -> ScriptedModel:
        from turncore.model.scripted import ScriptedModel

        name = descriptor.model
        fn = self._functions.get(name)
        if fn is not None:
            return ScriptedModel(
                fn,
                model=name,
                provider=descriptor.provider,
                delay=config.delay,
                limits=self._limits,
            )
        path = Path(name)
        if not path.is_absolute():
            path = self._base_dir / path
        if not path.is_file():
            raise ProviderConfigError(
                f"scripted model {name!r} is neither a registered function nor a script file"
            )
        try:
            return ScriptedModel(
                path,
                model=name,
                provider=descriptor.provider,
                delay=config.delay,
                limits=self._limits,
            )
        except (OSError, ValueError):
            raise ProviderConfigError(
                f"scripted model {name!r}: the script file is unusable"
            ) from None

    async def aclose(self) -> None:
        """Close the HTTP clients this registry created."""
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.aclose()
