"""``dtfkit.recipes.compression``: gradients compressed on the worker, decompressed on ps:0. The
bytes traced on the wire equal the formulas exactly; error feedback loses nothing (what ps:0
received plus the residual is the sum of the raw gradients); training still learns."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import doctest_recipe

import dtfkit
from dtfkit.recipes import compression

HIDDEN = 16  # 1210 floats: not a multiple of 8, so the sign method's last byte is padded
FLOATS = compression.model_floats(HIDDEN)


# ------------------------------------------------------------- without TensorFlow
def test_docstring_examples():
    result = doctest_recipe(compression)
    assert result.attempted >= 6 and result.failed == 0


def test_byte_formulas():
    assert FLOATS == 64 * 16 + 16 + 16 * 10 + 10 == 1210
    want = {"none": 4 * 1210, "fp16": 2 * 1210, "bf16": 2 * 1210, "topk": 8 * 12, "sign": 152 + 4}
    for method, to_ps in want.items():
        k = 12 if method == "topk" else None
        assert compression.expected_compressed_bytes(method, FLOATS, k) == {
            "to_ps": to_ps,
            "from_ps": 4 * 1210,
        }
    assert compression.expected_compressed_bytes("sign", 8)["to_ps"] == 1 + 4
    assert compression.expected_compressed_bytes("sign", 9)["to_ps"] == 2 + 4
    assert compression.expected_compressed_bytes("topk", 5, k=5)["to_ps"] == 40  # more than "none" sends
    assert compression.default_k(FLOATS) == 12 and compression.default_k(50) == 1


@pytest.mark.parametrize(
    ("method", "floats", "k", "workers", "match"),
    [
        ("gzip", 100, None, 2, "method must be one of"),
        ("topk", 100, 0, 2, "k .* must be an integer >= 1, not 0"),
        ("topk", 100, 101, 2, "k=101 is more entries than the gradient has"),
        ("topk", 100, None, 2, 'method "topk" needs k'),
        ("topk", 100, 2.5, 2, "not 2.5"),
        ("fp16", 100, 3, 2, "k=3 is for method"),
        ("none", 0, None, 2, "floats"),
        ("none", 100, None, 0, "workers .* not 0"),
    ],
)
def test_bad_arguments_name_the_bad_value(method, floats, k, workers, match):
    with pytest.raises(ValueError, match=match):
        compression.check_args(method, floats, k, workers)


class UnusedCluster:
    """Stands in for a cluster of 1 ps + 2 workers; a call on it fails the test."""

    cluster_spec = {"ps": ["localhost:1"], "worker": ["localhost:2", "localhost:3"]}

    def run(self, *args, **kwargs):
        raise AssertionError("compare() reached the cluster with bad arguments")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"methods": ["none", "zip"]}, "method must be one of"),
        ({"methods": ["topk"], "k": 0}, "must be an integer >= 1"),
        ({"methods": ["topk"], "k": FLOATS + 1}, f"k={FLOATS + 1} is more entries"),
        ({"workers": 0}, "workers .* not 0"),
        (
            {"workers": 3},
            r"workers=3 but the cluster has 2: start one with dtfkit.LocalCluster\(ps=1, workers=3\)",
        ),
        ({"methods": []}, "methods is empty"),
        ({"steps": 2}, "steps must be an integer >= 3"),
        ({"hidden": -1}, "hidden"),
    ],
)
def test_compare_refuses_before_anything_starts(no_spawn, kwargs, match):
    kwargs = {"hidden": HIDDEN, **kwargs}
    with pytest.raises(ValueError, match=match):
        compression.compare(UnusedCluster(), **kwargs)
    assert no_spawn == []


def test_compare_needs_a_ps(no_spawn):
    class NoPs(UnusedCluster):
        cluster_spec = {"worker": ["localhost:2", "localhost:3"]}

    with pytest.raises(ValueError, match=r"LocalCluster\(ps=1"):
        compression.compare(NoPs(), ["none"])


def fake_runs() -> list[dict]:
    runs = []
    for method, acc in zip(compression.METHODS, (0.95, 0.94, 0.93, 0.85, 0.9), strict=True):
        k = 12 if method == "topk" else None
        expected = compression.expected_compressed_bytes(method, FLOATS, k)
        runs.append(
            {
                "method": method,
                "k": k,
                "bytes_to_ps": {"worker:0": expected["to_ps"], "worker:1": expected["to_ps"]},
                "bytes_from_ps": {"worker:0": expected["from_ps"], "worker:1": expected["from_ps"]},
                "expected": expected,
                "step_seconds": [0.02, 0.03, 0.025] if method == "none" else [0.01, 0.012, 0.011],
                "accuracy": acc,
            }
        )
    return runs


def test_plot_has_one_labelled_point_per_method():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = fake_runs()
    left, right = compression.plot_tradeoff(runs)
    try:
        points = left.collections
        assert len(points) == len(runs)
        assert [c.get_label() for c in points] == ["none", "fp16", "bf16", "topk (k=12)", "sign"]
        xs = [float(c.get_offsets()[0][0]) for c in points]
        assert xs == [r["expected"]["to_ps"] for r in runs]
        assert [t.get_text() for t in left.texts] == ["none", "fp16", "bf16", "topk (k=12)", "sign"]
        assert left.get_xscale() == "log"
        assert left.get_ylim() == pytest.approx((0.75, 1.0))
        assert [t.get_text() for t in right.get_yticklabels()] == [c.get_label() for c in points]
        assert [round(p.get_width(), 6) for p in right.patches] == [25.0, 11.0, 11.0, 11.0, 11.0]
    finally:
        plt.close(left.figure)
    with pytest.raises(ValueError, match="no runs"):
        compression.plot_tradeoff([])


def test_table_gives_ratios_against_none():
    lines = compression.table(fake_runs()).splitlines()
    assert len(lines) == 2 + 5
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert [c[0] for c in cells] == ["none", "fp16", "bf16", "topk (k=12)", "sign"]
    assert [c[3] for c in cells] == ["1.00", "0.50", "0.50", f"{96 / 4840:.2f}", f"{156 / 4840:.2f}"]
    assert [c[6] for c in cells] == ["1.00", "0.44", "0.44", "0.44", "0.44"]


# ------------------------------------------------------------------- real TensorFlow
@pytest.fixture(scope="module")
def runs(shared_cluster):
    """Every method, a few steps, with the sums kept (one client task)."""
    return compression.compare(shared_cluster, hidden=HIDDEN, steps=4, k=12, sums=True, timeout=300)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_traced_bytes_equal_the_formula_for_every_method(runs):
    assert [r["method"] for r in runs] == list(compression.METHODS)
    for r in runs:
        want = compression.expected_compressed_bytes(r["method"], FLOATS, r["k"])
        assert r["expected"] == want
        both = ("worker:0", "worker:1")
        assert r["bytes_to_ps"] == dict.fromkeys(both, want["to_ps"]), r["transfers"]
        assert r["bytes_from_ps"] == dict.fromkeys(both, want["from_ps"]), r["transfers"]
        # every transfer is between a worker and ps:0: workers never talk to each other
        assert {(src == "ps:0") != (dst == "ps:0") for src, dst, _, _ in r["transfers"]} == {True}
    sign = next(r for r in runs if r["method"] == "sign")
    assert sorted(b for src, _, _, b in sign["transfers"] if src == "worker:0") == [4, 152]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_error_feedback_loses_nothing(runs):
    for r in runs:
        for worker, sums in r["sums"].items():
            received, residual, raw = sums["received"], sums["residual"], sums["raw"]
            assert raw.shape == (FLOATS,) and np.abs(raw).max() > 0
            if r["method"] == "none":
                np.testing.assert_array_equal(received, raw)
            if r["method"] in ("topk", "sign"):
                assert np.abs(residual).max() > 0, (r["method"], worker)  # something was held back
                np.testing.assert_allclose(received + residual, raw, rtol=1e-5, atol=1e-5 * np.abs(raw).max())
            else:
                assert not residual.any()
    topk = next(r for r in runs if r["method"] == "topk")
    # at most k entries a step, 4 steps: ps:0 has seen at most 4 k entries of each worker
    assert all(np.count_nonzero(s["received"]) <= 4 * 12 for s in topk["sums"].values())


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_without_error_feedback_the_rest_is_lost(cluster):
    (run,) = compression.compare(
        cluster, ["topk"], hidden=HIDDEN, steps=4, k=12, sums=True, error_feedback=False
    )
    for sums in run["sums"].values():
        assert not sums["residual"].any()
        gap = np.abs(sums["raw"] - sums["received"]).max()
        assert gap > 0.1 * np.abs(sums["raw"]).max()
    assert run["bytes_to_ps"]["worker:0"] == 8 * 12


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_training_learns_and_fp16_keeps_the_accuracy(cluster):
    none, fp16 = compression.compare(cluster, ["none", "fp16"])
    assert none["accuracy"] > 0.5, none["loss"]
    assert abs(fp16["accuracy"] - none["accuracy"]) < 0.05, (none["accuracy"], fp16["accuracy"])
    assert none["loss"][-1] < 0.5 * none["loss"][0]
    assert none["median_step_seconds"] == np.median(none["step_seconds"])
    assert len(none["loss"]) == compression.STEPS - 1 and len(none["step_seconds"]) == compression.STEPS - 2


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.timeout(400)
def test_the_weights_going_down_set_a_floor_on_every_step():
    """Over a 50 mbit/s link ps:0 sends each of 2 workers the float32 weights every step, whatever
    the gradients are compressed to: every step takes at least half of those bytes over the rate
    (a busy machine makes a step slower, never faster; the token bucket's burst is 10 ms)."""
    from dtfkit.engine.platform import netns

    ok, why = netns.isolation_available()
    if not ok:
        pytest.skip(f"user namespaces are not available here: {why}")
    with dtfkit.LocalCluster(ps=1, workers=2, link="50mbit", progress=False, name=None) as linked:
        runs = compression.compare(linked, ["none", "sign"], steps=8)
    floor = (
        2 * compression.expected_compressed_bytes("sign", compression.model_floats())["from_ps"] * 8 / 50e6
    )
    for run in runs:
        assert len(run["step_seconds"]) == 6
        assert min(run["step_seconds"]) >= 0.5 * floor, (run["method"], run["step_seconds"], floor)
