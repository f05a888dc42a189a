"""Tasks forked from a zygote: a process of the owner's that imported TensorFlow once (why, and
how it forks safely: ``dtfkit.engine.task.zygote``).

The owner keeps one zygote per set of the variables TensorFlow reads at import (``import_key``): a
cluster with ``env={"TF_CPP_MIN_LOG_LEVEL": "0"}`` gets a zygote of its own; variables read later
(``CUDA_VISIBLE_DEVICES``, ``TF_CONFIG``, ``PYTHONPATH``...) are set in the child. A forked task is
the zygote's child, not the owner's: the zygote reports each child's exit code on the socket
(``ForkedProcess.poll``), and the owner signals the child's process group directly.

Where the zygote cannot serve, the task starts as a fresh interpreter and the launcher says why
once (``say_once()``): ``DTFKIT_ZYGOTE=0``; a zygote that failed to start or that refuses to
fork (a thread it cannot name, see ``known_threads``); a request too large for one packet.

Lifetime: one per owner, started by ``import dtfkit`` in a notebook kernel (``prestart_default``;
``DTFKIT_ZYGOTE=lazy``: not there, for kernels that start no cluster, such as a grader's) or at the
first cluster; it ends with its owner: ``close()``, the owner's exit (``atexit``), or the owner's
death by SIGKILL (the zygote reads EOF on its socket, and ``PR_SET_PDEATHSIG``, asked for from the
spawner thread that lives as long as the owner). It has a state folder and file like a cluster, so
``python -m dtfkit cleanup`` finds it and its children after a crash.

Example::

    >>> zygote = zygote_for(task_environment("x", "/tmp/x"))            # doctest: +SKIP
    >>> handle = zygote.fork(env, cwd=None, ready_fd=None)              # doctest: +SKIP
    >>> handle.read_line()                                               # doctest: +SKIP
    b'...'
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import IO, Any

from dtfkit.engine.launchers.contract import ReportedExit, TaskHandle
from dtfkit.engine.platform import lifeline, state
from dtfkit.engine.wire import forks
from dtfkit.engine.wire.lines import read_line
from dtfkit.engine.wire.protocol import CONFIG_ENV

ZYGOTE_ENV = "DTFKIT_ZYGOTE"  # "0" (or off, false, no): every task a fresh interpreter;
# "lazy": the zygote starts at the first cluster, not at `import dtfkit` in a kernel
READY_TIMEOUT_S = 180.0  # importing TensorFlow on a loaded 2-core machine
FORK_TIMEOUT_S = 30.0
MAX_ZYGOTES = 3  # at most this many import-time environments at once (each ~0.3 GB)
#: Variables read once, when TensorFlow (or Python, or OpenBLAS) loads: a task that sets another
#: value than its zygote's cannot be forked from it. Python's start-up variables (``PYTHON*``,
#: ``PYTHONPATH`` aside, which the child applies itself) count too.
IMPORT_TIME_ENV = frozenset(
    {
        "TF_CPP_MIN_LOG_LEVEL",
        "TF_CPP_MAX_VLOG_LEVEL",
        "TF_CPP_MIN_VLOG_LEVEL",
        "TF_CPP_VMODULE",
        "TF_ENABLE_ONEDNN_OPTS",
        "TF_USE_LEGACY_KERAS",
        "KERAS_BACKEND",
        "KERAS_HOME",
        "OMP_NUM_THREADS",
        "TF_NUM_INTEROP_THREADS",
        "TF_NUM_INTRAOP_THREADS",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "XLA_FLAGS",
        "TF_XLA_FLAGS",
        "LANG",  # Python sets its streams' encoding at start
    }
)
_IMPORT_TIME_PREFIXES = ("PYTHON", "OPENBLAS_", "MKL_", "MALLOC_", "KMP_", "GOMP_", "LC_")
_PER_PROCESS = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED"})


def import_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The variables of ``env`` that a process reads at import: which zygote can fork its task.

    Example::

        >>> import_key({"TF_CPP_MIN_LOG_LEVEL": "2", "TF_CONFIG": "{}", "PYTHONHASHSEED": "0"})
        (('PYTHONHASHSEED', '0'), ('TF_CPP_MIN_LOG_LEVEL', '2'))
    """
    return tuple(
        sorted(
            (k, v)
            for k, v in env.items()
            if k not in _PER_PROCESS and (k in IMPORT_TIME_ENV or k.startswith(_IMPORT_TIME_PREFIXES))
        )
    )


def enabled() -> bool:
    """False when ``DTFKIT_ZYGOTE`` says off: then every task starts as a fresh interpreter."""
    return os.environ.get(ZYGOTE_ENV, "").strip().lower() not in ("0", "false", "no", "off")


