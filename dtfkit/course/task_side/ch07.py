"""Runs inside the tasks: what the checks of chapter 7 run on their clusters.

The check (``dtfkit.course.check.ch07``) sends these functions to ``cluster.run`` with the
learner's answer as an argument; TensorFlow is imported inside them, never at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dtfkit


def with_own_value(answer: Callable[[float], Any], values: dict[str, float]) -> Any:
    """Run in a task: call ``answer`` with this task's value only (the others stay unknown to it).

    Example::

        cluster.run(with_own_value, args=(sum_over_workers, {"worker:0": 17.0, "worker:1": 4.0}))
    """
    return answer(values[dtfkit.this_task().name])
