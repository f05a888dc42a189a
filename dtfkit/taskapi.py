"""What code running *inside* a task can call: its identity and ``report()``.

Example (in a function sent with ``cluster.run``)::

    def train():
        ctx = dtfkit.this_task()            # job_name, task_index, cluster, target ...
        for step in range(100):
            ...
            dtfkit.report(step=step, loss=loss)
"""

from __future__ import annotations

import json
import numbers
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dtfkit.errors import DtfkitError

NODE_ENV = "DTFKIT_NODE"  # set by the launcher of a task on another node (dtfkit.ray)


@dataclass
class TaskContext:
    """The view of the cluster that Ye Hu's tutorial scripts have, for the task this code runs in."""

    job_name: str
    task_index: int
    cluster: dict[str, list[str]]
    target: str | None = None
    server: Any = field(default=None, repr=False)
    call_id: int = 0  # the same in every task for one cluster.run(...) call

    @property
    def name(self) -> str:
        return f"{self.job_name}:{self.task_index}"

    @property
    def node(self) -> str:
        """The machine this task runs on: the host name, or on a Ray cluster the node's short
        name (the first 8 hex digits of its node id, as the cluster's table shows it)."""
        return os.environ.get(NODE_ENV) or socket.gethostname()

    @property
    def tf_config(self) -> dict:
        return json.loads(os.environ.get("TF_CONFIG", "{}"))

    @property
    def is_chief(self) -> bool:
        """The chief task, or worker 0 when the cluster has no chief (TensorFlow's rule)."""
        if "chief" in self.cluster:
            return self.job_name == "chief"
        return self.job_name == "worker" and self.task_index == 0

    @property
    def num_workers(self) -> int:
        return len(self.cluster.get("worker", ()))

    @property
    def num_ps(self) -> int:
        return len(self.cluster.get("ps", ()))

    def cluster_spec(self) -> Any:
        """A ``tf.train.ClusterSpec`` of this cluster (imports TensorFlow)."""
        import tensorflow as tf

        return tf.train.ClusterSpec(self.cluster)


class _TaskState:
    """Module-level state of a task process, set by the task's bootstrap."""

    def __init__(self) -> None:
        self.context: TaskContext | None = None
        # callable(event) once connected to the owner: the task bootstrap (dtfkit.engine.task.task_main)
        # sets it and wraps the event in its message; this module knows no protocol (no engine import).
        self.send: Callable[[dict[str, Any]], None] | None = None
        self.local_metrics: list[dict[str, Any]] = []
        self.lock = threading.Lock()


STATE = _TaskState()


def this_task() -> TaskContext:
    """The context of the task this code runs in.

    Raises ``DtfkitError`` when called outside a dtfkit task (in the notebook itself).
    """
    if STATE.context is None:
        raise DtfkitError(
            "this_task() only works inside a dtfkit task: call it from a function "
            "run with cluster.run(...), not in the notebook's own process"
        )
    return STATE.context


def _scalar(name: str, value: Any) -> float | int | str:
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "item") and getattr(value, "size", 1) == 1:
        value = value.item()
    if isinstance(value, (bool, numbers.Integral)):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        return value
    raise TypeError(f"report({name}=...) needs a number or a short string, not {type(value).__name__}")


def report(step: int | None = None, **scalars: Any) -> None:
    """Send a timestamped metric event to the notebook (cheap: call it every step).

    Example::

        dtfkit.report(step=global_step, loss=loss_value, local_step=i)

    Outside a task the event is kept in this process (``taskapi.STATE.local_metrics``).
    """
    event: dict[str, Any] = {"time": time.time()}
    if step is not None:
        event["step"] = int(_scalar("step", step))
    for key, value in scalars.items():
        event[key] = _scalar(key, value)
    send = STATE.send
    if send is None:
        with STATE.lock:
            STATE.local_metrics.append(event)
    else:
        send(event)
