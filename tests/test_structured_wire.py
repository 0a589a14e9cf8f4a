"""Structured output through the real ``turns`` command, on each provider's wire.

``output_schema`` in ``[agents.NAME]``; each provider is a real HTTP server on
127.0.0.1 speaking its own streaming format (``tests/model``): OpenAI Chat
Completions and Responses are asked natively (``response_format`` /
``text.format``), Anthropic through a final-result tool. The first answer is
invalid and goes back with its errors; the second is valid. ``turns show``
(text and ``--json``) shows the answer, and ``turns validate`` accepts the file.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from playwright.async_api import BrowserContext, expect
from temporalio.testing import WorkflowEnvironment

from tests.cli_process import cli_env, run_cli
from tests.model.conftest import FakeProvider, Reply, sse
from tests.model.wire import (
    _CHAT_USAGE,
    _MESSAGE_START,
    _MSG,
    ResponsesWire,
    _a,
    _a_end,
    _block_delta,
    _chunk,
    _completed,
    _ev,
)
from tests.test_web_browser import WAIT, browser, open_page  # noqa: F401 - a fixture
from tests.webui import running_ui
from turncore.output import FEEDBACK_LEAD, OUTPUT_INVALID_CODE

SCHEMA = {
    "title": "Weather",
    "type": "object",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
    "required": ["city", "celsius"],
    "additionalProperties": False,
}
INVALID = {"city": "Paris"}
VALID = {"city": "Paris", "celsius": 21.5}


def chat_answer(value: object) -> list[bytes]:
    text = orjson.dumps(value).decode()
    return [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": text[:5]}),
        _chunk({"content": text[5:]}),
        _chunk({}, "stop"),
        _CHAT_USAGE,
        sse("[DONE]"),
    ]


def responses_answer(value: object) -> list[bytes]:
    text = orjson.dumps(value).decode()
    head = ResponsesWire().text_head()[:-1]  # created … content part added
    item = {
        **_MSG,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    delta = _ev(
        "response.output_text.delta", item_id="msg_1", output_index=0, content_index=0, delta=text
    )
    done = ResponsesWire()._message_done(text)
    return [*head, delta, *done, _completed([item])]


def anthropic_answer(value: object) -> list[bytes]:
    """The model calls the final-result tool; its input arrives in two fragments."""
    text = orjson.dumps(value).decode()
    return [
        _MESSAGE_START,
        _a("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        _block_delta(0, type="text_delta", text="Here it is."),
        _a("content_block_stop", index=0),
        _a(
            "content_block_start",
            index=1,
            content_block={
                "type": "tool_use",
                "id": "toolu_1",
                "name": "final_result",
                "input": {},
            },
        ),
        _block_delta(1, type="input_json_delta", partial_json=text[:6]),
        _block_delta(1, type="input_json_delta", partial_json=text[6:]),
        _a("content_block_stop", index=1),
        *_a_end("tool_use"),
    ]


WIRES = {
    "openai-chat": chat_answer,
    "openai-responses": responses_answer,
    "anthropic": anthropic_answer,
}


@pytest.fixture
async def provider() -> AsyncIterator[FakeProvider]:
    server = FakeProvider()
    await server.start()
    yield server
    await server.stop()


def _home(tmp_path: Path, kind: str, server: FakeProvider, retries: int = 1) -> Path:
    home = tmp_path / ".turns"
    home.mkdir()
    (home / "turns.toml").write_text(
        f'[providers.acme]\nkind = "{kind}"\nbase_url = "{server.base_url}"\n'
        'api_key_env = "ACME_API_KEY"\nmax_retries = 0\n\n'
        '[agents.weather]\nsystem_prompt = "You report the weather."\nmodel = "acme/m1"\n'
        f"tools = []\noutput_retries = {retries}\n"
        "[agents.weather.output_schema]\n"
        'title = "Weather"\ntype = "object"\nrequired = ["city", "celsius"]\n'
        "additionalProperties = false\n"
        '[agents.weather.output_schema.properties]\ncity = { type = "string" }\n'
        'celsius = { type = "number" }\n'
    )
    return home


async def _turns(home: Path, env_: WorkflowEnvironment, *args: str) -> tuple[int, str, str]:
    return await run_cli(cli_env(home, env_, "structured", ACME_API_KEY="sk-test"), *args)


def _asked_for_the_shape(kind: str, body: dict[str, object]) -> None:
    if kind == "openai-chat":
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "Weather", "schema": SCHEMA, "strict": True},
        }
    elif kind == "openai-responses":
        assert body["text"] == {
            "format": {"type": "json_schema", "name": "Weather", "schema": SCHEMA, "strict": True}
        }
    else:
        tools = body["tools"]
        assert isinstance(tools, list)
        (final,) = [t for t in tools if t["name"] == "final_result"]
        assert final["input_schema"] == SCHEMA
        assert "tool_choice" not in body  # the model may still use other tools


def _feedback_sent(kind: str, body: dict[str, object]) -> str:
    """The last user message of the retry's request, as text."""
    if kind == "openai-responses":
        items = body["input"]
        assert isinstance(items, list)
        last = items[-1]
        return " ".join(p["text"] for p in last["content"])
    messages = body["messages"]
    assert isinstance(messages, list)
    last = messages[-1]
    assert last["role"] == "user"
    content = last["content"]
    return content if isinstance(content, str) else " ".join(p["text"] for p in content)


