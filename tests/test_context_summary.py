"""Summarising what the context budget drops (``[agents.NAME] summarise_dropped``).

The summary is its own recorded model call — a one-call turn of its own, read by
every tool like any turn — the main request carries it first, its cost counts in
the turn that ran it, a cut that has not moved reuses it, and recovery never runs
it again (the main call's record in the file is the truth).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.test_embedded import kill_stragglers
from tests.test_notify import hook_env, receiver, toml  # noqa: F401  (hook_env: a fixture)
from turnclient import Agent, ConfigError, Turns, tool
from turnclient.lib.cost import Price, Pricer, ProviderPrice
from turnclient.runtime.config import SummariseDropped, load_config
from turnclient.runtime.notify import notify_dir
from turncore.budget import (
    BUDGET_KEY,
    SUMMARY_PROMPT,
    Summariser,
    is_summary_turn,
    summary_message,
)
from turncore.compose import compose_model_request
from turncore.events import ModelCallRequested, ModelDescriptor, TurnUsage
from turncore.ids import turn_path
from turncore.messages import ConversationMessage, UserMessage
from turncore.model import ModelCallRequest


class Recorder:
    """A model answering in one line, keeping the messages (and system prompt) it was sent."""

    def __init__(self, answer: str, usage: dict[str, int]) -> None:
        self.answer = answer
        self.usage = usage
        self.sent: list[list[ConversationMessage]] = []
        self.systems: list[str] = []
        self.limits: list[int | None] = []

    def __call__(self, request: ModelCallRequest) -> dict[str, Any]:
        self.sent.append(list(request.messages))
        self.systems.append(request.system)
        self.limits.append(request.max_output_tokens)
        return {"text": f"{self.answer} {len(self.sent)}", "usage": self.usage}


def _runtime(env: WorkflowEnvironment, tmp_path: Path, **kwargs: Any) -> Turns:
    return Turns(
        tmp_path, client=env.client, env={"TURNS_TASK_QUEUE": f"tq-{uuid.uuid4()}"}, **kwargs
    )


def _record(events: list[Any], index: int = 0) -> dict[str, Any]:
    requested = [e for e in events if isinstance(e, ModelCallRequested)]
    return dict(requested[index].request.parameters.get(BUDGET_KEY) or {})


CHAT = Agent(
    name="chat",
    system_prompt="Chat.",
    model="scripted/rec",
    context_tokens=200,
    summarise_dropped=SummariseDropped(model="scripted/sum", prompt="Summarise.", max_tokens=40),
)


async def test_dropped_messages_are_summarised_by_a_recorded_call_and_reused(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    chat = Recorder("answer", {"inputTokens": 10, "outputTokens": 1})
    summariser = Recorder("summary", {"inputTokens": 1000, "outputTokens": 100})
    models = {"rec": chat, "sum": summariser}
    ids: list[str] = []
    records: list[dict[str, Any]] = []
    async with _runtime(temporal_env, tmp_path, agents=[CHAT], models=models) as turns:
        last = None
        for i in range(10):
            result = await turns.run(f"message number {i}", agent="chat", continue_from=last)
            assert result.status == "completed", result.outcome.to_wire()
            ids.append(last := result.turn_id)
            records.append(_record(await turns.events(last)))
        made = [r for r in records if "usage" in r.get("summary", {})]
        assert len(made) == len(summariser.sent) >= 2  # every summary call is on record
        previous = 0
        for turn_id, sent, record in zip(ids, chat.sent, records, strict=True):
            if record["dropped"] == 0:
                assert "summary" not in record
                continue
            summary = record["summary"]
            assert summary["sent"] is True
            # The main request carries the summary first, then the kept messages.
            assert sent[0] == summary_message(record["dropped"], summary["text"])
            assert isinstance(sent[1], UserMessage)
            # A new summary call only when the cut moved; otherwise the recorded one.
            assert ("usage" in summary) == (record["dropped"] != previous)
            # The file alone reproduces the request (what `turns inspect` composes).
            state = await turns.state(turn_id)
            agent = turns.runtime.contexts.resolve_agent(state.definition)
            context = turns.runtime.contexts.resolve(state.definition.context)
            assert compose_model_request(agent, context, state, 0).messages == sent
            # The summary call: a spec turn of one completed model call, no session.
            made_by = await turns.state(summary["turnId"])
            assert made_by.terminal is not None and made_by.terminal.type == "turn_completed"
            assert len(made_by.model_calls) == 1 and made_by.definition.session_id is None
            response = made_by.model_calls[0].response
            assert response is not None and response.text() == summary["text"]
            assert made_by.definition.agent.resolved.agent_id == "chat.summarise-dropped"
            assert made_by.model_calls[0].request.parameters == {"maxOutputTokens": 40}
            if "usage" in summary:
                assert summary["model"] == "scripted/sum"
                assert summary["usage"] == {"inputTokens": 1000, "outputTokens": 100}
                # Its context is what is newly dropped: the messages between the earlier
                # cut and this one (the earlier summary rides in its input) — of those,
                # as many of the newest as one summary call within the budget can read.
                span = made_by.definition.context
                assert isinstance(span, list) and span
                start = record["dropped"] - len(span)
                assert previous <= start and span == context[start : record["dropped"]]
                if previous:
                    assert "summary" in made_by.definition.input.content  # type: ignore[operator]
            previous = record["dropped"]
        assert summariser.systems == ["Summarise."] * len(summariser.sent)
        assert summariser.limits == [40] * len(summariser.sent)

        # Its cost is counted in the turn that ran it: 1000 in and 100 out at $1/$2 a
        # million tokens on top of the turn's own call (10 in, 1 out).
        price = ProviderPrice(default=Price(Decimal(1), Decimal(2)))
        pricer = Pricer({}, {"scripted": price})
        paid = ids[records.index(made[0])]
        total, calls = pricer.turn_costs(await turns.state(paid))
        assert total is not None and total.amount == Decimal(1000 + 200 + 10 + 2) / 1_000_000
        unpaid = [
            t for t, r in zip(ids, records, strict=True) if "usage" not in r.get("summary", {})
        ]
        total, calls = pricer.turn_costs(await turns.state(unpaid[-1]))
        assert total is not None and total.amount == Decimal(10 + 2) / 1_000_000

    # Recovery: the last turn that summarised loses everything after its main call's
    # request (the worker died as the model answered). The re-issued call reuses the
    # recorded summary — the file is the truth — and the summariser is not called.
    turn_id = ids[records.index(made[-1])]
    path = turn_path(tmp_path, turn_id)
    lines = path.read_bytes().splitlines(keepends=True)
    first_request = next(i for i, x in enumerate(lines) if b'"model_call_requested"' in x)
    path.write_bytes(b"".join(lines[: first_request + 1]))
    calls_before = len(summariser.sent)
    async with _runtime(temporal_env, tmp_path, agents=[CHAT], models=models) as turns:
        outcome = await turns.recover(turn_id)
        assert outcome.status == "completed"
        events = await turns.events(turn_id)
        reissued = _record(events, 1)
        assert reissued["dropped"] == made[-1]["dropped"]
        assert reissued["summary"]["turnId"] == made[-1]["summary"]["turnId"]
        assert "usage" not in reissued["summary"]  # not paid twice
        assert len(summariser.sent) == calls_before
        assert chat.sent[-1] == chat.sent[ids.index(turn_id)]  # the same request again


async def test_a_failing_summariser_falls_back_to_plain_dropping_on_record(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    chat = Recorder("answer", {"inputTokens": 1, "outputTokens": 1})
    tried: list[int] = []

    def broken(request: ModelCallRequest) -> dict[str, Any]:
        tried.append(1)
        return {"error": "the summariser is down", "errorKind": "transport"}

    async with _runtime(
        temporal_env, tmp_path, agents=[CHAT], models={"rec": chat, "sum": broken}
    ) as turns:
        last = None
        records = []
        for i in range(8):
            result = await turns.run(f"message number {i}", agent="chat", continue_from=last)
            assert result.status == "completed"  # the turn goes on without a summary
            last = result.turn_id
            records.append(_record(await turns.events(last)))
        failed = [r for r in records if "summary" in r]
        assert failed and all(
            "error" in r["summary"] and "text" not in r["summary"] for r in failed
        )
        made_by = await turns.state(failed[0]["summary"]["turnId"])
        assert is_summary_turn(made_by.definition)
        assert made_by.terminal is not None and made_by.terminal.type == "turn_failed"
        assert len(tried) == len({r["dropped"] for r in failed})  # once per cut, not per call
        for sent, record in zip(chat.sent, records, strict=True):
            if record["dropped"]:  # the kept messages alone, no summary before them
                assert isinstance(sent[0], UserMessage)
                assert str(sent[0].content).startswith("message number")


def test_summarising_needs_a_known_model_and_a_prompt_with_words(tmp_path: Path) -> None:
    base = '[agents.chat]\nsystem_prompt = "Chat."\nmodel = "scripted/x"\ncontext_tokens = 500\n'
    (tmp_path / "turns.toml").write_text(base + "summarise_dropped = true\n")
    config = load_config(tmp_path, {})
    assert config.agents["chat"].summariser == SummariseDropped()
    from turnclient.runtime.connection import summarisers

    assert summarisers(config)("chat") == Summariser(model=None, prompt=SUMMARY_PROMPT)
    assert summarisers(config)("nobody") is None
    (tmp_path / "turns.toml").write_text(
        base + '[agents.chat.summarise_dropped]\nmodel = "nowhere/m"\n'
    )
    with pytest.raises(ConfigError, match=r"agents\.chat\.summarise_dropped\.model: provider"):
        load_config(tmp_path, {})
    (tmp_path / "turns.toml").write_text(base + '[agents.chat.summarise_dropped]\nprompt = " "\n')
    with pytest.raises(ConfigError, match=r"agents\.chat\.summarise_dropped\.prompt is empty"):
        load_config(tmp_path, {})
    (tmp_path / "turns.toml").write_text(base + "[agents.chat.summarise_dropped]\nmax_tokens = 0\n")
    with pytest.raises(ConfigError, match="max_tokens"):
        load_config(tmp_path, {})
    (tmp_path / "turns.toml").write_text(base + '[agents.chat.summarise_dropped]\nmodle = "x"\n')
    with pytest.raises(ConfigError, match="modle"):
        load_config(tmp_path, {})
    (tmp_path / "turns.toml").unlink()
    for bad, match in (
        (SummariseDropped(model="nowhere/m"), r"agents\.c\.summarise_dropped\.model"),
        (SummariseDropped(prompt=""), r"agents\.c\.summarise_dropped\.prompt is empty"),
    ):
        with pytest.raises(ConfigError, match=match):
            Turns(tmp_path, agents=[Agent(name="c", system_prompt="s", summarise_dropped=bad)])


def test_the_summariser_record_is_costed_from_the_file_alone() -> None:
    from turnclient.lib.cost import _summary_usage

    found = _summary_usage(
        {BUDGET_KEY: {"summary": {"model": "scripted/s", "usage": {"inputTokens": 3}}}}
    )
    assert found == (ModelDescriptor(provider="scripted", model="s"), TurnUsage(input_tokens=3))
    assert _summary_usage({BUDGET_KEY: {"summary": {"turnId": "x", "text": "t"}}}) is None


SUMMARY_AGENT = """
default_agent = "chat"

