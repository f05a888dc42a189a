"""dtfkit.recipes.between_graph (chapter 2): the greedy ps strategy, placement, in-graph
replication, the non-chief hang and its fix, and the bytes a sparse lookup moves.

The fast tests need no TensorFlow; the slow ones share one 2 ps + 2 worker cluster
(the hang test kills tasks, so it runs last)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import share_cluster

import dtfkit
from dtfkit.recipes import between_graph as bg

# Real runs whose timing varies: tests/under_load.py runs them beside CPU burners.
pytestmark = pytest.mark.timing


# ------------------------------------------------------------------ no TensorFlow
def test_greedy_strategy_gives_each_variable_to_the_lightest_ps():
    strategy = bg.GreedyByBytes(2, load_fn=lambda size: size)
    assert [strategy(size) for size in (100, 1, 50, 60, 10)] == [0, 1, 1, 1, 0]
    assert strategy.loads == [110, 111]
    # Ties go to the lowest index; one ps takes everything.
    three = bg.GreedyByBytes(3, load_fn=lambda size: size)
    assert [three(size) for size in (5, 5, 5, 1, 0)] == [0, 1, 2, 0, 1]
    single = bg.GreedyByBytes(1, load_fn=lambda s: s)
    assert [single(s) for s in (5, 6)] == [0, 0] and single.loads == [11]
    with pytest.raises(ValueError):
        bg.GreedyByBytes(0)


def test_round_robin_puts_every_kernel_on_one_ps_and_greedy_balances():
    # kernel, bias pairs of the 64-256-256-256-10 model, in creation order (float32).
    sizes = [64 * 256 * 4, 1024, 256 * 256 * 4, 1024, 256 * 256 * 4, 1024, 256 * 10 * 4, 40]
    assert bg.round_robin_bytes(sizes, 2) == [600064, 3112]
    assert bg.greedy_bytes(sizes, 2) == [328704, 274472]
    assert sum(bg.greedy_bytes(sizes, 3)) == sum(sizes)
    assert bg.round_robin_bytes([], 2) == [0, 0]


W2 = ("worker:0", "worker:1")


def _row(task, t, step):
    return {"task": task, "time": t, "step": step}


def test_interleavings_and_overlap_from_metric_rows():
    alternating = [_row("worker:0", 0.0, 1), _row("worker:1", 0.1, 2), _row("worker:0", 0.2, 3)]
    assert bg.interleavings(alternating) == 2
    assert bg.overlap_seconds(alternating) == pytest.approx(0.0)
    one_after_other = [_row("worker:0", t, i) for i, t in enumerate((0.0, 0.1))] + [
        _row("worker:1", t, i) for i, t in enumerate((0.5, 0.6))
    ]
    assert bg.interleavings(one_after_other) == 1
    assert bg.overlap_seconds(one_after_other) == 0.0
    mixed = [
        _row("worker:0", 0.0, 1),
        _row("worker:1", 0.3, 2),
        {"task": "client:0", "time": 0.35, "step": 9},  # other tasks do not count
        {"task": "worker:0", "time": 0.4},  # rows without a step do not count
        _row("worker:0", 1.0, 3),
        _row("worker:1", 0.9, 4),
    ]
    assert bg.interleavings(mixed, tasks=W2) == 2  # by time: w0, w1, w1, w0
    assert bg.interleavings(mixed) == 4  # every task: w0, w1, client, w1, w0
    assert bg.interleavings(mixed, tasks=W2, by="step") == 3  # by global step: w0, w1, w0, w1
    assert bg.overlap_seconds(mixed) == pytest.approx(0.6)
    assert bg.overlap_seconds([_row("worker:0", 0.0, 1)]) == 0.0


def test_stack_excerpt_keeps_the_frames_that_matter():
    text = "\n".join(
        [
            "Thread MainThread:",
            '  File "/x/_task_main.py", line 118, in _run_call',
            "    value = fn(*args, **kwargs)",
            '  File "/x/dtfkit/recipes/between_graph/task_side.py", line 186, in tutorial_worker',
            "    with tf.compat.v1.train.MonitoredTrainingSession(",
            '  File "/tf/monitored_session.py", line 1264, in _create_session',
            "    return self._sess_creator.create_session()",
            '  File "/tf/session_manager.py", line 457, in wait_for_session',
            "    local_init_success, msg = self._try_run_local_init_op(",
            '  File "/tf/session.py", line 1430, in _extend_graph',
            "    tf_session.ExtendSession(self._session)",
        ]
    )
    assert bg.stack_excerpt(text).splitlines() == [
        '  File "between_graph/task_side.py", line 186, in tutorial_worker',
        "    with tf.compat.v1.train.MonitoredTrainingSession(",
        "  ...",
        '  File "session_manager.py", line 457, in wait_for_session',
        "    local_init_success, msg = self._try_run_local_init_op(",
        '  File "session.py", line 1430, in _extend_graph',
        "    tf_session.ExtendSession(self._session)",
    ]
    assert bg.stack_excerpt("no frames here") == ""


def test_recv_bytes_reads_the_receiving_side_of_a_trace():
    def node(name, label, nbytes=None):
        outputs = []
        if nbytes is not None:
            alloc = SimpleNamespace(requested_bytes=nbytes)
            outputs = [SimpleNamespace(tensor_description=SimpleNamespace(allocation_description=alloc))]
        return SimpleNamespace(node_name=name, timeline_label=label, output=outputs)

    worker = "/job:worker/replica:0/task:1/device:CPU:0"
    ps = "/job:ps/replica:0/task:0/device:CPU:0"
    stats = SimpleNamespace(
        dev_stats=[
            SimpleNamespace(
                device=worker,
                node_stats=[
                    node(
                        "RecvTensor",
                        f"[8192B] [370.2Mb/s] edge_4_embedding_lookup from {ps} to {worker}",
                        8192,
                    ),
                    node("Sum", "Sum = Sum(embedding_lookup_S3, Const)", 4),
                ],
            ),
            SimpleNamespace(
                device=ps,
                node_stats=[node("RecvTensor", f"[512B] [11Mb/s] edge_10_ids from {worker} to {ps}", 512)],
            ),
        ]
    )
    assert bg.recv_bytes(stats) == [
        {"to": "worker:1", "from": "ps:0", "bytes": 8192, "edge": "edge_4_embedding_lookup"},
        {"to": "ps:0", "from": "worker:1", "bytes": 512, "edge": "edge_10_ids"},
    ]
    assert bg.task_side._ops_by_task(stats) == {"worker:1": ["Sum"]}


# ------------------------------------------------------------- real clusters
@pytest.fixture(scope="module")
def ps2():
    cluster = dtfkit.LocalCluster(ps=2, workers=2, progress=False, start_timeout=90, name=None)
    with share_cluster(cluster):
        yield cluster


def variable_bytes_in_task():
    """``variable_bytes`` on real variable ops, ``GreedyByBytes`` on a real device setter."""
    import tensorflow as tf

    with tf.Graph().as_default():
        a = tf.compat.v1.get_variable("a", [3, 5], dtype=tf.float64)
        b = tf.compat.v1.get_variable("b", [7], dtype=tf.int32)
        return [bg.variable_bytes(a.op), bg.variable_bytes(b.op.node_def)]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_placement_round_robin_vs_greedy_in_tensorflow(ps2):
    assert ps2.run(variable_bytes_in_task, on="worker:0", timeout=60)["worker:0"] == [120, 28]
    out = ps2.run(bg.place_variables, kwargs={"global_step": True}, on="worker:0", timeout=60)["worker:0"]
    rr, greedy = out["round-robin"], out["greedy"]
    names = [v[0] for v in rr["variables"]]
    assert names[-1] == "global_step" and len(names) == 9
    assert [v[3] for v in rr["variables"]] == [0, 1] * 4 + [0]
    sizes = [v[2] for v in rr["variables"]]
    assert rr["bytes_per_ps"] == bg.round_robin_bytes(sizes, 2) == [600072, 3112]
    assert greedy["bytes_per_ps"] == bg.greedy_bytes(sizes, 2)
    assert max(greedy["bytes_per_ps"]) / min(greedy["bytes_per_ps"]) < 1.5


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sparse_lookup_moves_only_the_rows(ps2):
    out = ps2.run(
        bg.sparse_vs_dense_read,
        kwargs={"vocab": 20_000, "dim": 16, "batch_ids": 10},
        on="worker:1",
        timeout=60,
    )["worker:1"]
    assert out["same_rows"]
    assert "ResourceGather" in out["sparse_ops"]["ps:0"] and "GatherV2" in out["dense_ops"]["worker:1"]
    sparse = {(t["from"], t["to"]): t["bytes"] for t in out["sparse_transfers"]}
    dense = {(t["from"], t["to"]): t["bytes"] for t in out["dense_transfers"]}
    assert sparse == {("ps:0", "worker:1"): 10 * 16 * 4, ("worker:1", "ps:0"): 10 * 8}
    assert dense == {("ps:0", "worker:1"): 20_000 * 16 * 4}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_in_graph_replication_one_client_drives_every_task(ps2):
    out = ps2.run(bg.train_in_graph, kwargs={"steps": 30}, on="client", timeout=120)
    ((name, result),) = out.items()
    assert name.startswith("client:")
    assert result["towers"] == 2 and not result["client_has_server"]
    assert result["devices"] == ["ps:0", "ps:1", "worker:0", "worker:1"]
    assert result["loss"] < result["first_loss"]
    steps = [r["step"] for r in ps2.metrics.rows(task=name)]
    assert steps == list(range(1, 31))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_non_chief_hangs_once_the_chief_is_gone_unless_device_filters(ps2):
    """Kills worker:0 and worker:1: keep this test last in the module."""
    chief = ps2.run(bg.tutorial_worker, kwargs={"steps": 20, "run_name": "t_hang"}, on="worker:0", timeout=60)
    assert chief["worker:0"] == {"local_steps": 20, "global_step": 20}
    ps2.kill("worker", 0)
    with pytest.raises(dtfkit.TaskTimeout) as info:
        ps2.run(bg.tutorial_worker, kwargs={"steps": 20, "run_name": "t_hang"}, on="worker:1", timeout=8)
    stacks = info.value.stacks
    assert list(stacks) == ["worker:1"]
    assert "in wait_for_session" in stacks["worker:1"] and "in _extend_graph" in stacks["worker:1"]
    assert "in _extend_graph" in bg.stack_excerpt(stacks["worker:1"])
    assert ps2.status()["worker:1"] == "killed"

    ps2.restart("worker", 1)
    fixed = ps2.run(
        bg.tutorial_worker,
        kwargs={"steps": 40, "run_name": "t_hang", "device_filters": True},
        on="worker:1",
        timeout=60,
    )
    assert fixed["worker:1"] == {"local_steps": 20, "global_step": 40}
