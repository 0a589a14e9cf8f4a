"""§27.4 agent resolution: model precedence and fallback, the system-prompt and
tool snapshot, availability filtering, stable tool ids, a failed resolution
writes nothing, and agent edits after creation do not reach the turn."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.harness import MODEL, Harness, sync_tool
from tests.test_workflow_scenarios import Recorder
from turnclient.lib.api import CreateTurnInput
from turncore.agents import AgentDefinition, StaticAgentResolver
from turncore.compose import compose_model_request
from turncore.errors import DependencyError
from turncore.events import AgentOverrides, ModelDescriptor, RequestedAgent
from turncore.messages import UserMessage

AGENT_MODEL = ModelDescriptor(provider="acme", model="agent-model")
DEFAULT = ModelDescriptor(provider="acme", model="default-model")
OVERRIDE = ModelDescriptor(provider="other", model="override-model")
CATALOG = {n: sync_tool(n) for n in ("read", "write", "shell")}


def resolver(**kw: object) -> StaticAgentResolver:
    agents = {
        "coder": AgentDefinition("coder", "You code.", ["read", "write", "shell"], AGENT_MODEL),
        "plain": AgentDefinition("plain", "You chat.", ["read"]),
    }
    return StaticAgentResolver(agents=agents, catalog=CATALOG, **kw)  # type: ignore[arg-type]


def test_model_precedence_override_then_agent_then_default() -> None:
    r = resolver(default_model=DEFAULT)
    with_override = RequestedAgent(agent_id="coder", overrides=AgentOverrides(model=OVERRIDE))
    assert r.resolve(with_override).model == OVERRIDE
    assert r.resolve(RequestedAgent(agent_id="coder")).model == AGENT_MODEL
    assert r.resolve(RequestedAgent(agent_id="plain")).model == DEFAULT


def test_no_model_anywhere_and_unknown_agents_or_tools_fail_resolution() -> None:
    with pytest.raises(DependencyError, match="no default model"):
        resolver().resolve(RequestedAgent(agent_id="plain"))
    with pytest.raises(DependencyError, match="unknown agent 'ghost'"):
        resolver(default_model=DEFAULT).resolve(RequestedAgent(agent_id="ghost"))
    broken = StaticAgentResolver(
        agents={"a": AgentDefinition("a", "p", ["missing"], AGENT_MODEL)}, catalog=CATALOG
    )
    with pytest.raises(DependencyError, match="unknown tool 'missing'"):
        broken.resolve(RequestedAgent(agent_id="a"))


def test_tools_are_filtered_by_availability_in_order_with_stable_ids() -> None:
    r = resolver(available=frozenset({"read", "shell"}))
    resolved = r.resolve(RequestedAgent(agent_id="coder"))
    assert [t.name for t in resolved.tools] == ["read", "shell"]
    assert [t.tool_id for t in resolved.tools] == ["builtin:read", "builtin:shell"]
    assert resolved.system_prompt == "You code."
    # Resolving again gives the same identities (toolId is the catalog's, not minted).
    assert r.resolve(RequestedAgent(agent_id="coder")) == resolved


async def test_a_failed_resolution_creates_no_file(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(temporal_env.client, tmp_path, []) as h:
        with pytest.raises(DependencyError, match="unknown agent"):
            await h.turns.create_turn(
                CreateTurnInput(
                    agent=RequestedAgent(agent_id="nobody"),
                    input=UserMessage(content="hi"),
                    human_available=True,
                )
            )
        assert not list(tmp_path.rglob("*.jsonl"))


async def test_the_snapshot_is_final_agent_edits_after_creation_do_not_reach_the_turn(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    recorder = Recorder([{"text": "done"}])
    async with Harness(
        temporal_env.client,
        tmp_path,
        recorder,
        tools=[sync_tool("read")],
        implementations={"read": lambda v, c: "ok"},
    ) as h:
        turn_id = await h.create("hello")
        created = h.lines(turn_id)[0]["agent"]["resolved"]
        assert created["systemPrompt"] == "You are a test agent."
        assert [t["toolId"] for t in created["tools"]] == ["builtin:read"]
        # The agent is edited after creation: new prompt, tool gone, other model.
        h.resolver.agents["test"] = AgentDefinition(
            "test", "EDITED prompt", [], ModelDescriptor(provider="x", model="y")
        )
        outcome = await h.turns.advance_turn(turn_id).outcome
        assert outcome.status == "completed"
        sent = recorder.requests[0]  # what the model received: the snapshot
        assert sent.system == "You are a test agent."
        assert [t.name for t in sent.tools] == ["read"]
        state = h.file_state(turn_id)
        composed = compose_model_request(h.contexts.resolve_agent(state.definition), [], state, 0)
        assert composed.system == "You are a test agent."
        assert [t.name for t in composed.tools] == ["read"]
        assert state.definition.agent.resolved.model == MODEL
