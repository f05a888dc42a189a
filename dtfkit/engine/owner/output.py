"""What the tasks of one cluster print, kept and shown: ``LogBook`` and ``Output``.

Every line a task prints goes into the cluster's log book (``LogBook``: in memory and
in one file per task, both bounded). While a thread waits on the cluster (``live_output()``),
the lines are echoed in that thread, so in a notebook they land in the cell that asked for
the work; while tasks start, TensorFlow's start-up chatter is held and echoed once
(``folding_repeats()``). The start-up progress display is the front end's (a ``ProgressFactory``).

Example::

    >>> out = Output(None, echo=lambda task, line: print(f"<{task}> {line}"))
    >>> with out.live_output(notify=lambda seq, task, line: out.echo_line(seq, task, line)):
    ...     out.logbook.add("worker:0", "hello")
    <worker:0> hello
    >>> out.printed_seq
    1
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Protocol, TextIO

from dtfkit.engine.owner.chatter import RepeatFolder, is_noise

LAST_LINES = 15

# How long to wait for the rest of an exited task's output (a grandchild may hold its pipe open).
OUTPUT_DRAIN_SECONDS = 5.0
# Bounds, in bytes, so that a task printing without end cannot fill the notebook's
# memory or the disk: one line is cut after MAX_LINE_BYTES (wire/lines.py: its end is kept,
# where a done mark may be); each task keeps its newest lines up to TASK_MEMORY_BYTES in
# memory (RECENT_MEMORY_BYTES for all tasks' lines not yet shown); a log file is
# rotated to "<name>.log.1" at LOG_FILE_BYTES, so each task has at most twice that on disk.
TASK_MEMORY_BYTES = 4 * 1024 * 1024
RECENT_MEMORY_BYTES = 16 * 1024 * 1024
LOG_FILE_BYTES = 16 * 1024 * 1024

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


class LogBook:
    """Lines printed by each task, in memory (bounded in lines and bytes) and in one
    file per task (rotated, so bounded too)."""

    def __init__(
        self,
        directory: str | None,
        keep: int = 5000,
        *,
        task_bytes: int = TASK_MEMORY_BYTES,
        recent_bytes: int = RECENT_MEMORY_BYTES,
        file_bytes: int = LOG_FILE_BYTES,
    ):
        self.directory = directory
        self._keep = keep
        self._task_bytes = task_bytes
        self._recent_bytes = recent_bytes
        self._file_bytes = file_bytes
        self._lines: dict[str, collections.deque[tuple[int, bool, str]]] = {}
        self._sizes: dict[str, int] = {}
        self.dropped: dict[str, int] = {}  # task -> lines dropped from memory (oldest first)
        self.rotated: dict[str, int] = {}  # task -> times its log file was rotated
        # Every line in arrival order, numbered, so a waiter can print what it missed.
        self.seq = 0
        self._recent: collections.deque[tuple[int, str, bool, str]] = collections.deque(maxlen=keep * 4)
        self._recent_size = 0
        self._files: dict[str, TextIO] = {}
        self._file_sizes: dict[str, int] = {}
        self._lock = threading.Lock()
        self.listener: Callable[[int, str, str], None] | None = None
        self.show_noise = False
        if directory:
            os.makedirs(directory, mode=0o700, exist_ok=True)

    def path(self, task: str) -> str | None:
        """The log file of a task (``None`` when logs are not written to disk)."""
        if not self.directory:
            return None
        return os.path.join(self.directory, task.replace(":", "-") + ".log")

    def add(self, task: str, line: str) -> None:
        noise = is_noise(line)
        size = len(line) + 64  # the text, and roughly what Python spends on each line
        with self._lock:
            self.seq += 1
            seq = self.seq
            recent = self._recent
            if len(recent) == recent.maxlen:
                self._recent_size -= len(recent[0][3]) + 64
            recent.append((seq, task, noise, line))
            self._recent_size += size
            while self._recent_size > self._recent_bytes and len(recent) > 1:
                self._recent_size -= len(recent.popleft()[3]) + 64
            lines = self._lines.setdefault(task, collections.deque())
            lines.append((seq, noise, line))
            total = self._sizes.get(task, 0) + size
            while len(lines) > 1 and (total > self._task_bytes or len(lines) > self._keep):
                total -= len(lines.popleft()[2]) + 64
                self.dropped[task] = self.dropped.get(task, 0) + 1
            self._sizes[task] = total
            if self.directory:
                self._write(task, line)
            # Under the lock, so listeners get lines in the order they are numbered.
            listener = self.listener
            if listener is not None and (self.show_noise or not noise):
                listener(seq, task, line)

    def start_file(self, task: str) -> None:
        """Create the task's log file now, so that a task that prints nothing has one too."""
        if not self.directory:
            return
        with self._lock:
            if task not in self._files:
                self._open(task)

    def _log_path(self, task: str) -> str:
        path = self.path(task)
        assert path is not None  # files are written only with a directory
        return path

    def _open(self, task: str) -> TextIO:
        # Never through a link someone planted in place of the file.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        fd = os.open(self._log_path(task), flags, 0o600)
        f = self._files[task] = os.fdopen(fd, "a", encoding="utf-8", errors="replace")
        self._file_sizes[task] = os.fstat(fd).st_size
        return f

    def _write(self, task: str, line: str) -> None:
        f = self._files.get(task)
        if f is not None and self._file_sizes.get(task, 0) >= self._file_bytes:
            f.close()  # rotate: keep the newest and the previous file, nothing older
            os.replace(self._log_path(task), self._log_path(task) + ".1")
            self.rotated[task] = self.rotated.get(task, 0) + 1
            f = None
        if f is None:
            f = self._open(task)
        data = line + "\n"
        f.write(data)
        f.flush()
        self._file_sizes[task] += len(data)

    def lines(
        self, task: str, *, everything: bool = False, tail: int | None = None, since: int = 0
    ) -> list[str]:
        """The lines a task printed (after line number ``since``, if given); TF start-up
        noise left out unless ``everything``."""
        with self._lock:
            items = list(self._lines.get(task, ()))
        out = [
            line for seq, noise, line in items if seq > since and (everything or self.show_noise or not noise)
        ]
        return out[-tail:] if tail else out

    def dropped_note(self) -> str:
        """A sentence on lines no longer kept in memory or on disk, or "" when none were dropped."""
        with self._lock:
            dropped, rotated = dict(self.dropped), dict(self.rotated)
        parts = [
            f"{task}: {n} oldest line(s) dropped from memory (the log file keeps them)"
            for task, n in sorted(dropped.items())
        ]
        parts += [
            f"{task}: log file rotated {n} time(s), older lines dropped"
            for task, n in sorted(rotated.items())
        ]
        return "; ".join(parts)

    def since(self, seq: int) -> list[tuple[int, str, str]]:
        """(number, task, line) of every shown line after line number ``seq``."""
        with self._lock:
            items = [r for r in self._recent if r[0] > seq]
        return [(n, task, line) for n, task, noise, line in items if self.show_noise or not noise]

    def close(self) -> None:
        with self._lock:
            for f in self._files.values():
                f.close()
            self._files.clear()


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
        once at the end (``chatter.RepeatFolder``), not once per task.

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
