"""The trusted fast path of reading (``TRUSTED_EVENT_VALIDATORS``) is the union's result, faster.

Reading picks one validator per line by its ``type`` and skips the
``JsonValue`` checks, because the line came from ``orjson`` (strict JSON: no
NaN, no infinity, string keys). Anything the fast path does not accept goes
through ``event_adapter``, so the results and the errors are those of
``parse_event(obj, trusted_json=True)`` as it was before the fast path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from tests.builders import TURN_ID, TurnBuilder, ask_call, read_call
from turncore.errors import CorruptTurnError
from turncore.events import (
    EVENT_TYPES,
    TRUSTED_EVENT_VALIDATORS,
    all_trusted_validators,
    event_adapter,
    parse_event,
)
from turncore.jsonvalue import TRUSTED_JSON
from turncore.storage.repository import InMemoryTurnRepository

GOLDEN = Path(__file__).parent / "golden"


def _history() -> list[bytes]:
    b = TurnBuilder(TURN_ID)
    b.model_call("Reading.", [read_call("r1"), ask_call("a1")])
    b.invoke("r1")
    b.invoke("a1")
    b.progress("r1", {"bytesRead": 10, "ratio": 0.5, "nested": [None, True, {"k": "v"}]})
    b.result("r1", "contents")
    b.suspend()
    b.progress("a1", {"status": "delivered"})
    b.result("a1", "Yes.")
    b.model_call("Done.")
    b.finish()
    return [orjson.dumps(e.to_wire()) for e in b.events]


def _lines() -> list[bytes]:
    lines = _history()
    for path in sorted(GOLDEN.glob("*.jsonl")):
        lines += path.read_bytes().splitlines()
    return lines


def test_every_event_type_has_a_fast_validator_without_json_checks() -> None:
    built = all_trusted_validators()
    assert set(built) == set(EVENT_TYPES)
    for kind, validator in built.items():
        text = repr(validator)
        assert "_validate_json_value" not in text, kind
        assert "Prebuilt" not in text, kind  # built from the stripped schema, not reused


def test_the_wire_union_is_built_from_its_own_schema_and_its_probe_knows_it() -> None:
    from pydantic_core import SchemaValidator

    from turncore.events import _nested_by_wire_name, _wire_union, event_adapter

    union = _wire_union()
    assert union is not None and "Prebuilt" not in repr(union)
    assert _nested_by_wire_name(union)
    # A union that reuses the nested models' own (lax) validators fails the probe.
    assert not _nested_by_wire_name(SchemaValidator(event_adapter.core_schema))


@pytest.mark.parametrize("raw", _lines())
def test_fast_path_equals_the_union(raw: bytes) -> None:
    obj = orjson.loads(raw)
    fast = TRUSTED_EVENT_VALIDATORS[obj["type"]].validate_python(obj)
    slow = _strict_union(obj)
    assert type(fast) is type(slow)
    assert fast == slow
    assert fast.to_wire() == slow.to_wire()
    assert parse_event(obj, trusted_json=True) == slow


def _strict_union(obj: Any) -> Any:
    """The union as reads use it: strict JSON types, wire names only (§5.2)."""
    return event_adapter.validate_python(
        obj, strict=True, context=TRUSTED_JSON, by_alias=True, by_name=False
    )


def _progress(**overrides: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "turnId": TURN_ID,
        "ts": "2025-11-11T04:36:29.000Z",
        "type": "tool_progress",
        "toolCallId": "c1",
        "source": "sync",
        "progress": {"done": False},
    }
    obj.update(overrides)
    return {k: v for k, v in obj.items() if v is not ...}


@pytest.mark.parametrize(
    "obj",
    [
        _progress(extra=1),  # unknown field
        _progress(source="elsewhere"),  # literal out of range
        _progress(toolCallId=7),  # wrong type
        _progress(progress=...),  # missing field
        _progress(type="tool_progresss"),  # unknown type
        _progress(type=["tool_progress"]),  # unhashable type
        _progress(type=...),  # no type
        _progress(toolCallId=..., tool_call_id="c1"),  # a Python name, not the wire name
        _progress(source=b"sync"),  # not a JSON type
        _progress(ts="2025-11-11T04:36:29"),  # not a UTC timestamp
    ],
)
def test_invalid_objects_fail_exactly_as_through_the_union(obj: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as through_union:
        _strict_union(obj)
    with pytest.raises(ValidationError) as through_parse:
        parse_event(obj, trusted_json=True)
    assert through_parse.value.errors() == through_union.value.errors()


@pytest.mark.parametrize(
    "kind", ["tool_result", "model_call_failed", "turn_created", "model_call_completed"]
)
def test_fast_validators_are_strict_and_take_wire_names_only(kind: str) -> None:
    obj = next(orjson.loads(raw) for raw in _lines() if orjson.loads(raw)["type"] == kind)
    bad = [
        {**obj, "ts": "yesterday"},
        {**{k: v for k, v in obj.items() if k != "turnId"}, "turn_id": obj["turnId"]},
    ]
    if kind == "tool_result":
        bad.append({**obj, "result": {**obj["result"], "isError": "false"}})
    if kind == "model_call_failed":
        bad += [
            {**obj, "modelCallIndex": str(obj["modelCallIndex"])},
            {**obj, "modelCallIndex": False},
        ]
    if kind == "turn_created":
        bad += [
            {**obj, "schemaVersion": True},
            {**obj, "config": {**obj["config"], "humanAvailable": "true"}},
        ]
    if kind == "model_call_completed":
        bad.append({**obj, "usage": {**obj["usage"], "inputTokens": "10"}})
    for wrong in bad:
        with pytest.raises(ValidationError):
            TRUSTED_EVENT_VALIDATORS[kind].validate_python(wrong)
        with pytest.raises(ValidationError):
            parse_event(wrong, trusted_json=True)
        with pytest.raises(ValidationError):
            parse_event(wrong)


def test_untrusted_values_are_still_walked() -> None:
    with pytest.raises(ValidationError, match="NaN"):
        parse_event(_progress(progress={"x": math.nan}))
    with pytest.raises(ValidationError, match="non-string key"):
        parse_event(_progress(progress={1: "x"}))


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        (b'{"progress": NaN}', "not valid JSON"),
        (b"[1, 2]", "not an event object"),
        (b'"tool_progress"', "not an event object"),
        (b'{"type": "nope"}', "unknown event type"),
        (b"{}", "no event type"),
    ],
)
def test_reading_reports_odd_lines_precisely(line: bytes, rule: str) -> None:
    lines = _history()
    lines.insert(3, line)
    repo = InMemoryTurnRepository()
    repo.put_raw(TURN_ID, b"".join(raw + b"\n" for raw in lines))
    with pytest.raises(CorruptTurnError) as caught:
        repo.read(TURN_ID)
    assert caught.value.line == 4
    assert rule in str(caught.value)


def test_reading_rejects_a_non_finite_number_spelled_as_overflow() -> None:
    lines = _history()
    progress = next(i for i, raw in enumerate(lines) if b'"tool_progress"' in raw)
    lines[progress] = lines[progress].replace(b'"bytesRead":10', b'"bytesRead":1e400')
    assert b"1e400" in lines[progress]
    repo = InMemoryTurnRepository()
    repo.put_raw(TURN_ID, b"".join(raw + b"\n" for raw in lines))
    with pytest.raises(CorruptTurnError) as caught:
        repo.read(TURN_ID)
    assert caught.value.line == progress + 1


@pytest.mark.parametrize(
    ("ts", "ok"),
    [
        ("2025-11-11T04:36:29.000Z", True),
        ("2025-11-11T04:36:29Z", True),
        ("2025-11-11T04:36:29.123456789+00:00", True),
        ("2024-02-29T00:00:00Z", True),  # a leap year
        ("2000-02-29T00:00:00Z", True),  # divisible by 400
        ("2100-02-29T00:00:00Z", False),  # divisible by 100 only
        ("2025-04-31T00:00:00Z", False),
        ("2025-11-11T24:00:00Z", False),
        ("2025-11-11T04:36Z", False),
        ("2025-11-11T04:36:29-00:00", False),
        ("2025-11-11T04:36:29.Z", False),
    ],
)
def test_ts_is_an_iso_utc_instant_on_a_real_date(ts: str, ok: bool) -> None:
    obj = _progress(ts=ts)
    for validate in (TRUSTED_EVENT_VALIDATORS["tool_progress"].validate_python, parse_event):
        if ok:
            assert validate(obj).ts == ts
        else:
            with pytest.raises(ValidationError, match="ts"):
                validate(obj)


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "async_tool_result", "toolCallId": "c", "result": {"output": 1, "isError": "yes"}},
        {"type": "async_tool_result", "toolCallId": "c", "result": {"output": 1, "isError": 0}},
        {"type": "async_tool_result", "toolCallId": "c", "result": {"output": 1, "is_error": True}},
        {"type": "permission_decision", "tool_call_id": "c", "decision": "allow"},
        {"type": "permission_decision", "toolCallId": 7, "decision": "allow"},
        {"type": "cancel", "reason": 5},
    ],
)
def test_external_inputs_are_strict_too(raw: dict[str, Any]) -> None:
    """An input's values must have their JSON types and wire names (§11.2): ``"yes"``
    is not ``true``, and nothing is coerced."""
    from turncore.events import parse_input

    with pytest.raises(ValidationError):
        parse_input(raw)


@pytest.mark.parametrize(
    "obj",
    [
        {
            "type": "tool_permission_resolved",
            "toolCallId": "c",
            "decision": "deny",
            "source": "human",
            "reason": None,
        },
        {"type": "turn_cancelled", "reason": None, "usage": {}},
        {"type": "turn_failed", "error": "x", "code": None, "usage": {}},
        {
            "type": "tool_permission_required",
            "toolCallId": "c",
            "toolName": "n",
            "request": {},
            "checkerError": None,
        },
    ],
)
def test_optional_fields_are_absent_never_null(obj: dict[str, Any]) -> None:
    """``field?: T`` admits no null (§5.2): a writer leaves an absent field out."""
    obj = {"turnId": TURN_ID, "ts": "2025-11-11T04:36:29.000Z", **obj}
    for validate in (TRUSTED_EVENT_VALIDATORS[obj["type"]].validate_python, parse_event):
        with pytest.raises(ValidationError):
            validate(obj)
    absent = {k: v for k, v in obj.items() if v is not None}
    assert parse_event(absent) == TRUSTED_EVENT_VALIDATORS[obj["type"]].validate_python(absent)


def test_trusted_validators_are_built_as_lines_need_them_and_unknown_types_miss() -> None:
    import subprocess
    import sys

    probe = (
        "from turncore.events import TRUSTED_EVENT_VALIDATORS as v, EVENT_TYPES\n"
        "assert dict(v) == {}\n"
        "v['turn_created']\n"
        "assert set(v) == {'turn_created'}, set(v)\n"
        "for bad in ('nosuch', 'delta'):\n"
        "    try:\n"
        "        v[bad]\n"
        "    except KeyError:\n"
        "        pass\n"
        "    else:\n"
        "        raise AssertionError(bad)\n"
        "assert set(v) == {'turn_created'}\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
