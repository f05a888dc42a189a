"""What one cluster may ask of this machine, checked before anything starts.

``check_task_count`` refuses a cluster of more tasks than the machine runs well
(``task_limit``), ``check_env`` refuses an ``env=`` that would silently become wrong.

Example::

    >>> check_env({"GRPC_FAIL_FAST": 1})
    {'GRPC_FAIL_FAST': '1'}
"""

from __future__ import annotations

import os

from dtfkit.errors import DtfkitError

MAX_TASKS_ENV = "DTFKIT_MAX_TASKS"
# What one idle task costs: a Python interpreter that imported TensorFlow holds about
# 0.6 GB resident, of which about half is shared libraries (measured PSS ~0.3 GB).
TASK_MEMORY_BYTES = 300 * 1024 * 1024
TASKS_PER_CORE = 4
MIN_TASK_LIMIT = 8


def task_limit() -> tuple[int, str]:
    """How many tasks one cluster may have on this machine, and why.

    ``DTFKIT_MAX_TASKS`` if set; else the smaller of what the available memory holds
    (``TASK_MEMORY_BYTES`` each) and ``TASKS_PER_CORE`` per CPU core (at least
    ``MIN_TASK_LIMIT``).
    """
    raw = os.environ.get(MAX_TASKS_ENV)
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise DtfkitError(
                f"{MAX_TASKS_ENV}={raw!r} is not a positive whole number of tasks; unset it or fix it"
            )
        return value, f"{MAX_TASKS_ENV}={value}"
    import psutil

    cores = os.cpu_count() or 1
    by_cores = max(MIN_TASK_LIMIT, TASKS_PER_CORE * cores)
    available = psutil.virtual_memory().available
    by_memory = max(1, int(available // TASK_MEMORY_BYTES))
    if by_memory < by_cores:
        why = (
            f"{available / 2**30:.1f} GB of memory is available and each task "
            f"(a TensorFlow process) needs about {TASK_MEMORY_BYTES / 2**30:.1f} GB"
        )
        return by_memory, why
    return (
        by_cores,
        f"this machine has {cores} CPU core(s), and {TASKS_PER_CORE} tasks per core is the most it runs well",
    )


def check_max_tasks(max_tasks: object) -> None:
    """Refuse a ``max_tasks=`` that is not a positive whole number or None."""
    if max_tasks is not None and (
        isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1
    ):
        raise DtfkitError(f"max_tasks must be a positive whole number or None, not {max_tasks!r}")


def check_task_count(n: int, max_tasks: int | None = None) -> None:
    """Refuse a cluster of ``n`` tasks beyond the machine's limit (``max_tasks`` overrides it)."""
    check_max_tasks(max_tasks)
    if max_tasks is not None:
        return  # if n > max_tasks, the caller's own limit applies
    limit, why = task_limit()
    if n > limit:
        raise DtfkitError(
            f"a cluster of {n} tasks is more than this machine allows ({limit}): {why}. "
            "Every task is its own TensorFlow process, so too many can exhaust a shared "
            "machine. Next step: ask for fewer tasks (a typo in workers=?), or if you are sure, "
            f"raise the limit with max_tasks={n} or the {MAX_TASKS_ENV} environment variable."
        )


def check_env(env: object) -> dict[str, str]:
    """``env=`` as strings; refuse what would silently become a wrong value (None, objects)."""
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise DtfkitError(f"env must be a dict of variable names to strings, not {type(env).__name__}")
    out = {}
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise DtfkitError(f"env: {key!r} is not a valid environment variable name")
        if isinstance(value, bool) or not isinstance(value, (str, int, float, os.PathLike)):
            raise DtfkitError(
                f"env[{key!r}] is {value!r}: environment variables hold strings. Next step: pass a "
                "string (e.g. '1'), or leave the variable out to keep the notebook's value"
            )
        text = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
        if "\0" in text:
            raise DtfkitError(
                f"env[{key!r}] contains a NUL character, which no environment variable can hold"
            )
        out[key] = text
    return out
