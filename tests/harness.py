"""A real runtime for one test: a work dir in tmp, the file repository, a
worker on a fresh task queue of the session's dev server, and a TurnClient.

Only the model's *decisions* are scripted; Temporal, the filesystem and the
activities are the real ones.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from temporalio.client import Client
from temporalio.worker import Worker

from turnclient.lib.api import CreateTurnInput, TurnClient
from turnclient.runtime.connection import turn_dependencies
from turncore.agents import AgentDefinition, StaticAgentResolver
from turncore.errors import DependencyError
from turncore.events import (
    ModelDescriptor,
    RequestedAgent,
    ToolDescriptor,
    ToolResultData,
    TurnExternalInput,
    TurnOutcome,
    external_input_adapter,
)
from turncore.messages import UserMessage
from turncore.model import Model
from turncore.model.port import DEFAULT_LIMITS, Limits
from turncore.model.scripted import ScriptedModel, ScriptItem
from turncore.permissions import (
    DeclaredPermissionChecker,
    DeferAllClassifier,
    PermissionChecker,
    PermissionClassifier,
)
from turncore.reducer import TurnReducer, TurnState
from turncore.storage.repository import FileTurnRepository, TurnRepository
from turncore.tools import ToolContext, ToolRegistry
from turncore_temporal.activities.turn_activities import TurnActivities, TurnDependencies
from turncore_temporal.worker import build_worker

MODEL = ModelDescriptor(provider="scripted", model="test")

ToolFunction = Callable[[Any, ToolContext], Any]
"""A test tool that takes the model's raw input (no schema, no validation)."""


class RawTool:
    """A ``SyncTool`` over ``fn(input, context)``: the workflow tests exercise the
    runtime's handling of whatever the model sends, so no schema stands between.
    Typed tools (``turncore.tools.tool``) are tested on their own."""

    def __init__(self, fn: ToolFunction) -> None:
        self._fn = fn

    async def execute(self, input: Any, context: ToolContext) -> ToolResultData:
        if inspect.iscoroutinefunction(self._fn):
            value = await self._fn(input, context)
        else:
            value = await asyncio.to_thread(self._fn, input, context)
        if isinstance(value, ToolResultData):
            return value
        return ToolResultData(output=value, is_error=False)


def sync_tool(
    name: str, *, permission: str = "none", requires_human: bool = False
) -> ToolDescriptor:
    return ToolDescriptor(
        tool_id=f"builtin:{name}",
        name=name,
        description=f"the {name} tool",
        input_schema={"type": "object"},
        execution="sync",
        requires_human=requires_human,
    )


def async_tool(name: str, *, requires_human: bool = False) -> ToolDescriptor:
    return ToolDescriptor(
        tool_id=f"external:{name}",
        name=name,
        description=f"the {name} tool",
        input_schema={"type": "object"},
        execution="async",
        requires_human=requires_human,
    )


class StaticModels:
    """Resolves the scripted descriptor to one model; anything else is a dependency error."""

    def __init__(self, models: Mapping[str, Model]) -> None:
        self.models = dict(models)

    def resolve(self, descriptor: ModelDescriptor) -> Model:
        model = self.models.get(descriptor.label())
        if model is None:
            raise DependencyError(f"no model is configured for {descriptor.label()}")
        return model