[agents.chat]
system_prompt = "Chat."
model = "scripted/chat.json"
tools = ["calculator"]
context_tokens = 300

[agents.chat.summarise_dropped]
model = "scripted/summary.json"
prompt = "Summarise tersely."
max_tokens = 40

[prices.scripted]
input_per_mtok = 1
output_per_mtok = 2
"""


@pytest.mark.temporal  # starts an embedded dev server through the CLI
def test_turns_run_continue_summarises_and_inspect_and_show_see_it(tmp_path: Path) -> None:
    from tests.test_cli_terminal import turns as cli

    home = tmp_path / "home"
    home.mkdir()
    (home / "turns.toml").write_text(SUMMARY_AGENT)
    usage = {"inputTokens": 10, "outputTokens": 1}
    calculate = {"toolName": "calculator", "input": {"expression": "6*7"}}
    script = [{"toolCalls": [calculate], "usage": usage}, {"text": "noted", "usage": usage}]
    (home / "chat.json").write_text(json.dumps({"responses": script}))
    big = {"inputTokens": 1000, "outputTokens": 100}
    (home / "summary.json").write_text(
        json.dumps({"responses": [{"text": "the user counted upwards", "usage": big}]})
    )
    idle = {"TURNS_SERVER_IDLE": "60"}  # the commands share one embedded server

    def inspect(turn: str, call: int) -> dict[str, Any]:
        shown = cli(home, "inspect", turn, "--call", str(call), "--json")
        assert shown.returncode == 0, shown.stderr
        return dict(json.loads(shown.stdout))

    try:
        first = cli(home, "run", "--json", "message number zero", **idle)
        assert first.returncode == 0, first.stderr
        found = None
        seen: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        for i in range(1, 12):
            r = cli(home, "run", "--json", "--continue", "last", f"message number {i}", **idle)
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["status"] == "completed"
            seen.append((json.loads(r.stdout)["turnId"], inspect("last", 0), inspect("last", 1)))
            turn_id, request, _ = seen[-1]
            summary = request["contextBudget"].get("summary")
            if summary is not None and "usage" not in summary and len(seen) > 1:
                found = i
                break
        assert found is not None, "no turn's first call kept the cut of the turn before"
        paid_turn, _, paid_request = seen[-2]  # the turn before: its last call's summary
        paid = paid_request["contextBudget"]["summary"]
        dropped = request["contextBudget"]["dropped"]
        assert paid_request["contextBudget"]["dropped"] == dropped
        assert paid["usage"] == {"inputTokens": 1000, "outputTokens": 100}
        # The main request carries the summary first, then the kept messages.
        assert request["messages"][0] == {
            "role": "user",
            "content": f"[Summary of the {dropped} earlier messages left out]\n"
            "the user counted upwards",
        }
        assert request["messages"][-1]["content"] == f"message number {found}"
        # Nothing new dropped: the next turn reuses the summary, no second summary call.
        assert summary == {
            "turnId": paid["turnId"],
            "text": "the user counted upwards",
            "sent": True,
        }
        text = cli(home, "inspect", paid_turn, "--call", "1")
        assert f"summary    turn {paid['turnId']}: sent as the first message · usage" in text.stdout
        # The summary call is a turn every command reads: its request is the dropped span.
        made = cli(home, "inspect", paid["turnId"], "--json")
        assert made.returncode == 0, made.stderr
        made_request = json.loads(made.stdout)
        assert made_request["system"] == "Summarise tersely."
        assert made_request["parameters"] == {"maxOutputTokens": 40}
        assert len(made_request["messages"]) <= dropped + 1  # (new) span, then instruction
        # Summary calls cost the turn that ran them: 1000 in and 100 out at $1/$2 per
        # million each, beside the turn's own two calls (10 in, 1 out each).
        for turn_id, call0, call1 in seen[-2:]:
            ran = sum("usage" in c["contextBudget"].get("summary", {}) for c in (call0, call1))
            show = cli(home, "show", turn_id, "--json")
            assert show.returncode == 0, show.stderr
            cost = json.loads(show.stdout)["cost"]["turn"]["amount"]
            assert cost == pytest.approx((ran * (1000 + 200) + 2 * (10 + 2)) / 1_000_000)
            state = cli(home, "state", turn_id)
            assert state.stdout.count("summary usage in=1000 out=100") == ran
        assert f"summary turn {paid['turnId']}" in cli(home, "state", paid_turn).stdout
        shown = cli(home, "show", paid_turn).stdout
        assert "with the summary calls of the context budget: turn " in shown
        assert f"turn {paid['turnId']} (for call 1)" in shown
        # `last` is the conversation's newest turn, never a summary turn.
        assert inspect("last", 0)["messages"][-1]["content"] == f"message number {found}"
    finally:
        kill_stragglers(home)


@tool(permission="none")
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def test_a_summary_turn_sends_no_webhook(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    hook_env: Callable[[str], None],  # noqa: F811
) -> None:
    # Nobody waits on a summary turn, and its end is not the end of a turn of the
    # conversation: a worker with [notify] posts the main turns' ends only.
    chat = Recorder("answer", {"inputTokens": 10, "outputTokens": 1})
    summariser = Recorder("summary", {"inputTokens": 1000, "outputTokens": 100})
    models = {"rec": chat, "sum": summariser}
    async with receiver(lambda n: 200) as rec:
        hook_env(rec.url)
        (tmp_path / "turns.toml").write_text(toml(events=["waiting", "ended"]))
        async with _runtime(temporal_env, tmp_path, agents=[CHAT], models=models) as turns:
            ids: list[str] = []
            last = None
            for i in range(8):
                result = await turns.run(f"message number {i}", agent="chat", continue_from=last)
                assert result.status == "completed", result.outcome.to_wire()
                ids.append(last := result.turn_id)
            records = [_record(await turns.events(t)) for t in ids]
            made = {r["summary"]["turnId"] for r in records if "usage" in r.get("summary", {})}
            assert made and len(summariser.sent) == len(made)
            # Every summary turn ended before the main call that reads it; deliveries
            # leave the outbox in order, so once the last main turn's is sent and the
            # outbox is empty, any delivery for a summary turn would have been sent.
            outbox = notify_dir(turns.runtime.work_dir) / "outbox"
            await rec.until(lambda: ids[-1] in {b["turnId"] for b in rec.bodies()})
            await rec.until(lambda: not list(outbox.glob("*.json")))
        ended = [b["turnId"] for b in rec.bodies() if b["type"] == "turn.ended"]
        assert sorted(ended) == sorted(ids), (made, ended)
        assert not made & {b["turnId"] for b in rec.bodies()}


async def test_a_cut_that_does_not_move_reuses_the_summary_across_calls(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Long early exchanges, then turns that call a tool: a later call adds less than
    what the cut left over, so it keeps the cut — and the summary — as recorded; a
    deeper cut in the next turn builds on the last summary rather than starting over."""
    summariser = Recorder("summary", {"inputTokens": 5, "outputTokens": 5})
    sent: list[list[ConversationMessage]] = []

    def model(request: ModelCallRequest) -> dict[str, Any]:
        sent.append(list(request.messages))
        last = request.messages[-1]
        if isinstance(last, UserMessage) and str(last.content).startswith("look"):
            return {"toolCalls": [{"toolName": "lookup", "input": {"key": "k"}}]}
        return {"text": "ok"}

    agent = Agent(
        name="chat",
        system_prompt="Chat.",
        model="scripted/m",
        tools=(lookup,),
        context_tokens=400,
        summarise_dropped=SummariseDropped(model="scripted/sum", max_tokens=40),
    )
    models = {"m": model, "sum": summariser}
    async with _runtime(temporal_env, tmp_path, agents=[agent], models=models) as turns:
        last = None
        records: list[dict[str, Any]] = []
        prompts = [f"long story {i}: " + "word " * 60 for i in range(5)] + ["look k"] * 4
        for prompt in prompts:
            result = await turns.run(prompt, agent="chat", continue_from=last)
            assert result.status == "completed", result.outcome.to_wire()
            events = await turns.events(last := result.turn_id)
            calls = [e for e in events if isinstance(e, ModelCallRequested)]
            records += [_record(events, i) for i in range(len(calls))]
        summarised = [r for r in records if "summary" in r]
        paid = [r for r in summarised if "usage" in r["summary"]]
        reused = [r for r in summarised if "usage" not in r["summary"]]
        assert paid and reused  # both happen in this conversation
        assert len(paid) == len(summariser.sent) == len({r["dropped"] for r in summarised})
        for r in reused:  # the same summary turn as the call that paid for that cut
            (owner,) = [p for p in paid if p["dropped"] == r["dropped"]]
            assert r["summary"]["turnId"] == owner["summary"]["turnId"]
            assert r["summary"]["text"] == owner["summary"]["text"]


