"""``dtfkit.recipes.strategies_multi``: MultiWorkerMirroredStrategy on 2 workers that
start their own servers, and ParameterServerStrategy with a ClusterCoordinator in the
chief surviving a killed worker, and a side-car evaluator reading the workers'
checkpoints from outside the cluster (real processes, real TensorFlow)."""

from __future__ import annotations

import json

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
    # ... and only from its own shard: worker:i's examples are i, i + 2, i + 4, ... of the training set
    assert a["examples_read"] and all(i % 2 == 0 for i in a["examples_read"])
    assert b["examples_read"] and all(i % 2 == 1 for i in b["examples_read"])
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


def test_read_tf_config_parses_the_environment(monkeypatch):
    config = {"cluster": {"worker": ["localhost:1"]}, "task": {"type": "evaluator", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert sm.read_tf_config() == config


@pytest.mark.slow
def test_sidecar_evaluator_reads_the_workers_checkpoints_outside_the_cluster(tmp_path):
    steps = 20
    with dtfkit.LocalCluster(workers=2, evaluator=1, start_servers=False, progress=False) as cluster:
        configs = cluster.run(sm.read_tf_config, on="all", timeout=60)
        evaluation = cluster.submit(
            sm.sidecar_evaluate,
            kwargs={"checkpoint_dir": str(tmp_path), "last_step": steps, "timeout": 90},
            on="evaluator",
            timeout=150,
        )
        results = cluster.run(
            sm.train_multi_worker_mirrored,
            kwargs={"steps": steps, "checkpoint_dir": str(tmp_path), "checkpoint_every": 10},
            timeout=120,
        )
        sidecar = evaluation.result()["evaluator:0"]
    evaluator = configs["evaluator:0"]
    assert evaluator["task"] == {"type": "evaluator", "index": 0}
    assert "evaluator" not in evaluator["cluster"]
    assert evaluator["cluster"] == configs["worker:0"]["cluster"] == configs["worker:1"]["cluster"]
    assert sidecar["task_type"] == "evaluator" and sidecar["task_id"] == 0
    assert sidecar["cluster_jobs"] == ["worker"]
    assert sidecar["last_step_seen"] == steps
    assert [step for step, _ in sidecar["evaluated"]] == sorted({step for step, _ in sidecar["evaluated"]})
    chief = results["worker:0"]
    assert [p.rsplit("-", 1)[1] for p in chief["checkpoints"]] == ["10", "20"]
    assert results["worker:1"]["checkpoints"] == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == []  # worker:1 removed its folder
    for restored, trained in zip(sidecar["weights"], chief["weights"], strict=True):
        assert np.array_equal(restored, trained)
