"""Opening the configured turn storage, and moving turns between storages.

``[storage] kind = "file"`` (the default) keeps one JSONL file per turn under
the work dir; ``kind = "postgres"`` keeps the same lines in the PostgreSQL
database whose URL is in the variable ``url_env`` names (default
``TURNS_DATABASE_URL``). ``open_repository`` is the one place that turns the
configuration into a repository; the runtime, the worker and the CLI all
open storage through it.

``export_turns`` and ``import_files`` copy logs byte for byte, validating
every line first, so a turn moves between the two storages unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from turnclient.runtime.config import Config, ConfigError, StorageConfig
from turnclient.runtime.extras import install_hint
from turncore.errors import InfrastructureError
from turncore.ids import validate_turn_id
from turncore.storage.repository import FileTurnRepository, JsonlRepository, read_path, validate_log

MIGRATE_ENV = "TURNS_MIGRATE"
"""Set to 1 to create or migrate the database schema when a worker starts."""


def database_url(storage: StorageConfig, env: Mapping[str, str]) -> str:
    """The URL from the variable ``url_env`` names, or a ConfigError naming the variable."""
    url = env.get(storage.url_env, "").strip()
    if not url:
        raise ConfigError(
            f'[storage] kind = "postgres" reads the database URL from {storage.url_env}, '
            "which is not set"
        )
    return url


def open_repository(
    config: Config,
    env: Mapping[str, str] | None = None,
    *,
    migrate: bool = False,
) -> JsonlRepository:
    """The configured turn repository (``migrate``: create or upgrade the schema first)."""
    env = os.environ if env is None else env
    storage = config.storage
    match storage.kind:
        case "file":
            return FileTurnRepository(config.work_dir)
        case "postgres":
            try:
                from turncore.storage.postgres import PostgresTurnRepository
            except ImportError as exc:
                raise ConfigError(
                    f'[storage] kind = "postgres" needs psycopg: {install_hint("postgres")} ({exc})'
                ) from None
            return PostgresTurnRepository.connect(
                database_url(storage, env),
                variable=storage.url_env,
                pool_size=storage.pool_size,
                migrate_schema=migrate,
            )


def migrate_database(config: Config, env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``turns db migrate``: (version before, version after) of the configured database."""
    env = os.environ if env is None else env
    if config.storage.kind != "postgres":
        raise ConfigError(
            'turns db migrate needs [storage] kind = "postgres" in turns.toml '
            "(file storage has no schema)"
        )
    from turncore.storage.postgres import migrate

    storage = config.storage
    return migrate(database_url(storage, env), variable=storage.url_env)


def where(config: Config) -> str:
    """How messages name the configured storage (never with credentials)."""
    if config.storage.kind == "postgres":
        return f"the PostgreSQL turn database ({config.storage.url_env})"
    return str(config.work_dir)


def close(repo: JsonlRepository) -> None:
    closer = getattr(repo, "close", None)
    if callable(closer):
        closer()


@dataclass(frozen=True)
class Moved:
    turn_id: str
    source: str
    target: str
    bytes: int


def export_turns(repo: JsonlRepository, turn_ids: Sequence[str], to: Path) -> list[Moved]:
    """Write each turn's log to ``to/<turnId>.jsonl``, byte for byte.

    Every turn is read (validated) before anything is written, and no
    existing file is replaced, so a failed export writes nothing.
    """
    targets: list[tuple[str, Path, bytes]] = []
    for turn_id in turn_ids:
        validate_turn_id(turn_id)
        data = repo.raw(turn_id)
        validate_log(
            data, repo.location(turn_id), turn_id
        )  # strict: a corrupt turn is reported, not exported
        path = to / f"{turn_id}.jsonl"
        if path.exists():
            raise InfrastructureError(f"{path} exists already; export never replaces a file")
        targets.append((turn_id, path, data))
    to.mkdir(parents=True, exist_ok=True)
    moved: list[Moved] = []
    for turn_id, path, data in targets:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        try:
            os.link(tmp, path)  # fails if the file appeared meanwhile
        except FileExistsError:
            raise InfrastructureError(
                f"{path} exists already; export never replaces a file"
            ) from None
        finally:
            tmp.unlink(missing_ok=True)
        moved.append(Moved(turn_id, turn_id, str(path), len(data)))
    return moved


def import_files(repo: JsonlRepository, paths: Sequence[Path], target: str) -> list[Moved]:
    """Store each file as a new turn, byte for byte (validated; never replaces a turn)."""
    moved: list[Moved] = []
    for path in paths:
        read_path(path)  # strict, and a file named <turnId>.jsonl must hold that turn
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise InfrastructureError(f"{path}: cannot be read: {exc}") from None
        turn_id = repo.import_log(data, str(path))
        moved.append(Moved(turn_id, str(path), target, len(data)))
    return moved