def test_the_room_kept_for_a_summary() -> None:
    from turncore.budget import SUMMARY_TOKENS, summary_reserve

    assert summary_reserve(Summariser(), 400) == 100  # a quarter of a small budget
    assert summary_reserve(Summariser(), 200_000) == SUMMARY_TOKENS  # at most a page
    assert summary_reserve(Summariser(max_tokens=7), 200_000) == 7  # as configured


def test_a_summarising_cut_keeps_the_earlier_one_while_it_leaves_room() -> None:
    from turncore.budget import ContextBudgetExceeded, plan_drop, plan_summarised_drop
    from turncore.messages import AssistantMessage

    prefix: list[ConversationMessage] = []
    for n in range(10):
        prefix += [UserMessage(content=f"q{n}"), AssistantMessage(content=f"a{n}")]
    tokens = [10] * len(prefix)  # an exchange is 20 tokens

    def cut(budget: int, earlier: int | None) -> int | None:
        return plan_summarised_drop(budget, 20, 5, prefix, tokens, 15, earlier)

    # Plain: 5 + 15 + kept <= 150 keeps 6 exchanges (drops 8 messages). Summarising
    # leaves 20 more for the summary and 20 more again for what comes next: 4 kept.
    assert plan_drop(150, 5, prefix, tokens, 15) == 8
    assert cut(150, None) == 12
    # The earlier cut stays while it leaves room for the summary (then it is reused) …
    assert cut(150, 12) == 12 and cut(150, 14) == 14 and cut(150, 10) == 10
    # … not when it no longer does, nor between a question and its answer.
    assert cut(150, 8) == 12 and cut(150, 11) == 12
    # The whole prefix can go; if even then no summary fits, there is none to make.
    assert cut(60, None) == 20
    assert cut(35, None) is None
    with pytest.raises(ContextBudgetExceeded):
        plan_drop(15, 5, prefix, tokens, 15)


