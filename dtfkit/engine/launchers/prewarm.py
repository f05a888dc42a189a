"""Warm from the first cell: in a notebook kernel, ``import dtfkit`` starts filling the warm pool.

Importing TensorFlow in three task processes takes 5-25 s on two cores. A learner who
imports ``dtfkit`` and then reads for a while should not wait for that at the
chapter's first cluster, so ``import dtfkit`` in a Jupyter kernel starts the process-wide
pool (``dtfkit.engine.launchers.pool.default_pool``) filling in a background thread. The import
itself stays fast and never fails because of it: an error becomes ``note()``.

How many processes: what this notebook's first cluster needed the last time it ran
(tasks, and the variables TensorFlow reads at import it set with ``env=``), remembered
per notebook in a small JSON file (``memory_path()``, ``dtfkit.engine.launchers.first_clusters``); ``DEFAULT_TASKS`` for a notebook
never seen. A notebook whose first cluster the pool could not serve (``link=``,
``pool=False``), or that ran no cluster at all, fills nothing the next time.

The memory of first clusters is ``dtfkit.engine.launchers.first_clusters`` (its names are also here);
whether this is a kernel and the pool is on, ``dtfkit.engine.platform.notebook``. ``prewarm`` uses the
pool (``dtfkit.engine.launchers.pool``); the pool never imports ``prewarm``.

Not in scripts, tests or task processes: only in a kernel, and only when the pool is on
there (``DTFKIT_POOL=0`` turns both off).

Example (in a notebook)::

    >>> import dtfkit
    >>> from dtfkit.engine.launchers import prewarm
    >>> prewarm.wait_warm(timeout=120)                                   # doctest: +SKIP
    True
    >>> prewarm.note()                                                   # doctest: +SKIP
    'filling 3 warm process(es) since import dtfkit (a notebook not seen before)'
"""

from __future__ import annotations

import atexit
import threading
import time

from dtfkit.engine.launchers import first_clusters
from dtfkit.engine.launchers.first_clusters import (
    MEMORY_FILE,
    SESSION_ENV,
    memory_path,
    notebook_id,
    remembered,
)
from dtfkit.engine.platform import notebook

__all__ = [
    "DEFAULT_TASKS",
    "MEMORY_FILE",
    "SESSION_ENV",
    "first_cluster",
    "memory_path",
    "note",
    "notebook_id",
    "plan",
    "pool",
    "remembered",
    "start_on_import",
    "wait_decided",
    "wait_warm",
]

DEFAULT_TASKS = 3

_lock = threading.Lock()
_decided = threading.Event()  # set once the import-time thread has decided (and started a fill or not)
_state: dict = {"note": "", "pool": None, "started": False}

first_cluster = first_clusters.record  # what the pool and the launcher choice (choose.py) tell first_clusters


def plan(entry: dict | None) -> tuple[int, dict[str, str]] | str:
    """How many processes to warm at import, and with which import-time variables, for a
    remembered ``entry``; or a sentence saying why none.

    Example::

        >>> plan(None)
        (3, {})
        >>> plan({"tasks": 4, "env": {"TF_CPP_MIN_LOG_LEVEL": "0"}})
        (4, {'TF_CPP_MIN_LOG_LEVEL': '0'})
        >>> plan({"tasks": None, "why": "it started no cluster"})
        'the last time this notebook ran, it started no cluster'
    """
    if entry is None:
        return DEFAULT_TASKS, {}
    tasks = entry.get("tasks")
    if not isinstance(tasks, int) or tasks < 1:
        return f"the last time this notebook ran, {entry.get('why') or 'its first cluster could not use the pool'}"
    env = entry.get("env") or {}
    return tasks, {str(k): str(v) for k, v in env.items()}


def note() -> str:
    """What the import did about the pool: filling (how many, why that many) or why not."""
    problem = first_clusters.problem()
    return f"{_state['note']}; {problem}" if problem else _state["note"]


def pool():
    """The pool the import started filling (None: it did not)."""
    return _state["pool"]


def wait_decided(timeout: float = 60.0) -> bool:
    """Wait (bounded) until the import has decided whether to fill the pool (``note()`` says).

    Example::

        >>> wait_decided(10) and note()                                  # doctest: +SKIP
        'filling 3 warm process(es) since import dtfkit (a notebook not seen before)'
    """
    return _decided.wait(timeout)


def wait_warm(timeout: float = 180.0) -> bool:
    """Wait (bounded) until the pool the import started has all its processes warm.

    False: no pool was started (see ``note()``), or ``timeout`` passed.
    """
    deadline = time.monotonic() + timeout
    if not _decided.wait(timeout):
        return False
    p = _state["pool"]
    if p is None:
        return False
    return p.wait_warm(p.want, timeout=max(0.0, deadline - time.monotonic()))


def start_on_import() -> None:
    """Called by ``import dtfkit``: in a notebook kernel with the pool on, start filling it
    in a background thread. Returns at once; never raises."""
    try:
        with _lock:
            if _state["started"]:
                return
            _state["started"] = True
        if not notebook.in_kernel() or notebook.in_task():
            _state["note"] = "not in a notebook kernel: nothing warmed at import"
            _decided.set()
            return
        if notebook.pool_flag() is False:
            _state["note"] = "the warm pool is off (DTFKIT_POOL=0)"
            _decided.set()
            return
        threading.Thread(target=_fill_at_import, name="dtfkit-prewarm", daemon=True).start()
    except Exception as exc:  # noqa: BLE001 - never fail `import dtfkit`
        _state["note"] = f"no warm pool at import: {type(exc).__name__}: {exc}"
        _decided.set()


def _fill_at_import() -> None:
    try:
        from dtfkit.engine.launchers import pool as pools

        atexit.register(first_clusters.remember_no_cluster)
        entry = remembered()
        what = plan(entry)
        if isinstance(what, str):
            _state["note"] = f"no warm pool at import: {what}"
            return
        tasks, env = what
        p = pools.default_pool()
        p.expect(tasks, env)
        p.fill()
        _state["pool"] = p
        why = "a notebook not seen before" if entry is None else "this notebook's first cluster"
        _state["note"] = f"filling {p.want} warm process(es) since import dtfkit ({why})"
    except Exception as exc:  # noqa: BLE001 - a background thread: say why, do not raise
        _state["note"] = f"no warm pool at import: {type(exc).__name__}: {exc}"
    finally:
        _decided.set()
