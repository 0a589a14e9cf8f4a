"""Request composition (§8.3) and context materialization with elision (§6.6, §6.7, §27.5).

Referenced turns are real files: written line by line with plain ``open``
where ``FileTurnRepository`` expects them, and loaded through its ``read``
plus ``reduce_turn``, as the runtime does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from tests.histories import TOOLS, History, created, to_line
from turncore.compose import (
    ToolDefinition,
    closed_transcript,
    compose_model_request,
    next_model_request,
)
from turncore.context import ContextResolver, ElisionPolicy
from turncore.errors import ContextResolutionError, CorruptTurnError, InfrastructureError
from turncore.events import (
    ContextRef,
    ModelDescriptor,
    ModelRequest,
    ResolvedAgent,
    ToolDescriptor,
    TurnConfig,
    TurnEvent,
)
from turncore.messages import (
    AssistantMessage,
    ConversationMessage,
    FilePart,
    ImagePart,
    TextPart,
    ToolCallPart,
    ToolMessage,
    ToolResultOutput,
    ToolResultPart,
    UserMessage,
)
from turncore.reducer import TurnState, reduce_turn
from turncore.storage.repository import FileTurnRepository


def tid(n: int) -> str:
    return f"2025-11-11T04-36-{n:02d}Z-0000001-000"


A, B, C, D = tid(1), tid(2), tid(3), tid(4)

U0 = UserMessage(content="What is 2+2?")
A0 = AssistantMessage(content="4.")


class Store:
    """Turn files under a work dir, written by hand, read by the repository."""

    def __init__(self, root: Path) -> None:
        self.repo = FileTurnRepository(root)

    def put(self, events: Sequence[TurnEvent]) -> Path:
        path = self.repo.path_for(events[0].turn_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for e in events:
                f.write(to_line(e).decode("utf-8"))
        return path

    def load(self, turn_id: str) -> TurnState:
        return reduce_turn(self.repo.read(turn_id))

    def resolver(self, policy: ElisionPolicy | None = None) -> ContextResolver:
        return ContextResolver(self.load, policy)

    def snapshot(self) -> dict[str, bytes]:
        return {str(p): p.read_bytes() for p in sorted(self.repo.work_dir.rglob("*.jsonl"))}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path)


def answered(turn_id: str, context: Any, question: str, answer: str, **kw: Any) -> History:
    h = History(created(turn_id, context=context, input=question, **kw))
    h.request()
    h.complete(answer)
    h.finish()
    return h


def with_tool(turn_id: str, context: Any, output: Any = "contents", **kw: Any) -> History:
    h = History(created(turn_id, context=context, input="Read a.txt", **kw))
    h.request()
    h.complete("Reading.", [("r1", "read_file", {"path": "a.txt"})])
    h.invoke("r1")
    h.result("r1", output)
    h.request()
    h.complete("It says hi.")
    h.finish()
    return h


def ref(turn_id: str) -> ContextRef:
    return ContextRef(previous_turn_id=turn_id)


def result_msg(*parts: tuple[str, str, Any, bool]) -> ToolMessage:
    return ToolMessage(
        content=[
            ToolResultPart(
                tool_call_id=i,
                tool_name=n,
                output=ToolResultOutput(type="error-json" if err else "json", value=v),
            )
            for i, n, v, err in parts
        ]
    )


def wire(messages: Sequence[ConversationMessage]) -> bytes:
    return orjson.dumps([m.to_wire() for m in messages])


# ---------------------------------------------------------------- materialization


def test_inline_context_passes_through_unchanged(store: Store) -> None:
    inline = [U0, A0, result_msg(("x", "read_file", "small", False))]
    assert store.resolver().resolve(inline) == inline
    assert store.resolver(ElisionPolicy()).resolve(inline) == inline
    assert store.resolver().resolve([]) == []


def test_a_single_reference_materializes_the_closed_transcript(store: Store) -> None:
    store.put(answered(A, [U0, A0], "And 3+3?", "6.").events)
    got = store.resolver().resolve(ref(A))
    assert got == [U0, A0, UserMessage(content="And 3+3?"), AssistantMessage(content="6.")]


def test_a_reference_to_a_tool_turn_includes_calls_and_results_in_order(store: Store) -> None:
    h = History(created(A, input="Do three things."))
    h.request()
    h.complete(
        "On it.",
        [("x", "read_file", {"p": 1}), ("y", "run_job", {"j": 2}), ("z", "write_file", {"p": 3})],
    )
    for i in "xyz":
        h.invoke(i)
    h.result("z", "wrote")
    h.suspend()
    h.result("x", "read")
    h.result("y", {"exit": 0})
    h.request()
    h.complete("All three done.")
    h.finish()
    store.put(h.events)
    got = store.resolver().resolve(ref(A))
    assert got == [
        UserMessage(content="Do three things."),
        h.events[2].message,  # type: ignore[union-attr]
        result_msg(
            ("x", "read_file", "read", False),
            ("y", "run_job", {"exit": 0}, False),
            ("z", "write_file", "wrote", False),
        ),
        AssistantMessage(content="All three done."),
    ]


def test_a_chain_of_references_materializes_down_to_the_inline_base(store: Store) -> None:
    store.put(answered(A, [U0, A0], "q1", "a1").events)
    store.put(with_tool(B, ref(A), output="b-out").events)
    store.put(answered(C, ref(B), "q3", "a3").events)
    got = store.resolver().resolve(ref(C))
    tool_call = AssistantMessage(
        content=[
            TextPart(text="Reading."),
            ToolCallPart(tool_call_id="r1", tool_name="read_file", input={"path": "a.txt"}),
        ]
    )
    assert got == [
        U0,
        A0,
        UserMessage(content="q1"),
        AssistantMessage(content="a1"),
        UserMessage(content="Read a.txt"),
        tool_call,
        result_msg(("r1", "read_file", "b-out", False)),
        AssistantMessage(content="It says hi."),
        UserMessage(content="q3"),
        AssistantMessage(content="a3"),
    ]
    # Each level is the previous level plus that turn's own transcript.
    assert got[:4] == store.resolver().resolve(ref(A))
    assert got[:8] == store.resolver().resolve(ref(B))


def test_a_cancelled_turn_contributes_its_synthetic_closure_results(store: Store) -> None:
    h = History(created(A, input="Go."))
    h.request()
    h.complete("Trying.", [("p", "write_file", {}), ("j", "run_job", {}), ("s", "read_file", {})])
    h.require("p")
    h.invoke("j")
    h.invoke("s")
    h.result("s", "done")
    h.suspend()
    h.close_unresolved("The turn was cancelled.")
    h.cancel()
    store.put(h.events)
    got = store.resolver().resolve(ref(A))
    assert got[-1] == result_msg(
        ("p", "write_file", "The turn was cancelled.", True),
        ("j", "run_job", "The turn was cancelled.", True),
        ("s", "read_file", "done", False),
    )
    assert len(got) == 3


def test_a_failed_turn_contributes_what_it_produced_but_not_failed_calls(store: Store) -> None:
    h = History(created(A, input="Go."))
    h.request()
    h.fail_call("interrupted")
    h.request()
    h.complete("Reading.", [("s", "read_file", {})])
    h.invoke("s")
    h.result(
        "s",
        "Tool execution was interrupted; its outcome is unknown and it was not retried.",
        is_error=True,
        source="runtime",
    )
    h.request()
    h.fail_call("provider error 500")
    h.fail_turn("provider error 500")
    store.put(h.events)
    got = store.resolver().resolve(ref(A))
    assert [m.role for m in got] == ["user", "assistant", "tool"]
    assert got[2] == result_msg(
        (
            "s",
            "read_file",
            "Tool execution was interrupted; its outcome is unknown and it was not retried.",
            True,
        )
    )


def test_a_model_call_limit_turn_contributes_its_last_batch(store: Store) -> None:
    h = History(created(A, input="Loop.", max_model_calls=1))
    h.request()
    h.complete("", [("a", "read_file", {}), ("b", "write_file", {})])
    h.invoke("a")
    h.invoke("b")
    h.result("b", "B")
    h.result("a", "A")
    h.fail_turn("The turn reached its limit of 1 model call.", code="model-call-limit")
    store.put(h.events)
    got = store.resolver().resolve(ref(A))
    assert got[-1] == result_msg(("a", "read_file", "A", False), ("b", "write_file", "B", False))
    assert isinstance(got[-2], AssistantMessage) and len(got[-2].tool_calls()) == 2


def test_a_missing_turn_is_a_resolution_error(store: Store) -> None:
    store.put(answered(B, ref(A), "q", "a").events)
    before = store.snapshot()
    with pytest.raises(ContextResolutionError, match=f"context turn {A} cannot be read"):
        store.resolver().resolve(ref(A))
    # ...also when the missing turn is further down the chain.
    with pytest.raises(ContextResolutionError, match=A):
        store.resolver().resolve(ref(B))
    assert store.snapshot() == before
    assert not store.repo.exists(A)


@pytest.mark.parametrize(
    "damage",
    ["malformed final line", "torn final line", "reducer violation", "empty file"],
)
def test_a_corrupt_turn_is_a_resolution_error_and_nothing_is_written(
    store: Store, damage: str
) -> None:
    path = store.put(answered(A, [], "q", "a").events)
    data = path.read_bytes()
    if damage == "malformed final line":
        data = data + b'{"type": "turn_completed",\n'
    elif damage == "torn final line":
        data = data[:-5]
    elif damage == "reducer violation":
        data = data + to_line(answered(A, [], "q", "a").events[-1])  # a second terminal
    else:
        data = b""
    path.write_bytes(data)
    store.put(answered(B, ref(A), "q2", "a2").events)
    before = store.snapshot()
    with pytest.raises(ContextResolutionError, match=f"context turn {A} is corrupt") as info:
        store.resolver().resolve(ref(B))
    assert isinstance(info.value.__cause__, CorruptTurnError)
    assert store.snapshot() == before


def test_a_non_terminal_turn_cannot_be_referenced(store: Store) -> None:
    h = History(created(A))
    h.request()
    h.complete("", [("j", "run_job", {})])
    h.invoke("j")
    h.suspend()
    store.put(h.events)
    before = store.snapshot()
    with pytest.raises(ContextResolutionError, match="has not ended"):
        store.resolver().resolve(ref(A))
    with pytest.raises(ContextResolutionError, match="has not ended"):
        store.resolver().resolve_agent(created(B, context=ref(A), inherited_from=A))
    assert store.snapshot() == before


def test_resolution_errors_are_infrastructure_errors() -> None:
    # The runtime rejects the execution; it never records turn_failed for these.
    assert issubclass(ContextResolutionError, InfrastructureError)


def test_reference_cycles_are_detected(store: Store) -> None:
    store.put(answered(A, ref(B), "qa", "aa").events)
    store.put(answered(B, ref(A), "qb", "ab").events)
    with pytest.raises(ContextResolutionError, match="cycle"):
        store.resolver().resolve(ref(A))
    store.put(answered(C, ref(C), "qc", "ac").events)
    with pytest.raises(ContextResolutionError, match=f"cycle through turn {C}"):
        store.resolver().resolve(ref(C))


def test_the_reducer_never_resolves_references() -> None:
    # A reference to a turn that exists nowhere reduces fine: context is opaque.
    h = answered(B, ref(tid(59)), "q", "a")
    state = reduce_turn(h.events)
    assert state.definition.context == ref(tid(59))


# ---------------------------------------------------------------- agent snapshots


def test_inherited_agent_snapshots_resolve_through_the_chain(store: Store) -> None:
    base_tools = [TOOLS[0], TOOLS[2]]
    store.put(
        answered(
            A, [], "q", "a", tools=base_tools, system_prompt="BASE PROMPT", agent_id="base"
        ).events
    )
    mid_model = ModelDescriptor(provider="openai", model="gpt-mid")
    store.put(
        answered(B, ref(A), "q", "a", inherited_from=A, model=mid_model, agent_id="mid").events
    )
    top_model = ModelDescriptor(provider="anthropic", model="claude-top")
    top = created(C, context=ref(B), inherited_from=B, model=top_model, agent_id="top")
    agent = store.resolver().resolve_agent(top)
    assert agent == ResolvedAgent(
        agent_id="top", system_prompt="BASE PROMPT", model=top_model, tools=base_tools
    )


def test_a_full_snapshot_resolves_to_itself_without_loading(store: Store) -> None:
    first = created(A, context=ref(tid(59)))
    assert store.resolver().resolve_agent(first) == first.agent.resolved


def test_inherited_snapshot_cycles_and_missing_bases(store: Store) -> None:
    store.put(answered(A, ref(B), "q", "a", inherited_from=B).events)
    store.put(answered(B, ref(A), "q", "a", inherited_from=A).events)
    with pytest.raises(ContextResolutionError, match="cycle"):
        store.resolver().resolve_agent(created(C, context=ref(A), inherited_from=A))
    with pytest.raises(ContextResolutionError, match="cannot be read"):
        store.resolver().resolve_agent(created(C, context=ref(D), inherited_from=D))


# ---------------------------------------------------------------- elision


def big_result(turn_id: str, size: int, *, is_error: bool = False) -> History:
    h = History(created(turn_id, input="Read big."))
    h.request()
    h.complete("", [("big", "read_file", {})])
    h.invoke("big")
    h.result("big", "x" * size, is_error=is_error)
    h.request()
    h.complete("ok")
    h.finish()
    return h


def test_policy_defaults_are_the_spec_defaults(tmp_path: Path) -> None:
    p = ElisionPolicy()
    assert p.elide_historic_tool_results is True
    assert p.elide_historic_tool_results_threshold_chars == 2500
    assert p.elide_historic_images is True
    assert p.elide_historic_middle_pane_content is True
    assert ElisionPolicy.from_file(tmp_path / "absent.json") == p
    cfg = tmp_path / "context.json"
    cfg.write_text(
        json.dumps(
            {
                "elideHistoricToolResults": False,
                "elideHistoricToolResultsThresholdChars": 10,
                "elideHistoricImages": False,
                "elideHistoricMiddlePaneContent": False,
            }
        )
    )
    assert ElisionPolicy.from_file(cfg) == ElisionPolicy(
        elide_historic_tool_results=False,
        elide_historic_tool_results_threshold_chars=10,
        elide_historic_images=False,
        elide_historic_middle_pane_content=False,
    )
    cfg.write_text("{not json")
    with pytest.raises(InfrastructureError, match="not valid JSON"):
        ElisionPolicy.from_file(cfg)
    cfg.write_text('{"elideHistoricImages": "sometimes"}')
    with pytest.raises(InfrastructureError, match="invalid elision policy"):
        ElisionPolicy.from_file(cfg)


@pytest.mark.parametrize(("size", "elided"), [(2499, False), (2500, False), (2501, True)])
def test_tool_results_above_the_default_threshold_are_elided(
    store: Store, size: int, elided: bool
) -> None:
    store.put(big_result(A, size).events)
    got = store.resolver(ElisionPolicy()).resolve(ref(A))
    part = got[2].content[0]  # type: ignore[index]
    assert isinstance(part, ToolResultPart)
    if elided:
        assert part.output.type == "json"
        assert part.output.value == (
            f"[Output of read_file from an earlier turn elided ({size} characters). "
            "Run the tool again if you need it.]"
        )
        assert part.tool_call_id == "big" and part.tool_name == "read_file"
    else:
        assert part.output.value == "x" * size
    # The durable log and an unelided resolve are untouched.
    assert store.resolver().resolve(ref(A))[2].content[0].output.value == "x" * size  # type: ignore[union-attr]


def test_elided_error_results_stay_errors(store: Store) -> None:
    store.put(big_result(A, 3000, is_error=True).events)
    part = store.resolver(ElisionPolicy()).resolve(ref(A))[2].content[0]  # type: ignore[index]
    assert isinstance(part, ToolResultPart)
    assert part.output.type == "error-json" and "elided (3000 characters)" in part.output.value


def test_structured_results_are_measured_as_json() -> None:
    value = {"k": "é" * 10}
    size = len(json.dumps(value, ensure_ascii=False))
    msg = result_msg(("a", "t", value, False))
    assert ElisionPolicy(elide_historic_tool_results_threshold_chars=size).elide(msg) == msg
    smaller = ElisionPolicy(elide_historic_tool_results_threshold_chars=size - 1).elide(msg)
    assert f"({size} characters)" in smaller.content[0].output.value  # type: ignore[union-attr]


def test_tool_result_elision_off_and_custom_threshold(store: Store) -> None:
    store.put(big_result(A, 5000).events)
    off = store.resolver(ElisionPolicy(elide_historic_tool_results=False)).resolve(ref(A))
    assert off[2].content[0].output.value == "x" * 5000  # type: ignore[union-attr]
    low = ElisionPolicy(elide_historic_tool_results_threshold_chars=10)
    msg = result_msg(("a", "t", "y" * 11, False), ("b", "t", "y" * 10, False))
    got = low.elide(msg)
    assert isinstance(got, ToolMessage)
    assert "elided (11 characters)" in got.content[0].output.value
    assert got.content[1] == msg.content[1]


def _media_user() -> UserMessage:
    return UserMessage(
        content=[
            TextPart(text="Look at this."),
            ImagePart(media_type="image/jpeg", data="AAAA"),
            FilePart(media_type="text/markdown", filename="notes/plan.md", data="IyBQbGFu"),
            ImagePart(media_type="image/png", url="https://example.invalid/frame.png"),
            FilePart(media_type="application/pdf", filename="paper.pdf", data="JVBERg=="),
            FilePart(
                media_type="text/plain", filename="remote.txt", url="https://example.invalid/r"
            ),
        ]
    )


def test_images_from_prior_turns_are_replaced_by_a_count() -> None:
    policy = ElisionPolicy(elide_historic_middle_pane_content=False)
    got = policy.elide(_media_user())
    assert isinstance(got, UserMessage) and isinstance(got.content, list)
    kinds = [p.type for p in got.content]
    assert kinds == ["text", "file", "file", "file", "text"]
    assert got.content[-1] == TextPart(text="[2 images from an earlier turn dropped.]")
    one = policy.elide(UserMessage(content=[ImagePart(media_type="image/png", data="AA==")]))
    assert one == UserMessage(content=[TextPart(text="[1 image from an earlier turn dropped.]")])


def test_image_elision_off() -> None:
    policy = ElisionPolicy(elide_historic_images=False, elide_historic_middle_pane_content=False)
    msg = _media_user()
    assert policy.elide(msg) == msg


def test_middle_pane_snapshots_keep_kind_and_path_but_lose_content() -> None:
    policy = ElisionPolicy(elide_historic_images=False)
    got = policy.elide(_media_user())
    assert isinstance(got, UserMessage) and isinstance(got.content, list)
    snapshot = got.content[2]
    assert snapshot == TextPart(
        text="[Snapshot of notes/plan.md (text/markdown) from an earlier turn; "
        "read the file for its current content.]"
    )
    # Only inline text snapshots: binary files and URL sources stay.
    assert got.content[4] == _media_user().content[4]  # type: ignore[index]
    assert got.content[5] == _media_user().content[5]  # type: ignore[index]
    off = ElisionPolicy(elide_historic_images=False, elide_historic_middle_pane_content=False)
    assert off.elide(_media_user()) == _media_user()


def test_plain_messages_are_not_elided() -> None:
    policy = ElisionPolicy(elide_historic_tool_results_threshold_chars=1)
    for msg in (
        UserMessage(content="x" * 10_000),
        AssistantMessage(content="y" * 10_000),
        AssistantMessage(content=[TextPart(text="z" * 10_000)]),
        UserMessage(content=[TextPart(text="only text")]),
    ):
        assert policy.elide(msg) is msg


def test_elision_is_pure_and_byte_stable(store: Store) -> None:
    msgs: list[ConversationMessage] = [
        _media_user(),
        result_msg(("a", "t", "q" * 4000, False), ("b", "t", {"n": 1}, True)),
        AssistantMessage(content="fine"),
    ]
    before = wire(msgs)
    policy = ElisionPolicy()
    once = [policy.elide(m) for m in msgs]
    twice = [policy.elide(m) for m in msgs]
    assert wire(once) == wire(twice)
    assert wire(msgs) == before  # inputs untouched
    # Eliding an elided message changes nothing more.
    assert wire([policy.elide(m) for m in once]) == wire(once)
    # Through the resolver, repeated resolves give identical bytes.
    store.put(big_result(A, 9000).events)
    store.put(answered(B, ref(A), "q", "a").events)
    r = store.resolver(policy)
    assert wire(r.resolve(ref(B))) == wire(r.resolve(ref(B)))


def test_the_current_turns_own_messages_are_never_elided(store: Store) -> None:
    store.put(big_result(A, 6000).events)
    h = History(created(B, context=ref(A), input=_media_user()))
    h.request()
    h.complete("", [("mine", "read_file", {})])
    h.invoke("mine")
    h.result("mine", "m" * 6000)
    h.request()
    state = reduce_turn(h.events)
    resolver = store.resolver(ElisionPolicy())
    context = resolver.resolve(state.definition.context)
    agent = resolver.resolve_agent(state.definition)
    composed = compose_model_request(agent, context, state, 1)
    prior_part = composed.messages[2].content[0]  # type: ignore[index]
    assert "elided (6000 characters)" in prior_part.output.value  # type: ignore[union-attr]
    # The current input keeps its images and snapshot; the current result is verbatim.
    assert composed.messages[4] == _media_user()
    assert composed.messages[-1] == result_msg(("mine", "read_file", "m" * 6000, False))


# ---------------------------------------------------------------- next_model_request


def test_call_zero_refs_inline_context() -> None:
    inline = History(created(context=[U0, A0]))
    assert next_model_request(inline.state()) == ModelRequest(
        messages=["context", "input"], parameters={}
    )
    empty = History(created(context=[]))
    assert next_model_request(empty.state()) == ModelRequest(messages=["input"], parameters={})


def test_call_zero_refs_context_reference() -> None:
    h = History(created(context=ref(A)))
    req = next_model_request(h.state(), {"temperature": 0.3})
    assert req == ModelRequest(
        context_ref=ref(A), messages=["input"], parameters={"temperature": 0.3}
    )
    assert req.to_wire() == {
        "contextRef": {"previousTurnId": A},
        "messages": ["input"],
        "parameters": {"temperature": 0.3},
    }


def test_refs_after_a_tool_batch_are_in_source_order_whatever_landed_first() -> None:
    h = History()
    h.request()
    h.complete("", [("a", "read_file", {}), ("b", "run_job", {}), ("c", "write_file", {})])
    for i in "abc":
        h.invoke(i)
    h.result("c")
    h.result("b")
    h.result("a")
    req = next_model_request(h.state())
    assert req.messages == ["assistant:0", "toolResult:a", "toolResult:b", "toolResult:c"]
    assert req.context_ref is None
    # It is exactly what the reducer demands of the next call.
    h.request()
    assert h.events[-1].request.messages == req.messages  # type: ignore[union-attr]
    reduce_turn(h.events)


def test_refs_after_an_interrupted_call_are_empty() -> None:
    h = History(created(context=[U0]))
    h.request()
    h.fail_call()
    assert next_model_request(h.state()).messages == []
    h.request()
    h.complete("", [("a", "read_file", {})])
    h.invoke("a")
    h.result("a")
    h.request()
    h.fail_call()
    assert next_model_request(h.state()) == ModelRequest(messages=[], parameters={})


def test_next_model_request_always_passes_the_reducer() -> None:
    # Fold: at each point a request is due, the proposed refs are accepted.
    h = History(created(context=[U0]))
    for round_ in range(3):
        proposed = next_model_request(h.state(), {"n": round_})
        h.request({"n": round_})
        assert h.events[-1].request == proposed  # type: ignore[union-attr]
        h.complete("", [(f"t{round_}", "read_file", {}), (f"u{round_}", "write_file", {})])
        h.invoke(f"u{round_}")
        h.result(f"u{round_}")
        h.invoke(f"t{round_}")
        h.result(f"t{round_}")
    reduce_turn(h.events)


# ---------------------------------------------------------------- compose_model_request


def _agent() -> ResolvedAgent:
    first = created()
    assert isinstance(first.agent.resolved, ResolvedAgent)
    return first.agent.resolved


def test_compose_places_context_input_assistant_and_grouped_tool_messages() -> None:
    context = [U0, A0]
    h = History(created(context=context, input="Do it."))
    h.request({"temperature": 0})
    h.complete("First.", [("a", "read_file", {"p": 1}), ("b", "run_job", {})])
    h.invoke("a")
    h.invoke("b")
    h.result("b", "B!")
    h.result("a", "A!", is_error=True)
    h.request({"temperature": 1})
    h.complete("Second.", [("c", "write_file", {})])
    h.invoke("c")
    h.result("c", "C!")
    h.request({"temperature": 2})
    state = h.state()
    agent = _agent()

    first = compose_model_request(agent, context, state, 0)
    assert first.messages == [U0, A0, UserMessage(content="Do it.")]
    assert first.parameters == {"temperature": 0}
    assert first.model_call_index == 0

    third = compose_model_request(agent, context, state, 2)
    a0 = state.model_calls[0].response
    a1 = state.model_calls[1].response
    assert third.messages == [
        U0,
        A0,
        UserMessage(content="Do it."),
        a0,
        result_msg(("a", "read_file", "A!", True), ("b", "run_job", "B!", False)),
        a1,
        result_msg(("c", "write_file", "C!", False)),
    ]
    assert third.parameters == {"temperature": 2}
    assert third.system == agent.system_prompt
    assert third.tools == [ToolDefinition.of(t) for t in agent.tools]
    assert third.model == state.definition.agent.resolved.model
    assert third.reasoning_effort is None


def test_compose_with_a_context_reference_puts_the_materialized_prefix_first(store: Store) -> None:
    store.put(with_tool(A, [U0, A0]).events)
    h = History(created(B, context=ref(A), input="Next."))
    h.request()
    state = h.state()
    resolver = store.resolver()
    context = resolver.resolve(state.definition.context)
    composed = compose_model_request(resolver.resolve_agent(state.definition), context, state, 0)
    assert composed.messages == [*context, UserMessage(content="Next.")]
    assert composed.messages[:2] == [U0, A0]
    assert len(composed.messages) == 7


def test_a_reissued_call_composes_the_same_messages_as_the_interrupted_one() -> None:
    h = History(created(context=[U0]))
    h.request()
    h.complete("", [("a", "read_file", {})])
    h.invoke("a")
    h.result("a")
    h.request()
    h.fail_call()
    h.request()
    state = h.state()
    agent = _agent()
    interrupted = compose_model_request(agent, [U0], state, 1)
    reissued = compose_model_request(agent, [U0], state, 2)
    assert reissued.messages == interrupted.messages
    assert reissued.model_call_index == 2


def test_compose_uses_the_inherited_records_model_and_the_config_effort(store: Store) -> None:
    store.put(answered(A, [], "q", "a", system_prompt="BASE").events)
    model = ModelDescriptor(provider="anthropic", model="claude-x")
    first = created(B, context=ref(A), inherited_from=A, model=model)
    first = first.model_copy(
        update={
            "config": TurnConfig(
                auto_permission=False,
                human_available=True,
                max_model_calls=5,
                reasoning_effort="high",
            )
        }
    )
    h = History(first)
    h.request()
    state = h.state()
    resolver = store.resolver()
    agent = resolver.resolve_agent(state.definition)
    composed = compose_model_request(agent, resolver.resolve(state.definition.context), state, 0)
    assert composed.model == model
    assert composed.system == "BASE"
    assert composed.reasoning_effort == "high"
    assert composed.to_wire()["reasoningEffort"] == "high"


def test_compose_of_an_unrequested_call_is_an_error() -> None:
    h = History()
    with pytest.raises(CorruptTurnError, match="has not been requested"):
        compose_model_request(_agent(), [], h.state(), 0)


def test_compose_is_deterministic_bytes() -> None:
    h = History(created(context=[U0]))
    h.request()
    h.complete("", [("a", "read_file", {"k": [1, 2]})])
    h.invoke("a")
    h.result("a", {"z": 1, "a": 2})
    h.request()
    state = h.state()
    one = orjson.dumps(compose_model_request(_agent(), [U0], state, 1).to_wire())
    again = orjson.dumps(
        compose_model_request(_agent(), [U0], reduce_turn(list(h.events)), 1).to_wire()
    )
    assert one == again


def test_closed_transcript_of_a_single_turn() -> None:
    h = with_tool(A, [U0])
    got = closed_transcript(h.state())
    assert [m.role for m in got] == ["user", "assistant", "tool", "assistant"]
    assert got[0] == UserMessage(content="Read a.txt")  # context is not part of it


def test_tool_definitions_hide_authority_fields() -> None:
    d = ToolDescriptor(
        tool_id="mcp:x",
        name="x",
        description="X.",
        input_schema={"type": "object"},
        execution="async",
        requires_human=True,
    )
    assert ToolDefinition.of(d).to_wire() == {
        "name": "x",
        "description": "X.",
        "inputSchema": {"type": "object"},
    }


@pytest.mark.parametrize(
    "bad", ["../../etc/passwd", "not-a-turn-id", "2025-13-01T00-00-00Z-0000000-000"]
)
def test_a_reference_to_a_malformed_turn_id_is_a_resolution_error(store: Store, bad: str) -> None:
    # The id comes from a durable file, so a bad one is broken data, not a caller's input.
    # Reads refuse such a file and ContextRef refuses to be built with one, so only
    # model_construct makes it; the resolver still defends the path it derives.
    with pytest.raises(ValidationError, match="not have the shape|path separator|does not exist"):
        ref(bad)
    bad_ref = ContextRef.model_construct(previous_turn_id=bad)
    with pytest.raises(ContextResolutionError, match="not a valid turn id"):
        store.resolver().resolve(bad_ref)
    with pytest.raises(ContextResolutionError, match="not a valid turn id"):
        store.resolver().resolve_agent(created(B, context=bad_ref, inherited_from=bad))
