"""Runs in the notebook kernel (or ``python -m dtfkit compat``): the compatibility table, each cell
run on the local cluster its strategy's tutorial uses (``cluster_layout``).

Never imports TensorFlow: what runs in the tasks is in ``task_side``.
"""

from __future__ import annotations

import html
import importlib.metadata
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from dtfkit.errors import TaskExited, TaskFailed, TaskTimeout
from dtfkit.i18n import N_, _
from dtfkit.progress import TextLine, _in_kernel
from dtfkit.recipes.compat.task_side import STRATEGIES, TRAINERS, train

WORKS, FAILS, NOT_INSTALLED, TIMED_OUT, NO_LEARNING = (
    N_("works"),
    N_("fails"),
    N_("not installed"),
    N_("timed out"),
    N_("ran, loss did not fall"),
)
TRAINER_TITLES = {
    "keras3_fit": "Keras 3 fit",
    "keras3_custom_loop": N_("Keras 3 custom loop"),
    "tf_keras_fit": "tf_keras fit",
    "tf_only_loop": N_("TF-only loop"),
}
_COLOURS = {
    WORKS: "#e8f5e9",
    FAILS: "#ffebee",
    TIMED_OUT: "#fff3e0",
    NO_LEARNING: "#fff3e0",
    NOT_INSTALLED: "#f5f5f5",
}
_ERROR_WIDTH = 160


def cluster_layout(strategy: str) -> tuple[dict[str, Any], str]:
    """The ``LocalCluster`` arguments a strategy's tutorial uses, and where its loop runs.

    Example::

        >>> cluster_layout("ParameterServerStrategy")[1]
        'chief'
    """
    if strategy == "MultiWorkerMirroredStrategy":
        return {"workers": 2, "start_servers": False}, "workers"
    if strategy == "ParameterServerStrategy":
        return {"chief": 1, "workers": 2, "ps": 1, "env": {"GRPC_FAIL_FAST": "use_caller"}}, "chief"
    if strategy in STRATEGIES:
        return {"workers": 1, "start_servers": False}, "workers"
    raise ValueError(f"unknown strategy {strategy!r}: one of {', '.join(STRATEGIES)}")


def first_error_line(exc_type: str, message: str) -> str:
    """The first line of a task's error as TensorFlow or Keras raised it, cut to one table row.

    A ``tf.function`` error starts with "in user code:" and ends with the real error: that one is quoted.

    Example::

        >>> first_error_line("ValueError", "Attempt to convert a value (PerReplica:{\\n  0: ...")
        'ValueError: Attempt to convert a value (PerReplica:{ …'
    """
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    line = lines[0] if lines else ""
    if line == "in user code:" and lines:
        line = lines[-1]
    else:
        line = f"{exc_type}: {line}"
        if len(lines) > 1:
            line += " …"
    return line if len(line) <= _ERROR_WIDTH else line[: _ERROR_WIDTH - 2] + " …"


@dataclass(frozen=True)
class Cell:
    """What one strategy × trainer did: ``outcome`` (``WORKS``, ``FAILS``...) and its detail."""

    strategy: str
    trainer: str
    outcome: str
    detail: str = ""
    steps_run: int | None = None
    iterations: int | None = None
    seconds: float = 0.0

    def __str__(self) -> str:
        """The outcome in the reader's language, then its detail: ``fails: ValueError: ...``."""
        if not self.detail:
            return _(self.outcome)
        return _("{outcome}: {detail}").format(outcome=_(self.outcome), detail=self.detail)


