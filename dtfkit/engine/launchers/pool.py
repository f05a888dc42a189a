"""A warm pool: task processes started ahead of need, TensorFlow already imported.

Importing TensorFlow takes seconds (about 4 s alone, 7 s for three at once on two
cores); a student who reruns a cell should not wait for it again. A ``TaskPool``
keeps one *warm namespace* ready: a network-namespace anchor (``dtfkit.engine.platform.netns``) and
up to ``size`` processes inside it that have joined the namespace, imported
TensorFlow, reserved a port and connected to the pool. The next isolated cluster
adopts the whole warm namespace: its processes become the cluster's tasks (any
role: they learn their task name, ClusterSpec and port only then) and the anchor
becomes the cluster's anchor, so the cluster is as isolated as a cold one and
shares its namespace with nobody. The pool then fills a fresh namespace in the
background.

Why whole namespaces: ``setns`` into a user namespace is refused once a process
has threads, and importing TensorFlow starts threads, so a warm process must
already live in the namespace it will serve in.

Bounds: at most ``size`` warm processes (``DTFKIT_POOL_SIZE``, default 4), fewer
when the machine lacks the memory (``WARM_RSS_BYTES`` each, measured: a process
that imported TensorFlow 2.21 CPU holds about 0.5-0.6 GB resident).

Lifetime: the pool belongs to the process that created it. Its processes die with
it (``PR_SET_PDEATHSIG`` from the pool's spawner thread, which lives as long as the
process, and EOF on their control connection); ``close()`` ends them; the pool
has a state file like a cluster's, so ``python -m dtfkit cleanup`` reaps them after a
crash.

On by default in a Jupyter/IPython kernel, off elsewhere. ``LocalCluster(pool=False)``
or ``DTFKIT_POOL=0`` turn it off; ``DTFKIT_POOL=1`` turns it on outside a kernel. In a
kernel it starts filling when ``dtfkit`` is imported (``dtfkit.engine.launchers.prewarm``).

A cluster that arrives while the pool is still filling takes the namespace as it is:
the warm processes, and the ones still importing TensorFlow (they are further along
than any process the cluster could start), and the fill stops. Every cluster pauses the
fill while it starts (``pause()``/``resume()``), so a cluster that starts cold never
competes with the fill for the same cores.

Example::

    >>> from dtfkit.engine.launchers.pool import TaskPool
    >>> with TaskPool(size=3) as pool:                                   # doctest: +SKIP
    ...     pool.wait_warm(3, timeout=60)
    ...     with dtfkit.LocalCluster(ps=1, workers=2, pool=pool) as cluster:
    ...         cluster.adopted       # {'ps:0': True, 'worker:0': True, 'worker:1': True}
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Listener

from dtfkit.engine.launchers import first_clusters
from dtfkit.engine.launchers.contract import PoolStart
from dtfkit.engine.launchers.local import (
    LocalLauncher,
    LocalProcess,
    NamespaceAnchor,
    kill_group,
    spawn_task,
    with_lifeline,
)
from dtfkit.engine.platform import lifeline, netns, notebook, state
from dtfkit.engine.platform.taskenv import task_environment
from dtfkit.engine.wire import control
from dtfkit.engine.wire.protocol import CONFIG_ENV, Adopt, TaskConfig, Warm
from dtfkit.errors import ClusterStartError

POOL_ENV = notebook.POOL_ENV  # read by dtfkit.engine.platform.notebook.pool_flag(), nowhere else
SIZE_ENV = "DTFKIT_POOL_SIZE"
DEFAULT_SIZE = 4
WARM_WAIT_S = 180.0  # how long a cluster waits for a process still importing TensorFlow
WARM_RSS_BYTES = 650 * 1024 * 1024  # measured peak RSS of `import tensorflow` (TF 2.21 CPU): ~605 MB
# Environment variables TensorFlow (or Keras) reads once, at import or first use: a
# cluster that sets one of them cannot use processes that imported TensorFlow already.
IMPORT_TIME_ENV = frozenset(
    {
        "TF_CPP_MIN_LOG_LEVEL",
        "TF_CPP_MAX_VLOG_LEVEL",
        "TF_CPP_MIN_VLOG_LEVEL",
        "TF_CPP_VMODULE",
        "CUDA_VISIBLE_DEVICES",
        "TF_FORCE_GPU_ALLOW_GROWTH",
        "TF_ENABLE_ONEDNN_OPTS",
        "TF_USE_LEGACY_KERAS",
        "KERAS_BACKEND",
        "KERAS_HOME",
        "OMP_NUM_THREADS",
        "TF_NUM_INTEROP_THREADS",
        "TF_NUM_INTRAOP_THREADS",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
    }
)


@dataclass
class WarmProcess:
    """One warm process: TensorFlow imported, a port reserved, connected to the pool."""

    popen: object  # subprocess.Popen
    conn: object = None
    port: int | None = None


@dataclass
class WarmNamespace:
    """An anchor holding a fresh user + network namespace, and the processes inside it."""

    anchor: NamespaceAnchor
    env: dict[str, str] = field(default_factory=dict)  # what its processes were started with
    procs: list[WarmProcess] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return self.anchor.namespace

    def warm(self) -> list[WarmProcess]:
        return [p for p in self.procs if p.conn is not None and p.popen.poll() is None]


class TaskPool(contextlib.AbstractContextManager):
    """Keeps up to ``size`` task processes warm (TensorFlow imported) in a fresh namespace.

    Args:
        size: how many warm processes to keep (``DTFKIT_POOL_SIZE``; default 4),
            lowered to what the available memory allows.
        start: begin filling at once (else at the first ``fill()``).
        env: variables TensorFlow reads at import that the expected clusters set
            (their ``env=``), so that those clusters can adopt the processes.

    Example::

        >>> pool = TaskPool(size=3)                                       # doctest: +SKIP
        >>> pool.wait_warm(3, timeout=60)                                 # doctest: +SKIP
        >>> cluster = dtfkit.LocalCluster(ps=1, workers=2, pool=pool)     # doctest: +SKIP
        >>> pool.close()                                                  # doctest: +SKIP
    """

    def __init__(self, size: int | None = None, *, start: bool = True, env: dict[str, str] | None = None):
        if size is None:
            size = int(os.environ.get(SIZE_ENV, DEFAULT_SIZE))
        if not (isinstance(size, int) and size >= 1):
            raise ValueError(f"size must be a positive number of processes, not {size!r}")
        self.size = _affordable(size)
        self.want = self.size  # how many to warm next: the size of the last cluster served
        self.extra_env = dict(env or {})  # import-time variables of the clusters expected next
        self.closed = False
        self.note = ""  # why the pool is not filling, if it is not
        self.id, self.dir = state.new_cluster_dir()
        self._authkey = secrets.token_bytes(16)
        self._socket_path = os.path.join(self.dir, "pool.sock")
        self._listener = Listener(self._socket_path, family="AF_UNIX")
        self._lock = threading.Condition()
        self._current: WarmNamespace | None = None
        self._filling = False
        self._paused = 0  # clusters starting now: leave them the cores
        self._pending: dict[int, WarmProcess] = {}  # pid -> process not yet connected
        threading.Thread(target=self._accept_loop, name="dtfkit-pool-accept", daemon=True).start()
        _OPEN.add(self)
        if start:
            self.fill()

    # ------------------------------------------------------------------ filling
    def fill(self) -> None:
        """Fill a fresh warm namespace in the background, or finish one a pause interrupted
        (no-op while paused, or when the current namespace has its processes)."""
        with self._lock:
            if self.closed or self._filling or self._paused:
                return
            if self._current is not None and len(self._current.procs) >= self.want:
                return
            self._filling = True
        threading.Thread(target=self._fill, name="dtfkit-pool-fill", daemon=True).start()

    def _fill(self) -> None:
        try:
            ok, why = netns.isolation_available()
            if not ok:
                self.note = f"no warm pool: {why}"
                return
            spawner = lifeline.Spawner.get()
            with self._lock:
                space = self._current
            if space is None:
                space = spawner.call(self._start_anchor)
                if space is None:
                    return
                with self._lock:
                    if self.closed or self._current is not None:
                        _end(space)
                        return
                    self._current = space
            while True:
                with self._lock:
                    if self.closed or self._paused or self._current is not space:
                        return
                    if len(space.procs) >= self.want:
                        return
                    proc = spawner.call(lambda: self._spawn_warm(space))
                    space.procs.append(proc)
                    self._pending[proc.popen.pid] = proc
                self._write_state()
        except Exception as exc:  # noqa: BLE001 - a fill runs in the background: say why, do not raise
            self.note = f"no warm pool: filling failed ({type(exc).__name__}: {exc})"
        finally:
            with self._lock:
                self._filling = False
                self._lock.notify_all()

    def pause(self) -> None:
        """Spawn nothing more until the matching ``resume()``: a cluster is starting and
        needs the cores. Pauses nest (two clusters starting at once)."""
        with self._lock:
            self._paused += 1

    def resume(self) -> None:
        """Undo one ``pause()``; the fill goes on once no pause is left."""
        with self._lock:
            self._paused = max(0, self._paused - 1)
        self.fill()

    def _env(self) -> dict[str, str]:
        # Spawned from lifeline.Spawner's thread, which lives as long as this process.
        env = task_environment(self.id, self.dir, extra=self.extra_env)
        return with_lifeline(env, from_long_lived_thread=True)

    def _start_anchor(self) -> WarmNamespace | None:
        env = self._env()
        try:
            anchor = NamespaceAnchor.start(env, mark=self.id)
        except ClusterStartError as exc:
            self.note = f"no warm pool: {exc}"
            return None
        return WarmNamespace(anchor, env)

    def _spawn_warm(self, space: WarmNamespace) -> WarmProcess:
        config = TaskConfig(
            task="pool:0",
            gen=0,
            mode="warm",
            control=self._socket_path,
            authkey=self._authkey.hex(),
            launch={"netns_pid": space.anchor.pid},
        )
        return WarmProcess(spawn_task(config, space.env, None))

    def _accept_loop(self) -> None:
        control.serve(self._listener, lambda: self.closed, self._greet, "dtfkit-pool-conn")

    def _greet(self, conn) -> None:
        message = control.first_message(conn, self._authkey, Warm)
        if message is None:
            return
        pid, port = message.pid, message.port  # sent once TensorFlow is imported and a port is reserved
        with self._lock:
            proc = self._pending.pop(pid, None)
            if proc is None or self.closed:
                conn.close()
                return
            proc.conn, proc.port = conn, port
            self._lock.notify_all()

    # ------------------------------------------------------------------- using
    def warm_env(self) -> dict[str, str] | None:
        """The environment the current warm processes started with (None: nothing warm)."""
        with self._lock:
            space = self._current
            return dict(space.env) if space is not None and space.warm() else None

    def current_env(self) -> dict[str, str] | None:
        """The environment of the current namespace's processes, warm or still importing
        TensorFlow (None: there is no live process to take)."""
        with self._lock:
            space = self._current
            return dict(space.env) if space is not None and _live(space) else None

    def warm_count(self) -> int:
        """How many processes are warm (TensorFlow imported, waiting) now."""
        with self._lock:
            return len(self._current.warm()) if self._current is not None else 0

    def wait_warm(self, n: int | None = None, timeout: float = 120.0) -> bool:
        """Wait (bounded) until ``n`` (default: ``size``) processes are warm."""
        n = self.size if n is None else min(n, self.size)
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                if self._current is not None and len(self._current.warm()) >= n:
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or self.closed or (self._current is None and not self._filling):
                    return False
                self._lock.wait(min(left, 0.5))

    def take(self, n: int | None = None) -> WarmNamespace | None:
        """Hand the current namespace over to a cluster of ``n`` tasks (None if it has no live process).

        The next namespace is filled with ``n`` processes (at most ``size``): a
        notebook tends to start clusters of one shape, and a spare warm process
        cannot serve in another cluster's namespace.

        The warm processes come first, then those still importing TensorFlow (up to
        ``n`` in all): they are further along than a process the cluster could
        start, so the cluster waits for them (``wait_connected``) rather than start
        cold ones beside them. The rest is ended, and the fill stops: the cluster
        starts its missing tasks itself, in the same namespace. A fresh namespace is
        filled in the background once the cluster serves (``fill()``).
        """
        if n is not None:
            self.expect(n)
        with self._lock:
            space = self._current
            if self.closed or space is None or not _live(space) or not space.anchor.alive:
                return None
            self._current = None
            warm = space.warm()
            importing = [p for p in space.procs if p not in warm and p.popen.poll() is None]
            keep = warm + importing[: max(0, (n or len(importing) + len(warm)) - len(warm))]
            drop = [p for p in space.procs if p not in keep]
            for p in drop:
                self._pending.pop(p.popen.pid, None)
            space.procs = keep
        for p in drop:
            end_warm(p)
        self._write_state()
        return space

    def wait_connected(self, proc: WarmProcess, timeout: float = WARM_WAIT_S) -> bool:
        """Wait (bounded) until ``proc``, handed out by ``take()`` while still importing
        TensorFlow, is warm. False: it died, the pool closed, or ``timeout`` passed."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while proc.conn is None:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed or proc.popen.poll() is not None:
                    self._pending.pop(proc.popen.pid, None)
                    return False
                self._lock.wait(min(left, 0.5))
            return True

    def forget(self, proc: WarmProcess) -> None:
        """Stop waiting for ``proc`` to connect (its taker ended it)."""
        with self._lock:
            self._pending.pop(proc.popen.pid, None)

    def expect(self, n: int, env: dict[str, str] | None = None) -> None:
        """Warm ``n`` processes (at most ``size``) from the next fill on: the size of the
        clusters being started (a spare warm process cannot serve another cluster).
        ``env``: the import-time variables those clusters set (see ``import_env``)."""
        with self._lock:
            self.want = max(1, min(n, self.size))
            if env is not None:
                self.extra_env = dict(env)

    # --------------------------------------------------------------- lifecycle
    def pids(self) -> list[int]:
        """Pids of the pool's own processes now (the anchor first)."""
        with self._lock:
            space = self._current
            if space is None:
                return []
            return [space.anchor.pid, *(p.popen.pid for p in space.procs)]

    def _write_state(self) -> None:
        with self._lock:
            if self.closed:
                return
            space = self._current
            idents = [] if space is None or not space.anchor.alive else [space.anchor.identity()]
            if space is not None:
                idents += [state.process_identity(p.popen.pid) for p in space.procs if p.popen.poll() is None]
        state.write_state(self.dir, self.id, idents, f"warm pool of {self.size}")

    def close(self) -> None:
        """End every warm process and the pool's namespace. Safe to call more than once."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            space, self._current = self._current, None
            self._pending.clear()
            self._lock.notify_all()
        if space is not None:
            _end(space)
        control.stop_listening(self._listener, self._socket_path)
        state.remove_state(self.dir)
        _OPEN.discard(self)

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        what = "closed" if self.closed else f"{self.warm_count()}/{self.size} warm"
        return f"TaskPool {self.id}: {what}" + (f"; {self.note}" if self.note else "")


def end_warm(proc: WarmProcess) -> None:
    """End a warm process that no cluster will use."""
    kill_group(proc.popen)
    proc.popen.stdout.close()
    if proc.conn is not None:
        proc.conn.close()


def _live(space: WarmNamespace) -> bool:
    return any(p.popen.poll() is None for p in space.procs)


def import_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of a cluster's task ``env`` that TensorFlow reads at import and that
    differ from what a task gets by default: what a pool must start its processes with
    for that cluster to adopt them (PYTHONPATH aside: ``env_changes`` handles it).

    Example::

        >>> import_env({**task_environment("x", "/tmp/x"), "TF_CPP_MIN_LOG_LEVEL": "0"})
        {'TF_CPP_MIN_LOG_LEVEL': '0'}
    """
    base = task_environment("pool", "/nonexistent/pool")
    keys = IMPORT_TIME_ENV - {"PYTHONPATH"}
    return {k: env[k] for k in sorted(keys) if k in env and env[k] != base.get(k)}


