"""``python -m dtfkit demo``: a 2 ps + 2 worker cluster trains a digit classifier.

It shows the whole kit once: the cluster table, live prefixed output, metrics
sent from the tasks, and a clean shutdown.

Example::

    python -m dtfkit demo            # async, 300 steps
    python -m dtfkit demo --sync     # SyncReplicasOptimizer
"""

from __future__ import annotations

import time

import psutil

from dtfkit.recipes import analysis


def main(steps: int = 300, sync: bool = False) -> int:
    import dtfkit
    from dtfkit.recipes import tf1

    mode = "sync" if sync else "async"
    print(f"dtfkit demo: 2 ps + 2 workers, {mode} training, {steps} global steps on the 8x8 digits")
    started = time.monotonic()
    with dtfkit.LocalCluster(ps=2, workers=2) as cluster:
        print(f"cluster ready in {time.monotonic() - started:.1f} s")
        print(repr(cluster))
        t0 = time.time()
        results = cluster.run(tf1.train_between_graph, kwargs={"sync": sync, "steps": steps}, timeout=300)
        rows = cluster.metrics.rows(since=t0)
        pids = list(cluster.pids().values())
    print()
    print(f"{'worker':<10}{'local steps':>12}{'share':>8}{'final loss':>12}{'test acc':>10}")
    shares = analysis.shares({name: r["local_steps"] for name, r in results.items()})
    for name, r in results.items():
        print(f"{name:<10}{r['local_steps']:>12}{shares[name]:>8.0%}{r['loss']:>12.3f}{r['accuracy']:>10.1%}")
    # By global step: the fraction of consecutive global steps made by different workers.
    interleaving = analysis.interleaving_fraction(rows, by="step")
    last = max(r["last_step"] for r in results.values())
    first = min(r["first_step"] for r in results.values())
    print(
        f"global step {max(r['global_step'] for r in results.values())} reached in {last - first:.1f} s "
        f"({len(rows)} metric events); worker interleaving {interleaving:.0%}"
    )
    left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    print(f"every process ended: {not left}")
    return 0 if not left else 1
