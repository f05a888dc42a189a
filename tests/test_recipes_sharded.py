"""A sharded parameter server (``allreduce.build_sharded_ps``) and TensorFlow's partitioned
variables (``partitioned.partition_variable``), for real: on one cluster of 2 ps and 3 workers
whose every link holds each message for 100 ms.

What is asserted is what TensorFlow and the delay guarantee: the bytes on every link (exact),
where every shard lives, and lower bounds that the delay puts under a step. Which method is
faster by how much is measured in ``benchmarks/alpha_beta.py``; the one ordering checked here
has a margin of two whole delays (200 ms), which no busy machine closes."""

from __future__ import annotations

import pytest
from conftest import share_cluster

import dtfkit
from dtfkit.engine.platform import netns
from dtfkit.recipes import allreduce, partitioned, timeline

FLOATS = 1200  # divisible by 2 and 3
DELAY, D = "100ms", 0.1


@pytest.fixture(scope="module")
def delayed():
    ok, why = netns.isolation_available()
    if not ok:
        pytest.skip(f"delay= needs user namespaces: {why}")
    cluster = dtfkit.LocalCluster(ps=2, workers=3, delay=DELAY, progress=False, name=None, start_timeout=180)
    with share_cluster(cluster):
        yield cluster


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_sharded_ps_sums_right_and_moves_the_bytes_of_the_formula(delayed):
    (runs,) = delayed.run(
        allreduce.sync_sweep,
        args=([2, 3], FLOATS),
        kwargs={"methods": ("sharded_ps",)},
        on="client",
        timeout=300,
    ).values()
    assert [(r["method"], r["n"]) for r in runs] == [("sharded_ps", 2), ("sharded_ps", 3)]
    for run in runs:
        assert run["correct"], (run["n"], run["max_error"])
        assert run["bytes"] == allreduce.expected_bytes("sharded_ps", run["n"], FLOATS), run["transfers"]
    for n in (2, 3):
        records = allreduce.trace_steps(delayed, "sharded_ps", n, FLOATS, steps=1, timeout=240)
        ledger = timeline.link_bytes(records)[0]
        # every link carries the formula's bytes exactly; no ps task is involved
        assert ledger == allreduce.expected_link_bytes("sharded_ps", n, FLOATS), records
        for w in range(n):
            sent = sum(v for (a, _), v in ledger.items() if a == f"worker:{w}")
            received = sum(v for (_, b), v in ledger.items() if b == f"worker:{w}")
            assert sent == received == 2 * (n - 1) * 4 * FLOATS // n


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_partitioned_variable_is_spread_round_robin_over_the_ps_tasks(delayed):
    (report,) = delayed.run(
        partitioned.partition_variable, args=(FLOATS, 3), on="client", timeout=240
    ).values()
    shards = report["shards"]
    assert [(s["shard"], s["asked"], s["task"], s["shape"]) for s in shards] == [
        (0, "ps:0", "ps:0", [400]),
        (1, "ps:1", "ps:1", [400]),
        (2, "ps:0", "ps:0", [400]),
    ]
    assert [s["variable"] for s in shards] == [f"partitioned/part_{i}" for i in range(3)]
    # reading it on worker:0 moves each shard from its ps: two shards from ps:0, one from ps:1
    assert report["sent_to_worker"] == {"ps:0": 2 * 1600, "ps:1": 1600}
    # each shard's own read moved its 400 float32 numbers, as the trace measured them
    assert [s["sent_bytes"] for s in shards] == [1600, 1600, 1600], shards
    assert report["correct"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_with_a_long_delay_and_a_tiny_gradient_the_ring_is_slowest(delayed):
    """The ring's 2(n - 1) = 4 rounds each wait for the one before and cross a link, so each
    costs at least d: a ring step takes at least 4d, whatever the machine does. The ps and the
    sharded ps need 2 rounds; everything else a step pays is the same for all three, so they
    are expected 2d = 200 ms faster: the margin of the ordering asserted."""
    n = 3
    (rows,) = delayed.run(
        allreduce.time_sync, args=(allreduce.METHODS, n, [300]), kwargs={"steps": 3}, on="client", timeout=240
    ).values()
    fastest = {r["method"]: min(r["seconds"]) for r in rows}
    assert sorted(fastest) == ["none", "ps", "ring", "sharded_ps"]
    assert all(len(r["seconds"]) == 3 for r in rows)
    assert fastest["ring"] >= 2 * (n - 1) * D
    assert fastest["ps"] >= 2 * D and fastest["sharded_ps"] >= 2 * D
    assert fastest["ring"] > fastest["ps"], fastest
    assert fastest["ring"] > fastest["sharded_ps"], fastest
