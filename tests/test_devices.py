"""``dtfkit.course.devices``: the replica plan (pure, every GPU case) and ``ensure_replicas`` in fresh
interpreters and in a real dtfkit task."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest
from conftest import subprocess_env

from dtfkit.course.devices import ReplicaPlan, plan_replicas
from dtfkit.errors import DtfkitError


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="-1"),
        capture_output=True,
        text=True,
        timeout=180,
    )


def last_json(proc: subprocess.CompletedProcess):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------ the plan
@pytest.mark.parametrize(
    "n, n_gpus, expected",
    [
        (2, 0, ReplicaPlan("split_cpu", "CPU", 2)),
        (4, 0, ReplicaPlan("split_cpu", "CPU", 4)),
        (2, 1, ReplicaPlan("split_gpu", "GPU", 2, 1024)),
        (3, 1, ReplicaPlan("split_gpu", "GPU", 3, 1024)),
        (2, 2, ReplicaPlan("gpus", "GPU", 2)),
        (2, 8, ReplicaPlan("gpus", "GPU", 8)),
        (4, 2, ReplicaPlan("split_gpu", "GPU", 4, 1024)),
        (1, 1, ReplicaPlan("gpus", "GPU", 1)),
        (1, 0, ReplicaPlan("split_cpu", "CPU", 1)),
    ],
)
def test_plan(n, n_gpus, expected):
    assert plan_replicas(n, n_gpus) == expected


def test_plan_memory_limit_and_description():
    plan = plan_replicas(2, 1, gpu_memory_mb=512)
    assert plan.memory_limit_mb == 512
    assert "512 MB" in plan.describe()
    assert plan_replicas(2, 0).describe() == "2 logical CPUs (the CPU split in 2)"


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_plan_rejects_bad_n(bad):
    with pytest.raises(DtfkitError, match="positive integer"):
        plan_replicas(bad, 0)


# ------------------------------------------------------------------ fresh interpreters
@pytest.mark.slow
def test_two_and_four_logical_cpus_and_idempotent():
    code = """
import json
from dtfkit.course.devices import ensure_replicas
first = ensure_replicas(2)
again = ensure_replicas(2)
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy(first)
print(json.dumps([first, again, [d.name for d in tf.config.list_logical_devices("CPU")],
                  strategy.num_replicas_in_sync]))
"""
    first, again, listed, replicas = last_json(run_python(code))
    assert first == ["/device:CPU:0", "/device:CPU:1"]
    assert again == first
    assert listed == first
    assert replicas == 2

    four = last_json(
        run_python(
            "import json; from dtfkit.course.devices import ensure_replicas; print(json.dumps(ensure_replicas(4)))"
        )
    )
    assert four == [f"/device:CPU:{i}" for i in range(4)]


@pytest.mark.slow
def test_too_late_raises_with_restart_advice():
    code = """
import json
import tensorflow as tf
tf.constant(1.0) + 1.0          # initializes the devices
from dtfkit.course.devices import ensure_replicas
from dtfkit.errors import DtfkitError
try:
    ensure_replicas(2)
except DtfkitError as exc:
    print(json.dumps(["DtfkitError", str(exc)]))
else:
    print(json.dumps(["no error", ""]))
"""
    kind, message = last_json(run_python(code))
    assert kind == "DtfkitError"
    assert "restart" in message.lower()
    assert "already initialized" in message


@pytest.mark.slow
def test_in_a_cluster_task_via_setup():
    import dtfkit
    from dtfkit.course.devices import ensure_replicas

    def cpu_devices():
        import tensorflow as tf

        return [d.name for d in tf.config.list_logical_devices("CPU")]

    with dtfkit.LocalCluster(
        workers=1, setup=functools.partial(ensure_replicas, 2), progress=False, name=None, gpus="none"
    ) as cluster:
        result = cluster.run(cpu_devices)
    assert result == {"worker:0": ["/device:CPU:0", "/device:CPU:1"]}
