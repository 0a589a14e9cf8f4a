"""The turn loop without Temporal: the workflow's decisions, the activities' code, one process.

``InProcessTurn`` drives a turn the way ``workflows/turn.py`` does on its
happy path (no cancellation, no reloads after failures): the same pure
decisions from ``turncore.advance``, the same ``TurnActivities`` methods
(run inside ``temporalio.testing.ActivityEnvironment``, which only provides
the activity context that ``activity.heartbeat()`` needs), the same
activity payloads, and the same folding of the wire events the activities
return. Only Temporal is missing: no server, no history, no workflow tasks,
no payload conversion. ``bench/overhead.py`` compares the two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio.testing import ActivityEnvironment

from turnclient.api import iso_now
from turncore import advance
from turncore.events import TurnEvent, TurnExternalInput, parse_event
from turncore.reducer import ToolCallState, TurnReducer, TurnState
from turncore_temporal.activities import TurnActivities
from turncore_temporal.activities.payloads import (
    AppendInput,
    AppendResult,
    CheckPermissionsInput,
    ClassifyInput,
    LoadInput,
    ModelCallInput,
    ToolCallInput,
    ValidateDependenciesInput,
)

A = TypeVar("A")
R = TypeVar("R")


class InProcessTurn:
    def __init__(self, activities: TurnActivities, turn_id: str) -> None:
        self._acts = activities
        self._turn_id = turn_id
        self._env = ActivityEnvironment()
        self._reducer = TurnReducer()
        self._running: dict[str, asyncio.Task[None]] = {}

    async def _act(self, fn: Callable[[A], Awaitable[R]], arg: A) -> R:
        return await self._env.run(fn, arg)

    @property
    def _state(self) -> TurnState:
        return self._reducer.state

    # -- the workflow's run, minus Temporal ----------------------------------

    async def run(self) -> dict[str, Any]:
        """Load, check the environment, drive to a settle point; return the outcome (wire)."""
        await self._reload()
        if self._state.terminal is None:
            await self._act(
                self._acts.validate_dependencies, ValidateDependenciesInput(turn_id=self._turn_id)
            )
        return await self._drive()

    async def apply_input(self, input: TurnExternalInput) -> dict[str, Any]:
        """The workflow's ``_apply_input`` for one external input, then drive on."""
        advance.check_input(self._state, input)
        await self._act(
            self._acts.validate_dependencies, ValidateDependenciesInput(turn_id=self._turn_id)
        )
        await self._append(advance.input_events(self._state, input, iso_now()))
        return await self._drive()

    async def _drive(self) -> dict[str, Any]:
        while True:
            state = self._state
            if state.terminal is not None:
                return self._outcome()
            if await self._decide_batch():
                continue
            step = advance.next_step(self._state, self._running)
            if step == "wait":
                await asyncio.wait(self._running.values(), return_when=asyncio.FIRST_COMPLETED)
            elif step == "suspend":
                suspended = advance.suspension_event(self._state, iso_now())
                if suspended is not None:
                    await self._append([suspended])
                return self._outcome()
            elif step == "complete":
                await self._append_derived("completion")
            elif step == "fail-limit":
                await self._append([advance.limit_failure_event(self._state, iso_now())])
            elif step == "call-model":
                await self._call_model()

    def _outcome(self) -> dict[str, Any]:
        outcome = advance.outcome_of(self._state)
        assert outcome is not None
        return {"turnId": self._turn_id, **outcome.to_wire()}

    async def _reload(self) -> None:
        result = await self._act(self._acts.load_turn, LoadInput(turn_id=self._turn_id))
        assert result.next_start is None, "the bench's turns fit one page"
        reducer = TurnReducer()
        for e in result.events:
            reducer.apply(parse_event(e, trusted_json=True))
        self._reducer = reducer
        state = reducer.state
        if state.terminal is None:
            repairs = advance.close_interrupted_model_call(state, iso_now())
            repairs += advance.interrupted_sync_results(state, self._running, iso_now())
            if repairs:
                await self._append(repairs)

    async def _append(self, events: list[TurnEvent]) -> None:
        trial = self._reducer.copy()
        for e in events:
            trial.apply(e)
        await self._act(
            self._acts.append_events,
            AppendInput(
                turn_id=self._turn_id,
                events=[e.to_wire() for e in events],
                known_offset=self._reducer.event_count,
            ),
        )
        for e in events:
            self._reducer.apply(e)

    async def _append_derived(self, kind: str) -> None:
        result: AppendResult = await self._act(
            self._acts.append_events,
            AppendInput(
                turn_id=self._turn_id,
                events=[],
                known_offset=self._reducer.event_count,
                derive=kind,
                ts=iso_now(),
            ),
        )
        for raw in result.events:
            self._reducer.apply(parse_event(raw, trusted_json=True))

    async def _decide_batch(self) -> bool:
        state = self._state
        ts = iso_now()
        unknown = advance.unknown_tool_results(state, ts)
        if unknown:
            await self._append(unknown)
            return True
        to_check = advance.calls_needing_check(state)
        allowed: list[str] = []
        if to_check:
            checked = await self._act(
                self._acts.check_permissions, CheckPermissionsInput.of(self._turn_id, to_check)
            )
            required, allowed = advance.permission_required_events(
                self._state, checked.checks(), iso_now()
            )
            if required:
                await self._append(required)
        to_classify = advance.calls_needing_classification(self._state)
        if to_classify:
            classified = await self._act(
                self._acts.classify_permissions, ClassifyInput.of(self._turn_id, to_classify)
            )
            events = advance.classification_events(
                self._state, classified.decisions(), classified.error, iso_now()
            )
            if events:
                await self._append(events)
        changed = bool(to_check or to_classify)
        for step in (advance.human_unavailable_denials, advance.denial_results):
            events = step(self._state, iso_now())
            if events:
                await self._append(events)
                changed = True
        invocations = advance.invocation_events(self._state, allowed, iso_now())
        if invocations:
            await self._append(invocations)
            changed = True
        for call in advance.sync_calls_to_start(self._state, self._running):
            self._running[call.tool_call_id] = asyncio.create_task(self._run_tool(call))
            changed = True
        return changed

    async def _run_tool(self, call: ToolCallState) -> None:
        assert call.invocation is not None
        try:
            result = await self._act(
                self._acts.run_tool,
                ToolCallInput(
                    turn_id=self._turn_id,
                    tool_call_id=call.tool_call_id,
                    tool_id=call.invocation.tool_id,
                    tool_name=call.tool_name,
                    input=call.input,
                ),
            )
            for raw in result.events:
                self._reducer.apply(parse_event(raw, trusted_json=True))
        finally:
            self._running.pop(call.tool_call_id, None)

    async def _call_model(self) -> None:
        index = len(self._state.model_calls)
        result = await self._act(
            self._acts.call_model, ModelCallInput(turn_id=self._turn_id, model_call_index=index)
        )
        for raw in result.events:
            self._reducer.apply(parse_event(raw, trusted_json=True))
