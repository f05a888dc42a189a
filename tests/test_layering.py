"""dtfkit's layers, read from the source: no import cycle between folders and none between modules
anywhere, the engine's wings import only downwards, the engine imports nothing above it, and no module
that runs in the notebook kernel imports TensorFlow when it is imported.

The graph counts every ``import`` and ``from ... import`` in every module (inside functions and
``if TYPE_CHECKING:`` too: a lazy import is still a dependency). A module's *folder* is the package
that holds it (``dtfkit.engine``, ``dtfkit.course.check``, ...); a module directly in ``dtfkit/``
is a node of its own (the facade ``dtfkit``, ``dtfkit.cluster``, ``dtfkit.errors``...): that level
holds the top (cli, the facade) and the bottom (errors, taskapi) at once.

The engine's wings, top to bottom, each named for the process that runs its code (``WINGS``):
``owner`` (the kernel's session: tasks, events, calls, output), ``launchers`` (where a task runs; in
the kernel's process), ``task`` (the program a task process runs), ``wire`` (what both sides agree
on), ``platform`` (the machine). A wing imports its own modules and the wings below it, never ``task``.

Layers, top to bottom: the front ends (``dtfkit``, ``cluster``, ``launch_script``, ``cli``, ``ray``,
``lab``, ``course``, ``recipes``, ``kube``), the engine (``dtfkit.engine``, whose
``dtfkit.engine.platform.notebook`` answers the notebook facts), and ``BOTTOM`` (standard library only,
plus each other).
"""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import subprocess_env

from dtfkit.engine.wire.layout import TaskId, tutorial_flags
from dtfkit.kube import tfjob_entry

PACKAGE = Path(__file__).resolve().parent.parent / "dtfkit"
ENGINE = "dtfkit.engine"

# The engine's wings, top to bottom; a wing may import itself and the wings after it, except "task"
# (a program of its own: nothing imports it).
WINGS = ("owner", "launchers", "task", "wire", "platform")
# Programs that run in a task process (or a container), not in the notebook's kernel: the only
# modules that may import TensorFlow when they are imported.
TASK_SIDE = ("dtfkit.engine.task", "dtfkit.examples", "dtfkit.kube.tfjob_entry")
TENSORFLOW = ("tensorflow", "keras", "tf_keras")
# Files that are not imported as modules but executed by a program of their own (none in dtfkit/ since the
# classroom bench, whose jupyterhub_config.py JupyterHub executes, moved out to hubbench/).
NOT_IMPORTED: dict[str, str] = {}
# Beside the package, not in it, each with the modules of dtfkit that may name it (the command line's
# forwarders, inside a function): the classroom bench runs as root and makes Unix users; the edition builder
# reads and writes a checkout's chapters and documents. A student's pip install carries neither.
BESIDE_THE_PACKAGE = {"hubbench": {"dtfkit.cli"}, "edition": {"dtfkit.cli"}}

# Modules outside the engine that the engine may import: they import nothing from dtfkit but each other.
BOTTOM = {
    "dtfkit.errors": "the exception types every layer raises",
    "dtfkit.taskapi": "this_task()/report(), the task-side API the task bootstrap fills in",
    "dtfkit.shown": "shown(value): a bad argument quoted in an error, cut to a readable length",
    "dtfkit.i18n": "_(): the words a person is shown, in the language they chose",
    "dtfkit.fonts": "a font with the chosen language's glyphs for matplotlib (set_language calls it)",
    "dtfkit.log": 'note(): dtfkit\'s own notes, through the "dtfkit" logger (shown on standard output by default)',
    "dtfkit.ports": "free_ports(): loopback ports free now (the TFJob simulator, the classroom bench, benchmarks)",
}
# Edges that break the rules and are on their way out; a listed edge that no longer exists is fine.
# Imports that break a rule on purpose, with the reason (none today).
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


