"""The peer for ``bench/peer.py``: Pydantic AI's ``TemporalAgent`` doing the same work.

A zero-latency ``FunctionModel`` asks for the ``blob`` tool ``N`` times (the
prompt is ``tools N SIZE``), then answers; ``blob`` returns ``SIZE`` bytes. The model request and the tool call each run as an activity, as
``TemporalAgent`` does by default. Pydantic AI is installed for the bench
only (``pip install pydantic-ai-slim``); it is not a project dependency.
"""

from __future__ import annotations

import warnings

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import TemporalAgent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    calls = sum(1 for m in messages if isinstance(m, ModelResponse))
    prompt = next(
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    )
    _, wanted, size = str(prompt).split()
    if calls < int(wanted):
        return ModelResponse(parts=[ToolCallPart("blob", {"i": calls, "size": int(size)})])
    return ModelResponse(parts=[TextPart(f"Done after {calls} calls.")])


agent = Agent(FunctionModel(_model), name="peer")


@agent.tool_plain
def blob(i: int, size: int) -> str:
    """Return a value of ``size`` bytes."""
    return "x" * size


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # TemporalAgent is deprecated; it is what the bench compares
    peer = TemporalAgent(agent)


@workflow.defn(name="PeerTurn")
class PeerWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await peer.run(prompt)
        return str(result.output)
