"""``dtfkit.recipes.placement``: placement tables from traced runs.

The table builders are checked on hand-made ``RunMetadata`` look-alikes (no
TensorFlow), and once for real: the seed tutorial's example run by a separate
client on the shared 1 ps + 2 workers cluster, and variable placement with
``replica_device_setter`` built in a worker.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from conftest import doctest_recipe

import dtfkit
from dtfkit.recipes import placement

PS = "/job:ps/replica:0/task:0/device:CPU:0"
W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"


# ------------------------------------------------------------- without TensorFlow
def test_docstring_examples():
    result = doctest_recipe(placement)
    assert result.attempted >= 8 and result.failed == 0


@pytest.mark.parametrize(
    ("device", "short", "task"),
    [
        (PS, "ps:0", "/job:ps/replica:0/task:0"),
        ("/job:worker/task:3", "worker:3", "/job:worker/replica:0/task:3"),
        ("/job:chief/replica:2/task:0/device:GPU:1", "chief:0", "/job:chief/replica:2/task:0"),
        ("/job:ps", "ps", "/job:ps/replica:0"),
        ("/device:CPU:0", "", ""),
        ("", "", ""),
    ],
)
def test_device_names(device, short, task):
    assert placement.short_task(device) == short
    assert placement.task_of(device) == task


def _node(name, label, start, duration=2, out_bytes=None):
    outputs = []
    if out_bytes is not None:
        description = NS(allocation_description=NS(requested_bytes=out_bytes))
        outputs = [NS(slot=0, tensor_description=description)]
    return NS(
        node_name=name,
        timeline_label=label,
        all_start_micros=start,
        op_end_rel_micros=duration,
        all_end_rel_micros=duration,
        output=outputs,
    )


def _graph_node(name, op, device, inputs=(), **attrs):
    attr = {}
    for key, value in attrs.items():
        attr[key] = NS(b=value, s=b"") if isinstance(value, bool) else NS(b=False, s=value.encode())
    return NS(name=name, op=op, device=device, input=list(inputs), attr=attr)


def _send(name, device, source, tensor, to, client=False):
    return _graph_node(
        name,
        "_Send",
        device,
        [source],
        tensor_name=tensor,
        send_device=device,
        recv_device=to,
        client_terminated=client,
    )


def _recv(name, device, tensor, frm, client=False):
    return _graph_node(
        name,
        "_Recv",
        device,
        tensor_name=tensor,
        send_device=frm,
        recv_device=device,
        client_terminated=client,
    )


def _fake_metadata(partitions=True):
    """The seed example's trace, shortened (labels and attributes as TF 2.21 writes them)."""
    recv = "[16B] [0.41Mb/s] edge_{}_{} from {} to {}"
    partition_graphs = [
        NS(
            node=[
                _recv("MatMul/ReadVariableOp_S1", W0, "edge_8_MatMul/ReadVariableOp", PS),
                _recv("_recv_feed_0", W0, "feed:0", W0, client=True),  # the client's side is worker:0
                _graph_node("MatMul", "MatMul", W0, ["MatMul/ReadVariableOp_S1", "_recv_feed_0"]),
                _send("MatMul_S2", W0, "MatMul", "edge_12_MatMul", W1),
                _recv("out_S9", W0, "edge_19_out", W1),
                _send("_send_out_0", W0, "out_S9", "out:0", W0, client=True),
            ]
        ),
        NS(
            node=[
                _graph_node("x", "VarHandleOp", PS),
                _graph_node("MatMul/ReadVariableOp", "ReadVariableOp", PS, ["x"]),
                _send(
                    "MatMul/ReadVariableOp_S0",
                    PS,
                    "MatMul/ReadVariableOp",
                    "edge_8_MatMul/ReadVariableOp",
                    W0,
                ),
            ]
        ),
        NS(
            node=[
                _recv("MatMul_S3", W1, "edge_12_MatMul", W0),
                _recv("_recv_labels_0", W1, "labels:0", W0, client=True),
                _graph_node("out", "MatMul", W1, ["MatMul_S3", "_recv_labels_0"]),
                _send("out_S8", W1, "out", "edge_19_out", W0),
            ]
        ),
    ]
    return NS(
        step_stats=NS(
            dev_stats=[
                NS(
                    device=W1,
                    node_stats=[
                        _node("RecvTensor", recv.format(12, "MatMul", W0, W1), 1400),
                        _node("RecvTensor", "[12B] [1Mb/s] _recv_labels_0 from somewhere", 1400),
                        _node("_SOURCE", "_SOURCE = NoOp()", 1000),
                        _node("out", "out = _MklMatMul(MatMul, labels)", 1500, 300, out_bytes=16),
                    ],
                ),
                NS(
                    device=W0,
                    node_stats=[
                        _node("RecvTensor", recv.format(8, "MatMul/ReadVariableOp", PS, W0), 1100),
                        _node(
                            "MatMul",
                            "MatMul = _MklMatMul(MatMul/ReadVariableOp, feed)",
                            1200,
                            100,
                            out_bytes=24,
                        ),
                        _node("RecvTensor", "a label this version does not know", 1250),
                    ],
                ),
                NS(
                    device=PS,
                    node_stats=[
                        _node("x", "x = VarHandleOp()", 1010),
                        _node("MatMul/ReadVariableOp", "MatMul/ReadVariableOp = ReadVariableOp(x)", 1020),
                    ],
                ),
            ]
        ),
        partition_graphs=partition_graphs if partitions else [],
    )


