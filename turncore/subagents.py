"""Sub-agents (spec §29.2, DESIGN §5): a workflow-native ``spawn_agent`` tool.

To the parent turn it is an ordinary sync tool. The runtime runs each call
as a child turn — its own file, its own workflow — and records the link as
durable progress on the parent call (``{"kind": "subagent", "childTurnId"}``),
then the child's final text and status as the call's result. Concurrent sync
execution gives parallel fan-out. Depth is capped at one: a child never gets
the spawn tool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .events import ToolDescriptor, ToolResultData, TurnOutcome

SPAWN_AGENT_TOOL_ID = "workflow:spawn_agent"
"""Tool ids under ``workflow:`` are implemented by the turn workflow itself."""

WORKFLOW_TOOL_PREFIX = "workflow:"


def spawn_agent_descriptor(name: str = "spawn_agent") -> ToolDescriptor:
    return ToolDescriptor(
        tool_id=SPAWN_AGENT_TOOL_ID,
        name=name,
        description=(
            "Run a sub-agent on a task and return its final answer. Several calls in one "
            "response run in parallel. The sub-agent cannot spawn agents itself."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "agent": {"type": "string", "description": "the id of a configured agent"},
                "prompt": {"type": "string", "description": "the task, as a user message"},
            },
            "required": ["agent", "prompt"],
            "additionalProperties": False,
        },
        execution="sync",
        requires_human=False,
    )


def is_workflow_tool(descriptor: ToolDescriptor) -> bool:
    return descriptor.tool_id.startswith(WORKFLOW_TOOL_PREFIX)


def spawn_request(input: Any) -> tuple[str, str] | str:
    """``(agent, prompt)`` from the model's call, or why it is unusable."""
    if not isinstance(input, dict):
        return "spawn_agent needs an object with 'agent' and 'prompt'"
    agent, prompt = input.get("agent"), input.get("prompt")
    if not isinstance(agent, str) or not agent:
        return "spawn_agent needs 'agent': the id of a configured agent"
    if not isinstance(prompt, str) or not prompt:
        return "spawn_agent needs 'prompt': the task for the sub-agent"
    return agent, prompt


def child_link(child_turn_id: str) -> dict[str, Any]:
    """The durable progress that links a parent call to its child turn."""
    return {"kind": "subagent", "childTurnId": child_turn_id}


def linked_child(progress: Sequence[Any]) -> str | None:
    """The child turn a call's durable progress links it to, if any."""
    for p in progress:
        value = getattr(p, "progress", p)
        if isinstance(value, dict) and value.get("kind") == "subagent":
            return str(value["childTurnId"])
    return None


def child_result(child_turn_id: str, outcome: TurnOutcome) -> ToolResultData:
    """The parent call's result: the child's final text plus a status envelope."""
    envelope: dict[str, Any] = {"childTurnId": child_turn_id, "status": outcome.status}
    match outcome.status:
        case "completed":
            envelope["text"] = outcome.output.text()
        case "failed":
            envelope["error"] = outcome.error
        case "cancelled":
            if outcome.reason:
                envelope["reason"] = outcome.reason
        case "suspended":
            envelope["pending"] = [p.tool_call_id for p in outcome.pending_permissions] + [
                p.tool_call_id for p in outcome.pending_async_tools
            ]
    return ToolResultData(output=envelope, is_error=outcome.status != "completed")
