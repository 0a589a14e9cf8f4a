"""The context budget: a composed request that stays inside the model's window.

Theory of operation
-------------------
An agent may have a budget in tokens (``[agents.NAME] context_tokens``, or the
model's known context window). Before each model call the model activity
measures the request it is about to send with ``estimate`` and, when it is
over budget, drops messages of the *materialized prefix* — the earlier turns of
the conversation (§6.6) — oldest first, by ``plan_drop``:

- the system prompt, the tools and the current turn's own messages are always
  kept; only the prefix is ever cut;
- the prefix is cut only in front of a user message, so the kept part starts
  with a user message and a tool call is never separated from its result (a
  call and its results sit between two user messages);
- the smallest cut that fits is taken: deterministic, oldest first.

When even dropping the whole prefix does not fit, the current turn alone is
over budget: the call fails before anything is sent (``ContextBudgetExceeded``,
failure kind ``context-budget``), naming the budget and the size.

The decision is recorded in the call's ``model_call_requested``, as
``request.parameters.contextBudget = {"tokens": B, "dropped": K}``, and the
composer (``compose_model_request``) drops the first K prefix messages of every
request that records it — so the file alone reproduces the exact request
(``turns inspect``), whatever the configuration says later. The key never
reaches a provider.

The estimate is deliberately simple and documented: a message costs its JSON
wire form's UTF-8 bytes divided by ``BYTES_PER_TOKEN`` (4), rounded up, plus
``MESSAGE_OVERHEAD`` (4) tokens; the system prompt and each tool definition
likewise. Real tokenizers give fewer tokens per byte for English prose and
more for dense data; set the budget with headroom.

Summarising what is dropped
---------------------------
An agent may ask for the dropped span to be summarised (``Summariser``:
``[agents.NAME] summarise_dropped``). The summary is its own recorded model
call: a one-call turn of its own (the *summary turn*, agent
``NAME.summarise-dropped``, no tools, ``maxModelCalls`` 1) whose inline context is the
dropped messages, so ``turns show``/``inspect``/``log`` read it like any turn.
A model call in the main turn's file would not do: by §8.5 a response without
tool calls completes the turn, so any reader of the file would misread it.

The main call's record then says which summary it carries:
``contextBudget.summary = {"turnId", "text", "sent", "model"?, "usage"?}``
(or ``"error"`` instead of ``"text"`` when the summary call failed: the call
falls back to plain dropping). ``model`` and ``usage`` appear only on the call
that ran the summary, so its cost is counted once, in the turn that paid for
it. The composer places a sent summary as the first message, right after the
system prompt (``summary_message``).

The summary must fit too: a summarising agent cuts deeper, leaving
``summary_reserve`` tokens (``max_tokens``; default a quarter of the budget, at
most 2,048) for the summary message, and asks the summariser for at most that
many output tokens. If the current turn leaves no such room, or the summary's
estimate still exceeds what the cut leaves (``sent`` false), the call is plain
dropping. A new cut goes as much again deeper (``plan_summarised_drop``), and
later calls keep the earlier summary's cut while it leaves room for it.

A summary is reused, not recomputed, by any later call of the turn — and by
the next turn of the conversation — whose cut is the same ``dropped``; a
larger cut summarises only the newly dropped messages, given the earlier
summary (``summary_input``). Recovery reads the record from the file like
everything else, so a re-issued call never summarises again. A summary call
must fit the budget as well: of a span too long for it, the oldest messages
are left out of the summary (``summary_span_start``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .errors import CorruptTurnError
from .events import ModelDescriptor, ResolvedAgent, ToolDescriptor, TurnCreated
from .messages import ConversationMessage, UserMessage

BYTES_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
BUDGET_KEY = "contextBudget"
"""The key of ``request.parameters`` that records a budget's decision (never sent)."""


