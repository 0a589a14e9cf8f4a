"""The turn loop without Temporal: the workflow's decisions, the activities' code, one process.

``InProcessTurn`` drives a turn the way ``workflows/turn.py`` does on its
happy path (no cancellation, no reloads after failures): it interprets the
same ``turncore.advance.next_action``, with the same ``TurnActivities`` methods
(run inside ``temporalio.testing.ActivityEnvironment``, which only provides
the activity context that ``activity.heartbeat()`` needs), the same
activity payloads, and the same folding of the events the activities
return. Only Temporal is missing: no server, no history, no workflow tasks,
no payload conversion. ``bench/overhead.py`` compares the two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, assert_never

from temporalio.testing import ActivityEnvironment

from turnclient.lib.api import iso_now
from turncore import advance
from turncore.elision import owned
from turncore.events import TurnEvent, TurnExternalInput
from turncore.reducer import ToolCallState, TurnReducer, TurnState
from turncore_temporal.activities.payloads import (
    AppendInput,
    CheckPermissionsInput,
    ClassifyInput,
    LoadInput,
    ModelCallInput,
    ToolCallInput,
    ValidateDependenciesInput,
)
from turncore_temporal.activities.turn_activities import TurnActivities

A = TypeVar("A")
R = TypeVar("R")


class InProcessTurn:
    def __init__(self, activities: TurnActivities, turn_id: str) -> None:
        self._acts = activities
        self._turn_id = turn_id
        self._env = ActivityEnvironment()
        self._reducer = TurnReducer()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._allowed: set[str] = set()

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
            action = advance.next_action(
                self._state, running=self._running, allowed=self._allowed, ts=iso_now()
            )
            match action:
                case advance.Append(events):
                    await self._append(events)
                case advance.CheckPermissions(calls):
                    checked = await self._act(
                        self._acts.check_permissions, CheckPermissionsInput.of(self._turn_id, calls)
                    )
                    required, allowed = advance.permission_required_events(
                        self._state, checked.checks(), iso_now(), self._allowed
                    )
                    self._allowed.update(allowed)
                    if required:
                        await self._append(required)
                case advance.Classify(calls):
                    classified = await self._act(
                        self._acts.classify_permissions, ClassifyInput.of(self._turn_id, calls)
                    )
                    events = advance.classification_events(
                        self._state, classified.decisions(), classified.error, iso_now()
                    )
                    if events:
                        await self._append(events)
                case advance.StartTools(calls):
                    for call in calls:
                        self._running[call.tool_call_id] = asyncio.create_task(self._run_tool(call))
                case advance.Wait():
                    await asyncio.wait(self._running.values(), return_when=asyncio.FIRST_COMPLETED)
                case advance.Suspend(suspended):
                    if suspended is not None:
                        await self._append([suspended])
                    return self._outcome()
                case advance.Complete():
                    result = await self._act(
                        self._acts.append_events,
                        AppendInput(
                            turn_id=self._turn_id,
                            events=[],
                            known_offset=self._reducer.event_count,
                            derive="completion",
                            ts=iso_now(),
                        ),
                    )
                    self._fold(result.events)
                case advance.FailLimit(failed):
                    await self._append([failed])
                case advance.CallModel(index):
                    model = await self._act(
                        self._acts.call_model,
                        ModelCallInput(turn_id=self._turn_id, model_call_index=index),
                    )
                    self._fold(model.events)
                case advance.Done():
                    return self._outcome()
                case _:
                    assert_never(action)

    def _outcome(self) -> dict[str, Any]:
        outcome = advance.outcome_of(self._state)
        assert outcome is not None
        return {"turnId": self._turn_id, **outcome.to_wire()}

    def _fold(self, events: list[TurnEvent]) -> None:
        # Loads hand over compact events (no turn id), as the workflow gets them;
        # the workflow gives them their turn id back, and so does this.
        for e in events:
            self._reducer.apply(owned(e, self._turn_id))

    async def _reload(self) -> None:
        result = await self._act(self._acts.load_turn, LoadInput(turn_id=self._turn_id))
        assert result.next_start is None, "the bench's turns fit one page"
        self._reducer = TurnReducer()
        self._fold(result.events)
        state = self._state
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
                turn_id=self._turn_id, events=events, known_offset=self._reducer.event_count
            ),
        )
        self._fold(events)
        self._allowed.difference_update(advance.invoked_ids(events))

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
            self._fold(result.events)
        finally:
            self._running.pop(call.tool_call_id, None)
