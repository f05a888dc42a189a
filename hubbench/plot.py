"""A picture of the bench's tables: how long students waited and how much memory the class took, by class size.

Reads the markdown files ``classroom-bench --markdown`` writes (one per run: with and without the task zygote, or
two machines) and draws two panels: seconds from "run" to the first cluster and to the exercise checked (the
median and the slowest student), and the class's memory (the students' PSS summed, and the machine's used
memory at its peak), against the number of students. Runs in the teacher's process, after the bench.

    python -m hubbench.plot bench-off.md bench-on.md -o classroom-bench.png

Example::

    rows = read_table(Path("bench-off.md"))     # one dict per class size
    draw({"zygote on": rows}, Path("classroom-bench.png"))
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from dtfkit import fonts
from dtfkit.i18n import LANGUAGES, _, in_language, language
from hubbench.bench import TABLE_COLUMNS


def _numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", cell)]


def read_table(path: Path) -> list[dict[str, float | str]]:
    """The class rows of the bench's table in ``path`` (the first markdown table whose header names students)."""
    rows: list[dict[str, float | str]] = []
    header: list[str] | None = None
    # Each column's title in every language the bench writes, to its English title.
    columns = {in_language(c, lang): c for c in TABLE_COLUMNS for lang in LANGUAGES}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            if header and rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            if columns.get(cells[0]) == "students":
                header = [columns.get(c, c) for c in cells]
            continue
        if set(cells[0]) <= {"-"}:
            continue
        column = {name.split(",")[0]: value for name, value in zip(header, cells, strict=True)}
        first, checked = _numbers(column["first cluster"]), _numbers(column["exercise checked"])
        before, peak = _numbers(column["machine used"])[:2]
        rows.append(
            {
                "students": int(column["students"]),
                "zygote": column["task zygote"],
                "first_p50": first[0],
                "first_max": first[2],
                "checked_p50": checked[0],
                "checked_max": checked[2],
                "pss_per_student": _numbers(column["peak PSS per student"])[0],
                "class_pss": _numbers(column["class PSS peak"])[0],
                "machine_before": before,
                "machine_peak": peak,
            }
        )
    if not rows:
        raise ValueError(
            f"{path}: no classroom-bench table found (a header row starting with '| students |')"
        )
    return rows


def draw(runs: dict[str, list[dict[str, float | str]]], output: Path) -> Path:
    """Two panels, one line per run and measure; writes ``output`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fonts.draw_in_the_language(language())  # a Chinese class's bench draws Chinese words

    fig, (times, memory) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, rows in runs.items():
        n = [r["students"] for r in rows]
        line = times.plot(
            n,
            [r["checked_p50"] for r in rows],
            marker="o",
            label=_("exercise checked ({run})").format(run=label),
        )[0]
        times.plot(n, [r["checked_max"] for r in rows], ls=":", color=line.get_color())
        line = times.plot(
            n, [r["first_p50"] for r in rows], marker="s", label=_("first cluster ({run})").format(run=label)
        )[0]
        times.plot(n, [r["first_max"] for r in rows], ls=":", color=line.get_color())
        line = memory.plot(
            n, [r["class_pss"] for r in rows], marker="o", label=_("students' PSS ({run})").format(run=label)
        )[0]
        memory.plot(
            n,
            [r["machine_peak"] for r in rows],
            ls="--",
            color=line.get_color(),
            label=_("machine used ({run})").format(run=label),
        )
    times.set(
        xlabel=_("students pressing run together"), ylabel=_("seconds after run (median; dotted: slowest)")
    )
    times.set_title(_("How long each student waited"))
    memory.set(xlabel=_("students pressing run together"), ylabel=_("GiB at the peak"))
    memory.set_title(_("What the class held in memory"))
    for ax in (times, memory):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "tables", nargs="+", type=Path, help="markdown files written by classroom-bench --markdown"
    )
    parser.add_argument("-o", "--output", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args(argv)
    runs = {}
    for path in args.tables:
        rows = read_table(path)
        runs[f"zygote {rows[0]['zygote']}" if len(args.tables) > 1 else path.stem] = rows
    print(f"wrote {draw(runs, args.output)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
