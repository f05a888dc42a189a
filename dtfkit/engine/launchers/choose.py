"""The one place that chooses where a cluster's tasks start: warm pool or cold, links or not,
or the caller's own launcher; and the refusals of a combination of options, before anything starts
(a launcher's own refusals, such as links on the host network, fire when the chosen one is built).

Runs in the owner's process. ``LocalCluster`` (and ``RayCluster``, which passes its launcher)
asks here; the answer is a ``LauncherSpec`` when dtfkit built the launcher (so a closed cluster
can build the same one again), or the caller's own ``Launcher`` as it is.

Example::

    >>> from dtfkit.engine.wire.layout import ClusterLayout
    >>> layout = ClusterLayout.from_counts(workers=2)
    >>> spec = choose_launcher(layout, network="auto", pool=False)
    >>> sorted(spec.options)
    ['link', 'network', 'pool', 'tasks']
    >>> choose_launcher(layout, network="auto", pool=False, link={"worker:7": "10mbit"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dtfkit.errors.DtfkitError: link key 'worker:7' names no task of this cluster: its tasks are worker:0, worker:1. ...
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from dtfkit.engine.launchers.contract import Launcher, LauncherSpec
from dtfkit.engine.wire.layout import ClusterLayout
from dtfkit.errors import DtfkitError
from dtfkit.shown import shown


def choose_launcher(
    layout: ClusterLayout,
    *,
    network: str,
    pool: bool | Any | None,
    link: str | dict[str, str] | None = None,
    delay: str | dict[str, str] | None = None,
    start_servers: bool = True,
    launcher: Launcher | LauncherSpec | None = None,
    remember: bool = True,
) -> Launcher | LauncherSpec:
    """Where the tasks of ``layout`` start, every option checked against the others and the layout.

    ``remember=False``: a choice that is not the notebook's cluster (``launch()``'s scripts) leaves the
    memory of the notebook's first cluster (what the next kernel warms) as it is."""
    from dtfkit.engine.launchers.local import DELAY_REFUSED_MODES, plan_delays, plan_links

    for option, given in (("link", link), ("delay", delay)):
        if launcher is not None and given is not None:
            raise DtfkitError(
                f"{option}= is an option of the local launcher: pass "
                f"LocalLauncher({option}=...) as launcher= instead"
            )
    if delay is not None and not start_servers:
        raise DtfkitError(DELAY_REFUSED_MODES["noserve"])
    if launcher is None:
        options = {"network": network, "pool": pool, "link": plan_links(link), "tasks": len(layout.tasks)}
        if delay is not None:
            options["delay"] = plan_delays(delay)
        if not remember:
            options["remember"] = False
        _check_link_keys(options["link"], options.get("delay"), layout)
        return LauncherSpec(build_local_launcher, MappingProxyType(options))
    if isinstance(launcher, LauncherSpec):
        return launcher
    if not isinstance(launcher, Launcher):
        raise DtfkitError(
            f"launcher must be a dtfkit.engine.launchers.contract.Launcher, not {shown(launcher)}"
        )
    # A LocalLauncher of the caller's: its link= and delay= must name tasks of this cluster too.
    _check_link_keys(getattr(launcher, "links", None), getattr(launcher, "delays", None), layout)
    return launcher


def build_local_launcher(
    network: str, pool, link=None, tasks: int = 0, delay=None, remember: bool = True
) -> Launcher:
    """Local processes, adopted from a warm pool when one is used (see ``LocalCluster(pool=)``).

    With ``link=`` or ``delay=`` the tasks start cold (the launcher says why in ``describe().start``)."""
    from dtfkit.engine.launchers import pool as pools
    from dtfkit.engine.launchers import prewarm
    from dtfkit.engine.launchers.local import LocalLauncher

    chosen = (
        pool if remember else None
    )  # what the caller passed: pool=False remembers "no pool" for the next kernel
    if pool is None:
        pool = pools.enabled_by_default()
    links = link is not None or delay is not None
    if links and (pool is True or isinstance(pool, pools.TaskPool)):
        # fails here, before any pool starts
        launcher = LocalLauncher(network, link, delay=delay, cold=pools.LINKS_COLD)
        if remember:  # the next kernel of this notebook warms nothing
            prewarm.first_cluster(0, None, "", "link=" if link is not None else "delay=")
        return launcher
    if pool is True:
        pool = pools.default_pool()
    if pool is False:
        if chosen is False:
            prewarm.first_cluster(0, None, "", "pool=False")
        return LocalLauncher(network, link, delay=delay)
    if isinstance(pool, pools.TaskPool):
        return pools.PoolLauncher(pool, network, link, tasks=tasks, delay=delay)
    raise DtfkitError(
        f"pool must be True, False, None or a dtfkit.engine.launchers.pool.TaskPool, not {shown(pool)}"
    )


def _check_link_keys(links, delays, layout: ClusterLayout) -> None:
    """Refuse ``link=``/``delay=`` keys naming no task of ``layout``, before anything starts."""
    from dtfkit.engine.launchers.local import check_plan_tasks

    names = [task.name for task in layout.tasks]
    check_plan_tasks("link", links, names)
    check_plan_tasks("delay", delays, names)
