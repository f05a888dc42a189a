"""The environment every task process starts with, wherever it runs.

Example::

    >>> env = task_environment("1234-abcd", "/run/user/1000/dtfkit/1234-abcd")
    >>> env["DTFKIT_CLUSTER"], env["PYTHONUNBUFFERED"]
    ('1234-abcd', '1')
"""

from __future__ import annotations

import os

from dtfkit.engine.platform import lifeline, state

# The folder that holds the dtfkit package (this file is dtfkit/engine/platform/taskenv.py).
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def task_environment(
    owner_id: str,
    folder: str,
    *,
    extra: dict[str, str] | None = None,
    cwd: str | None = None,
    show_tf_logs: bool = False,
) -> dict[str, str]:
    """This process's environment plus what a task needs: ``extra`` (the user's ``env=``) on top,
    dtfkit and ``cwd`` importable whatever ``extra`` says, output unbuffered, the owner's
    id as a marker (``state.CLUSTER_ENV``: what ``dtfkit cleanup`` recognises escaped
    processes by), TensorFlow's C++ start-up chatter off unless asked for."""
    extra = extra or {}
    env = dict(os.environ)
    env.pop(lifeline.PDEATHSIG_ENV, None)
    user_path = extra.get("PYTHONPATH") or env.get("PYTHONPATH")
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, cwd, user_path) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env[state.CLUSTER_ENV] = owner_id
    env[state.BASE_ENV] = os.path.dirname(folder)
    if not show_tf_logs and "TF_CPP_MIN_LOG_LEVEL" not in extra:
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env
