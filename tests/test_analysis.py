"""dtfkit.recipes.analysis and dtfkit.htmltable: the row analyses and the HTML table the
chapters, the lab and the demo share (no TensorFlow, no cluster)."""

from __future__ import annotations

import math

import pytest
from conftest import doctest_recipe

from dtfkit import htmltable
from dtfkit.recipes import analysis


def test_docstring_examples():
    for module in (analysis, htmltable):
        result = doctest_recipe(module)
        assert result.attempted >= 1 and result.failed == 0, module.__name__


def _rows(order: str, steps: list[int] | None = None) -> list[dict]:
    """One row per letter: task ``worker:<letter>``, reported at time i, global step ``steps[i]``."""
    steps = steps or list(range(1, len(order) + 1))
    return [
        {"task": f"worker:{t}", "time": float(i), "step": s}
        for i, (t, s) in enumerate(zip(order, steps, strict=True))
    ]


def test_interleaving_by_time_or_by_global_step():
    # Reported 0 0 1 1 in time, but worker:1's steps got the global steps 2 and 4.
    rows = _rows("0011", steps=[1, 3, 2, 4])
    assert analysis.interleavings(rows) == 1
    assert analysis.interleavings(rows, by="step") == 3
    assert analysis.interleaving_fraction(rows) == pytest.approx(1 / 3)
    assert analysis.interleaving_fraction(rows, by="step") == 1.0
    # Ties in the global step (sync: every worker of an update reports it) keep time order.
    assert analysis.step_order(_rows("1010", steps=[1, 1, 2, 2]), by="step") == [
        f"worker:{t}" for t in "1010"
    ]
    assert analysis.interleaving_fraction(_rows("0")) == 0.0
    with pytest.raises(ValueError, match="by must be"):
        analysis.interleavings(rows, by="loss")


def test_rows_without_a_step_and_other_tasks_are_left_out_when_asked():
    rows = _rows("01") + [{"task": "worker:0", "time": 5.0}, {"task": "chief:0", "time": 6.0, "step": 9}]
    assert analysis.interleavings(rows) == 2
    assert analysis.interleavings(rows, tasks={"worker:0", "worker:1"}) == 1


def test_staleness_shares_and_pace():
    assert [analysis.staleness(3, a) for a in (2, 4, 5, 9)] == [0, 0, 1, 5]
    assert analysis.shares({"a": 1, "b": 3}) == {"a": 0.25, "b": 0.75}
    assert analysis.participation([["a"], ["a", "b"], ["a", "b"]], "b", last=1.0) == pytest.approx(2 / 3)
    assert analysis.participation([], "b") == 0.0
    assert math.isnan(analysis.steps_per_sec(_rows("0")))
    assert math.isnan(analysis.update_interval([1.0]))
    assert analysis.update_interval([0.0, 1.0, 2.0, 10.0], last=0.5) == 8.0
    assert analysis.steady_time([], default=7.0) == 7.0


def test_html_table_escapes_and_marks_rows():
    page = htmltable.html_table(
        ["op", "<task>"],
        [["<b>", 1], ["x", None]],
        caption="a & b",
        css_class="ops",
        row_class="op-row",
        row_styles=["background:#fff", None],
        table_style="border-collapse:collapse",
    )
    assert page.startswith("<table class='ops' style='border-collapse:collapse'><caption")
    assert "<b>a &amp; b</b>" in page and "&lt;task&gt;" in page and "&lt;b&gt;" in page
    assert page.count("<tr class='op-row'") == 2 and page.count("background:#fff") == 1
    assert "<td style='text-align:left'>None</td>" in page
    assert "<caption" not in htmltable.html_table(["a"], [])
    with pytest.raises(ValueError, match="row_styles"):
        htmltable.html_table(["a"], [["1"]], row_styles=[])
