"""Exercises 11.1 and 11.2: the notebook's own solutions pass (with their hidden variants), and wrong
answers fail before any process starts (``no_spawn``) without giving the answer away.

11.1 ends with a real traced training step, so its solution's run is a slow test; every wrong
formula is caught by the plain-Python cases first. 11.2 is plain Python throughout."""

from __future__ import annotations

import math

import pytest
from test_exercises_5to9 import GIVEAWAYS, assert_fails_without_giving_away, solution, summary

from dtfkit.course import check

GIVEAWAYS["11.1"] = ["8 * k", "math.ceil(floats / 8) + 4", "2 * floats", "4 * floats"]
GIVEAWAYS["11.2"] = ["2 * (n - 1) * (alpha", "(n - 1) / n", "2 * n * size", "2 * alpha_s +"]


# ------------------------------------------------------------------------------ 11.1
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_11_1_the_notebooks_solution_passes_with_its_hidden_variant():
    answer = solution("11.1", "bytes_to_ps")
    outcome = summary(check.ch11.compressed_bytes(answer))
    assert outcome["status"] == "passed", outcome
    assert "traced step" in outcome["message"]
    hidden = summary(check.ch11.compressed_bytes(answer, hidden=True))
    assert hidden["status"] == "passed", hidden


def _right(method, floats, k=None):
    return {
        "none": 4 * floats,
        "fp16": 2 * floats,
        "bf16": 2 * floats,
        "topk": 8 * (k or 0),
        "sign": math.ceil(floats / 8) + 4,
    }[method]


def _wrong_topk_values_only(method, floats, k=None):
    return 4 * k if method == "topk" else _right(method, floats, k)


def _wrong_sign_no_scale(method, floats, k=None):
    return math.ceil(floats / 8) if method == "sign" else _right(method, floats, k)


def _wrong_sign_not_rounded(method, floats, k=None):
    return floats / 8 + 4 if method == "sign" else _right(method, floats, k)


def _wrong_fp16_as_float32(method, floats, k=None):
    return 4 * floats if method in ("fp16", "bf16") else _right(method, floats, k)


def _wrong_numbers_not_bytes(method, floats, k=None):
    return floats if method == "none" else _right(method, floats, k)


def _wrong_chapter_size_only(method, floats, k=None):
    _ = floats  # reads it, but answers for the chapter's model (38,410 floats) whatever it is
    return _right(method, 38_410, k)


@pytest.mark.parametrize(
    "wrong, expected",
    [
        (_wrong_topk_values_only, "*which* entries"),
        (_wrong_sign_no_scale, "one float32 number besides them"),
        (_wrong_sign_not_rounded, "whole bytes"),
        (_wrong_fp16_as_float32, "16-bit number"),
        (_wrong_numbers_not_bytes, "numbers, not bytes"),
        (_wrong_chapter_size_only, "you predicted"),  # right for 38,410 floats only
    ],
)
def test_11_1_wrong_formulas_fail_before_starting(no_spawn, wrong, expected):
    outcome = summary(check.ch11.compressed_bytes(wrong))
    assert_fails_without_giving_away("11.1", outcome, expected)
    assert no_spawn == []


