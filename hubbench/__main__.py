"""``python -m hubbench`` (as root, from the checkout's root): run classes on a real JupyterHub and measure them.

The same command as ``python -m dtfkit classroom-bench`` (which forwards here); docs/teaching.md says what it
measures. Example::

    sudo python3 -m hubbench --students 1,2,4 --markdown bench.md
"""

from __future__ import annotations

import argparse
import signal

from dtfkit import i18n
from dtfkit.errors import DtfkitError, exit_code
from dtfkit.i18n import _
from hubbench import bench


def build_parser() -> argparse.ArgumentParser:
    b = argparse.ArgumentParser(
        prog="python -m hubbench",
        description="Create N system users, start a JupyterHub (configurable-http-proxy, per-student memory caps), "
        "have every student run chapter 1's first cluster and exercise 1.1 at the same moment, autograde them "
        "with nbgrader, and print times, memory, CPU and failures; then remove the users. Classes grow over "
        "--students until one does not hold; the bench says why.",
    )
    b.add_argument("--students", default="1,2,4,8", help="class sizes to run, in order (default 1,2,4,8)")
    b.add_argument(
        "--no-zygote",
        action="store_true",
        help="start every task as a fresh interpreter (DTFKIT_ZYGOTE=0 in every student's kernel), to compare",
    )
    b.add_argument(
        "--mem-limit", default="3G", help="memory cap per student, as JupyterHub's mem_limit (default 3G)"
    )
    b.add_argument(
        "--max-first-cluster",
        type=float,
        default=300.0,
        help="stop growing the class when a first cluster takes longer than this many seconds (default 300)",
    )
    b.add_argument("--no-grade", action="store_true", help="skip nbgrader autograde")
    b.add_argument(
        "--browser",
        action="store_true",
        help="student 1 works in a real JupyterLab page in headless Chromium (needs playwright and chromium)",
    )
    b.add_argument("--artifacts", default=None, help="where the browser student's screenshots go")
    b.add_argument(
        "--remove-leftovers",
        action="store_true",
        help="only remove the accounts, processes and cgroups an interrupted bench run left behind",
    )
    b.add_argument("--markdown", default=None, help="also write the tables to this markdown file")
    b.add_argument(
        "--lang",
        choices=["zh_CN"],
        default=None,
        help="the class works in this edition of chapter 1 (notebooks/zh_CN), with DTFKIT_LANG set in every "
        "student's server",
    )
    return b


def run(ns: argparse.Namespace) -> int:
    """What ``python -m hubbench`` does with its parsed arguments."""
    if ns.lang:  # a Chinese class's bench writes its tables in Chinese too
        i18n.set_language(ns.lang)

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # so that a killed bench still removes its users, hub and groups

    signal.signal(signal.SIGTERM, interrupted)
    if ns.remove_leftovers:
        removed = bench.remove_leftovers()
        print(f"removed {len(removed)} bench account(s)" + (f": {', '.join(removed)}" if removed else ""))
        return 0
    try:
        sizes = [int(n) for n in ns.students.split(",")]
    except ValueError:
        raise DtfkitError(f"--students {ns.students!r}: give class sizes as numbers, e.g. 1,2,4,8") from None
    if not sizes or min(sizes) < 1:
        raise DtfkitError(f"--students {ns.students!r}: every class size is at least 1")
    problems = bench.preflight()
    if ns.browser:
        from hubbench.browser import missing

        if missing():
            problems.append(f"--browser: {missing()}")
    if problems:
        raise DtfkitError("classroom-bench cannot run here:\n  - " + "\n  - ".join(problems))
    results, stopped = bench.run_sizes(
        sizes,
        zygote=not ns.no_zygote,
        mem_limit=ns.mem_limit,
        max_first_cluster=ns.max_first_cluster,
        grade=not ns.no_grade,
        browser=ns.browser,
        artifacts=ns.artifacts,
        lang=ns.lang,
    )
    held = max((r.students for r in results if not r.stopped), default=0)
    text = bench.table(results) + "\n\n"
    text += (
        _("Held: {held} student(s) at once").format(held=held)
        + (_("; stopped: {stopped}").format(stopped=stopped) if stopped else _("; every size held"))
        + "\n\n"
    )
    text += bench.sizing(results) + "\n"
    print(text)
    if ns.markdown:
        with open(ns.markdown, "w", encoding="utf-8") as f:
            f.write(text)
    return 0 if results and not results[0].stopped else 1


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the bench; the exit code says whether the first class held."""
    ns = build_parser().parse_args(argv)
    return exit_code("hubbench", "the class's users, hub and cgroups were removed", lambda: run(ns))


if __name__ == "__main__":
    raise SystemExit(main())
