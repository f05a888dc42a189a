"""Per-task log capture: every line a task prints, kept in memory and on disk.

TensorFlow's C++ start-up chatter (oneDNN notices, CPU feature hints, CUDA probes)
is kept in the files but hidden from the notebook unless asked for.

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
# A task writes this line to its stdout after a call's output and before it sends
# the call's reply; the owner accepts the reply only after reading the line, so
# every line the function printed is shown by the cell that made the call.
OUTPUT_DONE_MARK = "\x00dtfkit-output-done "
SCRIPT_DONE_MARK = OUTPUT_DONE_MARK + "script "  # a launched script ended; its exit code follows
# How long to wait for the rest of an exited task's output (a grandchild may hold its pipe open).
OUTPUT_DRAIN_SECONDS = 5.0

_NOISE = re.compile("|".join(f"(?:{p})" for p in NOISE_PATTERNS))


def is_noise(line: str) -> bool:
    """True for TensorFlow start-up lines that are hidden by default."""
    return bool(_NOISE.fullmatch(line))


class LogBook:
    """Lines printed by each task, in memory (bounded) and in one file per task."""

    def __init__(self, directory: str | None, keep: int = 5000):
        self.directory = directory
        self._keep = keep
        self._lines: dict[str, collections.deque[tuple[bool, str]]] = {}
        # Every line in arrival order, numbered, so a waiter can print what it missed.
        self.seq = 0
        self._recent: collections.deque[tuple[int, str, bool, str]] = collections.deque(maxlen=keep * 4)
        self._files: dict[str, object] = {}
        self._lock = threading.Lock()
        self.listener: Callable[[int, str, str], None] | None = None
        self.show_noise = False
        if directory:
            os.makedirs(directory, exist_ok=True)

    def path(self, task: str) -> str | None:
        """The log file of a task (``None`` when logs are not written to disk)."""
        if not self.directory:
            return None
        return os.path.join(self.directory, task.replace(":", "-") + ".log")

    def add(self, task: str, line: str) -> None:
        noise = is_noise(line)
        with self._lock:
            self.seq += 1
            seq = self.seq
            self._recent.append((seq, task, noise, line))
            self._lines.setdefault(task, collections.deque(maxlen=self._keep)).append((noise, line))
            if self.directory:
                f = self._files.get(task)
                if f is None:
                    f = self._files[task] = open(self.path(task), "a", encoding="utf-8")  # noqa: SIM115
                f.write(line + "\n")
                f.flush()
            # Under the lock, so listeners get lines in the order they are numbered.
            listener = self.listener
            if listener is not None and (self.show_noise or not noise):
                listener(seq, task, line)

    def lines(self, task: str, *, everything: bool = False, tail: int | None = None) -> list[str]:
        """The lines a task printed; TF start-up noise left out unless ``everything``."""
        with self._lock:
            items = list(self._lines.get(task, ()))
        out = [line for noise, line in items if everything or self.show_noise or not noise]
        return out[-tail:] if tail else out

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
