"""What the tasks of one cluster print, and where it is shown: ``Output``.

Every line a task prints goes into the cluster's log book (``logs.LogBook``). While a
thread waits on the cluster (``live_output()``), the lines are echoed in that thread,
so in a notebook they land in the cell that asked for the work; while tasks start,
TensorFlow's start-up chatter is held and echoed once (``folding_repeats()``).

The start-up progress display is not the engine's business: the front end passes a
``ProgressFactory`` (``dtfkit.progress.Progress`` in a notebook), and the engine only
calls ``update`` / ``done`` / ``failed`` on what it returns (``NO_PROGRESS`` by default).

Example::

    >>> out = Output(None, echo=lambda task, line: print(f"<{task}> {line}"))
    >>> with out.live_output(notify=lambda seq, task, line: out.echo_line(seq, task, line)):
    ...     out.logbook.add("worker:0", "hello")
    <worker:0> hello
    >>> out.printed_seq
    1
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol

from dtfkit.engine.owner.logs import LogBook, RepeatFolder

LAST_LINES = 15

Echo = Callable[[str, str], None]


class StartProgress(Protocol):
    """What the engine tells a start-up progress display (``dtfkit.progress.Progress`` is one)."""

    def update(self, ready: int) -> None: ...

    def done(self, verb: str = "started") -> object: ...

    def failed(self, reason: str) -> object: ...


# progress(task names, description) -> a display for one start of those tasks
ProgressFactory = Callable[[list[str], str], StartProgress]


class _NoProgress:
    """A progress display that shows nothing."""

    def update(self, ready: int) -> None:
        pass

    def done(self, verb: str = "started") -> str:
        return ""

    def failed(self, reason: str) -> str:
        return ""


def NO_PROGRESS(tasks: list[str], desc: str) -> StartProgress:  # noqa: N802 - a constant-like default
    """The default ``ProgressFactory``: no display."""
    return _NoProgress()


def print_line(task: str, line: str) -> None:
    """The default echo: ``[worker:0] line``, printed (in the cell that waits)."""
    print(f"[{task}] {line}", flush=True)


class Output:
    """The log book of one cluster and the echo of its lines in the waiting thread."""

    def __init__(self, directory: str | None, echo: Echo | None = None, *, show_noise: bool = False):
        self.logbook = LogBook(directory)
        self.logbook.show_noise = show_noise
        self.echo: Echo = echo or print_line
        self.printed_seq = 0  # the number of the last log line echoed
        self._folder: RepeatFolder | None = None  # holds start-up chatter while tasks start

    def last_lines(self, names: list[str], since: int | None = None) -> str:
        """The last lines of each task (only those after line number ``since``, if given)."""
        parts = []
        for name in names:
            lines = self.logbook.lines(name, tail=LAST_LINES, since=since or 0)
            if lines:
                parts.append("\n".join(f"  [{name}] {line}" for line in lines))
            elif since is not None:
                parts.append(
                    f"  [{name}] (it printed nothing during this call; see {self.logbook.path(name)})"
                )
            else:
                parts.append(
                    f"  [{name}] (nothing besides TensorFlow's start-up messages; see {self.logbook.path(name)})"
                )
        return "\n".join(parts)

    @contextlib.contextmanager
    def live_output(
        self, notify: Callable[[int, str, str], None], since: int | None = None
    ) -> Iterator[None]:
        """While the caller waits, echo task output in the caller's thread (its cell).

        Lines after number ``since`` (default: from now on) that arrived while nobody
        was waiting are echoed first; each new line is handed to ``notify(seq, task, line)``
        (the event queue, whose waiter echoes it with ``echo_line``); what is left when
        the block ends is echoed last.
        """
        self.printed_seq = max(self.printed_seq, self.logbook.seq if since is None else since)
        self.logbook.listener = notify
        for seq, task, line in self.logbook.since(self.printed_seq):
            self.echo_line(seq, task, line)
        try:
            yield
        finally:
            self.logbook.listener = None
            for seq, task, line in self.logbook.since(self.printed_seq):
                self.echo_line(seq, task, line)

    def echo_line(self, seq: int, task: str, line: str) -> None:
        """Echo line number ``seq`` unless it was echoed already (held while repeats are folded)."""
        if seq > self.printed_seq:
            self.printed_seq = seq
            if self._folder is not None:
                self._folder.take(task, line)
            else:
                self.echo(task, line)

    @contextlib.contextmanager
    def folding_repeats(self) -> Iterator[None]:
        """While tasks start, hold TensorFlow's start-up chatter and echo each message
        once at the end (``logs.RepeatFolder``), not once per task.

        Enter it before ``live_output()``, so that the lines that block echoes last are held too.
        """
        folder = RepeatFolder(self.echo)
        outer, self._folder = self._folder, folder
        try:
            yield
        finally:
            self._folder = outer
            folder.flush()

    def close(self) -> None:
        self.logbook.close()
