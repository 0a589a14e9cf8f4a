"""Typed tools: schema from signature and docstring, validation before the call,
errors as results, context, return values. Called directly (no Temporal)."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from turncore.events import ToolResultData
from turncore.tools import (
    Tool,
    ToolContext,
    ToolDeclarationError,
    ToolError,
    ToolRegistry,
    schema_disagreement,
    tool,
)


def context(progress: list[Any] | None = None) -> ToolContext:
    async def report(p: Any) -> None:
        if progress is not None:
            progress.append(p)

    return ToolContext("turn-1", "call_1", asyncio.Event(), report)


def run(t: Tool, input: Any, ctx: ToolContext | None = None) -> ToolResultData:
    return asyncio.run(t.execute(input, ctx or context()))


calls: list[tuple[int, int]] = []


@tool(permission="none")
def multiply(a: int, b: int = 2) -> int:
    """Multiply two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    calls.append((a, b))
    return a * b


class Unit(Enum):
    C = "celsius"
    F = "fahrenheit"


@dataclass
class Point:
    x: int
    y: int


class Place(BaseModel):
    city: str
    country: str = "US"


def test_schema_comes_from_signature_and_docstring() -> None:
    assert multiply.name == "multiply" and multiply.description == "Multiply two integers."
    assert multiply.permission == "none" and multiply.execution == "sync"
    assert multiply.tool_id == "user:multiply"
    assert multiply.input_schema == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "the first factor"},
            "b": {"type": "integer", "description": "the second factor", "default": 2},
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    assert multiply.descriptor().input_schema == multiply.input_schema


def test_enums_literals_and_nested_models() -> None:
    @tool
    async def weather(
        place: Place, unit: Unit = Unit.C, detail: Literal["short", "long"] = "short"
    ) -> str:
        """The weather.

        :param place: where
        :param unit: which scale
        """
        return f"{place.city}/{place.country} in {unit.value} ({detail})"

    schema = weather.input_schema
    assert schema["properties"]["place"]["description"] == "where"
    assert schema["$defs"]["Place"]["properties"]["city"] == {"type": "string"}
    assert schema["$defs"]["Unit"]["enum"] == ["celsius", "fahrenheit"]
    assert schema["properties"]["detail"]["enum"] == ["short", "long"]
    assert weather.permission == "ask"  # fails closed unless declared
    result = run(weather, {"place": {"city": "Oslo", "country": "NO"}, "unit": "fahrenheit"})
    assert result == ToolResultData(output="Oslo/NO in fahrenheit (short)", is_error=False)
    bad = run(weather, {"place": {"city": "Oslo"}, "unit": "kelvin"})
    assert bad.is_error and "unit: Input should be 'celsius' or 'fahrenheit'" in bad.output


def test_invalid_arguments_never_reach_the_function() -> None:
    calls.clear()
    six = run(multiply, {"a": "six"})
    assert six.is_error
    assert six.output == (
        "Invalid arguments for tool multiply (1 problem): a: Input should be a valid integer"
    )
    missing = run(multiply, {"b": 3})
    assert missing.is_error and "a: Field required" in missing.output
    extra = run(multiply, {"a": 1, "c": 3})
    assert extra.is_error and "c: Extra inputs are not permitted" in extra.output
    assert run(multiply, {"a": "6"}).is_error  # strict: a string is not a number
    assert run(multiply, ["a"]).is_error
    assert calls == []
    assert run(multiply, {"a": 6}) == ToolResultData(output=12, is_error=False)
    assert calls == [(6, 2)]


def test_context_gives_ids_and_durable_progress() -> None:
    @tool(permission="none")
    async def slow(steps: int, ctx: ToolContext) -> dict[str, Any]:
        """Count."""
        for i in range(steps):
            await ctx.report_progress({"step": i})
        return {"turn": ctx.turn_id, "call": ctx.tool_call_id}

    assert "ctx" not in slow.input_schema["properties"]
    progress: list[Any] = []
    result = run(slow, {"steps": 2}, context(progress))
    assert result.output == {"turn": "turn-1", "call": "call_1"}
    assert progress == [{"step": 0}, {"step": 1}]


