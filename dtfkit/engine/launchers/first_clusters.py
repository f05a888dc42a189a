"""What each notebook's first cluster was, remembered across kernels (for ``dtfkit.engine.launchers.prewarm``).

The next kernel of a notebook warms what its first cluster needed the last time: how many
tasks, and the variables TensorFlow reads at import that it set with ``env=``. A notebook whose
first cluster the pool could not serve (``link=``, ``pool=False``), or that ran no cluster at
all, is remembered with ``tasks`` None and the reason. Kept per notebook in a small JSON file
(``memory_path()``); only in a notebook kernel (``dtfkit.engine.platform.notebook.in_kernel()``).

A notebook is named by ``JPY_SESSION_NAME`` (jupyter_server sets it to the notebook's
path in the kernels it starts), else by the kernel's working folder.

The pool (``dtfkit.engine.launchers.pool``) and the launcher choice (``dtfkit.engine.launchers.choose``, through
``prewarm.first_cluster``) tell it about the first cluster; ``prewarm`` reads it. It imports neither.

Example (in a notebook)::

    >>> from dtfkit.engine.launchers import first_clusters
    >>> first_clusters.record(3, {}, "/home/me/notebooks")               # doctest: +SKIP
    >>> first_clusters.remembered()                                      # doctest: +SKIP
    {'cwd': '/home/me/notebooks', 'env': {}, 'tasks': 3, 'why': ''}
"""

from __future__ import annotations

import json
import os
import threading

from dtfkit.engine.platform import notebook

SESSION_ENV = "JPY_SESSION_NAME"
MEMORY_FILE = "first-clusters.json"

_lock = threading.Lock()
_state: dict = {"first_seen": False, "problem": ""}


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


def remembered(notebook_name: str | None = None) -> dict | None:
    """What was remembered of ``notebook_name``'s first cluster (None: never seen).

    ``{"tasks": 3, "env": {...}, "cwd": "...", "why": ""}``; ``tasks`` is None when the
    pool could not serve it or no cluster ran (``why`` says which). ``cwd`` is kept for
    the record only: an adopted task moves into its cluster's folder itself.
    """
    return _read().get(notebook_name or notebook_id())


def record(tasks: int, env: dict[str, str] | None, cwd: str, why: str = "") -> None:
    """Remember this kernel's first cluster for its notebook (later clusters: no-op).

    ``env``: the import-time variables it set (None: the pool could not serve it, ``why``).
    Outside a kernel nothing is remembered.

    Example::

        >>> record(3, {}, "/home/me/notebooks")                          # doctest: +SKIP
    """
    with _lock:
        if _state["first_seen"]:
            return
        _state["first_seen"] = True
    if not notebook.in_kernel():
        return
    if env is None:
        entry = {"tasks": None, "why": f"its first cluster could not use the pool ({why or 'pool=False'})"}
    else:
        entry = {"tasks": int(tasks), "env": dict(env), "cwd": cwd, "why": ""}
    _write(notebook_id(), entry)


def remember_no_cluster() -> None:
    """At the kernel's exit: a notebook seen for the first time that started no cluster is
    remembered as such (one that ran a cluster before keeps it; a learner may just have been
    reading). Never raises."""
    try:
        if not _state["first_seen"] and remembered() is None:
            _write(notebook_id(), {"tasks": None, "why": "it started no cluster"})
    except Exception:  # noqa: BLE001 - at exit: nothing to tell anyone
        pass


def problem() -> str:
    """Why the memory could not be written ("" when it could)."""
    return _state["problem"]


def _read() -> dict:
    try:
        with open(memory_path(), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(notebook_name: str, entry: dict) -> None:
    path = memory_path()
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        data = _read()
        data[notebook_name] = entry
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        _state["problem"] = f"could not remember the first cluster in {path}: {exc}"
