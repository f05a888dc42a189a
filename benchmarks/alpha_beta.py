"""The α–β model against real steps (issue 23): one ps, a sharded ps and a ring, at two delays.

``dtfkit.recipes.alpha_beta.measure`` times every method (``allreduce.time_sync``) on
``LocalCluster(ps=1, workers=3, link="100mbit", delay=d)`` for d = 1 ms and 20 ms and
gradients of 1.2 kB to 1.2 MB, with an empty step of the same cluster (each worker reads its
gradient, nothing crosses a link) as the baseline: communication = step - empty step. The
model (``alpha_beta.alpha_beta_time``) takes α = d and β = 8 / rate. Side by side: the
measured communication, the model, their difference in units of d, and which method is
fastest by each. Run::

    python -m benchmarks.alpha_beta --steps 5             # prints the table
    python -m benchmarks.alpha_beta --steps 5 --append    # and adds it to benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

DELAYS = ("1ms", "20ms")
SIZES = (1_200, 12_000, 120_000, 1_200_000)
N, LINK = 3, "100mbit"


def with_model(rows: list[dict]) -> list[dict]:
    """``measure``'s rows with ``model_s`` (α = d, β = 8 / rate) and the fastest method by each."""
    from dtfkit.recipes import alpha_beta

    out = [
        dict(
            r,
            model_s=alpha_beta.alpha_beta_time(
                r["method"], r["n"], r["bytes"], r["d_s"], 1 / r["rate_bytes_per_s"]
            ),
        )
        for r in rows
    ]
    by_measure, by_model = alpha_beta.fastest(out, "comm_s"), alpha_beta.fastest(out, "model_s")
    for r in out:
        where = (r["delay"], r["bytes"])
        r["fastest"] = "".join(
            mark for mark, best in (("m", by_measure), ("M", by_model)) if best[where] == r["method"]
        )
    return out


def table(rows: list[dict]) -> str:
    lines = [
        "| d | S (bytes) | method | step (median; range) | empty step | communication = step - empty "
        "| model (α = d, β = 1/r) | comm - model (in d) | fastest |",
        "|---|---:|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ms = [s * 1000 for s in r["seconds"]]
        lines.append(
            f"| {r['delay']} | {r['bytes']:,} | {r['method']} | {r['median_s'] * 1000:.1f} ms "
            f"({min(ms):.1f}-{max(ms):.1f}, n={len(ms)}) | {r['empty_s'] * 1000:.1f} ms | {r['comm_s'] * 1000:.1f} ms "
            f"| {r['model_s'] * 1000:.1f} ms | {(r['comm_s'] - r['model_s']) / r['d_s']:+.1f} "
            f"| {_fastest_words(r['fastest'])} |"
        )
    return "\n".join(lines)


def _fastest_words(marks: str) -> str:
    return {"mM": "measured and model", "m": "measured", "M": "model"}.get(marks, "")


def summary(rows: list[dict]) -> str:
    from dtfkit.recipes import alpha_beta

    words = []
    for delay in dict.fromkeys(r["delay"] for r in rows):
        mine = [r for r in rows if r["delay"] == delay]
        d, beta = mine[0]["d_s"], 1 / mine[0]["rate_bytes_per_s"]
        cross = alpha_beta.crossover_size("ps", "ring", N, alpha_s=d, beta_s_per_byte=beta)
        order = []
        for size in dict.fromkeys(r["bytes"] for r in mine):
            comm = {r["method"]: r["comm_s"] for r in mine if r["bytes"] == size}
            order.append(f"{size:,} B: {'ps' if comm['ps'] < comm['ring'] else 'ring'} faster")
        where = f"{cross:,.0f} B" if cross else "none"
        words.append(
            f"d = {delay}: the model puts the ps/ring crossover at {where}; measured: " + "; ".join(order)
        )
    return "\n".join(f"- {w}" for w in words)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.run import LoadSampler, append_to_results, machine
    from dtfkit.recipes import alpha_beta

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.alpha_beta", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--steps", type=int, default=5, help="timed steps per method and size (default 5)")
    parser.add_argument("--append", action="store_true", help="add the table to benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    facts = machine()
    load = LoadSampler()
    began = time.monotonic()
    rows = with_model(alpha_beta.measure(DELAYS, SIZES, n=N, link=LINK, steps=args.steps))
    took = time.monotonic() - began
    report = (
        f"# The α–β model against real steps (issue 23; `python -m benchmarks.alpha_beta --steps {args.steps}`, "
        f"{facts.pop('date')})\n\n"
        + "; ".join(f"{k} {v}" for k, v in facts.items())
        + f"; 1-minute load average during the run: {load.stop()}; {took:.0f} s. 1 ps + {N} workers, "
        f"link {LINK} on every task, one cluster per delay; fastest: m = by the measured communication, "
        f"M = by the model.\n\n{table(rows)}\n\n{summary(rows)}\n"
    )
    print(report)
    if args.append:
        print(f"appended to {append_to_results(report)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
