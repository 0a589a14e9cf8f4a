"""JSON-only values (spec §5.2).

Every durable value must survive a JSON round trip unchanged: NaN and
infinities, non-string keys, bytes, tuples-as-objects and arbitrary objects are
rejected with the path of the offending element. So are integers outside
JSON's safe range, ±(2**53 - 1) (RFC 7493, I-JSON): a JavaScript reader of
the file would round them, and past 64 bits the writer cannot store them at
all. A caller who needs such a number sends it as a string. Lines read from disk were
parsed by a strict JSON parser already, so validation with the
``trusted_json`` context skips the walk (it is the hot path of every read).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, TypeAlias

from pydantic import ValidationInfo, ValidatorFunctionWrapHandler, WrapValidator

TRUSTED_JSON = {"trusted_json": True}

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer every JSON reader holds exactly (JavaScript's Number.MAX_SAFE_INTEGER)."""


def json_problem(value: Any, path: str = "$") -> str | None:
    """Describe the first non-JSON element of ``value``, or return None if it is pure JSON."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if item is None or isinstance(item, (str, bool)):
            continue
        if isinstance(item, int):
            if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
                continue
            shown = (
                str(item) if item.bit_length() <= 80 else f"an integer of {item.bit_length()} bits"
            )
            return (
                f"{where} is {shown}, outside JSON's safe integer range ±(2**53 - 1); "
                "send it as a string"
            )
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{where} is {item!r}; JSON has no NaN or infinity"
            continue
        if isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    return f"{where} has non-string key {k!r}; JSON object keys are strings"
                stack.append((v, f"{where}.{k}"))
            continue
        return f"{where} is a {type(item).__name__}; only JSON values are allowed"
    return None


def _validate_json_value(
    value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
) -> Any:
    ctx = info.context
    if not (isinstance(ctx, dict) and ctx.get("trusted_json")):
        problem = json_problem(value, info.field_name or "$")
        if problem is not None:
            raise ValueError(problem)
    return handler(value)


JsonValue: TypeAlias = Annotated[Any, WrapValidator(_validate_json_value)]
"""Any JSON value: null, bool, int, finite float, str, list, or object with string keys."""

JsonObject: TypeAlias = Annotated[dict[str, Any], WrapValidator(_validate_json_value)]


def without_json_checks(schema: Any) -> Any:
    """A copy of a pydantic core schema without the ``JsonValue`` checks.

    Validating with it is exactly validating with the ``trusted_json``
    context (the check then only hands the value on), minus one Python call
    per JSON-valued field. Only for values a strict JSON parser produced.
    """
    if isinstance(schema, dict):
        function = schema.get("function")
        if (
            schema.get("type") == "function-wrap"
            and isinstance(function, dict)
            and function.get("function") is _validate_json_value
        ):
            return without_json_checks(schema["schema"])
        return {k: without_json_checks(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [without_json_checks(v) for v in schema]
    return schema
