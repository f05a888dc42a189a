"""Owner process: check ``link=`` and ``delay=`` and turn them into plans, ``{key: rate or delay}``.

A key is ``"default"``, a job (``"ps"``) or a task (``"worker:1"``); a task's value is its own,
else its job's, else the default.

Example::

    >>> plan_links({"ps": "50mbit", "default": "1gbit"})
    {'ps': 50000000, 'default': 1000000000}
    >>> link_delay(plan_delays("20ms"), "worker:1")
    0.02
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TypeVar

from dtfkit.engine.platform import netns
from dtfkit.errors import DtfkitError
from dtfkit.shown import shown

# Tasks whose TensorFlow server dtfkit does not start cannot have the relay in front of it.
DELAY_REFUSED_MODES = {
    "noserve": (
        "delay= needs dtfkit to start the TensorFlow servers (a relay holds the server's "
        "port), and start_servers=False lets TensorFlow start them: leave delay out, or "
        "start the servers (start_servers=True)"
    ),
    "script": (
        "delay= is not available for scripts, which start their own TensorFlow servers: "
        "use LocalCluster(link=..., delay=...) and cluster.run() instead"
    ),
}

LINK_JOBS = ("ps", "worker", "chief", "evaluator", "client")
_LINK_KEY_FORM = "'default', a job ('ps', 'worker', 'chief', 'evaluator', 'client') or a task ('worker:1')"

V = TypeVar("V")  # a plan's values: bits per second (int), or seconds (float)


class LinkPlan(dict[str, int]):
    """A checked ``link=`` (``plan_links``): ``{key: bits per second}``; checking it again returns it."""


class DelayPlan(dict[str, float]):
    """A checked ``delay=`` (``plan_delays``): ``{key: seconds}``; checking it again returns it."""


#: What ``link=`` takes: one rate (``"100mbit"``), rates by ``"default"``, job or task, or a checked plan.
LinkOption = str | dict[str, str] | LinkPlan | None
#: What ``delay=`` takes: one delay (``"20ms"``), delays by ``"default"``, job or task, or a checked plan.
DelayOption = str | dict[str, str] | DelayPlan | None


def plan_links(link: LinkOption) -> LinkPlan | None:
    """Check ``link=`` and turn it into ``{key: bits per second}`` (None: no links).

    ``"100mbit"`` is ``{"default": 100000000}``; a dict maps ``"default"``, a job or a
    task (``"worker:1"``) to a rate. ``DtfkitError`` naming the bad key or value.
    """
    if link is None or isinstance(link, LinkPlan):
        return link
    example = "a rate such as '100mbit', or a dict such as {'ps': '50mbit', 'worker': '200mbit'}"
    return LinkPlan(_plan("link", link, netns.parse_rate, example))


def plan_delays(delay: DelayOption) -> DelayPlan | None:
    """Check ``delay=`` and turn it into ``{key: seconds}`` (None: no delay).

    ``"20ms"`` is ``{"default": 0.02}``; a dict maps ``"default"``, a job or a task to a
    one-way delay (a task no key names: 0). ``DtfkitError`` naming the bad key or value.

    Example::

        >>> plan_delays({"ps": "50ms", "default": "1.5s"})
        {'ps': 0.05, 'default': 1.5}
    """
    if delay is None or isinstance(delay, DelayPlan):
        return delay
    example = "a time such as '20ms', or a dict such as {'ps': '50ms', 'worker': '5ms'}"
    return DelayPlan(_plan("delay", delay, netns.parse_delay, example))


def _plan(option: str, given: object, parse: Callable[[object], V], example: str) -> dict[str, V]:
    """``given`` (one value, or a dict by default/job/task; whatever the caller passed) checked with ``parse``."""
    if isinstance(given, str):
        given = {"default": given}
    if not isinstance(given, dict) or not given:
        raise DtfkitError(f"{option} must be {example}, not {shown(given)}")
    plan: dict[str, V] = {}
    for key, value in given.items():
        _check_key(option, key)
        try:
            plan[key] = parse(value)
        except ValueError as exc:
            raise DtfkitError(f"{option}[{shown(key)}]: {exc}") from None
    return plan


# A task index as the cluster writes it: "worker:1", never "worker:01" or "worker:¹".
_INDEX = re.compile(r"0|[1-9][0-9]{0,5}")


def _check_key(option: str, key: object) -> None:
    """Refuse a key that cannot name a task of any cluster, and say how keys are written."""
    job, colon, index = key.partition(":") if isinstance(key, str) else ("", "", "")
    if key == "default" or (job in LINK_JOBS and (not colon or _INDEX.fullmatch(index))):
        return
    hint = ""
    if job in LINK_JOBS and re.fullmatch(r"\s*[0-9]{1,6}\s*", index):
        hint = f" (write '{job}:{int(index)}', as the cluster names its tasks)"
    raise DtfkitError(f"{option} key {shown(key)} names no task{hint}: use {_LINK_KEY_FORM}")


def check_plan_tasks(option: str, plan: Mapping[str, object] | None, tasks: list[str]) -> None:
    """Refuse keys of a checked ``link=``/``delay=`` plan that name no task of ``tasks``.

    A key for a task or job the cluster does not have would be ignored in silence (a
    typo, or a cluster started with fewer tasks than the plan assumed). ``"client"``
    keys stay: clients join later (``cluster.run(..., on="client")``).

    Example::

        >>> check_plan_tasks("delay", {"worker:7": 0.02}, ["ps:0", "worker:0"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        dtfkit.errors.DtfkitError: delay key 'worker:7' names no task of this cluster: its tasks are ps:0, worker:0. ...
    """
    if not plan:
        return
    jobs = {task.partition(":")[0] for task in tasks}
    for key in plan:
        job = key.partition(":")[0]
        if key == "default" or job == "client" or key in tasks or (key == job and job in jobs):
            continue
        listed = ", ".join(repr(job) for job in sorted(jobs))
        names = ", ".join(tasks[:12]) + (f" and {len(tasks) - 12} more" if len(tasks) > 12 else "")
        raise DtfkitError(
            f"{option} key {key!r} names no task of this cluster: its tasks are {names}. "
            f"Next step: use 'default', one of its jobs ({listed}) or one of its tasks "
            f"(such as {tasks[-1]!r}), or start the cluster with the task the key names"
        )


def link_rate(plan: Mapping[str, int], task: str) -> int | None:
    """The rate of ``task`` ("worker:1") in ``plan``: its own, its job's, the default, or None (no limit)."""
    return netns.task_value(plan, task)


def link_delay(plan: Mapping[str, float] | None, task: str) -> float:
    """The one-way delay of ``task``'s link in seconds, as ``link_rate`` finds a rate (0: none)."""
    return (netns.task_value(plan, task) or 0.0) if plan else 0.0
