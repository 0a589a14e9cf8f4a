"""``turns.toml``: agents, providers and tools, layered over built-in defaults.

The file lives in the work dir (``TURNS_HOME``, default ``./.turns``), or
wherever ``TURNS_CONFIG`` names; a missing file means the built-ins alone.
Relative paths in it are taken from the work dir.

The file is validated by pydantic models, one per table (``TurnsFile``,
``AgentTable``, ``ToolTable``, ``PermissionsTable``; ``[context]`` is the
``ElisionPolicy`` itself), each forbidding unknown keys, and one validator
for what crosses tables (an agent naming an unknown tool or provider, a
default agent that is not an agent...). Every problem is a ``ConfigError``
naming the key path (``agents.coder.tools: unknown tool 'bash'``), so a typo
never silently changes what an agent can do. To add a section, add a table
model and a field of ``TurnsFile``.

Layering: built-in tools and agents come first; ``[tools.NAME]`` and
``[agents.NAME]`` with a built-in name override the given keys of that
built-in (for a built-in tool only ``description`` and ``permission``); any
other name adds a tool or an agent. A sync tool is ``callable =
"module:function"``: its input schema is inferred from the function's
signature (``turncore.tools.tool``); an ``input_schema`` given next to it
must agree with the inferred one. See README "Configuration".
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    PydanticUserError,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from turnclient.builtins.demo import DEMO_MODEL
from turnclient.builtins.tools import BUILTIN_NAMES, builtin_tools
from turnclient.lib.cost import PriceConfigError, ProviderPrice
from turnclient.runtime.errors import ConfigError
from turnclient.runtime.notify import NotifyTable
from turncore.budget import check_budget
from turncore.context import ElisionPolicy
from turncore.model import ProviderConfig, ProviderConfigError, parse_model_ref
from turncore.output import (
    DEFAULT_OUTPUT_RETRIES,
    OutputSchemaError,
    OutputSpec,
    check_retries,
    check_schema,
)
from turncore.tools import (
    TOOL_NAME,
    Tool,
    ToolDeclarationError,
    fast_problem,
    schema_disagreement,
    tool,
)

if TYPE_CHECKING:  # a type only: reading a config loads no model adapter
    from turncore.model.scripted import ScriptFunction

CONFIG_FILE = "turns.toml"
DEFAULT_WORK_DIR = ".turns"
DEFAULT_TASK_QUEUE = "turns"
SPAWN_AGENT = "spawn_agent"
"""The workflow-native sub-agent tool any agent may list."""
EFFORTS = ("low", "medium", "high")
Effort = Literal["low", "medium", "high"]


def output_type_schema(output_type: Any, where: str) -> dict[str, Any]:
    """The JSON Schema of ``output_type`` (pydantic's), or a ``ConfigError`` naming ``where``."""
    try:
        schema = TypeAdapter(output_type).json_schema()
    except PydanticUserError as exc:
        raise ConfigError(
            f"{where}: {output_type!r} cannot produce a JSON Schema ({exc.message}); give a "
            "pydantic model, a dataclass or a TypedDict whose fields pydantic can describe"
        ) from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"{where}: {output_type!r} cannot produce a JSON Schema ({exc}); give a "
            "pydantic model, a dataclass or a TypedDict"
        ) from None
    return schema


def object_schema(schema: object, where: str) -> dict[str, Any]:
    """``schema`` if it is a JSON Schema that describes a JSON object (every provider's
    structured output takes one); else ``OutputSchemaError`` naming ``where``."""
    checked = check_schema(dict(schema) if isinstance(schema, Mapping) else schema, where)
    if checked.get("type") != "object":
        raise OutputSchemaError(
            f'{where} must describe a JSON object (type = "object" at the top), as a '
            "pydantic model, a dataclass or a TypedDict does"
        )
    return checked


@dataclass(frozen=True)
class SummariseDropped:
    """``[agents.NAME] summarise_dropped = {model = ..., prompt = ...}``."""

    model: str | None = None
    """``provider/model`` of the summariser; None: the agent's own model."""
    prompt: str | None = None
    """The summariser's system prompt; None: ``turncore.budget.SUMMARY_PROMPT``."""
    max_tokens: int | None = None
    """Tokens kept free for the summary (and its call's output limit); None: a quarter
    of the budget, at most 2,048."""


@dataclass(frozen=True)
class Agent:
    """An agent: the same whether it comes from ``[agents.NAME]`` or from Python.

    ``tools`` are tool names (built-ins, ``[tools.*]``, ``spawn_agent``) or
    ``Tool`` objects, which a runtime then registers under their names.
    """

    name: str
    system_prompt: str
    tools: tuple[str | Tool, ...] = ()
    model: str | Sequence[str] | None = None
    """``provider/model``, or a list of them: the first, then each next one when the one
    before fails with a transient or unavailable error; None: the ``default_model``."""
    reasoning_effort: Effort | None = None
    description: str = ""
    context_tokens: int | None = None
    """The context budget in tokens (``turncore.budget``); None: the model's known
    context window, where the price table knows it, or no budget."""
    mcp: tuple[str | McpServer, ...] = ()
    """MCP servers whose tools the agent gets, listed when a turn is created: names of
    ``[mcp.NAME]`` tables, or ``McpServer`` objects, which a runtime adds under their names."""
    output_type: Any = None
    """Structured output (``turncore.output``): a pydantic model, a dataclass or a
    TypedDict the final answer must be; its JSON Schema becomes ``output_schema``, and
    ``TurnResult.output`` is an instance of it."""
    output_schema: Mapping[str, Any] | None = field(default=None, hash=False)
    """Structured output as a JSON Schema object (``output_schema`` in ``[agents.NAME]``);
    derived from ``output_type`` when that is given."""
    output_retries: int = DEFAULT_OUTPUT_RETRIES
    """How often an invalid final answer is sent back with its validation errors before
    the turn fails with ``output-invalid``."""
    summarise_dropped: bool | SummariseDropped = False
    """Summarise what the context budget drops, by a recorded model call of its own
    (``turncore.budget``): True (the agent's model, the default prompt), or a
    ``SummariseDropped`` naming the summariser's model and prompt."""

    def __post_init__(self) -> None:
        where = f"agents.{self.name}"
        if self.output_type is not None:
            schema = output_type_schema(self.output_type, f"{where}.output_type")
            if self.output_schema is not None and dict(self.output_schema) != schema:
                raise ConfigError(
                    f"{where}: give output_type or output_schema, not both "
                    "(output_type's JSON Schema is the output schema)"
                )
            object.__setattr__(self, "output_schema", schema)
        try:
            if self.output_schema is not None:
                object.__setattr__(
                    self,
                    "output_schema",
                    object_schema(self.output_schema, f"{where}.output_schema"),
                )
            check_retries(self.output_retries, f"{where}.output_retries")
        except OutputSchemaError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def output(self) -> OutputSpec | None:
        """What the agent's final answer must be; None: free text."""
        if self.output_schema is None:
            return None
        return OutputSpec(schema=dict(self.output_schema), retries=self.output_retries)

    @property
    def summariser(self) -> SummariseDropped | None:
        """The summariser of dropped messages, or None when the agent drops them plainly."""
        if self.summarise_dropped is True:
            return SummariseDropped()
        if isinstance(self.summarise_dropped, SummariseDropped):
            return self.summarise_dropped
        return None

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(t if isinstance(t, str) else t.name for t in self.tools)

    @property
    def models(self) -> tuple[str, ...]:
        """The model, then its fallbacks (empty: the default model)."""
        if self.model is None:
            return ()
        return (self.model,) if isinstance(self.model, str) else tuple(self.model)

    @property
    def mcp_names(self) -> tuple[str, ...]:
        return tuple(m if isinstance(m, str) else m.name for m in self.mcp)


