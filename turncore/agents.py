"""Agent resolution (spec §6.1–§6.4): requested agent in, immutable snapshot out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .errors import DependencyError
from .events import (
    AgentOverrides,
    ModelDescriptor,
    RequestedAgent,
    ResolvedAgent,
    ToolDescriptor,
)
from .output import OutputSpec


class AgentResolver(Protocol):
    def resolve(self, agent: RequestedAgent) -> ResolvedAgent: ...


@dataclass(frozen=True)
class AgentDefinition:
    agent_id: str
    system_prompt: str
    tools: Sequence[str] = ()
    """Tool names from the catalog, in the order they are advertised."""
    model: ModelDescriptor | None = None
    fallbacks: Sequence[ModelDescriptor] = ()
    """Models tried in order after ``model`` fails with a transient or unavailable error."""
    output: OutputSpec | None = None
    """What the final answer must be (``turncore.output``); None: free text."""


FALLBACK_MODELS = "fallbackModels"
"""The key of ``requested.overrides.composition`` that carries a turn's fallback models."""


def fallback_composition(
    agent: RequestedAgent, fallbacks: Sequence[ModelDescriptor]
) -> RequestedAgent:
    """``agent`` with its fallback models persisted in ``overrides.composition`` (§6.1: opaque
    composition hints, persisted verbatim), so the turn's file says what it may fall back to."""
    if not fallbacks:
        return agent
    overrides = agent.overrides or AgentOverrides()
    if overrides.model is not None:
        return agent  # an explicit model replaces the whole chain
    base = overrides.composition if isinstance(overrides.composition, dict) else {}
    if overrides.composition is not None and not isinstance(overrides.composition, dict):
        return agent  # a caller's own non-object composition is kept as it is
    composition = {**base, FALLBACK_MODELS: [m.to_wire() for m in fallbacks]}
    return agent.model_copy(
        update={"overrides": overrides.model_copy(update={"composition": composition})}
    )


def fallback_models(agent: RequestedAgent) -> list[ModelDescriptor]:
    """The fallback models a turn's requested agent carries (none if absent or malformed)."""
    overrides = agent.overrides
    if overrides is None or overrides.model is not None:
        return []
    composition = overrides.composition
    if not isinstance(composition, dict):
        return []
    listed = composition.get(FALLBACK_MODELS)
    if not isinstance(listed, list):
        return []
    out: list[ModelDescriptor] = []
    for item in listed:
        try:
            out.append(ModelDescriptor.model_validate(item))
        except ValueError:
            return []
    return out


@dataclass
class StaticAgentResolver:
    """Agents and a tool catalog from configuration.

    Model precedence is ``model_for``'s (§6.2).
    """

    agents: Mapping[str, AgentDefinition]
    catalog: Mapping[str, ToolDescriptor]
    default_model: ModelDescriptor | None = None
    available: frozenset[str] | None = field(default=None)
    """Tool names available in this environment (None: all); others are filtered out."""

    def fallbacks_for(self, agent: RequestedAgent) -> Sequence[ModelDescriptor]:
        """The agent's fallback models, unless the request overrides its model."""
        definition = self.agents.get(agent.agent_id)
        if definition is None or (agent.overrides is not None and agent.overrides.model):
            return ()
        return definition.fallbacks

    def output_for(self, agent: RequestedAgent) -> OutputSpec | None:
        """The structured output the agent asks for (persisted with ``with_output``)."""
        definition = self.agents.get(agent.agent_id)
        return definition.output if definition is not None else None

    def model_for(
        self, agent_id: str, override: ModelDescriptor | None = None
    ) -> ModelDescriptor | None:
        """The model a turn of ``agent_id`` runs on (§6.2): the request's override,
        then the agent's model, then the application default; None if none is set."""
        definition = self.agents.get(agent_id)
        return override or (definition.model if definition else None) or self.default_model

    def resolve(self, agent: RequestedAgent) -> ResolvedAgent:
        definition = self.agents.get(agent.agent_id)
        if definition is None:
            known = ", ".join(sorted(self.agents)) or "none"
            raise DependencyError(f"unknown agent {agent.agent_id!r} (known agents: {known})")
        model = self.model_for(agent.agent_id, agent.overrides.model if agent.overrides else None)
        if model is None:
            raise DependencyError(
                f"agent {agent.agent_id!r} names no model and there is no default model"
            )
        tools: list[ToolDescriptor] = []
        for name in definition.tools:
            descriptor = self.catalog.get(name)
            if descriptor is None:
                raise DependencyError(f"agent {agent.agent_id!r} uses unknown tool {name!r}")
            if self.available is not None and name not in self.available:
                continue
            tools.append(descriptor)
        return ResolvedAgent(
            agent_id=definition.agent_id,
            system_prompt=definition.system_prompt,
            model=model,
            tools=tools,
        )


class ListedTools(Protocol):
    """Tools an agent gets from elsewhere (MCP servers), listed once when a turn is created.

    ``tools_for`` does the I/O (bounded by its own timeout) and raises
    ``DependencyError`` naming what is down or wrong; its descriptors are
    snapshotted into ``turn_created`` like any other (§6.3, §6.4).
    """

    async def tools_for(self, agent_id: str) -> list[ToolDescriptor]: ...


async def resolve_listed(
    resolver: AgentResolver, listed: ListedTools | None, agent: RequestedAgent
) -> ResolvedAgent:
    """``resolver.resolve(agent)`` plus the tools ``listed`` gives the agent, after its own.

    Two tools advertised under one name (across servers, or beside a configured
    tool) are a ``DependencyError`` naming both tool ids: the model could not
    tell them apart.
    """
    return await with_listed(resolver.resolve(agent), listed)


async def with_listed(resolved: ResolvedAgent, listed: ListedTools | None) -> ResolvedAgent:
    """``resolved`` plus the tools ``listed`` gives its agent (see ``resolve_listed``)."""
    if listed is None:
        return resolved
    extra = await listed.tools_for(resolved.agent_id)
    if not extra:
        return resolved
    by_name: dict[str, str] = {}
    for t in [*resolved.tools, *extra]:
        other = by_name.get(t.name)
        if other is not None:
            raise DependencyError(
                f"agent {resolved.agent_id!r}: two tools are advertised under the name "
                f"{t.name!r}: {other} and {t.tool_id}; set a prefix on the MCP server "
                "([mcp.NAME] prefix) or deny one of them"
            )
        by_name[t.name] = t.tool_id
    return resolved.model_copy(update={"tools": [*resolved.tools, *extra]})
