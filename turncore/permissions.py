"""Permission checking and classification ports (spec §9).

The checker decides whether a call needs permission; it fails closed — a tool
without an explicit ``"none"`` declaration requires permission. The
classifier (auto mode) answers allow / deny / defer for a whole batch; its
failures and omissions are treated as defer by the runtime.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Literal, Protocol

from ._wire import WireModel
from .jsonvalue import JsonValue
from .messages import ConversationMessage


class PermissionCheckInput(WireModel):
    turn_id: str
    tool_call_id: str
    tool_id: str
    tool_name: str
    input: JsonValue


class PermissionCheck(WireModel):
    required: bool
    request: JsonValue = None


class PermissionChecker(Protocol):
    async def check(self, input: PermissionCheckInput) -> PermissionCheck: ...


Declaration = Literal["none", "ask"]


class DeclaredPermissionChecker:
    """Policy from per-tool declarations; anything undeclared needs permission."""

    def __init__(self, declarations: Mapping[str, Declaration]) -> None:
        self._declarations = dict(declarations)

    async def check(self, input: PermissionCheckInput) -> PermissionCheck:
        if self._declarations.get(input.tool_id) == "none":
            return PermissionCheck(required=False)
        return PermissionCheck(
            required=True,
            request={"kind": "tool", "toolName": input.tool_name, "input": input.input},
        )


class PermissionClassificationInput(WireModel):
    tool_call_id: str
    tool_name: str
    input: JsonValue
    request: JsonValue


class PermissionClassification(WireModel):
    tool_call_id: str
    decision: Literal["allow", "deny", "defer"]
    reason: str


class PermissionClassificationBatch(WireModel):
    turn_id: str
    messages: list[ConversationMessage]
    requests: list[PermissionClassificationInput]


class PermissionClassifier(Protocol):
    async def classify(
        self, batch: PermissionClassificationBatch
    ) -> Sequence[PermissionClassification]: ...


ClassifyFunction = Callable[
    [PermissionClassificationBatch], Awaitable[Sequence[PermissionClassification]]
]


class FunctionClassifier:
    """A classifier from an async function (tests, simple policies)."""

    def __init__(self, fn: ClassifyFunction) -> None:
        self._fn = fn

    async def classify(
        self, batch: PermissionClassificationBatch
    ) -> Sequence[PermissionClassification]:
        return await self._fn(batch)


class DeferAllClassifier:
    """The safe default: every request goes to a human (or is denied without one)."""

    async def classify(
        self, batch: PermissionClassificationBatch
    ) -> Sequence[PermissionClassification]:
        return [
            PermissionClassification(
                tool_call_id=r.tool_call_id, decision="defer", reason="no classifier configured"
            )
            for r in batch.requests
        ]
