"""First cell: a chapter's first cluster in a FRESH Jupyter kernel (issue 14, point 5).

Each run starts a new ipykernel (jupyter_client, as jupyter_server does for a notebook),
executes ``import dtfkit``, lets the learner "read" for a while, then times
``dtfkit.LocalCluster(ps=1, workers=2)`` inside the kernel (import to ready, the kernel's
own clock), closes it and shuts the kernel down. Variants, interleaved so that they see
the same machine load:

(a) cold: ``DTFKIT_POOL=0`` in the kernel, 20 s of reading (the baseline);
(b) warm from import: the pool on (the default in a kernel), 20 s of reading;
(c) pool on, 5 s of reading (the pool is still filling when the cluster comes);
(d) pool on, no reading at all (the cluster comes right after the import).

(c) and (d) must not be slower than (a) by more than noise: the cluster takes the
processes still importing TensorFlow instead of starting cold ones beside them.

Also the memory an idle kernel with a warm pool costs: the summed resident set (RSS) of
the pool's processes (its namespace anchor and the 3 warm processes), read with psutil in
run (b) once its first cluster is closed and the pool has refilled (waited for, untimed),
and their unique set (USS: what ending them would free; RSS counts the shared libraries
once per process).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READING_S = 20.0

IMPORT = "import json, time, dtfkit\nfrom dtfkit.engine.launchers import prewarm\nprewarm.wait_decided(60)\n"
FIRST = """
t = time.monotonic()
cluster = dtfkit.LocalCluster(ps=1, workers=2, progress=False)
ready = time.monotonic() - t
print("FACTS " + json.dumps({"ready": ready, "note": cluster.pool_note, "adopted": cluster.adopted}))
cluster.close()
"""
POOL_STATE = """
p = prewarm.pool()
print("FACTS " + json.dumps({"warm": p.warm_count() if p else 0, "pids": p.pids() if p else [], "note": prewarm.note()}))
"""
REFILLED = """
p = prewarm.pool()
print("FACTS " + json.dumps({"warm": p.wait_warm(3, timeout=300), "pids": p.pids()}))
"""


class Kernel:
    """A fresh ipykernel for one run."""

    def __init__(self, env: dict[str, str], cwd: str):
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(startup_timeout=120, kernel_name="python3", env=env, cwd=cwd)
        self.proc = psutil.Process(self.km.provisioner.process.pid)

    def facts(self, code: str, timeout: float = 600) -> dict:
        out: list[str] = []
        errors: list[str] = []

        def hook(msg):
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                errors.append("\n".join(msg["content"]["traceback"]))

        self.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        if errors:
            raise RuntimeError("the kernel raised:\n" + "\n".join(errors))
        lines = [line for line in "".join(out).splitlines() if line.startswith("FACTS ")]
        return json.loads(lines[-1][len("FACTS ") :]) if lines else {}

    def shutdown(self) -> None:
        """Shut down as Jupyter does and wait (bounded) until every process of it is gone,
        so that the next run starts on a machine our previous run no longer loads."""
        try:
            procs = [self.proc, *self.proc.children(recursive=True)]
        except psutil.Error:
            procs = []
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)
        _, alive = psutil.wait_procs(procs, timeout=60)
        if alive:
            raise RuntimeError(f"processes alive 60 s after the kernel shut down: {[p.pid for p in alive]}")


def one_run(pool_on: bool, reading: float, home: str, notebook: str) -> tuple[float, dict, dict]:
    """(ready seconds, cluster facts, pool facts) for one fresh kernel."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    env["DTFKIT_HOME"] = home
    env["JPY_SESSION_NAME"] = notebook
    env.pop("DTFKIT_POOL", None)
    if not pool_on:
        env["DTFKIT_POOL"] = "0"
    kernel = Kernel(env, cwd=os.path.dirname(notebook))
    try:
        kernel.facts(IMPORT)
        pool: dict = {}
        time.sleep(reading)  # the learner reads (a benchmark, not a test: nothing to wait for)
        if pool_on and reading >= READING_S:
            pool = kernel.facts(POOL_STATE)  # how warm it is after the reading (a few ms)
        facts = kernel.facts(FIRST)
        if not facts:
            raise RuntimeError("the first cluster printed nothing")
        if pool:
            # The memory of an idle kernel with a warm pool: the cluster is closed, and the
            # pool refilled after it (anchor + 3 processes), waited for, untimed.
            refilled = kernel.facts(REFILLED)
            if not refilled["warm"]:
                raise RuntimeError("the pool did not refill within 300 s")
            pool["rss"], pool["uss"] = _memory(refilled["pids"])
        return facts["ready"], facts, pool
    finally:
        kernel.shutdown()


