"""``dtfkit.recipes.alpha_beta``: the α–β model of ps, sharded ps and ring, checked against values
computed by hand; its crossover, its plot, and the refusals of ``measure`` (no TensorFlow here)."""

from __future__ import annotations

import math

import matplotlib
import pytest
from conftest import doctest_recipe

from dtfkit.recipes import alpha_beta

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ALPHA, BETA = 0.001, 1e-8  # 1 ms, 100 MB/s


def test_docstring_examples():
    result = doctest_recipe(alpha_beta)
    assert result.attempted >= 6 and result.failed == 0


@pytest.mark.parametrize(
    ("method", "n", "size", "want"),
    [
        # ps: 2α + 2·n·S·β
        ("ps", 3, 300_000, 0.002 + 2 * 3 * 0.003),
        ("ps", 4, 1_000_000, 0.002 + 2 * 4 * 0.01),
        ("ps", 1, 1_000, 0.002 + 2 * 1e-5),
        # sharded: 2α + 2(n-1)·S·β/n
        ("sharded_ps", 3, 300_000, 0.002 + 2 * 2 * 0.001),
        ("sharded_ps", 4, 1_000_000, 0.002 + 2 * 3 * 0.0025),
        ("sharded_ps", 1, 1_000, 0.0),
        # ring: 2(n-1)·(α + S·β/n)
        ("ring", 3, 300_000, 4 * (0.001 + 0.001)),
        ("ring", 4, 1_000_000, 6 * (0.001 + 0.0025)),
        ("ring", 2, 0, 2 * 0.001),
        ("ring", 1, 1_000, 0.0),
    ],
)
def test_model_times_computed_by_hand(method, n, size, want):
    assert alpha_beta.alpha_beta_time(method, n, size, ALPHA, BETA) == pytest.approx(want, rel=1e-12)


def test_sharded_and_ring_carry_the_same_bytes_and_the_sharded_ps_pays_fewer_rounds():
    for n in (2, 3, 8):
        _, sharded = alpha_beta.model_terms("sharded_ps", n, ALPHA, BETA)
        _, ring = alpha_beta.model_terms("ring", n, ALPHA, BETA)
        _, ps = alpha_beta.model_terms("ps", n, ALPHA, BETA)
        assert sharded == ring == pytest.approx(2 * (n - 1) / n * BETA)
        assert ps == 2 * n * BETA
        for size in (0, 1e3, 1e9):
            assert alpha_beta.alpha_beta_time(
                "sharded_ps", n, size, ALPHA, BETA
            ) <= alpha_beta.alpha_beta_time("ring", n, size, ALPHA, BETA)


def test_crossover_of_ps_and_ring():
    # n = 3: S* = n (n - 2) α / ((n² - n + 1) β) = 3 · 1 · 1e-3 / (7 · 1e-8)
    size = alpha_beta.crossover_size("ps", "ring", 3, alpha_s=ALPHA, beta_s_per_byte=BETA)
    assert size == pytest.approx(3e-3 / 7e-8)
    assert alpha_beta.crossover_size("ring", "ps", 3, alpha_s=ALPHA, beta_s_per_byte=BETA) == pytest.approx(
        size
    )

    def t(method, s):
        return alpha_beta.alpha_beta_time(method, 3, s, ALPHA, BETA)

    assert t("ps", size) == pytest.approx(t("ring", size))
    assert t("ps", size / 2) < t("ring", size / 2)  # fewer rounds win small messages
    assert t("ring", size * 2) < t("ps", size * 2)  # fewer bytes on the busiest link win big ones
    # n = 8: 8 · 6 α / (57 β)
    assert alpha_beta.crossover_size("ps", "ring", 8, alpha_s=ALPHA, beta_s_per_byte=BETA) == pytest.approx(
        48e-3 / 57e-8
    )


def test_no_crossover_where_the_lines_do_not_swap():
    kw = {"alpha_s": ALPHA, "beta_s_per_byte": BETA}
    assert alpha_beta.crossover_size("ps", "ring", 2, **kw) is None  # n = 2: ring never slower
    assert alpha_beta.crossover_size("sharded_ps", "ring", 5, **kw) is None
    assert alpha_beta.crossover_size("sharded_ps", "ps", 5, **kw) is None  # same α, fewer bytes
    assert alpha_beta.crossover_size("ring", "ring", 5, **kw) is None
    assert alpha_beta.crossover_size("ps", "ring", 3, alpha_s=0.0, beta_s_per_byte=BETA) is None


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (("tree", 3, 10, ALPHA, BETA), "method must be one of .*'tree'"),
        (("ring", 0, 10, ALPHA, BETA), "n .* integer >= 1, not 0"),
        (("ring", True, 10, ALPHA, BETA), "n .* integer >= 1, not True"),
        (("ring", 2.0, 10, ALPHA, BETA), "n .* integer >= 1, not 2.0"),
        (("ring", 3, -1, ALPHA, BETA), "size_bytes must be a finite number >= 0, not -1"),
        (("ring", 3, math.inf, ALPHA, BETA), "size_bytes must be a finite number >= 0, not inf"),
        (("ring", 3, "1kB", ALPHA, BETA), "size_bytes .* not '1kB'"),
        (("ps", 3, 10, -0.001, BETA), "alpha_s must be a finite number >= 0, not -0.001"),
        (("ps", 3, 10, ALPHA, math.nan), "beta_s_per_byte must be a finite number >= 0, not nan"),
    ],
)
def test_bad_model_arguments_name_the_value(args, complaint):
    with pytest.raises(ValueError, match=complaint):
        alpha_beta.alpha_beta_time(*args)


def test_crossover_refuses_an_unknown_method():
    with pytest.raises(ValueError, match="method must be one of .*'allreduce'"):
        alpha_beta.crossover_size("ps", "allreduce", 3, alpha_s=ALPHA, beta_s_per_byte=BETA)


