"""``dtfkit.recipes.strategies_multi``: MultiWorkerMirroredStrategy on 2 workers that
start their own servers, and ParameterServerStrategy with a ClusterCoordinator in the
chief surviving a killed worker (real processes, real TensorFlow)."""

from __future__ import annotations

import numpy as np
import pytest

import dtfkit
from dtfkit.recipes import strategies_multi as sm


def test_parameter_server_training_refuses_to_start_without_grpc_fail_fast(monkeypatch):
    monkeypatch.delenv("GRPC_FAIL_FAST", raising=False)
    with pytest.raises(RuntimeError, match="GRPC_FAIL_FAST"):
        sm.train_parameter_server(steps=1)


@pytest.mark.slow
def test_multi_worker_mirrored_workers_end_with_identical_weights():
    with dtfkit.LocalCluster(workers=2, start_servers=False, progress=False) as cluster:
        checks = cluster.run(sm.startup_check, timeout=60)
        for name, check in checks.items():
            assert check["task"] == name
            assert check["port_free"] and check["tensorflow_imported"]
            assert not check["eager_context_initialized"]
        results = cluster.run(sm.train_multi_worker_mirrored, kwargs={"steps": 30}, timeout=120)
    a, b = results["worker:0"], results["worker:1"]
    assert a["num_replicas"] == b["num_replicas"] == 2
    assert a["communication"] == "RING"
    assert a["losses"] == b["losses"]  # the all-reduced loss is the same everywhere
    assert a["last_loss"] < a["first_loss"]
    # each worker read its own half of the 64-example global batches
    assert a["examples_seen"] == b["examples_seen"] == 30 * 32
    diff = max(float(np.max(np.abs(x - y))) for x, y in zip(a["weights"], b["weights"], strict=True))
    assert diff < 1e-6


@pytest.mark.slow
def test_parameter_server_training_survives_a_killed_worker():
    steps = 300
    with dtfkit.LocalCluster(
        chief=1, workers=2, ps=1, env={"GRPC_FAIL_FAST": "use_caller"}, progress=False
    ) as cluster:
        handle = cluster.submit(
            sm.train_parameter_server, kwargs={"steps": steps, "step_ms": 20}, on="chief", timeout=120
        )
        cluster.metrics.wait_for(lambda r: r.get("step", 0) >= 50, timeout=90, since=handle.submitted)
        cluster.kill("worker", 1)
        result = handle.result()["chief:0"]
        assert cluster.status()["worker:1"] == "killed"
    assert result["scheduled"] == result["completed"] == steps
    assert result["executions"] >= steps  # at least once: a re-run may count twice
    assert result["last_loss"] < result["first_loss"]
