"""The spawner the classroom hub uses (runs inside the JupyterHub process, as root).

``LimitedSpawner`` is JupyterHub's ``LocalProcessSpawner`` (each student's server a local process running as
that student's system user) with the two limits ``LocalProcessSpawner`` does not enforce: ``mem_limit`` and a
process cap, through one cgroup per student (:mod:`hubbench.limits`). When the server stops, whatever
the student left running in their group (a kernel, TensorFlow tasks, a runaway fork) is ended too.

In ``jupyterhub_config.py``::

    c.JupyterHub.spawner_class = "hubbench.spawner.LimitedSpawner"
    c.Spawner.mem_limit = "3G"
    c.LimitedSpawner.max_pids = 4096
"""

from __future__ import annotations

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Integer

from hubbench.limits import StudentGroup


class LimitedSpawner(LocalProcessSpawner):
    """``LocalProcessSpawner`` whose servers run inside per-student memory and pids cgroups."""

    max_pids = Integer(
        4096,
        config=True,
        help="Processes and threads one student may have at once; a fork loop stops here. Each TensorFlow "
        "task runs about 100 threads on a 2-core machine (more with more cores), and a student with a lesson "
        "cluster, the task zygote and a check's cluster runs 7 processes: leave room for them.",
    )

    def _group(self) -> StudentGroup:
        return StudentGroup(self.user.name, memory_bytes=self.mem_limit, max_pids=self.max_pids)

    def make_preexec_fn(self, name):
        become_user = super().make_preexec_fn(name)
        group = self._group()

        def preexec() -> None:
            # Joins the groups while still root, before set_user_setuid drops to the student.
            group.add(0)  # writing 0 to cgroup.procs moves the writing process itself
            become_user()

        return preexec

    async def start(self):
        group = self._group()
        if group.kind is None:
            self.log.warning(
                "dtfkit LimitedSpawner: %s; %s runs without limits", group.why_not, self.user.name
            )
        group.create()
        return await super().start()

    async def stop(self, now: bool = False) -> None:
        await super().stop(now=now)
        left = self._group().remove()
        if left:
            self.log.info(
                "dtfkit LimitedSpawner: ended %d processes %s left behind", len(left), self.user.name
            )