def test_11_1_an_answer_that_ignores_k_fails_before_starting(no_spawn):
    def wrong(method, floats, k=None):
        return {"none": 4, "fp16": 2, "bf16": 2, "topk": 8 * floats // 100, "sign": 1 / 8}[method] * floats

    outcome = summary(check.ch11.compressed_bytes(wrong))
    assert_fails_without_giving_away("11.1", outcome, "never reads `k`")
    assert no_spawn == []


# ------------------------------------------------------------------------------ 11.2
def test_11_2_the_notebooks_solution_passes_with_its_hidden_variants(no_spawn):
    answer = solution("11.2", "sync_seconds")
    for hidden in (False, True, True):
        outcome = summary(check.ch11.alpha_beta(answer, hidden=hidden))
        assert outcome["status"] == "passed", outcome
    assert "107,143 bytes" in outcome["message"]
    assert no_spawn == []


def _wrong_ring_two_rounds(method, n, size_bytes, alpha_s, beta_s_per_byte):
    if method == "ring":
        return 2 * alpha_s + 2 * (n - 1) * size_bytes * beta_s_per_byte / n
    return _model(method, n, size_bytes, alpha_s, beta_s_per_byte)


def _wrong_ring_whole_gradient(method, n, size_bytes, alpha_s, beta_s_per_byte):
    if method == "ring":
        return 2 * (n - 1) * (alpha_s + size_bytes * beta_s_per_byte)
    return _model(method, n, size_bytes, alpha_s, beta_s_per_byte)


def _wrong_ps_one_way(method, n, size_bytes, alpha_s, beta_s_per_byte):
    if method == "ps":
        return 2 * alpha_s + n * size_bytes * beta_s_per_byte
    return _model(method, n, size_bytes, alpha_s, beta_s_per_byte)


def _wrong_sharded_as_ring(method, n, size_bytes, alpha_s, beta_s_per_byte):
    if method == "sharded_ps":
        return _model("ring", n, size_bytes, alpha_s, beta_s_per_byte)
    return _model(method, n, size_bytes, alpha_s, beta_s_per_byte)


def _wrong_milliseconds(method, n, size_bytes, alpha_s, beta_s_per_byte):
    return 1000 * _model(method, n, size_bytes, alpha_s, beta_s_per_byte)


def _model(method, n, size_bytes, alpha_s, beta_s_per_byte):
    """The α–β model written out (an answer that calls dtfkit's ``alpha_beta_time`` is refused)."""
    rounds = {"ps": 2, "sharded_ps": 2, "ring": 2 * (n - 1)}[method]
    busiest = n * size_bytes if method == "ps" else (n - 1) * size_bytes / n
    return rounds * alpha_s + 2 * busiest * beta_s_per_byte


@pytest.mark.parametrize(
    "wrong, expected",
    [
        (_wrong_ring_two_rounds, "how many rounds"),
        (_wrong_ring_whole_gradient, "one chunk"),
        (_wrong_ps_one_way, "twice"),
        (_wrong_sharded_as_ring, "2 rounds"),
        (_wrong_milliseconds, "milliseconds"),
    ],
)
def test_11_2_wrong_times_fail_with_a_hint(no_spawn, wrong, expected):
    assert_fails_without_giving_away("11.2", summary(check.ch11.alpha_beta(wrong)), expected)
    assert no_spawn == []


def test_11_2_an_answer_for_the_chapters_cluster_alone_fails(no_spawn):
    def wrong(method, n, size_bytes, alpha_s, beta_s_per_byte):
        _ = (n, beta_s_per_byte)  # reads every argument, so only the comparison can catch it
        return _model(method, 3, size_bytes, alpha_s, 8e-8)

    assert_fails_without_giving_away("11.2", summary(check.ch11.alpha_beta(wrong)), "you predicted")
    assert no_spawn == []


# ------------------------------------------------------------------------------ the checks' own expected values
def test_the_checks_count_the_payload_like_the_recipe_but_on_their_own():
    """11.1's expected bytes come from the payload's dtypes and lengths in the check, not from
    ``compression.expected_compressed_bytes``; the two must agree (else the chapter and its check drift)."""
    import random

    from dtfkit.course.check import ch11
    from dtfkit.recipes import compression

    rng = random.Random(11)
    for floats in [1, 7, 8, 9, 650, 38_410, *(rng.randint(1, 10**7) for _ in range(50))]:
        for method in compression.METHODS:
            k = rng.randint(1, floats) if method == "topk" else None
            mine = ch11._payload_bytes(method, floats, k)
            assert mine == compression.expected_compressed_bytes(method, floats, k)["to_ps"], (
                method,
                floats,
                k,
            )
    assert ch11._payload_bytes("sign", 9, None) == 2 + 4  # 9 signs need 2 bytes, and the float32 scale


def test_the_checks_price_a_sync_like_the_recipe_but_on_their_own():
    import random

    from dtfkit.course.check import ch11
    from dtfkit.recipes import alpha_beta

    rng = random.Random(12)
    for _ in range(200):
        method, n = rng.choice(alpha_beta.METHODS), rng.randint(2, 64)
        size, alpha, beta = rng.uniform(1, 1e9), 10 ** rng.uniform(-6, -1), 8 / 10 ** rng.uniform(7, 11)
        assert math.isclose(
            ch11._model_seconds(method, n, size, alpha, beta),
            alpha_beta.alpha_beta_time(method, n, size, alpha, beta),
            rel_tol=1e-12,
        )
    for n in (3, 4, 16):
        assert math.isclose(
            ch11._ps_ring_crossover(n, 0.02, 8e-8),
            alpha_beta.crossover_size("ps", "ring", n, alpha_s=0.02, beta_s_per_byte=8e-8),
            rel_tol=1e-12,
        )


def test_11_1_a_trace_that_disagrees_with_the_payloads_dtypes_fails_as_the_kits_fault(monkeypatch):
    """The traced step is compared with the check's own dtype arithmetic too: a kit whose payload
    grew (here: 4 bytes more than its tensors make) fails the check, naming the kit, not the learner."""
    import contextlib

    from dtfkit.course.check import ch11
    from dtfkit.recipes import compression

    class FakeCluster:
        def run(self, fn, args, kwargs, on, timeout):
            floats = compression.model_floats(kwargs["hidden"])  # the model the check drew
            runs = []
            for method in args[0]:
                k = kwargs["k"] if method == "topk" else None
                moved = ch11._payload_bytes(method, floats, k) + 4
                runs.append({"method": method, "bytes_to_ps": {"worker:0": moved}, "transfers": []})
            return {"worker:0": runs}

    monkeypatch.setattr(ch11, "cluster", lambda **layout: contextlib.nullcontext(FakeCluster()))
    outcome = summary(check.ch11.compressed_bytes(_right))
    assert outcome["status"] == "failed", outcome
    assert "the check itself is wrong" in outcome["message"] and "not your mistake" in outcome["hint"]
