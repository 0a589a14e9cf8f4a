"""§21.3 through each adapter's wire format: tool-call arguments that end
malformed (not JSON) or are JSON but not an object become ``runtime`` error
results the model sees on its next call; the tool never runs.

A real adapter streams from the local wire server into a real turn workflow
on the session's dev server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.harness import MODEL, Harness, sync_tool
from turncore.tools import ToolContext

from .conftest import FakeProvider, Reply
from .wire import WIRES, Wire

pytestmark = pytest.mark.parametrize("wire", list(WIRES.values()), ids=list(WIRES))


async def test_unusable_tool_arguments_become_runtime_errors(
    wire: Wire,
    provider: FakeProvider,
    http: httpx.AsyncClient,
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
) -> None:
    ran: list[Any] = []

    def tool(value: Any, ctx: ToolContext) -> Any:
        ran.append(value)
        return "ran"

    provider.queue(
        # call_a's fragments end mid-string; call_b's are JSON, but an array.
        Reply(chunks=list(wire.tools(a=('{"ci', 'ty": "Par'), b=('["CE', 'T"]')))),
        Reply(chunks=list(wire.text())),
    )
    async with Harness(
        temporal_env.client,
        tmp_path,
        [],
        tools=[sync_tool("get_weather"), sync_tool("get_time")],
        implementations={"get_weather": tool, "get_time": tool},
        permissions={"builtin:get_weather": "none", "builtin:get_time": "none"},
    ) as h:
        adapter = wire.make(wire.binding(provider.base_url, model=MODEL.model), http)
        h.models.models[MODEL.label()] = adapter
        turn_id, outcome = await h.run("weather?")
        assert outcome.status == "completed"
        assert ran == []  # the tool never ran
        state = h.file_state(turn_id)
        a, b = state.tool_calls
        assert a.input == '{"city": "Par' and b.input == ["CET"]
        for call, why in ((a, "not valid JSON"), (b, "not a JSON object")):
            assert call.invocation is None and call.permission is None
            assert call.result is not None and call.result.source == "runtime"
            assert call.result.result.is_error and why in str(call.result.result.output)
        # The model saw both errors on its next call.
        second = provider.received[1].body.decode()
        assert "not valid JSON" in second and "not a JSON object" in second
        await h.assert_file_matches_query(turn_id)


async def test_arguments_a_turn_cannot_store_become_runtime_errors(
    wire: Wire,
    provider: FakeProvider,
    http: httpx.AsyncClient,
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
) -> None:
    """Valid JSON that no turn file may hold (an integer past ±(2**53 - 1), such
    as a 64-bit id or a nanosecond timestamp, or nesting past 128 levels) is one
    more unusable call, not a broken response: the raw text is kept and the
    model is told what to change."""
    ran: list[Any] = []

    def tool(value: Any, ctx: ToolContext) -> Any:
        ran.append(value)
        return "ran"

    big = '{"id": 1234567890123456789}'
    deep = "[" * 130 + "]" * 130
    provider.queue(
        Reply(chunks=list(wire.tools(a=(big[:9], big[9:]), b=(deep[:130], deep[130:])))),
        Reply(chunks=list(wire.text())),
    )
    async with Harness(
        temporal_env.client,
        tmp_path,
        [],
        tools=[sync_tool("get_weather"), sync_tool("get_time")],
        implementations={"get_weather": tool, "get_time": tool},
        permissions={"builtin:get_weather": "none", "builtin:get_time": "none"},
    ) as h:
        adapter = wire.make(wire.binding(provider.base_url, model=MODEL.model), http)
        h.models.models[MODEL.label()] = adapter
        turn_id, outcome = await h.run("weather?")
        assert outcome.status == "completed", outcome
        assert ran == []
        state = h.file_state(turn_id)
        a, b = state.tool_calls
        assert (a.input, b.input) == (big, deep)  # the model's text, verbatim
        for call, why in ((a, "outside JSON's safe integer range"), (b, "nested deeper than")):
            assert call.result is not None and call.result.source == "runtime"
            assert call.result.result.is_error and why in str(call.result.result.output)
        second = provider.received[1].body.decode()
        assert "send it as a string" in second and "nested deeper than" in second
        await h.assert_file_matches_query(turn_id)
