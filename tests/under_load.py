"""Run the timing-sensitive tests and chapters 3, 4, 7 and 8 to 13 with CPU burners beside them.

What a test or a chapter checks must hold on a busy 2-core classroom server, not only on
a quiet machine. This command starts ``--burners`` processes that each spin one core at
100 %, runs the tests marked ``timing`` and the chapters whose facts come from real
training runs (3, 4, 7, 8, 9, 10: on a simulated Ray cluster, 11 and 13: on delayed links, and 12: failures bounded by timeouts) under nbval, then ends the burners (by pid, also on Ctrl-C or
a failure) and prints one line per part with its exit code and duration.

Usage, from the repository root::

    python tests/under_load.py                 # two burners, one round
    python tests/under_load.py --rounds 3      # three rounds in a row
    python tests/under_load.py --burners 0     # the same selection on a quiet machine
    python tests/under_load.py --tests tests/test_lab.py --no-chapters
    python tests/under_load.py -- -x -q        # extra arguments for pytest

Exits non-zero when any part failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = [
    "notebooks/03_sync_replicas_optimizer.ipynb",
    "notebooks/04_monitored_training_session.ipynb",
    "notebooks/07_multi_worker_and_parameter_server.ipynb",
    "notebooks/08_sync_async_lab.ipynb",
    "notebooks/09_ps_vs_ring_allreduce.ipynb",
    "notebooks/10_beyond_one_machine.ipynb",
    "notebooks/11_communication_up_close.ipynb",
    "notebooks/12_when_things_go_wrong.ipynb",
    "notebooks/13_predict_then_run.ipynb",
]
BURN = "while True:\n    pass\n"


def start_burners(count: int) -> list[subprocess.Popen]:
    """``count`` processes that each keep one core busy (their own session, so a Ctrl-C in
    the terminal reaches this script, which ends them)."""
    return [
        subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True, stdin=subprocess.DEVNULL)
        for _ in range(count)
    ]


def stop_burners(burners: list[subprocess.Popen]) -> None:
    for proc in burners:
        if proc.poll() is None:
            proc.kill()
    for proc in burners:
        proc.wait(timeout=10)


def run_part(name: str, args: list[str]) -> tuple[str, int, float]:
    print(f"\n=== {name}: {' '.join(args)}", flush=True)
    start = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "pytest", *args], cwd=REPO)
    return name, code, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--burners", type=int, default=2, help="CPU-burning processes (default 2)")
    parser.add_argument("--rounds", type=int, default=1, help="how many times to run everything")
    parser.add_argument("--no-chapters", action="store_true", help="only the tests marked timing")
    parser.add_argument(
        "--tests", default="tests", help="where to look for tests marked timing (default tests)"
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    opts = parser.parse_args(argv)
    if opts.burners < 0 or opts.rounds < 1:
        parser.error("--burners must be >= 0 and --rounds >= 1")

    results = []
    burners = start_burners(opts.burners)
    print(f"started {len(burners)} CPU burner(s): pids {[p.pid for p in burners]}", flush=True)
    try:
        for round_no in range(1, opts.rounds + 1):
            results.append(
                run_part(
                    f"round {round_no}: tests marked timing", ["-m", "timing", opts.tests, *opts.pytest_args]
                )
            )
            if not opts.no_chapters:
                results.append(
                    run_part(
                        f"round {round_no}: chapters {', '.join(str(int(Path(c).name[:2])) for c in CHAPTERS)}",
                        [*CHAPTERS, *opts.pytest_args],
                    )
                )
    finally:
        stop_burners(burners)
        print(f"\nended the burner(s); load average now {os.getloadavg()[0]:.1f}")
    print(f"\n{'part':<40}{'exit':>6}{'minutes':>9}")
    for name, code, seconds in results:
        print(f"{name:<40}{code:>6}{seconds / 60:>9.1f}")
    failed = sum(1 for _, code, _ in results if code != 0)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
