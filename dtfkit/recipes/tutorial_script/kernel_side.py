"""Runs in the notebook kernel: the tutorial's MNIST script as chapters 2 and 3 run it: its source, its
launch and the lines it printed.

Never imports TensorFlow; this recipe has no task side: it works on what runs returned.
"""

from __future__ import annotations

import ast
import re
import string
from importlib.util import find_spec
from pathlib import Path

from dtfkit.course import listing
from dtfkit.errors import DtfkitError
from dtfkit.i18n import N_, _

# find_spec of a submodule imports only its (empty) package, not the script and its TensorFlow.
_SPEC = find_spec("dtfkit.examples.distributed_mnist")
assert _SPEC is not None and _SPEC.origin is not None  # a module file of this package
PATH: str = _SPEC.origin

# TensorFlow's own Python log lines, as absl prints them (each twice: "INFO:tensorflow:..."
# and "I1123 15:46:50.361617 ... file.py:557] ..."; the same for WARNING). Tracebacks are kept.
_TF_LOG = re.compile(r"^((INFO|WARNING):tensorflow:|[IW]\d{4} \d\d:\d\d:\d\d\.\d+ )")
# The script's own lines, in the language it printed them in: the kernel's (DTFKIT_LANG reaches the tasks).
_TRAIN_STEP = N_("Train step {step:d}, loss: {loss:f}")
_DONE = N_("worker {index} done: local_steps={local_steps:d} global_step={step:d}")


def printed_line_pattern(template: str) -> re.Pattern[str]:
    """The lines the script printed with ``_(template).format(...)`` in this language: each
    ``{field}`` a group (digits, or anything for ``:f`` and plain fields).

    Example::

        >>> printed_line_pattern(_TRAIN_STEP).findall("Train step 20, loss: 1.000000")
        [('20', '1.000000')]
    """
    pattern = ""
    for literal, _field, spec, _conversion in string.Formatter().parse(_(template)):
        pattern += re.escape(literal)
        if _field is not None:
            pattern += r"(\d+)" if spec == "d" else r"(\S+)"
    return re.compile(f"^{pattern}$", re.M)


def source_lines(name: str, path: str = PATH) -> tuple[int, list[str]]:
    """The first line number and the lines of the top-level function ``name`` in ``path``."""
    text = Path(path).read_text()
    # its comments in the reader's language
    shown = listing.in_the_language(text, docstrings=False).splitlines()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node.lineno, shown[node.lineno - 1 : node.end_lineno]
    raise DtfkitError(f"no function {name!r} in {path}")


def show(name: str, start: str | None = None, stop: str | None = None, path: str = PATH) -> None:
    """Print the function ``name`` of the script with its line numbers; ``start``/``stop``
    cut it to the lines from the first one containing ``start`` up to the first one
    after it containing ``stop`` (included)."""
    first, lines = source_lines(name, path)
    begin = next((i for i, line in enumerate(lines) if start in line), 0) if start else 0
    end = len(lines)
    if stop:
        end = next((i + 1 for i, line in enumerate(lines) if i >= begin and stop in line), end)
    shown = _("{file}, lines {first}-{last}").format(
        file=Path(path).name, first=first + begin, last=first + end - 1
    )
    print(f"# {shown}")
    for number, line in enumerate(lines[begin:end], start=first + begin):
        print(f"{number:4d}  {line}")


_DEPRECATION_TAIL = "Instructions for updating:"
_hiding_next: set[str] = set()  # tasks whose next line ends a hidden deprecation notice


def echo_script_lines(task: str, line: str) -> None:
    """``launch(..., echo=echo_script_lines)``: print what the script prints, ``[worker:0] line``,
    but not TensorFlow's own INFO and WARNING log lines, deprecation notices included (the log
    files in ``result.log_dir`` keep them)."""
    if _TF_LOG.match(line):
        return
    if line == _DEPRECATION_TAIL:  # a deprecation WARNING goes on with this line and one more
        _hiding_next.add(task)
        return
    if task in _hiding_next:
        _hiding_next.discard(task)
        return
    print(f"[{task}] {line}", flush=True)


def worker_reports(result) -> dict[str, dict]:
    """What each worker of a ``launch`` of the script printed, read from its log file:
    ``printed`` (the global steps of its ``Train step`` lines, in order), ``local_steps``
    and ``global_step`` (from its last line, ``worker N done: ...``; None if it never got there)."""
    reports = {}
    for task in sorted(t for t in result.exit_codes if t.startswith("worker:")):
        log = Path(result.log_dir) / f"{task.replace(':', '-')}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        done = printed_line_pattern(_DONE).findall(text)
        reports[task] = {
            "printed": [int(step) for step, _loss in printed_line_pattern(_TRAIN_STEP).findall(text)],
            "local_steps": int(done[-1][1]) if done else None,
            "global_step": int(done[-1][2]) if done else None,
        }
    return reports


def print_steps(reports: dict[str, dict], width: int = 100) -> None:
    """One line per worker: the global steps it printed, wrapped at ``width`` characters."""
    for task, report in reports.items():
        line = _("{task} printed {count} steps: {steps}").format(
            task=task, count=len(report["printed"]), steps=" ".join(map(str, report["printed"]))
        )
        while len(line) > width:
            cut = line.rfind(" ", 0, width)
            print(line[:cut])
            line = " " * 4 + line[cut + 1 :]
        print(line)
