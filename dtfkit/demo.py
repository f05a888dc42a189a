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


def interleaving(rows: list[dict]) -> float:
    """Fraction of consecutive global steps done by different workers (0: blocks, ~0.5: mixed)."""
    ordered = [r["task"] for r in sorted(rows, key=lambda r: r["step"])]
    if len(ordered) < 2:
        return 0.0
    return sum(a != b for a, b in zip(ordered, ordered[1:], strict=False)) / (len(ordered) - 1)


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
    total = sum(r["local_steps"] for r in results.values())
    for name, r in results.items():
        share = r["local_steps"] / total if total else 0
        print(f"{name:<10}{r['local_steps']:>12}{share:>8.0%}{r['loss']:>12.3f}{r['accuracy']:>10.1%}")
    last = max(r["last_step"] for r in results.values())
    first = min(r["first_step"] for r in results.values())
    print(
        f"global step {max(r['global_step'] for r in results.values())} reached in {last - first:.1f} s "
        f"({len(rows)} metric events); worker interleaving {interleaving(rows):.0%}"
    )
    left = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    print(f"every process ended: {not left}")
    return 0 if not left else 1