def test_op_table_from_run_metadata():
    metadata = _fake_metadata()
    graph = NS(get_operation_by_name=lambda name: NS(type={"MatMul": "MatMul", "x": "VarHandleOp"}[name]))

    ops = placement.op_table(metadata, graph)
    assert [(r["op"], r["task"]) for r in ops] == [
        ("x", "ps:0"),
        ("MatMul/ReadVariableOp", "ps:0"),
        ("MatMul", "worker:0"),
        ("out", "worker:1"),
    ]
    by_name = {r["op"]: r for r in ops}
    assert by_name["MatMul"]["type"] == "MatMul" and by_name["MatMul"]["kernel"] == "_MklMatMul"
    assert by_name["MatMul/ReadVariableOp"]["type"] == "ReadVariableOp"  # unknown to the graph: the kernel
    assert by_name["MatMul"]["device"] == W0
    assert by_name["x"]["start_ms"] == 0.0 and by_name["out"]["start_ms"] == pytest.approx(0.49)
    assert by_name["out"]["duration_ms"] == pytest.approx(0.3)

    everything = placement.op_table(metadata, include_internal=True)
    assert everything[0]["op"] == "_SOURCE" and sum(r["op"] == "RecvTensor" for r in everything) == 4
    empty = NS(step_stats=NS(dev_stats=[]), partition_graphs=[])
    assert (
        placement.op_table(empty) == placement.transfer_table(empty) == placement.partition_table(empty) == []
    )


def test_transfers_come_from_the_partition_graphs():
    transfers = placement.transfer_table(_fake_metadata())
    assert [(r["tensor"], r["kind"], r["bytes"], r["from"], r["to"]) for r in transfers] == [
        ("labels:0", "feed", None, "worker:0", "worker:1"),  # no sending op, no RPC record: unknown
        ("MatMul/ReadVariableOp", "edge", 16, "ps:0", "worker:0"),  # no output stats: size from the RPC log
        ("MatMul", "edge", 24, "worker:0", "worker:1"),  # size of the sending op's output
        ("out", "edge", 16, "worker:1", "worker:0"),
    ]
    assert transfers[1]["from_device"] == PS and transfers[1]["to_device"] == W0
    # The client-side feed and fetch on worker:0 itself never leave the task: not listed.
    assert "feed:0" not in {r["tensor"] for r in transfers} and "out:0" not in {
        r["tensor"] for r in transfers
    }


def test_transfers_without_partition_graphs_fall_back_to_the_rpc_log():
    rows = placement.transfer_table(_fake_metadata(partitions=False))
    assert [(r["tensor"], r["kind"], r["bytes"], r["from"], r["to"]) for r in rows] == [
        ("MatMul/ReadVariableOp", "edge", 16, "ps:0", "worker:0"),
        ("MatMul", "edge", 16, "worker:0", "worker:1"),
    ]


def test_partition_table():
    parts = placement.partition_table(_fake_metadata())
    assert [(r["task"], r["ops"], r["sends"], r["recvs"]) for r in parts] == [
        ("ps:0", ["MatMul/ReadVariableOp", "x"], 1, 0),
        ("worker:0", ["MatMul"], 2, 3),
        ("worker:1", ["out"], 1, 2),
    ]
    assert parts[0]["device"] == PS


def test_display_helpers():
    rows = [
        {"op": "x", "task": "ps:0", "shape": [2, 2], "ms": 0.5},
        {"op": "<b>", "task": "worker:0", "shape": [], "ms": 1.25},
    ]
    assert placement.by_task(rows) == {"ps:0": ["x"], "worker:0": ["<b>"]}
    assert placement.by_task(rows, "ms") == {"ps:0": [0.5], "worker:0": [1.25]}
    text = placement.format_table(rows, ["task", "op", "shape", "ms"])
    assert text.splitlines()[0].split() == ["task", "op", "shape", "ms"]
    assert text.splitlines()[2].split() == ["ps:0", "x", "[2,", "2]", "0.500"]
    table = placement.Table(rows, ["op", "task"], title="t", highlight={"ps:0": "#fff"})
    assert repr(table).startswith("t\nop ")
    page = table._repr_html_()
    assert "&lt;b&gt;" in page and "<b>" not in page.replace("<b>t</b>", "")
    assert page.count("background:#fff") == 1 and page.count("<tr") == 3
    default = placement.Table(rows)._repr_html_()
    assert default.count("background:") == 2  # each task gets its own colour


