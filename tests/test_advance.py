"""The order of the loop's decisions, without Temporal.

``advance.next_action`` is the loop; these tests interpret it the way the
workflow does, with the activities' answers given as data, and check the
sequence of actions and what each appends.
"""

from __future__ import annotations

from collections.abc import Mapping

from tests.builders import (
    ASK_HUMAN,
    READ_FILE,
    TURN_ID,
    Call,
    TurnBuilder,
    read_call,
    ts,
)
from turncore import advance
from turncore.events import (
    AsyncToolResultInput,
    PermissionDecisionInput,
    ToolDescriptor,
    ToolResultData,
)
from turncore.permissions import PermissionCheck, PermissionClassification
from turncore.reducer import TurnReducer

TS = ts(10_000)

# A tool that needs permission (the checker says so) and one the model invents.
WRITE_FILE = ToolDescriptor(
    tool_id="builtin:write_file",
    name="write_file",
    description="Write a file.",
    input_schema={"type": "object"},
    execution="sync",
    requires_human=False,
)


class Loop:
    """A minimal interpreter of ``next_action``: what the workflow does, with
    the checker's and classifier's answers given up front and tools run by
    ``finish``. ``trace`` records each action's kind (and what it appended)."""

    def __init__(
        self,
        builder: TurnBuilder,
        *,
        required: Mapping[str, bool] | None = None,
        classified: Mapping[str, str] | None = None,
    ) -> None:
        self.reducer = TurnReducer.of(builder.events)
        self.required = dict(required or {})
        self.classified = dict(classified or {})
        self.allowed: set[str] = set()
        self.running: set[str] = set()
        self.trace: list[str] = []

    def step(self) -> advance.Action:
        state = self.reducer.state
        action = advance.next_action(state, running=self.running, allowed=self.allowed, ts=TS)
        match action:
            case advance.Append(events):
                self.append(events)
            case advance.CheckPermissions(calls):
                self.trace.append("check " + ",".join(c.tool_call_id for c in calls))
                checks: dict[str, PermissionCheck | str] = {
                    c.tool_call_id: PermissionCheck(
                        required=self.required[c.tool_call_id], request={"ask": c.tool_call_id}
                    )
                    for c in calls
                }
                events, allowed = advance.permission_required_events(
                    state, checks, TS, self.allowed
                )
                self.allowed.update(allowed)
                self.append(events)
            case advance.Classify(calls):
                self.trace.append("classify " + ",".join(c.tool_call_id for c in calls))
                decisions = [
                    PermissionClassification(
                        tool_call_id=c.tool_call_id,
                        decision=self.classified[c.tool_call_id],  # type: ignore[arg-type]
                        reason="policy",
                    )
                    for c in calls
                ]
                self.append(advance.classification_events(state, decisions, None, TS))
            case advance.StartTools(calls):
                self.trace.append("start " + ",".join(c.tool_call_id for c in calls))
                self.running.update(c.tool_call_id for c in calls)
            case advance.Suspend(event):
                self.trace.append("suspend")
                if event is not None:
                    self.apply([event])
            case advance.Wait():
                self.trace.append("wait")
            case advance.Complete():
                self.trace.append("complete")
            case advance.FailLimit(event):
                self.trace.append("fail-limit")
                self.apply([event])
            case advance.CallModel(index):
                self.trace.append(f"call-model {index}")
            case advance.Done():
                self.trace.append("done")
        return action

    def until_external(self) -> list[str]:
        """Step until the loop needs the outside world (a model call, a running
        tool, an input, the end); return the trace of this run."""
        start = len(self.trace)
        while not isinstance(
            self.step(),
            advance.CallModel | advance.Wait | advance.Suspend | advance.Complete | advance.Done,
        ):
            pass
        return self.trace[start:]

    def append(self, events: list[advance.TurnEvent]) -> None:
        if events:
            self.trace.append("append " + ",".join(e.type for e in events))
            self.apply(events)

    def apply(self, events: list[advance.TurnEvent]) -> None:
        for e in events:
            self.reducer.apply(e)

    def finish(self, tool_call_id: str) -> None:
        """A running sync tool returns."""
        call = self.reducer.state.tool_call(tool_call_id)
        assert call is not None
        self.running.discard(tool_call_id)
        self.apply(
            [
                advance.ToolResult(
                    turn_id=TURN_ID,
                    ts=TS,
                    tool_call_id=tool_call_id,
                    tool_name=call.tool_name,
                    source="sync",
                    result=ToolResultData(output="ok", is_error=False),
                )
            ]
        )

    def input(self, raw: PermissionDecisionInput | AsyncToolResultInput) -> None:
        advance.check_input(self.reducer.state, raw)
        self.apply(advance.input_events(self.reducer.state, raw, TS))


def _builder(**created: object) -> TurnBuilder:
    return TurnBuilder(tools=(READ_FILE, ASK_HUMAN, WRITE_FILE), **created)  # type: ignore[arg-type]


