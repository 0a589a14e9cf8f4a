"""Structured output (``turncore.output``): ``Agent(output_type=…)`` through ``Turns``
on the real dev server, with scripted models deciding what the answer is.

The answer is the final assistant text, checked against the agent's JSON Schema
(carried in the turn file's requested composition); an invalid answer goes back
to the model once with its errors, and a second invalid one fails the turn with
``output-invalid``. The file holds only spec events.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.testing import WorkflowEnvironment
from typing_extensions import TypedDict

from turnclient import Agent, ConfigError, Turns
from turncore.elision import DEFAULT_VALUE_BUDGET
from turncore.model import ModelCallRequest
from turncore.model.scripted import call_index
from turncore.output import FEEDBACK_LEAD, OUTPUT_INVALID_CODE
from turncore.reducer import TurnReducer
from turncore.storage.repository import FileTurnRepository


class Weather(BaseModel):
    city: str
    celsius: float


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Person(TypedDict):
    name: str
    age: int


def runtime(env: WorkflowEnvironment, tmp_path: Path, **kwargs: Any) -> Turns:
    return Turns(
        tmp_path, client=env.client, env={"TURNS_TASK_QUEUE": f"tq-{uuid.uuid4()}"}, **kwargs
    )


def answers(*outputs: Any, seen: list[ModelCallRequest] | None = None) -> Any:
    """A scripted model answering call *i* with ``outputs[i]`` as its structured answer."""

    def model(request: ModelCallRequest) -> dict[str, Any]:
        if seen is not None:
            seen.append(request)
        return {"output": outputs[call_index(request.messages)]}

    return model


async def _invariant(env: WorkflowEnvironment, turns: Turns, turn_id: str) -> None:
    queried = await env.client.get_workflow_handle(turn_id).query("state")
    queried.pop("rejectedInputs", None)
    assert (await turns.state(turn_id)).to_wire() == queried


async def test_a_pydantic_output_type_retries_an_invalid_answer_once_with_its_errors(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    seen: list[ModelCallRequest] = []
    agent = Agent(
        name="weather", system_prompt="You report weather.", model="scripted/w", output_type=Weather
    )
    model = answers({"city": "Paris"}, {"city": "Paris", "celsius": 21.5}, seen=seen)
    async with runtime(temporal_env, tmp_path, agents=[agent], models={"w": model}) as turns:
        result = await turns.run("Weather in Paris?", agent="weather")
        assert result.status == "completed"
        assert result.output == Weather(city="Paris", celsius=21.5)
        assert isinstance(result.output, Weather)
        await _invariant(temporal_env, turns, result.turn_id)

        # The model was asked for the shape, and saw its invalid answer with the errors.
        assert seen[0].output is not None
        assert seen[0].output.name == "Weather"
        assert seen[0].output.schema == Weather.model_json_schema()
        first, retry = seen[0].messages, seen[1].messages
        assert len(retry) == len(first) + 2
        assert retry[-2].role == "assistant"
        feedback = retry[-1]
        assert feedback.role == "user" and isinstance(feedback.content, str)
        assert feedback.content.startswith(FEEDBACK_LEAD)
        assert "'celsius' is a required property" in feedback.content

        # The file: ordinary spec events, the schema in the requested composition.
        events = await turns.events(result.turn_id)
        created = events[0]
        assert created.type == "turn_created"
        composition = created.agent.requested.overrides.composition  # type: ignore[union-attr]
        assert composition == {"outputSchema": Weather.model_json_schema(), "outputRetries": 1}
        requests = [e.request.messages for e in events if e.type == "model_call_requested"]
        assert requests == [["input"], ["assistant:0"]]
        assert events[-1].type == "turn_completed"
        repo = FileTurnRepository(tmp_path)
        assert TurnReducer.of(repo.read(result.turn_id)).state.terminal is not None


async def test_a_dataclass_and_a_typed_dict_come_back_typed(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    agents = [
        Agent(name="point", system_prompt="p", model="scripted/p", output_type=Point),
        Agent(name="person", system_prompt="q", model="scripted/q", output_type=Person),
    ]
    models = {"p": answers({"x": 1, "y": 2}), "q": answers({"name": "Ada", "age": 36})}
    async with runtime(temporal_env, tmp_path, agents=agents, models=models) as turns:
        point = await turns.run("a point", agent="point")
        assert point.output == Point(1, 2) and isinstance(point.output, Point)
        person = await turns.run("a person", agent="person")
        assert person.output == {"name": "Ada", "age": 36}
        assert person.text == '{"name":"Ada","age":36}'


async def test_an_answer_still_invalid_after_its_retry_fails_the_turn_with_output_invalid(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    agents = [
        Agent(name="w", system_prompt="s", model="scripted/w", output_type=Weather),
        Agent(
            name="once",
            system_prompt="s",
            model="scripted/w",
            output_type=Weather,
            output_retries=0,
        ),
    ]
    model = answers({"city": "Paris"}, {"celsius": "warm"})
    async with runtime(temporal_env, tmp_path, agents=agents, models={"w": model}) as turns:
        result = await turns.run("Weather?", agent="w")
        assert result.status == "failed"
        assert result.outcome.code == OUTPUT_INVALID_CODE  # type: ignore[union-attr]
        assert "did not match the agent's output schema" in result.outcome.error  # type: ignore[union-attr]
        assert "'city' is a required property" in result.outcome.error  # type: ignore[union-attr]
        assert result.output is None
        state = await turns.state(result.turn_id)
        assert len(state.model_calls) == 2
        await _invariant(temporal_env, turns, result.turn_id)

        # output_retries = 0: the first invalid answer ends the turn.
        once = await turns.run("Weather?", agent="once")
        assert once.outcome.code == OUTPUT_INVALID_CODE  # type: ignore[union-attr]
        assert len((await turns.state(once.turn_id)).model_calls) == 1


async def test_text_that_is_not_json_is_sent_back_too(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    def model(request: ModelCallRequest) -> dict[str, Any]:
        if call_index(request.messages) == 0:
            return {"text": "It is sunny in Paris."}
        assert "is not a JSON document" in str(request.messages[-1].content)
        return {"output": {"city": "Paris", "celsius": 20}}

    agent = Agent(name="w", system_prompt="s", model="scripted/w", output_type=Weather)
    async with runtime(temporal_env, tmp_path, agents=[agent], models={"w": model}) as turns:
        result = await turns.run("Weather?", agent="w")
        assert result.output == Weather(city="Paris", celsius=20)


class Notes(BaseModel):
    title: str
    body: str


async def test_an_answer_larger_than_the_workflow_holds_is_judged_on_the_file(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # Over DEFAULT_VALUE_BUDGET the workflow holds the answer's text elided (DESIGN
    # §5): an answer judged there would always be invalid. The model activity
    # judges it on the file, so a large valid answer completes, and a large invalid
    # one is sent back whole with its errors.
    body = "x" * (DEFAULT_VALUE_BUDGET + 1000)
    seen: list[ModelCallRequest] = []
    model = answers({"title": "big"}, {"title": "big", "body": body}, seen=seen)
    agent = Agent(name="notes", system_prompt="s", model="scripted/n", output_type=Notes)
    async with runtime(temporal_env, tmp_path, agents=[agent], models={"n": model}) as turns:
        result = await turns.run("Write long notes.", agent="notes")
        assert result.status == "completed", result.outcome
        assert result.output == Notes(title="big", body=body)
        assert len(seen) == 2
        assert "'body' is a required property" in str(seen[1].messages[-1].content)
        queried = await temporal_env.client.get_workflow_handle(result.turn_id).query("state")
        assert "elided by turncore" in str(queried["modelCalls"][-1]["response"])

        first = {"title": "big", "body": body, "extra": 1}  # valid: extra keys are allowed
        large = answers(first)
        async with runtime(
            temporal_env, tmp_path / "b", agents=[agent], models={"n": large}
        ) as again:
            once = await again.run("Write long notes.", agent="notes")
            assert once.output == Notes(title="big", body=body)
            assert len((await again.state(once.turn_id)).model_calls) == 1


class NotDescribable:
    """A plain class: pydantic cannot make a JSON Schema of it."""


def test_an_agent_with_an_output_schema_is_still_hashable() -> None:
    agent = Agent(name="w", system_prompt="s", output_type=Weather)
    assert hash(agent) == hash(Agent(name="w", system_prompt="s", output_type=Weather))
    assert agent.output_schema == Weather.model_json_schema()


def test_an_output_type_without_a_json_schema_is_refused_at_definition() -> None:
    with pytest.raises(
        ConfigError, match=r"agents.bad.output_type: .*cannot produce a JSON Schema"
    ):
        Agent(name="bad", system_prompt="s", output_type=NotDescribable)
    with pytest.raises(ConfigError, match=r"agents.bad.output_schema must describe a JSON object"):
        Agent(name="bad", system_prompt="s", output_type=int)
    with pytest.raises(ConfigError, match=r"agents.bad.output_retries must be a whole number"):
        Agent(name="bad", system_prompt="s", output_type=Weather, output_retries=-1)
    with pytest.raises(ConfigError, match=r"agents.bad.output_schema is not a valid JSON Schema"):
        Agent(name="bad", system_prompt="s", output_schema={"type": "object", "required": 3})


def test_output_schema_in_turns_toml_is_checked_at_load(tmp_path: Path) -> None:
    from turnclient.runtime.config import load_config

    def load(table: str) -> Any:
        (tmp_path / "turns.toml").write_text(
            f'[agents.rep]\nsystem_prompt = "s"\nmodel = "scripted/x"\n{table}'
        )
        return load_config(tmp_path, {})

    good = load(
        'output_retries = 2\n[agents.rep.output_schema]\ntype = "object"\n'
        'required = ["ok"]\nproperties = { ok = { type = "boolean" } }\n'
    )
    spec = good.agents["rep"].output
    assert spec is not None and spec.retries == 2
    assert spec.schema["properties"] == {"ok": {"type": "boolean"}}
    with pytest.raises(ConfigError, match="agents.rep.output_schema must be a table"):
        load('output_schema = "weather"\n')
    with pytest.raises(ConfigError, match="agents.rep.output_schema is not a valid JSON Schema"):
        load('[agents.rep.output_schema]\ntype = "thing"\n')
    with pytest.raises(ConfigError, match="agents.rep.output_schema must describe a JSON object"):
        load('[agents.rep.output_schema]\ntype = "array"\n')
    with pytest.raises(ConfigError, match="agents.rep.output_retries"):
        load('output_retries = -1\n[agents.rep.output_schema]\ntype = "object"\n')


async def test_a_sub_agent_answers_its_parent_in_its_shape(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    def lead(request: ModelCallRequest) -> dict[str, Any]:
        if call_index(request.messages) == 0:
            spawn = {"agent": "weather", "prompt": "Weather in Paris?"}
            return {"toolCalls": [{"toolName": "spawn_agent", "input": spawn}]}
        result = request.messages[-1].content[-1].output.value  # type: ignore[union-attr]
        return {"text": f"the child said {result['text']}"}

    agents = [
        Agent(name="lead", system_prompt="Delegate.", tools=("spawn_agent",), model="scripted/l"),
        Agent(name="weather", system_prompt="s", model="scripted/w", output_type=Weather),
    ]
    models = {"l": lead, "w": answers({"city": "Paris"}, {"city": "Paris", "celsius": 3})}
    async with runtime(temporal_env, tmp_path, agents=agents, models=models) as turns:
        result = await turns.run("Ask about Paris", agent="lead")
        assert result.text == 'the child said {"city":"Paris","celsius":3}'
        assert result.output is None  # the lead agent declares no output
        events = await turns.events(result.turn_id)
        (link,) = [e for e in events if e.type == "tool_progress"]
        child_id = link.progress["childTurnId"]  # type: ignore[union-attr, index, call-overload]
        child = await turns.events(child_id)
        composition = child[0].agent.requested.overrides.composition  # type: ignore[union-attr]
        assert composition["outputSchema"] == Weather.model_json_schema()  # type: ignore[index, call-overload]
        assert [e.type for e in child if e.type.startswith("model_call_req")] == [
            "model_call_requested",
            "model_call_requested",
        ]
