"""Runs in the notebook kernel: ``compare`` (trains every method on a cluster through the task side's
``train_methods``), the comparison table and the accuracy-versus-bytes plot.

Never imports TensorFlow: what runs in the tasks is in ``task_side``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dtfkit import fonts
from dtfkit.i18n import _, language
from dtfkit.recipes.allreduce.kernel_side import require_workers
from dtfkit.recipes.compression.task_side import (
    HIDDEN,
    LEARNING_RATE,
    METHODS,
    STEPS,
    _is_int,
    check_args,
    default_k,
    model_floats,
    train_methods,
)


def _label(run: dict[str, Any]) -> str:
    return f"topk (k={run['k']})" if run["method"] == "topk" else run["method"]


def table(runs: Sequence[dict[str, Any]]) -> str:
    """The runs of ``compare`` side by side, as a Markdown table: bytes a worker sent per step
    (traced) and the formula's, bytes it read, median step time, test accuracy, each with its
    ratio to ``none`` (when ``none`` ran).

    >>> run = {"method": "fp16", "k": None, "bytes_to_ps": {"worker:0": 8}, "bytes_from_ps": {"worker:0": 16},
    ...        "expected": {"to_ps": 8, "from_ps": 16}, "step_seconds": [0.01, 0.03, 0.02], "accuracy": 0.9}
    >>> print(table([run]))
    | method | bytes to ps / step (traced) | formula | x none | bytes from ps | step (median, range) | x none | test accuracy |
    |---|---:|---:|---:|---:|---|---:|---:|
    | fp16 | 8 | 8 | - | 16 | 20.0 ms (10.0-30.0) | - | 0.900 |
    """
    base = next((r for r in runs if r["method"] == "none"), None)

    def ratio(value: float, of: float | None) -> str:
        return f"{value / of:.2f}" if of else "-"

    base_up = _per_worker(base["bytes_to_ps"]) if base else None
    base_time = float(np.median(base["step_seconds"])) if base else None
    out = [
        "| method | bytes to ps / step (traced) | formula | x none | bytes from ps | step (median, range) "
        "| x none | test accuracy |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in runs:
        up, down = _per_worker(r["bytes_to_ps"]), _per_worker(r["bytes_from_ps"])
        secs = r["step_seconds"]
        median = float(np.median(secs))
        out.append(
            f"| {_label(r)} | {up:,} | {r['expected']['to_ps']:,} | {ratio(up, base_up)} | {down:,} "
            f"| {median * 1000:.1f} ms ({min(secs) * 1000:.1f}-{max(secs) * 1000:.1f}) "
            f"| {ratio(median, base_time)} | {r['accuracy']:.3f} |"
        )
    return "\n".join(out)


def _per_worker(bytes_by_worker: dict[str, int]) -> int:
    """The bytes of one worker, when every worker's are the same (else the largest)."""
    return max(bytes_by_worker.values())


def plot_tradeoff(runs: Sequence[dict[str, Any]], *, title: str | None = None):
    """Left: test accuracy against the bytes a worker sends per step (log scale), one labelled
    point per method. Right: each method's step time, the median with a bar from the first to
    the third quartile.

    Uses matplotlib (imported here). Returns ``(accuracy_axes, time_axes)``; the left one's
    points are one ``PathCollection`` per method, labelled with the method.

    Example::

        acc_ax, time_ax = compression.plot_tradeoff(runs, title="2 workers, 100 mbit/s")
    """
    import matplotlib.pyplot as plt

    fonts.draw_in_the_language(language())  # the reader's language in the figure's words

    if not runs:
        raise ValueError("no runs to draw: run compression.compare(cluster) first")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    for r in runs:
        up = _per_worker(r["bytes_to_ps"])
        left.scatter([up], [r["accuracy"]], s=40, label=_label(r), zorder=3)
        left.annotate(_label(r), (up, r["accuracy"]), xytext=(5, 4), textcoords="offset points", fontsize=8)
    left.set_xscale("log")
    left.set_xlabel(_("bytes a worker sends ps:0 per step (traced)"))
    left.set_ylabel(_("test accuracy"))
    # from 0.1 under the lowest point to 1: a gap of 0.01 should look like one
    left.set_ylim(max(0.0, min(r["accuracy"] for r in runs) - 0.1), 1.0)
    left.grid(alpha=0.3)
    labels = [_label(r) for r in runs]
    quartiles = [np.percentile(np.asarray(r["step_seconds"]) * 1000, [25, 50, 75]) for r in runs]
    medians = [q[1] for q in quartiles]
    spread = np.array([[q[1] - q[0] for q in quartiles], [q[2] - q[1] for q in quartiles]])
    right.barh(range(len(runs)), medians, xerr=spread, color="tab:orange", alpha=0.8, capsize=3)
    right.set_yticks(range(len(runs)), labels)
    right.invert_yaxis()
    right.set_xlabel(_("step time (ms): median, bar from 1st to 3rd quartile"))
    fig.suptitle(title or _("gradient compression: accuracy against bytes, and step time"))
    fig.tight_layout()
    return left, right


def compare(
    cluster: Any,
    methods: Sequence[str] = METHODS,
    *,
    workers: int = 2,
    steps: int = STEPS,
    k: int | None = None,
    hidden: int = HIDDEN,
    learning_rate: float = LEARNING_RATE,
    seed: int = 0,
    error_feedback: bool = True,
    sums: bool = False,
    timeout: float = 300.0,
) -> list[dict[str, Any]]:
    """In the notebook: train once per method (``train_compressed``) in one client task of
    ``cluster``; returns one plain dict per method, in order (for ``table``, ``plot_tradeoff``).

    ``k`` (for ``topk``) defaults to ``default_k``: 1% of the gradient. Bad arguments, or a
    cluster without ``workers`` workers and a ps, raise ``ValueError`` before anything starts.

    Example::

        runs = compare(cluster, ["none", "fp16", "topk"], k=96, steps=60)
        [(r["method"], r["bytes_to_ps"]["worker:0"], r["accuracy"]) for r in runs]
    """
    methods = list(methods)
    if not methods:
        raise ValueError(f"methods is empty: name at least one of {METHODS}")
    floats = model_floats(hidden) if _is_int(hidden) and hidden >= 0 else None
    if floats is None:
        raise ValueError(
            f"hidden (units of the hidden layer, 0 for none) must be an integer >= 0, not {hidden!r}"
        )
    if "topk" in methods and k is None:
        k = default_k(floats)
    for method in methods:
        check_args(method, floats, k if method == "topk" else None, workers)
    if not _is_int(steps) or steps < 3:
        raise ValueError(
            f"steps must be an integer >= 3 (one traced, two to warm up, then timed), not {steps!r}"
        )
    spec = cluster.cluster_spec
    require_workers(spec, "workers", workers)
    if not spec.get("ps"):
        raise ValueError(
            "compression trains through ps:0: start the cluster with dtfkit.LocalCluster(ps=1, ...)"
        )
    kwargs = {
        "k": k,
        "workers": workers,
        "steps": steps,
        "hidden": hidden,
        "learning_rate": learning_rate,
        "seed": seed,
        "error_feedback": error_feedback,
        "sums": sums,
        "timeout_ms": int(1000 * timeout),
    }
    (runs,) = cluster.run(
        train_methods, args=(methods,), kwargs=kwargs, on="client", timeout=timeout
    ).values()
    return runs
