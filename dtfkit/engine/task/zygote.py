"""The task zygote (``python -m dtfkit.engine.task.zygote``): TensorFlow imported once, a task forked
on request.

Importing TensorFlow costs a task process about 4 CPU seconds and 0.3 GB; a cluster of three paid it
three times, on the same two cores. The zygote pays it once per owner: it imports TensorFlow,
cloudpickle and the task side of dtfkit, then waits, single-threaded, for fork requests from its
owner (``dtfkit.engine.launchers.zygotes``) on a Unix socket pair (``dtfkit.engine.wire.forks``).
Each child becomes one task exactly as a fresh interpreter does (``task_main.main``): its own
session and process group, its output on the pipe the owner sent, the task's whole environment and
working directory, then the usual start (the namespace joined while still single-threaded, the
control channel, the port, the ClusterSpec, the server). Android's and Chromium's zygotes, gunicorn's
``--preload`` and ``multiprocessing``'s forkserver do the same.

**Fork safety.** A child of ``fork()`` has one thread, the one that forked; a lock another thread
held stays locked in it. So the zygote forks only from a known state: it names every thread it has
once its imports are done, and refuses to fork when there is one it cannot name (the owner then
starts tasks as fresh interpreters, and says why once). Known, after ``import tensorflow`` 2.21 CPU:
the main thread, and OpenBLAS's workers, which NumPy starts at its import (``OPENBLAS_NUM_THREADS``
of them, less one) and which OpenBLAS parks before a fork (``pthread_atfork``). The zygote starts no
thread of its own: it reaps its children from ``SIGCHLD`` through a wake-up pipe.

**Lifetime.** It ends when its owner closes the socket or dies (the socket reads EOF), SIGKILLing
every child's process group first; each child also has ``PR_SET_PDEATHSIG`` towards the zygote, and
its own control channel to the owner (``dtfkit.engine.platform.lifeline``).
"""

# ruff: noqa: E402
from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import time
from typing import Any


