"""dtfkit's layers, read from the source: no import cycle between folders, none inside the engine,
and the engine imports nothing above it.

The graph counts every ``import`` and ``from ... import`` in every module (inside functions and
``if TYPE_CHECKING:`` too: a lazy import is still a dependency). A module's *folder* is the package
that holds it (``dtfkit.engine``, ``dtfkit.course.check``, ...); a module directly in ``dtfkit/``
is a node of its own (the facade ``dtfkit``, ``dtfkit.cluster``, ``dtfkit.errors``...): that level
holds the top (cli, the facade) and the bottom (errors, taskapi) at once.

Layers, top to bottom: the front ends (``dtfkit``, ``cluster``, ``launch``, ``cli``, ``ray``,
``lab``, ``course``, ``recipes``, ``kube``), the engine (``dtfkit.engine``, whose
``dtfkit.engine.notebook`` answers the notebook facts), and ``BOTTOM`` (standard library only,
plus each other).
"""

from __future__ import annotations

import ast
import functools
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from dtfkit.engine.layout import TaskId, tutorial_flags
from dtfkit.kube import tfjob_entry

PACKAGE = Path(__file__).resolve().parent.parent / "dtfkit"
ENGINE = "dtfkit.engine"

# Modules outside the engine that the engine may import: they import nothing from dtfkit but each other.
BOTTOM = {
    "dtfkit.errors": "the exception types every layer raises",
    "dtfkit.taskapi": "this_task()/report(), the task-side API the task bootstrap fills in",
    "dtfkit.shown": "shown(value): a bad argument quoted in an error, cut to a readable length",
}
# Edges that break the rules and are on their way out; a listed edge that no longer exists is fine.
# Imports that break a rule on purpose, with the reason (none today).
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


@functools.lru_cache(maxsize=8)
def module_names(root: Path) -> dict[str, Path]:
    """``{"dtfkit.engine.pool": path, "dtfkit": path of __init__.py, ...}`` under ``root``."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported_modules(path: Path, module: str, modules: dict[str, Path]) -> set[str]:
    """The dtfkit modules ``module`` imports (relative imports resolved), inside functions too.

    ``from dtfkit.engine import pool`` imports the module ``dtfkit.engine.pool``;
    ``from dtfkit.engine.pool import TaskPool`` the module ``dtfkit.engine.pool`` too.
    """
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    found = set()
    for name in names:
        while name and name not in modules:  # `import dtfkit.engine.pool as p`, names of a module
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


@functools.lru_cache(maxsize=8)
def module_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: {dtfkit modules it imports}}``, without the rule-breakers of KNOWN_EXCEPTIONS."""
    modules = module_names(root)
    return {
        module: {t for t in imported_modules(path, module, modules) if (module, t) not in KNOWN_EXCEPTIONS}
        for module, path in modules.items()
    }


def folder_of(module: str, root: Path = PACKAGE) -> str:
    """The package holding ``module``; a module directly in ``dtfkit/`` (and the facade) is its own."""
    path = module_names(root)[module]
    if path.name == "__init__.py":
        return module
    package = module.rpartition(".")[0]
    return module if package == "dtfkit" else package


def folder_graph(root: Path = PACKAGE) -> dict[str, dict[str, list[str]]]:
    """``{folder: {folder it imports: ["module -> module", ...]}}``."""
    folders: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for module, targets in module_graph(root).items():
        for target in sorted(targets):
            a, b = folder_of(module, root), folder_of(target, root)
            if a != b:
                folders[a][b].append(f"{module} -> {target}")
    return folders