@functools.lru_cache(maxsize=8)
def module_names(root: Path) -> dict[str, Path]:
    """``{"dtfkit.engine.launchers.local": path, "dtfkit": path of __init__.py, ...}`` under ``root``."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _type_only_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (they never run)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found.update(id(n) for child in node.body for n in ast.walk(child))
    return found


def _module_level_nodes(tree: ast.Module) -> set[int]:
    """ids of the nodes that run when the module is imported: not inside a function or a class body's method."""
    found = set()
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        found.add(id(node))
        todo.extend(ast.iter_child_nodes(node))
    return found


def imported_modules(
    path: Path, module: str, modules: dict[str, Path], *, type_only: bool = True, at_import: bool = False
) -> set[str]:
    """The dtfkit modules ``module`` imports (relative imports resolved), inside functions too.

    ``type_only=False`` leaves out the imports under ``if TYPE_CHECKING:`` (they never run);
    ``at_import=True`` keeps only those that run when ``module`` is imported (not inside functions).

    ``from dtfkit.engine.launchers import local`` imports the module ``dtfkit.engine.launchers.local``;
    ``from dtfkit.engine.launchers.local import LocalLauncher`` the module ``dtfkit.engine.launchers.local`` too.
    """
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = set() if type_only else _type_only_nodes(tree)
    keep = _module_level_nodes(tree) if at_import else None
    names = set()
    for node in ast.walk(tree):
        if id(node) in skip or (keep is not None and id(node) not in keep):
            continue
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
        while name and name not in modules:  # `import dtfkit.engine.launchers.local as p`, names of a module
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)
    return found


