"""Context materialization (spec §6.6, §6.7) and transmit-time elision.

A turn's context is inline messages or ``{previousTurnId}``. A reference
materializes to the referenced turn's *closed transcript*: its own
materialized context, then its input and every message it produced,
including synthetic closure results. Chains are followed recursively with
cycle detection. A missing, corrupt or unfinished referenced turn is an
infrastructure error: the caller's environment is broken, the turn is not.

Elision is a pure function of each prior-turn message, so resolved prefixes
are byte-stable across calls (provider prefix caches keep working). The
current turn's own messages never pass through it.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson

from ._wire import WireModel
from .compose import closed_transcript
from .errors import (
    ContextResolutionError,
    CorruptTurnError,
    InfrastructureError,
    InvalidTurnIdError,
)
from .events import (
    ContextRef,
    InheritedAgentSnapshot,
    ResolvedAgent,
    ResolvedAgentSnapshot,
    TurnContext,
    TurnCreated,
)
from .messages import (
    AssistantMessage,
    ConversationMessage,
    FilePart,
    ImagePart,
    TextPart,
    ToolMessage,
    ToolResultOutput,
    ToolResultPart,
    UserMessage,
)
from .reducer import TurnState

LoadTurn = Callable[[str], TurnState]
"""Reads and reduces a turn by id (usually ``repository.read`` + ``reduce_turn``)."""


class ElisionPolicy(WireModel):
    """The spec's knobs (``config/context.json``), with the spec's defaults."""

    elide_historic_tool_results: bool = True
    elide_historic_tool_results_threshold_chars: int = 2500
    elide_historic_images: bool = True
    elide_historic_middle_pane_content: bool = True

    @classmethod
    def from_file(cls, path: Path) -> ElisionPolicy:
        """Load a policy file; a missing file means the defaults, a bad one is an error."""
        if not path.exists():
            return cls()
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise InfrastructureError(f"{path}: not valid JSON ({exc})") from None
        try:
            return cls.model_validate(data)
        except ValueError as exc:
            raise InfrastructureError(f"{path}: invalid elision policy: {exc}") from None

    def elide(self, message: ConversationMessage) -> ConversationMessage:
        """The transmitted form of one prior-turn message."""
        match message:
            case ToolMessage():
                if not self.elide_historic_tool_results:
                    return message
                return ToolMessage(content=[self._elide_result(p) for p in message.content])
            case UserMessage():
                return self._elide_user(message)
            case AssistantMessage():
                return message

    def _elide_result(self, part: ToolResultPart) -> ToolResultPart:
        value = part.output.value
        size = len(value) if isinstance(value, str) else len(json.dumps(value, ensure_ascii=False))
        if size <= self.elide_historic_tool_results_threshold_chars:
            return part
        note = (
            f"[Output of {part.tool_name} from an earlier turn elided ({size} characters). "
            "Run the tool again if you need it.]"
        )
        return part.model_copy(
            update={"output": ToolResultOutput(type=part.output.type, value=note)}
        )

    def _elide_user(self, message: UserMessage) -> UserMessage:
        if isinstance(message.content, str):
            return message
        parts: list[Any] = []
        dropped_images = 0
        for part in message.content:
            if isinstance(part, ImagePart) and self.elide_historic_images:
                dropped_images += 1
                continue
            if (
                isinstance(part, FilePart)
                and self.elide_historic_middle_pane_content
                and part.data is not None
                and part.media_type.startswith("text/")
            ):
                # A note snapshot: keep its kind and path, drop the bytes; the
                # file itself is still readable by the agent's tools.
                where = part.filename or "an attached note"
                parts.append(
                    TextPart(
                        text=f"[Snapshot of {where} ({part.media_type}) from an earlier turn; "
                        "read the file for its current content.]"
                    )
                )
                continue
            parts.append(part)
        if dropped_images:
            plural = "s" if dropped_images != 1 else ""
            parts.append(
                TextPart(text=f"[{dropped_images} image{plural} from an earlier turn dropped.]")
            )
        if not dropped_images and parts == list(message.content):
            return message
        return UserMessage(content=parts)


CACHED_TURNS = 256
"""Ended turns whose materialization a resolver keeps (the least recently used goes)."""

_V = TypeVar("_V")


def _cached(cache: OrderedDict[str, _V], turn_id: str) -> _V | None:
    found = cache.get(turn_id)
    if found is not None:
        try:
            cache.move_to_end(turn_id)
        except KeyError:
            pass  # another thread let it go meanwhile: it is still the right value
    return found


def _keep(cache: OrderedDict[str, _V], turn_id: str, value: _V) -> None:
    cache[turn_id] = value
    cache.move_to_end(turn_id)
    while len(cache) > CACHED_TURNS:
        cache.popitem(last=False)


def _tools_json(agent: ResolvedAgent) -> bytes:
    return orjson.dumps([t.to_wire() for t in agent.tools])


class ContextResolver:
    """Materializes contexts and agent snapshots from durable turn files only."""

    def __init__(self, load_turn: LoadTurn, policy: ElisionPolicy | None = None) -> None:
        self._load = load_turn
        self._policy = policy
        # What a referenced turn materializes to, by its id: a turn that can be
        # referenced has ended, and an ended turn's file never changes (§6.6:
        # "an immutable prior turn"). Turn N of a conversation materializes
        # turn N-1 from N-1's own transcript and the cached materialization
        # of N-2, so it reads one file, not the whole chain.
        self._transcripts: OrderedDict[str, tuple[ConversationMessage, ...]] = OrderedDict()
        self._transmitted: OrderedDict[str, tuple[ConversationMessage, ...]] = OrderedDict()
        self._agents: OrderedDict[str, ResolvedAgent] = OrderedDict()
        self._previous: OrderedDict[str, str] = OrderedDict()

    def resolve(self, context: TurnContext) -> list[ConversationMessage]:
        """The materialized context as transmitted: inline messages or the referenced
        chain's closed transcripts, elided when a policy is set."""
        raw = self._materialize(context, seen=())
        if self._policy is None:
            return raw
        if not isinstance(context, ContextRef):
            return [self._policy.elide(m) for m in raw]
        turn_id = context.previous_turn_id
        known = _cached(self._transmitted, turn_id)
        if known is None:
            # Elision is a pure function of each message: the referenced turn's
            # transmitted prefix is its predecessor's, then its own messages.
            previous = self._previous.get(turn_id)
            base = self._transmitted.get(previous) if previous is not None else None
            done = base if base is not None and len(base) <= len(raw) else ()
            known = (*done, *(self._policy.elide(m) for m in raw[len(done) :]))
            _keep(self._transmitted, turn_id, known)
        return list(known)

    def resolve_agent(self, definition: TurnCreated) -> ResolvedAgent:
        """The full agent snapshot, following §6.7 inheritance down the chain.

        The base snapshot found through an ended turn is kept by that turn's id
        (ended turns never change), so a long conversation of inherited
        snapshots walks one link per new turn, not the whole chain."""
        seen: list[str] = [definition.turn_id]
        current = definition
        resolved = current.agent.resolved
        walked: list[str] = []
        while not isinstance(resolved, ResolvedAgent):
            parent_id = resolved.inherited_from
            if parent_id in seen:
                raise ContextResolutionError(
                    f"agent snapshot inheritance cycles through turn {parent_id}"
                )
            seen.append(parent_id)
            known = _cached(self._agents, parent_id)
            if known is not None:
                resolved = known
                break
            walked.append(parent_id)
            current = self._load_closed(parent_id).definition
            resolved = current.agent.resolved
        for turn_id in walked:
            _keep(self._agents, turn_id, resolved)
        top = definition.agent.resolved
        # The inherited record's own agentId and model win; only the heavy
        # fields come from the chain base.
        return ResolvedAgent(
            agent_id=top.agent_id,
            system_prompt=resolved.system_prompt,
            model=top.model,
            tools=resolved.tools,
        )

    def snapshot_for(
        self, resolved: ResolvedAgent, context: TurnContext, session_id: str | None
    ) -> ResolvedAgentSnapshot:
        """What ``create_turn`` persists for ``resolved`` (§6.7).

        The inherited form exactly when the turn belongs to a session,
        continues a previous turn by reference, and its system prompt and
        tools are byte-identical (as wire JSON) to the predecessor's
        materialized snapshot. Any difference, or a predecessor that cannot be
        read or materialized, persists the full snapshot. The model and agent
        id stay concrete in either form.
        """
        if session_id is None or not isinstance(context, ContextRef):
            return resolved
        previous = context.previous_turn_id
        try:
            base = self.resolve_agent(self._load(previous).definition)
        except (InfrastructureError, InvalidTurnIdError):
            return resolved  # unreadable predecessor: the full snapshot
        if base.system_prompt != resolved.system_prompt or _tools_json(base) != _tools_json(
            resolved
        ):
            return resolved
        return InheritedAgentSnapshot(
            agent_id=resolved.agent_id, model=resolved.model, inherited_from=previous
        )

    def _materialize(self, context: TurnContext, seen: Sequence[str]) -> list[ConversationMessage]:
        if not isinstance(context, ContextRef):
            return list(context)
        turn_id = context.previous_turn_id
        if turn_id in seen:
            raise ContextResolutionError(f"context references cycle through turn {turn_id}")
        known = _cached(self._transcripts, turn_id)
        if known is None:
            state = self._load_closed(turn_id)
            own = state.definition.context
            base = self._materialize(own, (*seen, turn_id))
            known = (*base, *closed_transcript(state))
            _keep(self._transcripts, turn_id, known)
            if isinstance(own, ContextRef):
                _keep(self._previous, turn_id, own.previous_turn_id)
        return list(known)

    def _load_closed(self, turn_id: str) -> TurnState:
        try:
            state = self._load(turn_id)
        except CorruptTurnError as exc:
            raise ContextResolutionError(f"context turn {turn_id} is corrupt: {exc}") from exc
        except InfrastructureError as exc:
            raise ContextResolutionError(f"context turn {turn_id} cannot be read: {exc}") from exc
        except InvalidTurnIdError as exc:
            # The id comes from a durable file: a bad one is broken data, not a
            # caller's input, so it must not surface as InvalidInputError.
            raise ContextResolutionError(
                f"context turn {turn_id!r} is not a valid turn id: {exc}"
            ) from exc
        if state.terminal is None:
            raise ContextResolutionError(
                f"context turn {turn_id} has not ended; only terminal turns can be referenced"
            )
        return state