def cycles(graph: dict[str, set[str] | dict]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe(folders: dict[str, dict[str, list[str]]], among: set[str] | None = None) -> str:
    """The folder graph, one folder a line, with the imports behind each edge of ``among``."""
    lines = []
    for folder in sorted(folders):
        lines.append(f"{folder} -> {', '.join(sorted(folders[folder]))}")
        if among and folder in among:
            for target in sorted(set(folders[folder]) & among):
                lines.extend(f"    {edge}" for edge in folders[folder][target])
    return "\n".join(lines)


def folder_cycles(root: Path = PACKAGE) -> tuple[list[list[str]], str]:
    folders = folder_graph(root)
    found = cycles(folders)
    return found, describe(folders, {f for c in found for f in c})


def engine_cycles(root: Path = PACKAGE) -> list[list[str]]:
    graph = module_graph(root)
    inside = {
        m: {t for t in ts if t.startswith(ENGINE + ".")}
        for m, ts in graph.items()
        if m.startswith(ENGINE + ".")
    }
    return cycles(inside)


def engine_imports_from_above(root: Path = PACKAGE) -> list[str]:
    graph = module_graph(root)
    return [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        if module == ENGINE or module.startswith(ENGINE + ".")
        for target in sorted(targets)
        if not (target == ENGINE or target.startswith(ENGINE + ".") or target in BOTTOM)
    ]


# ---------------------------------------------------------------- the rules


def test_no_import_cycle_between_folders():
    found, picture = folder_cycles()
    assert not found, f"import cycles between folders: {found}\nthe folder graph:\n{picture}"


def test_no_module_cycle_inside_the_engine():
    assert engine_cycles() == [], "import cycles between engine modules (e.g. pool <-> prewarm)"


def test_the_engine_imports_nothing_above_it():
    above = engine_imports_from_above()
    assert above == [], f"the engine imports outside dtfkit.engine and BOTTOM: {above}"


@pytest.mark.parametrize("module", [*sorted(BOTTOM), "dtfkit.engine.notebook"])
def test_the_bottom_layer_imports_only_the_bottom_layer(module):
    above = sorted(module_graph()[module] - set(BOTTOM))
    assert above == [], f"{module} must sit below everything, but imports {above}"


def test_the_pool_never_imports_prewarm():
    assert "dtfkit.engine.prewarm" not in module_graph()["dtfkit.engine.pool"]


# ---------------------------------------------------------------- the checks can fail


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "dtfkit"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__", "data", "crd"))
    return root


def _add_import(root: Path, module: str, statement: str) -> None:
    path = root.joinpath(*module.split(".")[1:]).with_suffix(".py")
    path.write_text(
        path.read_text(encoding="utf-8") + f"\n\ndef _cycle():\n    {statement}\n", encoding="utf-8"
    )


def test_a_cycle_added_between_folders_is_found(tmp_path):
    root = _copy(tmp_path)
    _add_import(root, "dtfkit.engine.layout", "from dtfkit.kube import tfjob_entry")  # inside a function
    _add_import(root, "dtfkit.kube.tfjob_entry", "import dtfkit.engine.layout")
    found, picture = folder_cycles(root)
    assert any({"dtfkit.engine", "dtfkit.kube"} <= set(cycle) for cycle in found), found
    assert "    dtfkit.engine.layout -> dtfkit.kube.tfjob_entry" in picture.splitlines()
    assert "dtfkit.engine.layout -> dtfkit.kube.tfjob_entry" in engine_imports_from_above(root)


def test_a_cycle_added_inside_the_engine_is_found(tmp_path):
    root = _copy(tmp_path)
    _add_import(root, "dtfkit.engine.pool", "from dtfkit.engine import prewarm")
    assert any({"dtfkit.engine.pool", "dtfkit.engine.prewarm"} <= set(c) for c in engine_cycles(root))


# ---------------------------------------------------------------- one rule, two copies

CLUSTERS = [
    {"ps": ["p:1"], "worker": ["w0:1", "w1:1"]},
    {"worker": ["w:1"], "chief": ["c:1"]},
    {"evaluator": ["e:1"], "worker": ["w:1"], "ps": ["p:1", "q:1"]},
    {"zeta": ["z:1"], "worker": ["w:1"], "alpha": ["a:1"], "chief": ["c:1"]},
]


@pytest.mark.parametrize("cluster", CLUSTERS, ids=lambda c: ",".join(c))
def test_the_engine_and_the_tfjob_entry_give_the_same_tutorial_flags(cluster):
    # tfjob_entry.py runs alone in a container, so it keeps its own copy of the rule the engine owns.
    for job, hosts in cluster.items():
        for index in range(len(hosts)):
            assert tutorial_flags(cluster, TaskId(job, index)) == tfjob_entry.tutorial_flags(
                cluster, job, index
            )
