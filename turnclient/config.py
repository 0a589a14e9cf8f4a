"""``turns.toml``: agents, providers and tools, layered over built-in defaults.

The file lives in the work dir (``TURNS_HOME``, default ``./.turns``), or
wherever ``TURNS_CONFIG`` names; a missing file means the built-ins alone.
Relative paths in it are taken from the work dir. Every table is checked when the file is loaded: an unknown
key, a wrong type, an agent naming an unknown tool or provider is a
``ConfigError`` that names the key, so a typo never silently changes what
an agent can do.

Layering: built-in tools and agents come first; ``[tools.NAME]`` and
``[agents.NAME]`` with a built-in name override the given keys of that
built-in (for a built-in tool only ``description`` and ``permission``); any
other name adds a tool or an agent. See README "Configuration".
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

from turncore.context import ElisionPolicy
from turncore.errors import DependencyError
from turncore.model import ProviderConfig, ProviderConfigError, parse_model_ref

from .builtin_tools import BUILTIN_TOOLS
from .cost import PriceConfigError, ProviderPrice
from .demo import DEMO_MODEL

CONFIG_FILE = "turns.toml"
DEFAULT_WORK_DIR = ".turns"
DEFAULT_TASK_QUEUE = "turns"
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
EFFORTS = ("low", "medium", "high")


class ConfigError(DependencyError):
    """``turns.toml`` is unusable; the message names the key."""


@dataclass(frozen=True)
class ToolConfig:
    name: str
    execution: Literal["sync", "async"]
    description: str
    input_schema: Any
    permission: Literal["none", "ask"]
    requires_human: bool = False
    callable: str | None = None
    """``module:function`` of a sync user tool."""
    builtin: bool = False

    @property
    def tool_id(self) -> str:
        """The stable registry identity snapshotted in each turn (§6.3)."""
        if self.builtin:
            return f"builtin:{self.name}"
        return f"user:{self.name}" if self.execution == "sync" else f"external:{self.name}"


@dataclass(frozen=True)
class AgentConfig:
    name: str
    system_prompt: str
    tools: tuple[str, ...] = ()
    model: str | None = None
    """``provider/model``; None means the configured ``default_model``."""
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    description: str = ""


DEMO_PROMPT = (
    "You are the turncore demo agent. You answer by calling exactly one tool and "
    "then quoting its result."
)
ASSISTANT_PROMPT = (
    "You are a helpful assistant working in a sandboxed workspace directory. Use the tools "
    "when they help; file paths are relative to the workspace. Answer concisely."
)

BUILTIN_AGENTS: dict[str, AgentConfig] = {
    "demo": AgentConfig(
        name="demo",
        system_prompt=DEMO_PROMPT,
        tools=tuple(BUILTIN_TOOLS),
        model=f"scripted/{DEMO_MODEL}",
        description="the built-in demo: a scripted model that makes real tool calls, no key needed",
    ),
    "assistant": AgentConfig(
        name="assistant",
        system_prompt=ASSISTANT_PROMPT,
        tools=tuple(BUILTIN_TOOLS),
        description="a general assistant on default_model (or --model) with the built-in tools",
    ),
}


@dataclass(frozen=True)
class Config:
    work_dir: Path
    source: Path | None
    """The ``turns.toml`` that was read, if there was one."""
    default_agent: str = "demo"
    default_model: str | None = None
    task_queue: str = DEFAULT_TASK_QUEUE
    workspace: Path = Path()
    agents: dict[str, AgentConfig] = field(default_factory=dict)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    tools: dict[str, ToolConfig] = field(default_factory=dict)
    auto_allow: tuple[str, ...] = ()
    auto_deny: tuple[str, ...] = ()
    context: ElisionPolicy = field(default_factory=ElisionPolicy)
    storage: StorageConfig = field(default_factory=lambda: StorageConfig())
    payload_key_env: str | None = None
    """``[temporal] payload_key_env``: the variable holding the payload keys (off if None)."""
    prices: dict[str, ProviderPrice] = field(default_factory=dict)
    """``[prices.PROVIDER]``: cost overrides for private or local models."""


def builtin_tool_configs() -> dict[str, ToolConfig]:
    return {
        name: ToolConfig(
            name=name,
            execution=t.execution,
            description=t.description,
            input_schema=t.input_schema,
            permission=t.permission,
            requires_human=t.requires_human,
            builtin=True,
        )
        for name, t in BUILTIN_TOOLS.items()
    }


def work_dir_from_env(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path:
    """``TURNS_HOME``; else the nearest ``.turns/`` upward from the current directory, as git
    finds ``.git``; else ``./.turns`` (absolute), which the first command that writes creates.

    So a command run in a subdirectory of a project uses the project's turns and
    its Temporal database instead of silently starting a second, empty one.
    """
    env = os.environ if env is None else env
    if env.get("TURNS_HOME"):
        return Path(env["TURNS_HOME"]).absolute()
    here = (cwd or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        candidate = folder / DEFAULT_WORK_DIR
        if candidate.is_dir():
            return candidate
    return here / DEFAULT_WORK_DIR


# ---------------------------------------------------------------- checking


def _check_keys(where: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
            f"(known: {', '.join(sorted(allowed))})"
        )


def _get(where: str, table: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{where}.{key} must be a {names.replace('str', 'string')}")
    return value


def _table(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table")
    return value


def _model_ref(where: str, ref: str, providers: Mapping[str, ProviderConfig]) -> str:
    try:
        descriptor = parse_model_ref(ref)
    except ProviderConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if descriptor.provider != "scripted" and descriptor.provider not in providers:
        known = ", ".join(sorted({*providers, "scripted"}))
        raise ConfigError(
            f"{where}: provider {descriptor.provider!r} is not configured "
            f"(add [providers.{descriptor.provider}]; configured: {known})"
        )
    return ref


def _tool(name: str, table: dict[str, Any], base: ToolConfig | None) -> ToolConfig:
    where = f"tools.{name}"
    if not TOOL_NAME.fullmatch(name):
        raise ConfigError(f"{where}: a tool name is 1-64 letters, digits, '_' or '-'")
    permission = _get(where, table, "permission", str)
    if permission is not None and permission not in ("none", "ask"):
        raise ConfigError(f'{where}.permission must be "none" or "ask"')
    description = _get(where, table, "description", str)
    if base is not None:
        if set(table) - {"description", "permission"}:
            raise ConfigError(
                f"{where}: {name} is a built-in tool; only its description and permission "
                "can be changed"
            )
        return replace(
            base,
            description=description if description is not None else base.description,
            permission=permission or base.permission,
        )
    _check_keys(
        where,
        table,
        {"execution", "description", "input_schema", "permission", "requires_human", "callable"},
    )
    execution = _get(where, table, "execution", str)
    if execution not in ("sync", "async"):
        raise ConfigError(f'{where}.execution must be "sync" or "async"')
    target = _get(where, table, "callable", str)
    if execution == "sync" and (target is None or ":" not in target):
        raise ConfigError(f'{where}: a sync tool needs callable = "module:function"')
    if execution == "async" and target is not None:
        raise ConfigError(
            f"{where}: an async tool has no callable; its result arrives with `turns complete`"
        )
    schema = table.get("input_schema", {"type": "object"})
    if not isinstance(schema, dict):
        raise ConfigError(f"{where}.input_schema must be a table (a JSON Schema object)")
    return ToolConfig(
        name=name,
        execution=cast(Literal["sync", "async"], execution),
        description=description or "",
        input_schema=schema,
        permission=cast(Literal["none", "ask"], permission or "ask"),  # fail closed
        requires_human=bool(_get(where, table, "requires_human", bool)),
        callable=target,
    )


def _agent(
    name: str,
    table: dict[str, Any],
    base: AgentConfig | None,
    tools: Mapping[str, ToolConfig],
    providers: Mapping[str, ProviderConfig],
) -> AgentConfig:
    where = f"agents.{name}"
    _check_keys(
        where, table, {"system_prompt", "model", "tools", "reasoning_effort", "description"}
    )
    prompt = _get(where, table, "system_prompt", str)
    if prompt is None and base is None:
        raise ConfigError(f"{where} needs a system_prompt")
    listed = _get(where, table, "tools", list)
    if listed is not None:
        for t in listed:
            if not isinstance(t, str):
                raise ConfigError(f"{where}.tools must be a list of tool names")
            if t not in tools and t != "spawn_agent":  # the workflow-native sub-agent tool
                raise ConfigError(
                    f"{where}.tools: unknown tool {t!r} "
                    f"(known: {', '.join(sorted([*tools, 'spawn_agent']))})"
                )
        if len(set(listed)) != len(listed):
            raise ConfigError(f"{where}.tools lists a tool twice")
    model = _get(where, table, "model", str)
    if model is not None:
        _model_ref(f"{where}.model", model, providers)
    effort = _get(where, table, "reasoning_effort", str)
    if effort is not None and effort not in EFFORTS:
        raise ConfigError(f"{where}.reasoning_effort must be one of {', '.join(EFFORTS)}")
    start = base or AgentConfig(name=name, system_prompt="")
    return replace(
        start,
        system_prompt=prompt if prompt is not None else start.system_prompt,
        tools=tuple(listed) if listed is not None else start.tools,
        model=model if model is not None else start.model,
        reasoning_effort=cast(Any, effort) if effort is not None else start.reasoning_effort,
        description=_get(where, table, "description", str) or start.description,
    )


# ---------------------------------------------------------------- loading


def load_config(work_dir: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """The configuration of a work dir: built-ins, then ``turns.toml`` over them."""
    env = os.environ if env is None else env
    root = Path(work_dir).absolute()
    path = Path(env["TURNS_CONFIG"]).absolute() if env.get("TURNS_CONFIG") else root / CONFIG_FILE
    data: dict[str, Any] = {}
    source: Path | None = None
    if env.get("TURNS_CONFIG") and not path.is_file():
        raise ConfigError(f"TURNS_CONFIG names {path}, which is not a file")
    if path.exists():
        source = path
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path} cannot be read: {exc}") from None
    try:
        return _build(root, source, data, env)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _build(root: Path, source: Path | None, data: dict[str, Any], env: Mapping[str, str]) -> Config:
    _check_keys(
        "turns.toml",
        data,
        {
            "default_agent",
            "default_model",
            "task_queue",
            "workspace",
            "agents",
            "providers",
            "tools",
            "permissions",
            "context",
            "storage",
            "temporal",
            "prices",
        },
    )
    providers: dict[str, ProviderConfig] = {}
    for name, table in _table("providers", data.get("providers", {})).items():
        try:
            providers[name] = ProviderConfig.from_table(name, _table(f"providers.{name}", table))
        except ProviderConfigError as exc:
            raise ConfigError(str(exc)) from None

    tools = builtin_tool_configs()
    for name, table in _table("tools", data.get("tools", {})).items():
        tools[name] = _tool(name, _table(f"tools.{name}", table), tools.get(name))

    agents = dict(BUILTIN_AGENTS)
    for name, table in _table("agents", data.get("agents", {})).items():
        agents[name] = _agent(
            name, _table(f"agents.{name}", table), agents.get(name), tools, providers
        )

    top = data
    default_model = _get("turns.toml", top, "default_model", str)
    if default_model is not None:
        _model_ref("default_model", default_model, providers)
    default_agent = _get("turns.toml", top, "default_agent", str) or "demo"
    if default_agent not in agents:
        raise ConfigError(
            f"default_agent {default_agent!r} is not an agent (known: {', '.join(sorted(agents))})"
        )
    workspace = Path(_get("turns.toml", top, "workspace", str) or "workspace")
    task_queue = env.get("TURNS_TASK_QUEUE") or _get("turns.toml", top, "task_queue", str)

    permissions = _table("permissions", data.get("permissions", {}))
    _check_keys("permissions", permissions, {"allow", "deny"})
    rules: dict[str, tuple[str, ...]] = {}
    for key in ("allow", "deny"):
        names = _get("permissions", permissions, key, list) or []
        for n in names:
            if n not in tools:
                raise ConfigError(f"permissions.{key}: unknown tool {n!r}")
        rules[key] = tuple(names)

    try:
        context = ElisionPolicy.model_validate(_table("context", data.get("context", {})))
    except ValueError as exc:
        raise ConfigError(f"context: {exc}") from None

    payload_key_env, prices = _observability(data, providers)
    return Config(
        work_dir=root,
        source=source,
        default_agent=default_agent,
        default_model=default_model,
        task_queue=task_queue or DEFAULT_TASK_QUEUE,
        workspace=workspace if workspace.is_absolute() else root / workspace,
        agents=agents,
        providers=providers,
        tools=tools,
        auto_allow=rules["allow"],
        auto_deny=rules["deny"],
        context=context,
        storage=parse_storage(data.get("storage", {})),
        payload_key_env=payload_key_env,
        prices=prices,
    )


# ---------------------------------------------------------------- [storage]
# Where turn logs live (docs/operations.md, "Choosing turn storage"). Kept in
# one block: the URL itself is never in the file, only the variable's name.

DEFAULT_DATABASE_URL_ENV = "TURNS_DATABASE_URL"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class StorageConfig:
    """``[storage]``: ``kind`` ``file`` (the default) or ``postgres``."""

    kind: Literal["file", "postgres"] = "file"
    url_env: str = DEFAULT_DATABASE_URL_ENV
    """The environment variable holding the database URL (kind = "postgres")."""
    pool_size: int = 16
    """Connections each process may open to the database."""


def parse_storage(value: Any) -> StorageConfig:
    table = _table("storage", value)
    _check_keys("storage", table, {"kind", "url_env", "pool_size"})
    kind = _get("storage", table, "kind", str) or "file"
    if kind not in ("file", "postgres"):
        raise ConfigError('storage.kind must be "file" or "postgres"')
    url_env = _get("storage", table, "url_env", str) or DEFAULT_DATABASE_URL_ENV
    if not ENV_NAME.fullmatch(url_env):
        raise ConfigError(
            "storage.url_env names an environment variable (letters, digits, '_'), "
            "not the URL itself: put the URL in that variable"
        )
    if kind == "file" and "url_env" in table:
        raise ConfigError('storage.url_env applies only to kind = "postgres"')
    pool_size = _get("storage", table, "pool_size", int)
    if pool_size is not None and not 1 <= pool_size <= 1000:
        raise ConfigError("storage.pool_size must be between 1 and 1000")
    return StorageConfig(
        kind=cast(Literal["file", "postgres"], kind),
        url_env=url_env,
        pool_size=pool_size or 16,
    )


# ---------------------------------------------------------------- [temporal], [prices]


def _observability(
    data: Mapping[str, Any], providers: Mapping[str, ProviderConfig]
) -> tuple[str | None, dict[str, ProviderPrice]]:
    """``[temporal] payload_key_env`` and ``[prices.PROVIDER]`` (docs/operations.md)."""
    temporal = _table("temporal", data.get("temporal", {}))
    _check_keys("temporal", temporal, {"payload_key_env"})
    key_env = _get("temporal", temporal, "payload_key_env", str)
    if key_env is not None and not ENV_NAME.fullmatch(key_env):
        raise ConfigError(
            "temporal.payload_key_env names an environment variable (letters, digits, '_'); "
            "the key itself never goes in turns.toml"
        )
    prices: dict[str, ProviderPrice] = {}
    for name, table in _table("prices", data.get("prices", {})).items():
        if name != "scripted" and name not in providers:
            known = ", ".join(sorted({*providers, "scripted"}))
            raise ConfigError(f"prices.{name}: no provider {name!r} is configured (known: {known})")
        try:
            prices[name] = ProviderPrice.from_table(
                f"prices.{name}", _table(f"prices.{name}", table)
            )
        except PriceConfigError as exc:
            raise ConfigError(str(exc)) from None
    return key_env, prices


__all__ = [
    "BUILTIN_AGENTS",
    "CONFIG_FILE",
    "AgentConfig",
    "Config",
    "ConfigError",
    "StorageConfig",
    "ToolConfig",
    "builtin_tool_configs",
    "load_config",
    "parse_storage",
    "work_dir_from_env",
]
