"""Where a cold start's time goes: each task's phases, sent with its Ready and read from its view.

On ``FakeLauncher`` (the real task program and protocol, no TensorFlow): fast tier. The phases are
what ``python -m benchmarks --only ready`` prints per task.
"""

from __future__ import annotations

import time

import dtfkit
from dtfkit.engine.launchers.fake import FakeLauncher

# The steps of a cold task without TensorFlow, in the order the task program takes them.
FAKE_PHASES = [
    "spawn",
    "dtfkit imports",
    "connected",
    "port reserved",
    "ClusterSpec received",
    "ready sent",
    "owner saw ready",
]


def test_each_task_reports_its_phases_in_order_and_they_fit_in_the_start():
    start = time.monotonic()
    with dtfkit.LocalCluster(ps=1, workers=2, launcher=FakeLauncher(), progress=False, name=None) as cluster:
        elapsed = time.monotonic() - start
        for task in cluster.tasks:
            phases = cluster._rt.task_view(task).start_phases  # noqa: SLF001
            assert [name for name, _, _ in phases] == FAKE_PHASES, (task, phases)
            assert all(seconds >= 0 and cpu >= 0 for _, seconds, cpu in phases), (task, phases)
            # Each phase is measured from the one before, from the owner's spawn to the owner seeing Ready.
            assert sum(seconds for _, seconds, _ in phases) <= elapsed, (task, phases, elapsed)
            # The task's CPU in its steps: the interpreter's start costs some; the owner's step costs it none.
            assert dict((n, c) for n, _, c in phases)["spawn"] > 0 and phases[-1][2] == 0, phases


def test_a_restarted_task_reports_the_phases_of_its_new_start():
    with dtfkit.LocalCluster(workers=2, launcher=FakeLauncher(), progress=False, name=None) as cluster:
        before = cluster._rt.task_view("worker:1")  # noqa: SLF001
        cluster.restart("worker:1")
        after = cluster._rt.task_view("worker:1")  # noqa: SLF001
        assert after.gen != before.gen
        assert [name for name, _, _ in after.start_phases] == FAKE_PHASES
        assert after.start_phases != before.start_phases
