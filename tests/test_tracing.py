"""Traces: one tree from the client's advance through the workflow into its activities.

A real dev server and worker with Temporal's ``TracingInterceptor`` on the
client (so on the worker built from it), spans collected by an in-memory
exporter. Only the model's decisions are scripted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from tests.harness import Harness, sync_tool
from turnclient.runtime.connection import ConnectOptions, data_converter
from turnclient.runtime.telemetry import tracing_interceptors, tracing_requested
from turncore.tools import ToolContext
from turncore_temporal.activities.telemetry import CAPTURE_ENV
from turncore_temporal.worker import workflow_runner
from turncore_temporal.workflows import TurnWorkflow

PROMPT = "Audit the pelican-vault-2291 invoices"
TOOL_INPUT = "ibis-account-6620"
TOOL_OUTPUT = "heron-total-4417"
ANSWER = "The flamingo-summary-3385 is ready."

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def spans_exporter() -> Iterator[InMemorySpanExporter]:
    # The global provider can be set once per process; every test here shares it.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    yield _EXPORTER


def traced_client(env: WorkflowEnvironment) -> Client:
    base = env.client
    return Client(
        base.service_client,
        namespace=base.namespace,
        data_converter=data_converter(ConnectOptions()),
        interceptors=tracing_interceptors(True),
    )


def _lookup(value: Any, ctx: ToolContext) -> Any:
    return TOOL_OUTPUT


def harness(client: Client, tmp_path: Path, script: list[Any]) -> Harness:
    return Harness(
        client,
        tmp_path,
        script,
        tools=[sync_tool("lookup")],
        implementations={"lookup": _lookup},
    )


SCRIPT = [
    {"toolCalls": [{"toolName": "lookup", "input": {"account": TOOL_INPUT}}]},
    {"text": ANSWER},
]


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def ancestors(span: ReadableSpan, spans: tuple[ReadableSpan, ...]) -> list[str]:
    index = {s.context.span_id: s for s in spans}
    names = []
    parent = span.parent
    while parent is not None and parent.span_id in index:
        up = index[parent.span_id]
        names.append(up.name)
        parent = up.parent
    return names


def everything_recorded(spans: tuple[ReadableSpan, ...]) -> str:
    texts = []
    for s in spans:
        texts.append(s.name)
        texts.extend(str(v) for v in (s.attributes or {}).values())
        for e in s.events:
            texts.append(e.name)
            texts.extend(str(v) for v in (e.attributes or {}).values())
        if s.status.description:
            texts.append(s.status.description)
    return "\n".join(texts)


async def test_one_trace_from_the_advance_to_the_model_and_tool_calls_without_content(
    temporal_env: WorkflowEnvironment, tmp_path: Path, spans_exporter: InMemorySpanExporter
) -> None:
    spans_exporter.clear()
    async with harness(traced_client(temporal_env), tmp_path, SCRIPT) as h:
        turn_id, outcome = await h.run(PROMPT)
        assert outcome.status == "suspended"
        done = await h.send(
            turn_id, {"type": "permission_decision", "toolCallId": "call_0_0", "decision": "allow"}
        )
        assert done.status == "completed"
    spans = spans_exporter.get_finished_spans()

    # Two advances, each a `turn <id>` span at the root of its trace.
    first, second = by_name(spans, f"turn {turn_id}")
    for t in (first, second):
        assert t.parent is None
        assert t.attributes is not None
        assert t.attributes["turncore.turn.id"] == turn_id
        assert t.attributes["gen_ai.agent.name"] == "test"
        assert t.attributes["gen_ai.request.model"] == "test"
    assert first.attributes is not None and first.attributes["turncore.turn.status"] == "suspended"
    assert [e.name for e in first.events] == ["turn suspended"]
    assert (
        second.attributes is not None and second.attributes["turncore.turn.status"] == "completed"
    )
    assert second.events[0].name == "input"
    assert second.events[0].attributes == {
        "turncore.input.type": "permission_decision",
        "gen_ai.tool.call.id": "call_0_0",
        "decision": "allow",
    }

    # turns run → workflow → activities: every span of the turn is in the first trace.
    (run,) = by_name(spans, "RunWorkflow:Turn")
    assert ancestors(run, spans) == ["StartWorkflow:Turn", f"turn {turn_id}"]
    chats = by_name(spans, "chat test")
    assert len(chats) == 2
    for chat in chats:
        assert chat.context.trace_id == first.context.trace_id
        # The interceptor hangs workflow-started activities under the start.
        assert ancestors(chat, spans) == [
            "RunActivity:call_model",
            "StartActivity:call_model",
            "StartWorkflow:Turn",
            f"turn {turn_id}",
        ]
        attrs = chat.attributes or {}
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "scripted"
        assert attrs["gen_ai.system"] == "scripted"
        assert attrs["gen_ai.request.model"] == "test"
        assert attrs["gen_ai.usage.input_tokens"] > 0  # type: ignore[operator]
        assert attrs["gen_ai.usage.output_tokens"] > 0  # type: ignore[operator]
    assert [(c.attributes or {})["gen_ai.response.finish_reasons"] for c in chats] == [
        ("tool-calls",),
        ("stop",),
    ]
    (tool,) = by_name(spans, "execute_tool lookup")
    assert tool.context.trace_id == first.context.trace_id
    assert ancestors(tool, spans)[0] == "RunActivity:run_tool"
    assert (tool.attributes or {})["gen_ai.tool.name"] == "lookup"
    assert (tool.attributes or {})["gen_ai.tool.call.id"] == "call_0_0"

    # Permission decisions and the suspension are events of the appends that recorded them.
    events = {e.name: e for s in spans if s.name == "RunActivity:append_events" for e in s.events}
    assert (events["permission required"].attributes or {})["gen_ai.tool.call.id"] == "call_0_0"
    resolved = events["permission resolved"].attributes or {}
    assert (resolved["decision"], resolved["source"]) == ("allow", "human")
    suspended = events["turn suspended"].attributes or {}
    assert tuple(suspended["turncore.pending_permissions"]) == ("call_0_0",)
    assert tuple((first.events[0].attributes or {})["turncore.pending"]) == ("permission:call_0_0",)

    # No prompt, completion, tool input or output anywhere by default.
    recorded = everything_recorded(spans)
    for secret in ("pelican-vault-2291", TOOL_INPUT, TOOL_OUTPUT, "flamingo-summary-3385"):
        assert secret not in recorded

    # Replaying the workflow's history emits no span again.
    history = await temporal_env.client.get_workflow_handle(turn_id).fetch_history()
    spans_exporter.clear()
    replayer = Replayer(
        workflows=[TurnWorkflow],
        workflow_runner=workflow_runner(),
        interceptors=tracing_interceptors(True),
        data_converter=data_converter(ConnectOptions()),
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None
    assert spans_exporter.get_finished_spans() == ()


async def test_content_is_recorded_only_when_opted_in(
    temporal_env: WorkflowEnvironment,
    tmp_path: Path,
    spans_exporter: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CAPTURE_ENV, "true")
    spans_exporter.clear()
    script = [{"toolCalls": [{"toolName": "lookup", "input": {"account": TOOL_INPUT}}]}, ANSWER]
    async with Harness(
        traced_client(temporal_env),
        tmp_path,
        script,
        tools=[sync_tool("lookup")],
        implementations={"lookup": _lookup},
        permissions={"builtin:lookup": "none"},
    ) as h2:
        _, outcome = await h2.run(PROMPT)
        assert outcome.status == "completed"
    spans = [
        s
        for s in spans_exporter.get_finished_spans()
        if s.name.startswith(("chat", "execute_tool"))
    ]
    recorded = everything_recorded(tuple(spans))
    for secret in ("pelican-vault-2291", TOOL_INPUT, TOOL_OUTPUT, "flamingo-summary-3385"):
        assert secret in recorded


async def test_a_failed_model_call_records_its_failure_kind_and_dispatch(
    temporal_env: WorkflowEnvironment, tmp_path: Path, spans_exporter: InMemorySpanExporter
) -> None:
    spans_exporter.clear()
    script = [{"error": "slow down", "errorKind": "rate-limit"}]
    async with harness(traced_client(temporal_env), tmp_path, script) as h:
        turn_id, outcome = await h.run(PROMPT)
        assert outcome.status == "failed"
    spans = spans_exporter.get_finished_spans()
    (chat,) = by_name(spans, "chat test")
    attrs = chat.attributes or {}
    assert attrs["turncore.failure.kind"] == "rate-limit"
    assert attrs["error.type"] == "rate-limit"
    assert attrs["turncore.failure.dispatch"] in ("not-sent", "rejected", "unknown", "accepted")
    assert chat.status.status_code == trace.StatusCode.ERROR
    (turn,) = by_name(spans, f"turn {turn_id}")
    assert (turn.attributes or {})["turncore.turn.status"] == "failed"


def test_tracing_is_off_unless_the_environment_asks() -> None:
    assert not tracing_requested({})
    assert tracing_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing_requested({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not tracing_requested(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}
    )
    assert not tracing_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_SDK_DISABLED": "true"})
    assert tracing_interceptors(False) == []
