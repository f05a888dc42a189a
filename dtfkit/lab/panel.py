"""The sync/async lab panel: ipywidgets controls that drive ``dtfkit.lab.Lab``.

Change a control, press Run, watch the plots update while the run runs; each finished
run becomes a row of the history, and two runs can be overlaid. Every widget callback
calls the ``Lab`` API, so tests and notebook cells can do the same without a browser.
The run happens in a background thread; whatever the tasks print goes to the panel's
own log (an ``Output`` widget's ``outputs``), never to another cell.

Browser contract (CSS classes set with ``add_class``; an end-to-end test relies on them):

- ``dtfkit-lab-mode``: the mode ``ToggleButtons``, option labels exactly ``"sync"`` and ``"async"``.
- ``dtfkit-lab-run``: the Run button (description ``"Run"``).
- ``dtfkit-lab-stop``: the Stop button (description ``"Stop"``).
- ``dtfkit-lab-plot``: the live plot area; it holds an ``<img>`` (an ``ipywidgets.Image``)
  once a run has started and while/after it runs.
- ``dtfkit-lab-history``: the history table's container; each finished run is one
  ``<tr class="dtfkit-lab-row">``.
- ``dtfkit-lab-status``: a label whose text is ``"running…"`` while a run runs (``"starting
  cluster…"`` just before) and starts with ``"finished"`` when a run ends, e.g.
  ``"finished: async, 2 workers, 12.3 steps/s"`` (``"stopped: …"``/``"failed: …"`` otherwise).
- also: ``dtfkit-lab-log`` (task output), ``dtfkit-lab-compare`` (the overlay plot area),
  and the controls ``dtfkit-lab-workers``, ``dtfkit-lab-ps``, ``dtfkit-lab-straggler``,
  ``dtfkit-lab-aggregate``, ``dtfkit-lab-lr``, ``dtfkit-lab-steps``.

Example::

    from dtfkit.lab import Lab
    lab = Lab()
    panel = lab.panel()
    panel                       # shows the controls, live plot, log and history
    panel.set(mode="async", straggler_ms=100)
    panel.press_run()           # what the Run button does; panel.press_stop() stops
"""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from dtfkit.i18n import _
from dtfkit.lab import plots

if TYPE_CHECKING:  # the lab makes its panel (Lab.panel()); the panel only drives it
    from dtfkit.lab.runner import Lab, RunRecord


