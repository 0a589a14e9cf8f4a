"""Install hints for turncore's optional extras that work wherever turncore came from.

turncore is installed from a clone (``pip install -e .``) or from a wheel, and
is not on a public package index, so ``pip install 'turncore[ui]'`` would look
for a distribution that is not there. A hint therefore names the extra's own
requirements, read from the installed distribution's metadata (the one
source: ``[project.optional-dependencies]`` in ``pyproject.toml``):
``pip install 'starlette>=0.46' 'uvicorn>=0.34'`` works from a clone, from a
wheel and in any virtual environment.
"""

from __future__ import annotations

import importlib.metadata
import re

DISTRIBUTION = "turncore"
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def extra_requirements(extra: str) -> tuple[str, ...]:
    """The requirements ``turncore[extra]`` adds, as written in the metadata."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return ()
    out: list[str] = []
    for line in requires:
        requirement, _, marker = line.partition(";")
        found = _EXTRA_MARKER.search(marker)
        if found is not None and found.group(1) == extra:
            out.append(requirement.strip())
    return tuple(out)


def install_hint(extra: str) -> str:
    """``pip install 'pkg>=x' …`` for an extra (``ui``, ``postgres``, ``otel``, ``encryption``)."""
    requirements = extra_requirements(extra)
    if not requirements:  # not installed as a distribution: run from a bare source tree
        return f"pip install -e '.[{extra}]' (from the turncore source tree)"
    packages = " ".join(f"'{r}'" for r in requirements)
    return f"pip install {packages} (turncore's {extra} extra)"


__all__ = ["extra_requirements", "install_hint"]
