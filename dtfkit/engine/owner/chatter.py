"""TensorFlow's start-up chatter in what the tasks print: which lines teach nothing.

TensorFlow's C++ start-up chatter (oneDNN notices, CPU feature hints, CUDA probes)
is kept in the log files but hidden from the notebook unless asked for
(``is_noise``); when shown, each message shows once for all the tasks that printed
it (``RepeatFolder``, ``fold_repeats``). Text only: the log book that uses it is
``output.LogBook``.

Example::

    >>> is_noise("I0000 00:00:1.5   7 cpu_feature_guard.cc:210] This TensorFlow binary is optimized")
    True
"""

from __future__ import annotations

import re
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
