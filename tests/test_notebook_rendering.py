"""The committed notebooks read well where widgets do not render (GitHub, nbviewer).

Every output that carries a widget view also carries a text or image fallback that says something:
not ipywidgets' bare repr (``VBox(children=(HTML(...``) nor tqdm's ``0%|`` line. Chapter 8 shows a
screenshot of the lab panel (made by ``tests/test_browser_lab.py``) right above the live panel.

Run the same check on any executed notebook (e.g. a copy executed with nbconvert)::

    python3 tests/test_notebook_rendering.py /tmp/executed-copy.ipynb
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PANEL_NOTEBOOK = REPO / "notebooks" / "08_sync_async_lab.ipynb"
PANEL_IMAGE = "images/08_lab_panel.png"

# ipywidgets' repr: a widget class name and its traits; tqdm's text fallback: "  0%|" and friends.
_WIDGET_REPR = re.compile(
    r"^\s*[A-Z]\w*\((?:\)|children=|value=|layout=|description=|_dom_classes=|max=|min=)"
)
_TQDM_LINE = re.compile(r"\d+%\|")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def is_bare_widget_text(text: str) -> bool:
    """True when a text fallback is only a widget's repr or a tqdm bar: nothing a reader can use."""
    text = text.strip()
    return not text or bool(_WIDGET_REPR.match(text) or _TQDM_LINE.search(text))


def widget_only_outputs(path: Path) -> list[str]:
    """Each output of notebook ``path`` that shows a widget without a meaningful fallback, as
    ``"<file> cell <n>: <what it falls back to>"``."""
    nb = json.loads(Path(path).read_text())
    problems = []
    for number, cell in enumerate(nb["cells"]):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_MIME not in data or "image/png" in data:
                continue
            fallbacks = [_text(data[mime]) for mime in ("text/plain", "text/html") if mime in data]
            if not any(not is_bare_widget_text(text) for text in fallbacks):
                shown = fallbacks[0][:80] if fallbacks else "(no text/plain, text/html or image/png)"
                problems.append(f"{Path(path).name} cell {number}: {shown!r}")
    return problems


def test_the_check_tells_a_bare_widget_from_a_fallback():
    assert is_bare_widget_text("VBox(children=(HTML(value='<b>dtfkit sync/async lab</b>'),))")
    assert is_bare_widget_text("HBox(children=(IntProgress(value=0, max=3),))")
    assert is_bare_widget_text("IntProgress(value=0, max=3)")
    assert is_bare_widget_text("HTML(value='<b>x</b>')")
    assert is_bare_widget_text("starting 1 ps + 2 workers:   0%|          | 0/3 [00:00<?, ?task/s]")
    assert is_bare_widget_text("")
    assert not is_bare_widget_text("started 3 tasks (ps:0, worker:0, worker:1) in 4.2 s")
    assert not is_bare_widget_text(
        "dtfkit sync/async lab panel (a live widget: run the notebook in Jupyter to use it)"
    )


def test_the_check_finds_a_widget_only_output(tmp_path):
    def output(data):
        return {"output_type": "display_data", "metadata": {}, "data": data}

    view = {"version_major": 2, "version_minor": 0, "model_id": "abc"}
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "source": [],
                "metadata": {},
                "execution_count": 1,
                "outputs": [
                    output({WIDGET_MIME: view, "text/plain": ["starting 1 worker:   0%|          | 0/1"]}),
                    output({WIDGET_MIME: view, "text/plain": ["started 1 task (worker:0) in 1.0 s"]}),
                    output({WIDGET_MIME: view, "text/plain": ["VBox(children=())"], "image/png": "iVBOR"}),
                    output({WIDGET_MIME: view}),
                ],
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    problems = widget_only_outputs(path)
    assert len(problems) == 2 and "0%|" in problems[0] and "no text/plain" in problems[1], problems


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebook_has_no_widget_only_output(notebook):
    problems = widget_only_outputs(notebook)
    assert not problems, (
        "outputs that show only a widget (GitHub and nbviewer render them as this text); re-execute the "
        "notebook with a dtfkit whose progress and panel carry a text fallback:\n" + "\n".join(problems)
    )


def test_chapter_8_shows_the_panel_screenshot_right_above_the_panel():
    from browser_support import screenshot_problem

    cells = json.loads(PANEL_NOTEBOOK.read_text())["cells"]
    panel = next(
        i for i, c in enumerate(cells) if c["cell_type"] == "code" and "lab.panel()" in "".join(c["source"])
    )
    above = cells[panel - 1]
    assert above["cell_type"] == "markdown" and f"]({PANEL_IMAGE})" in "".join(above["source"]), above
    problem = screenshot_problem(PANEL_NOTEBOOK.parent / PANEL_IMAGE)
    assert problem is None, problem


@pytest.mark.slow
def test_an_executed_notebook_saves_progress_and_panel_as_text(tmp_path):
    """nbclient (what nbconvert --execute runs) records the progress summary and the panel's description."""
    import nbformat
    from conftest import subprocess_env
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import dtfkit\ncluster = dtfkit.LocalCluster(workers=1, name=None)"),
        nbformat.v4.new_code_cell(
            "try:\n    dtfkit.LocalCluster(workers=1, name=None, setup=lambda: 1 / 0)\n"
            "except dtfkit.errors.DtfkitError as err:\n    print('start failed:', type(err).__name__)"
        ),
        nbformat.v4.new_code_cell("cluster.close()\nfrom dtfkit.lab import Lab\nlab = Lab()\nlab.panel()"),
    ]
    env = subprocess_env()
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute(env=env)  # the kernel imports dtfkit from this checkout
    path = tmp_path / "executed.ipynb"
    nbformat.write(nb, str(path))

    assert widget_only_outputs(path) == []
    texts = [
        [_text(o["data"]["text/plain"]) for o in cell["outputs"] if "data" in o and "text/plain" in o["data"]]
        for cell in nb.cells
    ]
    assert re.fullmatch(r"started 1 task \(worker:0\) in \d+\.\d s", texts[0][0]), texts
    assert re.fullmatch(
        r"starting 1 worker: stopped after \d+\.\d s with 0 of 1 tasks ready \(failed with \w+\)", texts[1][0]
    ), texts
    assert texts[2][-1].startswith("dtfkit sync/async lab panel") and texts[2][-1].endswith("no run yet"), (
        texts
    )
    assert WIDGET_MIME in nb.cells[2].outputs[-1]["data"]  # the live panel is still there for Jupyter


if __name__ == "__main__":
    found = [problem for path in sys.argv[1:] for problem in widget_only_outputs(Path(path))]
    print("\n".join(found) or f"no widget-only output in {len(sys.argv) - 1} notebook(s)")
    sys.exit(1 if found else 0)
