"""A readable, deterministic summary of a ``TurnState`` (``turns state``).

It shows what the durable log says and nothing about liveness (§14.3): an
open model call is "no outcome recorded", never "running". Media parts are
described by kind, source kind, media type and size, never by their bytes,
URLs or ids (DESIGN §2).
"""

from __future__ import annotations

from typing import Any

import orjson

from turncore.events import (
    ContextRef,
    InheritedAgentSnapshot,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnUsage,
)
from turncore.messages import (
    AssistantMessage,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    UserMessage,
    describe_part,
)
from turncore.reducer import ModelCallState, ToolCallState, TurnState

PREVIEW = 72
"""Longest preview of a message or JSON value, in characters."""


def clip(text: str, limit: int = PREVIEW) -> str:
    """One line, at most ``limit`` characters (an ellipsis marks the cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def json_preview(value: Any) -> str:
    return clip(orjson.dumps(value).decode())


def message_preview(message: UserMessage | AssistantMessage, limit: int = PREVIEW) -> str:
    if isinstance(message.content, str):
        return clip(message.content, limit)
    bits: list[str] = []
    for part in message.content:
        if isinstance(part, ReasoningPart):
            continue  # reasoning is not the message; the step events record that it happened
        if isinstance(part, ToolCallPart):
            bits.append(f"[tool call {part.tool_name} · {part.tool_call_id}]")
        elif isinstance(part, TextPart):
            bits.append(part.text)
        else:
            bits.append(describe_part(part))
    return clip(" ".join(bits), limit)


def usage_text(usage: TurnUsage) -> str:
    names = (
        ("in", usage.input_tokens),
        ("out", usage.output_tokens),
        ("total", usage.total_tokens),
        ("reasoning", usage.reasoning_tokens),
        ("cached", usage.cached_input_tokens),
    )
    shown = [f"{name}={n}" for name, n in names if n is not None]
    return " ".join(shown) if shown else "none"


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _definition(state: TurnState) -> list[str]:
    d = state.definition
    requested = d.agent.requested
    resolved = d.agent.resolved
    asked = f"requested {requested.agent_id}"
    if requested.overrides is not None and requested.overrides.model is not None:
        asked += f", model override {requested.overrides.model.label()}"
    if requested.overrides is not None and requested.overrides.composition is not None:
        asked += f", composition {json_preview(requested.overrides.composition)}"
    lines = [
        f"turn {d.turn_id}",
        f"  created    {d.ts}",
        f"  session    {d.session_id if d.session_id is not None else '-'}",
        f"  agent      {resolved.agent_id} ({asked})",
        f"  model      {resolved.model.label()}",
    ]
    if isinstance(resolved, InheritedAgentSnapshot):
        lines.append(f"  tools      inherited from {resolved.inherited_from}")
    elif resolved.tools:
        tools = []
        for t in resolved.tools:
            kind = t.execution + (", human" if t.requires_human else "")
            tools.append(f"{t.name} ({kind})")
        lines.append(f"  tools      {', '.join(tools)}")
    else:
        lines.append("  tools      none")
    c = d.config
    config = (
        f"autoPermission={_flag(c.auto_permission)} humanAvailable={_flag(c.human_available)} "
        f"maxModelCalls={c.max_model_calls}"
    )
    if c.reasoning_effort is not None:
        config += f" reasoningEffort={c.reasoning_effort}"
    lines.append(f"  config     {config}")
    if isinstance(d.context, ContextRef):
        lines.append(f"  context    after turn {d.context.previous_turn_id}")
    else:
        n = len(d.context)
        lines.append(
            f"  context    {n} inline message{'s' if n != 1 else ''}" if n else "  context    none"
        )
    lines.append(f"  input      {message_preview(d.input)}")
    return lines


def _model_call(call: ModelCallState) -> list[str]:
    refs = ", ".join(call.request.messages) or "(none: re-issued)"
    if call.request.context_ref is not None:
        refs = f"contextRef {call.request.context_ref.previous_turn_id}, {refs}"
    steps = len(call.step_events)
    head = f"  #{call.index}"
    if call.response is not None:
        usage = usage_text(call.usage) if call.usage is not None else "none"
        lines = [
            f"{head} completed · finish {call.finish_reason} · usage {usage} · {steps} step events",
            f"      refs      {refs}",
            f"      response  {message_preview(call.response)}",
        ]
    elif call.error is not None:
        lines = [
            f"{head} failed · {steps} step events",
            f"      refs      {refs}",
            f"      error     {clip(call.error)}",
        ]
    else:
        lines = [
            f"{head} no outcome recorded · {steps} step events",
            f"      refs      {refs}",
        ]
    budget = call.request.parameters.get("contextBudget")
    if isinstance(budget, dict):
        line = f"      budget    {budget.get('tokens')} tokens, dropped {budget.get('dropped')}"
        summary = budget.get("summary")
        if isinstance(summary, dict):
            line += f" · summary turn {summary.get('turnId')}"
            if summary.get("error") is not None:
                line += " failed"
            elif not summary.get("sent"):
                line += " not sent"
            paid = summary.get("usage")
            if isinstance(paid, dict):
                line += f" · summary usage {usage_text(TurnUsage.model_validate(paid))}"
        lines.append(line)
    return lines


def decided_text(metadata: Any) -> str | None:
    """``ada via web at 2026-…Z``: who decided, from a decision's ``via``/``by``/``at``."""
    if not isinstance(metadata, dict):
        return None
    parts = []
    for key, shown in (("by", "{}"), ("via", "via {}"), ("at", "at {}")):
        value = metadata.get(key)
        if isinstance(value, str) and value:
            parts.append(shown.format(clip(value, 64)))
    return " ".join(parts) or None


