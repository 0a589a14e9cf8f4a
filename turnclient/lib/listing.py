"""Turns as Temporal visibility lists them: filtered, newest first, in pages.

Visibility knows each turn by its workflow id (the turn id, which starts with
its creation time, so ordering by id is ordering by age) and by the search
attributes the workflow upserts at every settle point (status, agent, model,
session, pending inputs). Temporal's SQL visibility cannot sort by an
attribute of our choosing, so a page is computed here: the matching
executions older than the cursor (``WorkflowId < before``) are scanned — at
most ``SCAN_LIMIT`` of them — deduplicated to the latest run per turn,
sorted by turn id, newest first, and cut to the page size. The next page
starts below the last id shown. When more than ``SCAN_LIMIT`` executions
match, the page is marked ``partial``: narrow the filters.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

from turnclient.lib.stuck import stuck_run
from turnclient.lib.summary import message_preview
from turnclient.lib.turnview import pending_inputs, timing
from turncore.errors import TurnError, TurnNotFoundError
from turncore.ids import is_turn_id
from turncore.reducer import TurnReducer
from turncore.storage.repository import TurnRepository

SCAN_LIMIT = 5000
"""Most executions one page request reads from visibility."""

PENDING_LIMIT = 200
"""Most suspended turns the "waiting for you" view reads."""

_KEYS = {
    name: SearchAttributeKey.for_keyword(name)
    for name in ("TurnStatus", "TurnAgent", "TurnModel", "TurnSession", "TurnPendingInputs")
}


def quote(value: str) -> str:
    """A string literal for a visibility query."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def turn_query(
    *,
    status: str | None = None,
    agent: str | None = None,
    session: str | None = None,
    before: str | None = None,
) -> str:
    # A run that continued as new hands the turn to its successor: list only the latest.
    clauses = ["WorkflowType = 'Turn'", "ExecutionStatus != 'ContinuedAsNew'"]
    if status:
        clauses.append(f"TurnStatus = {quote(status)}")
    if agent:
        clauses.append(f"TurnAgent = {quote(agent)}")
    if session:
        # A conversation started without a session is named after its first turn,
        # which itself carries no session attribute.
        clauses.append(f"(TurnSession = {quote(session)} OR WorkflowId = {quote(session)})")
    if before:
        clauses.append(f"WorkflowId < {quote(before)}")
    return " AND ".join(clauses)


@dataclass(frozen=True)
class TurnSummary:
    """One turn as Temporal visibility lists it (``turns list``, the web UI, ``Turns.list``)."""

    turn_id: str
    status: str | None
    agent: str | None
    model: str | None
    session: str | None
    pending: tuple[str, ...]
    """The inputs the turn awaits (``permission:ID``, ``tool:ID``)."""
    workflow_status: str | None
    start_time: str | None
    input: str | None
    """The preview of the turn's input (from its memo); None when the memo is encrypted
    with a key this process does not hold."""
    stuck: str | None = None
    """Why the turn's run is stuck (its workflow task keeps failing), or None."""

    def to_wire(self) -> dict[str, Any]:
        return {
            "turnId": self.turn_id,
            "input": self.input,
            "status": self.status,
            "agent": self.agent,
            "model": self.model,
            "session": self.session,
            "pendingInputs": list(self.pending),
            "workflowStatus": self.workflow_status,
            "startTime": self.start_time,
            "stuck": self.stuck,
        }


async def summarize(wf: WorkflowExecution, client: Client | None = None) -> TurnSummary:
    """One listed turn, from its search attributes and memo; with ``client``, a running
    one is also checked for a stuck run (one describe call)."""
    attrs = wf.typed_search_attributes
    pending = attrs.get(_KEYS["TurnPendingInputs"]) or ""
    return TurnSummary(
        turn_id=wf.id,
        status=attrs.get(_KEYS["TurnStatus"]),
        agent=attrs.get(_KEYS["TurnAgent"]),
        model=attrs.get(_KEYS["TurnModel"]),
        session=attrs.get(_KEYS["TurnSession"]),
        pending=tuple(p for p in pending.split(",") if p),
        workflow_status=wf.status.name.lower() if wf.status is not None else None,
        start_time=wf.start_time.isoformat() if wf.start_time else None,
        input=await _memo_input(wf),
        stuck=await _stuck_cause(client, wf) if client is not None else None,
    )


