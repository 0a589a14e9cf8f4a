"""The context budget: earlier turns are dropped oldest first, whole exchanges at a time;
the current turn over budget fails before dispatch; the file records what was dropped."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.test_embedded import kill_stragglers
from turnclient import Agent, ConfigError, Turns, tool
from turnclient.runtime.config import load_config
from turncore.budget import (
    BUDGET_KEY,
    ContextBudgetExceeded,
    TokenEstimates,
    fixed_tokens,
    plan_drop,
)
from turncore.compose import compose_model_request
from turncore.events import InheritedAgentSnapshot, ResolvedAgent
from turncore.messages import (
    AssistantMessage,
    ConversationMessage,
    ToolCallPart,
    ToolMessage,
    ToolResultOutput,
    ToolResultPart,
    UserMessage,
)
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index

U = UserMessage
A = AssistantMessage


def _exchange(n: int, tool: bool = False) -> list[ConversationMessage]:
    if not tool:
        return [U(content=f"question {n}"), A(content=f"answer {n}")]
    call = A(content=[ToolCallPart(tool_call_id=f"c{n}", tool_name="t", input={"n": n})])
    result = ToolMessage(
        content=[
            ToolResultPart(
                tool_call_id=f"c{n}", tool_name="t", output=ToolResultOutput(type="json", value=n)
            )
        ]
    )
    return [U(content=f"question {n}"), call, result, A(content=f"answer {n}")]


def test_the_budget_drops_whole_exchanges_oldest_first_and_keeps_the_current_turn() -> None:
    prefix = [*_exchange(0), *_exchange(1, tool=True), *_exchange(2), *_exchange(3, tool=True)]
    sizes = TokenEstimates()
    tokens = [sizes.of(m) for m in prefix]
    total = sum(tokens)
    assert plan_drop(total + 30, 10, prefix, tokens, 20) == 0  # it fits: nothing dropped
    # One token over: the first exchange goes, not just its first message.
    assert plan_drop(total + 29, 10, prefix, tokens, 20) == 2
    # Past the first exchange: the cut never lands between a call and its result.
    for budget in range(30, total + 30):
        try:
            k = plan_drop(budget, 10, prefix, tokens, 20)
        except ContextBudgetExceeded:
            pytest.fail("dropping the whole prefix always fits here")
        assert k == len(prefix) or isinstance(prefix[k], UserMessage)
        assert 10 + sum(tokens[k:]) + 20 <= budget
        if k:  # the smallest cut that fits: the one before it did not
            cuts = [i for i in range(k) if isinstance(prefix[i], UserMessage)]
            assert 10 + sum(tokens[cuts[-1] :]) + 20 > budget
    assert plan_drop(30, 10, prefix, tokens, 20) == len(prefix)  # all of it, still fits


def test_the_current_turn_alone_over_budget_names_the_budget_and_the_size() -> None:
    with pytest.raises(ContextBudgetExceeded) as raised:
        plan_drop(25, 10, [], [], 20)
    assert raised.value.budget == 25 and raised.value.size == 30
    assert "~30 tokens" in str(raised.value) and "budget of 25 tokens" in str(raised.value)


def test_a_budget_smaller_than_the_system_prompt_is_a_config_error_at_load(
    tmp_path: Path,
) -> None:
    prompt = "You are a careful assistant. " * 20
    (tmp_path / "turns.toml").write_text(
        f'[agents.tight]\nsystem_prompt = "{prompt}"\nmodel = "scripted/x"\ncontext_tokens = 50\n'
    )
    with pytest.raises(ConfigError, match=r"agents\.tight: context_tokens = 50 is smaller"):
        load_config(tmp_path, {})
    (tmp_path / "turns.toml").write_text(
        '[agents.bad]\nsystem_prompt = "s"\nmodel = "scripted/x"\ncontext_tokens = 0\n'
    )
    with pytest.raises(ConfigError, match="context_tokens"):
        load_config(tmp_path, {})
    (tmp_path / "turns.toml").unlink()
    with pytest.raises(ConfigError, match=r"agents\.tight: context_tokens = 50 is smaller"):
        Turns(
            tmp_path, agents=[Agent(name="tight", system_prompt=prompt, context_tokens=50)], env={}
        )


class Recorder:
    """A model answering every turn in one line, keeping the messages it was sent."""

    def __init__(self) -> None:
        self.sent: list[list[ConversationMessage]] = []

    def __call__(self, request: ModelCallRequest) -> dict[str, Any]:
        self.sent.append(list(request.messages))
        return {"text": f"answer {len(self.sent)}", "usage": {"inputTokens": 1, "outputTokens": 1}}


def _runtime(env: WorkflowEnvironment, tmp_path: Path, **kwargs: Any) -> Turns:
    return Turns(
        tmp_path, client=env.client, env={"TURNS_TASK_QUEUE": f"tq-{uuid.uuid4()}"}, **kwargs
    )


async def test_a_long_conversation_stays_in_budget_and_the_file_reproduces_each_request(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    model = Recorder()
    chat = Agent(name="chat", system_prompt="Chat.", model="scripted/rec", context_tokens=120)
    async with _runtime(temporal_env, tmp_path, agents=[chat], models={"rec": model}) as turns:
        last = None
        ids = []
        for i in range(8):
            result = await turns.run(f"message number {i}", agent="chat", continue_from=last)
            assert result.status == "completed"
            ids.append(last := result.turn_id)
        sizes = TokenEstimates()
        fixed = fixed_tokens("Chat.", ())
        dropped_any = False
        for i, (turn_id, sent) in enumerate(zip(ids, model.sent, strict=True)):
            assert sent[-1] == U(content=f"message number {i}")  # the current turn, always
            assert isinstance(sent[0], UserMessage)  # a whole exchange first
            assert fixed + sum(sizes.of(m) for m in sent) <= 120
            events = await turns.events(turn_id)
            requested = next(e for e in events if e.type == "model_call_requested")
            record = requested.request.parameters[BUDGET_KEY]  # type: ignore[union-attr]
            assert record["tokens"] == 120
            dropped_any |= record["dropped"] > 0
            # What `turns inspect` does: compose from the file alone, the same request.
            state = await turns.state(turn_id)
            agent = turns.runtime.contexts.resolve_agent(state.definition)
            context = turns.runtime.contexts.resolve(state.definition.context)
            composed = compose_model_request(agent, context, state, 0)
            assert composed.messages == sent
            assert BUDGET_KEY not in composed.parameters
            assert len(context) - record["dropped"] + 1 == len(sent)
        assert dropped_any  # the conversation did outgrow the budget
        assert len(model.sent[-1]) < 2 * 8 - 1  # and later turns sent less than everything


async def test_a_turn_over_budget_on_its_own_fails_before_dispatch(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    model = Recorder()
    chat = Agent(name="chat", system_prompt="Chat.", model="scripted/rec", context_tokens=60)
    async with _runtime(temporal_env, tmp_path, agents=[chat], models={"rec": model}) as turns:
        result = await turns.run("word " * 200, agent="chat")
        assert result.status == "failed"
        assert model.sent == []  # nothing was sent
        outcome = result.outcome.to_wire()
        assert outcome["code"] == "model-call-failed:context-budget:not-sent"
        assert "budget of 60 tokens" in outcome["error"] and "~2" in outcome["error"]


@tool(permission="none")
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(permission="none")
def shout(text: str) -> str:
    """Shout."""
    return text.upper()


async def test_continuing_a_turn_of_an_agent_with_other_tools_keeps_its_transcript(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """§6.6/§6.7: the context is the earlier turn's closed transcript, its tool calls
    and results included, whatever the new agent's tools; the snapshot is inherited
    only when prompt and tools are byte-identical, so here it is the full one."""
    sent: list[list[ConversationMessage]] = []

    def model(request: ModelCallRequest) -> dict[str, Any]:
        sent.append(list(request.messages))
        if call_index(request.messages) == 0 and len(sent) == 1:
            return {"toolCalls": [{"toolName": "lookup", "input": {"key": "k"}}]}
        return {"text": "done"}

    first = Agent(name="first", system_prompt="Look up.", tools=(lookup,), model="scripted/m")
    second = Agent(name="second", system_prompt="Look up.", tools=(shout,), model="scripted/m")
    async with _runtime(
        temporal_env, tmp_path, agents=[first, second], models={"m": model}
    ) as turns:
        a = await turns.run("find k", agent="first")
        b = await turns.run("now shout it", agent="second", continue_from=a.turn_id)
        assert a.status == b.status == "completed"
        created = (await turns.events(b.turn_id))[0]
        assert created.type == "turn_created"
        assert isinstance(created.agent.resolved, ResolvedAgent)
        assert not isinstance(created.agent.resolved, InheritedAgentSnapshot)
        assert [t.name for t in created.agent.resolved.tools] == ["shout"]
        prefix = sent[-1]
        assert prefix[0] == U(content="find k")
        assert any(isinstance(m, ToolMessage) for m in prefix)  # lookup's result rides along
        assert prefix[-1] == U(content="now shout it")


BUDGET_AGENT = """
default_agent = "chat"

