"""Wiring a runtime from a work dir, connecting to Temporal, and serving turns.

``Runtime.from_work_dir`` turns ``turns.toml`` (over the built-ins) into the
dependencies the activities need (``TurnDependencies``) and the agent
resolver the client needs: providers become a ``ModelRegistry`` (with the
demo model registered), tools a catalog of descriptors, a ``ToolRegistry``
and the permission declarations, agents a ``StaticAgentResolver``; the
context resolver reads the work dir's turn files; one ``LiveHub`` carries
deltas from this process's model calls to this process's watchers.

``temporal(...)`` connects: to ``TEMPORAL_ADDRESS`` (namespace, TLS and API
key from the usual ``TEMPORAL_*`` variables, through
``temporalio.envconfig``) when it is set, and otherwise to the work dir's
embedded dev server (``turnclient.runtime.embedded``). ``serving(...)`` runs a
worker in this process for as long as the block runs. The CLI, ``turns
worker``, ``python worker.py`` and the tests all wire through here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client, Interceptor
from temporalio.converter import DataConverter, PayloadCodec
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime as TemporalRuntime

from turnclient.builtins.demo import DEMO_MODEL, demo_model
from turnclient.lib.api import TurnClient, iso_now
from turnclient.lib.deltaspool import DeltaReader, DeltaSpool, DeltaSpoolReader, spool_dir
from turnclient.lib.pgdeltas import BothMirrors, DatabaseDeltaReader, DatabaseDeltas, DeltaStore
from turnclient.runtime.config import Config, ConfigError, load_config, work_dir_from_env
from turnclient.runtime.embedded import NAMESPACE, EmbeddedServer
from turnclient.runtime.extras import install_hint
from turnclient.runtime.mcp import (
    TOOL_ID_PREFIX,
    McpListing,
    McpPermissionChecker,
    McpPool,
    mcp_rule_names,
)
from turnclient.runtime.storage import open_repository
from turncore.agents import AgentDefinition, ListedTools, StaticAgentResolver
from turncore.budget import SUMMARY_PROMPT, Summariser
from turncore.context import ContextResolver, ElisionPolicy
from turncore.errors import DependencyError, InfrastructureError, InvalidInputError
from turncore.events import ModelDescriptor, ToolDescriptor
from turncore.ids import TurnIdGenerator
from turncore.live import DeltaMirror, LiveHub
from turncore.model import ModelRegistry, parse_model_ref
from turncore.permissions import (
    DeclaredPermissionChecker,
    PermissionChecker,
    PermissionClassification,
    PermissionClassificationBatch,
    PermissionClassifier,
)
from turncore.reducer import TurnState
from turncore.storage.repository import JsonlRepository, TurnRepository
from turncore.subagents import SPAWN_AGENT_TOOL_ID, spawn_agent_descriptor
from turncore.tools import ToolRegistry
from turncore_temporal.activities import DATA_CONVERTER
from turncore_temporal.activities.turn_activities import ModelResolver, TurnDependencies
from turncore_temporal.workflows import SEARCH_ATTRIBUTES

log = logging.getLogger("turnclient")

MISSING_DEPENDENCY_HINT = (
    "name the app that defines it (--app MODULE:ATTR or TURNS_APP), or run with "
    "--no-worker where a worker that has it serves the task queue"
)


class RuleClassifier:
    """The ``--auto-permission`` classifier: ``[permissions] allow``/``deny`` by tool name.

    An MCP tool also matches ``mcp:SERVER/TOOL`` and ``mcp:SERVER/*``, read from
    its permission request (the MCP metadata the checker put there).

    Everything else is deferred to a human (or denied when none is available).
    """

    def __init__(self, allow: Sequence[str], deny: Sequence[str]) -> None:
        self._allow = frozenset(allow)
        self._deny = frozenset(deny)

    async def classify(
        self, batch: PermissionClassificationBatch
    ) -> Sequence[PermissionClassification]:
        out: list[PermissionClassification] = []
        for r in batch.requests:
            names = {r.tool_name, *mcp_rule_names(r.request)}
            if names & self._deny:
                decision, reason = "deny", "listed in [permissions] deny of turns.toml"
            elif names & self._allow:
                decision, reason = "allow", "listed in [permissions] allow of turns.toml"
            else:
                decision, reason = "defer", "not listed in [permissions] of turns.toml"
            out.append(
                PermissionClassification(
                    tool_call_id=r.tool_call_id, decision=decision, reason=reason
                )
            )
        return out


@dataclass(frozen=True)
class Runtime:
    """Everything a process needs to create, advance and serve the work dir's turns."""

    config: Config
    repository: JsonlRepository
    models: ModelRegistry
    tools: ToolRegistry
    catalog: dict[str, ToolDescriptor]
    resolver: StaticAgentResolver
    contexts: ContextResolver
    hub: LiveHub
    deps: TurnDependencies
    mcp: McpPool | None = None
    """This process's sessions to MCP servers (None: no ``[mcp.*]``); ``serving`` closes it."""
    listing: McpListing | None = None
    """Lists the MCP tools of an agent when a turn is created."""

    @property
    def work_dir(self) -> Path:
        return self.config.work_dir

    @property
    def task_queue(self) -> str:
        return self.config.task_queue

    @classmethod
    def from_work_dir(
        cls,
        work_dir: str | os.PathLike[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        config: Config | None = None,
        migrate: bool = False,
    ) -> Runtime:
        env = os.environ if env is None else env
        root = Path(work_dir).absolute() if work_dir is not None else work_dir_from_env(env)
        config = config or load_config(root, env)
        return cls.from_config(config, env=env, migrate=migrate)

    @classmethod
    def from_config(
        cls, config: Config, *, env: Mapping[str, str] | None = None, migrate: bool = False
    ) -> Runtime:
        """``migrate``: create or upgrade the turn database's schema first (postgres storage)."""
        env = os.environ if env is None else env
        root = config.work_dir
        repository = open_repository(config, env, migrate=migrate)
        models = ModelRegistry(config.providers, env=env, base_dir=root)
        models.register_function(DEMO_MODEL, demo_model)
        for name, fn in config.models.items():
            models.register_function(name, fn)  # an app's Python models: scripted/NAME

        config.workspace.mkdir(parents=True, exist_ok=True)
        # One declaration per tool: the catalog (what agents snapshot), the
        # registry (what runs) and the permissions all derive from it.
        catalog: dict[str, ToolDescriptor] = {n: t.descriptor() for n, t in config.tools.items()}
        declarations: dict[str, Any] = {t.tool_id: t.permission for t in config.tools.values()}
        registry = ToolRegistry.of(config.tools.values())

        # Sub-agents: every agent may list the workflow-native spawn_agent tool;
        # spawning needs no approval (what the child does is gated in the child).
        catalog["spawn_agent"] = spawn_agent_descriptor()
        declarations[SPAWN_AGENT_TOOL_ID] = "none"

        checker: PermissionChecker = DeclaredPermissionChecker(declarations)
        pool: McpPool | None = None
        listing: McpListing | None = None
        if config.mcp:
            # MCP tools are snapshotted per turn (toolId mcp:SERVER/TOOL); this
            # process runs them through its own sessions, gated fail-closed.
            pool = McpPool(config.mcp, env)
            registry.register_family(TOOL_ID_PREFIX, pool.tool_for)
            checker = McpPermissionChecker(checker, config.mcp)
            listing = McpListing(
                config.mcp, {name: a.mcp_names for name, a in config.agents.items()}, env, pool
            )
        else:  # a turn snapshotted elsewhere with MCP tools: refused, naming the server
            registry.register_family(TOOL_ID_PREFIX, McpPool({}, env).tool_for)

        default_model = (
            parse_model_ref(config.default_model) if config.default_model is not None else None
        )
        resolver = StaticAgentResolver(
            agents={
                name: AgentDefinition(
                    agent_id=name,
                    system_prompt=a.system_prompt,
                    tools=a.tool_names,
                    model=parse_model_ref(a.models[0]) if a.models else None,
                    fallbacks=tuple(parse_model_ref(m) for m in a.models[1:]),
                    output=a.output,
                )
                for name, a in config.agents.items()
            },
            catalog=catalog,
            default_model=default_model,
        )

        deps = turn_dependencies(
            repository,
            models,
            registry,
            resolver,
            # Deltas also go to the work dir's spool, so watchers in other
            # processes on this host (the web UI, `turns watch`) see them live,
            # and with PostgreSQL storage to the database, for those on other hosts.
            hub=LiveHub(mirror=_delta_mirror(repository, root)),
            checker=checker,
            classifier=RuleClassifier(config.auto_allow, config.auto_deny),
            context_policy=config.context,
            context_budget=context_budgets(config),
            summariser=summarisers(config),
            listed=listing,
        )
        return cls(
            config=config,
            repository=repository,
            models=models,
            tools=deps.tools,
            catalog=catalog,
            resolver=resolver,
            contexts=deps.contexts,
            hub=deps.hub,
            deps=deps,
            mcp=pool,
            listing=listing,
        )

    def delta_reader(self, turn_id: str, after: tuple[int, int] = (-1, 0)) -> DeltaReader:
        """Where watchers read the turn's live deltas: the database with PostgreSQL
        storage (whatever host runs the call), else this work dir's spool."""
        store = _delta_store(self.repository)
        if store is not None:
            return DatabaseDeltaReader(store, turn_id, after)
        return DeltaSpoolReader(spool_dir(self.work_dir), turn_id, after)

    def turn_client(
        self, client: Client, server: EmbeddedServer | None = None, *, serving: bool = False
    ) -> TurnClient:
        """A client of the work dir's turns; ``serving``: this process also runs a worker,
        so an advance this process could not serve is refused at once (``check_serves``);
        with the embedded ``server`` it goes through, a request that fails because that
        server cannot store anything ends at once."""
        return TurnClient(
            client,
            self.repository,
            self.resolver,
            task_queue=self.task_queue,
            hub=self.hub,
            workflow_options=self.workflow_options,
            contexts=self.contexts,
            server_check=server.check_persistence if server is not None else None,
            serves=self.check_serves if serving else None,
            listed=self.listing,
            runs_worker=serving,
        )

    def check_serves(self, state: TurnState) -> None:
        """``DependencyError`` (one line, with the fix) unless this process can run the turn:
        its snapshotted model and tools must resolve here, as the worker checks (§15.3)."""
        here = f"turn {state.definition.turn_id} cannot advance in this process"
        try:
            agent = self.contexts.resolve_agent(state.definition)
        except DependencyError as exc:
            raise DependencyError(f"{here}: {exc}") from None
        # Everything an app brings (its Python models, its tools), named together.
        missing: list[str] = []
        if agent.model.provider == "scripted":
            try:
                self.models.resolve(agent.model)
            except DependencyError as exc:
                missing.append(str(exc))
        for tool in agent.tools:
            try:
                self.tools.check(tool)
            except DependencyError as exc:
                missing.append(str(exc))
        if missing:
            named = "; ".join(dict.fromkeys(missing))  # an MCP server's tools share one message
            raise DependencyError(f"{here}: {named}; {MISSING_DEPENDENCY_HINT}")
        try:
            self.models.resolve(agent.model)
        except DependencyError as exc:  # a provider's key or table: its message says which
            raise DependencyError(
                f"{here}: {exc} (or run with --no-worker where a worker that has it serves "
                "the task queue)"
            ) from None

    @property
    def workflow_options(self) -> dict[str, Any]:
        """What the configuration sets on each turn's workflow input."""
        if self.config.max_concurrent_subagents is None:
            return {}
        return {"max_concurrent_children": self.config.max_concurrent_subagents}

    def model_override(self, override: str) -> ModelDescriptor:
        """A caller's ``PROVIDER/MODEL`` for one turn (``--model``, ``Turns.start(model=)``).

        Malformed, or naming a provider ``turns.toml`` does not configure, it is
        the caller's mistake, like an unknown agent: ``InvalidInputError``.
        (An agent's own model was checked when the configuration loaded.)
        """
        try:
            descriptor = parse_model_ref(override)
        except DependencyError as exc:
            raise InvalidInputError(str(exc)) from None
        configured = {*self.config.providers, "scripted"}
        if descriptor.provider not in configured:
            raise InvalidInputError(
                f"unknown model provider {descriptor.provider!r} in {descriptor.label()} "
                f"(configured: {', '.join(sorted(configured))})"
            )
        return descriptor

    def model_for(self, agent: str, override: str | None) -> ModelDescriptor | None:
        """The model a new turn of ``agent`` would run on (``--model`` given as ``override``)."""
        return self.resolver.model_for(
            agent, self.model_override(override) if override is not None else None
        )


def _delta_store(repository: TurnRepository) -> DeltaStore | None:
    """The repository as a live-delta store, if it is one (PostgreSQL)."""
    return repository if hasattr(repository, "get_deltas") else None  # type: ignore[return-value]


def _delta_mirror(repository: TurnRepository, root: Path) -> DeltaMirror:
    spool = DeltaSpool(spool_dir(root))
    store = _delta_store(repository)
    return spool if store is None else BothMirrors(spool, DatabaseDeltas(store))


def context_budgets(config: Config) -> Callable[[str, ModelDescriptor], int | None]:
    """An agent's context budget: its ``context_tokens``, else its provider's declared
    ``context_window``, else the window the price table knows for its model."""
    windows: dict[tuple[str, str], int | None] = {}

    def budget(agent_id: str, model: ModelDescriptor) -> int | None:
        agent = config.agents.get(agent_id)
        if agent is not None and agent.context_tokens is not None:
            return agent.context_tokens
        provider = config.providers.get(model.provider)
        if provider is not None and provider.context_window is not None:
            return provider.context_window  # declared in turns.toml
        key = (model.provider, model.model)
        if key not in windows:
            from turnclient.lib.cost import known_window

            windows[key] = known_window(provider, model)
        return windows[key]

    return budget


def summarisers(config: Config) -> Callable[[str], Summariser | None]:
    """How an agent summarises what its budget drops (``summarise_dropped``), by id."""

    def summariser(agent_id: str) -> Summariser | None:
        agent = config.agents.get(agent_id)
        chosen = agent.summariser if agent is not None else None
        if chosen is None:
            return None
        return Summariser(
            model=parse_model_ref(chosen.model) if chosen.model is not None else None,
            prompt=chosen.prompt if chosen.prompt is not None else SUMMARY_PROMPT,
            max_tokens=chosen.max_tokens,
        )

    return summariser


def turn_dependencies(
    repository: TurnRepository,
    models: ModelResolver,
    tools: ToolRegistry,
    agents: StaticAgentResolver,
    *,
    checker: PermissionChecker,
    classifier: PermissionClassifier,
    context_policy: ElisionPolicy | None = None,
    hub: LiveHub | None = None,
    context_budget: Callable[[str, ModelDescriptor], int | None] | None = None,
    summariser: Callable[[str], Summariser | None] | None = None,
    listed: ListedTools | None = None,
) -> TurnDependencies:
    """What the activities need, from the resolved parts of a runtime.

    ``Runtime.from_config`` and the test harness both wire through here: the
    context resolver reads the same repository, one ``LiveHub`` carries this
    process's deltas (a new one mirroring nowhere unless ``hub`` is given),
    timestamps come from the wall clock and child turns get fresh ids.
    """

    def load(turn_id: str) -> TurnState:
        return repository.reduced(turn_id).state

    return TurnDependencies(
        repository=repository,
        models=models,
        tools=tools,
        checker=checker,
        classifier=classifier,
        contexts=ContextResolver(load, context_policy),
        clock=iso_now,
        hub=hub if hub is not None else LiveHub(),
        agents=agents,
        ids=TurnIdGenerator(),
        context_budget=context_budget,
        summariser=summariser,
        listed=listed,
    )


# ---------------------------------------------------------------- Temporal


@dataclass(frozen=True)
class Temporal:
    """A connection: the client, and the embedded server it goes through (if any)."""

    client: Client
    address: str
    namespace: str
    server: EmbeddedServer | None = None

    @property
    def ui_url(self) -> str | None:
        if self.server is not None and self.server.info is not None:
            return self.server.info.ui_url
        return None


DEFAULT_SERVER_IDLE = 10.0
"""Seconds the embedded server outlives its last command, so the next one reuses it."""


class TemporalUnreachableError(InfrastructureError):
    """The Temporal server named by the environment does not answer."""


def server_idle_grace(env: Mapping[str, str] | None = None) -> float:
    """``TURNS_SERVER_IDLE`` seconds (0 stops the server as the last command leaves)."""
    env = os.environ if env is None else env
    raw = env.get("TURNS_SERVER_IDLE")
    if raw is None or raw == "":
        return DEFAULT_SERVER_IDLE
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInputError(
            f"TURNS_SERVER_IDLE={raw!r} is not a number of seconds (0 stops the embedded "
            "server as soon as the last command leaves)"
        ) from None
    if not value >= 0:
        raise InvalidInputError(f"TURNS_SERVER_IDLE={raw!r} must be 0 or more seconds")
    return value


def _connect_reason(text: str) -> str:
    """The operating system's words from the SDK's transport error, else its first words."""
    found = re.search(r'message: "([^"]+)"', text)
    if found:
        return found.group(1)
    flat = " ".join(text.split())
    return flat if len(flat) <= 160 else flat[:159] + "…"


def uses_embedded(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return not env.get("TEMPORAL_ADDRESS")


@dataclass(frozen=True)
class ConnectOptions:
    """How this process talks to Temporal beyond the address: codec, tracing, telemetry."""

    payload_codec: PayloadCodec | None = None
    """Encrypts every payload (``[temporal] payload_key_env``); None: plain JSON."""
    interceptors: Sequence[Interceptor] = ()
    """Temporal's tracing interceptor when OTEL_* asks for traces."""
    runtime: TemporalRuntime | None = None
    """A runtime with a metrics endpoint (``turns worker --metrics``); None: the default."""

    @classmethod
    def for_config(
        cls,
        config: Config,
        env: Mapping[str, str] | None = None,
        *,
        metrics: str | None = None,
    ) -> ConnectOptions:
        """The options ``turns.toml`` and the environment ask for (all off by default)."""
        from turnclient.runtime.telemetry import (
            TelemetryError,
            configure_tracing,
            metrics_runtime,
            tracing_interceptors,
        )

        codec: PayloadCodec | None = None
        try:
            if config.payload_key_env is not None:
                codec = _payload_codec(config.payload_key_env, env)
            tracing = configure_tracing(env)
            runtime = metrics_runtime(metrics, env) if metrics is not None else None
        except TelemetryError as exc:
            raise ConfigError(str(exc)) from None
        return cls(payload_codec=codec, interceptors=tracing_interceptors(tracing), runtime=runtime)


def _payload_codec(key_env: str, env: Mapping[str, str] | None) -> PayloadCodec:
    try:
        from turnclient.runtime.codec import PayloadKeyError, codec_from_env
    except ImportError:  # the codec needs the encryption extra
        raise ConfigError(
            "turns.toml [temporal] payload_key_env turns on payload encryption, which needs "
            f"the cryptography package: {install_hint('encryption')}"
        ) from None
    try:
        codec = codec_from_env(key_env, env)
    except PayloadKeyError as exc:
        raise ConfigError(str(exc)) from None
    assert codec is not None
    return codec


def data_converter(options: ConnectOptions) -> DataConverter:
    """The turn payloads' converter, with the codec composed onto it (if encryption is on)."""
    base = DATA_CONVERTER
    if options.payload_codec is None:
        return base
    return dataclasses.replace(base, payload_codec=options.payload_codec)


def _connect_kwargs(options: ConnectOptions) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "data_converter": data_converter(options),
        "interceptors": list(options.interceptors),
    }
    if options.runtime is not None:
        kwargs["runtime"] = options.runtime
    return kwargs


@contextlib.asynccontextmanager
async def temporal(
    work_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    ui: bool = False,
    ui_port: int | None = None,
    port: int | None = None,
    options: ConnectOptions | None = None,
) -> AsyncIterator[Temporal]:
    """Connect to ``TEMPORAL_ADDRESS``, or join the work dir's embedded server for the block.

    ``port`` is the embedded server's preferred gRPC port when this call
    starts it (another free one otherwise, with a note).
    """
    env = os.environ if env is None else env
    extra = _connect_kwargs(options or ConnectOptions())
    if not uses_embedded(env):
        connect = ClientConfig.load_client_connect_config(override_env_vars=dict(env))
        address = str(connect.get("target_host") or env.get("TEMPORAL_ADDRESS"))
        try:
            client = await Client.connect(**connect, **extra)
        except RuntimeError as exc:
            raise TemporalUnreachableError(
                f"cannot reach Temporal at {address} (from TEMPORAL_ADDRESS): "
                f"{_connect_reason(str(exc))}. Start that server, or unset TEMPORAL_ADDRESS "
                "to use the embedded one"
            ) from None
        yield Temporal(client, client.service_client.config.target_host, client.namespace)
        return
    server = EmbeddedServer(
        work_dir,
        SEARCH_ATTRIBUTES,
        ui=ui,
        ui_port=ui_port,
        port=port,
        idle_grace=server_idle_grace(env),
    )
    info = await server.acquire()
    try:
        server.check_persistence()  # a server left running over a deleted database
        client = await Client.connect(info.address, namespace=NAMESPACE, **extra)
        yield Temporal(client, info.address, NAMESPACE, server)
    finally:
        await server.release()


__all__ = [
    "ConnectOptions",
    "RuleClassifier",
    "Runtime",
    "Temporal",
    "TemporalUnreachableError",
    "data_converter",
    "server_idle_grace",
    "temporal",
    "turn_dependencies",
    "uses_embedded",
]