AgentConfig = Agent
"""The name the configuration has always used for an agent."""


DEMO_PROMPT = (
    "You are the turncore demo agent. You answer by calling exactly one tool and "
    "then quoting its result."
)
ASSISTANT_PROMPT = (
    "You are a helpful assistant working in a sandboxed workspace directory. Use the tools "
    "when they help; file paths are relative to the workspace. Answer concisely."
)

BUILTIN_AGENTS: dict[str, Agent] = {
    "demo": Agent(
        name="demo",
        system_prompt=DEMO_PROMPT,
        tools=BUILTIN_NAMES,
        model=f"scripted/{DEMO_MODEL}",
        description="the built-in demo: a scripted model that makes real tool calls, no key needed",
    ),
    "assistant": Agent(
        name="assistant",
        system_prompt=ASSISTANT_PROMPT,
        tools=BUILTIN_NAMES,
        description="a general assistant on default_model (or --model) with the built-in tools",
    ),
}


VERSIONING_BEHAVIORS = ("auto-upgrade", "pinned")


@dataclass(frozen=True)
class WorkerVersioning:
    """Temporal worker deployment versioning for the turn workflow's workers."""

    deployment_name: str
    build_id: str
    behavior: str = "auto-upgrade"
    """``auto-upgrade`` or ``pinned`` (``[temporal] versioning``)."""


def worker_versioning(file: TemporalTable, env: Mapping[str, str]) -> WorkerVersioning | None:
    """``[temporal] deployment_name``/``build_id``/``versioning``, each overridden by
    ``TURNS_DEPLOYMENT_NAME``/``TURNS_BUILD_ID``/``TURNS_VERSIONING``; None when
    neither a name nor a build id is set (unversioned workers)."""
    name = env.get("TURNS_DEPLOYMENT_NAME") or file.deployment_name
    build = env.get("TURNS_BUILD_ID") or file.build_id
    behavior = env.get("TURNS_VERSIONING") or file.versioning
    if behavior not in VERSIONING_BEHAVIORS:
        raise ConfigError(
            f"versioning is {behavior!r}; it is one of {', '.join(VERSIONING_BEHAVIORS)}"
        )
    if name is None and build is None:
        return None
    if not name or not build:
        missing = (
            "deployment_name (TURNS_DEPLOYMENT_NAME)" if not name else "build_id (TURNS_BUILD_ID)"
        )
        raise ConfigError(
            f"worker versioning needs both a deployment name and a build id; {missing} is not set"
        )
    return WorkerVersioning(deployment_name=name, build_id=build, behavior=behavior)


@dataclass(frozen=True)
class Config:
    work_dir: Path
    source: Path | None
    """The ``turns.toml`` that was read, if there was one."""
    default_agent: str = "demo"
    default_model: str | None = None
    task_queue: str = DEFAULT_TASK_QUEUE
    workspace: Path = Path()
    agents: dict[str, Agent] = field(default_factory=dict)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)
    auto_allow: tuple[str, ...] = ()
    auto_deny: tuple[str, ...] = ()
    context: ElisionPolicy = field(default_factory=ElisionPolicy)
    storage: StorageConfig = field(default_factory=lambda: StorageConfig())
    max_concurrent_subagents: int | None = None
    """``[subagents] max_concurrent``; None: the workflow's default."""
    payload_key_env: str | None = None
    """``[temporal] payload_key_env``: the variable holding the payload keys (off if None)."""
    prices: dict[str, ProviderPrice] = field(default_factory=dict)
    """``[prices.PROVIDER]``: cost overrides for private or local models."""
    notify: NotifyTable | None = None
    """``[notify]``: webhooks a worker sends when a turn waits for a person (or ends)."""
    app: str | None = None
    """The app loaded (``MODULE:ATTR`` from ``--app``, ``TURNS_APP`` or ``app =``), if any."""
    models: Mapping[str, ScriptFunction] = field(default_factory=dict)
    """Python functions served as ``scripted/NAME`` (an app's or ``Turns(models=…)``)."""
    origins: Mapping[str, str] = field(default_factory=dict)
    """Where each agent, tool and Python model came from, by key path (``agents.NAME``,
    ``tools.NAME``, ``models.scripted/NAME``): ``built-in``, ``turns.toml``, ``app
    MODULE:ATTR`` or ``Python``."""
    versioning: WorkerVersioning | None = None
    """Worker deployment versioning (``[temporal]``); None: unversioned workers."""
    rebuild_stuck_after: int | None = None
    """``[temporal] rebuild_stuck_after`` / ``TURNS_REBUILD_STUCK_AFTER``: the self-heal."""
    mcp: dict[str, McpServer] = field(default_factory=dict)
    """``[mcp.NAME]``: MCP servers agents attach with ``mcp = [...]``."""


