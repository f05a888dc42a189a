"""``FakeLauncher``: tasks as plain Python processes, without TensorFlow, for fast tests.

Each task is a real process speaking the real protocol (``dtfkit.engine.task.task_main``
with ``TaskConfig.tensorflow=False``): it connects back, reserves a port, runs calls,
answers interrupts and stack dumps, prints, dies. It only skips importing TensorFlow
and starting a server, so a cluster is up in a fraction of a second and the call
policy (interrupt, grace, timeout, restart, a task dying mid-call) can be tested in
well under a second per test. Functions that need ``dtfkit.this_task().target`` or
TensorFlow do not run here: use ``LocalLauncher`` for those.

Example::

    >>> with dtfkit.LocalCluster(workers=2, launcher=FakeLauncher()) as cluster:   # doctest: +SKIP
    ...     cluster.run(lambda: dtfkit.this_task().name)
    {'worker:0': 'worker:0', 'worker:1': 'worker:1'}
"""

from __future__ import annotations

import dataclasses

from dtfkit.engine.launchers.contract import Launcher, LauncherDescription, TaskHandle
from dtfkit.engine.launchers.local_process import LocalProcess, spawn_task
from dtfkit.engine.platform.lifeline import with_lifeline_here
from dtfkit.engine.wire.protocol import TaskConfig


class FakeLauncher(Launcher):
    """Local processes on the host network, no TensorFlow imported, no servers started."""

    def start(self, config: TaskConfig) -> TaskHandle:
        config = dataclasses.replace(config, tensorflow=False)
        env = with_lifeline_here(config.env)
        return LocalProcess(spawn_task(config, env, config.cwd))

    def describe(self) -> LauncherDescription:
        return LauncherDescription(network="fake")
