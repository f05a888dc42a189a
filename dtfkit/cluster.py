"""``LocalCluster``: a multi-process TensorFlow cluster on this machine, driven from Python.

The notebook's own process never imports TensorFlow: every task is its own OS process
running ``tf.distribute.Server``, forked from a task zygote that imported TensorFlow once
(a fresh interpreter where forking is not safe), and functions are shipped to the tasks
with cloudpickle.

Example::

    import dtfkit

    def where_am_i():
        ctx = dtfkit.this_task()
        return ctx.name, ctx.target

    with dtfkit.LocalCluster(ps=2, workers=2) as cluster:
        cluster                          # a table: tasks, addresses, pids, state
        cluster.run(where_am_i)          # {'worker:0': ('worker:0', 'grpc://...'), ...}
        print(cluster.logs("worker", 1))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dtfkit.engine.launchers.choose import choose_launcher
from dtfkit.engine.launchers.contract import Launcher
from dtfkit.engine.wire.layout import ClusterLayout
from dtfkit.running_cluster import LogText, RunningCluster, cluster_settings

__all__ = ["LocalCluster", "LogText"]


class LocalCluster(RunningCluster):
    """Start ``ps``, ``workers``, ``chief`` and ``evaluator`` tasks, each its own process.

    Returns once every server is serving. Leave the ``with`` block (or call
    ``close()``) to end every process; a cluster started again by the same notebook
    cell replaces the old one.

    Args:
        ps, workers, chief, evaluator: how many tasks of each role.
        network: ``"auto"`` (default: a private network namespace when the OS allows,
            else the host network with a warning), ``"isolated"`` (required), or
            ``"host"`` (reachable from other machines: for multi-host lessons only).
        link: emulated network links, to make bandwidth visible (loopback is
            effectively infinitely fast). ``"100mbit"`` gives every task a network
            namespace and address (``10.77.x.y``) of its own, joined to the others by a
            link of that rate both ways (a token bucket on what it sends and on what it
            receives: a transfer between two tasks runs at the slower one's rate).
            Per job or per task: ``{"ps": "50mbit", "worker": "200mbit"}``,
            ``{"worker:1": "10mbit", "default": "1gbit"}``; a task no key names has no
            limit. A key naming no task or job of this cluster (``"worker:7"`` with two
            workers, ``"evaluator"`` without one, ``"worker:01"``) is refused. Rates as tc writes them (``kbit``, ``mbit``, ``gbit``), 8kbit to 10gbit.
            A restarted task keeps its address and link. ``None`` (default): every task shares one
            namespace over loopback. Refused with ``network="host"`` or where network
            namespaces are unavailable.
        delay: a one-way delay on the links, to make latency visible: ``"20ms"`` holds
            every message between two tasks' TensorFlow servers 20 ms before it arrives
            (a request and its reply: 40 ms), on top of the time ``link`` takes to carry
            it; S bytes at rate r arrive ``delay + S/r`` after they were sent. Per job or
            per task as ``link``: ``{"ps": "50ms", "default": "5ms"}`` (a task no key
            names: 0); between two tasks the larger delay holds. Times as tc writes them
            (``us``, ``ms``, ``s``, no space), 0 to 10 s. Gives every task its own namespace
            like ``link`` (without a rate limit if ``link`` is None). The delay applies to
            the servers' traffic (the addresses in ``cluster_spec``; a relay in front of
            each server holds it, see ``dtfkit.engine.task.relay``), not to sockets of your
            own. A restarted task keeps its delay. Refused where ``link`` is, and with
            ``start_servers=False`` or ``launcher=``.
        gpus: ``"auto"``, ``"share"`` or ``"none"`` (see ``dtfkit.engine.platform.gpu_plan``).
        env: extra environment variables for every task (e.g. ``GRPC_FAIL_FAST``).
        start_servers: False starts the processes (TensorFlow imported, ``TF_CONFIG``
            set) without a server, for strategies that start their own
            (``MultiWorkerMirroredStrategy``).
        setup: a function each task runs after importing TensorFlow and before its
            server starts: the place to configure devices (logical CPUs/GPUs), which
            TensorFlow allows only before it initializes them. If it raises, start
            fails with ``ClusterStartError`` naming the task.
        show_tf_logs: show TensorFlow's C++ start-up messages too.
        start_timeout: seconds every task gets to come up.
        progress: show a progress bar while starting.
        name: a cluster started with the name of an open one replaces it. In a
            notebook the default name is the cell's id.
        max_tasks: the most tasks this cluster may have. ``None`` (default): what the
            machine allows (``dtfkit.engine.owner.runtime.task_limit()``: available memory and CPU
            cores; ``DTFKIT_MAX_TASKS`` overrides it). A larger cluster fails at once,
            before any process starts.
        echo: where the tasks' output goes, ``echo(task, line)``; default: printed in
            the cell that waits (``[worker:0] ...``).
        launcher: where the tasks run (``dtfkit.engine.launchers.contract``); default: local
            processes, each forked from this process's task zygote, which imported TensorFlow
            once (``dtfkit.engine.launchers.zygotes``; ``DTFKIT_ZYGOTE=0``: fresh interpreters).
            ``cluster.start_note`` says how they started.
            ``dtfkit.engine.launchers.fake.FakeLauncher()`` runs plain Python tasks without
            TensorFlow, for fast tests of your own.

    Example::

        >>> with LocalCluster(ps=1, workers=2) as cluster:     # doctest: +SKIP
        ...     cluster.run(lambda: dtfkit.this_task().name)
        {'worker:0': 'worker:0', 'worker:1': 'worker:1'}
    """

    def __init__(
        self,
        ps: int = 0,
        workers: int = 2,
        chief: int = 0,
        evaluator: int = 0,
        *,
        network: str = "auto",
        link: str | dict[str, str] | None = None,
        delay: str | dict[str, str] | None = None,
        gpus: str = "auto",
        env: dict[str, str] | None = None,
        start_servers: bool = True,
        setup: Callable[[], Any] | None = None,
        show_tf_logs: bool = False,
        start_timeout: float = 120.0,
        progress: bool = True,
        name: str | None = None,
        max_tasks: int | None = None,
        echo: Callable[[str, str], None] | None = None,
        launcher: Launcher | None = None,
    ):
        layout = ClusterLayout.from_counts(ps=ps, workers=workers, chief=chief, evaluator=evaluator)
        settings = cluster_settings(
            start_servers=start_servers,
            gpus=gpus,
            env=env,
            setup=setup,
            show_tf_logs=show_tf_logs,
            start_timeout=start_timeout,
            progress=progress,
            max_tasks=max_tasks,
        )
        chosen = choose_launcher(
            layout,
            network=network,
            link=link,
            delay=delay,
            start_servers=start_servers,
            launcher=launcher,
        )
        self._start(layout, chosen, name=name, echo=echo, settings=settings)