@dataclass(frozen=True)
class CompatTable:
    """Every cell run, with the versions they ran under; ``print`` it, or show it in a notebook.

    Example::

        table = compatibility_table(strategies=["OneDeviceStrategy"], trainers=["tf_only_loop"])
        table.outcome("OneDeviceStrategy", "tf_only_loop")     # 'works'
    """

    cells: tuple[Cell, ...]
    steps: int
    versions: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain data (for ``json.dumps``): the versions, the steps and every cell's fields."""
        return {
            "versions": dict(self.versions),
            "steps": self.steps,
            "cells": [asdict(c) for c in self.cells],
        }

    def cell(self, strategy: str, trainer: str) -> Cell:
        for cell in self.cells:
            if (cell.strategy, cell.trainer) == (strategy, trainer):
                return cell
        raise KeyError(f"{strategy} × {trainer} was not run")

    def outcome(self, strategy: str, trainer: str) -> str:
        return self.cell(strategy, trainer).outcome

    def strategies(self) -> list[str]:
        return list(dict.fromkeys(c.strategy for c in self.cells))

    def trainers(self) -> list[str]:
        return list(dict.fromkeys(c.trainer for c in self.cells))

    def caption(self) -> str:
        versions = ", ".join(f"{name} {version}" for name, version in self.versions.items())
        return _(
            "Which way to train works under which strategy ({versions}; {steps} steps each, on local clusters)"
        ).format(versions=versions, steps=self.steps)

    def notes(self) -> list[tuple[int, str, list[Cell]]]:
        """The errors to quote, numbered as the table's footnotes: one per distinct detail, with its cells."""
        by_detail: dict[str, list[Cell]] = {}
        for c in self.cells:
            if c.outcome != WORKS or c.detail:  # a cell that worked after a fault of TensorFlow's says so
                by_detail.setdefault(c.detail, []).append(c)
        return [(n, detail, cells) for n, (detail, cells) in enumerate(by_detail.items(), start=1)]

    def iteration_counts(self) -> list[Cell]:
        """The cells that ran with an optimizer: its ``iterations`` against the steps that ran."""
        return [c for c in self.cells if c.iterations is not None and c.steps_run is not None]

    def _short(self, cell: Cell, numbers: dict[tuple[str, str], int]) -> str:
        mark = numbers.get((cell.strategy, cell.trainer))
        return _(cell.outcome) + (f" ({mark})" if mark else "")

    def _rows(self) -> tuple[list[str], list[list[str]]]:
        numbers = {(c.strategy, c.trainer): n for n, _detail, cells in self.notes() for c in cells}
        header = [_("strategy")] + [_(TRAINER_TITLES[t]) for t in self.trainers()]
        rows = [
            [s] + [self._short(self.cell(s, t), numbers) for t in self.trainers()] for s in self.strategies()
        ]
        return header, rows

    def iteration_lines(self) -> list[str]:
        return [
            _(
                "{strategy}, {trainer}: optimizer.iterations counted {iterations} of the {steps_run} steps that ran"
            ).format(
                strategy=c.strategy,
                trainer=_(TRAINER_TITLES[c.trainer]),
                iterations=c.iterations,
                steps_run=c.steps_run,
            )
            for c in self.iteration_counts()
        ]

    def __str__(self) -> str:
        header, rows = self._rows()
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        lines = [self.caption()]
        for row in [header, *rows]:
            lines.append("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        for n, detail, cells in self.notes():
            where = "; ".join(f"{c.strategy} × {_(TRAINER_TITLES[c.trainer])}" for c in cells)
            lines.append(f"({n}) {detail}" + ("" if len(cells) > 1 else f"  [{where}]"))
        counts = self.iteration_lines()
        if counts:
            lines.append(_("Keras 3's step counter against a tf.Variable.assign_add in every step:"))
            lines += [f"  {line}" for line in counts]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        style = "text-align:left;padding:2px 6px;vertical-align:top"
        head = "".join(f"<th style='{style}'>{html.escape(h)}</th>" for h in self._rows()[0])
        body = []
        for strategy in self.strategies():
            cells = [f"<td style='{style}'><code>{html.escape(strategy)}</code></td>"]
            for trainer in self.trainers():
                c = self.cell(strategy, trainer)
                text = _(c.outcome) + (f": {c.detail}" if c.detail else "")
                cells.append(f"<td style='{style};background:{_COLOURS[c.outcome]}'>{html.escape(text)}</td>")
            body.append(f"<tr>{''.join(cells)}</tr>")
        counts = "".join(f"<li>{html.escape(line)}</li>" for line in self.iteration_lines())
        return (
            f"<table class='dtfkit-compat'><caption style='text-align:left'><b>{html.escape(self.caption())}"
            f"</b></caption><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            + (f"<ul>{counts}</ul>" if counts else "")
        )


def installed_versions() -> dict[str, str]:
    """The versions the tasks import, read from the installed packages' metadata (no import)."""
    found = {}
    for label, names in (
        ("TensorFlow", ("tensorflow", "tensorflow-cpu")),
        ("Keras", ("keras",)),
        ("tf_keras", ("tf-keras",)),
    ):
        for name in names:
            try:
                found[label] = importlib.metadata.version(name)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return found


# A fault of TensorFlow's own gRPC layer, not of the way to train: a remote op whose device string arrived as
# invalid UTF-8 ("Unable to parse request"), seen once in a CI run under load (ParameterServerStrategy, TF 2.21).
_TRANSIENT = ("Unable to parse request",)
ATTEMPTS = 3


def _transient(error: TaskFailed) -> str | None:
    """The line that makes ``error`` a fault of TensorFlow's transport (run the cell again), or None."""
    text = f"{error.remote_message}\n{error.remote_traceback}"
    for marker in _TRANSIENT:
        if marker in text:
            return first_error_line(error.exc_type, error.remote_message) + f" ({marker})"
    return None


def run_cell(
    strategy: str, trainer: str, *, steps: int = 40, timeout: float = 120.0, attempts: int = ATTEMPTS
) -> Cell:
    """Run one strategy × trainer on a fresh local cluster, always closed; never raises for what
    TensorFlow or Keras raised (that is the cell's detail). A fault of TensorFlow's own transport
    (``_TRANSIENT``) is not the cell's answer: the cell runs again on a fresh cluster, ``attempts`` times
    at most, and its detail says so.

    Example::

        run_cell("MultiWorkerMirroredStrategy", "keras3_custom_loop").outcome   # 'works'
    """
    began = time.monotonic()
    faults: list[str] = []
    for _attempt in range(attempts):
        cell, fault = _run_once(strategy, trainer, steps, timeout)
        if fault is None:
            break
        faults.append(fault)
    if faults and fault is None:
        note = _("after {n} run(s) again on a fresh cluster: {fault}").format(n=len(faults), fault=faults[-1])
    elif len(faults) > 1:
        note = _("{n} runs on fresh clusters, each with this fault of TensorFlow's transport").format(
            n=len(faults)
        )
    else:
        note = ""
    detail = "; ".join(d for d in (cell.detail, note) if d)
    return replace(cell, detail=detail, seconds=time.monotonic() - began)


def _run_once(strategy: str, trainer: str, steps: int, timeout: float) -> tuple[Cell, str | None]:
    """One run of a cell, and the transport fault that spoiled it (None when the outcome stands)."""
    from dtfkit.cluster import LocalCluster

    layout, on = cluster_layout(strategy)
    with LocalCluster(name="", progress=False, **layout) as cluster:
        try:
            ran = cluster.run(
                train, args=(strategy, trainer), kwargs={"steps": steps}, on=on, timeout=timeout
            )
        except TaskFailed as error:
            outcome = NOT_INSTALLED if error.exc_type == "NotInstalled" else FAILS
            detail = (
                error.remote_message.strip()
                if outcome == NOT_INSTALLED
                else first_error_line(error.exc_type, error.remote_message)
            )
            return Cell(strategy, trainer, outcome, detail), _transient(error)
        except (TaskTimeout, TaskExited) as error:
            first = str(error).strip().splitlines()[0]
            kind = TIMED_OUT if isinstance(error, TaskTimeout) else FAILS
            return Cell(strategy, trainer, kind, first[:_ERROR_WIDTH]), None
    results = list(ran.values())
    steps_run = min(r["steps_run"] for r in results)
    first = results[0]
    if steps_run < steps or first["loss_after"] >= first["loss_before"] / 2:
        detail = _("{steps_run} of {steps} steps ran; loss {before:.3g} → {after:.3g}").format(
            steps_run=steps_run, steps=steps, before=first["loss_before"], after=first["loss_after"]
        )
        return Cell(strategy, trainer, NO_LEARNING, detail, steps_run, first["iterations"]), None
    return Cell(strategy, trainer, WORKS, "", steps_run, first["iterations"]), None


def compatibility_table(
    strategies: Iterable[str] = STRATEGIES,
    trainers: Iterable[str] = TRAINERS,
    *,
    steps: int = 40,
    timeout: float = 120.0,
    progress: bool = True,
    on_cell: Callable[[Cell], None] | None = None,
) -> CompatTable:
    """Run every strategy × trainer (``task_side.STRATEGIES`` × ``task_side.TRAINERS``), one fresh local
    cluster each, and return the table. ``timeout`` bounds each cell; ``on_cell`` sees each as it ends.

    Example::

        from dtfkit.recipes import compat
        print(compat.compatibility_table(strategies=["MultiWorkerMirroredStrategy"]))
    """
    strategies, trainers = _known(strategies, STRATEGIES, "strategy"), _known(trainers, TRAINERS, "trainer")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
        raise ValueError(f"steps must be a whole number of at least 2, not {steps!r}")
    if not timeout or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    total = len(strategies) * len(trainers)
    shown = _Shown(progress)
    cells: list[Cell] = []
    began = time.monotonic()
    for strategy in strategies:
        for trainer in trainers:
            shown.say(
                _("running {done} of {total}: {strategy} × {trainer}").format(
                    done=len(cells) + 1, total=total, strategy=strategy, trainer=_(TRAINER_TITLES[trainer])
                )
            )
            cell = run_cell(strategy, trainer, steps=steps, timeout=timeout)
            cells.append(cell)
            if on_cell is not None:
                on_cell(cell)
    shown.say(
        _("ran {total} combinations in {seconds:.1f} s").format(total=total, seconds=time.monotonic() - began)
    )
    return CompatTable(tuple(cells), steps, installed_versions())


def _known(given: Iterable[str], known: Sequence[str], what: str) -> list[str]:
    chosen = [given] if isinstance(given, str) else list(given)
    unknown = [g for g in chosen if g not in known]
    if unknown or not chosen:
        raise ValueError(f"unknown {what} {unknown or chosen!r}: choose among {', '.join(known)}")
    return chosen


class _Shown:
    """One progress line: a display that is updated in a kernel, lines on stderr elsewhere."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.handle = None
        if enabled and _in_kernel():
            from IPython.display import display

            self.handle = display(TextLine(""), display_id=True)

    def say(self, line: str) -> None:
        if not self.enabled:
            return
        if self.handle is not None:
            self.handle.update(TextLine(line))
        else:
            print(line, file=sys.stderr, flush=True)
