"""The web UI's HTTP surface: pages, the JSON API and Server-Sent Events.

Handlers are thin: they parse and bound the request, read turn files through
the runtime's repository, list turns from Temporal visibility, and send
every decision through ``TurnClient.advance_turn`` — the path the ``turns``
CLI takes (a check against the file, then a workflow update whose validator
checks again) — so a stale or double decision is refused here exactly as
there, with 409 and nothing appended. docs/api.md documents every endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import orjson
from ag_ui.core import RunErrorEvent
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from temporalio.client import Client
from temporalio.service import RPCError

from turnclient.lib.api import CreateTurnInput, TurnClient, decided, os_user
from turnclient.lib.cost import Pricer, turn_report
from turnclient.lib.deltaspool import spool_dir
from turnclient.lib.follow import Durable, Live, Settled, follow_turn
from turnclient.lib.listing import TurnListing, list_turns, pending_across
from turnclient.lib.turnview import pending_inputs, status_of, timing, turn_view, waiting_labels
from turncore.errors import (
    CorruptTurnError,
    DependencyError,
    InfrastructureError,
    InvalidInputError,
    RejectedInputError,
    TurnError,
    TurnNotFoundError,
)
from turncore.events import (
    AsyncToolProgressInput,
    AsyncToolResultInput,
    CancelInput,
    ContextRef,
    ModelCallCompleted,
    ModelCallFailed,
    PermissionDecisionInput,
    RequestedAgent,
    ToolResultData,
    TurnExternalInput,
    TurnOutcome,
)
from turncore.ids import is_turn_id
from turncore.jsonvalue import MAX_JSON_DEPTH, JsonValue, loads_exact
from turncore.messages import UserMessage
from turncore.reducer import TurnReducer
from turncore.surface import SurfaceProjector

from ._agui import AgUiProjector
from ._agui import to_sse as agui_sse
from ._security import USER, Guard
from ._tokens import Tokens

if TYPE_CHECKING:
    from turnclient.runtime.connection import Runtime

log = logging.getLogger(
    "turnclient.ui._app"
)  # its name before the move: logging configs keep working

STATIC = resources.files("turnclient.servers.ui") / "static"

MAX_BODY = 1024 * 1024
"""Largest request body accepted, in bytes (a complete's output included)."""

MAX_DEPTH = MAX_JSON_DEPTH + 1
"""Deepest nesting of arrays and objects in a request body: the body (level 1)
around a value of at most ``MAX_JSON_DEPTH`` levels, the limit every input
value is held to (``turncore.jsonvalue``). Walked before the standard
library's parser, which gives up near 1000 levels, ever sees the body."""

BODY_TIMEOUT = 30.0
"""Longest time, in seconds, a request body may take to arrive in full (408 beyond)."""

DECISION_WAIT = 10.0
"""How long a decision request waits for the turn's next settle point before answering 202."""

HEARTBEAT = 15.0
"""Seconds between SSE comments that keep idle proxies from closing the stream."""


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _error(status: int, message: str) -> JSONResponse:
    # After a 408 the rest of the body may still be on its way: close the connection
    # rather than read it as the next request.
    headers = {"connection": "close"} if status == 408 else None
    return JSONResponse({"error": message, "status": status}, status_code=status, headers=headers)


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(doc), status_code=status, media_type="application/json")


# ---------------------------------------------------------------- request bodies


