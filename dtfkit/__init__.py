"""dtfkit: local multi-process TensorFlow clusters for teaching and experiments.

``import dtfkit`` does not import TensorFlow: TensorFlow runs in the tasks. In a
notebook kernel it starts the task zygote in the background, a process that imports
TensorFlow once and forks every task of the kernel's clusters from there
(``dtfkit.engine.launchers.zygotes``; ``DTFKIT_ZYGOTE=0`` turns it off).

Example::

    import dtfkit

    with dtfkit.LocalCluster(ps=2, workers=2) as cluster:
        cluster.run(lambda: dtfkit.this_task().name)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dtfkit.errors import (
    ClusterStartError,
    DtfkitError,
    TaskExited,
    TaskFailed,
    TaskNotRunning,
    TaskTimeout,
)
from dtfkit.i18n import set_language
from dtfkit.taskapi import TaskContext, report, this_task

__version__ = "0.1.0"

__all__ = [
    "ClusterStartError",
    "DtfkitError",
    "LocalCluster",
    "RayCluster",
    "TaskContext",
    "TaskExited",
    "TaskFailed",
    "TaskNotRunning",
    "TaskTimeout",
    "cleanup",
    "diagnose",
    "launch",
    "report",
    "set_language",
    "this_task",
]

if TYPE_CHECKING:
    from dtfkit.cluster import LocalCluster
    from dtfkit.diagnosis import diagnose
    from dtfkit.engine.platform.state import cleanup
    from dtfkit.launch_script import launch
    from dtfkit.ray.cluster import RayCluster

# Lazy, so that `import dtfkit` inside a task (for report()) stays cheap. Written out rather than through
# lazy_loader (as the subpackages are): the engine's helper programs run as `python -S -m dtfkit.engine...`,
# which imports this package with no site-packages on the path.
_LAZY = {
    "LocalCluster": "dtfkit.cluster",
    "launch": "dtfkit.launch_script",
    "RayCluster": "dtfkit.ray.cluster",  # imports Ray only when used
    "cleanup": "dtfkit.engine.platform.state",
    "diagnose": "dtfkit.diagnosis",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'dtfkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # looked up once
    return value


def _start_zygote_from_import() -> None:
    # In a notebook kernel only, where a learner reads before the first cluster: TensorFlow is
    # imported by then. Returns at once and never raises (see dtfkit.engine.launchers.zygotes).
    try:
        from dtfkit.engine.platform import notebook

        if not notebook.in_kernel() or notebook.in_task():
            return
        from dtfkit.engine.launchers import zygotes

        zygotes.prestart_default()
    except Exception:  # noqa: BLE001 - `import dtfkit` must not fail for the zygote's sake
        pass


_start_zygote_from_import()