class ZygoteUnavailable(Exception):
    """The zygote cannot fork this task; the message says why (the task then starts cold)."""


class ForkedProcess(ReportedExit, TaskHandle):
    """A task forked by a zygote: the leader of its own process group, the zygote's child."""

    def __init__(self, zygote: Zygote, pid: int, output: IO[bytes], cluster_id: str = ""):
        self.zygote = zygote
        self._pid = pid
        self.output = output
        self.host = "localhost"
        self.identity = state.process_identity(pid)
        if len(cluster_id) != len(zygote.id):
            # The child could not write its cluster's id over the zygote's in /proc/PID/environ
            # (see dtfkit.engine.task.zygote): cleanup recognises it by the zygote's mark there.
            self.identity["mark"] = zygote.id
        self._ended = threading.Event()

    @property
    def pid(self) -> int:
        return self._pid

    def kill(self) -> None:
        if self._code is None:  # reaped by the zygote only after the exit is reported: the pid is still ours
            lifeline.kill_group_and_leader(self._pid)
        self.wait(10.0)

    def read_line(self) -> bytes:
        return read_line(self.output)

    def close_output(self) -> None:
        self.output.close()

    def abort(self) -> bool:
        if self._code is not None:
            return False
        try:
            os.kill(self._pid, signal.SIGABRT)  # the leader only: kill() ends its group after
        except ProcessLookupError:
            return False
        return True

    def stopped(self) -> bool:
        return state.is_stopped(self._pid)


@dataclasses.dataclass
class _Pending:
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    answer: dict[str, Any] | None = None  # the zygote's JSON answer


