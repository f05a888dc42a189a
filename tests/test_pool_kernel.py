"""Warm from the first cell (``dtfkit.engine.launchers.prewarm``): in a real Jupyter kernel, ``import
dtfkit`` starts filling the warm pool, the chapter's first cluster adopts it, the notebook's
first cluster is remembered, and nothing is left once the kernel shuts down. Also: a cluster
that arrives while the pool is still importing TensorFlow takes those processes instead of
starting cold ones beside them; outside a kernel the import warms nothing.

How much sooner the first cluster is ready gets measured in ``benchmarks/`` (``firstcell``),
not asserted here."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest
from conftest import processes_of, subprocess_env, wait_gone, wait_until

import dtfkit
from dtfkit.engine.launchers import first_clusters, pool, prewarm
from dtfkit.engine.platform import netns, notebook

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WARM_TIMEOUT = 240  # three TensorFlow imports at once on a busy 2-core machine


def needs_isolation():
    ok, why = netns.isolation_available()
    if not ok:
        pytest.skip(f"the pool needs user namespaces: {why}")


class Kernel:
    """A real ipykernel started by jupyter_client, as jupyter_server starts one for a notebook."""

    def __init__(self, notebook: str, cwd: str, **env: str):
        from jupyter_client.manager import start_new_kernel

        kernel_env = subprocess_env(JPY_SESSION_NAME=notebook, **env)
        kernel_env.pop(pool.POOL_ENV, None)  # the kernel decides, as in a classroom
        self.km, self.kc = start_new_kernel(
            startup_timeout=120, kernel_name="python3", env=kernel_env, cwd=cwd
        )
        self.pid = self.km.provisioner.process.pid

    def run(self, code: str, timeout: float = WARM_TIMEOUT) -> str:
        """Execute ``code``; return its stdout, or fail the test with the kernel's traceback."""
        out: list[str] = []
        errors: list[str] = []

        def hook(msg):
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content["name"] == "stdout":
                out.append(content["text"])
            elif kind == "error":
                errors.append("\n".join(content["traceback"]))

        reply = self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        assert reply["content"]["status"] == "ok" and not errors, "\n".join(errors) or reply["content"]
        return "".join(out)

    def facts(self, code: str, timeout: float = WARM_TIMEOUT) -> dict:
        """Execute ``code`` that prints one JSON line starting with ``FACTS ``; return it parsed."""
        text = self.run(code, timeout)
        lines = [line for line in text.splitlines() if line.startswith("FACTS ")]
        assert lines, f"no FACTS line in the kernel's output:\n{text}"
        return json.loads(lines[-1][len("FACTS ") :])

    def shutdown(self) -> list[psutil.Process]:
        """Shut the kernel down as Jupyter does (a shutdown request); return its processes'
        handles taken just before, to check that none outlives it."""
        try:
            kernel = psutil.Process(self.pid)
            procs = [kernel, *kernel.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)
        return procs


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private DTFKIT_HOME (so the remembered first clusters are this test's own)."""
    folder = tmp_path / "h"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("DTFKIT_HOME", str(folder))
    return folder


def remembered(home, notebook: str):
    path = home / prewarm.MEMORY_FILE
    return json.loads(path.read_text())[notebook] if path.exists() else None


IMPORT = """
import json, dtfkit
from dtfkit.engine.launchers import prewarm
warm = prewarm.wait_warm(timeout={timeout})
p = prewarm.pool()
print("FACTS " + json.dumps({{"warm": warm, "note": prewarm.note(), "pids": p.pids() if p else []}}))
"""

FIRST_CLUSTER = """
cluster = dtfkit.LocalCluster(ps=1, workers=2, progress=False)
print("FACTS " + json.dumps({"note": cluster.pool_note, "adopted": cluster.adopted,
                             "pids": list(cluster.pids().values())}))
"""


def test_import_in_a_kernel_warms_the_pool_and_the_first_cluster_adopts_it(tmp_path, home):
    needs_isolation()
    notebook = str(tmp_path / "01_first.ipynb")
    kernel = Kernel(notebook, str(tmp_path))
    first: dict = {"pids": []}
    try:
        imported = kernel.facts(IMPORT.format(timeout=WARM_TIMEOUT))
        assert imported["warm"], f"the pool did not get warm after import dtfkit: {imported['note']}"
        assert imported["note"].startswith("filling 3 warm process(es)"), imported["note"]
        assert "not seen before" in imported["note"]
        assert len(imported["pids"]) == 1 + prewarm.DEFAULT_TASKS  # the namespace anchor + the processes

        first = kernel.facts(FIRST_CLUSTER)
        assert first["adopted"] == {"ps:0": True, "worker:0": True, "worker:1": True}, first["note"]
        assert first["note"].startswith("adopted 3 warm process(es)"), first["note"]
        assert set(first["pids"]) <= set(imported["pids"])  # the very processes the import started
        assert remembered(home, notebook) == {"tasks": 3, "env": {}, "cwd": str(tmp_path), "why": ""}
    finally:
        procs = kernel.shutdown()
    # The cluster was left open and the pool refilling: the kernel's exit ends all of it.
    pids = {p.pid for p in procs}
    assert set(first["pids"]) <= pids and len(procs) > 1 + 3  # the kernel, the cluster, the new fill
    alive = wait_gone(procs, 30)
    assert alive == [], f"alive 30 s after the kernel shut down: {[(p.pid, p.cmdline()[:3]) for p in alive]}"


def test_a_notebook_that_started_no_cluster_warms_nothing_the_next_time(tmp_path, home):
    needs_isolation()
    notebook = str(tmp_path / "05_no_cluster.ipynb")
    first = Kernel(notebook, str(tmp_path))
    try:
        note = first.facts(
            'import json, dtfkit\nfrom dtfkit.engine.launchers import prewarm\nassert prewarm.wait_decided(60)\nprint("FACTS " + json.dumps(prewarm.note()))'
        )
        assert note.startswith("filling 3"), note  # never seen: the default
    finally:
        procs = first.shutdown()
    assert wait_gone(procs, 30) == []
    assert remembered(home, notebook) == {"tasks": None, "why": "it started no cluster"}

    second = Kernel(notebook, str(tmp_path))
    try:
        facts = second.facts(IMPORT.format(timeout=30))
        assert facts == {
            "warm": False,
            "note": "no warm pool at import: the last time this notebook ran, it started no cluster",
            "pids": [],
        }
    finally:
        procs = second.shutdown()
    assert wait_gone(procs, 30) == []


def test_a_remembered_first_cluster_sizes_the_fill_and_sets_its_import_time_variables(tmp_path, home):
    notebook = str(tmp_path / "02_env.ipynb")
    env = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    (home / prewarm.MEMORY_FILE).write_text(
        json.dumps({notebook: {"tasks": 4, "env": env, "cwd": "", "why": ""}})
    )
    monkey = {prewarm.SESSION_ENV: notebook}
    code = (
        "from dtfkit.engine.launchers import prewarm, pool; import json;"
        "print(json.dumps([prewarm.plan(prewarm.remembered()), pool.import_env("
        f"{{**pool.task_environment('x', '/tmp/x'), **{env!r}}})]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=subprocess_env(**monkey)
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [[4, env], env]


def test_import_outside_a_kernel_warms_nothing():
    code = (
        "import sys, threading, dtfkit; from dtfkit.engine.launchers import prewarm;"
        "print(prewarm.note()); print([t.name for t in threading.enumerate()]);"
        "print('tensorflow' in sys.modules, 'dtfkit.engine.launchers.pool' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=subprocess_env(DTFKIT_POOL="1"),  # on, but a script is no notebook
    )
    assert out.returncode == 0, out.stderr
    note, threads, modules = out.stdout.splitlines()
    assert note == "not in a notebook kernel: nothing warmed at import"
    assert "dtfkit-prewarm" not in threads
    assert modules == "False False"


def test_a_paused_pool_spawns_nothing():
    p = pool.TaskPool(size=1, start=False)
    try:
        p.pause()
        p.fill()
        assert p.pids() == []
        assert p.wait_warm(1, timeout=5) is False  # not filling: returns at once
    finally:
        p.close()


def test_a_cluster_arriving_while_the_pool_imports_takes_those_processes(tmp_path):
    needs_isolation()
    p = pool.TaskPool(size=3)
    try:
        assert wait_until(lambda: len(p.pids()) == 4, 60), f"the pool did not spawn 3 processes: {p}"
        spawned = set(p.pids())  # the anchor and its 3 processes
        if p.warm_count():
            pytest.skip("a pool process got warm before the cluster arrived (nothing left to test)")
        with dtfkit.LocalCluster(ps=1, workers=2, pool=p, progress=False, name=None) as cluster:
            assert cluster.adopted == {"ps:0": True, "worker:0": True, "worker:1": True}, cluster.pool_note
            assert (
                set(cluster.pids().values()) == spawned
            )  # the namespace and processes: no cold one beside them
            assert "finished importing TensorFlow while the cluster started" in cluster.pool_note
    finally:
        pids = p.pids()
        p.close()
    assert wait_gone(processes_of(pids), 10) == []


def test_only_the_notebooks_own_choices_are_remembered(monkeypatch, home):
    from dtfkit.engine.launchers.choose import build_local_launcher as _local_launcher

    monkeypatch.setattr(notebook, "in_kernel", lambda: True)  # as in a notebook kernel
    monkeypatch.setenv(prewarm.SESSION_ENV, "ch.ipynb")

    def first_cluster(pool_arg, link=None, **env):
        monkeypatch.setitem(first_clusters._state, "first_seen", False)  # a fresh kernel
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        _local_launcher("auto", pool_arg, link)  # builds the launcher only: nothing starts
        return remembered(home, "ch.ipynb")

    # A pool turned off by the environment says nothing about the notebook.
    assert first_cluster(None, DTFKIT_POOL="0") is None
    assert first_cluster(False) == {
        "tasks": None,
        "why": "its first cluster could not use the pool (pool=False)",
    }
    monkeypatch.delenv(pool.POOL_ENV)
    assert first_cluster(True, link="100mbit") == {
        "tasks": None,
        "why": "its first cluster could not use the pool (link=)",
    }

    # launch()'s scripts are not the notebook's cluster: its choice (pool=False, links) is not remembered.
    from dtfkit.engine.launchers.choose import choose_launcher
    from dtfkit.engine.wire.layout import ClusterLayout

    layout = ClusterLayout.from_counts(ps=1, workers=2)
    for pool_arg, link in ((False, None), (True, "100mbit")):
        monkeypatch.setitem(first_clusters._state, "first_seen", False)
        (home / prewarm.MEMORY_FILE).unlink(missing_ok=True)
        choose_launcher(layout, network="auto", pool=pool_arg, link=link, remember=False).build()
        assert remembered(home, "ch.ipynb") is None, (pool_arg, link)