@dataclass
class Harness:
    client: Client
    work_dir: Path
    script: Sequence[ScriptItem] | Any
    tools: list[ToolDescriptor] = field(default_factory=list)
    implementations: dict[str, ToolFunction] = field(default_factory=dict)
    fast: dict[str, float] = field(default_factory=dict)
    """Implementations (by name) that run fast, with their bounds in seconds."""
    permissions: dict[str, str] = field(default_factory=dict)
    classifier: PermissionClassifier = field(default_factory=DeferAllClassifier)
    checker: PermissionChecker | None = None
    delay: float = 0.0
    limits: Limits = DEFAULT_LIMITS
    workflow_options: dict[str, Any] = field(default_factory=dict)
    activities: Callable[[TurnDependencies], TurnActivities] = TurnActivities
    """Builds the activities (a ``TurnActivities`` subclass injects faults under the real names)."""
    repository: TurnRepository | None = None
    """Where turns are kept (default: files under ``work_dir``)."""
    workflow: type | None = None
    """The workflow class the worker runs (default: the installed one)."""
    versioning: Any = None
    """The worker's ``WorkerVersioning`` (default: unversioned)."""
    rebuild_stuck_after: int | None = None
    """The worker's self-heal (default: off)."""

    def __post_init__(self) -> None:
        self.task_queue = f"tq-{uuid.uuid4()}"
        self.repo: Any = self.repository or FileTurnRepository(self.work_dir)
        self.model = ScriptedModel(self.script, model="test", delay=self.delay, limits=self.limits)
        self.models = StaticModels({MODEL.label(): self.model})
        self.registry = ToolRegistry(
            {f"builtin:{n}": RawTool(fn) for n, fn in self.implementations.items()},
            {t.tool_id for t in self.tools if t.execution == "async"},
            fast={f"builtin:{n}": bound for n, bound in self.fast.items()},
        )
        self.resolver = StaticAgentResolver(
            agents={
                "test": AgentDefinition(
                    agent_id="test",
                    system_prompt="You are a test agent.",
                    tools=[t.name for t in self.tools],
                )
            },
            catalog={t.name: t for t in self.tools},
            default_model=MODEL,
        )
        # The product's wiring (Runtime.from_config uses the same function).
        self.deps = turn_dependencies(
            self.repo,
            self.models,
            self.registry,
            self.resolver,
            checker=self.checker or DeclaredPermissionChecker(self.permissions),  # type: ignore[arg-type]
            classifier=self.classifier,
        )
        self.contexts = self.deps.contexts
        self.hub = self.deps.hub
        self.turns = TurnClient(
            self.client,
            self.repo,
            self.resolver,
            task_queue=self.task_queue,
            hub=self.hub,
            workflow_options=self.workflow_options,
            runs_worker=True,  # its worker runs in this process, as `turns run`'s does
        )
        self.worker: Worker | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Harness:
        self.start_worker()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_worker()

    def start_worker(self) -> None:
        self.worker = build_worker(
            self.client,
            self.deps,
            task_queue=self.task_queue,
            activities=self.activities(self.deps),
            **({"workflow": self.workflow} if self.workflow is not None else {}),
            versioning=self.versioning,
            rebuild_stuck_after=self.rebuild_stuck_after,
            turns=self.turns,
        )
        self._task = asyncio.create_task(self.worker.run())

    async def stop_worker(self) -> None:
        if self.worker is not None:
            await self.worker.shutdown()
            assert self._task is not None
            await self._task
            self.worker = None

    async def create(
        self,
        prompt: str = "hello",
        *,
        human_available: bool = True,
        auto_permission: bool = False,
        max_model_calls: int = 20,
        context: Any = None,
    ) -> str:
        return await self.turns.create_turn(
            CreateTurnInput(
                agent=RequestedAgent(agent_id="test"),
                input=UserMessage(content=prompt),
                human_available=human_available,
                auto_permission=auto_permission,
                max_model_calls=max_model_calls,
                context=context,
            )
        )

    async def run(self, prompt: str = "hello", **kwargs: Any) -> tuple[str, TurnOutcome]:
        turn_id = await self.create(prompt, **kwargs)
        outcome = await self.turns.advance_turn(turn_id).outcome
        return turn_id, outcome

    async def send(self, turn_id: str, raw: dict[str, Any]) -> TurnOutcome:
        parsed: TurnExternalInput = external_input_adapter.validate_python(raw)
        return await self.turns.advance_turn(turn_id, parsed).outcome

    def file_state(self, turn_id: str) -> TurnState:
        return TurnReducer.of(self.repo.read(turn_id)).state

    def lines(self, turn_id: str) -> list[dict[str, Any]]:
        return [
            orjson.loads(line) for line in self.repo.path_for(turn_id).read_bytes().splitlines()
        ]

    def types(self, turn_id: str) -> list[str]:
        return [e["type"] for e in self.lines(turn_id)]

    async def query_state(self, turn_id: str) -> dict[str, Any]:
        return await self.client.get_workflow_handle(turn_id).query("state")  # type: ignore[no-any-return]

    async def assert_file_matches_query(self, turn_id: str) -> None:
        """The central invariant: reduce(read(file)) == the workflow's state query."""
        queried = await self.query_state(turn_id)
        queried.pop("rejectedInputs", None)
        assert self.file_state(turn_id).to_wire() == queried
