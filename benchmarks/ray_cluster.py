"""Start time and memory per task: ``RayCluster(ps=1, workers=2)`` on a simulated 2-node Ray
cluster beside ``LocalCluster(ps=1, workers=2)`` (issue 15).

Each round, interleaved so that both see the same machine load:

- the simulated Ray cluster's own start (``SimulatedRayCluster(nodes=2)``: a head and two
  nodes) and its memory (every process of it: the supervisor's group and the Ray workers);
- ``LocalCluster``: constructor call to every task serving; memory of its 3 task processes;
- ``RayCluster`` on that simulated cluster: the same; memory of its 3 task processes and,
  separately, of their 3 Ray actors (what Ray adds per task).

Memory is the proportional set size (PSS: shared libraries divided among the processes
that map them) from psutil, or the resident set (RSS) where PSS is unavailable. Run::

    python -m benchmarks.ray_cluster --repeat 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def memory_of(procs: list[psutil.Process]) -> tuple[float, str]:
    """Summed PSS (else RSS) of ``procs`` in MiB, and which measure it is."""
    total, kind = 0, "PSS"
    for proc in procs:
        try:
            info = proc.memory_full_info()
            value = getattr(info, "pss", None)
            if value is None:
                value, kind = info.rss, "RSS"
            total += value
        except psutil.Error:
            continue
    return total / 2**20, kind


def family(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def one_round(log) -> dict[str, float]:
    import dtfkit
    from dtfkit.ray.simulated import SimulatedRayCluster, connect

    out: dict[str, float] = {}
    t0 = time.monotonic()
    local = dtfkit.LocalCluster(ps=1, workers=2, progress=False, name=None)
    out["local_start_s"] = time.monotonic() - t0
    out["local_task_mib"], kind = memory_of([psutil.Process(p) for p in local.pids().values()])
    local.close()
    log(f"LocalCluster: {out['local_start_s']:.1f} s, {out['local_task_mib']:.0f} MiB {kind} for 3 tasks")

    t0 = time.monotonic()
    sim = SimulatedRayCluster(nodes=2)
    out["sim_start_s"] = time.monotonic() - t0
    try:
        connect(sim.address)
        out["sim_mib"], _ = memory_of(family(sim.pid))
        log(f"simulated Ray cluster: {out['sim_start_s']:.1f} s, {out['sim_mib']:.0f} MiB {kind}")
        import ray

        t0 = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rc = dtfkit.RayCluster(ps=1, workers=2, address=sim.address, progress=False, name=None)
        out["ray_start_s"] = time.monotonic() - t0
        tasks = [psutil.Process(p) for p in rc.pids().values()]
        actors = [psutil.Process(h.info()["actor_pid"]) for h in rc.launcher.handles]
        out["ray_task_mib"], _ = memory_of(tasks)
        out["ray_actor_mib"], _ = memory_of(actors)
        rc.close()
        log(
            f"RayCluster: {out['ray_start_s']:.1f} s, {out['ray_task_mib']:.0f} MiB for 3 tasks "
            f"+ {out['ray_actor_mib']:.0f} MiB for their 3 actors"
        )
        ray.shutdown()
    finally:
        sim.close()
    out["kind"] = kind
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=2)
    ns = parser.parse_args(argv)
    rounds = []
    for i in range(ns.repeat):
        rounds.append(one_round(lambda text, i=i: print(f"[round {i + 1}] {text}", flush=True)))
    kind = rounds[0]["kind"]

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    per = 3
    rows = [
        ("start (s), 1 ps + 2 workers", med("local_start_s"), med("ray_start_s")),
        (f"{kind} per task (MiB)", med("local_task_mib") / per, med("ray_task_mib") / per),
        (
            f"{kind} per task incl. its actor (MiB)",
            med("local_task_mib") / per,
            (med("ray_task_mib") + med("ray_actor_mib")) / per,
        ),
    ]
    print(f"\nmedians of {ns.repeat} round(s); {os.cpu_count()} CPU cores; Python {sys.version.split()[0]}")
    print(f"{'':38} {'LocalCluster':>13} {'RayCluster':>11} {'ratio':>6}")
    for name, a, b in rows:
        print(f"{name:38} {a:13.1f} {b:11.1f} {b / a:6.2f}")
    print(
        f"simulated Ray cluster (head + 2 nodes): start {med('sim_start_s'):.1f} s, "
        f"{med('sim_mib'):.0f} MiB {kind} (all its processes, idle)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
