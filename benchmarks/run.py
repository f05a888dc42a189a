"""dtfkit benchmarks, side by side with the hand-rolled baselines (issue 6).

    python -m benchmarks                      # every benchmark but the notebook suite
    python benchmarks/run.py --only ready,import --repeat 5
    python -m benchmarks --notebooks          # also the whole notebook suite under nbval

Benchmarks (``--only`` takes these names):

ready     cluster ready, 1 ps + 2 workers: (a) hand-launched servers, polling their
          ports; (b) the TF docs pattern, background processes + sleep(10); (c) dtfkit
          cold (no zygote yet: it imports TensorFlow once, then forks the tasks); (d) dtfkit
          with the zygote ready; (e) 1 ps + 8 workers with the zygote ready; the CPU seconds
          and PSS of (a) and (c). Interleaved, ``--repeat`` times.
seed      the tutorial's MNIST script (dtfkit/examples/distributed_mnist.py with the tutorial's
          behaviour: ``--device_filters=False --poll_chief_secs=0``, TF's default 120 s
          stop grace), 2 ps + 2 workers, 400 steps, async and sync: hand-launched vs
          ``python -m dtfkit launch``; start to every process gone, and last step to
          every process gone. ``--repeat-long`` times (default 1: a sync run takes 2+ min).
shutdown  the kit's TF1 recipe (``train_between_graph``, 400 steps, 2 ps + 2 workers) in a
          LocalCluster: last step to every process gone, async and sync.
import    ``import dtfkit`` time and whether it imported TensorFlow; resident memory of a
          1 ps + 2 worker cluster and of the task zygote.
links     emulated links (``LocalCluster(link=...)``): the time of an S-byte transfer from
          ps to a worker at 10, 50 and 200 mbit/s (S = 2 s worth), a plain TCP stream and a
          TensorFlow tensor read across the cluster, against S/rate (ratio >= 1: the link
          holds the rate); and the start of 1 ps + 4 workers with and without links.
notebooks the whole notebook suite under nbval (only with ``--notebooks``; 6+ minutes).

Prints a table and writes ``benchmarks/RESULTS.md`` (machine, load average during the
run, medians, ratios, goals met or missed).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import psutil  # noqa: E402

from dtfkit.ports import free_ports  # noqa: E402

SEED_SCRIPT = os.path.join(ROOT, "dtfkit", "examples", "distributed_mnist.py")
SEED_FLAGS = ["--device_filters=False", "--poll_chief_secs=0", "--train_steps=400"]
SERVER = (
    "import sys, tensorflow as tf; spec = tf.train.ClusterSpec({{'ps': {ps}, 'worker': {workers}}}); "
    "tf.distribute.Server(spec, job_name=sys.argv[1], task_index=int(sys.argv[2])).join()"
)
# The hand-launched server, with a time stamp (time.monotonic(), the machine's clock) after each step.
SERVER_STAMPED = (
    "import time; t0, c0 = time.monotonic(), time.process_time(); import sys, tensorflow as tf; "
    "t1, c1 = time.monotonic(), time.process_time(); "
    "spec = tf.train.ClusterSpec({{'ps': {ps}, 'worker': {workers}}}); "
    "s = tf.distribute.Server(spec, job_name=sys.argv[1], task_index=int(sys.argv[2])); "
    "print('STAMPS', t0, t1, time.monotonic(), c0, c1, time.process_time(), flush=True); s.join()"
)
# The same server, importing TensorFlow as dtfkit's tasks do (the collector paused, then frozen):
# beside (c), what is left is dtfkit's own start-up, not the import's garbage collections.
SERVER_STAMPED_GC = SERVER_STAMPED.replace(
    "import sys, tensorflow as tf; ",
    "import gc, sys; gc.disable(); import tensorflow as tf; gc.freeze(); gc.enable(); ",
)
HAND_PHASES = ("spawn", "tensorflow imported", "server up", "port seen open")
ALL = ("ready", "seed", "shutdown", "import", "links")


# ------------------------------------------------------------------ helpers
@dataclass
class Row:
    bench: str
    label: str
    values: list[float] = field(default_factory=list)
    note: str = ""
    unit: str = "s"
    baseline: str | None = None  # label of the row the ratio is taken against
    text: str | None = None  # shown instead of a median (e.g. "did not exit within 90 s")

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None


class LoadSampler:
    """Samples the 1-minute load average every few seconds while the benchmarks run."""

    def __init__(self, every: float = 5.0):
        self.samples: list[float] = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._thread.start()

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> str:
        self._stop.set()
        s = self.samples
        return f"min {min(s):.1f}, median {statistics.median(s):.1f}, max {max(s):.1f} ({len(s)} samples)"


def env_for_tasks() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def end(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def all_gone(pids: list[int], timeout: float = 30.0) -> float:
    """Wait until every pid has ended (zombies count as ended); returns the time.monotonic() then."""
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            break
        time.sleep(0.02)
    return time.monotonic()


# -------------------------------------------------------------- 1. ready
def ready_hand(
    phases: dict[str, dict[str, list[tuple[float, float]]]] | None = None,
    *,
    server: str = SERVER_STAMPED,
    costs: dict[str, list[float]] | None = None,
) -> float:
    """Seconds until all three hand-launched servers accept connections; ``phases`` gets where it went."""
    ports = free_ports(3)
    code = server.format(ps=[f"localhost:{ports[0]}"], workers=[f"localhost:{p}" for p in ports[1:]])
    start = time.monotonic()
    tasks = (("ps", 0), ("worker", 0), ("worker", 1))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, job, str(i)],
            env=env_for_tasks(),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for job, i in tasks
    ]
    try:
        deadline = start + 180
        while not all(port_open(p) for p in ports):  # the hand-launched way: poll the ports
            if time.monotonic() > deadline:
                raise TimeoutError("hand-launched servers did not open their ports in 180 s")
            time.sleep(0.05)
        ready = time.monotonic()
        if costs is not None:
            pids = [proc.pid for proc in procs]
            costs.setdefault("cpu", []).append(cpu_seconds(pids))
            costs.setdefault("pss", []).append(pss_mib(pids))
        if phases is not None:
            for (job, i), proc in zip(tasks, procs, strict=True):
                # The stamp line is printed right after the server is made; its port is open, so it is on its way.
                t0, t1, t2, c0, c1, c2 = (float(x) for x in proc.stdout.readline().split()[1:7])
                walls = (t0 - start, t1 - t0, t2 - t1, ready - t2)
                cpus = (
                    c0,
                    c1 - c0,
                    c2 - c1,
                    0.0,
                )  # the poller's wait costs the server no CPU of its own start
                for phase, seconds, cpu in zip(HAND_PHASES, walls, cpus, strict=True):
                    phases.setdefault(phase, {}).setdefault(f"{job}:{i}", []).append((seconds, cpu))
        return ready - start
    finally:
        end(procs)


def ready_docs() -> tuple[float, bool]:
    """The TF docs notebook pattern: start in the background, then time.sleep(10)."""
    ports = free_ports(3)
    code = SERVER.format(ps=[f"localhost:{ports[0]}"], workers=[f"localhost:{p}" for p in ports[1:]])
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, job, str(i)], env=env_for_tasks(), stderr=subprocess.DEVNULL
        )
        for job, i in (("ps", 0), ("worker", 0), ("worker", 1))
    ]
    try:
        time.sleep(10)
        really = all(port_open(p) for p in ports)
        return time.monotonic() - start, really
    finally:
        end(procs)


def ready_dtfkit(
    phases: dict[str, dict[str, list[tuple[float, float]]]] | None = None,
    *,
    workers: int = 2,
    costs: dict[str, list[float]] | None = None,
) -> float:
    """Seconds until ``LocalCluster(ps=1, workers=workers)`` returns; for a cold one, ``phases`` gets
    where it went; ``costs`` gets the CPU seconds and PSS (MiB) of its tasks and the zygote."""
    import dtfkit
    from dtfkit.engine.launchers import zygotes

    start = time.monotonic()
    cluster = dtfkit.LocalCluster(ps=1, workers=workers, progress=False, name=None, max_tasks=workers + 1)
    elapsed = time.monotonic() - start
    if not cluster.start_note.startswith(f"forked {workers + 1} of {workers + 1} "):
        cluster.close()
        raise RuntimeError(f"not every task was forked: {cluster.start_note}")
    if costs is not None:
        pids = [pid for name, pid in cluster.pids().items() if name != "netns"]
        pids += [z.popen.pid for z in zygotes.live()]
        costs.setdefault("cpu", []).append(cpu_seconds(pids))
        costs.setdefault("pss", []).append(pss_mib(pids))
    if phases is not None:
        longest = 0.0
        for task in cluster.tasks:
            steps = cluster._rt.task_view(task).start_phases  # noqa: SLF001 (a benchmark looks inside)
            longest = max(longest, sum(seconds for _, seconds, _ in steps))
            for phase, seconds, cpu in steps:
                phases.setdefault(phase, {}).setdefault(task, []).append((seconds, cpu))
        outside = phases.setdefault("owner, outside the tasks' starts", {}).setdefault("cluster", [])
        outside.append((elapsed - longest, 0.0))
    cluster.close()
    return elapsed


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes ``pids`` have used so far."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def pss_mib(pids: list[int]) -> float:
    """The summed proportional set size (PSS) of ``pids``, in MiB: what they cost the machine together."""
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_full_info().pss
        except psutil.Error:
            pass
    return total / 2**20


def phase_rows(who: str, phases: dict[str, dict[str, list[tuple[float, float]]]]) -> list[Row]:
    """One row per phase: the median wall time over runs and tasks; each task's median wall and CPU in the note."""
    rows = []
    for phase, by_task in phases.items():
        values = [wall for pairs in by_task.values() for wall, _ in pairs]
        note = ", ".join(
            f"{task} {statistics.median(w for w, _ in pairs):.2f} (CPU {statistics.median(c for _, c in pairs):.2f})"
            for task, pairs in sorted(by_task.items())
        )
        rows.append(Row("ready phases", f"{who}: {phase}", values, note=note))
    return rows