@functools.lru_cache(maxsize=32)
def module_graph(
    root: Path = PACKAGE, *, type_only: bool = True, at_import: bool = False
) -> dict[str, set[str]]:
    """``{module: {dtfkit modules it imports}}``, without the rule-breakers of KNOWN_EXCEPTIONS."""
    modules = module_names(root)
    return {
        module: {
            t
            for t in imported_modules(path, module, modules, type_only=type_only, at_import=at_import)
            if (module, t) not in KNOWN_EXCEPTIONS
        }
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


def wing_of(module: str) -> str | None:
    """``"owner"`` for ``dtfkit.engine.owner.calls``; None outside the wings."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["dtfkit", "engine"] and parts[2] in WINGS else None


def wing_violations(root: Path = PACKAGE) -> list[str]:
    """Imports from a wing to a wing above it (or into ``task``): ``"a -> b (wire imports owner)"``."""
    found = []
    for module, targets in sorted(module_graph(root).items()):
        here = wing_of(module)
        for target in sorted(targets):
            there = wing_of(target)
            if there == "task" and here != "task":  # a program: nothing anywhere imports it
                found.append(f"{module} -> {target} ({here or module} imports task)")
                continue
            if here is None or there is None or here == there:
                continue
            if WINGS.index(there) < WINGS.index(here):
                found.append(f"{module} -> {target} ({here} imports {there})")
    return found


def engine_modules_outside_wings(root: Path = PACKAGE) -> list[str]:
    return sorted(m for m in module_names(root) if m.startswith(ENGINE + ".") and wing_of(m) is None)


def module_cycles(root: Path = PACKAGE) -> list[list[str]]:
    """Import circles between modules anywhere in dtfkit, counting every import that can run."""
    return cycles(module_graph(root, type_only=False))


def _imports_tensorflow_at_import(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    keep, skip = _module_level_nodes(tree), _type_only_nodes(tree)
    lines = []
    for node in ast.walk(tree):
        if id(node) not in keep or id(node) in skip:
            continue
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in TENSORFLOW for a in node.names):
            lines.append(node.lineno)
        elif (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").split(".")[0] in TENSORFLOW
        ):
            lines.append(node.lineno)
    return lines


def kernel_side(module: str) -> bool:
    return not any(module == t or module.startswith(t + ".") for t in TASK_SIDE)


def tensorflow_at_import(root: Path = PACKAGE) -> dict[str, list[str]]:
    """``{kernel-side module: [the chain of imports that reaches TensorFlow when it is imported]}``.

    Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``, so parents count.
    """
    modules = module_names(root)
    graph = module_graph(root, type_only=False, at_import=True)
    direct = {m: _imports_tensorflow_at_import(path) for m, path in modules.items()}

    def parents(module: str) -> list[str]:
        parts = module.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules]

    found = {}
    for start in sorted(m for m in modules if kernel_side(m)):
        seen, todo = {start: [start]}, [start]
        while todo:
            module = todo.pop(0)
            if direct[module]:
                found[start] = [*seen[module], f"import tensorflow (line {direct[module][0]})"]
                break
            for nxt in sorted(graph[module] | set(parents(module))):
                if nxt not in seen:
                    seen[nxt] = [*seen[module], nxt]
                    todo.append(nxt)
    return found


# ---------------------------------------------------------------- task side and kernel side

# The kernel-only places a task-side module must never import: they hold clusters, widgets, plots.
KERNEL_ONLY = (
    "dtfkit.cluster",
    "dtfkit.running_cluster",
    "dtfkit.cluster_display",
    "dtfkit.launch_script",
    "dtfkit.engine.owner",
    "dtfkit.engine.launchers",
    "dtfkit.lab.panel",
    "dtfkit.lab.runner",
    "dtfkit.lab.plots",
    "dtfkit.course.check",
    "dtfkit.ray",
)
KERNEL_ONLY_LIBRARIES = ("matplotlib", "ipywidgets", "IPython")


def is_task_side(module: str) -> bool:
    """A module that runs inside tasks: a program (``TASK_SIDE``) or a ``task_side`` module or package."""
    return not kernel_side(module) or "task_side" in module.split(".")


def _inside(module: str, places: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in places)


def task_side_reaching_the_kernel(root: Path = PACKAGE) -> list[str]:
    """``"a -> b"`` for every import (inside functions too) from task-side code into kernel-only code."""
    found = []
    for module, targets in sorted(module_graph(root, type_only=False).items()):
        if "task_side" not in module.split("."):
            continue
        for target in sorted(targets):
            if "kernel_side" in target.split(".") or _inside(target, KERNEL_ONLY):
                found.append(f"{module} -> {target}")
            elif target.startswith("dtfkit.recipes.") and target.count(".") == 2:
                # A recipe package answers from either side: task code names the task side.
                found.append(f"{module} -> {target} (name {target}.task_side)")
        tree = ast.parse(module_names(root)[module].read_text(encoding="utf-8"))
        skip = _type_only_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            found.extend(f"{module} -> {n}" for n in names if n.split(".")[0] in KERNEL_ONLY_LIBRARIES)
    return found


@functools.lru_cache(maxsize=256)
def module_level_names(path: Path) -> frozenset[str]:
    """The names a module defines or imports at its top level (read from its source, not imported)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(x.id for t in targets for x in ast.walk(t) if isinstance(x, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def task_side_names_missing(root: Path = PACKAGE) -> list[str]:
    """``"module: alias.name (...)"`` for each ``alias.name`` a task-side module reads from another
    recipe's ``task_side`` (imported as ``from dtfkit.recipes.x import task_side as alias``) that the
    other module does not define: found only when the task runs it, as an AttributeError."""
    modules = module_names(root)
    found = []
    for module, path in sorted(modules.items()):
        if "task_side" not in module.split("."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {
            a.asname or a.name: f"{node.module}.{a.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dtfkit.recipes.")
            for a in node.names
            if a.name == "task_side"
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                target = aliases[node.value.id]
                if node.attr not in module_level_names(modules[target]):
                    found.append(f"{module}: {node.value.id}.{node.attr} ({target} has no {node.attr})")
    return sorted(set(found))


def _sent_names(tree: ast.AST) -> set[str]:
    """Names handed to a task by ``x.run(name, ...)``, ``x.submit(name, ...)`` or ``fn=name``."""
    found = set()
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("run", "submit")
        ):
            continue
        sent = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "fn"), None)
        if isinstance(sent, ast.Name):
            found.add(sent.id)
    return found


def task_code_in_kernel_modules(root: Path = PACKAGE) -> list[str]:
    """``"module.function"`` for a function a kernel-side module defines and sends to tasks itself:
    what a task runs belongs in a ``task_side`` module (or a program of ``TASK_SIDE``)."""
    found = []
    for module, path in sorted(module_names(root).items()):
        if is_task_side(module):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        found.extend(f"{module}.{name}" for name in sorted(_sent_names(tree) & defined))
    return found


def recipe_modules_without_a_side(root: Path = PACKAGE) -> list[str]:
    """Modules of a recipe package that are neither its ``__init__`` nor one of its two sides."""
    return sorted(
        m
        for m in module_names(root)
        if m.startswith("dtfkit.recipes.")
        and m.count(".") == 3
        and m.rpartition(".")[2] not in ("task_side", "kernel_side")
    )


# ---------------------------------------------------------------- the rules


@pytest.mark.parametrize("beside", sorted(BESIDE_THE_PACKAGE))
def test_the_package_students_install_names_what_lives_beside_it_only_in_its_forwarders(beside):
    modules = module_names(PACKAGE)
    naming = {
        m
        for m, path in modules.items()
        if any(n == beside or n.startswith(beside + ".") for n in _all_imports(path))
    }
    assert naming == BESIDE_THE_PACKAGE[beside]
    assert not (PACKAGE / beside).exists()
    assert (PACKAGE.parent / beside / "__init__.py").is_file()


def _all_imports(path: Path) -> set[str]:
    """Every module name an ``import`` or ``from ... import`` in ``path`` names (absolute imports)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_no_import_cycle_between_folders():
    found, picture = folder_cycles()
    assert not found, f"import cycles between folders: {found}\nthe folder graph:\n{picture}"


def test_no_module_cycle_inside_the_engine():
    assert engine_cycles() == [], "import cycles between engine modules (e.g. local <-> zygotes)"


def test_the_engine_imports_nothing_above_it():
    above = engine_imports_from_above()
    assert above == [], f"the engine imports outside dtfkit.engine and BOTTOM: {above}"


@pytest.mark.parametrize("module", [*sorted(BOTTOM), "dtfkit.engine.platform.notebook"])
def test_the_bottom_layer_imports_only_the_bottom_layer(module):
    above = sorted(module_graph()[module] - set(BOTTOM))
    assert above == [], f"{module} must sit below everything, but imports {above}"


def test_every_engine_module_sits_in_a_wing():
    assert engine_modules_outside_wings() == [], (
        f"engine modules outside {WINGS}: put each in the wing of the process that runs it"
    )


def test_the_wings_import_only_downwards():
    assert wing_violations() == [], "\n".join(wing_violations())


def test_no_import_circle_between_modules_anywhere():
    assert module_cycles() == [], (
        f"import circles (imports under TYPE_CHECKING do not count): {module_cycles()}"
    )


def test_no_kernel_side_module_imports_tensorflow_when_imported():
    found = tensorflow_at_import()
    assert found == {}, "\n".join(" -> ".join(chain) for chain in found.values())


def test_importing_the_kernel_side_really_loads_no_tensorflow():
    # The AST rules above, checked once for real: every kernel-side module this machine can import.
    modules = [
        m
        for m in module_names(PACKAGE)
        if kernel_side(m) and not m.endswith("__main__") and m not in NOT_IMPORTED
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ImportError as e:\n"
        "        if getattr(e, 'name', '') and e.name.split('.')[0] == 'dtfkit': raise\n"
        "    if 'tensorflow' in sys.modules: print('TENSORFLOW', m); break\n"
        "else: print('clean')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=subprocess_env()
    )
    assert out.stdout.strip().endswith("clean"), out.stdout[-2000:] + out.stderr[-2000:]


def test_task_side_code_never_imports_kernel_only_code():
    found = task_side_reaching_the_kernel()
    assert found == [], "task-side modules import kernel-only code:\n" + "\n".join(found)


def test_what_task_side_code_reads_from_another_task_side_is_there():
    assert task_side_names_missing() == [], "\n".join(task_side_names_missing())


def test_no_kernel_side_module_defines_what_it_sends_to_a_task():
    assert task_code_in_kernel_modules() == [], "move these into a task_side module: " + ", ".join(
        task_code_in_kernel_modules()
    )


def test_every_recipe_module_is_one_of_its_two_sides():
    assert recipe_modules_without_a_side() == [], recipe_modules_without_a_side()
    singles = sorted(
        m for m in module_names(PACKAGE) if m.count(".") == 2 and m.startswith("dtfkit.recipes.")
    )
    packages = {m for m in module_names(PACKAGE) if m.startswith("dtfkit.recipes.") and m.count(".") == 2}
    assert all(module_names(PACKAGE)[m].name == "__init__.py" for m in singles), (
        f"a recipe is a package with task_side/kernel_side modules: {sorted(packages)}"
    )


def kernel_code_a_task_loads(root: Path = PACKAGE) -> str:
    """What a fresh interpreter loads of kernel-only code when it imports every task-side module of
    the package at ``root``, beyond what ``import dtfkit`` loads (every task imports the facade
    first): the ``LOADED [...]`` line it prints."""
    modules = sorted(m for m in module_names(root) if "task_side" in m.split("."))
    code = (
        "import importlib, sys\n"
        "import dtfkit\n"
        f"assert dtfkit.__file__.startswith({str(root)!r}), dtfkit.__file__\n"
        "facade = set(sys.modules)\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(n for n in set(sys.modules) - facade if 'kernel_side' in n.split('.') or n.split('.')[0] in "
        f"{KERNEL_ONLY_LIBRARIES!r} or any(n == p or n.startswith(p + '.') for p in {KERNEL_ONLY!r}))\n"
        "print('LOADED', bad)\n"
    )
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(root.parent), env["PYTHONPATH"]])
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=root.parent
    )
    return out.stdout + out.stderr[-2000:]


def _top_level_names(path: Path, *, imported: bool) -> set[str]:
    """Public names a module defines at its top level (and, with ``imported``, the names it imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif imported and isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return {n for n in names if not n.startswith("_")}


def recipe_stub_problems(root: Path = PACKAGE) -> list[str]:
    """What a recipe's ``__init__.pyi`` gets wrong: a public name a side defines that it does not list (the
    name would be unreachable from the package), or a listed name its side does not have."""
    problems = []
    for stub in sorted((root / "recipes").glob("*/__init__.pyi")):
        listed: dict[str, set[str]] = defaultdict(set)
        for node in ast.parse(stub.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.module:
                listed[node.module].update(a.name for a in node.names)
        recipe = stub.parent.name
        for side in ("task_side", "kernel_side"):
            path = stub.parent / f"{side}.py"
            if not path.exists():
                continue
            others = set().union(*(v for k, v in listed.items() if k != side))
            problems += [
                f"{recipe}.{side}.{n} is not in {recipe}/__init__.pyi"
                for n in sorted(_top_level_names(path, imported=False) - listed[side] - others)
            ]
            problems += [
                f"{recipe}/__init__.pyi lists {side}.{n}, which {side}.py does not have"
                for n in sorted(listed[side] - _top_level_names(path, imported=True))
            ]
    return problems


def test_every_recipe_stub_lists_what_its_sides_hold():
    assert recipe_stub_problems() == []


def test_a_recipe_function_missing_from_its_stub_is_found(tmp_path):
    root = _copy(tmp_path)
    side = root / "recipes" / "sync" / "kernel_side.py"
    side.write_text(side.read_text() + "\n\ndef new_driver() -> None:\n    pass\n")
    stub = root / "recipes" / "sync" / "__init__.pyi"
    stub.write_text(stub.read_text().replace("    run_sync as run_sync,\n", "    gone as gone,\n"))
    assert recipe_stub_problems(root) == [
        "sync.kernel_side.new_driver is not in sync/__init__.pyi",
        "sync.kernel_side.run_sync is not in sync/__init__.pyi",
        "sync/__init__.pyi lists kernel_side.gone, which kernel_side.py does not have",
    ]


def test_a_task_importing_its_code_loads_no_kernel_code():
    # Checked for real: what a task imports to unpickle a recipe's function pulls in no cluster,
    # no kernel-side module and no plotting library.
    found = kernel_code_a_task_loads()
    assert "LOADED []" in found, found


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
    _add_import(root, "dtfkit.engine.wire.layout", "from dtfkit.kube import tfjob_entry")  # inside a function
    _add_import(root, "dtfkit.kube.tfjob_entry", "import dtfkit.engine.wire.layout")
    found, picture = folder_cycles(root)
    assert any({"dtfkit.engine.wire", "dtfkit.kube"} <= set(cycle) for cycle in found), found
    assert "    dtfkit.engine.wire.layout -> dtfkit.kube.tfjob_entry" in picture.splitlines()
    assert "dtfkit.engine.wire.layout -> dtfkit.kube.tfjob_entry" in engine_imports_from_above(root)


def test_a_cycle_added_inside_the_engine_is_found(tmp_path):
    root = _copy(tmp_path)
    _add_import(root, "dtfkit.engine.launchers.zygotes", "from dtfkit.engine.launchers import local")
    assert any(
        {"dtfkit.engine.launchers.zygotes", "dtfkit.engine.launchers.local"} <= set(c)
        for c in engine_cycles(root)
    )


def test_an_upward_import_between_wings_is_found(tmp_path):
    root = _copy(tmp_path)
    _add_import(root, "dtfkit.engine.wire.protocol", "from dtfkit.engine.owner import calls")
    assert "dtfkit.engine.wire.protocol -> dtfkit.engine.owner.calls (wire imports owner)" in wing_violations(
        root
    )


def test_an_import_of_the_task_program_is_found(tmp_path):
    root = _copy(tmp_path)
    _add_import(root, "dtfkit.engine.launchers.local", "from dtfkit.engine.task import task_main")
    _add_import(root, "dtfkit.recipes.sync.kernel_side", "from dtfkit.engine.task import relay")
    found = wing_violations(root)
    assert any("(launchers imports task)" in v for v in found), found
    assert (
        "dtfkit.recipes.sync.kernel_side -> dtfkit.engine.task.relay (dtfkit.recipes.sync.kernel_side imports task)"
        in found
    ), found


def test_a_module_outside_the_wings_is_found(tmp_path):
    root = _copy(tmp_path)
    (root / "engine" / "helpers.py").write_text("X = 1\n")
    assert engine_modules_outside_wings(root) == ["dtfkit.engine.helpers"]


def test_a_circle_through_a_lazy_import_is_found_and_a_type_only_one_is_not(tmp_path):
    root = _copy(tmp_path)
    _add_import(root, "dtfkit.engine.wire.lines", "from dtfkit.engine.wire import protocol")
    _add_import(root, "dtfkit.engine.wire.protocol", "from dtfkit.engine.wire import lines")
    assert ["dtfkit.engine.wire.lines", "dtfkit.engine.wire.protocol"] in module_cycles(root)
    typed = _copy(tmp_path / "typed")
    path = typed / "engine" / "wire" / "lines.py"
    path.write_text(
        path.read_text()
        + "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dtfkit.engine.wire import protocol\n"
    )
    _add_import(typed, "dtfkit.engine.wire.protocol", "from dtfkit.engine.wire import lines")
    assert module_cycles(typed) == []


def test_tensorflow_reached_through_a_chain_of_imports_is_found(tmp_path):
    root = _copy(tmp_path)
    # A recipe that imports TensorFlow at its top, reached by the kernel through cluster -> ... -> it.
    path = root / "engine" / "platform" / "admission.py"
    path.write_text("import tensorflow as tf\n" + path.read_text())
    found = tensorflow_at_import(root)
    assert "dtfkit.cluster" in found, sorted(found)
    assert found["dtfkit.cluster"][-2:] == ["dtfkit.engine.platform.admission", "import tensorflow (line 1)"]
    # A task-side program may: the task's main imports TensorFlow inside functions today, at the top would be fine.
    main = root / "engine" / "task" / "task_main.py"
    main.write_text("import tensorflow\n" + main.read_text())
    assert not any(k.startswith("dtfkit.engine.task") for k in tensorflow_at_import(root))


def test_tensorflow_inside_a_function_is_not_an_import_time_import(tmp_path):
    root = _copy(tmp_path)
    _add_import(root, "dtfkit.engine.platform.admission", "import tensorflow")
    assert tensorflow_at_import(root) == {}


def test_task_side_code_reaching_the_kernel_is_found(tmp_path):
    root = _copy(tmp_path)
    _add_import(root, "dtfkit.recipes.sync.task_side", "from dtfkit.recipes.sync import kernel_side")
    _add_import(root, "dtfkit.course.task_side.ch04", "import matplotlib.pyplot")
    found = task_side_reaching_the_kernel(root)
    assert "dtfkit.recipes.sync.task_side -> dtfkit.recipes.sync.kernel_side" in found, found
    assert "dtfkit.course.task_side.ch04 -> matplotlib.pyplot" in found, found
    package = _copy(tmp_path / "package")  # the graph of a root is read once
    _add_import(package, "dtfkit.lab.task_side", "from dtfkit.recipes import timeline")
    found = task_side_reaching_the_kernel(package)
    assert (
        "dtfkit.lab.task_side -> dtfkit.recipes.timeline (name dtfkit.recipes.timeline.task_side)" in found
    ), found


def test_kernel_code_a_task_really_loads_is_found(tmp_path):
    root = _copy(tmp_path)
    path = root / "recipes" / "tf1" / "task_side.py"
    path.write_text(path.read_text() + "\nfrom dtfkit.recipes.sync import kernel_side as _planted  # noqa\n")
    found = kernel_code_a_task_loads(root)
    assert "'dtfkit.recipes.sync.kernel_side'" in found, found


def test_a_name_read_from_another_task_side_that_is_not_there_is_found(tmp_path):
    root = _copy(tmp_path)
    _add_import(root, "dtfkit.recipes.compression.task_side", "return timeline.plot_timeline")
    assert task_side_names_missing(root) == [
        "dtfkit.recipes.compression.task_side: timeline.plot_timeline "
        "(dtfkit.recipes.timeline.task_side has no plot_timeline)"
    ]


def test_task_code_written_in_a_kernel_module_is_found(tmp_path):
    root = _copy(tmp_path)
    path = root / "course" / "check" / "ch07.py"
    path.write_text(
        path.read_text() + "\n\ndef _count():\n    return 1\n\n\ndef _check(c):\n    c.run(_count)\n"
    )
    (root / "recipes" / "sync" / "helpers.py").write_text("X = 1\n")
    assert task_code_in_kernel_modules(root) == ["dtfkit.course.check.ch07._count"]
    assert recipe_modules_without_a_side(root) == ["dtfkit.recipes.sync.helpers"]


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


# Programs the engine runs as `python -S -m ...` (no site-packages: they start fast and import nothing they
# do not need); `import dtfkit`, which -m does first, must not need a third-party library.
RUN_WITHOUT_SITE_PACKAGES = ("dtfkit.engine.platform.netns", "dtfkit.engine.task.relay")


def test_the_engines_helper_programs_import_without_site_packages():
    for module in RUN_WITHOUT_SITE_PACKAGES:
        assert f'"-S", "-m", "{module}"' in module_names(PACKAGE)[module].read_text(), module
    env = dict(os.environ, PYTHONPATH=str(PACKAGE.parent))
    code = "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]; print('imported')"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, *RUN_WITHOUT_SITE_PACKAGES],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=PACKAGE.parent,
    )
    assert out.stdout.strip() == "imported", out.stderr[-2000:]
