"""What the web UI and its JSON API show of a turn: pure projections of its state."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from turncore.events import ModelCallCompleted, TurnEvent
from turncore.jsonvalue import JsonValue
from turncore.output import answer_errors, answer_value, output_spec
from turncore.reducer import ToolCallState, TurnState


def status_of(state: TurnState) -> str:
    """completed | failed | cancelled | suspended | running (from the file alone).

    The words of the ``TurnStatus`` search attribute, so the API's turn list
    (from visibility) and a turn's own view (from its file) agree.
    """
    if state.terminal is not None:
        return state.terminal.type.removeprefix("turn_")
    if state.suspension is not None:
        return "suspended"
    return "running"


def permission_label(tool_name: str, request: JsonValue) -> str:
    """What an approval is about: ``MCP SERVER · TOOL`` for an MCP tool's request (its
    ``kind: "mcp"`` metadata), the tool's advertised name otherwise."""
    if isinstance(request, dict) and request.get("kind") == "mcp":
        server, tool = request.get("server"), request.get("tool")
        if isinstance(server, str) and isinstance(tool, str):
            return f"MCP {server} · {tool}"
    return tool_name


def _permission_reason(call: ToolCallState) -> str | None:
    """Why the call waits for a person: the classifier's reason or the checker's error."""
    p = call.permission
    if p is None:
        return None
    if p.classification is not None:
        return p.classification.reason
    if p.classification_failed is not None:
        return f"the classifier failed: {p.classification_failed.error}"
    return p.required.checker_error


def pending_inputs(state: TurnState) -> dict[str, Any]:
    """What the turn waits for from outside, with what a person needs to decide.

    ``permissions``: approvals (tool name, input, the permission request, its
    ``label`` — ``MCP SERVER · TOOL`` for an MCP tool — and why it needs a person); ``asyncTools``: async tool calls awaiting a
    result, with their progress so far (``ask_human`` questions among them,
    the question in ``question``).
    """
    waiting = {p.tool_call_id for p in state.pending_permissions()}
    running = {p.tool_call_id for p in state.pending_async_tools()}
    permissions: list[dict[str, Any]] = []
    async_tools: list[dict[str, Any]] = []
    for call in state.tool_calls:
        if call.tool_call_id in waiting:
            assert call.permission is not None
            item: dict[str, Any] = {
                "toolCallId": call.tool_call_id,
                "toolName": call.tool_name,
                "input": call.input,
                "request": call.permission.required.request,
                "label": permission_label(call.tool_name, call.permission.required.request),
                "since": call.permission.required.ts,
            }
            item["action"] = f"approve {item['label']}"
            reason = _permission_reason(call)
            if reason:
                item["reason"] = reason
            permissions.append(item)
        elif call.tool_call_id in running:
            assert call.invocation is not None
            entry: dict[str, Any] = {
                "toolCallId": call.tool_call_id,
                "toolName": call.tool_name,
                "label": call.tool_name,
                "action": f"answer {call.tool_name}",
                "since": call.invocation.ts,
                "toolId": call.invocation.tool_id,
                "input": call.input,
                "progress": [p.progress for p in call.progress],
            }
            if isinstance(call.input, dict) and isinstance(call.input.get("question"), str):
                entry["question"] = call.input["question"]
            async_tools.append(entry)
    return {"permissions": permissions, "asyncTools": async_tools}