def bench_ready(repeat: int, log: Callable[[str], None]) -> list[Row]:
    from dtfkit.engine.launchers import zygotes

    hand = Row("ready", "(a) hand-launched, poll ports")
    docs = Row("ready", "(b) TF docs: background + sleep(10)", baseline=hand.label)
    hand_gc = Row(
        "ready", "(a') hand-launched, TF imported as the tasks do (GC paused, frozen)", baseline=hand.label
    )
    cold = Row("ready", "(c) dtfkit cold: no zygote yet (it imports TensorFlow once)", baseline=hand.label)
    warm = Row("ready", "(d) dtfkit, zygote ready: 1 ps + 2 workers", baseline=cold.label)
    warm9 = Row("ready", "(e) dtfkit, zygote ready: 1 ps + 8 workers", baseline=cold.label)
    hand_cpu = Row("ready", "(a) hand-launched: CPU seconds of the 3 servers at ready", unit="CPU s")
    cold_cpu = Row(
        "ready",
        "(c) dtfkit cold: CPU seconds of zygote + 3 tasks at ready",
        baseline=hand_cpu.label,
        unit="CPU s",
    )
    hand_pss = Row("ready", "(a) hand-launched: PSS of the 3 servers", unit="MiB")
    cold_pss = Row("ready", "(c) dtfkit: PSS of zygote + 3 tasks", baseline=hand_pss.label, unit="MiB")
    docs_ready = []
    hand_phases: dict[str, dict[str, list[tuple[float, float]]]] = {}
    hand_gc_phases: dict[str, dict[str, list[tuple[float, float]]]] = {}
    cold_phases: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for i in range(repeat):  # interleaved so every variant sees the same machine load
        hand_costs: dict[str, list[float]] = {}
        hand.values.append(ready_hand(hand_phases, costs=hand_costs))
        hand_cpu.values += hand_costs["cpu"]
        hand_pss.values += hand_costs["pss"]
        hand_gc.values.append(ready_hand(hand_gc_phases, server=SERVER_STAMPED_GC))
        seconds, really = ready_docs()
        docs.values.append(seconds)
        docs_ready.append(really)
        zygotes.close_all()  # cold: the next cluster starts the zygote, which imports TensorFlow
        costs: dict[str, list[float]] = {}
        cold.values.append(ready_dtfkit(cold_phases, costs=costs))
        cold_cpu.values += costs["cpu"]
        cold_pss.values += costs["pss"]
        warm.values.append(ready_dtfkit())
        warm9.values.append(ready_dtfkit(workers=8))
        log(
            f"  ready #{i + 1}: hand {hand.values[-1]:.2f} hand-gc {hand_gc.values[-1]:.2f} "
            f"docs {docs.values[-1]:.2f} cold {cold.values[-1]:.2f} zygote ready {warm.values[-1]:.2f} "
            f"(9 tasks {warm9.values[-1]:.2f}); CPU hand {hand_cpu.values[-1]:.1f} cold {cold_cpu.values[-1]:.1f}; "
            f"PSS hand {hand_pss.values[-1]:.0f} MiB, dtfkit {cold_pss.values[-1]:.0f} MiB"
        )
    zygotes.close_all()
    docs.note = f"servers actually up after the sleep: {sum(docs_ready)}/{len(docs_ready)}"
    warm.note = "the zygote started by the cold run before it (TensorFlow imported)"
    cold_pss.note = "while the cluster runs (the zygote's pages shared with the tasks it forked count once)"
    return [
        hand,
        hand_gc,
        docs,
        cold,
        warm,
        warm9,
        hand_cpu,
        cold_cpu,
        hand_pss,
        cold_pss,
        *phase_rows("(a) hand", hand_phases),
        *phase_rows("(a') hand, GC paused", hand_gc_phases),
        *phase_rows("(c) cold", cold_phases),
    ]


