"""``dtfkit.recipes.predict``: the message graphs against the traced bytes' formulas, the play-out
against two independent writings of the same model (chapter 11's α–β, the round model of check 13.2),
the fit on runs whose costs are known, and the task side on a real cluster."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from conftest import doctest_recipe

import dtfkit
from dtfkit.course.check import ch13
from dtfkit.recipes import allreduce, alpha_beta, predict
from dtfkit.recipes.predict import kernel_side

LINK = predict.Link.of("0ms", "1gbit")


def test_docstring_examples():
    result = doctest_recipe(predict)
    assert result.attempted >= 8 and result.failed == 0


@pytest.mark.parametrize("algorithm", allreduce.ALGORITHMS)
@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7])
def test_each_graph_sends_the_bytes_the_formulas_give(algorithm, n):
    floats = 60 * n
    per_task: dict[str, dict[str, int]] = {}
    per_link: dict[tuple[str, str], int] = {}
    for step in predict.steps(algorithm, n, 4 * floats):
        if step.to is None:
            continue
        per_task.setdefault(step.task, {"sent": 0, "received": 0})["sent"] += step.nbytes
        per_task.setdefault(step.to, {"sent": 0, "received": 0})["received"] += step.nbytes
        per_link[step.task, step.to] = per_link.get((step.task, step.to), 0) + step.nbytes
    assert per_task == allreduce.expected_bytes(algorithm, n, floats)
    assert per_link == allreduce.expected_link_bytes(algorithm, n, floats)


def test_every_add_waits_for_what_it_adds_and_no_graph_has_a_cycle():
    for algorithm in allreduce.ALGORITHMS:
        for n in range(2, 9):
            graph = predict.steps(algorithm, n, 4 * 840)
            for i, step in enumerate(graph):
                assert all(j < i for j in step.after), (algorithm, n, i)  # built in an order that runs
                if step.to is None:  # an add reads what arrived at its task
                    assert step.after and all(graph[j].to == step.task for j in step.after), (algorithm, n, i)


def test_without_tensorflow_the_play_out_is_chapter_11s_alpha_beta():
    rng = random.Random(11)
    for _ in range(300):
        method = rng.choice(alpha_beta.METHODS)
        n = rng.randint(2, 12)
        size = 4 * n * rng.randint(1, 10**6)
        d, rate = rng.uniform(0, 0.03), rng.uniform(1e6, 1e10)
        want = alpha_beta.alpha_beta_time(method, n, size, d, 1 / rate)
        assert math.isclose(predict.plain_alpha_beta(method, n, size, d, rate), want, rel_tol=1e-9)


def test_the_play_out_is_the_round_model_the_exercise_checks():
    """ch13._round_seconds writes the round model out as closed forms; the play-out of the same graphs
    (no TensorFlow calls, no CPU, no token bucket) must give the same time for every algorithm."""
    rng = random.Random(13)
    for _ in range(400):
        algorithm = rng.choice(ch13.ALGORITHMS)
        n = rng.choice(ch13.FULL_TREES) if algorithm == "tree" else rng.randint(2, 12)
        size = 4 * n * rng.randint(1, 10**6)
        d = rng.uniform(0, 0.03)
        alpha, kappa, beta, gamma = ch13._draw_link(rng)
        want = ch13._round_seconds(algorithm, n, size, d, (alpha, kappa, beta, gamma))
        graph = predict.steps(algorithm, n, size)
        played = kernel_side._play(
            graph, (alpha, kappa, 0.0, beta, 0.0, gamma), predict.Link(d, math.inf), tensorflow=False
        )
        assert math.isclose(played.seconds, want, rel_tol=1e-9), (algorithm, n, size)


def test_a_critical_paths_counts_give_its_time():
    rng = random.Random(5)
    for _ in range(100):
        algorithm = rng.choice(allreduce.ALGORITHMS)
        n = rng.randint(2, 6)
        params = [rng.uniform(0, 1e-3), rng.uniform(0, 1e-3), rng.uniform(0, 1e-3)]
        params += [rng.uniform(0, 1e-8), rng.uniform(0, 1e-8), rng.uniform(0, 1e-8)]
        link = predict.Link.of(rng.choice(["0ms", "1ms", "20ms"]), rng.choice(["100mbit", "1gbit"]))
        priced = predict.price(predict.steps(algorithm, n, 4 * n * rng.randint(1, 10**6)), params, link)
        at = (*params, link.d_s, 1.0)
        assert math.isclose(
            priced.seconds, sum(c * a for c, a in zip(priced.counts, at, strict=True)), rel_tol=1e-9
        )


@pytest.mark.parametrize(
    ("algorithm", "hops"),
    [
        ("ps", [3, 3, 3, 3, 3]),
        ("sharded_ps", [2, 3, 3, 3, 3]),
        ("ring", [2, 5, 7, 9, 11]),
        ("tree", [2, 2, 5, 5, 5]),
    ],
)
def test_the_delays_a_synchronisation_pays_under_tensorflows_calls(algorithm, hops):
    """Worked out by hand from the calls (a remote piece starts d late; a request crosses before its
    answer; the master hears d late; less the empty step's 2d): for 2 workers the peers' every message
    has worker:0 at one end, and so has the tree's for 3."""
    nothing = (0.0,) * len(predict.PARAMS)
    got = [
        predict.price(predict.steps(algorithm, n, 4 * n), nothing, predict.Link(1.0, math.inf)).counts[
            predict.TERMS.index("d_s")
        ]
        for n in range(2, 7)
    ]
    assert got == hops


def test_a_full_token_bucket_lets_a_message_through_at_once_and_a_larger_one_waits():
    burst = LINK.burst_bytes
    nothing = (0.0,) * len(predict.PARAMS)
    small = predict.price(predict.steps("tree", 2, int(burst // 8) * 4), nothing, LINK)
    assert small.seconds == 0.0
    large = predict.price(predict.steps("tree", 2, int(2 * burst)), nothing, LINK)
    # up: 2·burst bytes through full buckets wait burst / r; down: the buckets refilled that long, again
    assert math.isclose(large.seconds, 2 * burst / LINK.rate_bytes_per_s, rel_tol=1e-9)


def _runs(params, rng):
    rows = []
    for delay in ("0ms", "5ms"):
        link = predict.Link.of(delay, "1gbit")
        for n in (3, 6):
            for size in (1_200, 120_000, 1_200_000, 7_200_000):
                for algorithm in allreduce.ALGORITHMS:
                    exact = predict.price(predict.steps(algorithm, n, size), params, link).seconds
                    rows.append(
                        {
                            "delay": delay,
                            "d_s": link.d_s,
                            "link": "1gbit",
                            "rate_bytes_per_s": link.rate_bytes_per_s,
                            "method": algorithm,
                            "n": n,
                            "bytes": size,
                            "comm_s": exact * (1 + rng.gauss(0, 0.0)),
                        }
                    )
    return rows


def test_the_fit_finds_the_costs_of_runs_priced_with_known_costs():
    rng = random.Random(1)
    truth = (1.2e-4, 2.0e-4, 1.5e-4, 3e-10, 1.0e-9, 6e-10)
    fitted = predict.fit(_runs(truth, rng))
    errs = predict.errors(_runs(truth, rng), fitted)
    assert predict.summary(errs)["median"] < 1e-6
    assert all(e["error"] == pytest.approx(0, abs=1e-6) for e in errs)
    assert fitted.runs == 64 and all(math.isfinite(s) for s in fitted.stderr)


def test_a_fit_from_a_wrong_start_still_predicts_and_refuses_too_few_runs():
    rng = random.Random(2)
    truth = (0.0, 2.2e-4, 1.3e-4, 0.0, 1.0e-9, 2e-10)
    rows = _runs(truth, rng)
    fitted = predict.fit(rows, start=(1e-2, 0.0, 0.0, 1e-6, 0.0, 0.0))
    assert max(abs(e["error"]) for e in predict.errors(rows, fitted)) < 1e-3
    with pytest.raises(ValueError, match="more runs than parameters"):
        predict.fit(rows[:6])


def test_picks_count_the_same_program_as_right():
    assert predict.same_graph("ring", "sharded_ps", 2, 800)
    assert not predict.same_graph("ring", "sharded_ps", 3, 1200)
    assert not predict.same_graph("tree", "ring", 2, 800)
    rows = [
        {"delay": "1ms", "n": 2, "bytes": 800, "method": m, "comm_s": c, "predicted_s": p}
        for m, c, p in [("ring", 1.0, 2.0), ("sharded_ps", 1.1, 1.0), ("tree", 3.0, 3.0), ("ps", 4.0, 4.0)]
    ]
    (choice,) = predict.choices(rows)
    assert choice["picked"] == "sharded_ps" and choice["fastest"] == "ring" and choice["right"]
    rows[2]["predicted_s"] = 0.5  # now the model picks the tree, which measured 3x slower
    (choice,) = predict.choices(rows)
    assert not choice["right"] and choice["slower_by"] == pytest.approx(2.0)


def test_buckets_follow_tensorflows_packing_rule():
    """CollectiveAllReduce._all_reduce reverses the gradients, then cross_device_utils.group_by_size
    lets a pack take tensors until it holds more than bytes_per_pack."""
    assert predict.packs([10, 10, 10], 0) == [[2, 1, 0]]
    assert predict.packs([10, 10, 10], 1) == [[2], [1], [0]]
    assert predict.packs([10, 10, 10], 10) == [[2, 1], [0]]  # 10 is not more than 10: the second joins
    assert predict.packs([10, 10, 10], 15) == [[2, 1], [0]]
    assert predict.packs([5, 5, 30], 20) == [[2], [1, 0]]
    graph = predict.bucket_steps("ring", 3, [120] * 5, 1)
    assert len(graph) == 5 * len(predict.steps("ring", 3, 120))


def test_bad_input_is_refused_naming_the_value():
    with pytest.raises(ValueError, match="algorithm must be one of"):
        predict.steps("butterfly", 3, 120)
    with pytest.raises(ValueError, match="from 2 to 64"):
        predict.steps("ring", 1, 120)
    with pytest.raises(ValueError, match="multiple of 4·n = 12"):
        predict.steps("ring", 3, 100)
    with pytest.raises(ValueError, match="delay"):
        predict.measure(["soon"], [2], [1200])
    with pytest.raises(ValueError, match="multiple of 4·n = 24"):
        predict.measure(["1ms"], [6], [1000])


# ------------------------------------------------------------------ with TensorFlow
@pytest.mark.slow
def test_the_tree_and_the_buckets_on_a_real_cluster():
    with dtfkit.LocalCluster(ps=1, workers=4, link="1gbit", progress=False) as cluster:
        (traced,) = cluster.run(
            predict.trace_algorithms, args=(("tree", "ring"), (2, 3, 4), 1200), on="client", timeout=240
        ).values()
        for (algorithm, n), run in traced.items():
            assert run["correct"], (algorithm, n)
            assert run["bytes"] == allreduce.expected_bytes(algorithm, n, 1200)
        (rows,) = cluster.run(
            predict.time_buckets, args=("ring", 3, [300] * 6, [1, 2_000, 0]), kwargs={"steps": 1}, on="client"
        ).values()
        assert [r["buckets"] for r in rows] == [6, 3, 1]
        assert all(len(r["seconds"]) == 1 and r["median_s"] > 0 for r in rows)
        (overlap,) = cluster.run(
            predict.time_overlap,
            args=(2,),
            kwargs={"layers": 2, "width": 32, "batch": 16, "steps": 1},
            on="client",
        ).values()
        assert [r["way"] for r in overlap] == ["compute", "overlapped", "after"]
        with pytest.raises(dtfkit.TaskFailed, match="positive multiple of n = 3"):
            cluster.run(predict.time_buckets, args=("ring", 3, [100], [0]), on="client")
    assert np.isfinite([r["median_s"] for r in overlap]).all()
