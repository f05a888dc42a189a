"""How a cluster shows itself in a notebook: its repr (text) and its HTML box, from frozen facts.

Runs in the kernel. ``LocalCluster`` (and ``RayCluster``) gather a ``ClusterFacts`` and hand it here;
nothing here reads or changes a cluster.

Example::

    >>> from dtfkit.engine.launchers.contract import LauncherDescription
    >>> network_words(LauncherDescription(network="host"))
    'host network (opted out): servers reachable from other machines'
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from dtfkit.engine.launchers.contract import ForkStart, LauncherDescription
from dtfkit.engine.owner.process import ClusterView
from dtfkit.htmltable import html_table
from dtfkit.i18n import N_, _


@dataclass(frozen=True)
class ClusterFacts:
    """Everything a cluster's display shows, taken at one moment."""

    kind: str  # "LocalCluster", "RayCluster"
    id: str
    closed: bool
    described: LauncherDescription
    network_note: str  # the first line's network words ("closed" once closed)
    start_note: str  # how the tasks started; empty when there is nothing to say
    snapshot: ClusterView
    dropped_note: str
    log_dir: str


def text(facts: ClusterFacts) -> str:
    """The repr: a heading line, the start note, one line per task, lost log lines if any."""
    lines = [f"{facts.kind} {facts.id}: {counts(facts.snapshot)}; {facts.network_note}"]
    if facts.start_note:
        lines.append("  " + _("start: {note}").format(note=facts.start_note))
    names = columns(facts.described)
    for row in rows(facts):
        cells = dict(zip(names, row, strict=True))
        lines.append(
            f"  {cells['task']:<12} {cells['address']:<18} "
            + (f"{_('node')} {cells['node']:<8} " if "node" in cells else "")
            + f"{_('pid')} {cells['pid']:<8} {cells['state']}"
            + (f"  {_('link')} {cells['link']}" if "link" in cells else "")
        )
    if facts.dropped_note:
        lines.append("  " + _("logs: {note}").format(note=facts.dropped_note))
    return "\n".join(lines)


def html_box(facts: ClusterFacts) -> str:
    """The HTML box: heading, network (red when the servers are reachable from outside), the table."""
    warn = not facts.described.isolated and not facts.closed
    style = "color:#b00;font-weight:bold" if warn else "color:#060"
    start_line = (
        f"<br><span>{html.escape(_('start: {note}').format(note=facts.start_note))}</span>"
        if facts.start_note
        else ""
    )
    dropped = (
        f"<br><span style='color:#b60'>{html.escape(facts.dropped_note)}</span>" if facts.dropped_note else ""
    )
    return (
        f"<div><b>dtfkit.{facts.kind}</b> <code>{html.escape(facts.id)}</code> "
        f"— {html.escape(counts(facts.snapshot))}<br>"
        f"<span style='{style}'>{html.escape(_('network: {note}').format(note=facts.network_note))}</span>{start_line}"
        f"{html_table([_(COLUMN_TITLES[c]) for c in columns(facts.described)], rows(facts))}"
        f"<small>{html.escape(_('logs:'))} <code>{html.escape(facts.log_dir)}</code>{dropped}</small></div>"
    )


# The table's words, shown in the reader's language; the data (``cluster.status()``) stays English.
COLUMN_TITLES = {
    "task": N_("task"),
    "role": N_("role"),
    "address": N_("address"),
    "node": N_("node"),
    "pid": N_("pid"),
    "state": N_("state"),
    "link": N_("link"),
}
STATES = {
    "starting": N_("starting"),
    "running": N_("running"),
    "busy": N_("busy"),
    "killed": N_("killed"),
    "missing": N_("missing"),
    "it ran a call before": N_("it ran a call before"),
}


def shown_state(status: str) -> str:
    """A task's state as the table shows it: ``"exited (17)"`` → ``"已退出 (17)"`` in Chinese.

    Example::

        >>> shown_state("running")
        'running'
    """
    if status.startswith("exited ("):
        return _("exited ({code})").format(code=status[len("exited (") : -1])
    return _(STATES[status]) if status in STATES else status


def columns(described: LauncherDescription) -> tuple[str, ...]:
    node = ("node",) if described.nodes is not None else ()
    link = ("link",) if described.links is not None else ()
    return ("task", "role", "address", *node, "pid", "state", *link)


def rows(facts: ClusterFacts) -> list[tuple[str, ...]]:
    """One row per task: name, role, address, (node,) pid, state (and link, with ``link=``)."""
    described, now = facts.described, facts.snapshot
    found = []
    for task in now.layout.tasks:
        proc = now.tasks.get(task)
        address = now.addresses.get(task, "-") if task.serves else _("(no server)")
        # The node (its id's first 8 hex digits) when the tasks run on several machines (Ray).
        node = () if described.nodes is None else ((described.nodes.get(task.name) or "")[:8] or "-",)
        pid, state = (str(proc.pid), shown_state(proc.status)) if proc else ("-", "-")
        link = () if described.links is None else (link_words(described, task.name),)
        found.append((task.name, task.job, address, *node, pid, state, *link))
    return found


def counts(snapshot: ClusterView) -> str:
    """``"1 ps, 2 worker"``."""
    return ", ".join(f"{n} {job}" for job, n in snapshot.layout.counts().items())


def network_words(described: LauncherDescription) -> str:
    """``LauncherDescription``'s network as the cluster's repr says it."""
    network = described.network
    if network == "namespace":
        return _("isolated network namespace {namespace}").format(namespace=described.namespace)
    if network == "links":
        return _(
            "isolated, emulated links: each task its own network namespace, bridged in {namespace}"
        ).format(namespace=described.namespace)
    if network == "host":
        return _("host network (opted out): servers reachable from other machines")
    if network == "fallback":
        return _("NOT isolated: {why}; servers reachable from other machines").format(why=described.why)
    if network == "fake":
        return _("fake tasks (no TensorFlow): host network, no servers")
    return ""


def start_words(start: ForkStart) -> str:
    """How a local cluster's task processes started: forked from the task zygote, or fresh
    interpreters (each importing TensorFlow) and why.

    Example::

        >>> start_words(ForkStart(forked=3, started=3))
        'forked 3 of 3 task process(es) from the task zygote (TensorFlow imported once)'
    """
    if not start.started:
        return ""
    words = _(
        "forked {forked} of {started} task process(es) from the task zygote (TensorFlow imported once)"
    ).format(forked=start.forked, started=start.started)
    if start.why:
        words += _("; the others are fresh interpreters: {why}").format(why=start.why)
    return words


def link_words(described: LauncherDescription, task: str) -> str:
    """``"100mbit"``, ``"no limit"``, ``"100mbit, delay 20ms"``: ``task``'s link, as the cluster
    table shows it."""
    from dtfkit.engine.launchers.links import link_delay, link_rate
    from dtfkit.engine.platform import netns

    assert described.links is not None  # rows() asks only for a cluster with links
    rate = link_rate(described.links, task)
    words = netns.format_rate(rate) if rate else _("no limit")
    if described.delays is not None:
        words += f", delay {netns.format_delay(link_delay(described.delays, task))}"
    return words
