"""``ConfigError``: below the configuration and the apps it loads, so both can raise it.

``turnclient.runtime.config`` (and ``turnclient``) re-export it; import it
from there.
"""

from __future__ import annotations

from turncore.errors import DependencyError


class ConfigError(DependencyError):
    """``turns.toml`` (or an agent defined in Python) is unusable; the message names the key."""


__all__ = ["ConfigError"]