def _instant(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def timing(state: TurnState) -> dict[str, Any]:
    """When the turn was created and ended, and how long it ran (``None`` while open).

    From the file's own timestamps (``turn_created`` to the terminal event), so
    every surface shows the same figure; an open turn's running time is the
    viewer's to compute from ``createdAt``.
    """
    created = state.definition.ts
    ended = state.terminal.ts if state.terminal is not None else None
    duration = None
    if ended is not None:
        delta = _instant(ended) - _instant(created)
        duration = max(0, round(delta.total_seconds() * 1000))
    return {"createdAt": created, "endedAt": ended, "durationMs": duration}


def decision_of(metadata: Any) -> dict[str, Any] | None:
    """Who decided, from a decision's metadata: ``via``, ``by`` and ``at`` when recorded.

    Decisions recorded before surfaces stamped them (or sent by a caller that
    does not) carry none of the three: ``None``, and the view says nothing.
    """
    if not isinstance(metadata, dict):
        return None
    found = {k: metadata[k] for k in ("via", "by", "at") if isinstance(metadata.get(k), str)}
    return found or None


def waiting_labels(state: TurnState) -> list[dict[str, str]]:
    """What the turn waits for, in words: ``approve write_file``, ``answer ask_human``."""
    waiting = pending_inputs(state)
    return [
        {"kind": kind, "toolCallId": p["toolCallId"], "label": p["action"], "since": p["since"]}
        for kind, items in (
            ("permission", waiting["permissions"]),
            ("async", waiting["asyncTools"]),
        )
        for p in items
    ]


def turn_view(state: TurnState, offset: int, cost: dict[str, Any] | None = None) -> dict[str, Any]:
    """``GET /api/turns/{id}``: status, the §14.2 state, what it waits for, and the file offset.

    ``cost``: the estimated cost (``turnclient.cost.turn_report``), when the
    caller has a price table; never part of the turn's log.
    """
    resolved = state.definition.agent.resolved
    return {
        "turnId": state.definition.turn_id,
        "status": status_of(state),
        "agent": resolved.agent_id,
        "model": resolved.model.label(),
        "session": state.definition.session_id,
        "offset": offset,
        **timing(state),
        "cost": cost,
        "pending": pending_inputs(state),
        "output": structured_output(state),
        "state": state.to_wire(),
    }


def structured_output(state: TurnState) -> dict[str, Any] | None:
    """The structured answer of a turn whose agent declares an output schema
    (``turncore.output``); None for a free-text turn.

    ``{"schema": title, "retries": n, "answers": k, "valid": bool | None,
    "value": JSON | None, "errors": [str…]}``: ``answers`` counts the final
    answers given so far (a retry follows each invalid one); ``valid`` is None
    while no answer has come; ``value`` is the answer once it is valid.
    """
    spec = output_spec(state.definition.agent.requested)
    if spec is None:
        return None
    finals = [
        c.response
        for c in state.model_calls
        if c.response is not None and not c.response.tool_calls()
    ]
    out: dict[str, Any] = {
        "schema": spec.name,
        "retries": spec.retries,
        "answers": len(finals),
        "valid": None,
        "value": None,
        "errors": [],
    }
    if finals:
        errors = answer_errors(spec, finals[-1])
        out["valid"] = not errors
        out["errors"] = errors
        if not errors:
            out["value"] = answer_value(finals[-1])
    return out


__all__ = [
    "answering_models",
    "decision_of",
    "pending_inputs",
    "status_of",
    "structured_output",
    "timing",
    "turn_view",
    "waiting_labels",
]


def answering_models(events: Sequence[TurnEvent]) -> list[dict[str, Any]]:
    """Which model answered each completed model call, from its ``provider_metadata``
    (the binding the answer is pinned to), and the models that failed before it when
    the agent fell back (``fallbackFrom``: model, failure code and message)."""
    out: list[dict[str, Any]] = []
    for event in events:
        if not isinstance(event, ModelCallCompleted):
            continue
        meta = event.provider_metadata
        ours = meta.get("turncore") if isinstance(meta, dict) else None
        if not isinstance(ours, dict):
            continue
        binding = ours.get("binding")
        if not isinstance(binding, dict):
            continue
        row: dict[str, Any] = {
            "modelCallIndex": event.model_call_index,
            "answeredBy": f"{binding.get('provider')}/{binding.get('model')}",
        }
        fell = ours.get("fallbackFrom")
        if isinstance(fell, list) and fell:
            row["fallbackFrom"] = fell
        out.append(row)
    return out


def answering_lines(events: Sequence[TurnEvent]) -> list[str]:
    """``turns show``'s lines for model calls answered after a fallback."""
    lines = []
    for row in answering_models(events):
        fell = row.get("fallbackFrom")
        if not fell:
            continue
        before = ", ".join(
            f"{f.get('model')} ({f.get('code')})" for f in fell if isinstance(f, dict)
        )
        lines.append(
            f"model call {row['modelCallIndex']} answered by {row['answeredBy']} "
            f"(fell back after {before})"
        )
    return lines
