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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import orjson

from .errors import CorruptTurnError
from .events import ToolDescriptor
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


__all__ = [
    "BUDGET_KEY",
    "BYTES_PER_TOKEN",
    "MESSAGE_OVERHEAD",
    "ContextBudgetExceeded",
    "TokenEstimates",
    "check_budget",
    "fixed_tokens",
    "plan_drop",
    "recorded_drop",
]