# ----------------------------------------------------------- with a real cluster
def seed_example_traced():
    import tensorflow as tf

    ctx = dtfkit.this_task()
    with tf.Graph().as_default() as graph:
        with tf.device("/job:ps/task:0"):
            x = tf.Variable(tf.ones([2, 2]), name="placement_x")
            y = tf.Variable(tf.ones([2, 2]), name="placement_y")
        with tf.device("/job:worker/task:0"):
            z = tf.matmul(x, y, name="first") + x
        with tf.device("/job:worker/task:1"):
            z = tf.matmul(z, x, name="second") + x
        with tf.compat.v1.Session("grpc://" + ctx.cluster["worker"][0]) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            traced = placement.trace_run(sess, z)
        traced["variables"] = placement.variable_devices(graph)
    traced["z_name"] = z.op.name
    return traced


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_seed_example_placement_from_a_client(cluster):
    (traced,) = cluster.run(seed_example_traced, on="client", timeout=180).values()
    assert traced["value"].tolist() == [[7.0, 7.0], [7.0, 7.0]]

    ops = traced["ops"]
    ran_on = {r["op"]: r["device"] for r in ops}
    assert ran_on["placement_x"] == ran_on["placement_y"] == PS
    assert ran_on["first"] == W0 and ran_on["second"] == W1 and ran_on[traced["z_name"]] == W1
    assert {r["type"] for r in ops if r["op"] in ("first", "second")} == {"MatMul"}
    assert {r["task"] for r in ops if r["type"] == "ReadVariableOp"} == {
        "ps:0"
    }  # colocated with the variables
    starts = [r["start_ms"] for r in ops]
    assert starts[0] == 0.0 and starts == sorted(starts)
    assert not {"_SOURCE", "RecvTensor"} & set(ran_on)

    routes = {(r["from"], r["to"]) for r in traced["transfers"]}
    assert routes == {
        ("ps:0", "worker:0"),
        ("ps:0", "worker:1"),
        ("worker:0", "worker:1"),
        ("worker:1", "worker:0"),
    }
    # worker:1 computes z, and the fetched value goes to the master's task, worker:0.
    assert (traced["z_name"], "worker:1", "worker:0") in {
        (r["tensor"], r["from"], r["to"]) for r in traced["transfers"]
    }
    assert all(r["bytes"] == 16 for r in traced["transfers"])  # 2x2 float32

    parts = {r["task"]: r for r in traced["partitions"]}
    assert sorted(parts) == ["ps:0", "worker:0", "worker:1"]
    assert "first" in parts["worker:0"]["ops"] and "second" in parts["worker:1"]["ops"]
    assert parts["ps:0"]["recvs"] == 0 and parts["ps:0"]["sends"] >= 2

    assert [(v["variable"], v["device"], v["task"], v["shape"]) for v in traced["variables"]] == [
        ("placement_x", "/job:ps/task:0", "ps:0", [2, 2]),
        ("placement_y", "/job:ps/task:0", "ps:0", [2, 2]),
    ]


def variables_round_robin():
    """Build (no session) a graph with replica_device_setter over 2 ps tasks."""
    import tensorflow as tf

    with tf.Graph().as_default() as graph:
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0")
        with tf.compat.v1.device(setter):
            for name in ("a", "b", "c"):
                tf.compat.v1.get_variable(name, [3, 4], initializer=tf.compat.v1.zeros_initializer())
            steps = tf.Variable(0, name="steps", trainable=False)
            ops_device = (steps + 1).device
        tf.compat.v1.get_variable("unplaced", [], dtype=tf.float64)
        rows = placement.variable_devices(graph)
    return {"rows": rows, "ops_device": ops_device}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_variable_devices_round_robin(cluster):
    out = cluster.run(variables_round_robin, on="worker:0", timeout=60)["worker:0"]
    rows = {r["variable"]: r for r in out["rows"]}
    assert list(rows) == ["a", "b", "c", "steps", "unplaced"]
    assert placement.by_task(out["rows"], "variable") == {
        "": ["unplaced"],
        "ps:0": ["a", "c"],
        "ps:1": ["b", "steps"],
    }
    assert rows["a"]["device"] == "/job:ps/task:0" and rows["b"]["device"] == "/job:ps/task:1"
    assert rows["a"]["shape"] == [3, 4] and rows["a"]["dtype"] == "float32" and rows["a"]["trainable"]
    assert not rows["steps"]["trainable"] and rows["steps"]["dtype"] == "int32"
    assert rows["unplaced"]["device"] == "" and rows["unplaced"]["dtype"] == "float64"
    assert out["ops_device"] == "/job:worker/task:0"