def _tokens(size: int) -> int:
    return -(-size // BYTES_PER_TOKEN) + MESSAGE_OVERHEAD


def fixed_tokens(system_prompt: str, tools: Sequence[ToolDescriptor]) -> int:
    """What every request of an agent carries: its system prompt and tool definitions."""
    size = _tokens(len(system_prompt.encode()))
    for t in tools:
        size += _tokens(len(orjson.dumps([t.name, t.description, t.input_schema])))
    return size


class TokenEstimates:
    """``estimate`` per message, remembered by message object: the prefix of a
    conversation is the same objects turn after turn (``ContextResolver`` keeps
    them), so a turn measures only the messages that are new to it."""

    def __init__(self, size: int = 200_000) -> None:
        self._known: OrderedDict[int, tuple[ConversationMessage, int]] = OrderedDict()
        self._size = size

    def of(self, message: ConversationMessage) -> int:
        known = self._known.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        tokens = _tokens(len(orjson.dumps(message.to_wire())))
        self._known[id(message)] = (message, tokens)  # holding it keeps its id unique
        while len(self._known) > self._size:
            self._known.popitem(last=False)
        return tokens


class ContextBudgetExceeded(Exception):
    """The current turn alone does not fit the budget."""

    def __init__(self, budget: int, size: int, fixed: int) -> None:
        super().__init__(
            f"the request needs ~{size} tokens without any earlier turn (system prompt and "
            f"tools ~{fixed}), over this agent's context budget of {budget} tokens; "
            "raise [agents.NAME] context_tokens, or send less in this turn"
        )
        self.budget = budget
        self.size = size


def plan_drop(
    budget: int,
    fixed: int,
    prefix: Sequence[ConversationMessage],
    prefix_tokens: Sequence[int],
    current_tokens: int,
) -> int:
    """How many prefix messages to drop (0: none) so the request fits ``budget``.

    Raises ``ContextBudgetExceeded`` if it cannot fit even without the prefix.
    """
    kept = sum(prefix_tokens)
    total = fixed + kept + current_tokens
    if total <= budget:
        return 0
    for k in range(1, len(prefix) + 1):
        kept -= prefix_tokens[k - 1]
        if k < len(prefix) and not isinstance(prefix[k], UserMessage):
            continue  # a cut here would start mid-exchange
        if fixed + kept + current_tokens <= budget:
            return k
    raise ContextBudgetExceeded(budget, fixed + current_tokens, fixed)


def plan_summarised_drop(
    budget: int,
    reserve: int,
    fixed: int,
    prefix: Sequence[ConversationMessage],
    prefix_tokens: Sequence[int],
    current_tokens: int,
    earlier_cut: int | None,
) -> int | None:
    """The cut of an agent that summarises what it drops; None when no summary fits
    beside the current turn (the plain cut applies).

    The cut of the earlier summary is kept while it still leaves ``reserve`` tokens
    for the summary: the summary is then reused, not made again. A new cut goes
    ``reserve`` deeper than it must, so the turns after it keep it a while instead
    of summarising again for every exchange the conversation grows by.
    """
    try:
        least = plan_drop(budget, fixed + reserve, prefix, prefix_tokens, current_tokens)
    except ContextBudgetExceeded:
        return None
    if (
        earlier_cut is not None
        and least <= earlier_cut <= len(prefix)
        and (earlier_cut == len(prefix) or isinstance(prefix[earlier_cut], UserMessage))
    ):
        return earlier_cut
    try:
        return plan_drop(budget, fixed + 2 * reserve, prefix, prefix_tokens, current_tokens)
    except ContextBudgetExceeded:
        return least


def summary_span_start(
    budget: int,
    reserve: int,
    prompt: str,
    span: Sequence[ConversationMessage],
    span_tokens: Sequence[int],
    input_tokens: int,
) -> int:
    """How many of the oldest messages of ``span`` a summary call leaves out, so that
    its request (the summariser's prompt, the span, its instruction) and its answer
    (``reserve``) fit ``budget``: a span longer than one call can read — summarising
    switched on for a long conversation — is summarised from its newest part."""
    try:
        return plan_drop(
            budget, fixed_tokens(prompt, ()) + reserve, span, span_tokens, input_tokens
        )
    except ContextBudgetExceeded:
        return len(span)


def recorded_drop(parameters: dict[str, Any], prefix_length: int) -> int:
    """The number of prefix messages a request's parameters say were dropped."""
    record = parameters.get(BUDGET_KEY)
    if record is None:
        return 0
    dropped = record.get("dropped") if isinstance(record, dict) else None
    if not isinstance(dropped, int) or isinstance(dropped, bool) or not 0 <= dropped:
        raise CorruptTurnError(f"request parameter {BUDGET_KEY} is malformed: {record!r}")
    if dropped > prefix_length:
        raise CorruptTurnError(
            f"request parameter {BUDGET_KEY} drops {dropped} messages of a "
            f"{prefix_length}-message context"
        )
    return dropped


def check_budget(where: str, budget: int, system_prompt: str) -> None:
    """A budget that cannot even hold the system prompt is a configuration error."""
    need = fixed_tokens(system_prompt, ())
    if budget < need:
        raise ValueError(
            f"{where}: context_tokens = {budget} is smaller than the system prompt "
            f"(~{need} tokens at {BYTES_PER_TOKEN} bytes a token): raise it or leave it "
            "out (the model's known window is the default)"
        )


SUMMARY_PROMPT = (
    "You condense the earlier part of a conversation between a user and an assistant so "
    "the assistant can carry on without it. Keep facts, names, numbers, decisions, open "
    "questions and what tools returned; leave out pleasantries. Answer with the summary "
    "only, in plain text."
)
"""The summariser's system prompt unless the agent names its own."""

SUMMARY_AGENT_SUFFIX = ".summarise-dropped"
"""A summary turn's agent id is the summarised agent's id with this suffix."""


def is_summary_turn(created: TurnCreated) -> bool:
    """Whether a turn is a summary turn (``activities.summaries``), not a conversation's."""
    resolved = created.agent.resolved
    return (
        created.agent.requested.agent_id.endswith(SUMMARY_AGENT_SUFFIX)
        and created.session_id is None
        and isinstance(created.context, list)
        and created.config.max_model_calls == 1
        and isinstance(resolved, ResolvedAgent)
        and not resolved.tools
    )


@dataclass(frozen=True)
class Summariser:
    """How an agent summarises the messages its budget drops."""

    model: ModelDescriptor | None = None
    """The model that summarises; None: the agent's own."""
    prompt: str = SUMMARY_PROMPT
    """The summary turn's system prompt."""
    max_tokens: int | None = None
    """Room kept for the summary message, and the summary call's ``maxOutputTokens``;
    None: a quarter of the budget, at most ``SUMMARY_TOKENS`` (``summary_reserve``)."""


SUMMARY_TOKENS = 2048
"""The most a summary gets by default: a page of notes, well inside every model's
output limit, and a bounded value in each call's record."""


def summary_reserve(summariser: Summariser, budget: int) -> int:
    """The tokens a cut leaves for the summary of what it drops."""
    if summariser.max_tokens is not None:
        return summariser.max_tokens
    return max(1, min(budget // 4, SUMMARY_TOKENS))


@dataclass(frozen=True)
class RecordedSummary:
    """A call record's ``summary``: which summary turn covers its ``dropped`` messages."""

    turn_id: str
    dropped: int
    text: str | None
    """None: the summary call failed (``error``), the call dropped plainly."""
    sent: bool


def recorded_summary(parameters: dict[str, Any]) -> RecordedSummary | None:
    """The summary a request's parameters record, if any."""
    record = parameters.get(BUDGET_KEY)
    if not isinstance(record, dict) or "summary" not in record:
        return None
    summary, dropped = record["summary"], record.get("dropped")
    if (
        not isinstance(summary, dict)
        or not isinstance(summary.get("turnId"), str)
        or not isinstance(summary.get("text", ""), str)
        or not isinstance(summary.get("sent", False), bool)
        or not isinstance(dropped, int)
    ):
        raise CorruptTurnError(f"request parameter {BUDGET_KEY} has a malformed summary")
    text = summary.get("text")
    return RecordedSummary(
        turn_id=summary["turnId"],
        dropped=dropped,
        text=text,
        sent=text is not None and summary.get("sent") is True,
    )


def summary_message(dropped: int, text: str) -> UserMessage:
    """The message a sent summary becomes: first in the request, after the system prompt."""
    return UserMessage(content=f"[Summary of the {dropped} earlier messages left out]\n{text}")


def summary_input(count: int, earlier: RecordedSummary | None) -> UserMessage:
    """The summary turn's input: summarise its context (the ``count`` dropped messages),
    folding in the summary of the messages dropped before them, if any."""
    if earlier is None or earlier.text is None:
        return UserMessage(
            content=f"Summarise the {count} messages above: the earliest part of a "
            "conversation, which will no longer be sent to the assistant."
        )
    return UserMessage(
        content=f"Here is a summary of the {earlier.dropped} messages that came before the "
        f"{count} messages above:\n{earlier.text}\n\nWrite one summary of all of them "
        f"({earlier.dropped + count} messages): the earliest part of a conversation, which "
        "will no longer be sent to the assistant."
    )


__all__ = [
    "BUDGET_KEY",
    "BYTES_PER_TOKEN",
    "MESSAGE_OVERHEAD",
    "SUMMARY_AGENT_SUFFIX",
    "SUMMARY_PROMPT",
    "SUMMARY_TOKENS",
    "ContextBudgetExceeded",
    "RecordedSummary",
    "Summariser",
    "TokenEstimates",
    "check_budget",
    "fixed_tokens",
    "is_summary_turn",
    "plan_drop",
    "plan_summarised_drop",
    "recorded_drop",
    "recorded_summary",
    "summary_input",
    "summary_message",
    "summary_reserve",
    "summary_span_start",
]