[agents.chat]
system_prompt = "Chat."
model = "scripted/chat.json"
context_tokens = 90
"""


@pytest.mark.temporal  # starts an embedded dev server through the CLI
def test_turns_run_continue_drops_earlier_turns_and_inspect_shows_it(tmp_path: Path) -> None:
    from tests.test_cli_terminal import turns as cli

    home = tmp_path / "home"
    home.mkdir()
    (home / "turns.toml").write_text(BUDGET_AGENT)
    (home / "chat.json").write_text('{"responses": [{"text": "noted, thank you"}]}')
    idle = {"TURNS_SERVER_IDLE": "60"}  # the commands share one embedded server
    try:
        first = cli(home, "run", "--json", "message number zero", **idle)
        assert first.returncode == 0, first.stderr
        for i in range(1, 6):
            r = cli(home, "run", "--json", "--continue", "last", f"message number {i}", **idle)
            assert r.returncode == 0, r.stderr
        shown = cli(home, "inspect", "last", "--json")
        assert shown.returncode == 0, shown.stderr
        request = json.loads(shown.stdout)
        assert request["contextBudget"]["tokens"] == 90
        assert request["contextBudget"]["dropped"] > 0
        assert request["messages"][0]["role"] == "user"
        assert request["messages"][-1] == {"role": "user", "content": "message number 5"}
        text = cli(home, "inspect", "last")
        assert "budget     90 tokens: dropped the" in text.stdout
        over = cli(home, "run", "--json", "--continue", "last", "word " * 300, **idle)
        assert over.returncode != 0
        failed = json.loads(over.stdout)
        assert failed["status"] == "failed"
        assert "budget of 90 tokens" in failed["error"]
    finally:
        kill_stragglers(home)


def test_the_default_budget_is_the_models_known_window(tmp_path: Path) -> None:
    from turnclient.runtime.connection import context_budgets
    from turncore.events import ModelDescriptor

    (tmp_path / "turns.toml").write_text(
        '[providers.openai]\nkind = "openai-responses"\napi_key_env = "OPENAI_API_KEY"\n\n'
        '[agents.wide]\nsystem_prompt = "s"\nmodel = "openai/gpt-4.1"\n\n'
        '[agents.narrow]\nsystem_prompt = "s"\nmodel = "openai/gpt-4.1"\n'
        "context_tokens = 5000\n"
    )
    budget = context_budgets(load_config(tmp_path, {}))
    gpt = ModelDescriptor(provider="openai", model="gpt-4.1")
    window = budget("wide", gpt)
    assert window is not None and window >= 128_000  # the price table's context window
    assert budget("narrow", gpt) == 5000  # the agent's own budget wins
    # A model the table does not know (a scripted one, a private one): no budget.
    assert budget("wide", ModelDescriptor(provider="scripted", model="x.json")) is None
    assert budget("wide", ModelDescriptor(provider="openai", model="no-such-model")) is None
    # A provider's declaration comes before the table (a local server knows its own).
    (tmp_path / "turns.toml").write_text(
        '[providers.local]\nkind = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
        "context_window = 32768\n\n"
        '[agents.wide]\nsystem_prompt = "s"\nmodel = "local/qwen"\n'
    )
    local = context_budgets(load_config(tmp_path, {}))
    assert local("wide", ModelDescriptor(provider="local", model="qwen")) == 32768
    (tmp_path / "turns.toml").write_text(
        '[providers.local]\nkind = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
        "context_window = 0\n"
    )
    with pytest.raises(ConfigError, match="context_window must be a positive number"):
        load_config(tmp_path, {})