def _end(space: WarmNamespace) -> None:
    for p in space.procs:
        end_warm(p)
    space.anchor.close()


LINKS_COLD = "link= gives every task a network namespace of its own; warm processes share the pool's"


class PoolLauncher(LocalLauncher):
    """A ``LocalLauncher`` that first adopts the warm namespace of a ``TaskPool``.

    The first ``start()`` pauses the pool's fill until the cluster serves, then takes
    the pool's whole namespace (anchor and processes) when this cluster of ``tasks``
    tasks can use it, else starts cold as ``LocalLauncher`` does and says why in
    ``describe().start``. Then it hands out the warm processes first; the tasks the
    pool cannot cover start cold next, and then the tasks wait for the processes still
    importing TensorFlow (each learns its task in an ``Adopt`` message and then reports
    its port as a cold task would). ``started()`` ends the processes left over and lets
    the pool fill a fresh namespace.

    Example::

        >>> launcher = PoolLauncher(TaskPool(size=3), tasks=3)              # doctest: +SKIP
        >>> ClusterRuntime(layout, launcher=launcher).start()                # doctest: +SKIP
        >>> launcher.describe().start                                        # doctest: +SKIP
        PoolStart(cold='', pool='1234-abcd', adopted=3, waited=0, lost=0)
    """

    def __init__(self, pool: TaskPool, network: str = "auto", link=None, *, tasks: int, delay=None):
        super().__init__(network, link, delay=delay)
        self.pool = pool
        self.tasks = tasks  # how many tasks the cluster's start starts
        self._warm: list[WarmProcess] = []
        self._changes: dict[str, str | None] = {}  # what adopted tasks must set (None: unset)
        self._to_start = 0  # tasks of the first start not started yet
        self._adopted = self._waited = self._lost = 0
        self._paused = False
        self._chosen = False  # the first start decided between warm and cold
        self._facts = PoolStart(pool=pool.id)

    def _start_facts(self) -> PoolStart:
        return self._facts

    def start(self, config: TaskConfig) -> LocalProcess:
        if not self._chosen:
            self._chosen = True
            self._take_or_start_cold(config)
        if not self._warm or config.port is not None or config.mode == "client":
            return super().start(config)
        left, self._to_start = self._to_start, self._to_start - 1
        warm = self._warm[0]
        if warm.conn is None and left > len(self._warm):
            return super().start(config)  # a task no pool process covers: start it now
        self._warm.pop(0)
        if warm.conn is None:
            if not self.pool.wait_connected(warm):
                self._lost += 1
                end_warm(warm)
                return super().start(config)
            self._waited += 1
        self._adopted += 1
        adopt = dataclasses.replace(
            config,
            env={},
            launch={
                **config.launch,
                "env": {**self._changes, state.CLUSTER_ENV: config.env[state.CLUSTER_ENV]},
            },
        )
        handle = LocalProcess(warm.popen, mark=self.pool.id, connection=warm.conn)
        handle.connection.send(Adopt(adopt))
        return handle

    def _take_or_start_cold(self, config: TaskConfig) -> None:
        # No spawn from here until started(): what the pool has now is all it will have,
        # and tasks this cluster starts cold get the cores to themselves.
        self.pool.pause()
        self._paused = True
        env, cwd = config.env, config.cwd or os.getcwd()
        why = self._why_cold(self.tasks, env, cwd, gpus="CUDA_VISIBLE_DEVICES" in env)
        _remember_first(self.tasks, env, cwd, why)
        space = None if why else self.pool.take(self.tasks)
        if space is None:
            self._facts = PoolStart(cold=why or EMPTY)
            return
        self.use_anchor(space.anchor)
        self._warm = sorted(space.procs, key=lambda p: p.conn is None)  # warm ones first
        self._to_start = self.tasks
        self._facts = PoolStart(pool=self.pool.id, adopted=min(len(self._warm), self.tasks))

    def _why_cold(self, tasks: int, env: dict[str, str], cwd: str, gpus: bool) -> str:
        self.pool.expect(tasks, import_env(env))
        warm_env = self.pool.current_env()
        if self.network == "host":
            return "network='host' (the pool is for isolated clusters)"
        if self.links is not None:
            return LINKS_COLD
        if warm_env is None:
            return EMPTY
        self._changes = env_changes(warm_env, env, cwd)
        late = sorted(set(self._changes) & IMPORT_TIME_ENV)
        if late:
            return f"{', '.join(late)} differs from the pool's, and TensorFlow reads it at import"
        if gpus:
            return "GPUs are visible (each task needs its own CUDA_VISIBLE_DEVICES before import)"
        return ""

    def started(self) -> None:
        for warm in self._warm:  # more warm processes than tasks: they cannot serve elsewhere
            self.pool.forget(warm)
            end_warm(warm)
        self._warm = []
        if self._adopted or self._lost:
            self._facts = PoolStart(
                pool=self.pool.id, adopted=self._adopted, waited=self._waited, lost=self._lost
            )
        self._adopted = self._waited = self._lost = 0
        if self._paused:
            self._paused = False
            self.pool.resume()
        else:
            self.pool.fill()


