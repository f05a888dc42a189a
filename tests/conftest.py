"""Shared helpers and fixtures of the dtfkit test suite.

Every test is checked for leftover processes: the descendants of the test process,
and every process carrying this session's ``DTFKIT_TEST_SESSION`` mark in its
environment (every process the suite starts inherits it, so this covers every task
with ``DTFKIT_CLUSTER`` set, even once orphaned, and never other users' clusters). Processes that survive a test by more
than ``LEAK_GRACE`` seconds fail it (and are killed, so that the next test starts
clean). Clusters shared by several tests are registered with ``share_cluster`` and
checked when they close instead. Under pytest-xdist each worker process imports this
file and gets its own session mark, so a worker only ever sees its own processes.

Tiers (tests/README.md): ``python -m pytest`` with no paths runs the fast tier, the tests
not marked ``slow``/``browser``/``ray`` plus the ``smoke`` ones; given paths (``.ci/run``
gives ``tests notebooks``) or ``-m``, it runs what they select. The markers are checked:
collection fails on an impossible combination, and a test outside ``slow`` that imports
TensorFlow, in this process or in any process it starts, fails (``tensorflow_is_slow``).

The package does not have to be installed: the repository root is put on
``sys.path`` here and on ``PYTHONPATH`` for every subprocess (``subprocess_env``).
"""

from __future__ import annotations

import atexit
import doctest
import importlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from section_reruns import insert_reruns
from translated_exercises import exercise_items

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SESSION_ENV = "DTFKIT_TEST_SESSION"
SESSION_ID = uuid.uuid4().hex[:12]
LEAK_GRACE = 10.0

# Everything this session starts inherits the mark, and keeps its cluster folders
# (sockets, logs, state files) in a private, short folder (Unix socket paths are
# limited to 108 bytes).
os.environ[SESSION_ENV] = SESSION_ID
# Kernels the tests start (nbval's, nbgrader's, a grader's) start the task zygote at their first
# cluster, not at `import dtfkit`: most start none, and a fast test must not import TensorFlow.
os.environ.setdefault("DTFKIT_ZYGOTE", "lazy")
_HOME = tempfile.mkdtemp(prefix="dtfk-")
os.environ["DTFKIT_HOME"] = _HOME
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)  # also after --collect-only

# Every Python process this session starts (PYTHONPATH reaches task processes too) runs
# this sitecustomize: the first import of TensorFlow leaves a file named after the process in
# TF_IMPORTS, which is how a test outside the ``slow`` tier is caught starting TensorFlow.
# A test that puts its own sitecustomize first on PYTHONPATH (test_lifecycle) is slow anyway.
TF_IMPORTS_ENV = "DTFKIT_TEST_TF_IMPORTS"
TF_IMPORTS = Path(_HOME) / "tf-imports"
_GUARD = Path(_HOME) / "tf-guard"
TF_IMPORTS.mkdir()
_GUARD.mkdir()
(_GUARD / "sitecustomize.py").write_text(
    """import os, sys


class _TensorFlowImportMark:
    # Marks the first import of tensorflow in this process (tests/conftest.py, tiers).
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            sys.meta_path.remove(self)
            folder = os.environ.get("DTFKIT_TEST_TF_IMPORTS")
            if folder and os.path.isdir(folder):
                open(os.path.join(folder, str(os.getpid())), "w").close()
        return None


sys.meta_path.insert(0, _TensorFlowImportMark())
"""
)
os.environ[TF_IMPORTS_ENV] = str(TF_IMPORTS)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(_GUARD), os.environ.get("PYTHONPATH")) if p)

# Cluster ids whose processes may outlive a single test (module/session fixtures).
_SHARED_IDS: set[str] = set()
# Supervisors of shared simulated Ray clusters: their Ray processes (the supervisor's process
# group, and every "ray::..." process below it: Ray's processes rename themselves, which hides
# their environment) may outlive a single test. The tasks their actors start carry their
# dtfkit cluster's id and are checked as usual.
_SHARED_RAY_ROOTS: set[int] = set()


