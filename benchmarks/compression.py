"""Gradient compression over an emulated link (issue 23): bytes, step time and accuracy per method.

One cluster of 1 ps + 2 workers with every task on a ``RATE`` link
(``LocalCluster(link=...)``). Each repeat runs ``compression.compare`` once: every method
(``none``, ``fp16``, ``bf16``, ``topk`` with k = 1% of the gradient, ``sign``) trains the
digits MLP for the same number of steps, in one client task, the methods' order rotated
from one repeat to the next so that no method always runs first.

What holds, checked here as in the tests: each worker's traced bytes to ps:0 equal the
formula (``expected_compressed_bytes``). What varies, shown with its range over the repeats:
the median step time of each repeat, and the test accuracy (the same steps on the same
data: it varies only with the order in which the CPU adds things up).

Two link models per step, from the ps's link (it carries every worker's bytes; each
direction has a token bucket of its own, refilled at the rate all the time):

- floor, ``workers * max(to_ps, from_ps) / rate``: what each bucket must let through every
  step, so no long run of steps can average less (its burst, 10 ms of traffic, is spent
  once). Compressing only the gradients cannot take a step below the weights' share.
- turns, ``workers * (to_ps + from_ps) / rate``: the two directions one after the other
  with empty buckets (a worker sends its gradient only after it has read the weights; the
  bucket of one direction refills while the other works, so a step can take less).

Run::

    python -m benchmarks.compression --repeat 3            # prints the table
    python -m benchmarks.compression --repeat 3 --append   # and adds it to benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

RATE = "50mbit"
WORKERS = 2


def measure(repeat: int, steps: int, log) -> tuple[dict[str, list[dict]], dict[str, float]]:
    """Runs per method (one per repeat) and the wall times: cluster start, each compare()."""
    import dtfkit
    from dtfkit.engine.platform import netns
    from dtfkit.recipes import compression

    ok, why = netns.isolation_available()
    if not ok:
        raise SystemExit(f"skipped: {why}")
    methods = list(compression.METHODS)
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    walls: dict[str, float] = {}
    start = time.monotonic()
    with dtfkit.LocalCluster(
        ps=1, workers=WORKERS, link=RATE, progress=False, name=None, start_timeout=180
    ) as cluster:
        walls["cluster start"] = time.monotonic() - start
        for r in range(repeat):
            order = methods[r % len(methods) :] + methods[: r % len(methods)]
            begun = time.monotonic()
            for run in compression.compare(cluster, order, workers=WORKERS, steps=steps, timeout=600):
                runs[run["method"]].append(run)
            walls[f"compare() of all methods, repeat {r + 1}"] = time.monotonic() - begun
            log(
                f"  repeat {r + 1} ({' '.join(order)}): {walls[f'compare() of all methods, repeat {r + 1}']:.1f} s"
            )
    return runs, walls


def rows(runs: dict[str, list[dict]], rate: int) -> list[dict]:
    """One row per method: bytes (traced, formula), per-repeat median step times, accuracies."""
    out = []
    for method, mine in runs.items():
        first = mine[0]
        up = {b for r in mine for b in r["bytes_to_ps"].values()}
        down = {b for r in mine for b in r["bytes_from_ps"].values()}
        expected = first["expected"]
        out.append(
            {
                "method": method if method != "topk" else f"topk (k={first['k']})",
                "floats": first["floats"],
                "to_ps": sorted(up),
                "from_ps": sorted(down),
                "expected": expected,
                "holds": up == {expected["to_ps"]} and down == {expected["from_ps"]},
                "floor": WORKERS * max(expected["to_ps"], expected["from_ps"]) * 8 / rate,
                "turns": WORKERS * (expected["to_ps"] + expected["from_ps"]) * 8 / rate,
                "medians": [statistics.median(r["step_seconds"]) for r in mine],
                "accuracies": [r["accuracy"] for r in mine],
            }
        )
    return out


def table(rows_: list[dict]) -> str:
    base = rows_[0]
    base_up, base_time = base["expected"]["to_ps"], statistics.median(base["medians"])
    base_acc = statistics.median(base["accuracies"])
    out = [
        "| method | bytes to ps per worker-step (traced) | formula | traced = formula | x none "
        "| bytes from ps | link floor, turns | step time (median of repeats, range) | x none "
        "| test accuracy (median, range) | minus none |",
        "|---|---:|---:|---|---:|---:|---:|---|---:|---|---:|",
    ]
    for r in rows_:
        med = statistics.median(r["medians"])
        acc = statistics.median(r["accuracies"])
        traced = "/".join(f"{b:,}" for b in r["to_ps"])
        out.append(
            f"| {r['method']} | {traced} | {r['expected']['to_ps']:,} | {'yes' if r['holds'] else 'NO'} "
            f"| {r['expected']['to_ps'] / base_up:.3f} | {'/'.join(f'{b:,}' for b in r['from_ps'])} "
            f"| {r['floor'] * 1000:.1f}, {r['turns'] * 1000:.1f} ms | {med * 1000:.1f} ms ({min(r['medians']) * 1000:.1f}-"
            f"{max(r['medians']) * 1000:.1f}) | {med / base_time:.2f} "
            f"| {acc:.3f} ({min(r['accuracies']):.3f}-{max(r['accuracies']):.3f}) | {acc - base_acc:+.3f} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.run import LoadSampler, append_to_results, machine
    from dtfkit.engine.platform import netns
    from dtfkit.recipes import compression

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compression", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--repeat", type=int, default=3, help="compare() runs of all methods (default 3)")
    parser.add_argument("--steps", type=int, default=compression.STEPS, help="training steps per method")
    parser.add_argument("--append", action="store_true", help="add the table to benchmarks/RESULTS.md")
    ns = parser.parse_args(argv)
    info = machine()
    load = LoadSampler()
    started = time.monotonic()
    runs, walls = measure(ns.repeat, ns.steps, lambda text: print(text, flush=True))
    result = rows(runs, netns.parse_rate(RATE))
    floats = result[0]["floats"]
    text = (
        table(result)
        + "\n\nWall times: "
        + "; ".join(f"{name} {seconds:.1f} s" for name, seconds in walls.items())
        + "."
    )
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    facts = "; ".join(f"{k} {v}" for k, v in info.items() if k != "date")
    header = (
        f"# Gradient compression (issue 23; `python -m benchmarks.compression --repeat {ns.repeat}`, {when})\n\n"
        f"{facts}; 1-minute load average during the run: {load.stop()}; {time.monotonic() - started:.0f} s. "
        f"1 ps + {WORKERS} workers, every link {RATE}; the digits MLP (hidden "
        f"{compression.HIDDEN}: {floats:,} floats), full-batch, {ns.steps} steps, learning rate "
        f"{compression.LEARNING_RATE}; step times are each repeat's median over steps 3 to {ns.steps}.\n\n"
    )
    print("\n" + header + text)
    if ns.append:
        path = append_to_results(header + text + "\n")
        print(f"\nappended to {path}")
    return 0 if all(r["holds"] for r in result) else 1


if __name__ == "__main__":
    sys.exit(main())