EMPTY = "the warm pool was empty (it fills in the background)"


def _remember_first(tasks: int, env: dict[str, str], cwd: str, why: str) -> None:
    """Remember what this kernel's first cluster was, so that ``prewarm`` in the next kernel of
    this notebook warms that (nothing when the pool could not serve it anyway)."""
    usable = not why or why == EMPTY or why.endswith("TensorFlow reads it at import")
    first_clusters.record(tasks, import_env(env) if usable else None, cwd, "" if usable else why)


def env_changes(old: dict[str, str], new: dict[str, str], cwd: str) -> dict[str, str | None]:
    """What turns environment ``old`` into ``new`` (None: remove), ignoring per-process keys.

    PYTHONPATH counts without the cluster's working directory, which an adopted task
    puts on its sys.path itself.
    """
    skip = {state.CLUSTER_ENV, lifeline.PDEATHSIG_ENV, lifeline.OWNER_ENV, CONFIG_ENV, "PYTHONPATH"}
    out: dict[str, str | None] = {k: v for k, v in new.items() if k not in skip and old.get(k) != v}
    out.update({k: None for k in old if k not in skip and k not in new})
    paths_old = [p for p in old.get("PYTHONPATH", "").split(os.pathsep) if p and p != cwd]
    paths_new = [p for p in new.get("PYTHONPATH", "").split(os.pathsep) if p and p != cwd]
    if paths_old != paths_new:
        out["PYTHONPATH"] = new.get("PYTHONPATH", "")
    return out


def _affordable(size: int) -> int:
    """``size``, lowered so that warm processes take at most half the available memory."""
    try:
        import psutil

        available = psutil.virtual_memory().available
    except Exception:  # noqa: BLE001 - no psutil answer: trust the caller
        return size
    return max(1, min(size, int(available // 2 // WARM_RSS_BYTES)))


_OPEN: set[TaskPool] = set()
_DEFAULT: TaskPool | None = None
_DEFAULT_LOCK = threading.Lock()


@atexit.register
def _close_all_at_exit() -> None:
    for pool in list(_OPEN):
        pool.close()


# Whether we run in a kernel and whether the pool is on by default are notebook facts
# (dtfkit.engine.platform.notebook); these names stay for callers of the pool's API.
in_kernel = notebook.in_kernel
enabled_by_default = notebook.pool_on_by_default


def default_pool(create: bool = True) -> TaskPool | None:
    """The process-wide pool used by ``LocalCluster(pool=True)`` (created on first use)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is not None and _DEFAULT.closed:
            _DEFAULT = None
        if _DEFAULT is None and create:
            _DEFAULT = TaskPool(start=False)
        return _DEFAULT