def _shared_ray_processes() -> set[int]:
    pids: set[int] = set()
    for root in _SHARED_RAY_ROOTS:
        try:
            family = psutil.Process(root).children(recursive=True)
        except psutil.Error:
            continue
        for proc in family:
            try:
                if _group_of(proc) == root or (proc.cmdline() or [""])[0].startswith("ray::"):
                    pids.add(proc.pid)
            except psutil.Error:
                continue
    return pids


# --------------------------------------------------------------------------- helpers
def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a Python subprocess that must import dtfkit from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def in_a_classroom_kernel(module: str, function: str, timeout: float) -> Any:
    """``tests/<module>.<function>()``'s JSON-able result, computed in a fresh interpreter that runs as a
    classroom kernel (``DTFKIT_CLASSROOM=1``): checks that use TensorFlow in the kernel import it there,
    not in the test process."""
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        f"import {module} as t\n"
        f"print('RESULTS ' + json.dumps(t.{function}()))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(DTFKIT_CLASSROOM="1", TF_CPP_MIN_LOG_LEVEL="2"),
        cwd=str(REPO),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return json.loads(lines[-1][len("RESULTS ") :])


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds passed; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return bool(predicate())
        time.sleep(interval)


def is_gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait (bounded) until every process has ended; returns the ones still alive."""
    procs = list(procs)
    wait_until(lambda: all(is_gone(p) for p in procs), timeout)
    return [p for p in procs if not is_gone(p)]


def processes_of(pids: Iterable[int]) -> list[psutil.Process]:
    """psutil handles (pid + start time, so pid reuse cannot fool later checks)."""
    out = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return out


def zygote_pids() -> set[int]:
    """The pids of this process's task zygotes: they live as long as it does, not a test's leftovers."""
    from dtfkit.engine.launchers import zygotes

    return {zygote.popen.pid for zygote in zygotes.live()}


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def cluster_processes(cluster_id: str) -> list[psutil.Process]:
    """Every live process whose environment names ``cluster_id``."""
    out = []
    for proc in psutil.process_iter():
        if _environ(proc).get("DTFKIT_CLUSTER") == cluster_id and not is_gone(proc):
            out.append(proc)
    return out


def _tracked() -> dict[tuple[int, float], psutil.Process]:
    """Descendants of this process and every process of this session, minus shared clusters'."""
    found: dict[tuple[int, float], psutil.Process] = {}
    me = os.getpid()
    candidates = psutil.Process().children(recursive=True)
    shared_ray = _shared_ray_processes()
    shared_ray |= zygote_pids()  # what they forked is checked as any task is
    for proc in psutil.process_iter():
        # Every process this session starts carries the mark (a superset of the
        # processes with DTFKIT_CLUSTER set), even after it was orphaned.
        if proc.pid != me and _environ(proc).get(SESSION_ENV) == SESSION_ID:
            candidates.append(proc)
    for proc in candidates:
        try:
            if is_gone(proc):
                continue
            key = (proc.pid, proc.create_time())
        except psutil.Error:
            continue
        if _environ(proc).get("DTFKIT_CLUSTER") in _SHARED_IDS or proc.pid in shared_ray:
            continue
        found[key] = proc
    return found