def _permission(tool: ToolCallState) -> str | None:
    p = tool.permission
    if p is None:
        return None
    text = "required"
    if p.required.checker_error is not None:
        text += f" (checker error: {clip(p.required.checker_error, 48)})"
    if p.classification is not None:
        text += f" → classified {p.classification.decision}"
    if p.resolved is not None:
        text += f" → resolved {p.resolved.decision} by {p.resolved.source}"
        who = decided_text(p.resolved.metadata)
        if who:
            text += f" [{who}]"
        if p.resolved.reason:
            text += f" ({clip(p.resolved.reason, 48)})"
    else:
        text += " → undecided"
    return text


def _tool_call(tool: ToolCallState, inherited: bool) -> list[str]:
    # With an inherited snapshot the tool set is not in this file, so a call
    # that was never invoked has no known identity; otherwise it is unknown.
    kind = tool.execution or ("identity not recorded" if inherited else "unknown tool")
    ident = f"{tool.tool_id}, " if tool.tool_id else ""
    lines = [
        f"  {tool.tool_call_id}  {tool.tool_name} ({ident}{kind}) · "
        f"model call {tool.model_call_index}, position {tool.order}",
        f"      input       {json_preview(tool.input)}",
    ]
    permission = _permission(tool)
    if permission is not None:
        lines.append(f"      permission  {permission}")
    if tool.invocation is not None:
        lines.append(f"      invoked     {tool.invocation.ts}")
    if tool.progress:
        last = json_preview(tool.progress[-1].progress)
        lines.append(f"      progress    {len(tool.progress)} update(s), last {last}")
    if tool.result is not None:
        r = tool.result
        status = "error" if r.result.is_error else "ok"
        lines.append(f"      result      {status} from {r.source}: {json_preview(r.result.output)}")
        who = decided_text(r.result.metadata) if r.source == "async" else None
        if who:
            lines.append(f"      answered    {who}")
    else:
        lines.append("      result      none yet")
    return lines


def _terminal(state: TurnState) -> list[str]:
    t = state.terminal
    if t is None:
        return ["terminal", "  none"]
    match t:
        case TurnCompleted():
            return [
                "terminal",
                f"  completed · finish {t.finish_reason} · {message_preview(t.output)}",
            ]
        case TurnFailed():
            code = f" [{t.code}]" if t.code else ""
            return ["terminal", f"  failed{code} · {clip(t.error)}"]
        case TurnCancelled():
            reason = f" · {clip(t.reason)}" if t.reason else ""
            return ["terminal", f"  cancelled{reason}"]


def summarize(state: TurnState) -> str:
    """The whole summary, one fact per line, ending without a newline."""
    lines = _definition(state)
    lines.append("")
    lines.append(f"model calls ({len(state.model_calls)})")
    for call in state.model_calls:
        lines += _model_call(call)
    if not state.model_calls:
        lines.append("  none")
    lines.append("")
    lines.append(f"tool calls ({len(state.tool_calls)})")
    inherited = isinstance(state.definition.agent.resolved, InheritedAgentSnapshot)
    for tool in state.tool_calls:
        lines += _tool_call(tool, inherited)
    if not state.tool_calls:
        lines.append("  none")
    lines.append("")
    lines.append("suspension")
    s = state.suspension
    if s is None:
        lines.append("  none")
    else:
        lines.append(f"  since {s.ts}")
        for p in s.pending_permissions:
            lines.append(f"  awaiting permission  {p.tool_name} ({p.tool_call_id})")
        for a in s.pending_async_tools:
            lines.append(f"  awaiting result      {a.tool_name} ({a.tool_call_id})")
    lines.append("")
    lines += _terminal(state)
    lines.append("")
    lines.append(f"usage {usage_text(state.usage)}")
    return "\n".join(lines)
