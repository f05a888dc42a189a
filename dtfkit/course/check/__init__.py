"""Auto-checks for the chapter exercises: ``check.chNN.<exercise>(answer)``.

Each check runs the learner's answer for real (on a small cluster it starts and closes, or
in the kernel for chapters 5 and 6) and returns a :class:`CheckResult` that shows as a green,
red or grey box with feedback naming the task and what to look at. A wrong answer never
raises; ``result.require()`` does (for nbgrader's autograder). An answer that names or calls
dtfkit's own code (a recipe's formula, a check, ``diagnose``) is refused, naming the call
(``_guard``); hidden variants are drawn fresh every run.

Example::

    from dtfkit.course import check

    def session_config(tf, job_name, task_index):
        return tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:{job_name}/task:{task_index}"])

    check.ch02.device_filters(session_config)
"""

from __future__ import annotations

import importlib
from typing import Any

from dtfkit.course.check._core import CheckResult, results, summary

__all__ = ["CheckResult", "results", "summary"]


def __getattr__(name: str) -> Any:
    # Chapter modules load on first use: ch05/ch06 import TensorFlow inside their checks only.
    if name.startswith("ch") and name[2:].isdigit():
        module = importlib.import_module(f"dtfkit.course.check.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'dtfkit.course.check' has no attribute {name!r}")