def _group_of(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except OSError:
        return None


def _describe(proc: psutil.Process) -> str:
    try:
        cmd = " ".join(proc.cmdline())[:160]
    except psutil.Error:
        cmd = "?"
    return f"pid {proc.pid}: {cmd}"


@contextmanager
def share_cluster(cluster):
    """Exempt a long-lived cluster from the per-test leak check; on exit, close it and
    check that every one of its processes ended."""
    _SHARED_IDS.add(cluster.id)
    try:
        yield cluster
    finally:
        survivors_before = cluster_processes(cluster.id)
        cluster.close()
        _SHARED_IDS.discard(cluster.id)
        alive = wait_gone(survivors_before + cluster_processes(cluster.id), LEAK_GRACE)
        for proc in alive:
            proc.kill()
        assert not alive, f"closing shared cluster {cluster.id} left: {[_describe(p) for p in alive]}"


@contextmanager
def share_ray_cluster(simulated):
    """Exempt a shared ``SimulatedRayCluster``'s Ray processes from the per-test leak check;
    on exit, close it and check that none of them is left."""
    _SHARED_RAY_ROOTS.add(simulated.pid)
    _SHARED_IDS.add(simulated.id)
    try:
        yield simulated
    finally:
        members = [psutil.Process(pid) for pid in _shared_ray_processes() if psutil.pid_exists(pid)]
        simulated.close()
        _SHARED_RAY_ROOTS.discard(simulated.pid)
        _SHARED_IDS.discard(simulated.id)
        alive = wait_gone(members + cluster_processes(simulated.id), LEAK_GRACE)
        for proc in alive:
            proc.kill()
        assert not alive, f"closing the shared simulated Ray cluster left: {[_describe(p) for p in alive]}"


def listening_ports(net_dir: str = "/proc/self/net") -> set[int]:
    """TCP ports in LISTEN state in the network namespace that ``net_dir`` shows."""
    ports = set()
    for name in ("tcp", "tcp6"):
        try:
            with open(os.path.join(net_dir, name)) as f:
                lines = f.readlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def port_of(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


class LineReader:
    """Reads a subprocess's stdout on a thread, so the test can wait for a line with a bound."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, pattern: str, timeout: float) -> re.Match:
        """Wait for a line matching ``pattern`` (regex search); fail with the output so far."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._queue.get(timeout=max(0.0, remaining))
            except queue.Empty:
                pytest.fail(
                    f"no line matching {pattern!r} within {timeout} s; output:\n" + "\n".join(self.lines)
                )
            if line is None:
                self._queue.put(None)
                pytest.fail(
                    f"the process ended before printing {pattern!r}; output:\n" + "\n".join(self.lines)
                )
            self.lines.append(line)
            match = regex.search(line)
            if match:
                return match

    def rest(self, timeout: float) -> str:
        """Everything printed until the process closes its stdout (bounded)."""
        self._thread.join(timeout)
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        return "\n".join(self.lines)


def start_script(tmp_path: Path, code: str, name: str = "script.py", **popen_kw) -> subprocess.Popen:
    """Write ``code`` to a file and run it with this interpreter, stdout+stderr piped as text."""
    path = tmp_path / name
    path.write_text(code)
    return subprocess.Popen(
        [sys.executable, "-u", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=subprocess_env(),
        cwd=str(tmp_path),
        **popen_kw,
    )


def parse_json_line(text: str, prefix: str) -> dict:
    for line in text.splitlines():
        if line.startswith(prefix):
            return json.loads(line[len(prefix) :])
    raise AssertionError(f"no line starting with {prefix!r} in:\n{text}")


# -------------------------------------------------------------------------- tiers
# Marked with any of these, a test is in the full run only (unless it is also ``smoke``).
FULL_RUN_MARKERS = ("slow", "browser", "ray")


def _marks(item: pytest.Item) -> set[str]:
    return {mark.name for mark in item.iter_markers()}


def in_fast_tier(item: pytest.Item) -> bool:
    """The fast tier: every test not marked slow/browser/ray, and the slow ones marked smoke."""
    marks = _marks(item)
    return "smoke" in marks or not marks & set(FULL_RUN_MARKERS)


def tier_marker_errors(items: Iterable[pytest.Item]) -> list[str]:
    """The tests whose markers contradict each other (tests/README.md, "Which tier")."""
    errors = []
    for item in items:
        marks = _marks(item)
        if marks & {"browser", "ray"} and "slow" not in marks:
            errors.append(
                f"{item.nodeid}: browser and ray tests start processes for seconds: mark it slow too"
            )
        if "smoke" in marks and ("slow" not in marks or marks & {"browser", "ray"}):
            errors.append(f"{item.nodeid}: smoke picks a slow test for the fast tier (not browser or ray)")
    return errors


def runs_fast_tier(config: pytest.Config) -> bool:
    """``pytest`` with no paths and no ``-m``: the fast tier. Paths or ``-m`` select for themselves."""
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS and not config.option.markexpr


# -------------------------------------------------------------------------- hooks
def pytest_collection_modifyitems(session, config, items):
    # Functions defined in test modules are sent to the tasks by value: the tasks
    # cannot import the test modules (tests/ is not a package on their path).
    import cloudpickle

    for module in {getattr(item, "module", None) for item in items}:
        if module is not None and module.__name__ in sys.modules:
            cloudpickle.register_pickle_by_value(module)

    # nbval runs each chapter's stateful sections twice (section_reruns.py). The hook lives here,
    # not in a notebooks/conftest.py: both would be imported as the module "conftest", and the
    # test modules' ``from conftest import ...`` would get whichever pytest loaded last.
    insert_reruns(items)
    # Of the translated chapters, one runs whole and the others' exercises alone (translated_exercises.py).
    kept = exercise_items(items)
    if len(kept) != len(items):
        kept_ids = {id(item) for item in kept}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept_ids])
        items[:] = kept

    errors = tier_marker_errors(items)
    if errors:
        raise pytest.UsageError("tier markers contradict each other:\n" + "\n".join(errors))
    if runs_fast_tier(config):
        full_only = [item for item in items if not in_fast_tier(item)]
        if full_only:
            config.hook.pytest_deselected(items=full_only)
            items[:] = [item for item in items if in_fast_tier(item)]


# ----------------------------------------------------------------------- fixtures
@pytest.fixture(autouse=True)
def tensorflow_is_slow(request):
    """Fail a test outside the ``slow`` tier that imports TensorFlow here or in a process it starts.

    Importing TensorFlow takes seconds per process: such a test belongs to the full run
    (``slow``), or runs on ``FakeLauncher``. Checked after the leftover check, so every
    process the test started has ended (and left its mark) by then.
    """
    if request.node.get_closest_marker("slow"):
        yield
        return
    marks_before = set(os.listdir(TF_IMPORTS))
    imported_before = "tensorflow" in sys.modules
    yield
    new_marks = set(os.listdir(TF_IMPORTS)) - marks_before
    here = not imported_before and "tensorflow" in sys.modules
    if new_marks or here:
        where = ["this test process"] if here else []
        where += [f"process {pid}" for pid in sorted(new_marks)]
        pytest.fail(
            f"a test outside the slow tier imported TensorFlow ({', '.join(where)}): mark it "
            "@pytest.mark.slow, or run it on FakeLauncher (tests/README.md, 'Which tier')"
        )


@pytest.fixture(autouse=True)
def no_leftover_processes(tensorflow_is_slow):
    """Fail a test that leaves processes behind (after a bounded wait of LEAK_GRACE s)."""
    before = set(_tracked())
    yield
    new = {k: p for k, p in _tracked().items() if k not in before}
    if not new:
        return
    alive = wait_gone(new.values(), LEAK_GRACE)
    if alive:
        text = [_describe(p) for p in alive]
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                pass
        wait_gone(alive, 5)
        pytest.fail(f"the test left {len(alive)} process(es) running after {LEAK_GRACE:g} s: {text}")


def _sigint_as_in_a_terminal() -> None:
    """Give this process Python's own Ctrl-C handling, as a ``pytest`` started in a terminal has.

    A pytest-xdist worker starts with SIGINT *ignored* (execnet leaves Ctrl-C to the controller),
    and an ignored signal stays ignored in every program the worker starts: a script a test
    interrupts to check Ctrl-C never saw it, and whether it did depended on which test had run
    first in that worker (test_classroom's kernels happened to install Python's handler).
    """
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)


