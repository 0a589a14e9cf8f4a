"""JSON-only values (spec §5.2).

Every durable value must survive a JSON round trip unchanged: NaN and
infinities, non-string keys, bytes, tuples-as-objects and arbitrary objects are
rejected with the path of the offending element. So are integers outside
JSON's safe range, ±(2**53 - 1) (RFC 7493, I-JSON): a JavaScript reader of
the file would round them, and past 64 bits the writer cannot store them at
all. A caller who needs such a number sends it as a string. Arrays and objects
nest at most ``MAX_JSON_DEPTH`` levels: past about 200 levels Temporal's
payload decoding (pydantic-core's JSON parser) refuses a value, and a value
the workflow cannot decode fails its task on every retry, wedging the turn.
Lines read from disk were
parsed by a strict JSON parser already, so validation with the
``trusted_json`` context skips the walk (it is the hot path of every read).
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, TypeAlias

import orjson
from pydantic import ValidationInfo, ValidatorFunctionWrapHandler, WrapValidator

TRUSTED_JSON = {"trusted_json": True}

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer every JSON reader holds exactly (JavaScript's Number.MAX_SAFE_INTEGER)."""


MAX_JSON_DEPTH = 128
"""The most levels of arrays and objects a JSON value may nest (``[]`` is one level).

It leaves room under pydantic-core's ~200-level parse limit for the events and
payloads that carry a value (``docs/file-format.md``)."""


def json_problem(value: Any, path: str = "$") -> str | None:
    """Describe the first non-JSON element of ``value``, or return None if it is pure JSON."""
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
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
        if isinstance(item, list | dict) and depth == MAX_JSON_DEPTH:
            if len(where) > 80:  # 128 steps down: the start and the end say where
                where = f"{where[:40]}…{where[-20:]}"
            return (
                f"{where} is nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects; "
                "flatten it, or send the deep part as a string"
            )
        if isinstance(item, list):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item))
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    return f"{where} has non-string key {k!r}; JSON object keys are strings"
                stack.append((v, f"{where}.{k}", depth + 1))
            continue
        return f"{where} is a {type(item).__name__}; only JSON values are allowed"
    return None


class JsonTooDeepError(ValueError):
    """JSON nested deeper than a parse allows (``loads_exact``)."""


def loads_exact(data: bytes | str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON a person or a program sent (a CLI argument, a request body), as written.

    orjson checks the text (UTF-8, no lone surrogates, no NaN or infinity), but
    reads an integer past 64 bits as a float, which validation could then no
    longer refuse: a document with floats is parsed again by the standard
    library, which keeps every integer exact. Nesting past ``max_depth`` levels
    is refused before that parser (which gives up near 1000 levels) sees it.
    Raises ``ValueError`` saying what is wrong; ``json_problem`` then judges the value.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    floats = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > max_depth:
                raise JsonTooDeepError(
                    f"nested deeper than {max_depth} levels of arrays and objects; flatten it, "
                    "or send the deep part as a string"
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children)
        elif isinstance(item, float):
            floats = True
    return json.loads(data) if floats else value


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
