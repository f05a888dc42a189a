"""Predict, then run (issue 43): the communication model of ``dtfkit.recipes.predict``, fitted on a
few runs and tested on many it never saw, beside chapter 11's plain α–β.

``predict.measure`` times the four algorithms (ps, sharded ps, ring, binary tree) with
``allreduce.time_sync`` on ``LocalCluster(ps=1, workers=6, link="1gbit", delay=d)``, one cluster per
delay, for 2 to 6 workers and gradients of 1.2 kB to 7.2 MB. The fit sees only the runs with
d = 0 and 5 ms over 3 and 6 workers (``FIT_DELAYS``, ``FIT_NS``); every run at another delay is
held out. Printed: the fitted parameters with their standard errors, the held-out errors
(median and 90th percentile of |predicted - measured| / measured) for the model and for plain
α–β, which algorithm each picks against the fastest measured, and every held-out run. Run::

    python -m benchmarks.predict                 # measures (about 5 min on 2 cores), prints
    python -m benchmarks.predict --save runs.json
    python -m benchmarks.predict --load runs.json --append   # no cluster; adds to RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

DELAYS = ("0ms", "200us", "1ms", "2ms", "5ms", "20ms")
NS = (2, 3, 4, 5, 6)
SIZES = (1_200, 12_000, 120_000, 1_200_000, 7_200_000)
LINK = "1gbit"
FIT_DELAYS = ("0ms", "5ms")
FIT_NS = (3, 6)


def split(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The runs the fit sees, and the held-out runs: every run at a delay the fit never saw."""
    seen = [r for r in rows if r["delay"] in FIT_DELAYS and r["n"] in FIT_NS]
    held = [r for r in rows if r["delay"] not in FIT_DELAYS]
    return seen, held


def report(rows: list[dict]) -> str:
    from dtfkit.recipes import predict

    seen, held = split(rows)
    model = predict.fit(seen)
    errs = predict.errors(held, model)
    s = predict.summary(errs)
    picks = predict.choices(errs)
    right = sum(p["right"] for p in picks)
    plain_picks = _plain_choices(errs)
    plain_right = sum(p["right"] for p in plain_picks)
    units = {
        "alpha_s": (1e6, "µs"),
        "kappa_s": (1e6, "µs"),
        "mu_s": (1e6, "µs"),
        "beta_s_per_byte": (1e9, "ns/B"),
        "eta_s_per_byte": (1e9, "ns/B"),
        "gamma_s_per_byte": (1e9, "ns/B"),
    }
    lines = [
        f"Fitted on {model.runs} runs (d in {', '.join(FIT_DELAYS)}; n in {', '.join(map(str, FIT_NS))}; "
        "every size and algorithm):",
        "",
        "| parameter | value | standard error |",
        "|---|---:|---:|",
    ]
    for row in model.table():
        scale, unit = units[row["param"]]
        lines.append(
            f"| {row['param']} | {row['value'] * scale:.4g} {unit} | {row['stderr'] * scale:.2g} {unit} |"
        )
    lines += [
        "",
        f"Held out: {s['runs']} runs (d in {', '.join(d for d in DELAYS if d not in FIT_DELAYS)}; n 2-6; "
        f"{len(picks)} configurations of d, n and size).",
        "",
        "| | median abs. error | 90th percentile | algorithm picked = fastest measured (or the same program) |",
        "|---|---:|---:|---:|",
        f"| this model | {s['median']:.1%} | {s['p90']:.1%} | {right} of {len(picks)} ({right / len(picks):.0%}) |",
        f"| plain α–β (α = d, β = 1/r) | {s['plain_median']:.1%} | {s['plain_p90']:.1%} | "
        f"{plain_right} of {len(plain_picks)} ({plain_right / len(plain_picks):.0%}) |",
        "",
    ]
    wrong = [p for p in picks if not p["right"]]
    if wrong:
        lines.append("Where the model's pick is not the fastest measured, how much slower it measured:")
        lines.append("")
        lines += [
            f"- d {p['delay']}, n {p['n']}, {p['bytes']:,} B: picked {p['picked']}, fastest {p['fastest']}, "
            f"{p['slower_by']:+.1%}"
            for p in wrong
        ]
        lines.append("")
    lines += [
        "| d | n | S (bytes) | algorithm | measured | model | error | plain α–β | error |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for e in errs:
        lines.append(
            f"| {e['delay']} | {e['n']} | {e['bytes']:,} | {e['method']} | {e['comm_s'] * 1000:.2f} ms "
            f"| {e['predicted_s'] * 1000:.2f} ms | {e['error']:+.1%} | {e['plain_s'] * 1000:.2f} ms "
            f"| {e['plain_error']:+.1%} |"
        )
    return "\n".join(lines)


def _plain_choices(errs: list[dict]) -> list[dict]:
    from dtfkit.recipes import predict

    return predict.choices([{**e, "predicted_s": e["plain_s"]} for e in errs])


def main(argv: list[str] | None = None) -> int:
    from benchmarks.run import LoadSampler, append_to_results, machine
    from dtfkit.recipes import predict

    parser = argparse.ArgumentParser(prog="python -m benchmarks.predict", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per run (default 3)")
    parser.add_argument("--save", help="write the measured runs to this JSON file")
    parser.add_argument("--load", help="read the runs from this JSON file instead of measuring")
    parser.add_argument("--append", action="store_true", help="add the report to benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    facts = machine()
    if args.load:
        with open(args.load) as f:
            saved = json.load(f)
        rows, header, facts["date"] = saved["rows"], saved["header"], saved.get("date", facts["date"])
    else:
        load = LoadSampler()
        began = time.monotonic()
        rows = []
        for delay in DELAYS:
            print(f"measuring d = {delay} ...", file=sys.stderr, flush=True)
            rows += predict.measure([delay], NS, SIZES, link=LINK, steps_per_run=args.steps)
        header = (
            "; ".join(f"{k} {v}" for k, v in facts.items() if k != "date")
            + f"; 1-minute load average during the run: {load.stop()}; {time.monotonic() - began:.0f} s "
            f"of measuring. 1 ps + 6 workers, link {LINK} on every task, one cluster per delay; "
            f"{args.steps} timed steps per run (median); communication = step - empty step."
        )
        if args.save:
            with open(args.save, "w") as f:
                json.dump({"rows": rows, "header": header, "date": facts["date"]}, f)
    text = (
        f"# Predict, then run (issue 43; `python -m benchmarks.predict --steps {args.steps}`, {facts['date']})\n\n"
        f"{header}\n\n{report(rows)}\n"
    )
    print(text)
    if args.append:
        print(f"appended to {append_to_results(text)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