class Zygote:
    """One zygote process: TensorFlow imported with ``env``'s import-time variables.

    Example::

        >>> zygote = Zygote(env); zygote.wait_ready()                        # doctest: +SKIP
        ''
        >>> handle = zygote.fork(task_env, cwd="/home/me")                  # doctest: +SKIP
    """

    def __init__(self, env: Mapping[str, str]):
        self.key = import_key(env)
        self.id, self.dir = state.new_cluster_dir()
        self.threads: list[str] = []
        self.refused = ""  # why it will not fork ("" while it may)
        self.closed = False
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._children: dict[int, ForkedProcess] = {}
        self._pending: dict[int, _Pending] = {}
        self._unadopted: set[int] = set()  # forked, not yet handed to its requester
        self._early_exits: dict[int, int] = {}  # exits of those
        self._next_id = 0
        self.leases = 0  # callers between zygote_for() and the end of their fork (under the module's _LOCK)
        own, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = own
        zenv = {k: v for k, v in env.items() if k != CONFIG_ENV}
        zenv[state.CLUSTER_ENV] = self.id  # cleanup finds it, and its children, by this mark
        zenv[forks.SOCKET_FD_ENV] = str(theirs.fileno())
        zenv = lifeline.with_lifeline(zenv, from_long_lived_thread=True)  # spawned from the spawner thread
        log = open(os.path.join(self.dir, "zygote.log"), "wb")  # noqa: SIM115 - the child holds it
        try:
            self.popen = lifeline.Spawner.get().call(
                lambda: subprocess.Popen(
                    [sys.executable, "-m", "dtfkit.engine.task.zygote"],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=zenv,
                    start_new_session=True,
                    pass_fds=(theirs.fileno(),),
                )
            )
        finally:
            theirs.close()
            log.close()
        state.write_state(self.dir, self.id, [state.process_identity(self.popen.pid)], "task zygote")
        threading.Thread(target=self._read, name="dtfkit-zygote", daemon=True).start()

    # ----------------------------------------------------------- answers
    def _read(self) -> None:
        while True:
            try:
                message, fds = forks.receive(self.sock)
            except OSError:
                message, fds = None, []
            for fd in fds:
                os.close(fd)
            if message is None:
                self._gone()
                return
            op = message.get("op")
            if op == "ready":
                self.threads = list(message.get("threads") or [])
                self.refused = message.get("refuse") or ""
                self._ready.set()
            elif op in ("forked", "failed"):
                with self._lock:
                    request = message.get("id")
                    pending = self._pending.pop(request, None) if isinstance(request, int) else None
                    if op == "forked" and pending is not None:
                        self._unadopted.add(message["pid"])
                if pending is not None:
                    pending.answer = message
                    pending.done.set()
                elif op == "forked":  # its requester gave up waiting: nobody will own it
                    lifeline.kill_group_and_leader(message["pid"])
            elif op == "exit":
                pid, code = message["pid"], int(message["code"])
                with self._lock:
                    child = self._children.pop(pid, None)
                    if child is None and pid in self._unadopted:
                        self._early_exits[pid] = code  # before its requester took it: _adopt reads it
                if child is not None:
                    child.exited(code)

    def _gone(self) -> None:
        """The zygote ended: its children die with it (PR_SET_PDEATHSIG), so say they did."""
        code = self.popen.wait()
        if not self.refused and not self._ready.is_set():
            self.refused = f"the zygote exited ({code}) before it was ready: {self._log_tail()}"
        self._ready.set()
        with self._lock:
            children, self._children = list(self._children.values()), {}
            pending, self._pending = list(self._pending.values()), {}
            for pid in self._unadopted:
                lifeline.kill_group_and_leader(pid)
                self._early_exits[pid] = -signal.SIGKILL
        for child in children:
            lifeline.kill_group_and_leader(child.pid)
            child.exited(-signal.SIGKILL)
        for p in pending:
            p.done.set()

    def _log_tail(self) -> str:
        try:
            with open(os.path.join(self.dir, "zygote.log"), "rb") as f:
                lines = f.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return "no output"
        return lines[-1] if lines else "no output"

    # ------------------------------------------------------------- using
    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> str:
        """Wait (bounded) until TensorFlow is imported; ``""`` when it can fork, else why not."""
        if not self._ready.wait(timeout):
            return f"the zygote did not finish importing TensorFlow within {timeout:g} s"
        return self.refused

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None and not self.closed

    def fork(self, env: Mapping[str, str], cwd: str | None, ready_fd: int | None = None) -> ForkedProcess:
        """Fork one task with environment ``env`` (its ``DTFKIT_TASK`` config included) in ``cwd``.

        ``ready_fd``: the namespace anchor's readiness pipe, while it still starts. Raises
        ``ZygoteUnavailable`` saying why when the zygote cannot fork it.
        """
        why = self.wait_ready()
        if why:
            raise ZygoteUnavailable(why)
        read_end, write_end = os.pipe()
        names, fds = ["output"], [write_end]
        if ready_fd is not None:
            names.append("netns_ready_fd")
            fds.append(ready_fd)
        pending = _Pending()
        with self._lock:
            if self.closed:
                raise ZygoteUnavailable("the zygote was closed")
            self._next_id += 1
            request = self._next_id
            self._pending[request] = pending
        try:
            forks.send(
                self.sock, {"op": "fork", "id": request, "env": dict(env), "cwd": cwd, "fds": names}, fds
            )
        except (OSError, ValueError) as exc:
            with self._lock:
                self._pending.pop(request, None)
            os.close(read_end)
            raise ZygoteUnavailable(f"the fork request could not be sent ({exc})") from None
        finally:
            os.close(write_end)  # the zygote has its copy, and the child will have it
        output = os.fdopen(read_end, "rb")
        if not pending.done.wait(FORK_TIMEOUT_S):
            with self._lock:
                gave_up = self._pending.pop(request, None) is not None
            if not gave_up:  # the reader took the answer as the wait ended: it is on its way
                pending.done.wait(FORK_TIMEOUT_S)
        answer = pending.answer
        if answer is None:
            output.close()
            raise ZygoteUnavailable(f"the zygote did not answer a fork request within {FORK_TIMEOUT_S:g} s")
        if answer["op"] == "failed":
            output.close()
            raise ZygoteUnavailable(f"the zygote could not fork: {answer.get('why')}")
        return self._adopt(answer["pid"], output, env.get(state.CLUSTER_ENV, ""))

    @property
    def busy(self) -> bool:
        """Forking, importing, or with children: not to be ended to make room for another."""
        with self._lock:
            return (
                bool(self._children or self._pending or self._unadopted or self.leases)
                or not self._ready.is_set()
            )

    def _adopt(self, pid: int, output: IO[bytes], cluster_id: str) -> ForkedProcess:
        child = ForkedProcess(self, pid, output, cluster_id)
        with self._lock:
            self._unadopted.discard(pid)
            early = self._early_exits.pop(pid, None)
            if early is None:
                self._children[pid] = child
        if early is not None:
            child.exited(early)
        return child

    def close(self) -> None:
        """End the zygote (and whatever it forked that still runs). Safe to call twice."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        if not self._ready.is_set():  # still importing: it reads no EOF, and forked nothing
            lifeline.signal_group(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # EOF: the zygote ends its children, then itself
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            lifeline.signal_group(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)
        self.sock.close()
        state.remove_state(self.dir)

    def __repr__(self) -> str:
        what = "closed" if self.closed else ("refuses to fork: " + self.refused if self.refused else "ready")
        return f"Zygote {self.id} (pid {self.popen.pid}): {what}"


_LOCK = threading.Lock()
_ZYGOTES: dict[tuple[tuple[str, str], ...], Zygote] = {}
_FAILED: dict[tuple[tuple[str, str], ...], str] = {}  # why the zygote for these variables cannot serve
_SAID: set[str] = set()  # fallback reasons already said
_OWNER = os.getpid()


def _forget_in_child() -> None:
    # A process forked from the owner (multiprocessing, say) does not own the owner's zygotes:
    # its exit must not end them (close_all at exit), nor may it ask them for tasks.
    global _OWNER
    _OWNER = os.getpid()
    _ZYGOTES.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def zygote_for(env: Mapping[str, str]) -> Zygote:
    """This process's zygote for ``env``'s import-time variables, started if there is none yet.

    At most ``MAX_ZYGOTES`` live at once: the one unused longest that is not busy makes room;
    ``ZygoteUnavailable`` when all are busy, or when the zygote for these variables failed or
    refused to fork before (said once; it is not started again)."""
    key = import_key(env)
    ended: list[Zygote] = []
    try:
        with _LOCK:
            if key in _FAILED:
                raise ZygoteUnavailable(_FAILED[key])
            zygote = _ZYGOTES.get(key)
            if zygote is not None and zygote.alive:
                _ZYGOTES[key] = _ZYGOTES.pop(key)  # most recently used last
                return zygote
            if zygote is not None:
                ended.append(_ZYGOTES.pop(key))
            while len(_ZYGOTES) >= MAX_ZYGOTES:
                idle = [k for k, z in _ZYGOTES.items() if not z.busy]
                if not idle:
                    raise ZygoteUnavailable(f"{MAX_ZYGOTES} zygotes for other environments are busy")
                ended.append(_ZYGOTES.pop(idle[0]))
            zygote = Zygote(env)
            _ZYGOTES[key] = zygote
            return zygote
    finally:
        for old in ended:  # outside the lock: ending one may take seconds
            old.close()


def _give_up_on(zygote: Zygote, why: str) -> None:
    """Remember that the zygote for these variables cannot serve, and end it (it holds ~0.3 GB)."""
    with _LOCK:
        _FAILED[zygote.key] = why
        if _ZYGOTES.get(zygote.key) is zygote:
            del _ZYGOTES[zygote.key]
    zygote.close()


def prestart(env: Mapping[str, str]) -> None:
    """Start the zygote for ``env`` in the background, so that TensorFlow is imported by the
    time the first cluster asks (``import dtfkit`` in a kernel). Never raises."""

    def start() -> None:
        with contextlib.suppress(Exception):  # the first cluster tries again and says why
            zygote_for(env)

    threading.Thread(target=start, name="dtfkit-zygote-start", daemon=True).start()


def prestart_default() -> None:
    """Start, in the background, the zygote a cluster with default settings forks from
    (not with ``DTFKIT_ZYGOTE=lazy``, nor ``0``)."""
    if not enabled() or os.environ.get(ZYGOTE_ENV, "").strip().lower() == "lazy":
        return
    from dtfkit.engine.platform.taskenv import task_environment

    prestart(task_environment("zygote", os.path.join(state.base_dir(), "zygote")))


def fork_task(
    env: Mapping[str, str], cwd: str | None, ready_fd: int | None = None
) -> tuple[ForkedProcess | None, str]:
    """Fork a task from the zygote for ``env``: ``(handle, "")``, or ``(None, why not)`` (said once)."""
    if not enabled():
        return None, f"{ZYGOTE_ENV}={os.environ.get(ZYGOTE_ENV)}"
    zygote = None
    try:
        zygote = zygote_for(env)
        with _LOCK:
            zygote.leases += 1
        try:
            return zygote.fork(env, cwd, ready_fd), ""
        finally:
            with _LOCK:
                zygote.leases -= 1
    except ZygoteUnavailable as exc:
        if zygote is not None and zygote.refused:  # it will never fork: no zygote for these variables
            _give_up_on(zygote, zygote.refused)
        say_once(str(exc))
        return None, str(exc)


def say_once(why: str) -> None:
    """Tell, once per reason, that tasks start as fresh interpreters and why."""
    with _LOCK:
        if why in _SAID:
            return
        _SAID.add(why)
    from dtfkit.engine.wire import frames

    frames.warn(f"dtfkit: tasks start as fresh interpreters (each imports TensorFlow): {why}")


def live() -> list[Zygote]:
    """The zygotes of this process now."""
    with _LOCK:
        return [z for z in _ZYGOTES.values() if z.alive]


@atexit.register
def close_all() -> None:
    """End every zygote of this process (and what they forked)."""
    if os.getpid() != _OWNER:
        return
    with _LOCK:
        zygotes = list(_ZYGOTES.values())
        _ZYGOTES.clear()
    for zygote in zygotes:
        zygote.close()
