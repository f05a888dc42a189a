"""The one place that chooses where a cluster's tasks start: links or not, or the caller's own
launcher; and the refusals of a combination of options, before anything starts
(a launcher's own refusals, such as links on the host network, fire when the chosen one is built).

Runs in the owner's process. ``LocalCluster`` and ``launch()`` ask here (``RayCluster`` builds its own
``RayLauncher``); the answer is a ``LauncherSpec`` when dtfkit built the launcher (so a closed cluster
can build the same one again), or the caller's own ``Launcher`` as it is.

Example::

    >>> from dtfkit.engine.wire.layout import ClusterLayout
    >>> layout = ClusterLayout.from_counts(workers=2)
    >>> spec = choose_launcher(layout, network="auto")
    >>> sorted(spec.options)
    ['link', 'network']
    >>> choose_launcher(layout, network="auto", link={"worker:7": "10mbit"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dtfkit.errors.DtfkitError: link key 'worker:7' names no task of this cluster: its tasks are worker:0, worker:1. ...
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from dtfkit.engine.launchers.contract import Launcher, LauncherSpec
from dtfkit.engine.wire.layout import ClusterLayout
from dtfkit.errors import DtfkitError
from dtfkit.shown import shown

if TYPE_CHECKING:
    from dtfkit.engine.launchers.links import DelayOption, LinkOption


def choose_launcher(
    layout: ClusterLayout,
    *,
    network: str,
    link: str | dict[str, str] | None = None,
    delay: str | dict[str, str] | None = None,
    start_servers: bool = True,
    launcher: Launcher | LauncherSpec | None = None,
) -> Launcher | LauncherSpec:
    """Where the tasks of ``layout`` start, every option checked against the others and the layout."""
    from dtfkit.engine.launchers.links import DELAY_REFUSED_MODES, plan_delays, plan_links

    for option, given in (("link", link), ("delay", delay)):
        if launcher is not None and given is not None:
            raise DtfkitError(
                f"{option}= is an option of the local launcher: pass "
                f"LocalLauncher({option}=...) as launcher= instead"
            )
    if delay is not None and not start_servers:
        raise DtfkitError(DELAY_REFUSED_MODES["noserve"])
    if launcher is None:
        options: dict[str, Any] = {"network": network, "link": plan_links(link)}
        if delay is not None:
            options["delay"] = plan_delays(delay)
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


def build_local_launcher(network: str, link: LinkOption = None, delay: DelayOption = None) -> Launcher:
    """Local processes, each forked from this process's task zygote where it can serve
    (``dtfkit.engine.launchers.zygotes``), else a fresh interpreter."""
    from dtfkit.engine.launchers.local import LocalLauncher

    return LocalLauncher(network, link, delay=delay)


def _check_link_keys(
    links: Mapping[str, object] | None, delays: Mapping[str, object] | None, layout: ClusterLayout
) -> None:
    """Refuse ``link=``/``delay=`` keys naming no task of ``layout``, before anything starts."""
    from dtfkit.engine.launchers.links import check_plan_tasks

    names = [task.name for task in layout.tasks]
    check_plan_tasks("link", links, names)
    check_plan_tasks("delay", delays, names)