def _memory(pids: list[int]) -> tuple[float, float]:
    rss = uss = 0
    for pid in pids:
        try:
            info = psutil.Process(pid).memory_full_info()
        except psutil.Error:
            continue
        rss += info.rss
        uss += info.uss
    return rss / 2**20, uss / 2**20


def bench_firstcell(repeat: int, log: Callable[[str], None], Row) -> list:
    """Rows for ``benchmarks/run.py`` (``Row`` is its row class)."""
    from dtfkit.engine.platform import netns

    ok, why = netns.isolation_available()
    if not ok:
        return [Row("firstcell", "first cluster in a fresh kernel", text=f"skipped: {why}")]
    cold = Row("firstcell", f"(a) pool off, import + {READING_S:g} s reading -> first cluster ready")
    warm = Row(
        "firstcell",
        f"(b) pool on, import + {READING_S:g} s reading -> first cluster ready",
        baseline=cold.label,
    )
    early = Row("firstcell", "(c) pool on, import + 5 s reading -> first cluster ready", baseline=cold.label)
    now = Row("firstcell", "(d) pool on, cluster right after import", baseline=cold.label)
    rss = Row("firstcell", "idle kernel, warm pool: RSS of the pool's processes", unit="MiB")
    uss = Row("firstcell", "idle kernel, warm pool: USS of the pool's processes", unit="MiB")
    notes: dict[str, list[str]] = {"warm": [], "early": [], "now": [], "pool": [], "warm_at": []}
    home = tempfile.mkdtemp(prefix="dtfb-")
    try:
        notebook = os.path.join(ROOT, "notebooks", "01_clusterspec_basics.ipynb")
        for i in range(repeat):
            t, _, _ = one_run(False, READING_S, home, notebook)
            cold.values.append(t)
            t, facts, pool = one_run(True, READING_S, home, notebook)
            warm.values.append(t)
            notes["warm"].append(f"{sum(facts['adopted'].values())}/3")
            notes["pool"].append(pool.get("note", ""))
            notes["warm_at"].append(f"{pool['warm']}/3")
            rss.values.append(pool["rss"])
            uss.values.append(pool["uss"])
            t, facts, _ = one_run(True, 5.0, home, notebook)
            early.values.append(t)
            notes["early"].append(f"{sum(facts['adopted'].values())}/3")
            t, facts, _ = one_run(True, 0.0, home, notebook)
            now.values.append(t)
            notes["now"].append(f"{sum(facts['adopted'].values())}/3")
            log(
                f"  firstcell #{i + 1}: cold {cold.values[-1]:.2f} warm {warm.values[-1]:.2f} "
                f"5s {early.values[-1]:.2f} 0s {now.values[-1]:.2f} pool RSS {rss.values[-1]:.0f} MiB "
                f"USS {uss.values[-1]:.0f} MiB"
            )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    warm.note = (
        f"warm after the reading, per run: {', '.join(notes['warm_at'])}; "
        f"tasks adopted from the pool (warm or still importing): {', '.join(notes['warm'])}"
    )
    early.note = f"tasks adopted from the pool per run: {', '.join(notes['early'])}"
    now.note = f"tasks adopted from the pool per run: {', '.join(notes['now'])}"
    rss.note = "anchor + 3 warm processes, read after the first cluster closed and the pool refilled"
    uss.note = "what ending them frees (RSS counts shared libraries once per process)"
    return [cold, warm, early, now, rss, uss]


if __name__ == "__main__":
    sys.exit("run it through benchmarks/run.py: python -m benchmarks --only firstcell")
