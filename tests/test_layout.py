"""The layout is data: docs/architecture.md's table against the tree and its imports.

Every module of the project (turncore, turnclient, and turncore_temporal's
workflows/, activities/ and worker.py) is parsed with ``ast``; nothing is
imported. An import counts wherever it is written: at module level or
inside a function (a deferred import still depends on its module; deferring
only moves the cost, so a cycle through one is still a cycle). Imports under
``TYPE_CHECKING`` count for the layout table's rows (a folder may not even
name a type from a folder above it) but not for cycles: they never run, and
two modules that only name each other's types do not depend on each other.

Private means a leading underscore: a module may not import another module's
``_name`` (nor read it as ``module._name``), and a private module
(``turncore.model._http``) may be imported only from inside its package.
Tests are not checked: a test may reach into the module it tests.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
INSTALLED = {
    "workflows": "turncore_temporal.workflows",
    "activities": "turncore_temporal.activities",
}


@dataclass(frozen=True)
class Module:
    name: str  # the installed dotted name
    path: Path
    folder: str  # its row in the layout table


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts == ["worker"]:
        return "turncore_temporal.worker"
    if parts[0] in INSTALLED:
        parts[0:1] = INSTALLED[parts[0]].split(".")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> Iterator[Path]:
    for top in ("turncore", "turnclient", "workflows", "activities"):
        yield from sorted((ROOT / top).rglob("*.py"))
    yield ROOT / "worker.py"


def layout_table() -> dict[str, set[str]]:
    """The table's rows: folder → the folders it may import."""
    text = ARCHITECTURE.read_text()
    start = text.index("<!-- layout-table")
    end = text.index("<!-- /layout-table -->")
    rows: dict[str, set[str]] = {}
    for line in text[start:end].splitlines()[3:]:
        if not line.startswith("| `"):
            continue
        folder, _role, may = (cell.strip() for cell in line.strip("|").split(" | "))
        name = folder.strip("`")
        if may.startswith("every folder above"):
            allowed = set(rows)
            allowed -= set(re.findall(r"`([^`]+)`", may))
        else:
            allowed = set(re.findall(r"`([^`]+)`", may))
        rows[name] = allowed
    return rows


def folder_of(path: Path, folders: set[str]) -> str:
    rel = path.relative_to(ROOT).as_posix()
    if rel in folders:
        return rel
    holders = [f for f in folders if f.endswith("/") and rel.startswith(f)]
    assert holders, f"{rel} is in no folder of the layout table"
    return max(holders, key=len)


def modules() -> dict[str, Module]:
    folders = set(layout_table())
    found = {}
    for path in _sources():
        name = _dotted(path)
        found[name] = Module(name, path, folder_of(path, folders))
    return found


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the project module imported (or imported from)
    names: tuple[str, ...]  # the names taken from it (empty for `import x`)
    line: int
    typing_only: bool  # under `if TYPE_CHECKING:`


def imports(mods: dict[str, Module]) -> Iterator[Import]:
    """Every import of a project module, wherever it is written."""
    for mod in mods.values():
        package = mod.name if mod.path.name == "__init__.py" else mod.name.rpartition(".")[0]
        tree = ast.parse(mod.path.read_text(), str(mod.path))
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            for stmt in node.body
            for inner in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            only = id(node) in typing_only
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                taken: list[str] = []
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if sub in mods:  # `from package import module`
                        yield Import(mod.name, sub, (), node.lineno, only)
                    else:
                        taken.append(alias.name)
                if taken and source in mods:
                    yield Import(mod.name, source, tuple(taken), node.lineno, only)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods:
                        yield Import(mod.name, alias.name, (), node.lineno, only)


def test_the_layout_table_names_every_package_and_only_real_folders() -> None:
    rows = layout_table()
    for folder in rows:
        assert (ROOT / folder).exists(), f"docs/architecture.md lists {folder}, which is not there"
    packages = {
        p.parent.relative_to(ROOT).as_posix() + "/"
        for top in ("turncore", "turnclient", "workflows", "activities")
        for p in (ROOT / top).rglob("__init__.py")
    }
    missing = sorted(packages - set(rows))
    assert not missing, f"docs/architecture.md's layout table lacks {missing}"


def test_every_import_stays_within_its_folders_row() -> None:
    rows = layout_table()
    mods = modules()
    wrong = []
    for imp in imports(mods):
        here, there = mods[imp.importer].folder, mods[imp.target].folder
        if here != there and there not in rows[here]:
            wrong.append(
                f"{mods[imp.importer].path.relative_to(ROOT)}:{imp.line} ({here}) imports {imp.target} ({there})"
            )
    assert not wrong, "imports the layout table does not allow:\n" + "\n".join(wrong)


def test_no_import_cycle() -> None:
    mods = modules()
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for imp in imports(mods):
        if imp.target != imp.importer and not imp.typing_only:
            graph[imp.importer].add(imp.target)
    cycles = _cycles(graph)
    assert not cycles, "modules that import each other, directly or around a loop:\n" + "\n".join(
        ", ".join(c) for c in cycles
    )


def test_no_module_takes_another_modules_private_names() -> None:
    mods = modules()
    wrong = []
    for imp in imports(mods):
        if imp.target == imp.importer:
            continue
        where = f"{mods[imp.importer].path.relative_to(ROOT)}:{imp.line}"
        private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
        if private:
            wrong.append(f"{where} takes {private} from {imp.target}")
        # A private module (`_http`) is its package's own: importers live inside it.
        parts = imp.target.split(".")
        for i, part in enumerate(parts):
            owner = ".".join(parts[:i])
            if part.startswith("_") and not part.startswith("__"):
                if not (imp.importer == owner or imp.importer.startswith(owner + ".")):
                    wrong.append(f"{where} imports {imp.target}, private to {owner}")
    wrong += _private_attributes(mods)
    assert not wrong, "\n".join(wrong)


def _private_attributes(mods: dict[str, Module]) -> list[str]:
    """``module._name`` through a name bound by importing a project module."""
    wrong = []
    for mod in mods.values():
        tree = ast.parse(mod.path.read_text())
        bound: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in mods:
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in mods:
                        bound[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and bound[node.value.id] != mod.name
            ):
                wrong.append(
                    f"{mod.path.relative_to(ROOT)}:{node.lineno} reads {bound[node.value.id]}.{node.attr}"
                )
    return wrong


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checks_see_a_cycle_and_a_private_import() -> None:
    """The cycle check can fail: it finds a loop of two and passes a chain."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_package_is_declared_for_the_wheel() -> None:
    """pyproject lists packages by hand: a folder left out ships without its modules."""
    import tomllib

    declared = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        p.relative_to(ROOT).as_posix().replace("/", ".")
        for top in ("turncore", "turnclient")
        for p in (ROOT / top).rglob("*")
        if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))
    }
    missing = sorted(found - declared)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
