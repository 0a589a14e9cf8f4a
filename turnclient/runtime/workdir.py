"""Where a work dir is, and whether a ``turns.toml`` is in effect there.

Light on purpose (the standard library only): a command that reads a turn
file finds the work dir, and learns that no configuration file applies,
without importing the configuration's models (``turnclient.runtime.config``
re-exports these names and reads the file).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CONFIG_FILE = "turns.toml"
DEFAULT_WORK_DIR = ".turns"
ENV_PROVIDERS = ("openai", "anthropic")
"""The providers the environment always declares (``config.env_providers``), with or
without their keys; every other provider exists only in a ``turns.toml``."""


def work_dir_from_env(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path:
    """``TURNS_HOME``; else the nearest ``.turns/`` upward from the current directory, as git
    finds ``.git``; else ``./.turns`` (absolute), which the first command that writes creates.

    So a command run in a subdirectory of a project uses the project's turns and
    its Temporal database instead of silently starting a second, empty one.
    """
    env = os.environ if env is None else env
    if env.get("TURNS_HOME"):
        return Path(env["TURNS_HOME"]).absolute()
    here = (cwd or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        candidate = folder / DEFAULT_WORK_DIR
        if candidate.is_dir():
            return candidate
    return here / DEFAULT_WORK_DIR


def config_path(work_dir: Path, env: Mapping[str, str]) -> Path:
    """The configuration file of ``work_dir``: ``TURNS_CONFIG``, else its ``turns.toml``."""
    if env.get("TURNS_CONFIG"):
        return Path(env["TURNS_CONFIG"]).absolute()
    return work_dir.absolute() / CONFIG_FILE


def has_config_file(work_dir: Path, env: Mapping[str, str] | None = None) -> bool:
    """Whether a configuration file applies: ``TURNS_CONFIG`` is set (``load_config``
    refuses one that is missing) or ``work_dir`` has a ``turns.toml``. Without one, the
    configuration is the built-ins and the environment alone."""
    env = os.environ if env is None else env
    return bool(env.get("TURNS_CONFIG")) or config_path(work_dir, env).exists()


__all__ = [
    "CONFIG_FILE",
    "DEFAULT_WORK_DIR",
    "ENV_PROVIDERS",
    "config_path",
    "has_config_file",
    "work_dir_from_env",
]
