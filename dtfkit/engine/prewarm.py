"""Warm from the first cell: in a notebook kernel, ``import dtfkit`` starts filling the warm pool.

Importing TensorFlow in three task processes takes 5-25 s on two cores. A learner who
imports ``dtfkit`` and then reads for a while should not wait for that at the
chapter's first cluster, so ``import dtfkit`` in a Jupyter kernel starts the process-wide
pool (``dtfkit.engine.pool.default_pool``) filling in a background thread. The import
itself stays fast and never fails because of it: an error becomes ``note()``.

How many processes: what this notebook's first cluster needed the last time it ran
(tasks, and the variables TensorFlow reads at import it set with ``env=``), remembered
per notebook in a small JSON file (``memory_path()``); ``DEFAULT_TASKS`` for a notebook
never seen. A notebook whose first cluster the pool could not serve (``link=``,
``pool=False``), or that ran no cluster at all, fills nothing the next time.

A notebook is named by ``JPY_SESSION_NAME`` (jupyter_server sets it to the notebook's
path in the kernels it starts), else by the kernel's working folder.

Not in scripts, tests or task processes: only in a kernel, and only when the pool is on
there (``DTFKIT_POOL=0`` turns both off).

Example (in a notebook)::

    >>> import dtfkit
    >>> from dtfkit.engine import prewarm
    >>> prewarm.wait_warm(timeout=120)                                   # doctest: +SKIP
    True
    >>> prewarm.note()                                                   # doctest: +SKIP
    'filling 3 warm process(es) since import dtfkit (a notebook not seen before)'
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time

DEFAULT_TASKS = 3
SESSION_ENV = "JPY_SESSION_NAME"
MEMORY_FILE = "first-clusters.json"
_OFF = ("0", "false", "no", "off")

_lock = threading.Lock()
_decided = threading.Event()  # set once the import-time thread has decided (and started a fill or not)
_state: dict = {"note": "", "pool": None, "started": False, "first_seen": False}


def notebook_id() -> str:
    """The notebook this kernel runs: ``$JPY_SESSION_NAME``, else the working folder."""
    return os.environ.get(SESSION_ENV) or os.getcwd()


def memory_path() -> str:
    """``$DTFKIT_HOME/first-clusters.json``, else ``~/.cache/dtfkit/first-clusters.json``
    (``$XDG_CACHE_HOME`` when set)."""
    home = os.environ.get("DTFKIT_HOME")
    if home:
        return os.path.join(os.path.abspath(home), MEMORY_FILE)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "dtfkit", MEMORY_FILE)


def remembered(notebook: str | None = None) -> dict | None:
    """What was remembered of ``notebook``'s first cluster (None: never seen).

    ``{"tasks": 3, "env": {...}, "cwd": "...", "why": ""}``; ``tasks`` is None when the
    pool could not serve it or no cluster ran (``why`` says which). ``cwd`` is kept for
    the record only: an adopted task moves into its cluster's folder itself.
    """
    return _read().get(notebook or notebook_id())


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


def first_cluster(tasks: int, env: dict[str, str] | None, cwd: str, why: str = "") -> None:
    """Remember this kernel's first cluster for its notebook (later clusters: no-op).

    ``env``: the import-time variables it set (None: the pool could not serve it, ``why``).
    Outside a kernel nothing is remembered.

    Example::

        >>> first_cluster(3, {}, "/home/me/notebooks")                   # doctest: +SKIP
    """
    with _lock:
        if _state["first_seen"]:
            return
        _state["first_seen"] = True
    if not _in_kernel():
        return
    if env is None:
        entry = {"tasks": None, "why": f"its first cluster could not use the pool ({why or 'pool=False'})"}
    else:
        entry = {"tasks": int(tasks), "env": dict(env), "cwd": cwd, "why": ""}
    _write(notebook_id(), entry)


def note() -> str:
    """What the import did about the pool: filling (how many, why that many) or why not."""
    return _state["note"]


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
        if "ipykernel" not in sys.modules or os.environ.get("DTFKIT_TASK"):
            _state["note"] = "not in a notebook kernel: nothing warmed at import"
            _decided.set()
            return
        if os.environ.get("DTFKIT_POOL", "").strip().lower() in _OFF:
            _state["note"] = "the warm pool is off (DTFKIT_POOL=0)"
            _decided.set()
            return
        threading.Thread(target=_fill_at_import, name="dtfkit-prewarm", daemon=True).start()
    except Exception as exc:  # noqa: BLE001 - never fail `import dtfkit`
        _state["note"] = f"no warm pool at import: {type(exc).__name__}: {exc}"
        _decided.set()


def _fill_at_import() -> None:
    try:
        from dtfkit.engine import pool as pools

        if not (pools.in_kernel() and pools.enabled_by_default()):
            _state["note"] = "not in a notebook kernel with the pool on: nothing warmed at import"
            return
        atexit.register(_remember_no_cluster)
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


def _remember_no_cluster() -> None:
    # The kernel ends without having started a cluster: the first time only (a notebook
    # that ran a cluster before keeps it; a learner may just have been reading).
    try:
        if not _state["first_seen"] and remembered() is None:
            _write(notebook_id(), {"tasks": None, "why": "it started no cluster"})
    except Exception:  # noqa: BLE001 - at exit: nothing to tell anyone
        pass


def _in_kernel() -> bool:
    from dtfkit.engine import pool as pools

    return pools.in_kernel()


def _read() -> dict:
    try:
        with open(memory_path(), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(notebook: str, entry: dict) -> None:
    path = memory_path()
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        data = _read()
        data[notebook] = entry
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        _state["note"] = f"{_state['note']}; could not remember the first cluster in {path}: {exc}"
