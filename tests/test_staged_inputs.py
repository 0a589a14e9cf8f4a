"""Large inputs by claim check (issue 9 §2): staged in the turn's storage, signalled by reference.

A valid async tool result or progress too large to travel inline (over
``MAX_INPUT_BYTES``) is staged by ``TurnClient`` in the turn's repository and
sent as ``{"type", "toolCallId", "staged": {"digest", "size"}}``. The append
activity fetches it, checks digest and size, validates it exactly as an inline
input, appends it whole and hands the workflow the elided event, so no history
payload grows past 256 KiB. A reference whose value is missing or does not
match is a rejected input: listed, nothing appended, the turn goes on.

Real parts throughout: the session's Temporal dev server, real files, the
session's PostgreSQL server, and the ``turns`` CLI as a separate process.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.testing import WorkflowEnvironment

from tests.harness import Harness, async_tool
from tests.test_large_values import BIG, PAYLOAD_LIMIT, _payloads
from turncore.elision import elide_event, is_elided
from turncore.errors import InputTooLargeError, RejectedInputError, StagedValueError
from turncore.events import (
    AsyncToolProgressInput,
    AsyncToolResultInput,
    PermissionDecisionInput,
    StagedValue,
    ToolResultData,
    parse_delivery,
)
from turncore.inputs import (
    MAX_INPUT_BYTES,
    MAX_STAGED_BYTES,
    accept_input,
    resolve_staged,
    staged_digest,
    staged_form,
)
from turncore.reducer import TurnReducer
from turncore.storage.postgres import PostgresTurnRepository, migrate

ROOT = Path(__file__).resolve().parent.parent
THREE_MB = "r" * (3 * 1024 * 1024)
ONE_MB = "p" * (1024 * 1024)
HUGE = 123456789012345678901234567890


def _ref(kind: str, call: str, data: bytes) -> dict[str, Any]:
    return {
        "type": kind,
        "toolCallId": call,
        "staged": {"digest": staged_digest(data), "size": len(data)},
    }


# ================================================================ pure: the wire shape and its checks


def test_a_small_input_stays_inline_and_a_large_one_is_staged() -> None:
    small = AsyncToolResultInput(
        tool_call_id="c", result=ToolResultData(output="x" * 1000, is_error=False)
    )
    assert staged_form(small) is None
    big = AsyncToolResultInput(
        tool_call_id="c", result=ToolResultData(output=THREE_MB, is_error=False)
    )
    staged = staged_form(big)
    assert staged is not None
    ref, data = staged
    assert ref.type == "async_tool_result" and ref.tool_call_id == "c"
    assert ref.staged.size == len(data) > 3 * 1024 * 1024
    assert ref.staged.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert json.loads(data) == {"output": THREE_MB, "isError": False}  # the value, not the input
    assert len(orjson.dumps(ref.to_wire())) < 200
    assert resolve_staged(ref, data) == big


def test_a_staged_value_resolves_exactly_as_the_inline_input_would() -> None:
    progress = AsyncToolProgressInput(tool_call_id="c", progress={"log": ONE_MB, "pct": 50})
    ref, data = staged_form(progress) or pytest.fail("not staged")
    assert resolve_staged(ref, data) == progress
    # Same rules, same message: an integer outside the safe range is refused.
    bad = json.dumps({"n": HUGE}).encode()
    staged_ref = parse_delivery(_ref("async_tool_progress", "c", bad))
    with pytest.raises(RejectedInputError) as staged_error:
        resolve_staged(staged_ref, bad)  # type: ignore[arg-type]
    with pytest.raises(RejectedInputError) as inline_error:
        accept_input(
            "async_tool_progress",
            [{"type": "async_tool_progress", "toolCallId": "c", "progress": {"n": HUGE}}],
        )
    assert str(staged_error.value) == str(inline_error.value)
    assert "safe integer range" in str(staged_error.value)
    result = json.dumps({"output": 1, "isError": "yes"}).encode()
    result_ref = parse_delivery(_ref("async_tool_result", "c", result))
    with pytest.raises(RejectedInputError, match="result.isError"):
        resolve_staged(result_ref, result)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "claimed", "reason"),
    [
        (b'"abc"', b'"abd"', "does not match its digest"),
        (b'"abc"', b'"abcd"', "is 5 bytes, not 6"),
        (b"\xff\xfe", b"\xff\xfe", "is not JSON"),
        (b'{"a": NaN}', b'{"a": NaN}', "is not JSON"),
    ],
)
def test_a_staged_value_that_does_not_match_or_parse_is_rejected(
    data: bytes, claimed: bytes, reason: str
) -> None:
    ref = parse_delivery(_ref("async_tool_progress", "c", claimed))
    with pytest.raises(StagedValueError, match=reason) as info:
        resolve_staged(ref, data)  # type: ignore[arg-type]
    assert isinstance(info.value, RejectedInputError)  # a rejected input, like any other


def test_the_reference_is_strict() -> None:
    good = _ref("async_tool_result", "c", b"{}")
    assert accept_input("async_tool_result", [good]).to_wire() == good
    for bad, reason in [
        ({**good, "result": {"output": 1, "isError": False}}, "Extra inputs"),
        ({**good, "staged": {"digest": "md5:00", "size": 2}}, "staged.digest"),
        ({**good, "staged": {**good["staged"], "size": "2"}}, "staged.size"),
        ({**good, "staged": {**good["staged"], "size": MAX_STAGED_BYTES + 1}}, "staged.size"),
        ({**good, "toolCallId": ""}, "toolCallId"),
    ]:
        with pytest.raises(RejectedInputError, match=reason):
            accept_input("async_tool_result", [bad])
    decision = {"type": "permission_decision", "toolCallId": "c", "staged": good["staged"]}
    with pytest.raises(RejectedInputError, match="cannot be staged"):
        accept_input("permission_decision", [decision])


def test_too_large_to_stage_is_refused_with_the_documented_error() -> None:
    over = AsyncToolProgressInput(tool_call_id="c", progress="z" * MAX_STAGED_BYTES)
    with pytest.raises(InputTooLargeError, match=f"at most {MAX_STAGED_BYTES} bytes"):
        staged_form(over)
    decision = PermissionDecisionInput(
        tool_call_id="c", decision="deny", metadata={"reason": "n" * MAX_INPUT_BYTES}
    )
    with pytest.raises(InputTooLargeError, match="only async tool results and progress"):
        staged_form(decision)


# ================================================================ repositories


@pytest.fixture(params=["file", "memory", "postgres"])
def repository(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    from turncore.storage.repository import FileTurnRepository, InMemoryTurnRepository

    if request.param == "file":
        yield FileTurnRepository(tmp_path)
    elif request.param == "memory":
        yield InMemoryTurnRepository()
    else:
        url = request.getfixturevalue("postgres_url")
        migrate(url)
        repo = PostgresTurnRepository.connect(url)
        try:
            yield repo
        finally:
            repo.close()


def test_staging_is_content_addressed_idempotent_and_checked(repository: Any) -> None:
    from tests.builders import TURN_ID
    from tests.builders import turn_created as created

    data = orjson.dumps({"output": THREE_MB, "isError": False})
    with pytest.raises(Exception, match="does not exist"):
        repository.stage(TURN_ID, data)  # a value belongs to a turn
    repository.create(created())
    ref = repository.stage(TURN_ID, data)
    assert ref == StagedValue(digest=staged_digest(data), size=len(data))
    assert repository.stage(TURN_ID, data) == ref  # again: the same blob, nothing else
    assert repository.fetch_staged(TURN_ID, ref) == data
    missing = StagedValue(digest=staged_digest(b"other"), size=5)
    with pytest.raises(StagedValueError, match="no staged value"):
        repository.fetch_staged(TURN_ID, missing)
    with pytest.raises(InputTooLargeError):
        repository.stage(TURN_ID, b" " * (MAX_STAGED_BYTES + 1))


def test_a_corrupt_staged_file_is_reported_and_restaged(tmp_path: Path) -> None:
    from tests.builders import TURN_ID
    from tests.builders import turn_created as created
    from turncore.storage.repository import FileTurnRepository

    repo = FileTurnRepository(tmp_path)
    repo.create(created())
    data = b'{"output":"v","isError":false}'
    ref = repo.stage(TURN_ID, data)
    path = repo.staged_path(TURN_ID, ref.digest)
    assert path.is_relative_to(tmp_path / "storage" / "staged")
    path.write_bytes(data.replace(b"v", b"w"))  # same size, other bytes
    with pytest.raises(StagedValueError, match="does not match its digest"):
        repo.fetch_staged(TURN_ID, ref)
    repo.stage(TURN_ID, data)  # staging again repairs it
    assert repo.fetch_staged(TURN_ID, ref) == data
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary files left


# ================================================================ end to end on Temporal


def _script() -> list[Any]:
    return [{"toolCalls": [{"toolName": "a", "input": {}}]}, {"text": "done"}]


def _max_payload(history: Any) -> int:
    sizes = [p.ByteSize() for e in history.events for p in _payloads(e)]
    assert sizes, "the walk found no payloads at all"
    return max(sizes)


@pytest.fixture(params=["file", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[PostgresTurnRepository | None]:
    if request.param == "file":
        yield None
        return
    url = request.getfixturevalue("postgres_url")
    migrate(url)
    repo = PostgresTurnRepository.connect(url)
    try:
        yield repo
    finally:
        repo.close()


async def test_megabytes_of_progress_and_result_land_whole_and_stay_out_of_history(
    temporal_env: WorkflowEnvironment, tmp_path: Path, store: PostgresTurnRepository | None
) -> None:
    async with Harness(
        temporal_env.client,
        tmp_path,
        _script(),
        tools=[async_tool("a")],
        permissions={"external:a": "none"},
        limits=BIG,  # the model is sent the whole result
        repository=store,
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        progress = AsyncToolProgressInput(tool_call_id="call_0_0", progress={"log": ONE_MB})
        assert (await h.turns.advance_turn(turn_id, progress).outcome).status == "suspended"
        result = AsyncToolResultInput(
            tool_call_id="call_0_0",
            result=ToolResultData(output={"report": THREE_MB}, is_error=False),
        )
        assert (await h.turns.advance_turn(turn_id, result).outcome).status == "completed"

        events = h.repo.read(turn_id)
        state = TurnReducer.of(events).state
        (call,) = state.tool_calls
        assert call.progress[0].progress == {"log": ONE_MB}  # whole in the journal
        assert call.result is not None and call.result.result.output == {"report": THREE_MB}
        queried = await h.query_state(turn_id)
        assert queried.pop("rejectedInputs") == []
        assert queried == TurnReducer.of([elide_event(e) for e in events]).state.to_wire()
        assert is_elided(queried["toolCalls"][0]["result"]["result"]["output"])
        history = await h.client.get_workflow_handle(turn_id).fetch_history()
        assert _max_payload(history) < PAYLOAD_LIMIT
        assert any(b"sha256:" in e.SerializeToString() for e in history.events)  # by reference


async def test_a_missing_or_wrong_staged_value_is_rejected_and_the_turn_goes_on(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    async with Harness(
        temporal_env.client,
        tmp_path,
        _script(),
        tools=[async_tool("a")],
        permissions={"external:a": "none"},
        limits=BIG,
    ) as h:
        turn_id, outcome = await h.run("go")
        assert outcome.status == "suspended"
        handle = h.client.get_workflow_handle(turn_id)
        before = h.repo.path_for(turn_id).read_bytes()

        # Too large even to stage: refused by the client, before anything is sent.
        over = AsyncToolProgressInput(tool_call_id="call_0_0", progress="z" * MAX_STAGED_BYTES)
        with pytest.raises(InputTooLargeError, match=f"at most {MAX_STAGED_BYTES} bytes"):
            await h.turns.advance_turn(turn_id, over).outcome
        del over
        assert not (tmp_path / "storage" / "staged").exists()

        value = orjson.dumps({"output": THREE_MB, "isError": False})
        missing = _ref("async_tool_result", "call_0_0", value)  # never staged
        await handle.signal("async_tool_result", missing)
        for _ in range(200):
            rejected = (await h.query_state(turn_id))["rejectedInputs"]
            if rejected:
                break
            await asyncio.sleep(0.05)
        (record,) = rejected
        assert record["toolCallId"] == "call_0_0"
        assert "no staged value" in record["reason"] and "stage it again" in record["reason"]

        # Staged, but the reference claims other bytes of the same size.
        ref = h.repo.stage(turn_id, value)
        other = value.replace(b'"r', b'"s', 1)
        wrong = {**missing, "staged": {"digest": staged_digest(other), "size": ref.size}}
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await handle.execute_update("async_tool_result", wrong)
        assert "no staged value" in str(info.value.cause)
        # The blob on disk is corrupted behind the reference's back.
        path = h.repo.staged_path(turn_id, ref.digest)
        path.write_bytes(other)
        with pytest.raises(RejectedInputError, match="does not match its digest"):
            await _send_ref(h, turn_id, missing)
        assert h.repo.path_for(turn_id).read_bytes() == before  # nothing appended
        history = await handle.fetch_history()
        assert not any(e.HasField("workflow_task_failed_event_attributes") for e in history.events)

        # The turn is not wedged: the same reference, once the value is staged, completes it.
        assert h.repo.stage(turn_id, value) == ref
        assert (await _send_ref(h, turn_id, missing)).status == "completed"
        assert h.file_state(turn_id).tool_calls[0].result.result.output == THREE_MB  # type: ignore[union-attr]


async def _send_ref(h: Harness, turn_id: str, raw: dict[str, Any]) -> Any:
    return await h.turns.advance_turn(turn_id, parse_delivery(raw)).outcome


# ================================================================ the turns CLI, on PostgreSQL


def test_turns_complete_and_progress_read_large_values_from_files(
    temporal_env: WorkflowEnvironment, postgres_url: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))}
    home = tmp_path / "home"
    home.mkdir()
    (home / "turns.toml").write_text('[storage]\nkind = "postgres"\n')
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "NO_COLOR": "1",
            "TURNS_HOME": str(home),
            "TURNS_DATABASE_URL": postgres_url,
            "TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
            "TURNS_TASK_QUEUE": f"staged-{uuid.uuid4()}",
        }
    )

    def turns(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "turnclient.cli", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert turns("db", "migrate").returncode == 0
    r = turns("run", "Ask me for my name", "--json")
    assert r.returncode == 3, r.stderr
    turn_id = json.loads(r.stdout)["turnId"]
    progress = tmp_path / "progress.json"
    progress.write_text(json.dumps({"log": ONE_MB}))
    r = turns("progress", turn_id, "call_0_0", "--data", f"@{progress}", "--json")
    assert r.returncode == 0, r.stderr
    # Under the demo model's 1 MiB bound per request field (the result is sent to
    # it), well over the inline limit: staged.
    answer_text = "a" * 900_000
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps(answer_text))
    r = turns("complete", turn_id, "call_0_0", "--output", f"@{answer}", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "completed"
    r = turns("complete", turn_id, "call_0_0", "--output", f"@{tmp_path / 'nope.json'}")
    assert r.returncode == 2 and "cannot read" in r.stderr

    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            "SELECT line FROM turn_events WHERE turn_id = %s ORDER BY seq", (turn_id,)
        ).fetchall()
        staged = conn.execute(
            "SELECT count(*) FROM turn_staged WHERE turn_id = %s", (turn_id,)
        ).fetchone()
    events = [json.loads(line) for (line,) in rows]
    (progressed,) = [e for e in events if e["type"] == "tool_progress"]
    assert progressed["progress"] == {"log": ONE_MB}
    (result,) = [e for e in events if e["type"] == "tool_result"]
    assert result["result"]["output"] == answer_text
    assert staged == (2,)  # kept after use (see docs/file-format.md)
