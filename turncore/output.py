"""Structured output: an agent's final answer as JSON of a declared shape.

Theory of operation
-------------------
An agent may declare a JSON Schema its final answer must match
(``Agent(output_type=…)`` or ``output_schema`` in ``[agents.NAME]``). The
schema travels in the turn's own file, in ``turn_created.agent.requested
.overrides.composition`` under ``outputSchema`` (and ``outputRetries``): the
spec's opaque composition hints, persisted verbatim (§6.1), so every worker
and every replay sees the same shape and the file stays wire-exact.

The answer is always the last text part of the final assistant message (a
response without tool calls): one JSON document. Providers with native structured
output are asked for it (``response_format`` / ``text.format``); Anthropic
gets a final-result tool whose input its adapter turns back into that text,
so the log, the loop and every surface see one shape of answer.

The loop (``advance.next_action``) checks the answer against the schema:
valid completes the turn; invalid is answered once more by the model — the
next request carries the invalid answer and a user message naming the
validation errors (``feedback_message``), derived by the composer from the
file alone, so nothing new is written — at most ``outputRetries`` times;
then the turn fails with ``code: "output-invalid"``. Every earlier response
without tool calls in such a turn was an invalid answer (a valid one ends the
turn), so the count of retries used is read off the state.

Validation is JSON Schema (Draft 2020-12 unless the schema's ``$schema``
says otherwise) by the ``jsonschema`` package, imported on first use; no
remote ``$ref`` is ever fetched.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import orjson

from .events import AgentOverrides, RequestedAgent
from .jsonvalue import JsonValue, loads_exact
from .messages import AssistantMessage, TextPart, UserMessage

OUTPUT_SCHEMA = "outputSchema"
"""The key of ``requested.overrides.composition`` that carries the answer's JSON Schema."""
OUTPUT_RETRIES = "outputRetries"
"""The key that carries how often an invalid answer is sent back (default 1)."""
DEFAULT_OUTPUT_RETRIES = 1
OUTPUT_INVALID_CODE = "output-invalid"
"""``turn_failed.code`` when the final answer still does not match the output schema
after ``outputRetries`` answers were sent back with their validation errors."""
FINAL_RESULT_TOOL = "final_result"
"""The tool an adapter without native structured output offers for the answer."""

_MAX_ERRORS = 10


class OutputSchemaError(ValueError):
    """A value that is not a usable JSON Schema for structured output."""


@dataclass(frozen=True)
class OutputSpec:
    """What a turn's final answer must be."""

    schema: dict[str, Any]
    retries: int = DEFAULT_OUTPUT_RETRIES

    @property
    def name(self) -> str:
        """A name for the schema where a wire wants one (``[A-Za-z0-9_-]{1,64}``)."""
        title = self.schema.get("title")
        raw = title if isinstance(title, str) else ""
        cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", raw)[:64].strip("_")
        return cleaned or "result"