ROWS = [
    {"delay": "20ms", "bytes": 1_200, "method": "ps", "comm_s": 0.060},
    {"delay": "20ms", "bytes": 1_200, "method": "sharded_ps", "comm_s": 0.061},
    {"delay": "20ms", "bytes": 1_200, "method": "ring", "comm_s": 0.101},
    {"delay": "20ms", "bytes": 1_200_000, "method": "ps", "comm_s": 0.64},
    {"delay": "20ms", "bytes": 1_200_000, "method": "sharded_ps", "comm_s": 0.13},
    {"delay": "20ms", "bytes": 1_200_000, "method": "ring", "comm_s": 0.19},
    {"delay": "1ms", "bytes": 1_200, "method": "ring", "comm_s": -0.0002},
]


def test_fastest_per_delay_and_size():
    assert alpha_beta.fastest(ROWS) == {
        ("1ms", 1_200): "ring",
        ("20ms", 1_200): "ps",
        ("20ms", 1_200_000): "sharded_ps",
    }


def test_plot_draws_the_three_models_the_points_and_the_crossover():
    try:
        ax = alpha_beta.plot_alpha_beta(3, 0.02, 8e-8, measured=ROWS)
        lines = {line.get_gid(): line for line in ax.get_lines()}
        assert {f"model:{m}" for m in alpha_beta.METHODS} | {"crossover"} == set(lines)
        x, y = lines["model:ring"].get_data()
        assert y[0] == pytest.approx(alpha_beta.alpha_beta_time("ring", 3, x[0], 0.02, 8e-8))
        assert min(x) < 1_200 and max(x) > 1_200_000  # the model spans the measured sizes
        where = alpha_beta.crossover_size("ps", "ring", 3, alpha_s=0.02, beta_s_per_byte=8e-8)
        assert lines["crossover"].get_xdata()[0] == pytest.approx(where)
        points = {c.get_gid(): len(c.get_offsets()) for c in ax.collections}
        # the 1 ms ring row is below 0 s: not on a log axis, counted in a note
        assert points == {"measured:ps": 2, "measured:sharded_ps": 2, "measured:ring": 2}
        assert [t.get_text() for t in ax.texts] == ["1 measured point(s) at or below 0 s not drawn"]
        assert ax.get_xscale() == ax.get_yscale() == "log"
        assert "α = 20 ms" in ax.get_title() and "12.5 MB/s" in ax.get_title()
    finally:
        plt.close("all")
    with pytest.raises(ValueError, match="method must be one of"):
        alpha_beta.plot_alpha_beta(3, 0.02, 8e-8, methods=("ps", "tree"))
    plt.close("all")


@pytest.mark.parametrize(
    ("kwargs", "complaint"),
    [
        ({"delays": "20ms"}, "delays must be a list of delays"),
        ({"delays": ["20 ms"]}, "'20 ms'"),
        ({"delays": []}, "delays must be a list"),
        ({"sizes": [1_000]}, "size 1000 is not a whole number of float32 chunks.*multiple of 4·n = 12"),
        ({"sizes": [0]}, "size 0 is not"),
        ({"sizes": 1_200}, "sizes must be a list"),
        ({"n": 1}, "n .* integer >= 2, not 1"),
        ({"steps": 0}, "steps must be an integer >= 1, not 0"),
        ({"link": "fast"}, "link rate 'fast' is not a rate"),
        ({"methods": ("ps", "tree")}, "method must be one of .*'tree'"),
        ({"trace": "yes"}, "trace must be True .* or False, not 'yes'"),
    ],
)
def test_measure_refuses_bad_input_before_anything_starts(no_spawn, kwargs, complaint):
    with pytest.raises(ValueError, match=complaint):
        alpha_beta.measure(**kwargs)
    assert no_spawn == []


# ------------------------------------------------------------------- real TensorFlow
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_measure_on_a_real_delayed_cluster():
    """``measure``'s plumbing, on one small cluster: a row per method, the empty step subtracted,
    and the lower bound the delay guarantees on the communication (not on the step, whose calls
    alone cost about 4d): each round of messages crosses a link and waits for the one before, so
    a traced step's transfers span >= rounds × d, and each logged transfer takes >= d."""
    from dtfkit.engine.platform import netns

    ok, why = netns.isolation_available()
    if not ok:
        pytest.skip(f"link= and delay= need user namespaces: {why}")
    rows = alpha_beta.measure(delays=("10ms",), sizes=(1_200,), n=3, steps=2, trace=True)
    assert [r["method"] for r in rows] == list(alpha_beta.METHODS)
    for r in rows:
        assert (r["delay"], r["d_s"], r["bytes"], r["n"], len(r["seconds"])) == ("10ms", 0.01, 1_200, 3, 2)
        assert r["rate_bytes_per_s"] == 100e6 / 8
        assert r["comm_s"] == pytest.approx(r["median_s"] - r["empty_s"])
        rounds = 4 if r["method"] == "ring" else 2
        assert r["transfers"] and r["comm_span_s"] >= 0.9 * rounds * 0.01, r
        assert r["comm_span_s"] == alpha_beta.comm_span_s(r["transfers"])
        for t in r["transfers"]:
            assert t["timed_by"] != "rpc" or t["end_us"] - t["ready_us"] >= 0.9 * 10_000, t
    assert set(alpha_beta.fastest(rows)) == {("10ms", 1_200)}
    try:
        ax = alpha_beta.plot_alpha_beta(3, 0.01, 8e-8, measured=rows, key="median_s")
        assert {c.get_gid() for c in ax.collections} == {f"measured:{m}" for m in alpha_beta.METHODS}
    finally:
        plt.close("all")
