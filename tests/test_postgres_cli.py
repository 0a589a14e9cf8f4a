"""``[storage] kind = "postgres"`` end to end: configuration, ``turns db``,
turns run and approved on the database, the file commands, export and import
between the two storages byte for byte, and the failures a user sees (an
unreachable database, a corrupt row), each as a separate ``turns`` process
against the session's Temporal dev server and a real PostgreSQL server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from temporalio.testing import WorkflowEnvironment

from tests.postgres import PASSWORD, free_port
from turnclient.runtime.config import ConfigError, load_config, parse_storage
from turnclient.runtime.storage import database_url
from turncore.ids import turn_path
from turncore.storage.postgres import PG_SCHEMA_VERSION

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120


def make_home(tmp_path: Path, name: str, storage: str | None) -> Path:
    home = tmp_path / name
    home.mkdir()
    if storage is not None:
        (home / "turns.toml").write_text(storage)
    return home


POSTGRES = '[storage]\nkind = "postgres"\n'


def run(
    home: Path, env: dict[str, str], *args: str, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnclient.cli", *args],
        cwd=home.parent,
        env={**env, "TURNS_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def base_env(temporal: WorkflowEnvironment | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "TURNS_"))}
    env.update({"PYTHONPATH": str(ROOT), "NO_COLOR": "1"})
    if temporal is not None:
        env["TEMPORAL_ADDRESS"] = temporal.client.service_client.config.target_host
        env["TURNS_TASK_QUEUE"] = f"pgcli-{uuid.uuid4()}"
    return env


def as_json(r: subprocess.CompletedProcess[str]) -> Any:
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise AssertionError(f"not JSON (exit {r.returncode}): {r.stdout!r} {r.stderr!r}") from None


def no_secret(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text


# ================================================================ configuration


class TestConfig:
    def test_file_storage_is_the_default(self, tmp_path: Path) -> None:
        cfg = load_config(tmp_path, {})
        assert cfg.storage.kind == "file"

    def test_postgres_names_a_variable(self, tmp_path: Path) -> None:
        (tmp_path / "turns.toml").write_text(
            '[storage]\nkind = "postgres"\nurl_env = "MY_TURNS_DB"\npool_size = 4\n'
        )
        cfg = load_config(tmp_path, {})
        assert (cfg.storage.kind, cfg.storage.url_env, cfg.storage.pool_size) == (
            "postgres",
            "MY_TURNS_DB",
            4,
        )
        assert database_url(cfg.storage, {"MY_TURNS_DB": "postgresql:///x"}) == "postgresql:///x"
        with pytest.raises(ConfigError, match="MY_TURNS_DB, which is not set"):
            database_url(cfg.storage, {})

    @pytest.mark.parametrize(
        ("table", "message"),
        [
            ({"kind": "sqlite"}, 'storage.kind must be "file" or "postgres"'),
            ({"kind": "postgres", "url": "x"}, "unknown key url"),
            ({"kind": "postgres", "pool_size": 0}, "pool_size must be between"),
            ({"url_env": "TURNS_DATABASE_URL"}, 'only to kind = "postgres"'),
        ],
    )
    def test_bad_tables(self, table: dict[str, Any], message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            parse_storage(table)

    def test_a_url_in_place_of_the_variable_is_refused_without_repeating_it(self) -> None:
        url = f"postgresql://turns:{PASSWORD}@db:5432/turns"
        with pytest.raises(ConfigError) as info:
            parse_storage({"kind": "postgres", "url_env": url})
        assert "names an environment variable" in str(info.value)
        no_secret(str(info.value))


# ================================================================ end to end


def test_turns_on_postgres_then_export_and_import_byte_identical(
    temporal_env: WorkflowEnvironment, postgres_url: str, tmp_path: Path
) -> None:
    env = {**base_env(temporal_env), "TURNS_DATABASE_URL": postgres_url}
    home = make_home(tmp_path, "pg", POSTGRES)

    r = run(home, env, "db", "migrate")
    assert r.returncode == 0, r.stderr
    assert f"migrated the turn schema from version 0 to {PG_SCHEMA_VERSION}" in r.stdout
    assert "nothing to do" in run(home, env, "db", "migrate").stdout

    # A turn that needs approval suspends; another process approves it.
    r = run(home, env, "run", "Save 'hello from postgres' to notes.txt", "--json")
    assert r.returncode == 3, r.stderr
    turn_id = as_json(r)["turnId"]
    r = run(home, env, "approve", turn_id, "call_0_0")
    assert r.returncode == 0, r.stderr
    assert "Wrote 20 bytes to notes.txt." in r.stdout
    assert not list(home.glob("storage/turns/**/*.jsonl"))  # nothing went to files

    with psycopg.connect(postgres_url) as conn:
        stored = conn.execute(
            "SELECT line FROM turn_events WHERE turn_id = %s ORDER BY seq", (turn_id,)
        ).fetchall()
    data = "".join(line + "\n" for (line,) in stored).encode()
    assert json.loads(stored[-1][0])["type"] == "turn_completed"

    r = run(home, env, "log", turn_id)
    assert r.returncode == 0, r.stderr
    assert r.stdout.encode() == data
    assert run(home, env, "log", "last").stdout.encode() == data  # `last` finds it in the database
    r = run(home, env, "validate", turn_id)
    assert r.returncode == 0 and "valid" in r.stdout, r.stdout
    r = run(home, env, "show", turn_id, "--json")
    assert as_json(r)["status"] == "completed"
    r = run(home, env, "db", "validate")
    assert r.returncode == 0 and "1 turns" in r.stdout

    # Out to a file, into a file-storage work dir, and back into a fresh database.
    out = tmp_path / "out"
    r = run(home, env, "export", turn_id, "--to", str(out))
    assert r.returncode == 0, r.stderr
    exported = out / f"{turn_id}.jsonl"
    assert exported.read_bytes() == data
    files = make_home(tmp_path, "files", None)
    r = run(files, env, "import", str(exported))
    assert r.returncode == 0, r.stderr
    assert turn_path(files, turn_id).read_bytes() == data
    r = run(files, env, "log", turn_id)
    assert r.stdout.encode() == data
    r = run(home, env, "import", str(exported))
    assert r.returncode == 1 and "already exists" in r.stderr  # never replaced

    r = run(
        home, env, "recover", turn_id, "--json"
    )  # a terminal turn: the outcome, nothing written
    assert r.returncode == 0 and as_json(r)["status"] == "completed"
    no_secret(r.stdout, r.stderr)


def test_a_corrupt_row_is_reported_like_a_corrupt_line_and_repaired(
    postgres_url: str, tmp_path: Path
) -> None:
    from tests.builders import TURN_ID, completed_turn
    from turncore.storage.postgres import PostgresTurnRepository

    env = {**base_env(), "TURNS_DATABASE_URL": postgres_url}
    home = make_home(tmp_path, "pg", POSTGRES)
    assert run(home, env, "db", "migrate").returncode == 0
    repo = PostgresTurnRepository.connect(postgres_url)
    history = completed_turn()
    repo.create(history[0])  # type: ignore[arg-type]
    repo.append(TURN_ID, history[1:4])
    repo.close()
    with psycopg.connect(postgres_url) as conn:
        conn.execute(
            "INSERT INTO turn_events (turn_id, seq, pos, line) VALUES (%s, 5, 99999, %s)",
            (TURN_ID, '{"type":"tool_pr'),
        )
    r = run(home, env, "validate", TURN_ID)
    assert r.returncode == 1
    assert r.stdout.startswith(f"postgres:{TURN_ID}:5: the line is not valid JSON")
    r = run(home, env, "show", TURN_ID)
    assert r.returncode == 1 and f"postgres:{TURN_ID}:5:" in r.stderr
    r = run(home, env, "repair", TURN_ID, "--json")
    assert r.returncode == 0, r.stderr
    report = as_json(r)
    assert (report["line"], report["keptLines"], report["sidecar"]) == (
        5,
        4,
        "turn_events_broken",
    )
    assert run(home, env, "validate", TURN_ID).returncode == 0
    r = run(home, env, "repair", TURN_ID)
    assert r.returncode == 1 and "nothing to repair" in r.stderr


@pytest.mark.parametrize("entry", ["turns worker", "python -m turncore_temporal.worker"])
def test_an_unreachable_database_at_start_is_one_line(
    entry: str, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **base_env(temporal_env),
        "TURNS_DATABASE_URL": f"postgresql://turns:{PASSWORD}@127.0.0.1:{port}/turns",
    }
    home = make_home(tmp_path, "pg", POSTGRES)
    if entry == "turns worker":
        r = run(home, env, "worker")
    else:
        r = subprocess.run(
            [sys.executable, "-m", "turncore_temporal.worker"],
            cwd=tmp_path,
            env={**env, "TURNS_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "TURNS_DATABASE_URL" in lines[0] and f"127.0.0.1:{port}/turns" in lines[0]
    assert "Traceback" not in r.stderr
    no_secret(r.stdout, r.stderr)


def test_an_unset_variable_is_named(tmp_path: Path) -> None:
    home = make_home(tmp_path, "pg", POSTGRES)
    r = run(home, base_env(), "show", "2025-11-11T04-36-29Z-0001234-000")
    assert r.returncode == 1
    assert "TURNS_DATABASE_URL, which is not set" in r.stderr


def test_the_compose_deployment_keeps_turns_in_postgres(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, {"TURNS_CONFIG": str(ROOT / "deploy" / "turns.toml")})
    assert (cfg.storage.kind, cfg.storage.url_env) == ("postgres", "TURNS_DATABASE_URL")
    compose = (ROOT / "compose.yaml").read_text()
    assert "turns-home" not in compose  # no shared volume for the workers
    assert "@postgresql:5432/turns" in compose and 'command: ["db", "migrate"]' in compose
    assert "'.[postgres]'" in (ROOT / "Dockerfile").read_text()


def test_a_worker_asked_to_migrate_creates_the_schema(
    temporal_env: WorkflowEnvironment, postgres_url: str, tmp_path: Path
) -> None:
    import signal
    import time

    home = make_home(tmp_path, "pg", POSTGRES)
    env = {**base_env(temporal_env), "TURNS_DATABASE_URL": postgres_url, "TURNS_HOME": str(home)}
    # Without being asked, a worker refuses a database without the schema.
    r = subprocess.run(
        [sys.executable, "-m", "turncore_temporal.worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 1 and "turns db migrate" in r.stderr, r.stderr
    proc = subprocess.Popen(
        [sys.executable, "-m", "turncore_temporal.worker"],
        env={**env, "TURNS_MIGRATE": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        version = None
        while version is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the worker never migrated"
            with psycopg.connect(postgres_url) as conn:
                if conn.execute("SELECT to_regclass('turncore_schema')").fetchone() != (None,):
                    version = conn.execute("SELECT version FROM turncore_schema").fetchone()
            time.sleep(0.1)
        assert version == (PG_SCHEMA_VERSION,)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    no_secret(out, err)


def test_turns_config_shows_the_storage_without_the_url(tmp_path: Path) -> None:
    home = make_home(tmp_path, "pg", POSTGRES)
    url = f"postgresql://turns:{PASSWORD}@db:5432/turns"
    r = run(home, {**base_env(), "TURNS_DATABASE_URL": url}, "config", "--json")
    assert as_json(r)["storage"] == {
        "kind": "postgres",
        "urlEnv": "TURNS_DATABASE_URL",
        "urlSet": True,
        "poolSize": 16,
    }
    r = run(home, base_env(), "config")
    assert "storage       PostgreSQL from TURNS_DATABASE_URL (NOT SET)" in r.stdout
    no_secret(r.stdout, r.stderr)
