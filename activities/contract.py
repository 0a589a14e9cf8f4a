"""The activities' names and typed signatures, without their implementation.

The workflow invokes activities by method reference on ``TurnActivityContract``
(``workflow.execute_activity_method``), so every call is checked by mypy against
one signature, and it never imports the implementation's I/O into the sandbox.
``TurnActivities`` (``turn_activities.py``) implements every method; the worker
registers its bound methods, whose activity names are the method names.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from typing import Any

from pydantic import TypeAdapter
from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticJSONPlainPayloadConverter
from temporalio.converter import (
    CompositePayloadConverter,
    DataConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
)

from .payloads import (
    AppendInput,
    AppendResult,
    AwaitChildInput,
    AwaitChildResult,
    CheckPermissionsInput,
    CheckPermissionsResult,
    ClassifyInput,
    ClassifyResult,
    CreateChildInput,
    CreateChildResult,
    FastToolsInput,
    FastToolsResult,
    LoadInput,
    LoadResult,
    MaterializeAgentInput,
    MaterializeAgentResult,
    ModelCallInput,
    ModelCallResult,
    ToolCallInput,
    ToolCallResult,
    ValidateDependenciesInput,
)


class TurnActivityContract(ABC):
    # -- local activities, safe to retry -----------------------------------

    @activity.defn
    @abstractmethod
    async def append_events(self, input: AppendInput) -> AppendResult:
        """Append a batch (written once even when retried), or derive and append one."""

    @activity.defn
    @abstractmethod
    async def load_turn(self, input: LoadInput) -> LoadResult:
        """The file's events from ``start``, elided, in pages that fit a payload."""

    @activity.defn
    @abstractmethod
    async def validate_dependencies(self, input: ValidateDependenciesInput) -> None:
        """§15.3: the live model and tools must match the snapshot before advancing."""

    @activity.defn
    @abstractmethod
    async def materialize_agent(self, input: MaterializeAgentInput) -> MaterializeAgentResult:
        """The tools an inherited agent snapshot resolves to through its chain (§6.7)."""

    @activity.defn
    @abstractmethod
    async def check_permissions(self, input: CheckPermissionsInput) -> CheckPermissionsResult:
        """The permission checker's answer per call; its errors fail closed."""

    @activity.defn
    @abstractmethod
    async def classify_permissions(self, input: ClassifyInput) -> ClassifyResult:
        """The classifier's decisions; its failure is a modelled defer."""

    @activity.defn
    @abstractmethod
    async def create_child_turn(self, input: CreateChildInput) -> CreateChildResult:
        """Create and link the child turn of a ``spawn_agent`` call (idempotent)."""

    @activity.defn
    @abstractmethod
    async def run_fast_tools(self, input: FastToolsInput) -> FastToolsResult:
        """A batch of fast tools (one attempt): invocations, then the tools, each result
        as it lands; a re-executed attempt closes what a lost one may have started."""

    # -- regular activities, one attempt -------------------------------------

    @activity.defn
    @abstractmethod
    async def call_model(self, input: ModelCallInput) -> ModelCallResult:
        """One model call, recorded durably as it streams."""

    @activity.defn
    @abstractmethod
    async def run_tool(self, input: ToolCallInput) -> ToolCallResult:
        """One sync tool execution, its progress and result recorded durably."""

    @activity.defn
    @abstractmethod
    async def await_child_turn(self, input: AwaitChildInput) -> AwaitChildResult:
        """Follow a child turn a lost run of its parent started, until it ends."""


ACTIVITY_NAMES: tuple[str, ...] = tuple(
    name for name, value in vars(TurnActivityContract).items() if callable(value)
)
"""Every activity the workflow may invoke, in declaration order."""


@functools.lru_cache(maxsize=1024)
def payload_adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint)


class _SharedAdaptersJSON(PydanticJSONPlainPayloadConverter):
    """Pydantic's JSON converter, with one cache of type adapters for the process.

    The sandbox makes a payload converter for every workflow run, and pydantic's
    converter caches adapters per instance: each run built the adapter (the
    schema) of every payload type it met afresh, about a sixth of a busy
    worker's CPU. Payload types are module-level classes, so one cache keyed by
    type serves every run; an unhashable hint gets an adapter of its own.
    """

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        hint = type_hint if type_hint is not None else Any
        try:
            adapter = payload_adapter(hint)
        except TypeError:
            adapter = TypeAdapter(hint)  # unhashable: not cached
        return adapter.validate_json(payload.data)


class TurnPayloadConverter(CompositePayloadConverter):
    """The default converters, with JSON through ``_SharedAdaptersJSON``."""

    def __init__(self) -> None:
        super().__init__(
            *(
                _SharedAdaptersJSON() if isinstance(c, JSONPlainPayloadConverter) else c
                for c in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )


DATA_CONVERTER: DataConverter = DataConverter(payload_converter_class=TurnPayloadConverter)
"""The worker's converter: payloads are typed (pydantic), so events cross as
``TurnEvent`` and are validated once, where they arrive. It reads what the
default JSON converter wrote (committed histories replay under it)."""