def test_exceptions_become_results_and_are_logged_with_their_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @tool
    def broken(x: int) -> int:
        """Breaks."""
        return {"k": 1}[str(x)]  # KeyError

    @tool
    def refuses(x: int) -> int:
        """Refuses."""
        raise ToolError(f"{x} is not allowed")

    with caplog.at_level(logging.ERROR, logger="turncore.tools"):
        result = run(broken, {"x": 7})
        refused = run(refuses, {"x": 7})
    assert result == ToolResultData(output="Tool raised KeyError: '7'", is_error=True)
    assert refused == ToolResultData(output="7 is not allowed", is_error=True)
    [record] = caplog.records  # the expected ToolError is not logged as a bug
    assert "tool broken (call call_1 of turn turn-1) raised KeyError" in record.getMessage()
    assert record.exc_info is not None
    tb = record.exc_info[2]
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_code.co_filename == __file__
    assert tb.tb_frame.f_code.co_name == "broken"


def test_return_values_models_dataclasses_and_non_json() -> None:
    @tool
    def model() -> Place:
        """A model."""
        return Place(city="Rome")

    @tool
    def point() -> Point:
        """A dataclass."""
        return Point(1, 2)

    @tool
    def nan() -> float:
        """Not JSON."""
        return float("nan")

    @tool
    def explicit() -> ToolResultData:
        """Full control."""
        return ToolResultData(output="nope", is_error=True)

    assert run(model, {}).output == {"city": "Rome", "country": "US"}
    assert run(point, {}).output == {"x": 1, "y": 2}
    assert run(nan, {}).is_error and "non-JSON" in run(nan, {}).output
    assert run(explicit, {}) == ToolResultData(output="nope", is_error=True)


def test_declaration_mistakes_are_named() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(ToolDeclarationError, match="parameter 'x' .* has no type annotation"):
        tool(untyped)
    with pytest.raises(ToolDeclarationError, match=r"\*kw cannot be described"):
        tool(lambda **kw: kw, name="kw")
    with pytest.raises(ToolDeclarationError, match="1-64 letters"):
        tool(multiply.function, name="a b")  # type: ignore[arg-type]


def test_async_tools_declare_a_schema_and_have_no_body() -> None:
    @tool(execution="async", requires_human=True, permission="none")
    def deploy(env: Literal["staging", "production"]) -> None:
        """Deploy; CI reports back."""

    assert deploy.tool_id == "external:deploy" and deploy.function is None
    assert deploy.input_schema["properties"]["env"]["enum"] == ["staging", "production"]
    registry = ToolRegistry.of([deploy, multiply])
    registry.check_all([deploy.descriptor(), multiply.descriptor()])
    assert registry.sync_tool(multiply.descriptor()) is multiply


def test_a_declared_schema_must_agree_with_the_inferred_one() -> None:
    inferred = multiply.input_schema
    assert schema_disagreement({"type": "object", "required": ["a"]}, inferred) is None
    assert (
        schema_disagreement({"type": "object", "properties": {"a": {"type": "string"}}}, inferred)
        == "input_schema.properties.a.type is 'string' but the function gives 'integer'"
    )
    assert "input_schema.properties.z" in (
        schema_disagreement({"properties": {"z": {}}}, inferred) or ""
    )


def test_a_tool_that_exits_or_returns_unencodable_bytes_is_an_error_result() -> None:
    """Nothing a tool does escapes ``execute``: ``sys.exit()`` (argparse, click) in a sync
    tool would otherwise unwind the worker's event loop and hang the embedding process."""

    @tool
    def exits(code: int) -> int:
        """Exits."""
        raise SystemExit(code)

    @tool
    async def exits_async() -> int:
        """Exits too."""
        raise SystemExit("bye")

    @tool
    def raw() -> Any:
        """Bytes that are no text."""
        return b"\xff\xfe"

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("no text")

    @tool
    def unprintable() -> int:
        """Raises something that cannot be printed."""
        raise Unprintable

    assert run(exits, {"code": 2}) == ToolResultData(
        output="Tool raised SystemExit: 2", is_error=True
    )
    assert run(exits_async, {}) == ToolResultData(
        output="Tool raised SystemExit: bye", is_error=True
    )
    returned = run(raw, {})
    assert returned.is_error and returned.output.startswith("Tool returned a non-JSON value: ")
    assert run(unprintable, {}) == ToolResultData(
        output="Tool raised Unprintable (its message cannot be printed)", is_error=True
    )