def strict_compatible(schema: JsonValue) -> bool:
    """Whether OpenAI's strict mode accepts ``schema``: every object closes its
    properties (``additionalProperties: false``) and requires all of them."""
    if isinstance(schema, list):
        return all(strict_compatible(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False or not isinstance(props, dict):
            return False
        if set(props) != set(schema.get("required", [])):
            return False
    return all(
        strict_compatible(v)
        for k, v in schema.items()
        if k not in ("enum", "const", "default", "examples")
    )


def check_schema(schema: object, where: str) -> dict[str, Any]:
    """``schema`` if it is a JSON Schema object a validator can use; else
    ``OutputSchemaError`` saying what is wrong, naming ``where``."""
    if not isinstance(schema, dict):
        raise OutputSchemaError(
            f"{where} must be a JSON Schema object (a table), not a {type(schema).__name__}"
        )
    try:
        orjson.dumps(schema)
    except TypeError as exc:
        raise OutputSchemaError(f"{where} is not JSON: {exc}") from None
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        at = "/".join(str(p) for p in exc.path) or "the top level"
        raise OutputSchemaError(
            f"{where} is not a valid JSON Schema at {at}: {exc.message}"
        ) from None
    return schema


def check_retries(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OutputSchemaError(f"{where} must be a whole number ≥ 0, not {value!r}")
    return value


def with_output(agent: RequestedAgent, spec: OutputSpec | None) -> RequestedAgent:
    """``agent`` with ``spec`` persisted in ``overrides.composition`` (none: unchanged)."""
    if spec is None:
        return agent
    overrides = agent.overrides or AgentOverrides()
    composition = overrides.composition
    if composition is not None and not isinstance(composition, dict):
        raise OutputSchemaError(
            "this agent has an output schema, so the turn's overrides.composition must be "
            "a JSON object (or absent) to carry it"
        )
    merged = {**(composition or {}), OUTPUT_SCHEMA: spec.schema, OUTPUT_RETRIES: spec.retries}
    return agent.model_copy(
        update={"overrides": overrides.model_copy(update={"composition": merged})}
    )


def output_spec(agent: RequestedAgent) -> OutputSpec | None:
    """The output a turn's requested agent asks for; None if it asks for none."""
    overrides = agent.overrides
    composition = overrides.composition if overrides is not None else None
    if not isinstance(composition, dict):
        return None
    schema = composition.get(OUTPUT_SCHEMA)
    if not isinstance(schema, dict):
        return None
    retries = composition.get(OUTPUT_RETRIES, DEFAULT_OUTPUT_RETRIES)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        retries = DEFAULT_OUTPUT_RETRIES
    return OutputSpec(schema=schema, retries=retries)


@functools.lru_cache(maxsize=64)
def _validator(schema_json: bytes) -> Any:
    from jsonschema.validators import validator_for

    schema = orjson.loads(schema_json)
    return validator_for(schema)(schema)


def answer_text(message: AssistantMessage) -> str:
    """The answer in a final response: its last text part (a model may say something
    before it, as Anthropic does before calling the final-result tool)."""
    if isinstance(message.content, str):
        return message.content
    texts = [p.text for p in message.content if isinstance(p, TextPart)]
    return texts[-1] if texts else ""


def answer_errors(spec: OutputSpec, message: AssistantMessage) -> list[str]:
    """Why ``message`` is not a valid answer (empty: it is one), sorted and bounded."""
    text = answer_text(message).strip()
    try:
        value = loads_exact(text)
    except ValueError as exc:
        return [f"the answer is not a JSON document ({exc})"]
    validator = _validator(orjson.dumps(spec.schema, option=orjson.OPT_SORT_KEYS))
    found = sorted(
        f"at {'/'.join(str(p) for p in e.absolute_path) or 'the top level'}: {e.message}"
        for e in validator.iter_errors(value)
    )
    if len(found) > _MAX_ERRORS:
        found = [*found[:_MAX_ERRORS], f"… and {len(found) - _MAX_ERRORS} more"]
    return found


def answer_value(message: AssistantMessage) -> JsonValue:
    """The JSON value of a (valid) answer."""
    return loads_exact(answer_text(message).strip())


FEEDBACK_LEAD = "Your final answer does not match the required output schema:\n"


def is_feedback(message: UserMessage) -> bool:
    """Whether ``message`` is one ``feedback_message`` made."""
    return isinstance(message.content, str) and message.content.startswith(FEEDBACK_LEAD)


def feedback_message(spec: OutputSpec, errors: list[str]) -> UserMessage:
    """The message that sends an invalid answer back to the model."""
    listed = "\n".join(f"- {e}" for e in errors)
    return UserMessage(
        content=(
            FEEDBACK_LEAD + f"{listed}\n"
            "Answer again with only the corrected JSON value (through the "
            f"{FINAL_RESULT_TOOL} tool where one is offered). The schema:\n"
            f"{orjson.dumps(spec.schema).decode()}"
        )
    )