@pytest.mark.parametrize("kind", sorted(WIRES))
async def test_an_invalid_answer_goes_back_once_then_show_has_the_valid_one(
    temporal_env: WorkflowEnvironment, provider: FakeProvider, tmp_path: Path, kind: str
) -> None:
    home = _home(tmp_path, kind, provider)
    provider.queue(Reply(chunks=list(WIRES[kind](INVALID))), Reply(chunks=list(WIRES[kind](VALID))))

    code, out, err = await _turns(
        home, temporal_env, "run", "--agent", "weather", "Paris?", "--json"
    )
    assert code == 0, err
    ran = json.loads(out)
    assert ran["status"] == "completed"
    assert ran["structuredOutput"]["value"] == VALID
    first, retry = (r.json() for r in provider.received)
    _asked_for_the_shape(kind, first)
    _asked_for_the_shape(kind, retry)
    feedback = _feedback_sent(kind, retry)
    assert feedback.startswith(FEEDBACK_LEAD.strip())
    assert "'celsius' is a required property" in feedback

    code, out, err = await _turns(home, temporal_env, "show", "last", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["output"] == {
        "schema": "Weather",
        "retries": 1,
        "answers": 2,
        "valid": True,
        "value": VALID,
        "errors": [],
    }
    code, out, err = await _turns(home, temporal_env, "show", "last")
    assert code == 0, err
    assert "structured output (Weather, valid, 2 answers):" in out
    assert '"celsius": 21.5' in out

    # Wire-exact: only spec events; the schema rides the requested composition.
    (path,) = (home / "storage").rglob("*.jsonl")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    composition = lines[0]["agent"]["requested"]["overrides"]["composition"]
    assert composition == {"outputSchema": SCHEMA, "outputRetries": 1}
    assert lines[-1]["type"] == "turn_completed"
    assert json.loads(lines[-1]["output"]["content"][-1]["text"]) == VALID
    code, _, err = await _turns(home, temporal_env, "validate", str(path))
    assert code == 0, err


async def test_an_answer_invalid_twice_fails_with_output_invalid(
    temporal_env: WorkflowEnvironment, provider: FakeProvider, tmp_path: Path
) -> None:
    home = _home(tmp_path, "openai-chat", provider)
    provider.queue(
        Reply(chunks=chat_answer(INVALID)), Reply(chunks=chat_answer({"celsius": "warm"}))
    )
    code, out, err = await _turns(
        home, temporal_env, "run", "--agent", "weather", "Paris?", "--json"
    )
    doc = json.loads(out)
    assert doc["status"] == "failed", err
    assert doc["code"] == OUTPUT_INVALID_CODE
    assert len(provider.received) == 2
    code, out, err = await _turns(home, temporal_env, "show", "last", "--json")
    output = json.loads(out)["output"]
    assert output["valid"] is False and output["answers"] == 2
    assert output["errors"] == [
        "at celsius: 'warm' is not of type 'number'",
        "at the top level: 'city' is a required property",
    ]
    code, out, err = await _turns(home, temporal_env, "show", "last")
    assert "structured output (Weather, invalid, 2 answers):" in out
    assert "  - at celsius: 'warm' is not of type 'number'" in out


async def test_the_web_ui_api_and_turn_page_show_the_structured_answer(
    temporal_env: WorkflowEnvironment,
    provider: FakeProvider,
    tmp_path: Path,
    browser: BrowserContext,  # noqa: F811 - the fixture imported above
) -> None:
    toml = (_home(tmp_path, "openai-chat", provider) / "turns.toml").read_text()
    provider.queue(Reply(chunks=chat_answer(INVALID)), Reply(chunks=chat_answer(VALID)))
    async with running_ui(
        temporal_env, tmp_path, toml=toml, environ={"ACME_API_KEY": "sk-test"}
    ) as ui:
        turn_id = await ui.create("Paris?", agent="weather")
        view = await ui.until(turn_id, lambda v: v["status"] == "completed")
        assert view["output"] == {
            "schema": "Weather",
            "retries": 1,
            "answers": 2,
            "valid": True,
            "value": VALID,
            "errors": [],
        }
        page = await open_page(browser, f"{ui.url}/turns/{turn_id}")
        shown = page.locator("#structured-output")
        await expect(shown).to_contain_text("Structured output (Weather)", timeout=WAIT)
        await expect(shown).to_contain_text("valid after 2 answers")
        await expect(shown.locator("pre")).to_contain_text('"celsius": 21.5')
        assert page.problems == []  # type: ignore[attr-defined]


async def test_turns_config_shows_the_agents_output(
    temporal_env: WorkflowEnvironment, provider: FakeProvider, tmp_path: Path
) -> None:
    home = _home(tmp_path, "openai-chat", provider, retries=2)
    code, out, err = await _turns(home, temporal_env, "config", "--json")
    assert code == 0, err
    agent = json.loads(out)["agents"]["weather"]
    assert (agent["outputSchema"], agent["outputRetries"]) == (SCHEMA, 2)
    code, out, err = await _turns(home, temporal_env, "config")
    assert "output: Weather (retries 2)" in out
    (home / "turns.toml").write_text(
        (home / "turns.toml").read_text().replace('type = "object"', 'type = "list"', 1)
    )
    code, out, err = await _turns(home, temporal_env, "config")
    assert code == 1
    assert "agents.weather.output_schema is not a valid JSON Schema at type" in err
