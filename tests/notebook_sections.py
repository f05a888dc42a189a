"""Reading the chapter notebooks as their sections: headings, cell spans, recorded durations.

Sections are found by their markdown headings (``"## 5."``, ``"### Kill a worker"``), never by
cell index, so the tests that use this survive edits of the chapters.

Example::

    path, nb = load("04_")
    start, end = section_span(nb["cells"], "## 3.")     # the cells of section 3
    [duration(c) for c in nb["cells"][start:end]]      # seconds each code cell took when committed
"""

from __future__ import annotations

import configparser
import datetime
import json
import re
from pathlib import Path
from typing import Any

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
_HEADING = re.compile(r"^(#{1,6}) +(.*\S)")


def load(prefix: str) -> tuple[Path, dict[str, Any]]:
    """The chapter notebook whose file name starts with ``prefix`` (``"04_"``), as JSON."""
    (path,) = sorted(NOTEBOOKS.glob(f"{prefix}*.ipynb"))
    return path, json.loads(path.read_text(encoding="utf-8"))


def chapters() -> list[Path]:
    """Every chapter notebook, in order."""
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def source(cell: dict[str, Any]) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def headings(cell: dict[str, Any]) -> list[tuple[int, str]]:
    """``(level, text)`` of every heading line of a markdown cell (not those inside code fences)."""
    if cell.get("cell_type") != "markdown":
        return []
    found, fenced = [], False
    for line in source(cell).splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def section_span(cells: list[dict[str, Any]], first: str, last: str | None = None) -> tuple[int, int]:
    """``(start, end)``: the cells from the heading starting with ``first`` to the end of the
    section whose heading starts with ``last`` (default: ``first``), where a section ends at the
    next heading of the same or a higher level."""
    start = _heading_cell(cells, first)
    stop_at = _heading_cell(cells, last) if last else start
    if stop_at < start:
        raise ValueError(f"{last!r} comes before {first!r}")
    closing = last or first
    level = len(closing) - len(closing.lstrip("#"))
    for index in range(stop_at + 1, len(cells)):
        if any(lv <= level for lv, _ in headings(cells[index])):
            return start, index
    return start, len(cells)


def _heading_cell(cells: list[dict[str, Any]], prefix: str) -> int:
    level = len(prefix) - len(prefix.lstrip("#"))
    text = prefix.lstrip("# ")
    hits = [
        i for i, c in enumerate(cells) if any(lv == level and t.startswith(text) for lv, t in headings(c))
    ]
    if len(hits) != 1:
        raise ValueError(f"{len(hits)} headings start with {prefix!r} (expected exactly one)")
    return hits[0]


def exercises_start(cells: list[dict[str, Any]]) -> int:
    """The index of the ``## Exercises`` markdown cell: the lesson is everything before it."""
    return _heading_cell(cells, "## Exercises")


def duration(cell: dict[str, Any]) -> float | None:
    """Seconds a code cell took in the committed run (``metadata.execution``), or None."""
    times = cell.get("metadata", {}).get("execution", {})
    began, ended = times.get("iopub.execute_input"), times.get("shell.execute_reply")
    if not began or not ended:
        return None
    parse = datetime.datetime.fromisoformat
    return (parse(ended.replace("Z", "+00:00")) - parse(began.replace("Z", "+00:00"))).total_seconds()


def sanitizer() -> list[tuple[re.Pattern[str], str]]:
    """The replacements of ``notebooks/nbval_sanitize.cfg`` (ports, pids, timings...)."""
    config = configparser.ConfigParser()
    config.read(NOTEBOOKS / "nbval_sanitize.cfg", encoding="utf-8")
    return [(re.compile(config[s]["regex"]), config[s]["replace"]) for s in config.sections()]


def sanitize(text: str, rules: list[tuple[re.Pattern[str], str]]) -> str:
    for pattern, replacement in rules:
        text = pattern.sub(replacement, text)
    return text


def output_text(cell: dict[str, Any]) -> str:
    """What a code cell printed and returned, as text (streams and ``text/plain``)."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(source({"source": out.get("text", "")}))
        elif "data" in out:
            parts.append(source({"source": out["data"].get("text/plain", "")}))
    return "".join(parts)
