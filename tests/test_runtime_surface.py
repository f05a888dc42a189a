"""The front ends touch the runtime only through its methods and frozen views.

``cluster.py``, ``running_cluster.py``, ``launch_script.py`` and ``ray/`` may read the runtime's
read-only properties and call its methods (``ALLOWED``); they never read or write a part
(``tasks``, ``events``, ``output``), a ``TaskProcess``, or a private name. (A call's
``RunHandle``, ``engine/owner/calls.py``, is the owner's side of a call, beside those
parts: it works them directly.) The check reads the source (AST), so it cannot
drift from the code: a new use of a runtime field fails here, naming file and line.
"""

from __future__ import annotations

import ast
import inspect
import pathlib

import pytest

from dtfkit.engine.owner.runtime import ClusterRuntime

ROOT = pathlib.Path(__file__).resolve().parent.parent / "dtfkit"
FRONT_ENDS = [
    ROOT / "cluster.py",
    ROOT / "running_cluster.py",
    ROOT / "launch_script.py",
    *sorted((ROOT / "ray").glob("*.py")),
]
# Names that hold a runtime in the front ends (self._rt, rt = self._rt, runtime).
RUNTIME_NAMES = {"rt", "runtime"}
RUNTIME_ATTRS = {"_rt"}
# What the front ends may use: methods, read-only properties, and settings fixed at creation
# (layout is a frozen ClusterLayout; settings the frozen ClusterSettings it was made with; metrics is the cluster's public MetricLog; launcher is the
# object the front end passed in, for what only it knows: Ray's node_of; launcher_description is
# its frozen facts).
ALLOWED = {
    "check_open",
    "close",
    "closed",
    "ensure_running",
    "id",
    "kill",
    "launcher",
    "layout",
    "live_output",
    "metrics",
    "settings",
    "restart",
    "set_echo",
    "stacks",
    "start",
    "start_client",
    "task_view",
    "wait_output",
}
# The runtime composes three parts and forwards nothing to them (issue 42: the one-line forwarders went);
# a front end reads what it needs of a part through these paths only, and writes nothing of a part.
PARTS = ("tasks", "events", "output")
PART_PATHS = {
    ("tasks", "snapshot"),  # the cluster, frozen (ClusterView)
    ("tasks", "pids"),
    ("tasks", "describe_launcher"),  # the launcher's frozen facts
    ("events", "wait_until"),  # launch()'s supervision
    ("events", "drain"),
    ("events", "waiting_for"),
    ("output", "echo"),
    ("output", "printed_seq"),
    ("output", "logbook", "lines"),
    ("output", "logbook", "dropped_note"),
    ("output", "logbook", "directory"),
}
FORBIDDEN_IMPORTS = {"TaskProcess", "Tasks", "Events", "Output"}


def _holder(node: ast.expr) -> str | None:
    """'runtime' if ``node`` is an expression that holds the runtime."""
    if isinstance(node, ast.Name) and node.id in RUNTIME_NAMES:
        return "runtime"
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        if node.attr in RUNTIME_ATTRS:
            return "runtime"
    return None


def _chain(node: ast.Attribute) -> tuple[str, ...] | None:
    """``("output", "logbook", "lines")`` for ``runtime.output.logbook.lines``; None if no runtime is at its root."""
    names: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        if _holder(current) == "runtime":  # self._rt itself: the chain starts after it
            break
        names.append(current.attr)
        current = current.value
    if _holder(current) is None:
        return None
    return tuple(reversed(names))


def _violations(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dtfkit.engine"):
            for alias in node.names:
                if alias.name in FORBIDDEN_IMPORTS:
                    found.append(f"{path.name}:{node.lineno}: imports {alias.name}")
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue  # judged once, as the longest attribute path
        chain = _chain(node)
        if not chain:
            continue
        where = f"{path.name}:{node.lineno}: runtime.{'.'.join(chain)}"
        if not isinstance(node.ctx, ast.Load) and (len(chain) == 1 or chain[0] in PARTS):
            found.append(f"{where} is assigned or deleted")
        elif any(name.startswith("_") for name in chain):
            found.append(f"{where} is not in the runtime's public surface")
        elif chain[0] in PARTS:
            if not any(chain[: len(path_)] == path_ for path_ in PART_PATHS):
                found.append(f"{where} is not in the runtime's public surface")
        elif chain[0] not in ALLOWED:
            found.append(f"{where} is not in the runtime's public surface")
    return found


@pytest.mark.parametrize("path", FRONT_ENDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_front_ends_use_only_the_public_runtime_surface(path):
    assert _violations(path) == []


def test_the_allowed_names_are_methods_or_read_only_properties():
    """What ALLOWED names exists on ClusterRuntime and cannot be assigned through."""
    settings_fixed_at_creation = {"id", "launcher", "layout", "metrics", "settings"}
    for name in sorted(ALLOWED - settings_fixed_at_creation):
        member = inspect.getattr_static(ClusterRuntime, name)
        if isinstance(member, property):
            assert member.fset is None, f"ClusterRuntime.{name} can be assigned"
        else:
            assert callable(member), f"ClusterRuntime.{name} is neither a method nor a property"


def test_the_check_catches_a_field_read_and_a_write(tmp_path):
    """The scan would fail on what the front ends did before the split."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "class C:\n"
        "    def f(self, runtime):\n"
        "        self._rt.procs[t].busy_with = None\n"
        "        runtime.printed_seq = 3\n"
        "        self._rt._wait_lock\n"
        "        self._rt.output.echo = print\n"
        "        self._rt.tasks.procs\n"
        "        self._rt.output.logbook.lines('worker:0')\n"
    )
    found = _violations(bad)
    assert any("runtime.output.echo is assigned" in v for v in found)
    assert any("runtime.tasks.procs is not" in v for v in found)
    assert not any("logbook" in v for v in found), found
    assert any("runtime.procs" in v for v in found)
    assert any("runtime.printed_seq is assigned" in v for v in found)
    assert any("runtime._wait_lock" in v for v in found)


def test_the_engine_imports_no_ui():
    """The progress display is passed in (``progress=``); the engine never imports it."""
    for path in sorted((ROOT / "engine").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            assert not any(n == "dtfkit.progress" for n in names), f"{path.name}:{node.lineno}"