@dataclass(frozen=True)
class McpServer:
    """``[mcp.NAME]``: an MCP server, over stdio (``command``) or streamable HTTP (``url``)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    """Names of environment variables passed to the stdio server (besides a safe default set)."""
    cwd: Path | None = None
    url: str | None = None
    headers_env: Mapping[str, str] = field(default_factory=dict)
    """HTTP header name to the environment variable holding its value."""
    timeout: float = 60.0
    """Seconds one call may take before it is an error result."""
    permission: Literal["ask", "none"] = "ask"
    allow: tuple[str, ...] = ()
    """Tools (server names) that need no permission."""
    deny: tuple[str, ...] = ()
    """Tools (server names) never advertised."""
    prefix: str | None = None
    """Advertise ``PREFIX_TOOL`` instead of ``TOOL``."""

    @property
    def where(self) -> str:
        """How the server is reached, for messages (no header values, no env values)."""
        if self.command is not None:
            return "stdio: " + " ".join([self.command, *self.args])
        return str(self.url)


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


# ---------------------------------------------------------------- the file's shape


class _Table(BaseModel):
    """A TOML table: strict types, and an unknown key named with the keys that exist."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    # Unknown keys are pydantic's extra_forbidden errors, one per key, reported
    # with every other problem in the file (``_describe_all`` names the known ones).


class ToolTable(_Table):
    """``[tools.NAME]``."""

    execution: Literal["sync", "async"] | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    permission: Literal["none", "ask"] | None = None
    requires_human: bool | None = None
    callable: str | None = None
    """``module:function`` of a sync tool (a typed function or a ``Tool``)."""
    fast: bool | None = None
    """A sync tool that finishes within ``fast_timeout``: it runs as a local activity."""
    fast_timeout: float | None = None
    """Seconds a fast tool may run (default 10, at most 30)."""


class SummariseTable(_Table):
    """``[agents.NAME.summarise_dropped]``."""

    model: str | None = None
    prompt: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)


class AgentTable(_Table):
    """``[agents.NAME]``."""

    system_prompt: str | None = None
    model: str | list[str] | None = None
    """``provider/model``, or a fallback list of them (tried in order)."""
    tools: list[str] | None = None
    reasoning_effort: Effort | None = None
    description: str | None = None
    context_tokens: int | None = Field(default=None, ge=1)
    mcp: list[str] | None = None
    output_schema: dict[str, Any] | None = None
    """Structured output: the JSON Schema object the final answer must match."""
    output_retries: int | None = Field(default=None, ge=0)
    summarise_dropped: bool | SummariseTable | None = None

    @field_validator("model")
    @classmethod
    def _a_list_names_models_once(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list):
            if not value:
                raise ValueError("an empty list names no model: give one or more PROVIDER/MODEL")
            if len(set(value)) != len(value):
                raise ValueError("a fallback list names a model twice")
        return value


class McpTable(_Table):
    """``[mcp.NAME]``."""

    command: str | None = None
    args: list[str] = []
    env: list[str] = []
    cwd: str | None = None
    url: str | None = None
    headers_env: dict[str, str] = {}
    timeout: Annotated[float, Field(gt=0, le=3600)] | Annotated[int, Field(gt=0, le=3600)] = 60
    permission: Literal["ask", "none"] = "ask"
    allow: list[str] = []
    deny: list[str] = []
    prefix: str | None = None

    @model_validator(mode="after")
    def _rules(self) -> McpTable:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "give either command (a stdio server) or url (a streamable HTTP server), "
                f"{'not both' if self.command is not None else 'one of them'}"
            )
        if self.url is not None:
            if not re.match(r"https?://[^/\s]+", self.url):
                raise ValueError("url must be an http:// or https:// URL")
            for key in ("args", "env", "cwd"):
                if getattr(self, key):
                    raise ValueError(f"{key} applies only to a stdio server (command)")
        elif self.headers_env:
            raise ValueError("headers_env applies only to an HTTP server (url)")
        if self.command is not None and not self.command.strip():
            raise ValueError("command must not be empty")
        for name in self.env:
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"env: {name!r} is not a variable name (letters, digits, '_')")
        for header, variable in self.headers_env.items():
            if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", header):
                raise ValueError(f"headers_env: {header!r} is not an HTTP header name")
            if not ENV_NAME.fullmatch(variable):
                # Never repeat the value: it may be the secret itself.
                raise ValueError(
                    f"headers_env.{header} names an environment variable (letters, digits, "
                    "'_'), not the header's value: put the value in that variable"
                )
        if self.prefix is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", self.prefix):
            raise ValueError("prefix is 1-32 letters, digits, '_' or '-'")
        both = sorted(set(self.allow) & set(self.deny))
        if both:
            raise ValueError(f"{', '.join(both)} is both allowed and denied")
        return self

    def server(self, name: str, root: Path) -> McpServer:
        cwd = None
        if self.cwd is not None:
            cwd = Path(self.cwd) if Path(self.cwd).is_absolute() else root / self.cwd
        return McpServer(
            name=name,
            command=self.command,
            args=tuple(self.args),
            env=tuple(self.env),
            cwd=cwd,
            url=self.url,
            headers_env=dict(self.headers_env),
            timeout=float(self.timeout),
            permission=self.permission,
            allow=tuple(self.allow),
            deny=tuple(self.deny),
            prefix=self.prefix,
        )


MCP_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class PermissionsTable(_Table):
    """``[permissions]``: what ``--auto-permission`` allows or denies by tool name."""

    allow: list[str] = []
    deny: list[str] = []


# Where turn logs live (docs/operations.md, "Choosing turn storage"): the URL
# itself is never in the file, only the name of the variable that holds it.
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


class StorageTable(_Table):
    """``[storage]``."""

    kind: Literal["file", "postgres"] = "file"
    url_env: str | None = None
    pool_size: int | None = None

    @model_validator(mode="after")
    def _rules(self) -> StorageTable:
        if self.url_env is not None:
            if not ENV_NAME.fullmatch(self.url_env):
                # Never repeat the value: it may be the URL, password included.
                raise ValueError(
                    "url_env names an environment variable (letters, digits, '_'), "
                    "not the URL itself: put the URL in that variable"
                )
            if self.kind == "file":
                raise ValueError('url_env applies only to kind = "postgres"')
        if self.pool_size is not None and not 1 <= self.pool_size <= 1000:
            raise ValueError("pool_size must be between 1 and 1000")
        return self

    def config(self) -> StorageConfig:
        return StorageConfig(
            kind=self.kind,
            url_env=self.url_env or DEFAULT_DATABASE_URL_ENV,
            pool_size=self.pool_size or 16,
        )


