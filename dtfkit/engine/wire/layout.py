"""Cluster layouts: which tasks exist, what they are called, and what each one is told.

A task is named ``"job:index"`` (``"worker:1"``), the way TensorFlow's device
strings name it (``/job:worker/task:1``).

Example::

    >>> layout = ClusterLayout.from_counts(ps=2, workers=2)
    >>> [t.name for t in layout.tasks]
    ['ps:0', 'ps:1', 'worker:0', 'worker:1']
    >>> tf_config({"ps": ["localhost:1"], "worker": ["localhost:2"]}, TaskId("worker", 0))
    '{"cluster": {"ps": ["localhost:1"], "worker": ["localhost:2"]}, "task": {"type": "worker", "index": 0}}'
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from dtfkit.errors import DtfkitError

ROLES = ("chief", "worker", "ps", "evaluator")
# The evaluator watches checkpoints on its own: TensorFlow keeps it out of the
# ClusterSpec and it runs no server.
SERVING_ROLES = ("chief", "worker", "ps")
_ROLE_ORDER = {"chief": 0, "ps": 1, "worker": 2, "evaluator": 3}


@dataclass(frozen=True, order=True)
class TaskId:
    """One task of a cluster: its job (role) and its index within the job."""

    job: str
    index: int

    @property
    def name(self) -> str:
        return f"{self.job}:{self.index}"

    @property
    def device(self) -> str:
        return f"/job:{self.job}/task:{self.index}"

    @property
    def serves(self) -> bool:
        return self.job in SERVING_ROLES

    @classmethod
    def parse(cls, text: str | TaskId, index: int | None = None) -> TaskId:
        """Accept ``"worker:1"``, ``("worker", 1)`` style arguments, or a TaskId."""
        if isinstance(text, TaskId):
            return text
        if index is None:
            if not isinstance(text, str) or ":" not in text:
                raise DtfkitError(
                    f"cannot name a task by {text!r}: use 'job:index' such as 'worker:1', "
                    "or pass the job and the index separately"
                )
            job, _, idx = text.partition(":")
            try:
                index = int(idx)
            except ValueError:
                raise DtfkitError(f"task index in {text!r} is not a whole number") from None
        else:
            job = text
        if job not in ROLES:
            raise DtfkitError(f"unknown role {job!r}: the roles are {', '.join(ROLES)}")
        if isinstance(index, bool) or not isinstance(index, int):
            raise DtfkitError(f"the index of a {job} task must be a whole number, not {index!r}")
        return cls(job, int(index))

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ClusterLayout:
    """The tasks of a cluster, validated."""

    tasks: tuple[TaskId, ...]

    @classmethod
    def from_counts(
        cls, *, ps: int = 0, workers: int = 0, chief: int = 0, evaluator: int = 0
    ) -> ClusterLayout:
        counts = {"ps": ps, "worker": workers, "chief": chief, "evaluator": evaluator}
        for role, n in counts.items():
            if isinstance(n, bool) or not isinstance(n, int):
                raise DtfkitError(f"the number of {role} tasks must be a whole number, not {n!r}")
            if n < 0:
                raise DtfkitError(f"the number of {role} tasks cannot be negative (got {n})")
        if chief > 1:
            raise DtfkitError(f"a cluster has at most one chief (got chief={chief})")
        if evaluator > 1:
            raise DtfkitError(f"a cluster has at most one evaluator (got evaluator={evaluator})")
        if workers + chief == 0:
            raise DtfkitError(
                f"a cluster needs at least one worker or a chief (got workers={workers}, "
                f"chief={chief}); for example LocalCluster(ps=1, workers=2)"
            )
        tasks = [TaskId(role, i) for role, n in counts.items() for i in range(n)]
        tasks.sort(key=lambda t: (_ROLE_ORDER[t.job], t.index))
        return cls(tuple(tasks))

    def counts(self) -> dict[str, int]:
        return dict(Counter(t.job for t in self.tasks))

    def select(self, which: str | TaskId | Iterable[str | TaskId]) -> list[TaskId]:
        """Resolve a selector: ``"workers"`` (chief + workers), ``"all"``, ``"ps"``,
        a role name, a task name, or a list of task names."""
        groups = {
            "workers": [t for t in self.tasks if t.job in ("chief", "worker")],
            "all": list(self.tasks),
        }
        if isinstance(which, str) and which in groups:
            chosen = groups[which]
        elif isinstance(which, str) and which in ROLES:
            chosen = [t for t in self.tasks if t.job == which]
        elif isinstance(which, (str, TaskId)):
            chosen = [TaskId.parse(which)]
        elif isinstance(which, (list, tuple, set, frozenset)):
            chosen = [TaskId.parse(w) for w in which]
        else:
            raise DtfkitError(
                f"cannot select tasks with {which!r}: use 'workers', 'all', a role such as 'ps', "
                "a task such as 'worker:1', or a list of tasks"
            )
        missing = [t.name for t in chosen if t not in self.tasks]
        if missing:
            have = ", ".join(t.name for t in self.tasks)
            raise DtfkitError(f"no task {', '.join(missing)} in this cluster (it has {have})")
        if not chosen:
            raise DtfkitError(f"{which!r} selects no task in this cluster")
        return chosen


def cluster_dict(addresses: dict[TaskId, str]) -> dict[str, list[str]]:
    """The ClusterSpec dictionary (``{"ps": [...], "worker": [...]}``) of serving tasks."""
    jobs: dict[str, list[tuple[int, str]]] = {}
    for task, addr in addresses.items():
        if task.serves:
            jobs.setdefault(task.job, []).append((task.index, addr))
    return {
        job: [a for _, a in sorted(items)]
        for job, items in sorted(jobs.items(), key=lambda kv: _ROLE_ORDER[kv[0]])
    }


def tf_config(cluster: dict[str, list[str]], task: TaskId) -> str:
    """``TF_CONFIG`` as TensorFlow's docs and Kubernetes' TFJob write it."""
    return json.dumps({"cluster": cluster, "task": {"type": task.job, "index": task.index}})


def tutorial_flags(cluster: dict[str, list[str]], task: TaskId) -> list[str]:
    """The command-line flags of the scripts in Ye Hu's tutorial (``--ps_hosts`` ...).

    One ``--<job>_hosts=a,b`` flag per training job (chief, ps, worker first, in that order;
    jobs TensorFlow does not name follow in their own order), then ``--job_name`` and
    ``--task_index``. An ``evaluator`` gets no flag: it trains with nobody. A Kubeflow TFJob
    gets the same flags from ``dtfkit.kube.tfjob_entry.tutorial_flags``, a standalone copy of
    this rule (the entry runs alone in a container; the engine imports nothing from ``kube``):
    ``tests/test_layering.py`` checks that the two agree.

    Example::

        >>> tutorial_flags({"worker": ["w:1"], "ps": ["p:1"]}, TaskId("worker", 0))
        ['--ps_hosts=p:1', '--worker_hosts=w:1', '--job_name=worker', '--task_index=0']
    """
    training = [job for job in cluster if job != "evaluator"]
    # sorted() is stable: jobs TensorFlow does not name keep their order
    jobs = sorted(training, key=lambda job: _ROLE_ORDER.get(job, len(_ROLE_ORDER)))
    flags = [f"--{job}_hosts={','.join(cluster[job])}" for job in jobs]
    return [*flags, f"--job_name={task.job}", f"--task_index={task.index}"]