class _Body(BaseModel):
    """A request body: wire names only, nothing unknown, nothing coerced ("1" is no number)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=False,
        validate_by_alias=True,
        extra="forbid",
        strict=True,
    )


class _Empty(_Body):
    pass


class _Deny(_Body):
    reason: str | None = Field(default=None, max_length=4000)


class _Complete(_Body):
    output: JsonValue = None
    text: str | None = None
    is_error: bool = False


class _Progress(_Body):
    data: JsonValue


class _Cancel(_Body):
    reason: str | None = Field(default=None, max_length=4000)


class _Create(_Body):
    prompt: str = Field(min_length=1, max_length=200_000)
    agent: str | None = None
    continue_from: str | None = None
    session: str | None = Field(default=None, min_length=1, max_length=200)
    human_available: bool = True
    auto_permission: bool = False
    max_model_calls: int | None = Field(default=None, ge=1, le=1000)


B = TypeVar("B", bound=_Body)


async def _body(ctx: UiContext, request: Request, model: type[B]) -> B:
    """The request's JSON body as ``model``: 413 past ``MAX_BODY``, 408 if it takes longer
    than ``ctx.body_timeout`` to arrive, 400 if malformed.

    The limit is on the whole body, not on each wait for more: a client that sends a
    byte now and then would otherwise hold a connection (and a decision) forever.
    Nothing is read past it and nothing is decided: the handler never sees the body.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise HttpError(413, f"request body over {MAX_BODY} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(ctx.body_timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY:
                    raise HttpError(413, f"request body over {MAX_BODY} bytes")
                chunks.append(chunk)
    except ClientDisconnect:
        raise HttpError(400, "the request body was cut off") from None
    except TimeoutError:
        raise HttpError(
            408, f"the request body took over {ctx.body_timeout:g} s to arrive"
        ) from None
    raw = b"".join(chunks)
    if not raw.strip():
        raise HttpError(
            400, "the body is empty: send a JSON object ({} when there is nothing to say)"
        )
    doc = _parse(raw)
    if not isinstance(doc, dict):
        raise HttpError(400, "the body must be a JSON object")
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise HttpError(400, f"invalid body: {problems}") from None


def _parse(raw: bytes) -> Any:
    """The body's JSON value, every number as written (``loads_exact``), or 400."""
    try:
        return loads_exact(raw, MAX_DEPTH)
    except ValueError as exc:
        raise HttpError(400, f"the body is {exc}") from None


# ---------------------------------------------------------------- the app


@dataclass
class UiContext:
    """What every handler needs: the runtime's repository and config, a Temporal client."""

    runtime: Runtime
    client: Client
    turns: TurnClient
    decision_wait: float = DECISION_WAIT
    body_timeout: float = BODY_TIMEOUT
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    pricer: Pricer = field(default_factory=lambda: Pricer({}))
    ended: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What the list shows of turns that ended (cost, duration, labels): their files no
    longer change, so each is read once (bounded: ``ENDED_CACHE`` turns)."""

    @property
    def spool(self) -> Path:
        return spool_dir(self.runtime.work_dir)

    def keep(self, task: asyncio.Task[Any], what: str) -> None:
        """Hold a background advance until it settles, and log how it ended."""
        self.background.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self.background.discard(t)
            if t.cancelled():
                return
            exc = t.exception()
            if exc is not None:
                log.warning("%s ended with %s: %s", what, type(exc).__name__, exc)

        task.add_done_callback(done)


ENDED_CACHE = 2000
"""Most ended turns whose list details the UI keeps in memory."""

Handler = Callable[[Request], Awaitable[Response]]


def _guarded(
    handler: Callable[[UiContext, Request], Awaitable[Response]], ctx: UiContext
) -> Handler:
    async def run(request: Request) -> Response:
        try:
            return await handler(ctx, request)
        except HttpError as exc:
            return _error(exc.status, exc.message)
        except RejectedInputError as exc:
            return _error(409, f"rejected: {exc}")
        except TurnNotFoundError as exc:
            return _error(404, str(exc))
        except InvalidInputError as exc:
            return _error(400, str(exc))
        except CorruptTurnError as exc:
            return _error(500, f"{exc} (see `turns validate` and `turns repair`)")
        except (DependencyError, InfrastructureError) as exc:
            return _error(503, str(exc))
        except RPCError as exc:
            return _error(503, f"Temporal: {exc.message or exc}")

    return run


def _turn_id(request: Request) -> str:
    turn_id = request.path_params["turn_id"]
    if not is_turn_id(turn_id):
        raise HttpError(404, f"no turn {turn_id!r}: not a turn id")
    return str(turn_id)


async def _events_of(ctx: UiContext, turn_id: str) -> list[Any]:
    try:
        return await asyncio.to_thread(ctx.runtime.repository.read, turn_id)
    except TurnNotFoundError:
        raise HttpError(404, f"no turn {turn_id}") from None


# -- pages ------------------------------------------------------------------


async def index_page(ctx: UiContext, request: Request) -> Response:
    return FileResponse(str(STATIC / "index.html"), media_type="text/html")


async def favicon(ctx: UiContext, request: Request) -> Response:
    return FileResponse(
        str(STATIC / "favicon.ico"),
        media_type="image/x-icon",
        headers={"cache-control": "max-age=86400"},
    )


async def me_endpoint(ctx: UiContext, request: Request) -> Response:
    """Who the server takes the caller for: the name its decisions will carry."""
    return _json({"by": _user(request)})


async def turn_page(ctx: UiContext, request: Request) -> Response:
    turn_id = _turn_id(request)
    if not await asyncio.to_thread(ctx.runtime.repository.exists, turn_id):
        raise HttpError(404, f"no turn {turn_id}")
    return FileResponse(str(STATIC / "turn.html"), media_type="text/html")


# -- reading ----------------------------------------------------------------


_STATUSES = ("running", "suspended", "completed", "failed", "cancelled")


async def list_endpoint(ctx: UiContext, request: Request) -> Response:
    q = request.query_params
    status = q.get("status") or None
    if status is not None and status not in _STATUSES:
        raise HttpError(400, f"status must be one of {', '.join(_STATUSES)}")
    try:
        page_size = int(q.get("pageSize", "50"))
    except ValueError:
        raise HttpError(400, "pageSize must be a whole number") from None
    if not 1 <= page_size <= 500:
        raise HttpError(400, "pageSize must be 1..500")
    before = q.get("before") or None
    if before is not None and not is_turn_id(before):
        raise HttpError(400, "before must be a turn id (the nextBefore of the previous page)")
    listing: TurnListing = await list_turns(
        ctx.client,
        status=status,
        agent=q.get("agent") or None,
        session=q.get("session") or None,
        page_size=page_size,
        before=before,
    )
    rows = await asyncio.gather(*(_with_details(ctx, row) for row in listing.turns))
    return _json({**listing.to_wire(), "turns": rows})


async def _details(ctx: UiContext, turn_id: str) -> dict[str, Any]:
    """What the list adds to visibility's row, from the turn's file: when it ran, how
    long, its estimated cost and what it waits for in words. Empty for a turn this work
    dir has no file of (another work dir on the same namespace) or cannot read."""
    known = ctx.ended.get(turn_id)
    if known is not None:
        return known
    try:
        events = await asyncio.to_thread(ctx.runtime.repository.read, turn_id)
    except TurnError:
        return {}
    state = TurnReducer.of(events).state
    cost = ctx.pricer.turn_costs(state)[0]
    details = {
        **timing(state),
        "cost": cost.to_json() if cost is not None else None,
        "waitingFor": waiting_labels(state),
    }
    if state.terminal is not None:
        if len(ctx.ended) >= ENDED_CACHE:
            ctx.ended.pop(next(iter(ctx.ended)))
        ctx.ended[turn_id] = details
    return details


async def _with_details(ctx: UiContext, row: dict[str, Any]) -> dict[str, Any]:
    return {**row, **(await _details(ctx, row["turnId"]))}


async def pending_endpoint(ctx: UiContext, request: Request) -> Response:
    doc = await pending_across(ctx.client, ctx.runtime.repository)
    count = sum(len(t["permissions"]) + len(t["asyncTools"]) for t in doc["turns"])
    return _json({**doc, "count": count})


async def agents_endpoint(ctx: UiContext, request: Request) -> Response:
    cfg = ctx.runtime.config
    return _json(
        {
            "defaultAgent": cfg.default_agent,
            "agents": [{"name": n, "tools": list(a.tools)} for n, a in cfg.agents.items()],
        }
    )


async def turn_endpoint(ctx: UiContext, request: Request) -> Response:
    turn_id = _turn_id(request)
    events = await _events_of(ctx, turn_id)
    state = TurnReducer.of(events).state
    view = turn_view(state, len(events), turn_report(ctx.pricer, state))
    view["stuck"] = None
    if state.terminal is None:
        try:
            stuck = await ctx.turns.stuck(turn_id)
        except TurnError:
            stuck = None  # Temporal away: the file's view still stands
        if stuck is not None:
            view["stuck"] = {"cause": stuck.cause, "fix": stuck.fix}
    return _json(view)


async def turn_pending_endpoint(ctx: UiContext, request: Request) -> Response:
    turn_id = _turn_id(request)
    events = await _events_of(ctx, turn_id)
    state = TurnReducer.of(events).state
    return _json({"turnId": turn_id, "status": status_of(state), **pending_inputs(state)})


@dataclass(frozen=True)
class _Resume:
    """Where a stream resumes: after line ``after``, the first ``skip`` events made from
    the line that follows, and deltas up to ``deltas`` (model call, seq)."""

    after: int
    skip: int = 0
    deltas: tuple[int, int] = (-1, 0)


_RESUME_FORMS = "expected N, N:J or N:CALL:SEQ (decimal numbers as the server writes them)"
_NUMBER = r"(?:0|[1-9][0-9]{0,14})"
_RESUME = re.compile(rf"{_NUMBER}(?::{_NUMBER}){{0,2}}")
"""Exactly the ids the server writes: ASCII digits, no sign, no leading zero, at most
15 digits a number (below 2**53). Not ``int()``, which also reads ``1_0``, ``+5``,
`` 5`` and other scripts' digits."""


def _resume_point(request: Request) -> _Resume:
    """``Last-Event-ID`` (or ``after``): ``N`` (line N), ``N:J`` (the first J events made
    from line N, when it made several) or ``N:CALL:SEQ`` (a delta after line N).

    Anything else is 400, the header too: a browser sends back only an id this
    server gave it, so a malformed one comes from a client that made it up or a
    proxy that mangled it, and a guessed resume point would resend or skip events.
    An empty header is no header (an ``EventSource`` whose last id was empty).
    """
    header = request.headers.get("last-event-id")
    if header:
        raw, source = header, "Last-Event-ID"
    else:
        raw, source = request.query_params.get("after", "0"), "?after="
    if not _RESUME.fullmatch(raw):
        raise HttpError(400, f"bad {source} {raw!r}: {_RESUME_FORMS}")
    numbers = [int(p) for p in raw.split(":")]
    if len(numbers) == 1:
        return _Resume(numbers[0])
    if len(numbers) == 2 and min(numbers) >= 1:
        return _Resume(numbers[0] - 1, skip=numbers[1])
    if len(numbers) == 3:
        return _Resume(numbers[0], deltas=(numbers[1], numbers[2]))
    raise HttpError(400, f"bad {source} {raw!r}: {_RESUME_FORMS}")


def _sse(event: str, data: Any, id: str | None = None) -> bytes:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


async def events_endpoint(ctx: UiContext, request: Request) -> Response:
    turn_id = _turn_id(request)
    resume = _resume_point(request)
    fmt = request.query_params.get("format", "turn")
    if fmt not in _FORMATS:
        raise HttpError(400, f"format must be one of {', '.join(_FORMATS)}")
    follow = request.query_params.get("follow", "0") not in ("0", "false", "")
    streaming = "text/event-stream" in request.headers.get("accept", "")
    events = await _events_of(ctx, turn_id)  # 404 before any stream starts
    if not streaming:
        return _log_slice(events, resume, fmt)
    until: Literal["settled", "terminal"] = "terminal" if follow else "settled"
    stream = _event_stream(ctx, request, turn_id, resume, until, fmt)
    return StreamingResponse(
        stream,
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


_FORMATS = ("turn", "surface", "ag-ui")


def _log_slice(events: list[Any], resume: _Resume, fmt: str) -> Response:
    after, skip = resume.after, resume.skip
    if fmt == "ag-ui":
        agui = AgUiProjector()
        out: list[bytes] = []
        for i, e in enumerate(events):
            shown = agui.feed(e, i + 1)
            if i >= after:
                shown = shown[skip:] if i == after else shown
                out += [m.model_dump_json(by_alias=True).encode() + b"\n" for m in shown]
        return Response(b"".join(out), media_type="application/x-ndjson")
    if fmt == "surface":
        projector = SurfaceProjector()
        lines: list[bytes] = []
        for i, e in enumerate(events):
            made = projector.feed(e)
            if i >= after:
                made = made[skip:] if i == after else made
                lines += [orjson.dumps(s.to_wire()) + b"\n" for s in made]
        return Response(b"".join(lines), media_type="application/x-ndjson")
    return _json(
        {
            "events": [
                {"offset": i + 1, "event": e.to_wire()}
                for i, e in enumerate(events)
                if i >= after + (1 if skip else 0)
            ],
            "offset": len(events),
        }
    )


async def _event_stream(
    ctx: UiContext,
    request: Request,
    turn_id: str,
    resume: _Resume,
    until: Literal["settled", "terminal"],
    fmt: str,
) -> AsyncIterator[bytes]:
    yield b"retry: 1000\n\n"
    projector: SurfaceProjector | AgUiProjector | None = None
    if fmt == "surface":
        # Item ids follow from every event before the resume point: replay them silently.
        projector = SurfaceProjector()
        for e in (await asyncio.to_thread(ctx.runtime.repository.read, turn_id))[: resume.after]:
            projector.feed(e)
    elif fmt == "ag-ui":
        # So do runs and open messages: replay what came before, silently, too.
        projector = AgUiProjector()
        before = await asyncio.to_thread(ctx.runtime.repository.read, turn_id)
        for i, e in enumerate(before[: resume.after]):
            projector.feed(e, i + 1)
    delta_after, quiet = resume.deltas, None
    if isinstance(projector, AgUiProjector) and resume.deltas[1] > 0:
        # Resumed inside a streaming message: its text so far is the client's, not in
        # the file. Read the call's deltas again from its first and feed the ones the
        # client has to the projector silently, so the final text completes it exactly
        # (if they are gone — the call closed first — it sends the thread as it is).
        projector.reopen(*resume.deltas)
        delta_after, quiet = (resume.deltas[0], 0), resume.deltas
    items = follow_turn(
        ctx.runtime.repository,
        ctx.spool,
        turn_id,
        after=resume.after,
        delta_after=delta_after,
        until=until,
        deltas=ctx.runtime.delta_reader(turn_id, delta_after),
    )
    skip = resume.skip  # of the events made from line after + 1, already sent
    # The last delta sent (or resumed after) of the model call still open: the ids of
    # the durable events that follow carry it, so a client resuming after one of them
    # is not sent again the deltas it has (a call's step events land between them).
    deltas: tuple[int, int] | None = resume.deltas if resume.deltas != (-1, 0) else None
    loop = asyncio.get_running_loop()
    beat = loop.time()
    next_item: asyncio.Task[Any] | None = None
    try:
        while True:
            if next_item is None:
                next_item = asyncio.ensure_future(anext(items))
            done, _ = await asyncio.wait({next_item}, timeout=1.0)
            if not done:
                if await request.is_disconnected():
                    return
                if loop.time() - beat > HEARTBEAT:
                    beat = loop.time()
                    yield b": keep-alive\n\n"
                continue
            try:
                item = next_item.result()
            except StopAsyncIteration:
                if fmt != "ag-ui":  # AG-UI's run end is the last event; the stream closes
                    yield _sse("end", {"turnId": turn_id})
                return
            finally:
                next_item = None
            beat = loop.time()
            if (
                quiet is not None
                and isinstance(item, Live)
                and isinstance(projector, AgUiProjector)
            ):
                if (item.delta.model_call_index, item.seq) <= quiet:
                    projector.replay(item.delta)  # the client has it
                    continue
            if isinstance(item, Live):
                deltas = (item.delta.model_call_index, item.seq)
            elif isinstance(item, Durable) and isinstance(item.event, _CALL_ENDS):
                deltas = None  # the call is closed: none of its deltas comes again
            chunks = _render(item, projector, deltas)
            if skip and isinstance(item, Durable):
                chunks, skip = chunks[skip:], 0
            for chunk in chunks:
                yield chunk
    except TurnError as exc:
        if fmt == "ag-ui":
            yield agui_sse(RunErrorEvent(message=str(exc), code="turn_unreadable"), None)
        else:
            yield _sse("error", {"error": str(exc)})
    finally:
        if next_item is not None:
            next_item.cancel()
            with contextlib.suppress(BaseException):
                await next_item
        await items.aclose()


_CALL_ENDS = (ModelCallCompleted, ModelCallFailed)


def _render(
    item: Durable | Live | Settled,
    projector: SurfaceProjector | AgUiProjector | None,
    deltas: tuple[int, int] | None,
) -> list[bytes]:
    if isinstance(projector, AgUiProjector):
        return _render_agui(item, projector, deltas)
    match item:
        case Durable(offset=offset, event=event):
            # Line N's id is N, or N:CALL:SEQ after deltas of the call still open.
            at = str(offset) if deltas is None else f"{offset}:{deltas[0]}:{deltas[1]}"
            if projector is not None:
                # One line can make several surface events: each gets its own id (the
                # J-th of line N is N:J, the last N), so a client that drops between
                # them resumes inside the line rather than after it.
                made = projector.feed(event)
                return [
                    _sse(s.type, s.to_wire(), at if j == len(made) else f"{offset}:{j}")
                    for j, s in enumerate(made, 1)
                ]
            return [_sse("turn-event", event.to_wire(), at)]
        case Live(offset=offset, seq=seq, delta=delta):
            position = f"{offset}:{delta.model_call_index}:{seq}"
            if projector is not None:
                return [_sse(s.type, s.to_wire(), position) for s in projector.feed(delta)]
            return [_sse("delta", {**delta.to_wire(), "seq": seq}, position)]
        case Settled(offset=offset, state=state):
            if projector is not None:
                return []  # turn_completed carries the settle point in this format
            view = {
                "turnId": state.definition.turn_id,
                "status": status_of(state),
                "offset": offset,
            }
            return [_sse("settled", view)]


def _render_agui(
    item: Durable | Live | Settled, projector: AgUiProjector, deltas: tuple[int, int] | None
) -> list[bytes]:
    """AG-UI's SSE framing (``data:`` lines; each event's ``type`` names it), with the
    same resume ids as the other formats."""
    match item:
        case Durable(offset=offset, event=event):
            at = str(offset) if deltas is None else f"{offset}:{deltas[0]}:{deltas[1]}"
            made = projector.feed(event, offset)
            return [
                agui_sse(m, at if j == len(made) else f"{offset}:{j}")
                for j, m in enumerate(made, 1)
            ]
        case Live(offset=offset, seq=seq, delta=delta):
            position = f"{offset}:{delta.model_call_index}:{seq}"
            return [agui_sse(m, position) for m in projector.feed(delta)]
        case Settled():
            return []  # the suspension or the terminal line carries the settle point


# -- deciding ---------------------------------------------------------------


def _call_id(request: Request) -> str:
    call = str(request.path_params["call_id"])
    if not call or len(call) > 200:
        raise HttpError(400, "bad tool call id")
    return call


async def _decide(
    ctx: UiContext, request: Request, turn_id: str, input: TurnExternalInput
) -> Response:
    """Send ``input`` the CLI's way; answer with the settled outcome, or 202 if it takes longer.

    Checked against the file first (a stale decision is refused before any
    server round trip, nothing appended); the workflow's update validator
    checks again when the input arrives, and the input is applied only if it
    still targets something pending — so of two tabs deciding one call, one
    wins and the other gets 409.
    """
    await _events_of(ctx, turn_id)  # 404 for an unknown turn
    execution = ctx.turns.advance_turn(turn_id, input)
    done, _ = await asyncio.wait({execution.outcome}, timeout=ctx.decision_wait)
    if not done and await _stuck_quietly(ctx, turn_id):
        # Never "accepted" for a stuck run: its sender learns within seconds that
        # the input was not applied (StuckTurnError, 503).
        done, _ = await asyncio.wait({execution.outcome}, timeout=STUCK_ANSWER)
    if not done:
        ctx.keep(execution.outcome, f"{input.type} for turn {turn_id}")
        return _json({"turnId": turn_id, "status": "accepted", "input": input.type}, 202)
    outcome: TurnOutcome = execution.outcome.result()  # raises: mapped by _guarded
    return _json({"turnId": turn_id, "status": "settled", "outcome": outcome.to_wire()})


def _user(request: Request) -> str | None:
    """Who is deciding: the tokens file's name for the token used, the OS user of a
    loopback UI without a token, None behind the one shared token."""
    user = getattr(request.state, USER, None)
    return user if isinstance(user, str) else None


STUCK_ANSWER = 30.0
"""How long a decision to a stuck run waits for the client to say it was not applied."""


async def _stuck_quietly(ctx: UiContext, turn_id: str) -> bool:
    try:
        return await ctx.turns.stuck(turn_id) is not None
    except TurnError:
        return False


async def approve_endpoint(ctx: UiContext, request: Request) -> Response:
    turn_id, call = _turn_id(request), _call_id(request)
    await _body(ctx, request, _Empty)
    metadata = decided("web", _user(request))
    return await _decide(
        ctx,
        request,
        turn_id,
        PermissionDecisionInput(tool_call_id=call, decision="allow", metadata=metadata),
    )


async def deny_endpoint(ctx: UiContext, request: Request) -> Response:
    turn_id, call = _turn_id(request), _call_id(request)
    body = await _body(ctx, request, _Deny)
    reason = body.reason.strip() if body.reason else None
    metadata = decided("web", _user(request), reason)
    return await _decide(
        ctx,
        request,
        turn_id,
        PermissionDecisionInput(tool_call_id=call, decision="deny", metadata=metadata),
    )


async def complete_endpoint(ctx: UiContext, request: Request) -> Response:
    turn_id, call = _turn_id(request), _call_id(request)
    body = await _body(ctx, request, _Complete)
    given = body.model_fields_set & {"output", "text"}
    if len(given) != 1:
        raise HttpError(
            400, "give the result as exactly one of output (any JSON) or text (a string)"
        )
    output = body.text if "text" in given else body.output
    metadata = decided("web", _user(request))
    result = ToolResultData(output=output, is_error=body.is_error, metadata=metadata)
    return await _decide(
        ctx, request, turn_id, AsyncToolResultInput(tool_call_id=call, result=result)
    )


async def progress_endpoint(ctx: UiContext, request: Request) -> Response:
    turn_id, call = _turn_id(request), _call_id(request)
    body = await _body(ctx, request, _Progress)
    return await _decide(
        ctx, request, turn_id, AsyncToolProgressInput(tool_call_id=call, progress=body.data)
    )


async def cancel_endpoint(ctx: UiContext, request: Request) -> Response:
    turn_id = _turn_id(request)
    body = await _body(ctx, request, _Cancel)
    return await _decide(ctx, request, turn_id, CancelInput(reason=body.reason or None))


async def create_endpoint(ctx: UiContext, request: Request) -> Response:
    body = await _body(ctx, request, _Create)
    runtime = ctx.runtime
    agent_name = body.agent or runtime.config.default_agent
    agent = runtime.config.agents.get(agent_name)
    if agent is None:
        known = ", ".join(sorted(runtime.config.agents))
        raise HttpError(400, f"unknown agent {agent_name!r} (known: {known})")
    model = runtime.model_for(agent_name, None)
    if model is None:
        raise HttpError(
            400,
            f"agent {agent_name!r} names no model: set OPENAI_API_KEY or ANTHROPIC_API_KEY "
            "where the web UI runs, or default_model in turns.toml",
        )
    try:
        runtime.models.resolve(model)  # a missing key fails before any file exists
    except TurnError as exc:
        raise HttpError(400, f"agent {agent_name!r} cannot run: {exc}") from None
    context = None
    if body.continue_from is not None:
        if not is_turn_id(body.continue_from):
            raise HttpError(400, f"continueFrom {body.continue_from!r} is not a turn id")
        if not await asyncio.to_thread(runtime.repository.exists, body.continue_from):
            raise HttpError(400, f"continueFrom: no turn {body.continue_from}")
        context = ContextRef(previous_turn_id=body.continue_from)
    request_ = CreateTurnInput(
        agent=RequestedAgent(agent_id=agent_name, overrides=None),
        input=UserMessage(content=body.prompt),
        human_available=body.human_available,
        auto_permission=body.auto_permission,
        session_id=body.session,
        context=context,
        reasoning_effort=agent.reasoning_effort,
        **({"max_model_calls": body.max_model_calls} if body.max_model_calls else {}),
    )
    turn_id = await ctx.turns.create_turn(request_)
    ctx.keep(ctx.turns.advance_turn(turn_id).outcome, f"turn {turn_id}")
    return _json({"turnId": turn_id, "url": f"/turns/{turn_id}"}, 201)


def create_app(
    runtime: Runtime,
    client: Client,
    *,
    token: str | None = None,
    tokens: Tokens | None = None,
    decision_wait: float = DECISION_WAIT,
    body_timeout: float = BODY_TIMEOUT,
    serving: bool = False,
) -> Starlette:
    """The ASGI app; ``token`` (or any token of ``tokens``) is required on every request
    when given. Decisions record who made them: the tokens file's name for the token
    used, or, on loopback without a token, the OS user running the server.

    ``serving``: a worker runs in this process, so a decision on a turn whose
    model or tools this process lacks is refused at once (503), never sent.
    """
    # No live hub: the UI reads deltas from the work dir's spool (whoever runs the
    # call), so a hub subscription per decision would only queue what nobody reads.
    turns = TurnClient(
        client,
        runtime.repository,
        runtime.resolver,
        task_queue=runtime.task_queue,
        serves=runtime.check_serves if serving else None,
        listed=runtime.listing,  # an agent's MCP tools are listed when the UI creates a turn
        runs_worker=serving,
    )
    ctx = UiContext(
        runtime,
        client,
        turns,
        decision_wait=decision_wait,
        body_timeout=body_timeout,
        pricer=Pricer(runtime.config.providers, runtime.config.prices),
    )

    def get(path: str, handler: Callable[[UiContext, Request], Awaitable[Response]]) -> Route:
        return Route(path, _guarded(handler, ctx), methods=["GET", "HEAD"])

    def post(path: str, handler: Callable[[UiContext, Request], Awaitable[Response]]) -> Route:
        return Route(path, _guarded(handler, ctx), methods=["POST"])

    calls = "/api/turns/{turn_id}/calls/{call_id}"
    routes = [
        get("/", index_page),
        get("/favicon.ico", favicon),
        get("/api/me", me_endpoint),
        get("/turns/{turn_id}", turn_page),
        get("/api/turns", list_endpoint),
        post("/api/turns", create_endpoint),
        get("/api/pending", pending_endpoint),
        get("/api/agents", agents_endpoint),
        get("/api/turns/{turn_id}", turn_endpoint),
        get("/api/turns/{turn_id}/pending", turn_pending_endpoint),
        get("/api/turns/{turn_id}/events", events_endpoint),
        post(f"{calls}/approve", approve_endpoint),
        post(f"{calls}/deny", deny_endpoint),
        post(f"{calls}/complete", complete_endpoint),
        post(f"{calls}/progress", progress_endpoint),
        post("/api/turns/{turn_id}/cancel", cancel_endpoint),
        Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(404, f"no such page or endpoint: {request.url.path}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return _error(405, f"{request.method} is not allowed on {request.url.path}")

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed})
    app.state.ui = ctx
    local = os_user() if token is None and tokens is None else None
    app.add_middleware(Guard, token=token, tokens=tokens, local_user=local)
    return app


__all__ = ["BODY_TIMEOUT", "DECISION_WAIT", "MAX_BODY", "UiContext", "create_app"]