def test_a_fresh_turn_calls_the_model_and_a_plain_answer_completes() -> None:
    b = _builder()
    loop = Loop(b)
    assert loop.until_external() == ["call-model 0"]
    b.model_call("Hello.")
    assert Loop(b).until_external() == ["complete"]


def test_a_tool_batch_is_decided_in_order_then_run_then_suspended() -> None:
    b = _builder()
    b.model_call(
        "Working.",
        [
            read_call("c_read"),
            Call("c_write", WRITE_FILE, {"path": "x"}),
            Call("c_ask", ASK_HUMAN, {"question": "?"}),
            Call("c_nosuch", READ_FILE.model_copy(update={"name": "nosuch"}), {}),
        ],
    )
    loop = Loop(b, required={"c_read": False, "c_write": True, "c_ask": False})
    assert loop.until_external() == [
        # an unknown tool is answered first, on its own
        "append tool_result",
        # one checker call for every undetermined call; required ones recorded
        "check c_read,c_write,c_ask",
        "append tool_permission_required",
        # every allowed call invoked, in source order, before any tool starts
        "append tool_invocation_requested,tool_invocation_requested",
        "start c_read",
        "wait",
    ]
    loop.finish("c_read")
    assert loop.until_external() == ["suspend"]
    suspended = loop.reducer.state.suspension
    assert suspended is not None
    assert [p.tool_call_id for p in suspended.pending_permissions] == ["c_write"]
    assert [p.tool_call_id for p in suspended.pending_async_tools] == ["c_ask"]
    # Asked again with nothing new: the same snapshot is not appended twice.
    assert loop.until_external() == ["suspend"]
    assert loop.reducer.state.suspension == suspended

    loop.input(
        PermissionDecisionInput(
            type="permission_decision", tool_call_id="c_write", decision="allow"
        )
    )
    assert loop.until_external() == ["append tool_invocation_requested", "start c_write", "wait"]
    loop.finish("c_write")
    loop.input(
        AsyncToolResultInput(
            type="async_tool_result",
            tool_call_id="c_ask",
            result=ToolResultData(output="yes", is_error=False),
        )
    )
    assert loop.until_external() == ["call-model 1"]


def test_without_a_human_pending_permissions_are_denied_before_invocations() -> None:
    b = _builder(human_available=False)
    b.model_call("Working.", [Call("c_write", WRITE_FILE, {}), read_call("c_read")])
    loop = Loop(b, required={"c_write": True, "c_read": False})
    assert loop.until_external() == [
        "check c_write,c_read",
        "append tool_permission_required",
        "append tool_permission_resolved",  # denied: no human to ask
        "append tool_result",  # the denial's result, before anything runs
        "append tool_invocation_requested",
        "start c_read",
        "wait",
    ]


def test_the_classifier_decides_after_the_checker_and_before_denials() -> None:
    b = _builder(auto_permission=True)
    b.model_call("Working.", [Call("c_a", WRITE_FILE, {}), Call("c_b", WRITE_FILE, {})])
    loop = Loop(b, required={"c_a": True, "c_b": True}, classified={"c_a": "allow", "c_b": "deny"})
    assert loop.until_external() == [
        "check c_a,c_b",
        "append tool_permission_required,tool_permission_required",
        "classify c_a,c_b",
        "append tool_permission_classified,tool_permission_resolved,"
        "tool_permission_classified,tool_permission_resolved",
        "append tool_result",  # c_b denied by the classifier
        "append tool_invocation_requested",
        "start c_a",
        "wait",
    ]


def test_the_model_call_limit_fails_the_turn_instead_of_calling_again() -> None:
    b = _builder(max_model_calls=1)
    b.model_call("Reading.", [read_call("c_read")])
    b.invoke("c_read")
    b.result("c_read")
    loop = Loop(b)
    assert loop.until_external() == ["fail-limit", "done"]
    terminal = loop.reducer.state.terminal
    assert terminal is not None and terminal.type == "turn_failed"
    assert terminal.code == advance.MODEL_CALL_LIMIT_CODE


def test_a_checker_allowance_is_not_asked_again_before_its_invocation() -> None:
    b = _builder()
    b.model_call("Reading.", [read_call("c_read")])
    state = TurnReducer.of(b.events).state
    assert isinstance(advance.next_action(state, ts=TS), advance.CheckPermissions)
    action = advance.next_action(state, allowed={"c_read"}, ts=TS)
    assert isinstance(action, advance.Append)
    assert [e.type for e in action.events] == ["tool_invocation_requested"]


def test_running_tools_make_the_loop_wait() -> None:
    b = _builder()
    b.model_call("Reading.", [read_call("c_read")])
    b.invoke("c_read")
    state = TurnReducer.of(b.events).state
    assert isinstance(advance.next_action(state, ts=TS), advance.StartTools)
    assert advance.next_action(state, running={"c_read"}, ts=TS) == advance.Wait()