def _thread_ids() -> set[int]:
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def _thread_name(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


_BEFORE = _thread_ids()  # the interpreter's own: the main thread
# The path every child starts from: the zygote's, less what its own start put first (`-m`'s working
# folder, its PYTHONPATH); each child puts its own folder and PYTHONPATH there instead.
_OWN_FIRST = [sys.path[0], *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
_BASE_PATH = [p for p in sys.path if p not in _OWN_FIRST and p != ""]

import numpy  # noqa: F401 - first, alone: the threads it starts are OpenBLAS's

_BLAS = _thread_ids() - _BEFORE

from dtfkit.engine.platform import lifeline  # noqa: E402
from dtfkit.engine.task import task_main  # noqa: E402 - the task's program, imported once here
from dtfkit.engine.wire import forks

_import_tensorflow = task_main._import_tensorflow


def known_threads() -> tuple[list[str], str]:
    """The threads this process has, named, and why it must not fork (``""``: it may).

    Example (in the zygote, after its imports)::

        >>> known_threads()                                               # doctest: +SKIP
        (['main (python3)', 'OpenBLAS worker (python3)'], '')
    """
    import threading

    named, unknown = [], []
    for tid in sorted(_thread_ids()):
        name = _thread_name(tid)
        if tid == os.getpid():
            named.append(f"main ({name})")
        elif tid in _BLAS:
            named.append(f"OpenBLAS worker ({name})")
        else:
            unknown.append(f"{name} (tid {tid})")
    python_threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    why = ""
    if python_threads:
        why = f"Python threads {', '.join(python_threads)} run in the zygote after its imports"
    elif unknown:
        why = f"threads it cannot name run in the zygote after its imports: {', '.join(unknown)}"
    return named, why


class Zygote:
    """The zygote's loop: fork requests in, children's exits out; single-threaded."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.children: set[int] = set()
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        self.wake_w = wake_w
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.set_wakeup_fd(wake_w)

    def serve(self, refuse: str, threads: list[str]) -> None:
        forks.send(self.sock, {"op": "ready", "pid": os.getpid(), "threads": threads, "refuse": refuse}, [])
        while True:
            try:
                watched: list[socket.socket | int] = [self.sock, self.wake_r]
                ready, _, _ = select.select(watched, [], [])
            except InterruptedError:
                continue
            if self.wake_r in ready:
                self._drain_wakeups()
                self._reap()
            if self.sock in ready:
                try:
                    message, fds = forks.receive(self.sock)
                except (ConnectionError, OSError):
                    message, fds = None, []
                if message is None:
                    self._end_children()
                    return
                self._handle(message, fds, refuse)

    def _handle(self, message: dict[str, Any], fds: list[int], refuse: str) -> None:
        try:
            if message.get("op") != "fork":
                raise ValueError(f"unknown request {message.get('op')!r}")
            if refuse:
                raise RuntimeError(refuse)
            pid = self._fork(message, fds)
        except Exception as exc:  # noqa: BLE001 - the owner hears why, and starts the task cold
            self._answer({"op": "failed", "id": message.get("id"), "why": f"{type(exc).__name__}: {exc}"})
        else:
            self.children.add(pid)
            self._answer({"op": "forked", "id": message["id"], "pid": pid})
        finally:
            for fd in fds:
                _close(fd)

    def _answer(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # the owner is gone: the next read sees EOF
            forks.send(self.sock, message, [])

    def _fork(self, message: dict[str, Any], fds: list[int]) -> int:
        names = message.get("fds") or []
        if len(names) != len(fds) or "output" not in names:
            raise ValueError(f"expected descriptors {names}, got {len(fds)}")
        given = dict(zip(names, fds, strict=True))
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        code = 70
        try:
            code = _become_task(message, given, keep=set(fds), zygote=self)
        except SystemExit as exc:  # as a fresh interpreter ends on it
            code = task_main._exit_code(exc)
        except KeyboardInterrupt:  # a fresh interpreter ends by SIGINT itself: -2 to its parent
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # noqa: BLE001 - a child never returns into the zygote's loop
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_r, 4096):
                pass

    def _reap(self) -> None:
        """Reap the children that ended, and tell the owner their exit codes (no use once it is gone)."""
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self._answer({"op": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)})

    def _end_children(self, bound: float = 5.0) -> None:
        """SIGKILL every child and its group, and reap them, within ``bound`` seconds."""
        for pid in list(self.children):
            lifeline.kill_group_and_leader(pid)
        deadline = time.monotonic() + bound
        while self.children:
            self._reap()
            left = deadline - time.monotonic()
            if not self.children or left <= 0:
                return
            with contextlib.suppress(InterruptedError):
                select.select([self.wake_r], [], [], left)  # SIGCHLD wakes it
            self._drain_wakeups()

    def close_in_child(self) -> None:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (self.wake_r, self.wake_w):
            _close(fd)
        self.sock.close()


def _become_task(message: dict[str, Any], given: dict[str, int], keep: set[int], zygote: Zygote) -> int:
    """In the forked child: become the task ``message`` describes, run it, return its exit code."""
    zygote_pid = os.getppid()
    os.setsid()  # its own session and process group, as start_new_session gives a fresh interpreter
    zygote.close_in_child()
    output = given["output"]
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    for fd in (devnull, output):
        _close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    env = dict(message["env"])
    ready_fd = given.get("netns_ready_fd")
    if ready_fd is not None:
        import json

        from dtfkit.engine.wire.protocol import CONFIG_ENV

        config = json.loads(env[CONFIG_ENV])
        config.setdefault("launch", {})["netns_ready_fd"] = ready_fd
        env[CONFIG_ENV] = json.dumps(config)
    from dtfkit.engine.platform import state

    # The zygote is this process's parent, and it lives as long as the owner: die with it.
    env[lifeline.OWNER_ENV] = str(zygote_pid)
    env[lifeline.PDEATHSIG_ENV] = "1"
    os.environ.clear()  # unsetenv/putenv too: TensorFlow's C++ side reads the environment
    os.environ.update(env)
    _show_cluster_mark(env.get(state.CLUSTER_ENV, ""))
    _set_title(env)

    cwd = message.get("cwd") or os.getcwd()
    os.chdir(cwd)
    # What a fresh `python -m` would have on its path: the working folder, then PYTHONPATH.
    paths = [cwd, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    sys.path[:] = paths + [p for p in _BASE_PATH if p not in paths]
    sys.argv = [task_main.__file__]
    import tempfile

    tempfile.tempdir = None  # found again from the task's TMPDIR

    # The zygote's random state would be every child's: reseed what its imports seeded.
    # (Python's `random` reseeds itself after a fork.)
    numpy.random.seed()

    now = time.monotonic()
    task_main._PHASES[:] = [("interpreter", now, time.process_time())]
    task_main._PHASES.append(("dtfkit imports", now, time.process_time()))
    task_main.main()
    return 0


def _stat_fields() -> list[bytes]:
    """``/proc/self/stat`` from its third field on (``[n - 3]`` is field n of proc(5))."""
    with open("/proc/self/stat", "rb") as f:
        return f.read().rpartition(b")")[2].split()


def _set_title(env: dict[str, str]) -> None:
    """Name the task in ``ps`` (``/proc/PID/cmdline``): ``dtfkit task worker:1, forked from ...``,
    written over the zygote's command line in place (its length is the most it can say)."""
    import ctypes
    import json

    from dtfkit.engine.wire.protocol import CONFIG_ENV

    try:
        task = json.loads(env.get(CONFIG_ENV, "{}")).get("task", "?")
        fields = _stat_fields()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)
    except (OSError, IndexError, ValueError):
        return
    title = f"dtfkit task {task}, forked from python -m dtfkit.engine.task.zygote".encode()[: end - start - 1]
    ctypes.memmove(start, title + b"\0" * (end - start - len(title)), end - start)


def _show_cluster_mark(cluster_id: str) -> None:
    """Make ``/proc/PID/environ`` name this task's cluster, as a fresh interpreter's does.

    That file shows the block the zygote's environment was exec'ed with, whatever ``putenv``
    changed since; ``dtfkit cleanup`` and the tests find a cluster's processes by the
    ``DTFKIT_CLUSTER`` there. The zygote's own mark and a cluster's id are made by the same
    owner (``<owner pid>-<8 hex digits>``), so they have the same length and the new id is
    written over the old one in place. Nothing reads that block once ``os.environ`` is replaced.
    """
    import ctypes

    from dtfkit.engine.platform import state

    try:
        fields = _stat_fields()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
    except (OSError, IndexError, ValueError):
        return
    block = ctypes.string_at(start, end - start)
    prefix = state.CLUSTER_ENV.encode() + b"="
    if block.startswith(prefix):
        at = 0
    else:
        found = block.find(b"\0" + prefix)
        if found < 0:
            return
        at = found + 1
    value_at = at + len(prefix)
    old_end = block.find(b"\0", value_at)
    new = cluster_id.encode()
    if old_end - value_at != len(new):
        return  # not the same length: cleanup finds it by the zygote's mark (its state file says)
    ctypes.memmove(start + value_at, new, len(new))


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def main() -> None:
    lifeline.die_with_parent()  # even while it imports: SIGKILL when the owner's spawner thread ends
    sock = socket.socket(fileno=int(os.environ.pop(forks.SOCKET_FD_ENV)))
    import warnings

    # Python 3.12 warns about fork() in a process with threads; these are checked (known_threads).
    warnings.filterwarnings(
        "ignore", message=r".*fork\(\) may lead to deadlocks", category=DeprecationWarning
    )
    try:
        _import_tensorflow()
        import cloudpickle  # noqa: F401 - every call's payload needs it
    except BaseException as exc:  # noqa: BLE001 - the owner hears why and starts tasks cold
        forks.send(
            sock, {"op": "ready", "pid": os.getpid(), "threads": [], "refuse": f"import failed: {exc}"}, []
        )
        raise
    threads, refuse = known_threads()
    Zygote(sock).serve(refuse, threads)


if __name__ == "__main__":
    main()
