"""Runs in the notebook kernel: ``hang_with_collective_timeout`` (runs the case again on fresh processes
when TensorFlow crashes) and the recovery summary.

Never imports TensorFlow: what runs in the tasks is in ``task_side``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

from dtfkit.errors import TaskExited
from dtfkit.recipes.mwms_fault.task_side import (
    _check_tasks,
    _positive_seconds,
    _step_before_the_end,
    _whole,
    train_until_a_peer_fails,
)

if TYPE_CHECKING:
    from dtfkit.running_cluster import RunningCluster

# A task that died of a signal (TaskExited's message): a crash, not a Python error.
_DIED_OF_A_SIGNAL = re.compile(r"exited with code -\d+ while running")


def hang_with_collective_timeout(
    cluster: RunningCluster,
    *,
    fail_at: int = 8,
    steps: int = 20,
    collective_timeout: float = 3.0,
    attempts: int = 3,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """``train_until_a_peer_fails`` with ``failure="hang"`` and a collective timeout, on fresh
    processes of ``cluster`` (``LocalCluster(workers=2, start_servers=False)``): worker:1 hangs
    after ``fail_at`` steps, worker:0's next step raises ``DeadlineExceededError`` after about
    ``collective_timeout`` s. Returns ``{"results": {task: result}, "crashes": [...]}``.

    TensorFlow 2.21 sometimes crashes (SIGSEGV, in one of its C++ threads) while it aborts
    the timed-out collective: seen about once in ten runs beside two busy CPU loops on two
    cores. That crash is TensorFlow's, not the lesson: it is recorded (the first lines of
    its ``TaskExited``, which hold faulthandler's stacks) and the run is made again on fresh
    processes, ``attempts`` times at most; any other failure is raised as it is.

    Example::

        >>> seen = hang_with_collective_timeout(cluster)                       # doctest: +SKIP
        >>> seen["results"]["worker:0"]["error_class"]                         # doctest: +SKIP
        'DeadlineExceededError'
    """
    _whole("attempts", attempts, 1)
    _whole("steps", steps, 2)
    _step_before_the_end("fail_at", fail_at, steps)
    _positive_seconds("collective_timeout", collective_timeout, optional=False)
    _positive_seconds("timeout", timeout, optional=False)
    _check_tasks("the hung-peer run", ("worker:0", "worker:1"), cluster.cluster_spec)
    crashes: list[str] = []
    for _ in range(attempts):
        cluster.ensure_running(fresh="all")
        progress = tempfile.mkdtemp(prefix="dtfkit-hang-")
        try:
            results = cluster.run(
                train_until_a_peer_fails,
                kwargs={
                    "progress_dir": progress,
                    "fail_at": fail_at,
                    "steps": steps,
                    "failure": "hang",
                    "collective_timeout": collective_timeout,
                },
                timeout=timeout,
            )
        except TaskExited as crash:
            if not _DIED_OF_A_SIGNAL.search(str(crash)):
                raise
            crashes.append(str(crash))
            continue
        finally:
            shutil.rmtree(progress, ignore_errors=True)
        return {"results": results, "crashes": crashes}
    raise TaskExited(
        f"the hung-peer run crashed {attempts} times in a row (TensorFlow, while aborting the timed-out "
        f"collective); the last crash:\n{crashes[-1]}\nNext step: run it again on a less busy machine."
    )


def recovery_summary(
    killed_at: int,
    crashed: dict[str, Any],
    resumed: dict[str, dict[str, Any]],
    saved_digests: dict[int, str] | None = None,
) -> dict[str, Any]:
    """What a crash at step ``killed_at`` cost, from the chief's result of the crashed run
    (``crashed``, or ``{}`` when every worker died) and every worker's result of the resumed run.

    ``saved_digests`` (default: ``crashed["saved_digests"]``): the digest of the chief's weights at
    each step it saved, in the crashed run (when every worker died, from its ``saved``/``digest``
    reports). ``restored_as_saved`` compares it with what each worker of the resumed run had right
    after TensorFlow restored the checkpoint: True when every worker restored, bit for bit, the
    weights of the step it resumed from; False when any differs or none was restored; None when the
    crashed run's digest of that step is unknown. It can fail: the two sides come from different
    processes, through TensorFlow's save and restore.

    Returns ``{"killed_at", "last_saved_step" (what the resumed run restored), "resumed_from",
    "first_step", "lost_steps" (``killed_at - resumed_from``), "final_step", "restored_as_saved"}``;
    plain values, for deterministic sentences.

    Example::

        recovery_summary(12, crashed["worker:0"], resumed)["lost_steps"]   # 2 with save_every=5
    """
    first = next(iter(resumed.values()))
    starts = {r["resumed_from"] for r in resumed.values()}
    if len(starts) != 1:
        raise ValueError(f"the workers resumed from different steps: {sorted(starts)}")
    resumed_from = first["resumed_from"]
    saved = crashed.get("saved_digests", {}) if saved_digests is None else saved_digests
    want = saved.get(resumed_from)
    return {
        "killed_at": killed_at,
        "last_saved_step": crashed.get("last_saved_step", resumed_from),
        "resumed_from": resumed_from,
        "first_step": first["first_step"],
        "lost_steps": killed_at - resumed_from,
        "final_step": first["steps_done"],
        "restored_as_saved": None
        if want is None
        else all(r.get("restored_digest") == want for r in resumed.values()),
    }
