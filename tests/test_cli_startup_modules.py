"""Read-only commands start without the Temporal SDK (or any other heavy stack).

Each command runs in a fresh interpreter the way the ``turns`` script runs it
(``entry``: the command, then ``process.leave``, which ends with
``os._exit``). ``os._exit`` is wrapped to print the top-level packages then
loaded, so what the test sees is everything the command imported, up to its
last flush.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from turncore.ids import turn_path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
OPEN = GOLDEN / "2025-11-11T04-36-29Z-0001234-000.jsonl"  # awaits an input
SETTLED = GOLDEN / "2025-11-11T05-00-00Z-0000001-000.jsonl"
HEAVY = (
    "temporalio",
    "httpx",
    "opentelemetry",
    "psycopg",
    "psycopg_pool",
    "starlette",
    "uvicorn",
    "grpc",
)
"""Packages no read-only command may load: the SDK, HTTP client, OTel SDK, database, web stack."""
LIGHT_READ = ("asyncio", "ssl", "genai_prices")
"""What a read of a turn needs no price table for (and ``log``) leaves unloaded too: the event
loop, TLS and the price table (loaded when a cost is priced by it: OpenAI or Anthropic
models). Each costs a start milliseconds (docs/operations.md, "Start-up")."""

PROBE = """
import json, os, sys
real_exit = os._exit
def report(code):
    loaded = sorted(sys.modules)
    sys.stderr.write("\\nLOADED " + json.dumps(loaded) + "\\n")
    sys.stderr.flush()
    real_exit(code)
os._exit = report
sys.argv = ["turns", *sys.argv[1:]]
from turnclient.cli import entry
entry()
"""


def loaded_by(home: Path, *args: str, **extra: str) -> tuple[int, set[str]]:
    env = {"PATH": "/usr/bin:/bin", "TURNS_HOME": str(home), "NO_COLOR": "1", "HOME": str(home)}
    env.update(extra)
    r = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = next(x for x in r.stderr.splitlines() if x.startswith("LOADED "))
    return r.returncode, {m.split(".")[0] for m in json.loads(line.removeprefix("LOADED "))}


def modules_loaded_by(home: Path, *args: str) -> tuple[int, set[str], str]:
    """(exit code, every module loaded, stdout) of a command."""
    env = {"PATH": "/usr/bin:/bin", "TURNS_HOME": str(home), "NO_COLOR": "1", "HOME": str(home)}
    r = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = next(x for x in r.stderr.splitlines() if x.startswith("LOADED "))
    return r.returncode, set(json.loads(line.removeprefix("LOADED "))), r.stdout


def scripted_copy(home: Path) -> Path:
    """SETTLED, answered by a scripted model: a turn no price table knows."""
    text = SETTLED.read_text(encoding="utf-8")
    for provider in ("openai", "anthropic"):
        text = text.replace(f'"provider":"{provider}"', '"provider":"scripted"')
    path = home / "scripted" / SETTLED.name
    path.parent.mkdir()
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    for source in (OPEN, SETTLED):
        target = turn_path(tmp_path, source.stem)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [
        *[
            (c, str(f))
            for c in ("validate", "state", "show", "log", "inspect")
            for f in (OPEN, SETTLED)
        ],
        *[
            (c, f.stem)
            for c in ("validate", "state", "show", "log", "inspect")
            for f in (OPEN, SETTLED)
        ],
        ("--version",),
        ("--help",),
        ("completion", "bash"),
    ],
    ids=lambda a: " ".join(Path(x).stem[-13:] if x.endswith(".jsonl") else x[-13:] for x in a),
)
def test_a_read_only_command_loads_no_heavy_stack(home: Path, args: tuple[str, ...]) -> None:
    code, loaded = loaded_by(home, *args)
    assert code == 0, args
    assert not loaded & set(HEAVY), f"{args} loaded {sorted(loaded & set(HEAVY))}"


@pytest.mark.parametrize("command", ["validate", "state", "show", "log", "inspect"])
def test_reading_a_turn_without_a_priced_model_loads_no_event_loop(
    home: Path, command: str
) -> None:
    """No price to look up: no genai-prices, and nothing on the path loads asyncio
    or TLS (the webhook sender and the model adapters import them where they
    are used)."""
    code, loaded = loaded_by(home, command, str(scripted_copy(home)))
    assert code == 0
    assert not loaded & set(LIGHT_READ), f"{command} loaded {sorted(loaded & set(LIGHT_READ))}"


@pytest.mark.parametrize("command", ["validate", "state", "log"])
@pytest.mark.parametrize("source", [OPEN, SETTLED], ids=["open", "settled"])
def test_reading_any_turn_without_its_cost_loads_no_event_loop(
    home: Path, command: str, source: Path
) -> None:
    code, loaded = loaded_by(home, command, source.stem)
    assert code == 0
    assert not loaded & set(LIGHT_READ), f"{command} loaded {sorted(loaded & set(LIGHT_READ))}"


def test_showing_a_turn_no_configuration_can_price_loads_no_configuration(home: Path) -> None:
    """No turns.toml, and a model the environment declares no provider for: the cost
    is unknown whatever a configuration says, so none is loaded (its models, the
    built-in tools). With a turns.toml that prices the model, it is read."""
    turn = scripted_copy(home)
    code, loaded, out = modules_loaded_by(home, "show", str(turn))
    assert code == 0
    assert "turnclient.runtime.config" not in loaded
    assert "cost     unknown (no price known for this model)" in out

    (home / "turns.toml").write_text("[prices.scripted]\ninput_per_mtok = 1\noutput_per_mtok = 2\n")
    code, loaded, out = modules_loaded_by(home, "show", str(turn))
    assert code == 0
    assert "turnclient.runtime.config" in loaded
    assert "cost     ~$0.0007 (turns.toml)" in out


def test_the_light_check_sees_the_price_table_when_a_cost_needs_it(home: Path) -> None:
    """The check can fail: an OpenAI model's cost is looked up in genai-prices."""
    code, loaded = loaded_by(home, "show", str(SETTLED))
    assert code == 0
    assert "genai_prices" in loaded


