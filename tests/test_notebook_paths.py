"""No committed chapter output shows the machine that ran it (issue 29): no home folder, no
virtual environment or Python installation, no path of the checkout, no kernel's temporary
cell file. Remote tracebacks and stacks shorten their paths (``dtfkit.engine.wire.frames``), and
dtfkit's warnings name the cell as IPython does; this test keeps it so in every saved output.

Every output of every code cell is read: streams, errors (their traceback too), and the
``text/*`` data of results and displays (``text/plain``, ``text/html``...).

Allowed, because the chapter prints them on purpose so the learner can open them and they say
nothing of who ran it or where the kit is installed: the temporary folders of a run, a cluster's
run folder ``/tmp/dtfkit-<uid>/<cluster id>/`` (its ``logs``, shown by the cluster's summary and
by ``dtfkit launch``) and the folders a chapter makes with ``tempfile.mkdtemp(prefix=...)``
(``/tmp/ch4-ckpt-4b_0dhqs/``: checkpoints, traces). Any other ``/tmp/`` path is reported.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from notebook_sections import NOTEBOOKS, source

# A file of dtfkit or of its checkout by an absolute path (its package's real modules and folders, so
# that a path the chapter prints on purpose, such as /opt/dtfkit/dtfkit_tfjob_entry.py in a container, is not one).
_PACKAGE = Path(__file__).resolve().parents[1] / "dtfkit"
_PACKAGE_ENTRIES = sorted(
    p.name for p in _PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()
)
_CHECKOUT_FILE = (
    r"(?<![\w.~-])/(?:[\w.-]+/)*(?:dtfkit/(?:"
    + "|".join(re.escape(name) for name in _PACKAGE_ENTRIES)
    + r")\b|notebooks/[\w.-]+\.ipynb|tests/[\w.-]+\.py)"
)

# (what it reveals, the pattern that finds it)
MACHINE_PATHS: list[tuple[str, re.Pattern[str]]] = [
    ("a home folder", re.compile(r"(?<![\w.~/-])/(?:root|home/[^/\s\"'<>]+|Users/[^/\s\"'<>]+)/")),
    ("an installed package's folder", re.compile(r"\b(?:site|dist)-packages\b")),
    ("a virtual environment", re.compile(r"(?<![\w-])\.?venv/")),
    (
        "a Python installation",
        re.compile(r"/lib/python3(?:\.\d+)?/|\.pyenv/|/(?:mini|ana)?conda3?/|/usr/(?:local/)?lib/python"),
    ),
    ("the checkout", re.compile(r"(?<![\w.~-])/work/|" + _CHECKOUT_FILE)),
    ("a kernel's temporary cell file", re.compile(r"/ipykernel_\d+/")),
]
TMP_PATH = re.compile(r"(?<![\w.~-])/tmp/[^\s\"'<>)]*")
ALLOWED_TMP = [
    re.compile(r"/tmp/dtfkit-\d+/\d+-[0-9a-f]{8}(?:/|$)"),  # a cluster's run folder (its logs)
    re.compile(
        r"/tmp/[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*-[a-z0-9_]{8}(?:/|$)"
    ),  # tempfile.mkdtemp(prefix="ch4-ckpt-")
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def machine_paths(text: str) -> list[tuple[str, str]]:
    """``(what it reveals, the text around it)`` for every machine path in ``text``.

    >>> machine_paths('  File "/home/ada/x.py", line 3')
    [('a home folder', '  File "/home/ada/x.py", line 3')]
    """
    found = []
    for kind, pattern in MACHINE_PATHS:
        found += [(kind, _around(text, m)) for m in pattern.finditer(text)]
    for match in TMP_PATH.finditer(text):
        if not any(allowed.match(match.group()) for allowed in ALLOWED_TMP):
            found.append(("a temporary file", _around(text, match)))
    return found


def _around(text: str, match: re.Match[str]) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    line = text[start : end if end >= 0 else len(text)]
    return line if len(line) <= 160 else line[max(0, match.start() - start - 60) :][:160]


def output_texts(cell: dict[str, Any]) -> list[tuple[str, str]]:
    """``(which output, its text)`` of every output of a code cell: streams, errors, ``text/*`` data."""
    texts = []
    for number, out in enumerate(cell.get("outputs", [])):
        kind = out.get("output_type")
        if kind == "stream":
            texts.append((f"output {number} ({out.get('name')})", source({"source": out.get("text", "")})))
        elif kind == "error":
            lines = [out.get("ename", ""), out.get("evalue", ""), *out.get("traceback", [])]
            texts.append((f"output {number} (error)", ANSI.sub("", "\n".join(lines))))
        for mime, data in (out.get("data") or {}).items():
            if mime.startswith("text/"):
                texts.append((f"output {number} ({kind} {mime})", source({"source": data})))
    return texts


def notebook_findings(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    findings = []
    for index, cell in enumerate(cells):
        for where, text in output_texts(cell):
            found = machine_paths(text)
            if found:  # one line per output: what it reveals, and the first place
                kinds = ", ".join(dict.fromkeys(kind for kind, _ in found))
                findings.append(f"{path.name} cell {index} {where}: {kinds}: {found[0][1].strip()!r}")
    return findings


NOTEBOOK_FILES = sorted(NOTEBOOKS.glob("*.ipynb")) + sorted((NOTEBOOKS / "zh_CN").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=[p.stem for p in NOTEBOOK_FILES])
def test_no_saved_output_shows_a_machines_paths(path):
    findings = notebook_findings(path)
    assert not findings, (
        "saved outputs show the paths of the machine that ran them (cells counted from 0); re-execute "
        "these cells with the current dtfkit (remote tracebacks shorten their paths), or stop printing "
        "the path:\n" + "\n".join(findings)
    )


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1045', "a home folder"),
        (
            '  File "/home/ada/venv/lib/python3.11/site-packages/tensorflow/x.py"',
            "an installed package's folder",
        ),
        ("WARNING:tensorflow:From /work/main/dtfkit/recipes/mwms_fault.py:561: ...", "the checkout"),
        ("WARNING:tensorflow:From /srv/course/dtfkit/recipes/mwms_fault.py:561: ...", "the checkout"),
        ("/srv/venv/bin/python", "a virtual environment"),
        ('  File "/usr/lib/python3.11/threading.py", line 1', "a Python installation"),
        ("/tmp/ipykernel_21175/1357837691.py:4: UserWarning: dtfkit: ...", "a kernel's temporary cell file"),
        ('  File "/srv/course/notebooks/12_when_things_go_wrong.ipynb"', "the checkout"),
        ('  File "/srv/course/tests/test_remote_source.py", line 3', "the checkout"),
        ('  File "/tmp/pytest-of-ada/pytest-3/learner.py", line 3', "a temporary file"),
    ],
)
def test_each_kind_of_machine_path_is_found(text, kind):
    assert kind in [found for found, _ in machine_paths(text)]


@pytest.mark.parametrize(
    "text",
    [
        "<small>logs: <code>/tmp/dtfkit-0/26461-226e5f64/logs</code></small>",
        "INFO:tensorflow:Saving checkpoints for 0 into /tmp/ch4-ckpt-4b_0dhqs/model.ckpt.",
        "  ps: /tmp/dtfkit-ch11-edpg27b0/ps_steps.json  (14 KiB)",
        '  File "tensorflow/python/training/monitored_session.py", line 1264, in _create_session',
        '  File "dtfkit/recipes/fault.py", line 3, in run',
        "  Cell In[5], line 3, in mine",
        "Cell In[4]:4: UserWarning: dtfkit: RayCluster: ...",
        "~/course/train.py",
        "- /opt/dtfkit/dtfkit_tfjob_entry.py",  # a path inside the exported job's container image
        "see https://github.com/tensorflow/tensorflow/blob/v2.21.0/tensorflow/python/training/server_lib.py",
    ],
)
def test_what_a_chapter_may_show(text):
    assert machine_paths(text) == []
