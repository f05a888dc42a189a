"""Per-task log capture: every line a task prints, kept in memory and on disk.

TensorFlow's C++ start-up chatter (oneDNN notices, CPU feature hints, CUDA probes)
is kept in the files but hidden from the notebook unless asked for; when shown, each
message shows once for all the tasks that printed it (``RepeatFolder``).

Example::

    >>> book = LogBook(directory=None)
    >>> book.add("worker:0", "hello")
    >>> book.lines("worker:0")
    ['hello']
"""

from __future__ import annotations

import collections
import os
import re
import threading
from collections.abc import Callable

# Lines TensorFlow prints at start-up that teach nothing. Matched against the
# whole line; kept in the log files and in logs(..., everything=True).
NOISE_PATTERNS = [
    r".*oneDNN custom operations are on.*",
    r".*rebuild TensorFlow with the appropriate compiler flags.*",
    r".*This TensorFlow binary is optimized to use available CPU instructions.*",
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    r".*Could not find cuda drivers on your machine.*",
    r".*Unable to register cu(DNN|FFT|BLAS) factory.*",
    r".*failed call to cuInit.*",
    r".*TF-TRT Warning.*",
    r".*computation placer already registered.*",
    r"[IW]0000 00:00:\d+\.\d+\s+\d+ (cpu_feature_guard|port|cuda_executor|grpc_server_lib|cpu_utils|gpu_device|device_compiler)\.cc:\d+\].*",
    r".*Started server with target: grpc://.*",
    r".*GRPC_FAIL_FAST.*",
    # With TF_CPP_MIN_LOG_LEVEL=0 (to see master.cc's "Scanning workers ..." lines): per-session chatter.
    r"[IW]0000 00:00:\d+\.\d+\s+\d+ (profiler_session|xplane_to_step_stats|mlir_graph_optimization_pass)\.cc:\d+\].*",
    r".*Local rendezvous is aborting with status: ABORTED: Cleanup.*",
    r".*coordination_service\.cc:\d+\] Initializing CoordinationService",
]
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


_NOISE = re.compile("|".join(f"(?:{p})" for p in NOISE_PATTERNS))


def is_noise(line: str) -> bool:
    """True for TensorFlow start-up lines that are hidden by default."""
    return bool(_NOISE.fullmatch(line))


# TensorFlow's C++ log prefix: severity, date, time, thread id ("I0000 00:00:1795449112.797470   10769 ").
_GLOG_PREFIX = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ ")
_GLOG_INFO_OR_WARNING = re.compile(r"[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+\.cc:\d+\] ")
_ADDRESS_PORT = re.compile(r"\b(localhost|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-f:]+\]):\d{2,5}\b")


def is_startup_chatter(line: str) -> bool:
    """True for what TensorFlow's C++ side says while a task starts: a known start-up
    line (``is_noise``) or an info/warning line in its log format. Errors (``E...``) and
    whatever Python code prints are never chatter.

    Example::

        >>> is_startup_chatter("I0000 00:00:1.5   7 port.cc:153] oneDNN custom operations are on.")
        True
        >>> is_startup_chatter("E0000 00:00:1.5   7 cuda_executor.cc:1] CUDA error")
        False
    """
    return is_noise(line) or bool(_GLOG_INFO_OR_WARNING.match(line))


def _repeat_key(line: str) -> str:
    """What two tasks' copies of one message share: the text without the log prefix
    (time, thread) and with ports masked (each task serves on its own)."""
    return _ADDRESS_PORT.sub(r"\1:<port>", _GLOG_PREFIX.sub("", line, count=1))


def fold_repeats(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(task, line) pairs with each message that several tasks printed kept once, where
    it first arrived, followed by ``(same on ...)`` naming the other tasks (or, when
    tasks printed it more than once each, ``(printed N times, by ...)``).

    A message only one task printed stays as it is, every copy. When the copies differ
    only in a port, the port shows as ``<port>``.

    Example::

        >>> fold_repeats([("ps:0", "oneDNN on"), ("worker:0", "oneDNN on"), ("worker:0", "hi")])
        [('ps:0', 'oneDNN on (same on worker:0)'), ('worker:0', 'hi')]
    """
    groups: dict[str, list[int]] = {}
    for number, (_, line) in enumerate(items):
        groups.setdefault(_repeat_key(line), []).append(number)
    out = []
    for number, (task, line) in enumerate(items):
        group = [items[n] for n in groups[_repeat_key(line)]]
        tasks = list(dict.fromkeys(t for t, _ in group))
        if len(tasks) == 1:
            out.append((task, line))
            continue
        if groups[_repeat_key(line)][0] != number:  # folded into the first copy
            continue
        texts = {_GLOG_PREFIX.sub("", text, count=1) for _, text in group}
        shown = line if len(texts) == 1 else _ADDRESS_PORT.sub(r"\1:<port>", line)
        if len(group) == len(tasks):
            note = f"same on {', '.join(sorted(tasks[1:], key=_task_order))}"
        else:
            note = f"printed {len(group)} times, by {', '.join(sorted(tasks, key=_task_order))}"
        out.append((task, f"{shown} ({note})"))
    return out


def _task_order(name: str) -> tuple[str, int, str]:
    """Sort "worker:2" before "worker:10"."""
    job, _, index = name.partition(":")
    return (job, int(index), "") if index.isdigit() else (job, -1, index)


class RepeatFolder:
    """Echoes lines at once, except TensorFlow's start-up chatter, which it holds until
    ``flush()`` and then echoes with each message once (see ``fold_repeats``).

    Every task of a cluster prints the same start-up notices (oneDNN, CPU features,
    CUDA probes, "Started server with target"); a cell shows them once each.

    Example::

        >>> shown = []
        >>> folder = RepeatFolder(lambda task, line: shown.append(f"[{task}] {line}"))
        >>> folder.take("ps:0", "W0000 00:00:1.5   7 port.cc:1] slow")
        >>> folder.take("worker:0", "W0000 00:00:1.6   9 port.cc:1] slow")
        >>> folder.flush()
        >>> shown
        ['[ps:0] W0000 00:00:1.5   7 port.cc:1] slow (same on worker:0)']
    """

    def __init__(self, echo: Callable[[str, str], None]):
        self.echo = echo
        self._held: list[tuple[str, str]] = []

    def take(self, task: str, line: str) -> None:
        """Echo ``line`` now, or hold it when it is start-up chatter."""
        if is_startup_chatter(line):
            self._held.append((task, line))
        else:
            self.echo(task, line)

    def flush(self) -> None:
        """Echo the held lines, each message once, and hold nothing any more."""
        held, self._held = self._held, []
        for task, line in fold_repeats(held):
            self.echo(task, line)


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
        self._files: dict[str, object] = {}
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

    def _open(self, task: str):
        # Never through a link someone planted in place of the file.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        fd = os.open(self.path(task), flags, 0o600)
        f = self._files[task] = os.fdopen(fd, "a", encoding="utf-8", errors="replace")
        self._file_sizes[task] = os.fstat(fd).st_size
        return f

    def _write(self, task: str, line: str) -> None:
        f = self._files.get(task)
        if f is not None and self._file_sizes.get(task, 0) >= self._file_bytes:
            f.close()  # rotate: keep the newest and the previous file, nothing older
            os.replace(self.path(task), self.path(task) + ".1")
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
