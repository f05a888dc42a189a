"""The sync/async lab's engine: settings, runs on a warm cluster, a history (no widgets, no TensorFlow).

The panel (``dtfkit.lab.panel``) drives exactly this API, so a notebook or a test can do
what a student does with the widgets.

Example::

    from dtfkit.lab import Lab

    lab = Lab(steps=60)
    a = lab.run(mode="sync")                       # waits; task output shows in this cell
    b = lab.run(mode="async", straggler_ms=100)    # same cluster (same ps/workers): stays warm
    a.update_sizes(), b.max_staleness()            # ({2}, 3)
    lab.table()                                    # one row per finished run
    lab.compare(a, b)                              # a matplotlib Figure
    lab.close()                                    # ends every process
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dtfkit.errors import DtfkitError
from dtfkit.htmltable import html_table
from dtfkit.i18n import N_, _
from dtfkit.recipes import analysis

if TYPE_CHECKING:
    from dtfkit.cluster import LocalCluster

MODES = ("sync", "async")
LIVE_EVERY = 0.5  # seconds between live updates sent to listeners
_APPLIED = ("applied", "aggregated")  # the fates of a step whose gradient changed the parameters


@dataclass
class Settings:
    """What one run does. ``replicas_to_aggregate=0`` means "as many as workers"; the
    straggler (``straggler_ms`` > 0) is the last worker."""

    mode: str = "sync"
    workers: int = 2
    ps: int = 1
    straggler_ms: int = 0
    replicas_to_aggregate: int = 0
    learning_rate: float = 0.1
    steps: int = 60
    batch_size: int = 32
    hidden: int = 32

    def validate(self) -> Settings:
        """Raise ``DtfkitError`` naming the bad setting; return self."""
        if self.mode not in MODES:
            raise DtfkitError(f"mode must be 'sync' or 'async', not {self.mode!r}")
        for name, low in (("workers", 1), ("ps", 1), ("steps", 1), ("batch_size", 1), ("hidden", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                raise DtfkitError(f"{name} must be a whole number >= {low}, not {value!r}")
        if not 0 <= self.replicas_to_aggregate <= self.workers:
            raise DtfkitError(
                f"replicas_to_aggregate must be between 1 and workers={self.workers} (0: as many as "
                f"workers), not {self.replicas_to_aggregate!r}"
            )
        if self.straggler_ms < 0 or not self.learning_rate > 0:
            raise DtfkitError("straggler_ms must be >= 0 and learning_rate > 0")
        return self

    @property
    def aggregate(self) -> int:
        return self.replicas_to_aggregate or self.workers

    @property
    def worker_names(self) -> list[str]:
        return [f"worker:{i}" for i in range(self.workers)]

    @property
    def straggler(self) -> str | None:
        """The slowed-down worker, or None."""
        return f"worker:{self.workers - 1}" if self.straggler_ms > 0 else None

    def describe(self) -> str:
        text = (_("{mode}, {count} workers") if self.workers != 1 else _("{mode}, {count} worker")).format(
            mode=self.mode, count=self.workers
        )
        if self.mode == "sync" and self.aggregate != self.workers:
            text += _(", aggregate {aggregate}").format(aggregate=self.aggregate)
        if self.straggler:
            text += _(", {straggler} +{ms} ms").format(straggler=self.straggler, ms=self.straggler_ms)
        return text


# How a run's state reads in describe() (the data, ``RunRecord.state``, stays English).
RUN_STATES = {
    "starting": N_("starting"),
    "running": N_("running"),
    "stopped": N_("stopped"),
    "finished": N_("finished"),
    "failed": N_("run failed"),
}
# The history table's column titles (``RunRecord.summary()``'s keys stay English: code reads them).
HISTORY_COLUMNS = {
    "run": N_("run"),
    "mode": N_("mode"),
    "workers": N_("workers"),
    "aggregate": N_("aggregate"),
    "straggler": N_("straggler"),
    "lr": N_("lr"),
    "steps": N_("steps"),
    "steps/s": N_("steps/s"),
    "final loss": N_("final loss"),
    "accuracy": N_("accuracy"),
    "staleness (mean/max)": N_("staleness (mean/max)"),
    "state": N_("state"),
}


@dataclass
class RunRecord:
    """One run: its settings, state, what the tasks reported live and what they returned.

    ``state`` is ``"starting"``, ``"running"``, ``"finished"``, ``"stopped"`` or ``"failed"``.
    ``rows`` are the run's metric events (one per local step: ``task``, ``time``,
    ``step``, ``loss``, ``local_step``; async also ``read_step`` and ``start``).
    ``sync`` is the ``dtfkit.recipes.sync.SyncRun`` (the gradient ledger) of a sync run.
    """

    number: int
    settings: Settings
    state: str = "starting"
    error: str | None = None
    started: float = 0.0
    ended: float | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    sync: Any = None
    evaluation: dict[str, float] = field(default_factory=dict)
    run_name: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    # ------------------------------------------------------------ per step
    @property
    def workers(self) -> list[str]:
        return self.settings.worker_names

    def pushes(self) -> dict[str, list[tuple[float, float | None, int, int | None, str]]]:
        """Per worker, one ``(start, end, read, applied, fate)`` per local step: the global
        step its parameters were read at and the one its update made (None: not applied).
        Sync: from the ledger (fate aggregated/dropped/pending); async: measured in the step."""
        out: dict[str, list] = {t: [] for t in self.workers}
        if self.sync is not None:
            for g in self.sync.gradients:
                out[g["task"]].append((g["start"], g["end"], g["tag"], g.get("update"), g["fate"]))
        elif self.results:
            for task, summary in self.results.items():
                out[task] = [(s, e, r, a, "applied") for s, e, r, a in summary.get("pushes", [])]
        else:  # live: from the reports
            last: dict[str, float] = {}
            for row in self.rows:
                start = row.get("start", last.get(row["task"]))
                if start is not None:
                    out.setdefault(row["task"], []).append(
                        (start, row["time"], row.get("read_step", row["step"] - 1), row["step"], "applied")
                    )
                last[row["task"]] = row["time"]
        return out

    def staleness(self) -> list[int]:
        """Per applied update: how many other updates landed between reading the parameters
        and writing the update (sync: 0 for each aggregated gradient; stale ones are dropped)."""
        return [
            analysis.staleness(read, applied)
            for steps in self.pushes().values()
            for _started, _ended, read, applied, fate in steps
            if applied is not None and fate in _APPLIED
        ]

    def max_staleness(self) -> int:
        values = self.staleness()
        return max(values) if values else 0

    def mean_staleness(self) -> float:
        values = self.staleness()
        return sum(values) / len(values) if values else 0.0

    def shares(self) -> dict[str, float]:
        """Each worker's share of the applied updates (sync: of the aggregated gradients)."""
        pushes = self.pushes()
        return analysis.shares(
            {
                task: sum(1 for p in pushes.get(task, []) if p[3] is not None and p[4] in _APPLIED)
                for task in self.workers
            }
        )

    # ------------------------------------------------------------ sync facts
    def update_sizes(self, first: int = 1) -> set[int]:
        """Sync: the set of "how many gradients an update averaged" over updates ``first`` to
        the last (``{2}``: always 2). At least R each; ``first=2`` leaves out update 1, the only
        one that can average more than R when R = N (``SyncRun``'s docstring says why)."""
        self._need_sync()
        return self.sync.update_sizes(first)

    def participation(self, task: str, last: float = 0.5) -> float:
        """Sync: the fraction of the last ``last`` of the updates that averaged a gradient
        of ``task`` (1.0: every one of them waited for it)."""
        self._need_sync()
        return analysis.participation([tasks for _, tasks in sorted(self.sync.updates().items())], task, last)

    def update_times(self) -> list[float]:
        """When each update (global step) was made, in order: sync from the ledger (the
        first token that carried it), async from the step records."""
        if self.sync is not None:
            return sorted(self.sync.update_times().values())
        # async: every step has ended (only a sync ledger's pending gradient has no end)
        return sorted(
            e
            for steps in self.pushes().values()
            for _, e, _, a, _ in steps
            if a is not None and e is not None
        )

    def update_interval(self, last: float = 1.0, how: str = "median") -> float:
        """Seconds between consecutive updates (the pace) over the last ``last`` of them:
        their ``"median"`` or ``"mean"``."""
        return analysis.update_interval(self.update_times(), last, how)

    def straggler_regime(self) -> str:
        """Sync with a straggler: which of the two regimes ``SyncReplicasOptimizer`` met.

        ``"waited"``: most later updates averaged a gradient of the straggler, so they
        waited for it and it set the pace. ``"filled"``: the faster workers supplied the
        later updates' gradients themselves (``replicas_to_aggregate`` counts gradients,
        not workers): tokens go to whoever asks first, so while the straggler was busy in
        its step they took every token, and its gradients, computed for the older step
        its token carried, came too late and were dropped. Every run starts in the second
        regime; how long it lasts is timing. That every update averaged at least R gradients
        (exactly R after the first when R = N) is not.
        """
        self._need_sync()
        if self.settings.straggler is None:
            raise DtfkitError(f"run {self.number} has no straggler (straggler_ms=0)")
        return "waited" if self.participation(self.settings.straggler, last=0.5) >= 0.5 else "filled"

    def _need_sync(self) -> None:
        if self.sync is None:
            raise DtfkitError(f"run {self.number} is {self.settings.mode}, not a finished sync run")

    # ------------------------------------------------------------ summary
    def interleavings(self) -> int:
        """How often consecutive steps (by wall time) switch from one worker to another."""
        return analysis.interleavings(self.rows, by="time")

    def global_step(self) -> int:
        if self.sync is not None:
            return self.sync.global_step
        steps = [r["step"] for r in self.rows if "step" in r]
        return max(steps) if steps else 0

    def steady_time(self) -> float:
        """When every worker had made its first step (wall time; the run's start before)."""
        return analysis.steady_time(self.rows, default=self.started)

    def steps_per_sec(self) -> float:
        """Global steps per second, from the moment every worker had made its first step
        (the first step sets the session up and says nothing about the pace)."""
        return analysis.steps_per_sec(self.rows)

    def gradient_rates(self) -> dict[str, float]:
        """Gradients per second from the moment every worker had made its first step:
        ``computed`` (every local step: one gradient each) and ``applied`` (the ones that
        changed the parameters; sync drops stale ones). Unlike steps per second this is a
        fair comparison of sync (R or more gradients per global step) with async (one)."""
        t0 = self.steady_time()
        ends = [
            (e, a is not None and fate in _APPLIED)
            for steps in self.pushes().values()
            for _, e, _, a, fate in steps
            if e is not None and e > t0
        ]
        span = max((e for e, _ in ends), default=t0) - t0
        if len(ends) < 2 or span <= 0:
            return {"computed": float("nan"), "applied": float("nan")}
        return {"computed": len(ends) / span, "applied": sum(1 for _, ok in ends if ok) / span}

    @property
    def final_loss(self) -> float:
        return self.evaluation.get("loss", float("nan"))

    @property
    def accuracy(self) -> float:
        return self.evaluation.get("accuracy", float("nan"))

    def summary(self) -> dict[str, Any]:
        """The history row: run, mode, workers, straggler, steps/s, final loss, accuracy, staleness."""
        s = self.settings
        return {
            "run": self.number,
            "mode": s.mode,
            "workers": s.workers,
            "ps": s.ps,
            "aggregate": s.aggregate if s.mode == "sync" else "-",
            "straggler": f"{s.straggler} +{s.straggler_ms} ms" if s.straggler else "-",
            "lr": s.learning_rate,
            "steps": self.global_step(),
            "steps/s": round(self.steps_per_sec(), 1),
            "final loss": round(self.final_loss, 3),
            "accuracy": round(self.accuracy, 3),
            "staleness (mean/max)": f"{self.mean_staleness():.2f} / {self.max_staleness()}",
            "state": self.state,
        }

    def describe(self) -> str:
        """``"finished: async, 2 workers, 12.3 steps/s"``."""
        settings = self.settings.describe()
        if self.state == "finished":
            return _("finished: {settings}, {rate:.1f} steps/s").format(
                settings=settings, rate=self.steps_per_sec()
            )
        if self.state == "failed":
            if not self.error:
                return _("failed: {settings}").format(settings=settings)
            return _("failed: {settings} ({error})").format(
                settings=settings, error=self.error.splitlines()[0][:160]
            )
        state = _(RUN_STATES[self.state]) if self.state in RUN_STATES else self.state
        return f"{state}: {settings}"

    def plot(self):
        """The run's dashboard as a matplotlib Figure (see ``dtfkit.lab.plots``)."""
        from dtfkit.lab import plots

        return plots.dashboard(self)

    def plot_zoomed(self, updates: int = 8):
        """``updates`` consecutive updates from the middle of the run, step by step (a Figure)."""
        from dtfkit.lab import plots

        return plots.zoomed_timeline(self, updates)

    def __repr__(self) -> str:
        return f"<RunRecord {self.number} {self.describe()}>"