_sigint_as_in_a_terminal()


@pytest.fixture(autouse=True)
def sigint_left_as_found():
    """Put back SIGINT's handler and mask if a test changed them, and say which test did.

    An xdist worker runs many files in one process: a test that leaves SIGINT handled
    otherwise or blocked changes what Ctrl-C does in every later test of the worker, and in
    the programs those start. Restoring here keeps every test's start alike; the warning
    names the test that changed them.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGINT)
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    yield
    changed = []
    if signal.getsignal(signal.SIGINT) is not handler:
        changed.append(f"handler {signal.getsignal(signal.SIGINT)!r} instead of {handler!r}")
        signal.signal(signal.SIGINT, handler)
    if (signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())) != blocked:
        changed.append("SIGINT " + ("unblocked" if blocked else "blocked"))
        signal.pthread_sigmask(signal.SIG_BLOCK if blocked else signal.SIG_UNBLOCK, {signal.SIGINT})
    if changed:
        warnings.warn(f"the test left SIGINT changed ({'; '.join(changed)}): put back", stacklevel=1)


@pytest.fixture(scope="session", autouse=True)
def _session_home():
    """At the end of the session nothing of ours may run; then remove the cluster folders."""
    yield
    from dtfkit.engine.launchers import zygotes

    zygotes.close_all()  # what atexit would do: the zygotes end with this process
    me = os.getpid()
    leftovers = [
        p
        for p in psutil.process_iter()
        if p.pid != me and _environ(p).get(SESSION_ENV) == SESSION_ID and not is_gone(p)
    ]
    alive = wait_gone(leftovers, LEAK_GRACE)
    for proc in alive:
        proc.kill()
    shutil.rmtree(_HOME, ignore_errors=True)
    assert not alive, (
        f"processes of this test session still running at its end: {[_describe(p) for p in alive]}"
    )


@pytest.fixture(scope="session")
def shared_cluster():
    """One isolated 1 ps + 2 workers cluster for every test that does not destroy it."""
    import dtfkit

    cluster = dtfkit.LocalCluster(ps=1, workers=2, progress=False, start_timeout=60, name=None)
    with share_cluster(cluster):
        yield cluster


@pytest.fixture
def cluster(shared_cluster):
    """The shared cluster, with every task running (a task an earlier test killed is restarted)."""
    if any(state != "running" for state in shared_cluster.status().values()):
        shared_cluster.restart()
    assert all(state == "running" for state in shared_cluster.status().values()), shared_cluster.status()
    return shared_cluster


@pytest.fixture
def no_spawn(monkeypatch):
    """Make any attempt to start a process fail the test (for 'fails before starting anything')."""
    started: list = []

    class ForbiddenPopen:
        def __init__(self, args, *a, **kw):
            started.append(args)
            raise AssertionError(f"a process was started: {args!r}")

    monkeypatch.setattr(subprocess, "Popen", ForbiddenPopen)
    return started


def doctest_recipe(package) -> doctest.TestResults:
    """``doctest.testmod`` over a recipe's sides (``task_side``, ``kernel_side``), the counts summed;
    a plain module is tested as it is."""
    if not hasattr(package, "__path__"):  # a plain module
        return doctest.testmod(package, optionflags=doctest.NORMALIZE_WHITESPACE)
    failed = attempted = 0
    for side in ("task_side", "kernel_side"):
        try:
            module = importlib.import_module(f"{package.__name__}.{side}")
        except ModuleNotFoundError as e:
            if e.name != f"{package.__name__}.{side}":
                raise
            continue
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        failed, attempted = failed + result.failed, attempted + result.attempted
    return doctest.TestResults(failed, attempted)
