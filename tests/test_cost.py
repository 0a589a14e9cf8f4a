"""Estimated cost: per call, per turn, per session; derived at display, never stored."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from genai_prices import Usage, calc_price
from temporalio.testing import WorkflowEnvironment

from tests.histories import TURN_ID, to_line, tool_turn
from tests.test_cli_turns import home, turns  # noqa: F401 (home is a fixture)
from tests.test_postgres_cli import POSTGRES, as_json, base_env, make_home, run
from turnclient.cli import main
from turnclient.lib.cost import Pricer
from turnclient.runtime.config import ConfigError, load_config
from turncore.events import ModelDescriptor, TurnUsage
from turncore.ids import turn_path
from turncore.model import ProviderConfig
from turncore.reducer import reduce_turn

SECOND = "2025-11-11T04-36-30Z-0001234-000"
OPENAI = '[providers.openai]\nkind = "openai-chat"\napi_key_env = "OPENAI_API_KEY"\n'
LOCAL = '[providers.local]\nkind = "openai-chat"\nbase_url = "http://127.0.0.1:11434/v1"\n'


def write_session(work: Path, toml: str) -> list[Path]:
    (work).mkdir(parents=True, exist_ok=True)
    (work / "turns.toml").write_text(toml)
    paths = []
    for turn_id in (TURN_ID, SECOND):
        path = turn_path(work, turn_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(to_line(e) for e in tool_turn(turn_id, session_id="s-9").events))
        paths.append(path)
    return paths


def show_json(
    work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> dict[str, object]:
    monkeypatch.setenv("TURNS_HOME", str(work))
    assert main(["show", TURN_ID, "--json"]) == 0
    doc: dict[str, object] = json.loads(capsys.readouterr().out)
    return doc


def test_a_public_model_is_priced_from_the_maintained_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = write_session(tmp_path, OPENAI)
    before = [p.read_bytes() for p in paths]
    cost = show_json(tmp_path, monkeypatch, capsys)["cost"]
    per_call = calc_price(Usage(input_tokens=10, output_tokens=5), "gpt-4.1", provider_id="openai")
    assert per_call.total_price > 0
    expected = float(2 * per_call.total_price)
    assert cost == {
        "currency": "USD",
        "turn": {"currency": "USD", "amount": pytest.approx(expected), "source": "genai-prices"},
        "calls": [
            {
                "modelCallIndex": i,
                "cost": {
                    "currency": "USD",
                    "amount": pytest.approx(float(per_call.total_price)),
                    "source": "genai-prices",
                },
            }
            for i in (0, 1)
        ],
        "session": {
            "sessionId": "s-9",
            "turns": 2,
            "cost": {
                "currency": "USD",
                "amount": pytest.approx(2 * expected),
                "source": "genai-prices",
            },
        },
    }
    # Derived, never stored: the files are byte for byte what they were.
    assert [p.read_bytes() for p in paths] == before
    assert b"cost" not in before[0].lower()

    monkeypatch.setenv("TURNS_HOME", str(tmp_path))
    assert main(["show", TURN_ID]) == 0
    text = capsys.readouterr().out
    assert "cost     ~$" in text and "(genai-prices)" in text and "session s-9" in text


def test_turns_toml_prices_a_provider_or_one_of_its_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = (
        OPENAI + '[prices.openai.models."gpt-4.1"]\ninput_per_mtok = 1000\noutput_per_mtok = 2000\n'
    )
    write_session(tmp_path, toml)
    cost = show_json(tmp_path, monkeypatch, capsys)["cost"]
    assert isinstance(cost, dict)
    # 10 in, 5 out per call: (10 × 1000 + 5 × 2000) / 1e6 = 0.02; two calls.
    assert cost["turn"] == {"currency": "USD", "amount": 0.04, "source": "turns.toml"}
    assert cost["session"]["cost"]["amount"] == 0.08


def test_a_private_model_without_a_price_is_unknown_never_zero() -> None:
    providers = {
        "local": ProviderConfig(kind="openai-chat", base_url="http://127.0.0.1:11434/v1"),
        "openai": ProviderConfig(kind="openai-chat"),
    }
    pricer = Pricer(providers)
    usage = TurnUsage(input_tokens=1000, output_tokens=1000)
    # Served elsewhere under an OpenAI model's name: not priced as OpenAI.
    assert pricer.call_cost(ModelDescriptor(provider="local", model="gpt-4.1"), usage) is None
    assert pricer.call_cost(ModelDescriptor(provider="scripted", model="demo"), usage) is None
    assert (
        pricer.call_cost(ModelDescriptor(provider="openai", model="no-such-model"), usage) is None
    )
    state = reduce_turn(tool_turn(model=ModelDescriptor(provider="local", model="llama3")).events)
    assert pricer.turn_costs(state)[0] is None
    # A cached-input price applies to the cached share of the input.
    cfg_pricer = Pricer(
        providers,
        load_config_prices(
            "[prices.local]\ninput_per_mtok = 2\noutput_per_mtok = 4\ncached_input_per_mtok = 1\n"
        ),
    )
    e = cfg_pricer.call_cost(
        ModelDescriptor(provider="local", model="llama3"),
        TurnUsage(input_tokens=1_000_000, cached_input_tokens=500_000, output_tokens=0),
    )
    assert e is not None and e.amount == Decimal("1.5") and e.source == "turns.toml"


def load_config_prices(toml: str) -> dict[str, object]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        Path(d, "turns.toml").write_text(LOCAL + toml)
        return load_config(d, {}).prices  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[prices.nobody]\ninput_per_mtok = 1\noutput_per_mtok = 1\n", "no provider 'nobody'"),
        ("[prices.local]\ninput_per_mtok = -1\noutput_per_mtok = 1\n", "finite number >= 0"),
        ("[prices.local]\ninput_per_mtok = 1\n", "output_per_mtok is required"),
        ('[prices.local]\ninput_per_mtok = "1"\noutput_per_mtok = 1\n', "must be a number"),
        ("[prices.local]\ninput_per_mtok = 1\noutput_per_mtok = 1\nper_call = 3\n", "per_call"),
    ],
)
def test_bad_price_tables_name_the_key(tmp_path: Path, table: str, message: str) -> None:
    (tmp_path / "turns.toml").write_text(LOCAL + table)
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path, {})


@pytest.mark.temporal  # starts its own dev server
def test_json_outcome_of_a_run_carries_the_cost(home: Path) -> None:  # noqa: F811
    home.mkdir(parents=True)
    (home / "turns.toml").write_text("[prices.scripted]\ninput_per_mtok = 1\noutput_per_mtok = 2\n")
    r = turns(home, "run", "What time is it in Chicago?", "--session", "s-7", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    usage = doc["usage"]
    expected = (usage["inputTokens"] * 1 + usage["outputTokens"] * 2) / 1_000_000
    assert doc["cost"]["turn"] == {
        "currency": "USD",
        "amount": pytest.approx(expected),
        "source": "turns.toml",
    }
    assert len(doc["cost"]["calls"]) == 2
    assert doc["cost"]["session"] == {
        "sessionId": "s-7",
        "turns": 1,
        "cost": doc["cost"]["turn"],
    }
    turn_file = next(home.glob(f"storage/**/{doc['turnId']}.jsonl"))
    assert b'"cost"' not in turn_file.read_bytes()
    # A second turn of the session: the session's estimate is the sum of both.
    r = turns(home, "run", "What time is it in Chicago?", "--session", "s-7", "--json")
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)["cost"]
    assert again["session"]["turns"] == 2
    assert again["session"]["cost"]["amount"] == pytest.approx(
        doc["cost"]["turn"]["amount"] + again["turn"]["amount"]
    )


def test_cost_on_postgres_storage_reads_the_turns_from_the_database(
    temporal_env: WorkflowEnvironment, postgres_url: str, tmp_path: Path
) -> None:
    """The outcome's cost and the session's total come from the configured storage,
    not from files the work dir does not have."""
    env = {**base_env(temporal_env), "TURNS_DATABASE_URL": postgres_url}
    prices = "[prices.scripted]\ninput_per_mtok = 1\noutput_per_mtok = 2\n"
    work = make_home(tmp_path, "pg", POSTGRES + prices)
    assert run(work, env, "db", "migrate").returncode == 0
    ran = []
    for _ in range(2):
        r = run(work, env, "run", "What time is it in Chicago?", "--session", "s-pg", "--json")
        assert r.returncode == 0, r.stderr
        ran.append(as_json(r))
    first, second = ran
    for doc in ran:
        usage = doc["usage"]
        expected = (usage["inputTokens"] * 1 + usage["outputTokens"] * 2) / 1_000_000
        assert doc["cost"]["turn"]["amount"] == pytest.approx(expected), doc["cost"]
    assert first["cost"]["session"]["turns"] == 1
    assert second["cost"]["session"]["turns"] == 2
    total = first["cost"]["turn"]["amount"] + second["cost"]["turn"]["amount"]
    assert second["cost"]["session"]["cost"]["amount"] == pytest.approx(total)

    shown = as_json(run(work, env, "show", first["turnId"], "--json"))["cost"]
    assert shown == second["cost"] | {
        "turn": first["cost"]["turn"],
        "calls": first["cost"]["calls"],
    }
    text = run(work, env, "show", first["turnId"]).stdout
    assert "session s-pg: ~$" in text and "over 2 turn(s)" in text, text