def test_blocking_sync_tools_do_not_starve_the_event_loops_threads() -> None:
    """Each blocking call gets a thread of its own: more blocked tools than the loop's
    default executor has threads must all run, and the runtime's own file reads and
    appends (``asyncio.to_thread``) must still get through meanwhile."""
    many = ThreadPoolExecutor()._max_workers + 4  # more than asyncio.to_thread's threads
    running: list[int] = []
    release = threading.Event()

    @tool
    def blocks(n: int) -> int:
        """Blocks until released."""
        running.append(n)
        release.wait(60)
        return n

    async def scenario() -> list[ToolResultData]:
        calls = [asyncio.ensure_future(blocks.execute({"n": i}, context())) for i in range(many)]
        try:
            deadline = asyncio.get_running_loop().time() + 10
            while len(running) < many:  # every call runs; none waits for a free thread
                assert asyncio.get_running_loop().time() < deadline, f"{len(running)} running"
                await asyncio.sleep(0.01)
            # The loop's own blocking work (the repository's reads and appends) gets through.
            assert await asyncio.wait_for(asyncio.to_thread(lambda: "read"), 10) == "read"
        finally:
            release.set()
        return await asyncio.gather(*calls)

    results = asyncio.run(scenario())
    assert [r.output for r in results] == list(range(many))


def test_numpy_style_docstrings_describe_the_parameters() -> None:
    @tool
    def scale(values: list[float], factor: float = 2.0, *, unit: str = "m") -> list[float]:
        """Scale a list of values.

        Multiplies each one.

        Parameters
        ----------
        values : list of float
            The values to scale,
            in order.
        factor : float, optional
            What to multiply by.
        unit
            Their unit.

        Returns
        -------
        list of float
            The scaled values.
        """
        return [v * factor for v in values]

    assert scale.description == "Scale a list of values.\n\nMultiplies each one."
    properties = scale.input_schema["properties"]
    assert properties["values"]["description"] == "The values to scale, in order."
    assert properties["factor"]["description"] == "What to multiply by."
    assert properties["unit"]["description"] == "Their unit."


def test_any_parameter_name_is_an_argument_name() -> None:
    """Names pydantic keeps for itself (``model_config``, ``json``, a leading underscore)
    still name the argument the model sends; none vanishes from the schema."""

    @tool
    def odd(model_config: str, json: int, _private: bool = False) -> list[Any]:
        """Odd names.

        Args:
            model_config: a configuration name
        """
        return [model_config, json, _private]

    schema = odd.input_schema
    assert set(schema["properties"]) == {"model_config", "json", "_private"}
    assert schema["required"] == ["model_config", "json"]
    assert schema["properties"]["model_config"]["description"] == "a configuration name"
    assert run(odd, {"model_config": "c", "json": 1, "_private": True}).output == ["c", 1, True]
    bad = run(odd, {"model_config": 1, "json": 1})
    assert bad.is_error and "model_config: Input should be a valid string" in bad.output


def test_callable_objects_partials_and_optional_contexts_are_tools() -> None:
    class Adder:
        async def __call__(self, a: int, b: int, ctx: ToolContext | None = None) -> int:
            """Add."""
            assert ctx is not None and ctx.tool_call_id == "call_1"
            return a + b

    def power(base: int, exp: int) -> int:
        return int(base**exp)

    add = tool(Adder(), name="add")
    assert set(add.input_schema["properties"]) == {"a", "b"} and add.description == "Add."
    assert run(add, {"a": 2, "b": 3}).output == 5
    square = tool(functools.partial(power, exp=2), name="square")
    assert square.input_schema["required"] == ["base"]
    assert run(square, {"base": 7}).output == 49


def test_a_parameter_pydantic_cannot_describe_is_a_declaration_error() -> None:
    def takes_a_function(f: Callable[[int], int]) -> int:
        return f(1)

    with pytest.raises(ToolDeclarationError, match=r"tool 'takes_a_function': parameter 'f'"):
        tool(takes_a_function)