class Panel:
    """The widgets for one ``Lab``; display it (``panel`` as a cell's last line) to show them.

    Attributes: ``mode``, ``workers``, ``ps``, ``straggler_ms``, ``aggregate``,
    ``learning_rate``, ``steps`` (controls), ``run_button``, ``stop_button``, ``status``,
    ``plot`` (the live ``Image``), ``log`` (``Output``), ``history`` (``HTML``), ``widget``
    (the whole panel).
    """

    def __init__(self, lab: Lab):
        self.lab = lab
        self._next_draw = 0.0
        s = lab.settings
        style = {"description_width": "170px"}
        layout = w.Layout(width="420px")

        def control(kind, css: str, value, description: str, **limits):
            return _cls(kind(value=value, description=description, style=style, layout=layout, **limits), css)

        self.mode = _cls(
            w.ToggleButtons(options=["sync", "async"], value=s.mode, description=_("mode")), "mode"
        )
        self.workers = control(w.IntSlider, "workers", s.workers, _("workers"), min=1, max=4)
        self.ps = control(w.IntSlider, "ps", s.ps, _("ps"), min=1, max=3)
        self.straggler_ms = control(
            w.IntSlider, "straggler", s.straggler_ms, _("straggler ms (last worker)"), min=0, max=300, step=10
        )
        self.aggregate = control(
            w.IntSlider, "aggregate", s.aggregate, "replicas_to_aggregate", min=1, max=s.workers
        )
        self.learning_rate = control(
            w.BoundedFloatText, "lr", s.learning_rate, _("learning rate"), min=0.001, max=2.0, step=0.01
        )
        self.steps = control(
            w.BoundedIntText, "steps", s.steps, _("steps (global)"), min=5, max=2000, step=10
        )
        self.run_button = _cls(w.Button(description=_("Run"), button_style="success", icon="play"), "run")
        self.stop_button = _cls(
            w.Button(description=_("Stop"), button_style="danger", icon="stop", disabled=True), "stop"
        )
        self.status = _cls(w.Label(value=_("idle")), "status")
        self.plot = w.Image(format="png", layout=w.Layout(width="100%"))
        self.plot_area = _cls(
            w.Box([w.HTML(f"<i>{_('press Run: the plots appear here while the run runs')}</i>")]), "plot"
        )
        self.log = _cls(
            w.Output(layout=w.Layout(max_height="160px", overflow="auto", border="1px solid #ddd")), "log"
        )
        self.history = _cls(w.HTML(value=lab.history_html()), "history")
        self.compare_a = w.Dropdown(description=_("overlay run"), options=[], layout=w.Layout(width="200px"))
        self.compare_b = w.Dropdown(description=_("with run"), options=[], layout=w.Layout(width="200px"))
        self.compare_button = w.Button(description=_("Overlay"))
        self.compare_plot = w.Image(format="png", layout=w.Layout(width="100%"))
        self.compare_area = _cls(w.Box([]), "compare")

        self.workers.observe(self._workers_changed, "value")
        self.mode.observe(self._mode_changed, "value")
        self.run_button.on_click(lambda _button: self.press_run())
        self.stop_button.on_click(lambda _button: self.press_stop())
        self.compare_button.on_click(lambda _button: self.overlay())
        lab.listeners.append(self._on_event)
        self._mode_changed()
        self._refresh_history()

        controls = w.VBox(
            [
                self.mode,
                self.workers,
                self.ps,
                self.straggler_ms,
                self.aggregate,
                self.learning_rate,
                self.steps,
            ]
        )
        buttons = w.HBox([self.run_button, self.stop_button, self.status])
        overlay = w.HBox([self.compare_a, self.compare_b, self.compare_button])
        self.widget = w.VBox(
            [
                w.HTML(f"<b>{_('dtfkit sync/async lab')}</b>"),
                controls,
                buttons,
                self.plot_area,
                w.HTML(f"<b>{_('task output')}</b>"),
                self.log,
                w.HTML(f"<b>{_('history')}</b> {_('(finished runs)')}"),
                self.history,
                overlay,
                self.compare_area,
            ]
        )
        self.widget.add_class("dtfkit-lab")

    # ------------------------------------------------------------ API
    def values(self) -> dict[str, Any]:
        """The controls' values as ``Lab`` settings."""
        return {
            "mode": self.mode.value,
            "workers": self.workers.value,
            "ps": self.ps.value,
            "straggler_ms": self.straggler_ms.value,
            "replicas_to_aggregate": self.aggregate.value,
            "learning_rate": float(self.learning_rate.value),
            "steps": self.steps.value,
        }

    def set(self, **values: Any) -> None:
        """Set controls by setting name (``mode``, ``workers``, ``ps``, ``straggler_ms``,
        ``replicas_to_aggregate``, ``learning_rate``, ``steps``), as a student would."""
        names = {"replicas_to_aggregate": "aggregate"}
        for key, value in values.items():
            getattr(self, names.get(key, key)).value = value

    def press_run(self) -> RunRecord | None:
        """What the Run button does: start a run with the controls' values (in the background)."""
        if self.lab.running:
            self.status.value = _("a run is in progress: press Stop first")
            return None
        self.lab.echo = self._echo
        self.log.outputs = ()
        try:
            return self.lab.start(**self.values())
        except Exception as exc:  # noqa: BLE001 - shown in the panel
            self.status.value = _("failed: {error}").format(error=exc)
            return None

    def press_stop(self) -> None:
        """What the Stop button does: stop the run and its processes (returns once they are)."""
        self.status.value = _("stopping…")
        self.lab.stop()

    def overlay(self, a: int | None = None, b: int | None = None) -> None:
        """Overlay two finished runs (by number; default the dropdowns') in the compare area."""
        a = a if a is not None else self.compare_a.value
        b = b if b is not None else self.compare_b.value
        chosen = [n for n in (a, b) if n is not None]
        if not chosen:
            return
        self.compare_plot.value = plots.png(self.lab.compare(*chosen))
        self.compare_area.children = [self.compare_plot]

    def close(self) -> None:
        """Detach from the lab and close the widgets (the lab stays open)."""
        if self._on_event in self.lab.listeners:
            self.lab.listeners.remove(self._on_event)
        self.widget.close_all() if hasattr(self.widget, "close_all") else self.widget.close()

    def summary(self) -> str:
        """What the panel is, in one line, with the last run's result if there is one.

        The text a reader sees where widgets do not render (GitHub, nbviewer, a terminal).

        Example::

            >>> Lab().panel().summary()  # doctest: +SKIP
            'dtfkit sync/async lab panel (a live widget: run the notebook in Jupyter to use it); no run yet'
        """
        text = _("dtfkit sync/async lab panel (a live widget: run the notebook in Jupyter to use it)")
        runs = self.lab.runs
        if not runs:
            return text + _("; no run yet")
        finished = len(self.lab.history)
        done = (
            _("; {count} finished runs, last: {last}")
            if finished != 1
            else _("; 1 finished run, last: {last}")
        )
        return text + done.format(count=finished, last=runs[-1].describe())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        # The widget for Jupyter (its renderer outranks text/html); a description instead of
        # ipywidgets' repr ("VBox(children=(HTML(...") for frontends without widgets.
        text = self.summary()
        widget = self.widget._repr_mimebundle_(include=include, exclude=exclude) or {}
        return {**widget, "text/plain": text, "text/html": f"<p><i>{html.escape(text)}</i></p>"}

    def __repr__(self) -> str:
        return self.summary()

    # ------------------------------------------------------------ inside
    def _echo(self, task: str, line: str) -> None:
        # Setting outputs (not "with self.log:") keeps lines out of whatever cell runs now.
        self.log.outputs = self.log.outputs + (
            {"output_type": "stream", "name": "stdout", "text": f"[{task}] {line}\n"},
        )

    def _workers_changed(self, change=None) -> None:
        n = self.workers.value
        keep = self.aggregate.value == self.aggregate.max
        self.aggregate.max = n
        if keep or self.aggregate.value > n:
            self.aggregate.value = n

    def _mode_changed(self, change=None) -> None:
        self.aggregate.disabled = self.mode.value != "sync"

    def _on_event(self, event: str, record: RunRecord) -> None:
        if event == "started":
            self.run_button.disabled, self.stop_button.disabled = True, False
            self.status.value = _("starting cluster…")
            self._show(
                plots.waiting(
                    _("run {number}: {settings} — starting…").format(
                        number=record.number, settings=record.settings.describe()
                    )
                )
            )
        elif event == "progress":
            self.status.value = _("running…")
            # Drawing costs CPU the run needs too: at most every second, less often if slow.
            if record.rows and time.monotonic() >= self._next_draw:
                began = time.monotonic()
                self._show(plots.dashboard(record))
                self._next_draw = time.monotonic() + max(1.0, 3 * (time.monotonic() - began))
        elif event == "ended":
            self.run_button.disabled, self.stop_button.disabled = False, True
            if record.state == "finished" or record.rows:
                self._show(plots.dashboard(record))
            if record.error:
                self._echo("lab", record.error)
            self._refresh_history()
            self.status.value = record.describe()

    def _show(self, fig) -> None:
        self.plot.value = plots.png(fig)
        if self.plot_area.children != (self.plot,):
            self.plot_area.children = [self.plot]

    def _refresh_history(self) -> None:
        self.history.value = self.lab.history_html()
        numbers = [(f"{r.number}: {r.settings.describe()}", r.number) for r in self.lab.history]
        self.compare_a.options = numbers
        self.compare_b.options = numbers
        if len(numbers) >= 2:
            self.compare_a.value, self.compare_b.value = numbers[-2][1], numbers[-1][1]


def _cls(widget, name: str):
    widget.add_class(f"dtfkit-lab-{name}")
    return widget
