"""Package names that load on first use (PEP 562).

A package lists where each public name lives; ``lazy_exports`` gives it the
module-level ``__getattr__`` and ``__dir__`` that import the module the first
time the name is read and keep the value, so later reads are plain globals.
A command that needs one error class does not pay for a package's adapters,
httpx or pydantic models. Type checkers see the package's ordinary imports
under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_exports(
    package: str, where: Mapping[str, str], public: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``.

    ``where`` maps a name to its module: relative to ``package`` when it starts
    with a dot, absolute otherwise.
    """
    names = sorted(public)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
