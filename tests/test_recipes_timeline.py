"""``dtfkit.recipes.timeline`` and ``chrome_trace``: traced steps up close (compute and transfers
per task, bytes per link), drawn and written as a Chrome trace; for real on the shared cluster."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace as NS

import matplotlib
import pytest
from conftest import doctest_recipe
from test_recipes_placement import _node, _recv, _send

from dtfkit.recipes import allreduce, chrome_trace, placement, timeline

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FLOATS = 1200
SIZE = 4 * FLOATS


def _ps_step(step: int, n: int = 2) -> list[dict]:
    """One ps synchronisation as ``step_records`` describes it: each worker reads its gradient and
    sends it, the ps adds them up and sends the sum back."""
    out = []
    for i in range(n):
        w = f"worker:{i}"
        out.append(_compute(step, w, f"grad_{i}/Read", "ReadVariableOp", 0, 10))
        out.append(_transfer(step, w, "ps:0", f"Identity_{i}", SIZE, 10, 12 + 5 * i, 40 + 10 * i))
        out.append(_transfer(step, "ps:0", w, "ps_sum", SIZE, 70, 70, 90 + 5 * i))
        out.append(_compute(step, w, f"read_sum_{i}", "Identity", 90 + 5 * i, 100 + 5 * i))
    out.append(_compute(step, "ps:0", "ps_sum", "AddN", 55, 68))
    return out


def _compute(step, task, name, op, start, end):
    return {
        "step": step,
        "kind": "compute",
        "task": task,
        "name": name,
        "op": op,
        "start_us": start,
        "end_us": end,
    }


def _transfer(step, src, dst, tensor, size, ready, start, end):
    return {
        "step": step,
        "kind": "transfer",
        "from": src,
        "to": dst,
        "tensor": tensor,
        "bytes": size,
        "ready_us": ready,
        "start_us": start,
        "end_us": end,
        "used_us": end + 1,
        "timed_by": "rpc",
    }


PS, W0 = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0"


def _traced_ps_step(rpc_log_on_worker=True, size_label="4800B"):
    """A ps synchronisation of one worker as TF 2.21 traces it: no step stats for _Send/_Recv,
    a RecvTensor record per transfer where RPC logging was on."""
    rpc = f"[{size_label}] [63.5Mb/s] edge_{{}}_{{}} from {{}} to {{}}"
    stats = {
        W0: [
            _node("Read/ReadVariableOp", "Read/ReadVariableOp = ReadVariableOp(grad_0)", 1000, 5),
            _node("Identity", "Identity = Identity(Read/ReadVariableOp)", 1006, 1, out_bytes=4800),
            _node("read_sum_0", "read_sum_0 = Identity(ps_sum_S3)", 1300, 2),
        ],
        PS: [
            _node("RecvTensor", rpc.format(7, "Identity", W0, PS), 1004, 40),
            _node("ps_sum", "ps_sum = AddN(Identity_S1, ^ps_sum/control)", 1050, 10, out_bytes=4800),
        ],
    }
    if rpc_log_on_worker:
        stats[W0].append(_node("RecvTensor", rpc.format(9, "ps_sum", PS, W0), 990, 290))
    partitions = [
        NS(
            node=[
                _send("Identity_S0", W0, "Identity", "edge_7_Identity", PS),
                _recv("ps_sum_S3", W0, "edge_9_ps_sum", PS),
            ]
        ),
        NS(
            node=[
                _recv("Identity_S1", PS, "edge_7_Identity", W0),
                _send("ps_sum_S2", PS, "ps_sum", "edge_9_ps_sum", W0),
            ]
        ),
    ]
    return NS(
        step_stats=NS(dev_stats=[NS(device=d, node_stats=n) for d, n in stats.items()]),
        partition_graphs=partitions,
    )


RECORDS = _ps_step(0) + _ps_step(1)


# ------------------------------------------------------------- without TensorFlow
def test_step_records_time_transfers_by_the_rpc_log_or_else_by_the_ops():
    records = timeline.step_records(_traced_ps_step(), step=3)
    computes = [
        (r["task"], r["name"], r["op"], r["start_us"], r["end_us"]) for r in records if r["kind"] == "compute"
    ]
    assert sorted(computes) == [
        ("ps:0", "ps_sum", "AddN", 60, 70),
        ("worker:0", "Identity", "Identity", 16, 17),
        ("worker:0", "Read/ReadVariableOp", "ReadVariableOp", 10, 15),
        ("worker:0", "read_sum_0", "Identity", 310, 312),
    ]  # from the first record of the step (a RecvTensor call at 990); RecvTensor is no compute
    up, down = (r for r in records if r["kind"] == "transfer")
    assert (up["from"], up["to"], up["tensor"], up["bytes"], up["step"]) == (
        "worker:0",
        "ps:0",
        "Identity",
        4800,
        3,
    )
    # the ps asked at 14 (1004 - 990); Identity was ready at 17: the call carried it from 17 to 54
    assert (up["ready_us"], up["start_us"], up["end_us"], up["used_us"], up["timed_by"]) == (
        17,
        17,
        54,
        60,
        "rpc",
    )
    # worker:0 asked for the sum at 0; the ps made it by 70, the call returned at 290, read_sum_0 used it at 310
    assert (down["ready_us"], down["start_us"], down["end_us"], down["used_us"], down["timed_by"]) == (
        70,
        70,
        290,
        310,
        "rpc",
    )
    unlogged = [
        r for r in timeline.step_records(_traced_ps_step(rpc_log_on_worker=False)) if r["kind"] == "transfer"
    ]
    # no RecvTensor record on worker:0: from the op that made the sum to the op that used it
    assert [(r["tensor"], r["start_us"], r["end_us"], r["timed_by"]) for r in unlogged] == [
        ("Identity", 7, 44, "rpc"),
        ("ps_sum", 60, 300, "ops"),
    ]
    assert timeline.step_records(NS(step_stats=NS(dev_stats=[]), partition_graphs=[])) == []


def test_big_tensors_are_timed_by_the_rpc_log_too():
    """From 0.1 MiB on the RecvTensor label gives the size rounded ("[1.5MB]"): still the call's
    record, with the exact size from the partition graphs."""
    metadata = _traced_ps_step(size_label="1.5MB")
    logged = placement.recv_tensor_log(metadata)
    assert logged["ps_sum", "ps:0", "worker:0"]["bytes"] is None
    assert logged["ps_sum", "ps:0", "worker:0"]["edge"] == "edge_9_ps_sum"
    transfers = [r for r in timeline.step_records(metadata) if r["kind"] == "transfer"]
    assert [(r["tensor"], r["bytes"], r["timed_by"]) for r in transfers] == [
        ("Identity", 4800, "rpc"),
        ("ps_sum", 4800, "rpc"),
    ]


@pytest.mark.parametrize("module", [timeline, chrome_trace])
def test_docstring_examples(module):
    result = doctest_recipe(module)
    assert result.attempted >= 3 and result.failed == 0


def test_link_bytes_per_step_match_the_formulas():
    ledger = timeline.link_bytes(RECORDS)
    assert sorted(ledger) == [0, 1]
    for step in (0, 1):
        assert ledger[step] == allreduce.expected_link_bytes("ps", 2, FLOATS)
        transfers = [r for r in RECORDS if r["kind"] == "transfer" and r["step"] == step]
        assert allreduce.bytes_by_task(transfers) == allreduce.expected_bytes("ps", 2, FLOATS)
    assert timeline.tasks_of(RECORDS) == ["ps:0", "worker:0", "worker:1"]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_expected_link_bytes_add_up_to_expected_bytes(n):
    for method in allreduce.METHODS:
        rows = [
            {"from": a, "to": b, "bytes": v}
            for (a, b), v in allreduce.expected_link_bytes(method, n, 1200).items()
        ]
        want = {
            t: v for t, v in allreduce.expected_bytes(method, n, 1200).items() if v["sent"] or v["received"]
        }
        assert allreduce.bytes_by_task(rows) == want


def test_link_usage_counts_overlapping_transfers_once():
    rows = timeline.link_usage(RECORDS)
    assert len(rows) == 2 * 4  # two steps, four links
    first = {(r["from"], r["to"]): r for r in rows if r["step"] == 0}
    up = first["worker:1", "ps:0"]
    assert (up["transfers"], up["bytes"], up["busy_us"], up["span_us"]) == (1, SIZE, 33.0, 105.0)
    overlapping = RECORDS[:2] + [dict(RECORDS[1], start_us=20, end_us=60)]
    (row,) = timeline.link_usage(overlapping)
    assert (row["transfers"], row["bytes"], row["busy_us"]) == (2, 2 * SIZE, 48.0)  # 12..60, not 28 + 40


def test_chrome_trace_round_trip(tmp_path):
    path = chrome_trace.write_chrome_trace(RECORDS, tmp_path / "ps.json")
    loaded = json.loads(path.read_text())
    assert loaded == json.loads(json.dumps(chrome_trace.to_chrome_trace(RECORDS)))
    summary = chrome_trace.check_chrome_trace(path)
    assert summary["processes"] == {0: "steps", 1: "ps:0", 2: "worker:0", 3: "worker:1"}
    events = loaded["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    computes = [r for r in RECORDS if r["kind"] == "compute"]
    transfers = [r for r in RECORDS if r["kind"] == "transfer"]
    assert (
        summary["phases"]["X"] == len(complete) == len(computes) + 2 * len(transfers) + 2
    )  # + the two steps
    received = [e for e in complete if e["cat"] == "receive"]
    assert sum(e["args"]["bytes"] for e in received) == sum(r["bytes"] for r in transfers)
    assert {(e["args"]["sender"], e["args"]["receiver"]) for e in received} == set(
        allreduce.expected_link_bytes("ps", 2, FLOATS)
    )
    assert all(e["dur"] >= 0 for e in complete)
    # Step 1 comes after step 0 on the time axis, not on top of it.
    steps = sorted((e for e in complete if e["cat"] == "step"), key=lambda e: e["ts"])
    assert steps[0]["ts"] + steps[0]["dur"] < steps[1]["ts"]
    assert all(e["ts"] >= steps[1]["ts"] for e in complete if e["cat"] != "step" and e["args"]["step"] == 1)


def test_overlapping_transfers_get_lanes_of_their_own():
    # the ps receives both gradients at once: two receive lanes, two thread names
    trace = chrome_trace.to_chrome_trace(_ps_step(0))
    ps_threads = [
        e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name" and e["pid"] == 1
    ]
    assert ps_threads == ["compute", "receive", "receive 2", "send", "send 2"]
    chrome_trace.check_chrome_trace(trace)


def _broken(change):
    trace = chrome_trace.to_chrome_trace(RECORDS)
    index = next(i for i, e in enumerate(trace["traceEvents"]) if e["ph"] == "X" and e["cat"] == "compute")
    change(trace["traceEvents"][index])
    return trace, index


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda e: e.update(ph="Q"), "'ph' must be one of"),
        (lambda e: e.pop("ph"), "'ph' must be one of"),
        (lambda e: e.update(ts="10"), "'ts' must be a finite number"),
        (lambda e: e.pop("ts"), "'ts' must be a finite number"),
        (lambda e: e.update(dur=-1), "'dur' must be a finite number >= 0"),
        (lambda e: e.pop("dur"), "'dur' must be a finite number >= 0"),
        (lambda e: e.update(pid="worker:0"), "'pid' must be an integer"),
        (lambda e: e.pop("tid"), "'tid' is missing"),
        (lambda e: e.update(name=None), "'name' must be a string"),
        (lambda e: e.update(args=[1]), "'args' must be an object"),
    ],
)
def test_the_checker_names_the_bad_event(change, complaint):
    trace, index = _broken(change)
    with pytest.raises(ValueError, match=f"event {index} .*{complaint}"):
        chrome_trace.check_chrome_trace(trace)


def test_the_checker_rejects_broken_shapes_and_files(tmp_path):
    good = chrome_trace.to_chrome_trace(RECORDS)
    assert chrome_trace.check_chrome_trace(good["traceEvents"])["events"] == len(good["traceEvents"])
    with pytest.raises(ValueError, match="'traceEvents' list"):
        chrome_trace.check_chrome_trace({"events": good["traceEvents"]})
    with pytest.raises(ValueError, match="event 0 .*not an object"):
        chrome_trace.check_chrome_trace([["X", 1, 2]])
    nan = copy.deepcopy(good)
    nan["traceEvents"][-1]["dur"] = float("nan")
    with pytest.raises(ValueError, match="plain JSON"):
        chrome_trace.check_chrome_trace(nan)
    meta = copy.deepcopy(good)
    meta["traceEvents"][0] = {"name": "process_title", "ph": "M", "pid": 0, "args": {"name": "x"}}
    with pytest.raises(ValueError, match="event 0 .*metadata event name"):
        chrome_trace.check_chrome_trace(meta)
    (tmp_path / "cut.json").write_text(json.dumps(good)[:-40])
    with pytest.raises(ValueError, match="cut.json is not JSON"):
        chrome_trace.check_chrome_trace(tmp_path / "cut.json")


def test_the_checker_rejects_events_of_one_thread_that_overlap_without_nesting():
    events = [
        {"name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"name": "inside", "ph": "X", "pid": 1, "tid": 1, "ts": 2, "dur": 8},
        {"name": "after", "ph": "X", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"name": "elsewhere", "ph": "X", "pid": 1, "tid": 2, "ts": 5, "dur": 10},
    ]
    assert chrome_trace.check_chrome_trace(events)["phases"] == {"X": 4}
    events.append({"name": "across", "ph": "X", "pid": 1, "tid": 1, "ts": 12, "dur": 6})
    with pytest.raises(ValueError, match="event 4 .*overlaps event 2 .*pid 1, tid 1"):
        chrome_trace.check_chrome_trace(events)


def test_plot_shows_compute_and_transfers_per_task_and_the_links():
    top, bottom = timeline.plot_timeline(RECORDS)
    try:

        def bars(ax, gid):
            return sum(len(c.get_paths()) for c in ax.collections if c.get_gid() == gid)

        computes = [r for r in RECORDS if r["kind"] == "compute"]
        transfers = [r for r in RECORDS if r["kind"] == "transfer"]
        assert bars(top, "compute") == len(computes) and bars(top, "transfer") == len(transfers)
        assert bars(bottom, "transfer") == len(transfers) and bars(bottom, "compute") == 0
        assert [t.get_text() for t in top.get_yticklabels()] == ["ps:0", "worker:0", "worker:1"]
        assert [t.get_text() for t in bottom.get_yticklabels()] == [
            f"{a} → {b}" for a, b in timeline.link_bytes(RECORDS)[0]
        ]
        assert [t.get_text() for t in top.get_legend().get_texts()] == [
            "compute (ops)",
            "transfer (received)",
        ]
        notes = [t.get_text() for t in bottom.texts]
        assert notes[0].startswith("4.7 KiB a step, busy ")
    finally:
        plt.close("all")
    top, _ = timeline.plot_timeline(RECORDS, step=1)
    assert sum(len(c.get_paths()) for c in top.collections if c.get_gid() == "compute") == len(computes) // 2
    plt.close("all")
    with pytest.raises(ValueError, match="no records to draw"):
        timeline.plot_timeline(RECORDS, step=7)


class _NoCluster:
    """Stands for a cluster: any attempt to run something fails the test."""

    cluster_spec = {"ps": ["localhost:1"], "worker": ["localhost:2", "localhost:3"]}

    def status(self) -> dict:
        return {"ps:0": "running", "worker:0": "running", "worker:1": "running"}

    def run(self, *args, **kwargs):
        raise AssertionError("trace_steps started work on the cluster")


@pytest.mark.parametrize(
    ("args", "kwargs", "complaint"),
    [
        (("butterfly", 2, FLOATS), {}, "method must be one of"),
        (("ring", 2, FLOATS), {"steps": 0}, "steps must be an integer >= 1 .*, not 0"),
        (("ring", 2, FLOATS), {"steps": 1.5}, "steps must be an integer >= 1 .*, not 1.5"),
        (("ring", 0, FLOATS), {}, "n .* must be an integer >= 1, not 0"),
        (("ring", 2, 1201), {}, "1201 floats do not split into 2 equal chunks"),
        (("ring", 3, FLOATS), {}, "n=3 synchronises 3 workers but the cluster has 2"),
    ],
)
def test_trace_steps_refuses_bad_input_before_anything_starts(no_spawn, args, kwargs, complaint):
    with pytest.raises(ValueError, match=complaint):
        allreduce.trace_steps(_NoCluster(), *args, **kwargs)
    assert no_spawn == []


def test_trace_steps_needs_a_ps_for_the_ps_method(no_spawn):
    no_ps = _NoCluster()
    no_ps.cluster_spec = {"worker": ["localhost:2", "localhost:3"]}
    with pytest.raises(ValueError, match='method "ps" needs a ps task'):
        allreduce.trace_steps(no_ps, "ps", 2, FLOATS)


# ------------------------------------------------------------------- real TensorFlow
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("method", allreduce.METHODS)
def test_traced_steps_on_a_real_cluster(cluster, method, tmp_path):
    n, steps = 2, 2
    records = allreduce.trace_steps(cluster, method, n, FLOATS, steps=steps, timeout=240)
    transfers = [r for r in records if r["kind"] == "transfer"]
    ledger = timeline.link_bytes(records)
    assert sorted(ledger) == list(range(steps))
    for step in range(steps):
        # The bytes on every link are the formulas' exactly: TensorFlow moves the tensors, nothing more.
        assert ledger[step] == allreduce.expected_link_bytes(method, n, FLOATS), records
        mine = [r for r in transfers if r["step"] == step]
        assert allreduce.bytes_by_task(mine) == allreduce.expected_bytes(method, n, FLOATS)
        assert len(mine) == (2 * n if method == "ps" else 2 * (n - 1) * n)  # ring and sharded alike
    for r in transfers:
        # one machine, one clock: a tensor is made, then carried, then used
        assert 0 <= r["ready_us"] <= r["start_us"] <= r["end_us"] <= r["used_us"], r
        assert r["timed_by"] in ("rpc", "ops"), r
    tasks = ["ps:0", "worker:0", "worker:1"] if method == "ps" else ["worker:0", "worker:1"]
    assert timeline.tasks_of(records) == tasks
    for step in range(steps):
        computing = {r["task"] for r in records if r["kind"] == "compute" and r["step"] == step}
        assert computing == set(tasks), (step, computing)
    computed = {(r["task"], r["name"]) for r in records if r["kind"] == "compute"}
    for step in range(steps):
        into = [r for r in transfers if r["step"] == step]
        if method == "ps":
            assert ("ps:0", "ps_sum") in computed
            # the ps sends the sum only once every gradient has arrived
            up = [r["end_us"] for r in into if r["to"] == "ps:0"]
            down = [r["ready_us"] for r in into if r["from"] == "ps:0"]
            assert min(down) >= max(up), into
        elif method == "sharded_ps":
            assert {("worker:0", "shard_0/ps_sum"), ("worker:1", "shard_1/ps_sum")} <= computed
            # a worker sends its summed shard only once the other workers' slices of it arrived
            for w in range(n):
                got = [
                    r["end_us"] for r in into if r["to"] == f"worker:{w}" and r["tensor"].startswith("split")
                ]
                summed = [r for r in into if r["from"] == f"worker:{w}" and r["tensor"].startswith("shard_")]
                assert got and summed and min(r["ready_us"] for r in summed) >= max(got), into
        else:
            assert {("worker:0", "ring_sum_0"), ("worker:1", "ring_sum_1")} <= computed
            # a worker passes a chunk on (all-gather) only after it added the one it received
            for w in range(n):
                got = next(r for r in into if r["to"] == f"worker:{w}" and r["tensor"].startswith("chunks"))
                passed = next(
                    r for r in into if r["from"] == f"worker:{w}" and r["tensor"].startswith("reduce")
                )
                assert passed["ready_us"] >= got["end_us"], into
    path = chrome_trace.write_chrome_trace(records, tmp_path / f"{method}.json")
    summary = chrome_trace.check_chrome_trace(path)
    assert list(summary["processes"].values()) == ["steps", *tasks]
    assert summary["phases"]["X"] == len(records) + len(transfers) + steps
    top, bottom = timeline.plot_timeline(records)
    assert sum(len(c.get_paths()) for c in top.collections if c.get_gid() == "transfer") == len(transfers)
    plt.close("all")
