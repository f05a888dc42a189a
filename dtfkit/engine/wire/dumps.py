"""Stacks of a task that cannot answer: ``faulthandler``'s dump, read on the owner's side.

dtfkit asks a stuck task for its stacks through a Python thread (``DumpStacks``). That
thread never runs while TensorFlow's C++ code holds the interpreter lock (a
``MultiWorkerMirroredStrategy`` waiting for a missing peer does), and the answer never
comes. Every task therefore arms ``faulthandler`` at start (``arm``): on SIGABRT, the
signal the owner ends such a task with, and on a crash (SIGSEGV, SIGBUS, SIGFPE,
SIGILL), a C handler that needs no lock writes every thread's stack to the task's
stack file, then the process dies. The owner reads the file once the process is gone,
so the dump is whole, and ``format_dump`` turns it into the same shape as a stack the
task sent itself: outermost call first, with the line of code, notebook cells named as
IPython names them, the engine's leading frames (``runpy``, ``task_main``) left out and
the paths shortened (``frames``).

Example::

    >>> text = '''Fatal Python error: Aborted
    ...
    ... Current thread 0x00007f0000000001 (most recent call first):
    ...   File "/x/context.py", line 745 in ensure_initialized
    ...   File "/x/mine.py", line 3 in build
    ...
    ... Extension modules: numpy (total: 1)'''
    >>> print(format_dump(text))
    Thread 0x00007f0000000001 (the one that was running):
      File "/x/mine.py", line 3, in build
      File "/x/context.py", line 745, in ensure_initialized
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import sysconfig
import traceback
from typing import NamedTuple, TextIO

from dtfkit.engine.wire import frames, sources
from dtfkit.i18n import _

# The header of a dump, then one block per thread, innermost call first.
_THREAD_RE = re.compile(
    r"^(Current thread|Thread) (0x[0-9a-f]+)(?: \[([^\]]*)\])? \(most recent call first\):$"
)
_FRAME_RE = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')

_ENGINE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # dtfkit/engine
_STDLIB_DIR = sysconfig.get_paths()["stdlib"]
# Installed packages (TensorFlow) may live inside the standard library's folder.
_PACKAGE_DIRS = tuple({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})

_KEEP: list[TextIO] = []  # faulthandler keeps only the file's descriptor: its file object must live on


class ThreadStack(NamedTuple):
    ident: str  # "0x00007f..."
    current: bool  # the thread that took the signal
    frames: list[tuple[str, int, str]]  # (file, line, function), outermost first


def stack_file(directory: str, task: str, gen: int) -> str:
    """Where task ``task`` of generation ``gen`` writes its dump (the owner reads it there)."""
    return os.path.join(directory, f"{task.replace(':', '-')}.{gen}.txt")


def arm(path: str | None) -> None:
    """In a task: write every thread's stack to ``path`` on SIGABRT or a crash (stderr
    when ``path`` is None or cannot be opened, e.g. on another machine).

    Also turns core files off: after writing, the signal ends the process as usual, and
    a TensorFlow process's core file (hundreds of MB, in the cluster's working
    directory, where ``ulimit -c`` allows it) must not be what a timeout leaves behind."""
    import faulthandler
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if soft != 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))

    target = sys.stderr
    if path:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            target = os.fdopen(fd, "w")
            _KEEP.append(target)
    faulthandler.enable(file=target, all_threads=True)


def parse_dump(text: str) -> list[ThreadStack]:
    """The threads of a ``faulthandler`` dump, each with its frames outermost first."""
    threads: list[ThreadStack] = []
    frames: list[tuple[str, int, str]] | None = None
    for line in text.splitlines():
        head = _THREAD_RE.match(line)
        if head:
            frames = []
            threads.append(ThreadStack(head.group(2), head.group(1) == "Current thread", frames))
            continue
        frame = _FRAME_RE.match(line)
        if frame and frames is not None:
            frames.insert(0, (frame.group(1), int(frame.group(2)), frame.group(3)))
        elif frames is not None and not line.startswith("  "):
            frames = None  # the block ended (an empty line, "Extension modules: ...")
    return threads


def _is_plumbing(stack: ThreadStack) -> bool:
    """A thread of dtfkit's own or Python's (the control channel, a log pump): every
    frame in dtfkit's engine or the standard library."""
    return all(
        file.startswith(_ENGINE_DIR)
        or file.startswith("<frozen ")
        or (file.startswith(_STDLIB_DIR) and not file.startswith(_PACKAGE_DIRS))
        for file, _, _ in stack.frames
    )


def format_dump(text: str) -> str:
    """The dump as a task's own stacks read: outermost call first, each line of code
    (from this process's ``linecache``: files, and notebook cells), dtfkit's own threads
    and each thread's leading engine frames left out, paths shortened (``frames``).
    ``""`` when ``text`` holds no stack."""
    threads = parse_dump(text)
    shown = [t for t in threads if not _is_plumbing(t)] or threads
    parts = []
    for thread in shown:
        kept = frames.trim(thread.frames, filename=lambda frame: frame[0])
        summary = traceback.StackSummary.from_list([(f, n, fn, None) for f, n, fn in kept])
        lines = "".join(summary.format())
        for file in {f for f, _line, _function in kept}:
            display = sources.display_name(file)
            if display != file:
                lines = lines.replace(f'File "{file}", line ', f"{display}, line ")
        lines = frames.shorten_paths(lines)
        parts.append(thread_title(thread.ident, current=thread.current) + f"\n{lines}")
    return "\n".join(parts).rstrip("\n")


def thread_title(ident: object, *, current: bool = False) -> str:
    """A thread's title in a stack dump, in the reader's language: ``Thread MainThread:`` (``线程 MainThread：``).

    Example::

        >>> thread_title("MainThread")
        'Thread MainThread:'
    """
    label = _(" (the one that was running)") if current else ""
    return _("Thread {ident}{label}:").format(ident=ident, label=label)


def read_dump(path: str | None) -> str:
    """``format_dump`` of the file at ``path``; ``""`` when there is none."""
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return format_dump(f.read())
    except OSError:
        return ""
