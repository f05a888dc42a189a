"""Start-up progress that reads well live and in a saved notebook.

In a notebook kernel the live bar is an ipywidgets widget shown through a display
handle; when the work ends the handle's output is replaced by a one-line text
summary (``handle.update``). Jupyter records that update in the saved output
(nbclient, nbconvert and JupyterLab all do), so a notebook executed without anyone
watching, then read on GitHub or nbviewer, shows "started 3 tasks (ps:0, worker:0,
worker:1) in 4.2 s" instead of a widget whose text fallback is "0%". No guess about
whether a frontend is attached is needed. Outside a kernel the same lines go to
stderr as text: a redrawn line on a terminal, only the summary otherwise.

Example::

    >>> bar = Progress(["ps:0", "worker:0"], "starting 1 ps + 1 worker", enabled=False)
    >>> bar.update(2)
    >>> bar.done("started").startswith("started 2 tasks (ps:0, worker:0) in ")
    True
"""

from __future__ import annotations

import functools
import html
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from dtfkit.i18n import N_, _

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class TextLine:
    """An object whose display is one line of text (``text/plain`` and ``text/html``).

    Example::

        >>> TextLine("started 2 tasks in 1.0 s")
        started 2 tasks in 1.0 s
    """

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {
            "text/plain": self.text,
            "text/html": f"<pre style='margin:0'>{html.escape(self.text)}</pre>",
        }


class _LiveBar:
    """The live widget, displayed with a text/plain of our own instead of ipywidgets' repr."""

    def __init__(self, total: int, desc: str):
        import ipywidgets as w

        self.bar = w.IntProgress(value=0, min=0, max=max(total, 1), description="")
        self.label = w.Label(value=desc)
        self.box = w.HBox([self.label, self.bar])
        self.text = desc

    def set(self, value: int, text: str) -> None:
        self.bar.value = value
        self.label.value = text
        self.text = text

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        widget = self.box._repr_mimebundle_(include=include, exclude=exclude) or {}
        return {**widget, "text/plain": self.text}

    def close(self) -> None:
        self.box.close()
        self.label.close()
        self.bar.close()


# The summary lines of a start, in the reader's language (dtfkit.i18n).
DONE_LINES = {
    ("started", True): N_("started {n} task ({names}) in {elapsed}"),
    ("started", False): N_("started {n} tasks ({names}) in {elapsed}"),
    ("restarted", True): N_("restarted {n} task ({names}) in {elapsed}"),
    ("restarted", False): N_("restarted {n} tasks ({names}) in {elapsed}"),
}


class Progress:
    """Progress of starting ``tasks``: live while it runs, one summary line when it ends.

    ``update(n)`` says how many tasks are ready; ``done(verb)`` or ``failed(reason)``
    ends it and returns the summary line. In a kernel (main thread) the widget is
    replaced by that line; elsewhere the line goes to stderr. ``enabled=False`` shows
    nothing (the summary is still returned).

    Example::

        >>> bar = Progress(["worker:0"], "starting 1 worker", enabled=False)
        >>> bar.failed("see the error below")  # doctest: +ELLIPSIS
        'starting 1 worker: stopped after ... s with 0 of 1 tasks ready (see the error below)'
    """

    def __init__(self, tasks: list[str], desc: str, *, enabled: bool = True):
        self.tasks = list(tasks)
        self.desc = desc
        self.ready = 0
        self.began = time.monotonic()
        self.ended = False
        self.summary = ""  # the line it ended with
        self._live: _LiveBar | None = None
        self._handle = None
        self._tty = False
        if not enabled:
            self._mode = "off"
        elif _in_kernel() and threading.current_thread() is threading.main_thread():
            self._mode = "widget"
            self._show_widget()
        else:
            self._mode = "text"
            self._tty = _isatty(sys.stderr)
            self._redraw()

    def _text(self) -> str:
        return f"{self.desc}: {self.ready} of {len(self.tasks)} tasks ready"

    def _show_widget(self) -> None:
        try:
            from IPython.display import display

            self._live = _LiveBar(len(self.tasks), self._text())
            self._handle = display(self._live, display_id=True)
        except Exception:  # noqa: BLE001 - no ipywidgets: the summary line still comes
            self._live = None
            self._handle = None

    def _redraw(self) -> None:
        if self._mode == "widget" and self._live is not None:
            self._live.set(self.ready, self._text())
        elif self._mode == "text" and self._tty:
            sys.stderr.write("\r" + self._text())
            sys.stderr.flush()

    def update(self, ready: int) -> None:
        """Say that ``ready`` tasks are ready (redrawn only when the number changes)."""
        if ready != self.ready and not self.ended:
            self.ready = ready
            self._redraw()

    def done(self, verb: str = "started") -> str:
        """End with success: "<verb> N tasks (a, b) in T s" (in the reader's language), shown and returned."""
        names = ", ".join(self.tasks)
        n = len(self.tasks)
        template = DONE_LINES.get((verb, n == 1))
        if template is None:
            return self._end(f"{verb} {n} task{'s' if n != 1 else ''} ({names}) in {self._elapsed()}")
        return self._end(_(template).format(n=n, names=names, elapsed=self._elapsed()))

    def failed(self, reason: str) -> str:
        """End without success: what was being done, how far it got, and ``reason``."""
        return self._end(
            f"{self.desc}: stopped after {self._elapsed()} with {self.ready} of {len(self.tasks)} "
            f"tasks ready ({reason})"
        )

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self.began:.1f} s"

    def _end(self, line: str) -> str:
        if self.ended:  # ended once: that summary stays
            return self.summary
        self.ended = True
        self.summary = line
        if self._mode == "widget":
            if self._handle is not None:
                try:
                    self._handle.update(TextLine(line))
                finally:
                    self._live.close()
            else:
                print(line, file=sys.stderr, flush=True)
        elif self._mode == "text":
            # On a terminal, overwrite the live line (padded, in case the summary is shorter).
            prefix = "\r" + " " * len(self._text()) + "\r" if self._tty else ""
            sys.stderr.write(prefix + line + "\n")
            sys.stderr.flush()
        return line


def start_display(enabled: bool) -> Callable[[list[str], str], Progress] | None:
    """What a front end hands the engine as its start-up display (``progress=``): a
    ``Progress`` per start, or None (no display).

    Example::

        >>> start_display(False) is None
        True
    """
    return functools.partial(Progress, enabled=True) if enabled else None


def _in_kernel() -> bool:
    """True inside a Jupyter kernel (``dtfkit.engine.platform.notebook``, which never imports IPython itself)."""
    from dtfkit.engine.platform import notebook

    return notebook.in_kernel()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