class _Holder:
    """What the finalizer closes when the Lab is forgotten or the kernel exits."""

    def __init__(self) -> None:
        self.cluster: LocalCluster | None = None
        self.stop = threading.Event()

    def close(self) -> None:
        self.stop.set()
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None


class Lab:
    """Runs sync or async training on a warm local cluster and keeps a history.

    ``settings`` (a ``Settings``) holds the defaults; ``run(**overrides)`` and
    ``start(**overrides)`` use them with overrides (which also become the new defaults,
    as the panel's controls do). The cluster is started on the first run and kept while
    ``ps`` and ``workers`` stay the same; ``close()`` ends it (a later run starts a new one).

    Listeners (``lab.listeners.append(fn)``) are called as ``fn(event, record)`` with
    event ``"started"``, ``"progress"`` (every ``LIVE_EVERY`` s) or ``"ended"``, in the
    thread that runs the run.

    Example::

        lab = Lab()
        run = lab.run(mode="async", workers=2, steps=60)
        print(run.describe())       # finished: async, 2 workers, 25.3 steps/s
        lab.close()
    """

    def __init__(self, *, start_timeout: float = 120.0, run_timeout: float = 300.0, **settings: Any):
        self.settings = Settings(**settings).validate()
        self.runs: list[RunRecord] = []
        self.listeners: list[Callable[[str, RunRecord], None]] = []
        self.start_timeout = start_timeout
        self.run_timeout = run_timeout
        self.echo: Callable[[str, str], None] = _print_line
        self._holder = _Holder()
        self._shape: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self._current: RunRecord | None = None
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, self._holder.close)

    # ------------------------------------------------------------- state
    @property
    def history(self) -> list[RunRecord]:
        """The finished runs, oldest first."""
        return [r for r in self.runs if r.state == "finished"]

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def cluster(self) -> LocalCluster | None:
        """The warm cluster, or None."""
        return self._holder.cluster

    def table(self) -> list[dict[str, Any]]:
        """The history as rows (``pandas.DataFrame(lab.table())`` for a frame)."""
        return [r.summary() for r in self.history]

    def history_html(self) -> str:
        """The history as an HTML table; each finished run is a ``<tr class="dtfkit-lab-row">``."""
        rows = self.table()
        if not rows:
            return (
                f"<table class='dtfkit-lab-table'><tr><td><i>{_('no finished run yet')}</i></td></tr></table>"
            )
        cols = list(rows[0])
        shown = [[_(RUN_STATES.get(r[c], r[c])) if c == "state" else r[c] for c in cols] for r in rows]
        return html_table(
            [_(HISTORY_COLUMNS.get(c, c)) for c in cols],
            shown,
            css_class="dtfkit-lab-table",
            row_class="dtfkit-lab-row",
            cell_style="padding:2px 8px;border-bottom:1px solid #ddd;text-align:left",
            table_style="border-collapse:collapse",
        )

    def _repr_html_(self) -> str:
        return self.history_html()

    # -------------------------------------------------------------- runs
    def run(self, **overrides: Any) -> RunRecord:
        """Run with the settings (and ``overrides``) and wait; task output is printed here
        (in the calling cell).

        Raises ``DtfkitError`` when the run failed (the record is in ``lab.runs``).
        """
        record = self._prepare(overrides)
        self._execute(record, _print_line)
        if record.state == "failed":
            raise DtfkitError(f"run {record.number} failed: {record.error}")
        return record

    def start(self, **overrides: Any) -> RunRecord:
        """Start a run in a background thread and return its (live) record at once.
        Task output goes to ``lab.echo(task, line)`` (the panel points it at its log, so
        nothing lands in another cell); ``wait()`` or ``stop()`` it."""
        record = self._prepare(overrides)
        self._thread = threading.Thread(
            target=self._execute, args=(record, self.echo), name="dtfkit-lab", daemon=True
        )
        self._thread.start()
        return record

    def warm(self, **overrides: Any):
        """Start (or keep) the cluster for the settings' ``ps`` and ``workers`` now, so the
        first Run does not wait for it; returns the ``LocalCluster``."""
        with self._lock:
            if self.running:
                raise DtfkitError("a run is in progress: lab.stop() or lab.wait() first")
            self.settings = self._settings_with(overrides)
            return self._ensure_cluster(self.settings)

    def wait(self, timeout: float | None = None) -> RunRecord | None:
        """Wait for the background run; returns its record."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._current

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the run in progress: its tasks are interrupted, and killed if they do not
        return within a few seconds (the next run starts them again). Waits up to ``timeout``."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        self._holder.stop.set()
        if thread is not threading.current_thread():
            thread.join(timeout)

    def close(self) -> None:
        """Stop any run and end the cluster's processes. The lab stays usable: the next
        run starts a new cluster."""
        self.stop()
        self._holder.close()
        self._shape = None

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def panel(self):
        """The ipywidgets panel driving this lab (``dtfkit.lab.Panel``)."""
        from dtfkit.lab.panel import Panel

        return Panel(self)

    def plot(self, record: RunRecord | None = None):
        """The dashboard of a run (default: the last finished one), a matplotlib Figure."""
        record = record or (self.history[-1] if self.history else None)
        if record is None:
            raise DtfkitError("no finished run yet: lab.run() first")
        return record.plot()

    def compare(self, *records: RunRecord | int):
        """Overlay runs (records or run numbers; default the last two finished) in one Figure."""
        from dtfkit.lab import plots

        chosen = [self._record(r) for r in records] if records else self.history[-2:]
        if not chosen:
            raise DtfkitError("no finished run to compare yet")
        return plots.compare(chosen)

    def _record(self, r: RunRecord | int) -> RunRecord:
        if isinstance(r, RunRecord):
            return r
        for record in self.runs:
            if record.number == r:
                return record
        raise DtfkitError(f"no run number {r}; runs: {[x.number for x in self.runs]}")

    # ------------------------------------------------------------- inside
    def _settings_with(self, overrides: dict[str, Any]) -> Settings:
        unknown = set(overrides) - {f.name for f in dataclasses.fields(Settings)}
        if unknown:
            raise DtfkitError(f"unknown setting(s) {sorted(unknown)}; known: {list(self.settings.__dict__)}")
        return dataclasses.replace(self.settings, **overrides).validate()

    def _prepare(self, overrides: dict[str, Any]) -> RunRecord:
        with self._lock:
            if self.running:
                raise DtfkitError("a run is in progress: lab.stop() or lab.wait() first")
            settings = self._settings_with(overrides)
            self.settings = settings
            record = RunRecord(number=len(self.runs) + 1, settings=settings)
            record.run_name = f"lab{record.number}.{uuid.uuid4().hex[:6]}"
            self.runs.append(record)
            self._current = record
            self._holder.stop.clear()
            return record

    def _notify(self, event: str, record: RunRecord) -> None:
        for listener in list(self.listeners):
            try:
                listener(event, record)
            except Exception as exc:  # noqa: BLE001 - a broken listener must not end the run
                self.echo("lab", f"listener {listener!r} failed: {exc!r}")

    def _ensure_cluster(self, s: Settings) -> LocalCluster:
        import dtfkit

        cluster = self._holder.cluster
        if cluster is not None and (cluster.closed or self._shape != (s.ps, s.workers)):
            cluster.close()
            cluster = self._holder.cluster = None
        if cluster is None:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                cluster = dtfkit.LocalCluster(
                    ps=s.ps, workers=s.workers, progress=False, start_timeout=self.start_timeout, name=None
                )
            for w in caught:
                self.echo("lab", str(w.message))
            self._holder.cluster, self._shape = cluster, (s.ps, s.workers)
        elif any(state != "running" for state in cluster.status().values()):
            cluster.restart()  # tasks a stopped run had to kill
        return cluster

    def _execute(self, record: RunRecord, echo: Callable[[str, str], None]) -> None:
        from dtfkit.lab import task_side as tasks
        from dtfkit.recipes import sync

        s = record.settings
        cluster: LocalCluster | None = None
        try:
            self._notify("started", record)
            t = time.monotonic()
            cluster = self._ensure_cluster(s)
            record.timings["cluster"] = time.monotonic() - t
            cluster.echo = echo  # task output goes where the caller says (the panel: its log)
            if self._holder.stop.is_set():
                record.state = "stopped"
                return
            record.state = "running"
            record.started = time.time()
            self._notify("progress", record)
            common: dict[str, object] = {
                "steps": s.steps,
                "batch_size": s.batch_size,
                "learning_rate": s.learning_rate,
                "hidden": s.hidden,
                "straggler_ms": {s.straggler: s.straggler_ms} if s.straggler else None,
                "run_name": record.run_name,
            }
            fn: Callable[..., dict[str, Any]]
            if s.mode == "sync":
                fn = sync.train_sync
                kwargs = {**common, "workers": s.worker_names, "replicas_to_aggregate": s.aggregate}
            else:
                fn, kwargs = tasks.train_recorded, common
            handle = cluster.submit(fn, kwargs=kwargs, on=s.worker_names, timeout=self.run_timeout, grace=3.0)
            t = time.monotonic()
            results = self._pump(cluster, handle, record)
            record.timings["train"] = time.monotonic() - t
            t = time.monotonic()
            if results is None:
                record.state = "stopped"
                return
            record.rows = self._rows(cluster, record)
            chief = s.worker_names[0]
            if s.mode == "sync":
                info = results[chief]["ledger_info"]
                state = cluster.run(sync.read_sync_state, kwargs={"info": info}, on=chief, timeout=60)[chief]
                record.sync = sync.SyncRun(results, state)
            else:
                record.results = results
            record.evaluation = cluster.run(
                tasks.evaluate,
                kwargs={
                    "run_name": record.run_name,
                    "hidden": s.hidden,
                    "global_step_first": s.mode == "async",
                },
                on=chief,
                timeout=60,
            )[chief]
            record.timings["after"] = time.monotonic() - t
            record.state = "finished"
        except BaseException as exc:  # noqa: BLE001 - recorded and shown, never lost in a thread
            record.state = "failed"
            record.error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, KeyboardInterrupt):
                raise
        finally:
            if cluster is not None and not cluster.closed:
                cluster.echo = None
            record.ended = time.time()
            self._notify("ended", record)

    def _pump(self, cluster, handle, record: RunRecord) -> dict[str, Any] | None:
        """Wait for the call in this thread (it alone talks to the cluster), refreshing
        the live rows; on stop, interrupt the tasks and return None."""
        last = 0.0
        while True:
            if self._holder.stop.is_set():
                handle.stop()
                return None
            try:
                return handle.result(timeout=0.2)
            except TimeoutError:
                pass
            now = time.monotonic()
            if now - last >= LIVE_EVERY:
                last = now
                record.rows = self._rows(cluster, record)
                self._notify("progress", record)

    @staticmethod
    def _rows(cluster, record: RunRecord) -> list[dict[str, Any]]:
        tasks = set(record.workers)
        return [r for r in cluster.metrics.rows(since=record.started) if r["task"] in tasks and "step" in r]


def _print_line(task: str, line: str) -> None:
    print(f"[{task}] {line}", flush=True)