async def test_a_dropped_span_too_long_for_one_summary_call_is_summarised_from_its_end(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Summarising switched on for a conversation already longer than the budget: the
    summary call must fit the budget too, so it reads the newest dropped messages."""
    from turncore.budget import TokenEstimates, fixed_tokens

    chat = Recorder("answer", {"inputTokens": 1, "outputTokens": 1})
    summariser = Recorder("summary", {"inputTokens": 1, "outputTokens": 1})
    plain = Agent(name="plain", system_prompt="Chat.", model="scripted/rec")
    models = {"rec": chat, "sum": summariser}
    async with _runtime(temporal_env, tmp_path, agents=[plain, CHAT], models=models) as turns:
        last = None
        for i in range(12):
            result = await turns.run(f"message number {i}", agent="plain", continue_from=last)
            last = result.turn_id
        result = await turns.run("and now?", agent="chat", continue_from=last)
        assert result.status == "completed", result.outcome.to_wire()
        record = _record(await turns.events(result.turn_id))
        state = await turns.state(result.turn_id)
        context = turns.runtime.contexts.resolve(state.definition.context)
        made_by = await turns.state(record["summary"]["turnId"])
        span = made_by.definition.context
        assert isinstance(span, list) and 0 < len(span) < record["dropped"]
        assert span == context[record["dropped"] - len(span) : record["dropped"]]  # the end
        sizes = TokenEstimates()
        asked = sum(sizes.of(m) for m in [*span, made_by.definition.input])
        assert fixed_tokens("Summarise.", ()) + asked + 40 <= 200
        assert summariser.sent == [[*span, made_by.definition.input]]


def test_a_summary_call_reads_the_newest_of_a_span_too_long_for_it() -> None:
    from turncore.budget import fixed_tokens, summary_span_start
    from turncore.messages import AssistantMessage

    span: list[ConversationMessage] = []
    for n in range(5):
        span += [UserMessage(content=f"q{n}"), AssistantMessage(content=f"a{n}")]
    tokens = [10] * len(span)
    prompt = fixed_tokens("p", ())
    # The prompt, 20 of answer and 10 of instruction leave the rest of 100 to the span.
    fits = 100 - 30 - prompt
    start = summary_span_start(100, 20, "p", span, tokens, 10)
    assert start % 2 == 0 and sum(tokens[start:]) <= fits < sum(tokens[start - 2 :])
    assert summary_span_start(1000, 20, "p", span, tokens, 10) == 0  # all of it fits
    assert summary_span_start(30, 20, "p", span, tokens, 10) == len(span)  # none does


async def test_a_long_summary_stays_in_the_file_not_in_the_workflows_history(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """Every call that sends a summary records it; what crosses into the workflow
    carries a marker instead of a long text (the activities compose from the file)."""
    from turncore.elision import ELIDED_KEY, elide_event
    from turncore.reducer import TurnReducer

    chat = Recorder("answer", {"inputTokens": 1, "outputTokens": 1})
    long_text = "The user said many things. " * 60  # ~1.6 KB

    def summarise(request: ModelCallRequest) -> dict[str, Any]:
        return {"text": long_text}

    agent = Agent(
        name="chat",
        system_prompt="Chat.",
        model="scripted/rec",
        context_tokens=1200,
        summarise_dropped=SummariseDropped(model="scripted/sum", max_tokens=500),
    )
    models = {"rec": chat, "sum": summarise}
    async with _runtime(temporal_env, tmp_path, agents=[agent], models=models) as turns:
        last = None
        for i in range(30):
            result = await turns.run(
                f"message {i}: " + "word " * 20, continue_from=last, agent="chat"
            )
            last = result.turn_id
            if "summary" in _record(await turns.events(last)):
                break
        record = _record(events := await turns.events(last))
        assert record["summary"]["text"] == long_text.strip() and record["summary"]["sent"]
        assert chat.sent[-1][0] == summary_message(record["dropped"], long_text.strip())
        queried = await temporal_env.client.get_workflow_handle(last).query("state")
        queried.pop("rejectedInputs", None)
        elided = TurnReducer.of([elide_event(e) for e in events]).state.to_wire()
        assert queried == elided
        marker = queried["modelCalls"][0]["request"]["parameters"]["contextBudget"]["summary"]
        assert ELIDED_KEY in marker["text"]


async def test_cancelling_a_turn_while_its_summary_runs_closes_both(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    import asyncio

    from turncore.events import TurnCreated

    chat = Recorder("answer", {"inputTokens": 1, "outputTokens": 1})
    entered = asyncio.Event()

    async def stuck(request: ModelCallRequest) -> dict[str, Any]:
        entered.set()
        await asyncio.Event().wait()  # never answers: only cancellation ends it
        raise AssertionError("unreachable")

    models = {"rec": chat, "sum": stuck}
    async with _runtime(temporal_env, tmp_path, agents=[CHAT], models=models) as turns:
        last = None
        for i in range(30):
            turn_id = await turns.start(f"message number {i}", agent="chat", continue_from=last)
            running = asyncio.create_task(turns.advance(turn_id))
            done, _ = await asyncio.wait(
                [running, asyncio.create_task(entered.wait())],
                return_when=asyncio.FIRST_COMPLETED,
            )
            if running not in done:
                break  # the summary call is under way
            assert running.result().status == "completed"
            last = turn_id
        assert entered.is_set()
        outcome = await turns.cancel(turn_id, "enough")
        assert outcome.status == "cancelled"
        await running
        assert not any(isinstance(e, ModelCallRequested) for e in await turns.events(turn_id))
        summaries = []
        for stored in turns.runtime.repository.turn_ids():  # type: ignore[attr-defined]
            first = (await turns.events(stored))[0]
            if isinstance(first, TurnCreated) and is_summary_turn(first):
                summaries.append(await turns.state(stored))
        (summary,) = summaries
        assert summary.terminal is not None and summary.terminal.type == "turn_cancelled"
        assert summary.model_calls[0].error == "Model call was cancelled."
