"""Which GPUs each task sees, decided without importing TensorFlow in the notebook.

Policy (``gpus=`` of ``LocalCluster``):

- ``"auto"`` (default): ps and evaluator tasks see no GPU; with at least as many GPUs
  as worker tasks each worker gets its own; otherwise the workers share every GPU
  with memory growth on, so the second process does not fail for lack of memory.
- ``"share"``: every worker sees every GPU, memory growth on.
- ``"none"``: no task sees a GPU.

Example::

    >>> plan_visible_devices(["ps:0", "worker:0", "worker:1"], n_gpus=2, policy="auto")
    {'ps:0': ('', False), 'worker:0': ('0', False), 'worker:1': ('1', False)}
"""

from __future__ import annotations

import os
import shutil
import subprocess

from dtfkit.errors import DtfkitError

POLICIES = ("auto", "share", "none")


def count_gpus() -> int:
    """Number of NVIDIA GPUs visible to this process (0 without a driver)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    if os.path.isdir("/proc/driver/nvidia/gpus"):
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return 0
        return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return 0


def plan_visible_devices(tasks: list[str], n_gpus: int, policy: str = "auto") -> dict[str, tuple[str, bool]]:
    """For each task name: (CUDA_VISIBLE_DEVICES value, memory growth on?).

    Memory growth is applied with ``TF_FORCE_GPU_ALLOW_GROWTH=true`` in the task's
    environment, which TensorFlow honours before it touches any GPU.
    """
    if policy not in POLICIES:
        raise DtfkitError(f"unknown gpus policy {policy!r}: use one of {', '.join(POLICIES)}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible else [str(i) for i in range(n_gpus)]
    workers = [t for t in tasks if t.split(":")[0] in ("chief", "worker")]
    plan: dict[str, tuple[str, bool]] = {}
    own_gpu = policy == "auto" and 0 < len(workers) <= len(ids)
    for name in tasks:
        if name not in workers or policy == "none" or not ids:
            plan[name] = ("", False)
        elif own_gpu:
            plan[name] = (ids[workers.index(name)], False)
        else:
            plan[name] = (",".join(ids), True)
    return plan
