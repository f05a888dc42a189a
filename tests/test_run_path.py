"""The path of one ``cluster.run()`` on the owner's side: how many hand-offs, through how many modules.

A call's state lives in one object (``calls.RunHandle``) and the events route answers to it,
so a ``run()`` goes cell → ``calls`` → ``events`` (the wait) → back, with the tasks'
processes (``process``) and their output (``output``) beside it, instead of zig-zagging
through the runtime's hand-offs (calls → runtime → tasks → events → tasks → process, 18
hand-offs between 7 modules before the redesign).

How it is counted: ``sys.setprofile`` records every function dtfkit runs in the thread that
waits (the cell's) during one ``run()`` of a function that prints, on two workers. A
**hop** is a hand-off from code in one module into code of another module of the owner's
wing (``dtfkit/engine/owner/``), the front end's entry included; each (from module, to
module) pair counts once, however many functions or times it is taken. The modules are
the owner's wing's modules whose code runs at all. Calls out of the wing (pickling in
``engine/wire``, the launcher's process handle) are listed, not counted. A line the function
prints is echoed by the events (events → output) when it arrives during the wait, or by
``live_output`` itself when it came before: which one is timing, so that hop always counts.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

import dtfkit
from dtfkit.engine.launchers.fake import FakeLauncher

ROOT = pathlib.Path(dtfkit.__file__).resolve().parent
OWNER = "engine/owner/"
MAX_HOPS = 8  # issue 42: a run() walked in 8 hops at most (6 today; 18 before the call had one object)
MAX_MODULES = 4
ECHO_HOP = ("engine/owner/events.py", "engine/owner/output.py")  # a line that arrives during the wait


def _name(code) -> str:
    return getattr(code, "co_qualname", code.co_name)  # co_qualname: Python 3.11 and later


def _module(code) -> str | None:
    path = pathlib.Path(code.co_filename)
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return None


def _printing(lines: int) -> int:
    for number in range(lines):
        print("line", number)
    return lines


def trace_run(cluster, fn, *args) -> tuple[object, set[tuple[str, str]], set[tuple[str, str]]]:
    """``cluster.run(fn, args)``'s result, the (caller, callee) function pairs that cross
    modules in the calling thread, and the same as (module, module) pairs."""
    functions: set[tuple[str, str]] = set()
    modules: set[tuple[str, str]] = set()

    def profile(frame, event, arg):
        if event != "call":
            return
        callee = _module(frame.f_code)
        if callee is None:
            return
        caller_frame = frame.f_back
        while caller_frame is not None and _module(caller_frame.f_code) is None:
            caller_frame = caller_frame.f_back  # through contextlib, threading, ...
        if caller_frame is None:
            return
        caller = _module(caller_frame.f_code)
        if caller != callee:
            functions.add((f"{caller}:{_name(caller_frame.f_code)}", f"{callee}:{_name(frame.f_code)}"))
            modules.add((caller, callee))

    sys.setprofile(profile)
    try:
        result = cluster.run(fn, args=args)
    finally:
        sys.setprofile(None)
    return result, functions, modules


def owner_hops(modules: set[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, b in modules if b.startswith(OWNER)}


def owner_modules(modules: set[tuple[str, str]]) -> set[str]:
    return {m for pair in modules for m in pair if m.startswith(OWNER)}


@pytest.fixture(scope="module")
def cluster():
    with dtfkit.LocalCluster(workers=2, launcher=FakeLauncher(), echo=lambda task, line: None) as c:
        c.run(_printing, args=(1,))  # first-call imports out of the way
        yield c


def test_a_run_takes_few_hops_through_few_owner_modules(cluster):
    result, functions, modules = trace_run(cluster, _printing, 3)
    assert result == {"worker:0": 3, "worker:1": 3}  # it did run, and printed on the way
    hops = owner_hops(modules) | {ECHO_HOP}
    listing = "\n".join(f"{a} -> {b}" for a, b in sorted(functions))
    assert len(owner_modules(modules)) <= MAX_MODULES, listing
    assert len(hops) <= MAX_HOPS, listing
    # The wait, the routing of answers and the echo are on the path: a trace that missed them
    # would count too little.
    assert ("engine/owner/calls.py", "engine/owner/events.py") in hops, listing
    assert ("engine/owner/events.py", "engine/owner/calls.py") in hops, listing
    assert ("engine/owner/calls.py", "engine/owner/output.py") in hops, listing
    assert any(callee.rsplit(".", 1)[-1].endswith("deliver") for _, callee in functions), listing


def test_the_count_sees_a_zig_zag():
    """The counting itself can fail: a path through the runtime's hand-offs counts each one."""
    modules = {
        ("running_cluster.py", "engine/owner/calls.py"),
        ("engine/owner/calls.py", "engine/owner/runtime.py"),
        ("engine/owner/runtime.py", "engine/owner/tasks.py"),
        ("engine/owner/tasks.py", "engine/owner/events.py"),
        ("engine/owner/events.py", "engine/owner/tasks.py"),
        ("engine/owner/tasks.py", "engine/owner/process.py"),
        ("engine/owner/calls.py", "engine/wire/sources.py"),
    }
    assert len(owner_hops(modules)) == 6
    assert owner_modules(modules) == {
        f"engine/owner/{m}.py" for m in ("calls", "runtime", "tasks", "events", "process")
    }