def parse_storage(value: Any) -> StorageConfig:
    """A ``[storage]`` table on its own (as ``turns.toml`` would hold it)."""
    try:
        return StorageTable.model_validate(value, strict=True).config()
    except ValidationError as exc:
        raise ConfigError(
            "; ".join(_describe_all(exc.errors(include_url=False), StorageTable, "storage"))
        ) from None


class SubagentsTable(_Table):
    """``[subagents]``: how ``spawn_agent`` children run."""

    max_concurrent: Annotated[int, Field(ge=1)] | None = None
    """Children of one turn running at once (None: the workflow's default, 8)."""


class TemporalTable(_Table):
    """``[temporal]``: how this process talks to Temporal."""

    payload_key_env: str | None = None
    """The environment variable holding the payload encryption keys (off if None)."""
    deployment_name: str | None = None
    """Worker deployment versioning: the deployment's name (with ``build_id``; off if None)."""
    build_id: str | None = None
    """Worker deployment versioning: this code's build id (with ``deployment_name``)."""
    versioning: Literal["auto-upgrade", "pinned"] = "auto-upgrade"
    """What a versioned turn does when a new version becomes current: move to it at its
    next workflow task (``auto-upgrade``) or stay on the version that started it (``pinned``)."""
    rebuild_stuck_after: Annotated[int, Field(ge=1)] | None = None
    """Workers rebuild a turn from its file after this many workflow tasks of its run
    failed on non-determinism (None: never; operators run ``turns recover``)."""

    @field_validator("payload_key_env")
    @classmethod
    def _a_name_not_a_key(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.fullmatch(value):
            # Never repeat the value: it may be the key itself.
            raise ValueError(
                "payload_key_env names an environment variable (letters, digits, '_'); "
                "the key itself never goes in turns.toml"
            )
        return value


class TurnsFile(_Table):
    """The whole ``turns.toml``."""

    app: str | None = None
    """``MODULE:ATTR`` of the app whose agents, tools and models every process loads."""
    default_agent: str | None = None
    default_model: str | None = None
    task_queue: str | None = None
    workspace: str | None = None
    agents: dict[str, AgentTable] = {}
    providers: dict[str, dict[str, Any]] = {}
    tools: dict[str, ToolTable] = {}
    permissions: PermissionsTable = PermissionsTable()
    context: ElisionPolicy = ElisionPolicy()
    storage: StorageTable = StorageTable()
    subagents: SubagentsTable = SubagentsTable()
    temporal: TemporalTable = TemporalTable()
    prices: dict[str, dict[str, Any]] = {}
    """``[prices.PROVIDER]``; each table's rules live with the pricer (``cost.py``)."""
    notify: NotifyTable | None = None
    """``[notify]``: webhook notifications (``turnclient.runtime.notify``)."""
    mcp: dict[str, McpTable] = {}

    _providers: dict[str, ProviderConfig] = PrivateAttr(default_factory=dict)
    _prices: dict[str, ProviderPrice] = PrivateAttr(default_factory=dict)

    @property
    def provider_configs(self) -> dict[str, ProviderConfig]:
        return self._providers

    @property
    def prices_by_provider(self) -> dict[str, ProviderPrice]:
        return self._prices

    @model_validator(mode="after")
    def _cross_references(self, info: ValidationInfo) -> TurnsFile:
        """What one table says about another, and about the built-ins: every
        problem found, not just the first."""
        problems: list[str] = []

        def check(run: Any, *args: Any) -> None:
            try:
                run(*args)
            except ValueError as exc:
                problems.append(str(exc))

        # Providers from the environment first (OPENAI_*, ANTHROPIC_*); a table overrides.
        self._providers.update((info.context or {}).get("providers", {}))
        for name, table in self.providers.items():
            try:
                self._providers[name] = ProviderConfig.from_table(name, table)
            except ProviderConfigError as exc:
                problems.append(f"providers.{name}: {exc}")
        tools = set(BUILTIN_NAMES) | set(self.tools)
        for name, t in self.tools.items():
            check(_check_tool_table, name, t)
        for name, a in self.agents.items():
            where = f"agents.{name}"
            if a.system_prompt is None and name not in BUILTIN_AGENTS:
                problems.append(f"{where} needs a system_prompt")
            check(_check_tool_names, f"{where}.tools", a.tools or [], tools)
            check(_check_models, f"{where}.model", a.model, self._providers)
            prompt = a.system_prompt
            if prompt is None and name in BUILTIN_AGENTS:
                prompt = BUILTIN_AGENTS[name].system_prompt
            if a.context_tokens is not None and prompt is not None:
                check(check_budget, where, a.context_tokens, prompt)
            if isinstance(a.summarise_dropped, SummariseTable):
                check(_check_summariser, where, a.summarise_dropped, self._providers)
            check(_check_mcp_names, f"{where}.mcp", a.mcp or [], set(self.mcp))
        for name in self.mcp:
            if not MCP_NAME.fullmatch(name):
                problems.append(f"mcp.{name}: a server name is 1-64 letters, digits, '_' or '-'")
        if self.default_model is not None:
            check(_check_model_ref, "default_model", self.default_model, self._providers)
        agents = set(BUILTIN_AGENTS) | set(self.agents)
        if self.default_agent is not None and self.default_agent not in agents:
            problems.append(
                f"default_agent {self.default_agent!r} is not an agent "
                f"(known: {', '.join(sorted(agents))})"
            )
        for key in ("allow", "deny"):
            for n in getattr(self.permissions, key):
                check(_check_permission_name, f"permissions.{key}", n, tools, set(self.mcp))
        for name, table in self.prices.items():
            if name != "scripted" and name not in self._providers:
                known = ", ".join(sorted({*self._providers, "scripted"}))
                problems.append(
                    f"prices.{name}: no provider {name!r} is configured (known: {known})"
                )
                continue
            try:
                self._prices[name] = ProviderPrice.from_table(f"prices.{name}", table)
            except PriceConfigError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _check_tool_table(name: str, t: ToolTable) -> None:
    where = f"tools.{name}"
    if not TOOL_NAME.fullmatch(name):
        raise ValueError(f"{where}: a tool name is 1-64 letters, digits, '_' or '-'")
    if name in BUILTIN_NAMES:
        given = t.model_dump(exclude_none=True)
        if set(given) - {"description", "permission", "fast", "fast_timeout"}:
            raise ValueError(
                f"{where}: {name} is a built-in tool; only its description, permission, "
                "fast and fast_timeout can be changed"
            )
        _check_fast(where, t, "sync")
        return
    execution = t.execution or ("sync" if t.callable is not None else None)
    if execution is None:
        raise ValueError(f'{where}.execution must be "sync" or "async"')
    if execution == "sync" and (t.callable is None or ":" not in t.callable):
        raise ValueError(f'{where}: a sync tool needs callable = "module:function"')
    if execution == "async" and t.callable is not None:
        raise ValueError(
            f"{where}: an async tool has no callable; its result arrives with `turns complete`"
        )
    _check_fast(where, t, execution)


def _check_fast(where: str, t: ToolTable, execution: str) -> None:
    """``fast`` is for sync tools; ``fast_timeout`` is a bound within the local-activity limit."""
    if t.fast and execution != "sync":
        raise ValueError(
            f"{where}.fast: an async tool cannot be fast (its result arrives later as an "
            "input); remove fast or make the tool sync"
        )
    if t.fast_timeout is not None:
        problem = fast_problem(True, "sync", t.fast_timeout)
        if problem is not None:
            raise ValueError(f"{where}.fast_timeout: {problem.removeprefix('fast_timeout ')}")


def _check_tool_names(where: str, names: Sequence[str], known: set[str]) -> None:
    for t in names:
        if t not in known and t != SPAWN_AGENT:
            raise ValueError(
                f"{where}: unknown tool {t!r} (known: {', '.join(sorted([*known, SPAWN_AGENT]))})"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"{where} lists a tool twice")


def _check_models(
    where: str, model: str | Sequence[str] | None, providers: Mapping[str, ProviderConfig]
) -> None:
    """An agent's model, or each model of its fallback list (named by its index)."""
    if model is None or isinstance(model, str):
        if model is not None:
            _check_model_ref(where, model, providers)
        return
    for i, ref in enumerate(model):
        _check_model_ref(f"{where}[{i}]", ref, providers)


def _check_permission_name(where: str, name: str, tools: set[str], servers: set[str]) -> None:
    """A tool name, or ``mcp:SERVER/TOOL`` (``mcp:SERVER/*``: all of a server's tools)."""
    if name.startswith("mcp:"):
        server, sep, tool = name[4:].partition("/")
        if not sep or not tool:
            raise ValueError(f"{where}: {name!r} is not mcp:SERVER/TOOL or mcp:SERVER/*")
        if server not in servers:
            listed = ", ".join(sorted(servers)) or "none"
            raise ValueError(f"{where}: unknown MCP server {server!r} (configured: {listed})")
        return
    if name not in tools:
        raise ValueError(f"{where}: unknown tool {name!r}")


def _check_mcp_server(server: McpServer) -> None:
    """A Python ``McpServer`` by the rules of its ``[mcp.NAME]`` table."""
    where = f"mcp.{server.name}"
    if not MCP_NAME.fullmatch(server.name):
        raise ValueError(f"{where}: a server name is 1-64 letters, digits, '_' or '-'")
    table: dict[str, Any] = {
        "command": server.command,
        "args": list(server.args),
        "env": list(server.env),
        "cwd": str(server.cwd) if server.cwd is not None else None,
        "url": server.url,
        "headers_env": dict(server.headers_env),
        "timeout": server.timeout,
        "permission": server.permission,
        "allow": list(server.allow),
        "deny": list(server.deny),
        "prefix": server.prefix,
    }
    try:
        McpTable.model_validate(table, strict=True)
    except ValidationError as exc:
        raise ValueError(
            "; ".join(_describe(e, where) for e in exc.errors(include_url=False))
        ) from None


def _check_mcp_names(where: str, names: Sequence[str], known: set[str]) -> None:
    for n in names:
        if n not in known:
            listed = ", ".join(sorted(known)) or "none; add an [mcp.NAME] table"
            raise ValueError(f"{where}: unknown MCP server {n!r} (configured: {listed})")
    if len(set(names)) != len(names):
        raise ValueError(f"{where} lists a server twice")


def _check_summariser(
    where: str,
    summariser: SummariseTable | SummariseDropped,
    providers: Mapping[str, ProviderConfig],
) -> None:
    """A summariser names a configured model, and a prompt that says something."""
    if summariser.model is not None:
        _check_model_ref(f"{where}.summarise_dropped.model", summariser.model, providers)
    if summariser.prompt is not None and not summariser.prompt.strip():
        raise ValueError(
            f"{where}.summarise_dropped.prompt is empty: write the summariser's instructions, "
            "or leave the key out for the default prompt"
        )


def _check_model_ref(where: str, ref: str, providers: Mapping[str, ProviderConfig]) -> None:
    try:
        descriptor = parse_model_ref(ref)
    except ProviderConfigError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if descriptor.provider != "scripted" and descriptor.provider not in providers:
        known = ", ".join(sorted({*providers, "scripted"}))
        raise ValueError(
            f"{where}: provider {descriptor.provider!r} is not configured "
            f"(add [providers.{descriptor.provider}]; configured: {known})"
        )


_KINDS = {
    "string_type": "a string",
    "list_type": "a list",
    "bool_type": "a boolean",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
    "int_type": "an integer",
    "float_type": "a number",
}


def _path(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _table_at(model: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The table model that the key path ``loc`` names under ``model``, if any."""
    i = 0
    while i < len(loc):
        found = model.model_fields.get(str(loc[i]))
        if found is None:
            return None
        annotation = found.annotation
        i += 1
        if get_origin(annotation) is dict:  # [agents.NAME], [tools.NAME]: skip the name
            annotation = get_args(annotation)[1]
            i += 1
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


_UNION_BRANCH = re.compile(r"(str|int|float|bool|list|dict)(\[.*\])?")
"""How pydantic names the member of a union in an error's location (``list[str]``)."""


def _describe_all(
    errors: Sequence[ErrorDetails], root: type[BaseModel], table: str = ""
) -> list[str]:
    """Every problem of validating ``root`` (the table at key path ``table``), each
    once with its key path; a table's unknown keys together, with the keys it knows."""
    out: list[str] = []
    unknown: dict[tuple[str | int, ...], list[str]] = {}
    branches: dict[tuple[str | int, ...], int] = {}
    for error in errors:
        loc = tuple(error["loc"])
        if loc and _UNION_BRANCH.fullmatch(str(loc[-1])) and error["type"] in _KINDS:
            # A value that fits no member of a union (``model = 5`` for a string or a
            # list of strings): one problem at the key, naming every type it may be.
            where = _path((table, *loc[:-1]) if table else loc[:-1])
            kind = _KINDS[error["type"]]
            if loc[:-1] in branches:
                out[branches[loc[:-1]]] += f" or {kind}"
            else:
                branches[loc[:-1]] = len(out)
                out.append(f"{where} must be {kind}")
            continue
        if error["type"] == "extra_forbidden":
            inside = tuple(error["loc"][:-1])
            if inside not in unknown:
                unknown[inside] = []
                out.append("")  # its place, filled below
            unknown[inside].append(str(error["loc"][-1]))
            continue
        out.append(_describe(error, table))
    lines = iter(unknown.items())
    for i, text in enumerate(out):
        if text:
            continue
        inside, keys = next(lines)
        model = _table_at(root, inside)
        known = f" (known: {', '.join(sorted(model.model_fields))})" if model else ""
        what = f"unknown key{'s' if len(keys) > 1 else ''} {', '.join(keys)}{known}"
        where = _path((table, *inside) if table else inside)
        out[i] = f"{where}: {what}" if where else what
    return out


def _describe(error: ErrorDetails, table: str = "") -> str:
    """One pydantic error as the key path (under ``table``) and what is wrong there."""
    loc = (table, *error["loc"]) if table else tuple(error["loc"])
    path = _path(loc)
    kind = error["type"]
    if kind == "value_error":
        message = str(error.get("ctx", {}).get("error", error["msg"]))
        return f"{path}: {message}" if path else message
    if kind in _KINDS:
        return f"{path} must be {_KINDS[kind]}"
    if kind == "literal_error":
        expected = str(error.get("ctx", {}).get("expected", "")).replace("'", '"')
        return f"{path} must be {expected}"
    return f"{path}: {error['msg']}" if path else str(error["msg"])


def parse_file(data: Mapping[str, Any], env: Mapping[str, str] | None = None) -> TurnsFile:
    """The validated file, or a ``ConfigError`` naming every problem's key path.

    ``env`` gives the providers the environment configures (``env_providers``);
    without it the file's tables are the only providers.
    """
    providers = env_providers(env) if env is not None else {}
    try:
        return TurnsFile.model_validate(data, strict=True, context={"providers": providers})
    except ValidationError as exc:
        raise ConfigError(
            "; ".join(_describe_all(exc.errors(include_url=False), TurnsFile))
        ) from None


# ---------------------------------------------------------------- providers from the environment

OPENAI_DEFAULT_MODEL = "openai/gpt-4.1"
ANTHROPIC_DEFAULT_MODEL = "anthropic/claude-sonnet-4-5"


def env_providers(env: Mapping[str, str]) -> dict[str, ProviderConfig]:
    """``openai`` and ``anthropic`` as the providers' own SDKs read the environment.

    ``openai``: ``OPENAI_API_KEY``; ``OPENAI_BASE_URL`` (with ``/v1``, as the
    OpenAI SDK takes it) points it at a compatible server (vLLM, Ollama,
    LiteLLM), spoken to through Chat Completions, which they all serve; with no
    base URL it is OpenAI's Responses API. A compatible server given without a
    key is called without one. ``anthropic``: ``ANTHROPIC_API_KEY``;
    ``ANTHROPIC_BASE_URL`` without ``/v1``, as the Anthropic SDK takes it. A
    ``[providers.NAME]`` table replaces either. Both always exist, so a turn on
    ``openai/MODEL`` without the key fails naming the variable to set.
    """
    out: dict[str, ProviderConfig] = {}
    for name, build in (("openai", _openai_from_env), ("anthropic", _anthropic_from_env)):
        try:
            out[name] = build(env)
        except ProviderConfigError as exc:
            variable = "OPENAI_BASE_URL" if name == "openai" else "ANTHROPIC_BASE_URL"
            raise ConfigError(f"{variable}: {exc}") from None
    return out


def _openai_from_env(env: Mapping[str, str]) -> ProviderConfig:
    base = env.get("OPENAI_BASE_URL") or None
    keyless = base is not None and not env.get("OPENAI_API_KEY")
    return ProviderConfig(
        kind="openai-chat" if base is not None else "openai-responses",
        base_url=base,
        api_key_env=None if keyless else "OPENAI_API_KEY",
    )


def _anthropic_from_env(env: Mapping[str, str]) -> ProviderConfig:
    base = env.get("ANTHROPIC_BASE_URL") or None
    if base is not None and not base.rstrip("/").endswith("/v1"):
        base = base.rstrip("/") + "/v1"
    return ProviderConfig(kind="anthropic", base_url=base, api_key_env="ANTHROPIC_API_KEY")


def env_default_model(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(model, the variable that chose it) for agents that name none: by whichever key is set."""
    if env.get("OPENAI_API_KEY"):
        return OPENAI_DEFAULT_MODEL, "OPENAI_API_KEY"
    if env.get("ANTHROPIC_API_KEY"):
        return ANTHROPIC_DEFAULT_MODEL, "ANTHROPIC_API_KEY"
    return None


# ---------------------------------------------------------------- resolving tools


def import_callable(name: str, target: str, search: Path) -> Any:
    """What ``callable = "module:function"`` names (the work dir is importable)."""
    module_name, _, attr = target.partition(":")
    if str(search) not in sys.path:
        sys.path.insert(0, str(search))
    try:
        module = importlib.import_module(module_name)
        fn = getattr(module, attr)
    except Exception as exc:
        raise ConfigError(
            f"tools.{name}: cannot load {target}: {type(exc).__name__}: {exc}"
        ) from None
    if not callable(fn) and not isinstance(fn, Tool):
        raise ConfigError(f"tools.{name}: {target} is not callable")
    return fn


def _tool_from_table(name: str, t: ToolTable, base: Tool | None, root: Path) -> Tool:
    where = f"tools.{name}"
    if base is not None:  # a built-in: only description, permission and fast change
        return base.with_(
            description=t.description if t.description is not None else base.description,
            permission=t.permission or base.permission,
            fast=t.fast if t.fast is not None else base.fast,
            fast_timeout=t.fast_timeout if t.fast_timeout is not None else base.fast_timeout,
        )
    permission = t.permission or "ask"  # fail closed
    if t.callable is None:
        return Tool.external(
            name,
            description=t.description or "",
            input_schema=t.input_schema,
            permission=permission,
            requires_human=bool(t.requires_human),
        )
    target = import_callable(name, t.callable, root)
    try:
        if isinstance(target, Tool):
            declared = target.with_(name=name, tool_id=f"user:{name}")
        else:
            declared = tool(target, name=name)
    except ToolDeclarationError as exc:
        raise ConfigError(f"{where}: {t.callable}: {exc}") from None
    if declared.execution != "sync":
        raise ConfigError(f'{where}: {t.callable} is declared async; set execution = "async"')
    if t.input_schema is not None:
        problem = schema_disagreement(t.input_schema, declared.input_schema)
        if problem is not None:
            raise ConfigError(f"{where}: {problem} ({t.callable})")
    changes: dict[str, Any] = {"permission": permission}
    if t.description is not None:
        changes["description"] = t.description
    if t.requires_human is not None:
        changes["requires_human"] = t.requires_human
    if isinstance(target, Tool) and t.permission is None:
        changes["permission"] = target.permission  # declared next to the function
    if t.fast is not None:
        changes["fast"] = t.fast
    if t.fast_timeout is not None:
        changes["fast_timeout"] = t.fast_timeout
    try:
        return declared.with_(**changes)
    except ToolDeclarationError as exc:
        raise ConfigError(f"{where}.fast: {exc}") from None


def _agent_from_table(name: str, t: AgentTable, base: Agent | None) -> Agent:
    start = base or Agent(name=name, system_prompt="")
    return replace(
        start,
        system_prompt=t.system_prompt if t.system_prompt is not None else start.system_prompt,
        tools=tuple(t.tools) if t.tools is not None else start.tools,
        model=t.model if t.model is not None else start.model,
        reasoning_effort=t.reasoning_effort or start.reasoning_effort,
        description=t.description or start.description,
        context_tokens=t.context_tokens or start.context_tokens,
        mcp=tuple(t.mcp) if t.mcp is not None else start.mcp,
        output_schema=t.output_schema if t.output_schema is not None else start.output_schema,
        output_type=None if t.output_schema is not None else start.output_type,
        output_retries=t.output_retries if t.output_retries is not None else start.output_retries,
        summarise_dropped=start.summarise_dropped
        if t.summarise_dropped is None
        else t.summarise_dropped
        if isinstance(t.summarise_dropped, bool)
        else SummariseDropped(
            model=t.summarise_dropped.model,
            prompt=t.summarise_dropped.prompt,
            max_tokens=t.summarise_dropped.max_tokens,
        ),
    )


# ---------------------------------------------------------------- loading


def load_config(
    work_dir: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    *,
    app: str | None = None,
    with_app: bool = True,
) -> Config:
    """The configuration of a work dir: built-ins, then ``turns.toml``, then the app.

    The app is ``app`` (``--app``), else ``TURNS_APP``, else ``app =`` in the
    file; ``with_app=False`` leaves it out (a ``Turns`` is an app itself).
    """
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
        file = parse_file(data, env)
        config = _build(root, source, file, env)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if not with_app:
        return config
    from turnclient.runtime.app import APP_ENV, load_app

    if app is not None:
        spec, where = app, "--app"
    elif env.get(APP_ENV):
        spec, where = env[APP_ENV], APP_ENV
    elif file.app is not None:
        spec, where = file.app, f"{path}: app ="
    else:
        return config
    loaded = load_app(spec, [Path.cwd(), root], where)
    return with_python(
        replace(config, app=spec),
        agents=loaded.agents,
        tools=loaded.tools,
        models=loaded.models,
        default_agent=loaded.default_agent,
        default_model=loaded.default_model,
        allow=loaded.allow,
        deny=loaded.deny,
        origin=f"app {spec}",
    )


def _build(root: Path, source: Path | None, file: TurnsFile, env: Mapping[str, str]) -> Config:
    workspace = Path(file.workspace or "workspace")
    workspace = workspace if workspace.is_absolute() else root / workspace
    tools = builtin_tools(workspace)
    problems: list[str] = []
    origins = {f"tools.{n}": "built-in" for n in tools}
    origins.update({f"agents.{n}": "built-in" for n in BUILTIN_AGENTS})
    for name, table in file.tools.items():
        origins[f"tools.{name}"] = (
            "built-in, changed in turns.toml" if name in tools else CONFIG_FILE
        )
        try:
            tools[name] = _tool_from_table(name, table, tools.get(name), root)
        except ConfigError as exc:
            problems.append(str(exc))
    for name in file.provider_configs:
        origins[f"providers.{name}"] = CONFIG_FILE if name in file.providers else "environment"
    default_model = file.default_model
    if default_model is not None:
        origins["default_model"] = CONFIG_FILE
    elif (chosen := env_default_model(env)) is not None:
        default_model, variable = chosen
        origins["default_model"] = f"environment ({variable} is set)"
    agents = dict(BUILTIN_AGENTS)
    for name, a in file.agents.items():
        origins[f"agents.{name}"] = (
            "built-in, changed in turns.toml" if name in agents else CONFIG_FILE
        )
        try:
            agents[name] = _agent_from_table(name, a, agents.get(name))
        except ConfigError as exc:
            problems.append(str(exc))
    if problems:  # every tool and agent that cannot be built, not just the first
        raise ConfigError("; ".join(problems))
    return Config(
        work_dir=root,
        source=source,
        default_agent=file.default_agent or "demo",
        default_model=default_model,
        task_queue=env.get("TURNS_TASK_QUEUE") or file.task_queue or DEFAULT_TASK_QUEUE,
        workspace=workspace,
        agents=agents,
        providers=file.provider_configs,
        tools=tools,
        auto_allow=tuple(file.permissions.allow),
        auto_deny=tuple(file.permissions.deny),
        context=file.context,
        storage=file.storage.config(),
        max_concurrent_subagents=file.subagents.max_concurrent,
        payload_key_env=file.temporal.payload_key_env,
        prices=file.prices_by_provider,
        notify=file.notify,
        origins=origins,
        mcp={name: table.server(name, root) for name, table in file.mcp.items()},
        versioning=worker_versioning(file.temporal, env),
        rebuild_stuck_after=_rebuild_after(file.temporal, env),
    )


def _rebuild_after(file: TemporalTable, env: Mapping[str, str]) -> int | None:
    given = env.get("TURNS_REBUILD_STUCK_AFTER")
    if given is None or given == "":
        return file.rebuild_stuck_after
    if given in ("0", "off"):
        return None
    if not given.isdigit():
        raise ConfigError(
            f"TURNS_REBUILD_STUCK_AFTER is {given!r}; it is a number of failed workflow "
            "tasks (1 or more), or 0/off"
        )
    return int(given)


__all__ = [
    "BUILTIN_AGENTS",
    "CONFIG_FILE",
    "Agent",
    "AgentConfig",
    "AgentTable",
    "Config",
    "ConfigError",
    "McpServer",
    "McpTable",
    "PermissionsTable",
    "StorageConfig",
    "StorageTable",
    "SubagentsTable",
    "SummariseDropped",
    "SummariseTable",
    "TemporalTable",
    "ToolTable",
    "WorkerVersioning",
    "TurnsFile",
    "import_callable",
    "load_config",
    "parse_file",
    "parse_storage",
    "with_python",
    "work_dir_from_env",
]


# ---------------------------------------------------------------- agents and tools from Python


def with_python(
    config: Config,
    *,
    agents: Sequence[Agent] = (),
    tools: Sequence[Tool] = (),
    default_agent: str | None = None,
    default_model: str | None = None,
    allow: Sequence[str] = (),
    deny: Sequence[str] = (),
    models: Mapping[str, ScriptFunction] | None = None,
    origin: str = "Python",
) -> Config:
    """``config`` plus agents and tools defined in Python, checked by the file's rules.

    ``origin`` says where they come from (``app MODULE:ATTR`` or ``Python``):
    an agent that ``turns.toml`` also defines is refused naming both places,
    and ``Config.origins`` records it for ``turns config``. ``models`` adds
    Python functions served as ``scripted/NAME``.

    ``allow``/``deny`` add tool names to ``[permissions]``: what the
    ``auto_permission`` classifier allows or denies without a human.

    A ``Tool`` listed in an agent's ``tools`` is registered under its name; two
    different tools under one name are refused, as is an agent naming a tool
    or provider that does not exist.
    """
    known = dict(config.tools)
    origins = dict(config.origins)
    for t in [*tools, *(x for a in agents for x in a.tools if isinstance(x, Tool))]:
        existing = known.get(t.name)
        # One name, one tool: a second one (another function, or the same one with
        # another permission) would silently run instead of the first for every agent.
        if existing is not None and not _same_tool(existing, t):
            where = origins.get(f"tools.{t.name}")
            also = f" ({where} and {origin})" if where and where != origin else ""
            raise ConfigError(
                f"tools.{t.name}: two different tools are named {t.name!r}{also}; give one "
                "another name (tool(fn, name=...)) or list the same Tool object"
            )
        if existing is None:
            origins[f"tools.{t.name}"] = origin
        known[t.name] = t
    merged = dict(config.agents)
    named: set[str] = set()
    servers = dict(config.mcp)
    try:
        for server in (m for a in agents for m in a.mcp if isinstance(m, McpServer)):
            _check_mcp_server(server)
            existing_server = servers.get(server.name)
            if existing_server is not None and existing_server != server:
                raise ValueError(
                    f"mcp.{server.name}: two different MCP servers are named {server.name!r}"
                )
            servers[server.name] = server
        for a in agents:
            if a.name in named:  # a Python agent may replace a built-in, not another one
                raise ValueError(f"agents.{a.name}: two agents are named {a.name!r}")
            if origins.get(f"agents.{a.name}") == CONFIG_FILE:
                # Which one would a turn get? Neither silently: the user renames one.
                raise ValueError(
                    f"agents.{a.name}: defined twice, as [agents.{a.name}] in "
                    f"{config.source or CONFIG_FILE} and in {origin}; rename one of them"
                )
            named.add(a.name)
            origins[f"agents.{a.name}"] = (
                f"built-in, replaced by {origin}" if a.name in BUILTIN_AGENTS else origin
            )
            _check_agent_fields(a)
            if a.context_tokens is not None:
                check_budget(f"agents.{a.name}", a.context_tokens, a.system_prompt)
            if isinstance(a.summarise_dropped, SummariseDropped):
                _check_summariser(f"agents.{a.name}", a.summarise_dropped, config.providers)
            _check_tool_names(f"agents.{a.name}.tools", a.tool_names, set(known))
            _check_models(f"agents.{a.name}.model", a.model, config.providers)
            _check_mcp_names(f"agents.{a.name}.mcp", a.mcp_names, set(servers))
            merged[a.name] = replace(a, tools=a.tool_names, mcp=a.mcp_names)
        if default_model is not None:
            _check_model_ref("default_model", default_model, config.providers)
        for key, names in (("allow", allow), ("deny", deny)):
            for n in names:
                _check_permission_name(f"permissions.{key}", n, set(known), set(servers))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    agent = default_agent or config.default_agent
    if agent not in merged:
        raise ConfigError(
            f"default_agent {agent!r} is not an agent (known: {', '.join(sorted(merged))})"
        )
    for name in models or {}:
        origins[f"models.scripted/{name}"] = origin
    return replace(
        config,
        agents=merged,
        tools=known,
        models={**config.models, **(models or {})},
        origins=origins,
        mcp=servers,
        default_agent=agent,
        default_model=default_model or config.default_model,
        auto_allow=(*config.auto_allow, *allow),
        auto_deny=(*config.auto_deny, *deny),
    )


def _same_tool(a: Tool, b: Tool) -> bool:
    """The same declaration and the same function (``Tool`` equality leaves the function out)."""
    return a == b and a.function == b.function


def _check_agent_fields(agent: Agent) -> None:
    """A Python agent's fields, by the rules of its ``[agents.NAME]`` table (types, efforts)."""
    table = {
        "system_prompt": agent.system_prompt,
        "model": agent.model
        if agent.model is None or isinstance(agent.model, str)
        else list(agent.model),
        "tools": list(agent.tool_names),
        "reasoning_effort": agent.reasoning_effort,
        "description": agent.description,
        "context_tokens": agent.context_tokens,
        "mcp": list(agent.mcp_names),
        "output_retries": agent.output_retries,
        "summarise_dropped": agent.summarise_dropped
        if not isinstance(agent.summarise_dropped, SummariseDropped)
        else {
            "model": agent.summarise_dropped.model,
            "prompt": agent.summarise_dropped.prompt,
            "max_tokens": agent.summarise_dropped.max_tokens,
        },
    }
    try:
        AgentTable.model_validate(table, strict=True)
    except ValidationError as exc:
        where = f"agents.{agent.name}"
        problems = "; ".join(_describe_all(exc.errors(include_url=False), AgentTable, where))
        raise ValueError(problems) from None
