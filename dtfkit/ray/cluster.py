"""``RayCluster``: the ``LocalCluster`` interface with every task on a node of a Ray cluster.

Each task is a fresh TensorFlow process on its node, started by a small Ray actor
(``dtfkit.ray.actor``) that relays its control messages and output over Ray, so the
notebook never accepts a connection from a node. Everything else (``run``,
``submit``, ``logs``, ``metrics``, ``kill``/``restart``, ``TaskFailed``/``TaskTimeout``)
is what ``LocalCluster`` does too: both build on ``dtfkit.running_cluster.RunningCluster``.

Example::

    import dtfkit

    with dtfkit.RayCluster(ps=1, workers=2) as cluster:       # a simulated 2-node Ray cluster
        cluster.run(lambda: dtfkit.this_task().node)           # {'worker:0': '3f2a9c1e', 'worker:1': '8b0d4e77'}

    cluster = dtfkit.RayCluster(ps=2, workers=4, address="ray://head:10001", resources={"worker": {"GPU": 1}})
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from dtfkit.engine.launchers.contract import LauncherDescription, LauncherSpec
from dtfkit.engine.wire import frames
from dtfkit.engine.wire.layout import ClusterLayout
from dtfkit.i18n import N_, _
from dtfkit.log import note
from dtfkit.ray.launcher import RayLauncher, RayStart, check_resources
from dtfkit.ray.simulated import require_ray
from dtfkit.running_cluster import RunningCluster, cluster_settings

RAY_NETWORK_WARNING = N_(
    "dtfkit: RayCluster: every TensorFlow server of this cluster listens on every network "
    "interface of its node without authentication (TensorFlow offers no way to bind one "
    "address or to require a key), so anything that can reach the Ray cluster's network can "
    "run operations in the tasks: read and write files as the Ray user, read the tasks' "
    "environment. Only the control channel (through Ray) is not exposed this way. Protect the "
    "nodes with a firewall, or a Kubernetes NetworkPolicy that admits only the cluster's own "
    "pods; on a simulated cluster the servers listen on this machine's interfaces."
)
SIMULATED_NOTE = N_(
    "dtfkit: no Ray address given: starting a simulated {nodes}-node Ray cluster on this machine "
    '(10-20 s). For a real one: RayCluster(..., address="ray://<head>:10001") or address="auto".'
)


class RayCluster(RunningCluster):
    """``ps``, ``workers``, ``chief`` and ``evaluator`` tasks, each a process on a Ray node.

    Args:
        ps, workers, chief, evaluator: how many tasks of each role.
        address: ``None`` (default) starts a simulated Ray cluster of ``nodes`` nodes on
            this machine, owned by this cluster and ended with it; ``"auto"`` (the cluster
            this machine belongs to), ``"ray://<head>:10001"`` (Ray Client) or
            ``"<head>:6379"`` connect to a running one. A process connected to Ray already
            uses that connection (an address naming another cluster is refused).
        placement: ``"spread"`` (default: tasks dealt round-robin over the nodes that have
            CPUs, ordered by node id) or ``"pack"`` (fill one node first).
        resources: what each task's actor asks Ray for, per job or task:
            ``{"worker": {"GPU": 1}, "ps": {"CPU": 2}}``. A layout that cannot be placed
            fails before anything starts, naming the task.
        runtime_env: Ray's ``runtime_env`` for the actors; on a real cluster dtfkit itself
            is shipped to the nodes with ``py_modules`` unless this names ``py_modules``.
            TensorFlow must be installed on the nodes.
        nodes: how many nodes a simulated cluster has (``address=None``).
        env, start_servers, setup, show_tf_logs, start_timeout, progress, name,
        max_tasks, echo: as for ``LocalCluster``.

    Example::

        >>> with RayCluster(ps=1, workers=2) as cluster:                    # doctest: +SKIP
        ...     cluster.nodes()
        {'ps:0': '3f2a9c1e', 'worker:0': '8b0d4e77', 'worker:1': '3f2a9c1e'}
    """

    def __init__(
        self,
        ps: int = 0,
        workers: int = 2,
        chief: int = 0,
        evaluator: int = 0,
        *,
        address: str | None = None,
        placement: str = "spread",
        resources: dict[str, dict[str, float]] | None = None,
        runtime_env: dict[str, Any] | None = None,
        nodes: int = 2,
        env: dict[str, str] | None = None,
        start_servers: bool = True,
        setup: Callable[[], Any] | None = None,
        show_tf_logs: bool = False,
        start_timeout: float = 180.0,
        progress: bool = True,
        name: str | None = None,
        max_tasks: int | None = None,
        echo: Callable[[str, str], None] | None = None,
    ):
        layout = ClusterLayout.from_counts(ps=ps, workers=workers, chief=chief, evaluator=evaluator)
        self._ray_options = dict(
            address=address,
            placement=placement,
            resources=check_resources(resources),  # checked once: every build takes it as it is
            runtime_env=runtime_env,
            nodes=nodes,
            tasks=[t.name for t in layout.tasks],
        )
        settings = cluster_settings(  # checked before the launcher is built or anything prints
            start_servers=start_servers,
            gpus="share",  # the driver's GPUs mean nothing on a node: Ray assigns GPUs (resources=)
            env=env,
            setup=setup,
            show_tf_logs=show_tf_logs,
            start_timeout=start_timeout,
            progress=progress,
            max_tasks=max_tasks,
        )
        spec = LauncherSpec(RayLauncher, MappingProxyType(self._ray_options))
        launcher = spec.build()  # checks its arguments before anything prints; connects in its first start
        if address is None and not require_ray().is_initialized():
            note(_(SIMULATED_NOTE).format(nodes=nodes))
        frames.warn(_(RAY_NETWORK_WARNING))  # names the learner's cell as IPython does: Cell In[4]
        # Ray's own launcher: a task starts on its node, as a fresh interpreter.
        self._start(layout, spec, name=name, echo=echo, settings=settings, built=launcher)

    @property
    def launcher(self) -> RayLauncher:
        launcher = self._rt.launcher
        assert isinstance(launcher, RayLauncher)  # built from this cluster's LauncherSpec(RayLauncher, ...)
        return launcher

    @property
    def ray_address(self) -> str:
        """The address of the Ray cluster the tasks run on."""
        return self.launcher.cluster_address() if not self.closed else ""

    def nodes(self) -> dict[str, str]:
        """``{"worker:0": "3f2a9c1e", ...}``: the node each task runs on (the first 8 hex digits
        of its Ray node id, as ``dtfkit.this_task().node`` says inside the task)."""
        return {task: self.launcher.node_of(task) for task in self.tasks}

    @staticmethod
    def _network_note(described: LauncherDescription) -> str:
        return _("Ray cluster network: TF servers reachable by anything on it")

    @staticmethod
    def _start_note_of(described: LauncherDescription) -> str:
        start = described.start
        if not isinstance(start, RayStart):
            return ""
        return _("Ray cluster {address}, {nodes} node(s), placement {placement}").format(
            address=start.address, nodes=start.nodes, placement=start.placement
        )