def test_the_probe_sees_the_sdk_when_a_command_needs_it(home: Path) -> None:
    """The check can fail: `turns list` asks Temporal (here a port nobody listens on)."""
    code, loaded = loaded_by(home, "list", "--json", TEMPORAL_ADDRESS="127.0.0.1:9")
    assert code == 7  # unreachable
    assert "temporalio" in loaded


def test_the_light_read_knows_the_providers_the_environment_declares() -> None:
    """``workdir.ENV_PROVIDERS`` is what ``config.env_providers`` always declares."""
    from turnclient.runtime.config import env_providers
    from turnclient.runtime.workdir import ENV_PROVIDERS

    assert tuple(env_providers({})) == ENV_PROVIDERS


def test_inspecting_without_a_turns_toml_loads_no_configuration(home: Path) -> None:
    """The default elision policy, and the storage opened only for an earlier turn."""
    code, loaded, out = modules_loaded_by(home, "inspect", str(scripted_copy(home)))
    assert code == 0
    assert "turnclient.runtime.config" not in loaded
    assert out.startswith("model call 1 · scripted/")


def test_reading_a_turn_builds_no_input_delta_outcome_or_state_model() -> None:
    """Inputs, deltas, outcomes and the reduced state build their validators and
    serializers on first use (``defer_build``): a read validates only durable
    events, and the reducer constructs its state without validating it."""
    code = (
        "import sys\n"
        "from turncore.storage.repository import read_path\n"
        "from turncore.reducer import reduce_turn\n"
        "state = reduce_turn(read_path(sys.argv[1]))\n"
        "import turncore.events as e, turncore.reducer as r\n"
        "names = ['TextDelta', 'PermissionDecisionInput', 'CancelInput', 'StagedValue',\n"
        "         'StagedAsyncToolResultInput', 'CompletedOutcome', 'FailedOutcome']\n"
        "built = [n for n in names if getattr(e, n).__pydantic_complete__]\n"
        "built += [n for n in ('TurnState', 'ToolCallState') if getattr(r, n).__pydantic_complete__]\n"
        "print(sorted(built))\n"
        "print(type(e.parse_input({'type': 'cancel', 'reason': 'r'})).__name__)\n"
        "print(state.to_wire()['terminal']['type'])\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(SETTLED)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["[]", "CancelInput", "turn_completed"]