# ----------------------------------------------------------- 2. seed script
STEP_LINE = re.compile(r"stopped training|done: local_steps")


def _stamp_reader(proc: subprocess.Popen, stamps: list[tuple[float, str]]) -> threading.Thread:
    def pump():
        for line in proc.stdout:
            stamps.append((time.monotonic(), line.rstrip("\n")))

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def _last_step(stamps: list[tuple[float, str]]) -> float | None:
    hits = [t for t, line in stamps if "stopped training" in line]
    return max(hits) if hits else None


def seed_hand(sync: bool, timeout: float) -> tuple[float | None, float | None]:
    """Hand-launch 2 ps + 2 workers; wait (bounded) for the workers, then kill the ps.

    Returns (start -> every process gone, last step -> every process gone); None
    for both when a worker did not exit within ``timeout``.
    """
    ports = free_ports(4)
    hosts = [f"--ps_hosts=localhost:{ports[0]},localhost:{ports[1]}"]
    hosts.append(f"--worker_hosts=localhost:{ports[2]},localhost:{ports[3]}")
    flags = [*SEED_FLAGS, f"--is_sync={sync}"]
    start = time.monotonic()
    procs, stamps = [], []
    for job, i in (("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)):
        p = subprocess.Popen(
            [sys.executable, SEED_SCRIPT, *hosts, f"--job_name={job}", f"--task_index={i}", *flags],
            env=env_for_tasks(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        procs.append(p)
        _stamp_reader(p, stamps)
    try:
        deadline = start + timeout
        for p in procs[2:]:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return None, None
        end(procs[:2])  # the person at the keyboard kills the ps tasks at once
        gone = time.monotonic()
        last = _last_step(stamps)
        return gone - start, (gone - last) if last else None
    finally:
        end(procs)


def seed_launch(sync: bool, timeout: float) -> tuple[float | None, float | None, str]:
    cmd = [
        sys.executable,
        "-m",
        "dtfkit",
        "launch",
        "--ps",
        "2",
        "--workers",
        "2",
        "--timeout",
        str(timeout),
        SEED_SCRIPT,
        "--",
        *SEED_FLAGS,
        f"--is_sync={sync}",
    ]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env_for_tasks(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
    )
    stamps: list[tuple[float, str]] = []
    reader = _stamp_reader(proc, stamps)
    # Its processes, to check they are all gone when the launcher returns.
    kids: set[int] = set()
    while proc.poll() is None:
        try:
            kids |= {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.Error:
            pass
        time.sleep(0.2)
    gone = all_gone(sorted(kids))
    reader.join(5)
    summary = next((line for _, line in reversed(stamps) if line.startswith("[dtfkit]")), "")
    last = _last_step(stamps)
    if "FAILED" in summary or proc.returncode != 0:
        return None, None, summary
    return gone - start, (gone - last) if last else None, summary


def bench_seed(repeat: int, timeout: float, log: Callable[[str], None]) -> list[Row]:
    rows = []
    for sync in (False, True):
        mode = "sync" if sync else "async"
        hand = Row("seed", f"{mode}: hand-launched, start -> all gone")
        launch = Row("seed", f"{mode}: dtfkit launch, start -> all gone", baseline=hand.label)
        hand_tail = Row("seed", f"{mode}: hand-launched, last step -> all gone")
        launch_tail = Row("seed", f"{mode}: dtfkit launch, last step -> all gone")
        hung = 0
        for i in range(repeat):
            total, tail = seed_hand(sync, timeout)
            if total is None:
                hung += 1
            else:
                hand.values.append(total)
                if tail is not None:
                    hand_tail.values.append(tail)
            total, tail, summary = seed_launch(sync, timeout)
            if total is None:
                launch.note = f"failed: {summary}"
            else:
                launch.values.append(total)
                if tail is not None:
                    launch_tail.values.append(tail)
            log(f"  seed {mode} #{i + 1}: hand {hand.values[-1:] or 'hung'} launch {launch.values[-1:]}")
        if hung:
            hand.text = hand_tail.text = f"did not exit within {timeout:g} s ({hung}/{repeat} runs)"
            if not hand.values:
                launch.baseline = None
        rows += [hand, launch, hand_tail, launch_tail]
    return rows


# ------------------------------------------------------------ 3. shutdown
def _train(sync: bool, steps: int):
    from dtfkit.recipes.tf1 import train_between_graph

    return train_between_graph(sync=sync, steps=steps, report_every=0)


def recipe_shutdown(sync: bool) -> dict[str, float]:
    import cloudpickle

    import dtfkit

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tasks need not import benchmarks

    cluster = dtfkit.LocalCluster(ps=2, workers=2, progress=False, name=None)
    try:
        pids = list(cluster.pids().values())
        results = cluster.run(_train, kwargs={"sync": sync, "steps": 400}, timeout=300)
        returned = time.time()
    finally:
        t_close = time.time()
        cluster.close()
        closed = time.time()
    gone_mono = all_gone(pids)
    gone = closed + (gone_mono - time.monotonic())
    last = max(r["last_step"] for r in results.values())
    done = max(r["done"] for r in results.values())
    return {
        "total": max(gone, closed) - last,
        "session": done - last,
        "reply": returned - done,
        "close": closed - t_close,
    }


def bench_shutdown(repeat: int, log: Callable[[str], None]) -> list[Row]:
    rows = []
    for sync in (False, True):
        mode = "sync" if sync else "async"
        total = Row("shutdown", f"{mode}: TF1 recipe, last step -> all gone")
        parts = {
            "session": Row("shutdown", f"{mode}:   last step -> session closed, test accuracy read"),
            "reply": Row("shutdown", f"{mode}:   -> result back in the caller"),
            "close": Row("shutdown", f"{mode}:   close(): every process ended and reaped"),
        }
        for i in range(repeat):
            r = recipe_shutdown(sync)
            total.values.append(r["total"])
            for k, row in parts.items():
                row.values.append(r[k])
            log(f"  shutdown {mode} #{i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()))
        rows += [total, *parts.values()]
    return rows


# --------------------------------------------------------------- 4. import
def bench_import(repeat: int, log: Callable[[str], None]) -> list[Row]:
    code = (
        "import time, sys; t = time.perf_counter(); import dtfkit; "
        "print(time.perf_counter() - t, 'tensorflow' in sys.modules)"
    )
    seconds, tf_flags = [], []
    for _ in range(max(repeat, 5)):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
        )
        s, tf = out.stdout.split()
        seconds.append(float(s))
        tf_flags.append(tf == "True")
    rows = [
        Row(
            "import",
            "import dtfkit (fresh interpreter)",
            seconds,
            note=f"imported TensorFlow: {any(tf_flags)}",
        )
    ]
    code = code.replace("import dtfkit;", "import dtfkit; dtfkit.LocalCluster;")
    full, full_tf = [], []
    for _ in range(max(repeat, 5)):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
        )
        s, tf = out.stdout.split()
        full.append(float(s))
        full_tf.append(tf == "True")
    rows.append(
        Row(
            "import",
            "import dtfkit + resolve dtfkit.LocalCluster",
            full,
            note=f"imported TensorFlow: {any(full_tf)}",
        )
    )
    import dtfkit
    from dtfkit.engine.launchers import zygotes

    with dtfkit.LocalCluster(ps=1, workers=2, progress=False, name=None) as cluster:
        rss = {}
        for name, pid in cluster.pids().items():
            rss[name] = psutil.Process(pid).memory_info().rss / 2**20
    tasks = sum(v for k, v in rss.items() if k != "netns")
    rows.append(
        Row(
            "import",
            "RSS of a 1 ps + 2 worker cluster (MiB)",
            [tasks + rss.get("netns", 0)],
            unit="MiB",
            note=", ".join(f"{k} {v:.0f}" for k, v in rss.items()),
        )
    )
    (zygote,) = zygotes.live()
    warm = psutil.Process(zygote.popen.pid).memory_info().rss / 2**20
    rows.append(Row("import", "RSS of the task zygote, TensorFlow imported (MiB)", [warm], unit="MiB"))
    log(
        f"  import: {statistics.median(seconds) * 1000:.0f} ms; cluster RSS {tasks:.0f} MiB; warm {warm:.0f} MiB"
    )
    return rows


# ------------------------------------------------------------ 5. notebooks
def bench_notebooks(log: Callable[[str], None]) -> list[Row]:
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "notebooks/"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        # The kernels must import this checkout's dtfkit, installed or not. DTFKIT_ZYGOTE is
        # left as the caller has it: unset, each kernel forks its tasks from its own zygote.
        env=dict(
            os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
        ),
    )
    seconds = time.monotonic() - start
    summary = (out.stdout.strip().splitlines() or ["(no output)"])[-1]
    log(f"  notebooks: {seconds:.0f} s: {summary}")
    return [Row("notebooks", "whole notebook suite under nbval", [seconds], note=summary)]


# --------------------------------------------------------------- report
# ---------------------------------------------------------------- 5. links
LINK_RATES = ("10mbit", "50mbit", "200mbit")
LINK_PORT = 47001


def _link_receive(port: int, size: int) -> float:
    """In a task: accept one connection, read ``size`` bytes; seconds from first byte to last."""
    import socket
    import time

    with socket.create_server(("", port)) as server:
        server.settimeout(120)
        conn, _ = server.accept()
        with conn:
            got, first = 0, None
            while got < size:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                first = first or time.monotonic()
                got += len(chunk)
    return time.monotonic() - first


def _link_send(host: str, port: int, size: int) -> None:
    import socket
    import time

    for _ in range(600):
        try:
            sock = socket.create_connection((host, port), timeout=60)
            break
        except OSError:
            time.sleep(0.05)
    with sock:
        sock.sendall(b"\0" * size)


def _link_tensor_read(floats: int) -> float:
    """In a worker: seconds to read a ``floats``-element variable that lives on ps:0 (TF1 graph)."""
    import time

    import tensorflow as tf

    import dtfkit

    ctx = dtfkit.this_task()
    with tf.Graph().as_default():
        with tf.compat.v1.device("/job:ps/task:0"):
            var = tf.compat.v1.Variable(tf.zeros([floats]), name=f"big_{floats}")
        with tf.compat.v1.device(f"/job:worker/task:{ctx.task_index}"):
            total = tf.reduce_sum(tf.identity(var))
        with tf.compat.v1.Session(ctx.target) as sess:
            sess.run(var.initializer)
            sess.run(tf.reduce_sum(var))  # warm up the graph on ps without a transfer
            start = time.monotonic()
            sess.run(total)
            return time.monotonic() - start


def bench_links(repeat: int, log: Callable[[str], None]) -> list[Row]:
    import dtfkit
    from dtfkit.engine.platform import netns

    ok, why = netns.isolation_available()
    if not ok:
        return [Row("links", "emulated links", text=f"skipped: {why}")]
    rows = []
    # One cluster: ps unlimited, worker:i at LINK_RATES[i], so ps -> worker:i runs at that rate.
    link = {f"worker:{i}": rate for i, rate in enumerate(LINK_RATES)}
    with dtfkit.LocalCluster(ps=1, workers=len(LINK_RATES), link=link, progress=False, name=None) as cluster:
        for i, rate in enumerate(LINK_RATES):
            bits = netns.parse_rate(rate)
            size = bits // 8 * 2  # 2 s at the rate
            ideal = size * 8 / bits
            worker = f"worker:{i}"
            host = cluster.address(worker).rpartition(":")[0]
            stream = Row("links", f"{rate}: TCP stream ps -> worker, {size / 1e6:.1f} MB")
            tensor = Row("links", f"{rate}: TF tensor read ps -> worker, {size / 1e6:.1f} MB")
            for n in range(repeat):
                receiving = cluster.submit(_link_receive, (LINK_PORT, size), on=worker, timeout=300)
                cluster.run(_link_send, (host, LINK_PORT, size), on="ps:0", timeout=300)
                stream.values.append(receiving.result()[worker])
                tensor.values.append(
                    cluster.run(_link_tensor_read, (size // 4,), on=worker, timeout=300)[worker]
                )
                log(
                    f"  links {rate} #{n + 1}: stream {stream.values[-1]:.2f} s, tensor {tensor.values[-1]:.2f} s"
                )
            for row in (stream, tensor):
                row.note = f"S/rate = {ideal:.2f} s; measured/ideal = {row.median / ideal:.2f}"
            rows += [stream, tensor]
    # Start of the chapter's largest cluster, with and without links.
    plain = Row("links", "1 ps + 4 workers ready, cold, no link")
    linked = Row("links", "1 ps + 4 workers ready, cold, link='100mbit'", baseline=plain.label)
    for n in range(repeat):
        for row, kw in ((plain, {}), (linked, {"link": "100mbit"})):
            start = time.monotonic()
            with dtfkit.LocalCluster(ps=1, workers=4, progress=False, name=None, **kw):
                row.values.append(time.monotonic() - start)
            log(f"  links start {row.label} #{n + 1}: {row.values[-1]:.2f} s")
    return rows + [plain, linked]


def append_to_results(text: str) -> str:
    """Add ``text`` to benchmarks/RESULTS.md (after a blank line); returns the file's path."""
    path = os.path.join(ROOT, "benchmarks", "RESULTS.md")
    with open(path, "a") as f:
        f.write("\n" + text)
    return path


def machine() -> dict[str, str]:
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model
            )
    except OSError:
        pass
    tf = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.metadata as m\nfor d in ('tensorflow-cpu','tensorflow'):\n"
            "    try: print(d, m.version(d)); break\n    except m.PackageNotFoundError: pass",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": f"{psutil.cpu_count()} cores, {model}",
        "ram": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "os": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": tf or "?",
    }


def fmt(row: Row, rows: list[Row]) -> tuple[str, str, str, str]:
    if row.text and not row.values:
        return row.label, row.text, "", row.note
    if row.median is None:
        return row.label, "n/a", "", row.note
    digits = 0 if row.unit == "MiB" else 2
    value = f"{row.median:.{digits}f} {row.unit}"
    if len(row.values) > 1:
        value += f" (n={len(row.values)}, {min(row.values):.{digits}f}-{max(row.values):.{digits}f})"
    ratio = ""
    base = next((r for r in rows if r.label == row.baseline), None)
    if base is not None and base.median:
        ratio = f"{row.median / base.median:.2f}x {base.label.split(')')[0] + ')' if ')' in base.label else 'baseline'}"
    note = row.note + (f"; {row.text}" if row.text else "")
    return row.label, value, ratio, note


def table(rows: list[Row]) -> str:
    out = ["| benchmark | measurement | median | ratio | note |", "|---|---|---|---|---|"]
    for row in rows:
        label, value, ratio, note = fmt(row, rows)
        out.append(f"| {row.bench} | {label} | {value} | {ratio} | {note} |")
    return "\n".join(out)


def goals(rows: list[Row]) -> list[str]:
    by = {r.label: r for r in rows}
    out = []

    def med(label):
        r = by.get(label)
        return r.median if r else None

    cold_label = "(c) dtfkit cold: no zygote yet (it imports TensorFlow once)"
    warm, warm9, cold, hand = (
        med("(d) dtfkit, zygote ready: 1 ps + 2 workers"),
        med("(e) dtfkit, zygote ready: 1 ps + 8 workers"),
        med(cold_label),
        med("(a) hand-launched, poll ports"),
    )
    if warm is not None and warm9 is not None:
        out.append(
            f"- zygote ready: 1 ps + 2 workers <= 0.3 s: {'MET' if warm <= 0.3 else 'MISSED'} ({warm:.2f} s); "
            f"1 ps + 8 workers <= 0.8 s: {'MET' if warm9 <= 0.8 else 'MISSED'} ({warm9:.2f} s)"
        )
    if cold is not None and hand is not None:
        out.append(
            f"- cold <= 0.9x hand-launched: {'MET' if cold <= 0.9 * hand else 'MISSED'} ({cold / hand:.2f}x)"
        )
    cpu_hand, cpu_cold = (
        med("(a) hand-launched: CPU seconds of the 3 servers at ready"),
        med("(c) dtfkit cold: CPU seconds of zygote + 3 tasks at ready"),
    )
    if cpu_hand and cpu_cold is not None:
        out.append(
            f"- CPU seconds of a cold start about a third of three imports: {cpu_cold:.1f} vs {cpu_hand:.1f} "
            f"({cpu_cold / cpu_hand:.2f}x)"
        )
    pss = med("(c) dtfkit: PSS of zygote + 3 tasks")
    if pss is not None:
        out.append(
            f"- PSS of 1 ps + 2 workers + zygote <= 0.55 GiB: {'MET' if pss <= 563 else 'MISSED'} ({pss:.0f} MiB)"
        )
    for mode in ("async", "sync"):
        h, lch = (
            by.get(f"{mode}: hand-launched, start -> all gone"),
            med(f"{mode}: dtfkit launch, start -> all gone"),
        )
        if lch is None or h is None:
            continue
        if h.median is None:
            out.append(
                f"- launcher never hangs on the seed script ({mode}): MET (launch {lch:.1f} s; hand: {h.text})"
            )
        else:
            over = lch / h.median - 1
            out.append(
                f"- launch adds <= 5% to the seed script ({mode}): {'MET' if over <= 0.05 else 'MISSED'} "
                f"({over * 100:+.1f}%: {lch:.1f} s vs {h.median:.1f} s)"
            )
    for mode in ("async", "sync"):
        t = med(f"{mode}: TF1 recipe, last step -> all gone")
        if t is not None:
            out.append(
                f"- TF1 recipe last step -> all gone <= 2 s ({mode}): {'MET' if t <= 2 else 'MISSED'} ({t:.2f} s)"
            )
    imp = by.get("import dtfkit (fresh interpreter)")
    if imp is not None:
        out.append(
            f"- import dtfkit <= 0.3 s without TensorFlow: "
            f"{'MET' if imp.median <= 0.3 and 'False' in imp.note else 'MISSED'} ({imp.median * 1000:.0f} ms; {imp.note})"
        )
    return out


def write_results(path, info, load, rows, done, wanted, ns, seconds) -> None:
    previous = ""
    if ns.append and os.path.exists(path):
        if not hasattr(ns, "_previous"):
            with open(path) as f:
                ns._previous = f.read().rstrip() + "\n\n# Another run, appended (`--append`)\n\n"
        previous = ns._previous
    with open(path, "w") as f:
        f.write(previous or "# Benchmark results\n\n")
        f.write("Written by `python -m benchmarks` (benchmarks/run.py). Medians; ranges in parentheses.\n\n")
        f.write("## Machine\n\n")
        for k, v in info.items():
            f.write(f"- {k}: {v}\n")
        s = load.samples
        f.write(
            f"- 1-minute load average during the run: min {min(s):.1f}, median {statistics.median(s):.1f}, "
            f"max {max(s):.1f} ({len(s)} samples, every 5 s); other jobs shared the machine\n"
        )
        f.write(
            f"- benchmarks run: {', '.join(done)}; --repeat {ns.repeat}, --repeat-long {ns.repeat_long}, "
        )
        f.write(f"--hang-timeout {ns.hang_timeout:g}; {seconds:.0f} s so far\n")
        missing = [w for w in wanted if w not in done]
        if missing:
            f.write(f"- not finished (yet): {', '.join(missing)}\n")
        if "notebooks" not in wanted:
            f.write("- the notebook suite (5) was not run this time (`--notebooks`)\n")
        f.write("\n## Results\n\n" + table(rows) + "\n\n## Goals\n\n" + "\n".join(goals(rows)) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of {','.join(ALL)}")
    parser.add_argument(
        "--repeat", type=int, default=3, help="repetitions of the short benchmarks (default 3)"
    )
    parser.add_argument("--repeat-long", type=int, default=1, help="repetitions of the seed runs (default 1)")
    parser.add_argument(
        "--hang-timeout",
        type=float,
        default=200.0,
        help="bound on a seed run in seconds (default 200: above the sync script's 120 s grace)",
    )
    parser.add_argument(
        "--append", action="store_true", help="add this run to RESULTS.md instead of replacing it"
    )
    parser.add_argument("--notebooks", action="store_true", help="also run the notebook suite under nbval")
    parser.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "RESULTS.md"))
    ns = parser.parse_args(argv)
    chosen = [b.strip() for b in ns.only.split(",") if b.strip()]
    unknown = set(chosen) - set(ALL) - {"notebooks"}
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    info = machine()

    def log(text: str) -> None:
        print(text, flush=True)

    log("machine: " + "; ".join(f"{k} {v}" for k, v in info.items()))
    load = LoadSampler()
    rows: list[Row] = []
    started = time.monotonic()
    steps = [
        ("ready", lambda: bench_ready(ns.repeat, log)),
        ("import", lambda: bench_import(ns.repeat, log)),
        ("shutdown", lambda: bench_shutdown(ns.repeat, log)),
        ("seed", lambda: bench_seed(ns.repeat_long, ns.hang_timeout, log)),
        ("links", lambda: bench_links(ns.repeat, log)),
        ("notebooks", lambda: bench_notebooks(log)),
    ]
    wanted = [name for name, _ in steps if name in chosen or (name == "notebooks" and ns.notebooks)]
    done: list[str] = []
    for name, bench in steps:
        if name not in wanted:
            continue
        rows += bench()
        done.append(name)
        # Written after every benchmark, so that a long run cut short still leaves its results.
        write_results(ns.output, info, load, rows, done, wanted, ns, time.monotonic() - started)
    text = table(rows)
    print("\n" + text)
    print("\n" + "\n".join(goals(rows)))
    load.stop()
    print(f"\nwrote {ns.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