async def _stuck_cause(client: Client, wf: WorkflowExecution) -> str | None:
    if wf.status != WorkflowExecutionStatus.RUNNING:
        return None
    try:
        stuck = await stuck_run(client, wf.id)
    except RPCError:
        return None  # listed without the mark rather than not at all
    return stuck.cause if stuck is not None else None


async def _memo_input(wf: WorkflowExecution) -> str | None:
    """The memo's input preview; None when this process cannot decode the memo.

    A turn started with the payload codec on has an encrypted memo; a lister
    without the key (or with another key) still lists it, without the preview.
    """
    try:
        memo = await wf.memo()  # listed with the execution: decoding it is no round trip
    except Exception:
        return None
    value = memo.get("input") if isinstance(memo, dict) else None
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class TurnListing:
    turns: list[dict[str, Any]]
    next_before: str | None
    partial: bool

    def to_wire(self) -> dict[str, Any]:
        return {"turns": self.turns, "nextBefore": self.next_before, "partial": self.partial}


async def _latest_runs(client: Client, query: str) -> tuple[dict[str, WorkflowExecution], bool]:
    latest: dict[str, WorkflowExecution] = {}
    seen = 0
    async for wf in client.list_workflows(query, page_size=1000, limit=SCAN_LIMIT + 1):
        seen += 1
        if seen > SCAN_LIMIT:
            return latest, True
        if not is_turn_id(wf.id):
            continue  # a Turn workflow under another id is no turn (the workflow refuses it)
        known = latest.get(wf.id)
        if known is None or (wf.start_time or datetime.min) > (known.start_time or datetime.min):
            latest[wf.id] = wf  # a recovered turn has a newer run than the one that failed
    return latest, False


async def list_turns(
    client: Client,
    *,
    status: str | None = None,
    agent: str | None = None,
    session: str | None = None,
    page_size: int = 50,
    before: str | None = None,
) -> TurnListing:
    query = turn_query(status=status, agent=agent, session=session, before=before)
    latest, partial = await _latest_runs(client, query)
    ids = sorted(latest, reverse=True)
    page = ids[:page_size]
    rows = [
        s.to_wire() for s in await asyncio.gather(*(summarize(latest[i], client) for i in page))
    ]
    more = len(ids) > page_size or partial
    return TurnListing(rows, page[-1] if more and page else None, partial)


async def latest_turns(
    client: Client,
    *,
    status: str | None = None,
    agent: str | None = None,
    session: str | None = None,
    limit: int = 50,
) -> list[TurnSummary]:
    """Up to ``limit`` turns, newest first; a session's turns oldest first (its order).

    Reads at most ``SCAN_LIMIT`` executions; a session's latest turn is its last row
    only while the session has fewer turns than that.
    """
    latest, _ = await _latest_runs(client, turn_query(status=status, agent=agent, session=session))
    ids = sorted(latest, reverse=session is None)
    chosen = ids[-limit:] if session is not None and limit < len(ids) else ids[:limit]
    return list(await asyncio.gather(*(summarize(latest[i], client) for i in chosen)))


async def pending_across(client: Client, repository: TurnRepository) -> dict[str, Any]:
    """Everything every suspended turn waits for, newest turn first (read from the files)."""
    query = turn_query(status="suspended") + " AND ExecutionStatus = 'Running'"
    latest, partial = await _latest_runs(client, query)
    turns: list[dict[str, Any]] = []
    for turn_id in sorted(latest, reverse=True)[:PENDING_LIMIT]:
        try:
            state = TurnReducer.of(await asyncio.to_thread(repository.read, turn_id)).state
        except TurnNotFoundError:
            continue  # a turn of another work dir on the same Temporal namespace
        except TurnError as exc:
            turns.append(
                {"turnId": turn_id, "error": str(exc), "permissions": [], "asyncTools": []}
            )
            continue
        waiting = pending_inputs(state)
        if not waiting["permissions"] and not waiting["asyncTools"]:
            continue  # visibility lags the file: it was answered meanwhile
        turns.append(
            {
                "turnId": turn_id,
                "agent": state.definition.agent.resolved.agent_id,
                "prompt": message_preview(state.definition.input, 200),
                "since": state.suspension.ts if state.suspension is not None else None,
                **timing(state),
                **waiting,
            }
        )
    return {"turns": turns, "partial": partial or len(latest) > PENDING_LIMIT}


__all__ = [
    "TurnListing",
    "TurnSummary",
    "latest_turns",
    "list_turns",
    "pending_across",
    "quote",
    "summarize",
    "turn_query",
]
