"""A small web service on turncore: start turns, list pending approvals, approve them.

Run it (embedded dev server, no key needed):

    pip install -e '.[examples]'    # from a clone of turncore
    uvicorn --factory examples.webapp:main --port 8000

    curl -s localhost:8000/turns -d '{"prompt": "restart web"}'
    curl -s localhost:8000/approvals
    curl -s localhost:8000/turns/TURN_ID/approvals/CALL_ID -d '{"decision": "allow"}'

Everything goes through one ``Turns`` object. Its typed errors become HTTP
codes: a rejected input is 409, a malformed request or turn id 400, an
unknown turn 404, an unresolvable dependency 503.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from turnclient import (
    Agent,
    DependencyError,
    InvalidInputError,
    ModelCallRequest,
    RejectedInputError,
    TurnNotFoundError,
    TurnOutcome,
    Turns,
    tool,
)


@tool  # permission "ask": every restart waits for an approval
def restart_service(name: str) -> str:
    """Restart a service.

    Args:
        name: the service to restart
    """
    return f"{name} restarted"


def ops_model(request: ModelCallRequest) -> dict[str, Any]:
    """A scripted stand-in for a real model: restart what the prompt names."""
    last = request.messages[-1]
    if last.role == "user":
        service = str(last.content).split()[-1]
        return {"toolCalls": [{"toolName": "restart_service", "input": {"name": service}}]}
    part = last.content[-1]
    return {"text": f"done: {part.output.value}"}  # type: ignore[union-attr]


OPS = Agent(
    name="ops",
    system_prompt="You operate services.",
    tools=(restart_service,),
    model="scripted/ops",
)


class StartTurn(BaseModel):
    prompt: str
    agent: str = "ops"
    continue_from: str | None = None


class Decision(BaseModel):
    decision: str
    reason: str | None = None


def _outcome(turn_id: str, outcome: TurnOutcome) -> dict[str, Any]:
    body: dict[str, Any] = {"turnId": turn_id, **outcome.model_dump(mode="json", by_alias=True)}
    if outcome.status == "completed":
        body["text"] = outcome.output.text()
    return body


def create_app(turns: Turns) -> Starlette:
    """The routes over an open ``Turns`` (tests pass one bound to their server)."""

    async def start_turn(request: Request) -> JSONResponse:
        body = StartTurn.model_validate_json(await request.body())
        turn_id = await turns.start(body.prompt, agent=body.agent, continue_from=body.continue_from)
        return JSONResponse(_outcome(turn_id, await turns.advance(turn_id)), status_code=201)

    async def get_turn(request: Request) -> JSONResponse:
        turn_id = request.path_params["turn_id"]
        outcome = await turns.outcome(turn_id)
        if outcome is None:
            return JSONResponse({"turnId": turn_id, "status": "running"})
        return JSONResponse(_outcome(turn_id, outcome))

    async def approvals(request: Request) -> JSONResponse:
        return JSONResponse(await turns.pending_approvals())

    async def decide(request: Request) -> JSONResponse:
        turn_id, call = request.path_params["turn_id"], request.path_params["call_id"]
        body = Decision.model_validate_json(await request.body())
        if body.decision == "allow":
            outcome = await turns.approve(turn_id, call)
        elif body.decision == "deny":
            outcome = await turns.deny(turn_id, call, body.reason)
        else:
            return JSONResponse({"error": 'decision is "allow" or "deny"'}, status_code=400)
        return JSONResponse(_outcome(turn_id, outcome))

    def error(status: int) -> Any:
        async def handler(request: Request, exc: Exception) -> JSONResponse:
            return JSONResponse({"error": str(exc)}, status_code=status)

        return handler

    return Starlette(
        routes=[
            Route("/turns", start_turn, methods=["POST"]),
            Route("/turns/{turn_id}", get_turn),
            Route("/approvals", approvals),
            Route("/turns/{turn_id}/approvals/{call_id}", decide, methods=["POST"]),
        ],
        # Order matters: the most specific error first.
        exception_handlers={
            RejectedInputError: error(409),
            TurnNotFoundError: error(404),
            InvalidInputError: error(400),
            ValidationError: error(400),
            DependencyError: error(503),
        },
    )


def main() -> Starlette:
    """The service on the work dir's runtime (``uvicorn --factory examples.webapp:main``)."""
    turns = Turns(agents=[OPS], models={"ops": ops_model})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with turns:
            yield

    app = create_app(turns)
    app.router.lifespan_context = lifespan
    return app
