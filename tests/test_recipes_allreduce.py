"""``dtfkit.recipes.allreduce``: ring all-reduce vs a parameter server, bytes traced from the
real transfers (real processes, real TensorFlow), and MultiWorkerMirroredStrategy's RING
all-reduce giving the same sum."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import doctest_recipe, share_cluster

import dtfkit
from dtfkit.recipes import allreduce

FLOATS = 1200  # divisible by 2, 3 and 4: equal chunks


# ------------------------------------------------------------- without TensorFlow
def test_docstring_examples():
    result = doctest_recipe(allreduce)
    assert result.attempted >= 6 and result.failed == 0


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_ring_schedule_sums_and_sends_one_chunk_per_worker_per_step(n):
    rng = np.random.default_rng(n)
    grads = [rng.normal(size=12 * n) for _ in range(n)]
    schedule = allreduce.ring_schedule(n)
    for phase in ("reduce_scatter", "all_gather"):
        assert len(schedule[phase]) == n - 1
        for step in schedule[phase]:
            assert sorted(src for src, _, _ in step) == list(range(n))
            assert all(dst == (src + 1) % n for src, dst, _ in step)
    for out in allreduce.simulate(schedule, grads):
        assert np.allclose(out, np.sum(grads, axis=0))


def test_a_ring_that_sends_to_the_left_gets_the_wrong_sum():
    n = 3
    left = {
        phase: [[(src, (src - 1) % n, c) for src, _, c in step] for step in steps]
        for phase, steps in allreduce.ring_schedule(n).items()
    }
    grads = [np.full(6, 10.0**i) for i in range(n)]
    outs = allreduce.simulate(left, grads)
    assert not all(np.allclose(o, 111.0) for o in outs)


def test_expected_bytes_formulas():
    size = FLOATS * 4
    for n in (2, 3, 4):
        ring, ps = allreduce.expected_bytes("ring", n, FLOATS), allreduce.expected_bytes("ps", n, FLOATS)
        assert ring["worker:0"]["sent"] == 2 * (n - 1) * size // n
        assert ps["ps:0"] == {"sent": n * size, "received": n * size}
        assert allreduce.busiest_link(ps) == n * size
    with pytest.raises(ValueError, match="method"):
        allreduce.expected_bytes("butterfly", 2, FLOATS)


@pytest.mark.parametrize("n", [2, 3, 4, 6])
def test_a_sharded_ps_moves_what_the_ring_moves_and_a_ps_gets_n_times_the_gradient(n):
    size = FLOATS * 4
    sharded = allreduce.expected_bytes("sharded_ps", n, FLOATS)
    assert sharded == allreduce.expected_bytes("ring", n, FLOATS)
    assert all(
        row == {"sent": 2 * (n - 1) * size // n, "received": 2 * (n - 1) * size // n}
        for row in sharded.values()
    )
    assert allreduce.busiest_link(sharded) * n == 2 * (n - 1) * size
    assert allreduce.busiest_link(allreduce.expected_bytes("ps", n, FLOATS)) == n * size
    links = allreduce.expected_link_bytes("sharded_ps", n, FLOATS)
    assert len(links) == n * (n - 1)  # every worker to every other: a slice up, the summed shard back
    assert set(links.values()) == {2 * size // n}


# ------------------------------------------------------------------- real TensorFlow
@pytest.mark.slow
def test_ring_and_ps_sums_and_traced_bytes(cluster_1ps_4w):
    (runs,) = cluster_1ps_4w.run(
        allreduce.sync_sweep, args=([2, 3, 4], FLOATS), on="client", timeout=300
    ).values()
    assert [(r["method"], r["n"]) for r in runs] == [(m, n) for n in (2, 3, 4) for m in ("ps", "ring")]
    for run in runs:
        assert run["correct"], (run["method"], run["n"], run["max_error"])
        assert run["bytes"] == allreduce.expected_bytes(run["method"], run["n"], FLOATS), run["transfers"]
        assert all(row["kind"] == "edge" for row in run["transfers"])
    ps_received = [r["bytes"]["ps:0"]["received"] for r in runs if r["method"] == "ps"]
    assert ps_received == sorted(ps_received) and ps_received[0] < ps_received[-1]
    ring4 = runs[-1]
    assert ring4["sum"].shape == (FLOATS,)
    assert len(ring4["transfers"]) == 4 * 2 * 3  # every worker sends 2 (n - 1) chunks


@pytest.mark.slow
def test_a_wrong_schedule_is_caught_for_real(cluster_1ps_4w):
    def left(n):
        return {
            phase: [[(src, (src - 1) % n, c) for src, _, c in step] for step in steps]
            for phase, steps in allreduce.ring_schedule(n).items()
        }

    (run,) = cluster_1ps_4w.run(
        allreduce.run_schedule_check, args=(left, 3, FLOATS), on="client", timeout=300
    ).values()
    assert not run["correct"]


@pytest.mark.slow
def test_grappler_changes_names_not_transfers(cluster_1ps_4w):
    """Why sync_run switches Grappler off: the same transfers and bytes either way, but Grappler's
    model pruner removes the Identity after each variable read, which the ps's rows are named after."""
    without, with_grappler = (
        next(
            iter(
                cluster_1ps_4w.run(
                    allreduce.sync_sweep,
                    args=([3], FLOATS),
                    kwargs={"grappler": on},
                    on="client",
                    timeout=300,
                ).values()
            )
        )
        for on in (False, True)
    )
    for off, on in zip(without, with_grappler, strict=True):
        assert on["correct"] and off["correct"]
        assert on["bytes"] == off["bytes"] == allreduce.expected_bytes(off["method"], 3, FLOATS)
        assert len(on["transfers"]) == len(off["transfers"])
    ps_off, ps_on = ({r["tensor"] for r in run[0]["transfers"]} for run in (without, with_grappler))
    assert ps_off == {"Identity", "Identity_1", "Identity_2", "ps_sum"}, ps_off
    assert "Identity" not in ps_on and "ps_sum" in ps_on, ps_on


@pytest.fixture(scope="module")
def cluster_1ps_4w():
    cluster = dtfkit.LocalCluster(ps=1, workers=4, progress=False, name=None)
    with share_cluster(cluster):
        yield cluster


@pytest.mark.slow
def test_multi_worker_mirrored_ring_gives_the_same_sum():
    with dtfkit.LocalCluster(workers=3, start_servers=False, progress=False) as cluster:
        results = cluster.run(allreduce.mwms_allreduce, args=(FLOATS,), kwargs={"repeats": 1}, timeout=180)
    want = np.sum([r["gradient"] for r in results.values()], axis=0)
    assert sorted(results) == ["worker:0", "worker:1", "worker:2"]
    for name, r in results.items():
        assert r["num_replicas"] == 3 and r["task"] == name
        assert np.allclose(r["sum"], want, atol=1e-5)
        assert len(r["seconds"]) == 1
