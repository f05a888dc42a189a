"""Exercises 13.1 and 13.2: the notebook's own solutions pass (with their hidden variants); wrong answers
fail without giving the answer away; answers that copy a constant, echo their input or call dtfkit's own
fit are refused. Plain Python throughout: neither check starts a process."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_exercises_5to9 import GIVEAWAYS, assert_fails_without_giving_away, solution, summary

from dtfkit.course import check
from dtfkit.course.check import ch13

GIVEAWAYS["13.1"] = ["np.linalg.lstsq(a", "1 - a @ params", "np.diag(sigma2"]
GIVEAWAYS["13.2"] = ["2 * (alpha_s + d_s) + 2 * n", "depth * (2 * (alpha_s", "2 * (n - 1) * (alpha_s + d_s"]


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize(
    ("number", "name", "check_of", "said"),
    [("13.1", "fit_link", "fit_link", "MB/s"), ("13.2", "sync_seconds", "round_model", "the ring takes")],
)
def test_the_notebooks_solutions_pass(no_spawn, hidden, number, name, check_of, said):
    outcome = summary(getattr(check.ch13, check_of)(solution(number, name), hidden=hidden))
    assert outcome["status"] == "passed", outcome
    assert said in outcome["message"]


def test_13_1_plain_least_squares_is_told_to_weigh_every_run_alike(no_spawn):
    def plain(counts, seconds):
        a, t = np.array(counts), np.array(seconds)
        params = np.linalg.solve(a.T @ a, a.T @ t)
        return list(params), [0.0] * 4

    outcome = summary(check.ch13.fit_link(plain))
    assert_fails_without_giving_away("13.1", outcome, "plain least squares", "divide each row")


def test_13_1_standard_errors_are_checked_too(no_spawn):
    right = solution("13.1", "fit_link")

    def without_errors(counts, seconds):
        params, errors = right(counts, seconds)
        return params, [2 * e for e in errors]

    outcome = summary(check.ch13.fit_link(without_errors))
    assert_fails_without_giving_away("13.1", outcome, "standard errors")


def test_13_1_copied_constants_and_echoes_are_refused(no_spawn):
    fitted = (0.0, 212e-6, 1e-9, 0.46e-9)
    assert check.ch13.fit_link(lambda counts, seconds: (list(fitted), [1e-5] * 4)).status == "failed"
    assert check.ch13.fit_link(lambda counts, seconds: (counts[0], seconds[:4])).status == "failed"
    assert check.ch13.fit_link(lambda counts, seconds: None).status == "failed"


def test_13_1_an_answer_that_calls_dtfkits_fit_is_refused(no_spawn):
    def borrowed(counts, seconds):
        from dtfkit.recipes import predict

        return predict.fit, counts, seconds

    outcome = summary(check.ch13.fit_link(borrowed))
    assert outcome["status"] == "failed" and "dtfkit.recipes.predict" in outcome["message"], outcome


def _forgets(term):
    right = solution("13.2", "sync_seconds")

    def answer(algorithm, n, size_bytes, d_s, alpha_s, kappa_s, beta_s_per_byte, gamma_s_per_byte):
        costs = {"alpha": alpha_s, "kappa": kappa_s, "beta": beta_s_per_byte, "gamma": gamma_s_per_byte}
        costs[term] = 0.0
        return right(
            algorithm, n, size_bytes, d_s, costs["alpha"], costs["kappa"], costs["beta"], costs["gamma"]
        )

    return answer


@pytest.mark.parametrize("term", ["alpha", "kappa", "beta", "gamma"])
def test_13_2_a_forgotten_cost_fails_naming_the_critical_path(no_spawn, term):
    outcome = summary(check.ch13.round_model(_forgets(term)))
    assert_fails_without_giving_away("13.2", outcome, "the round model gives", "critical path has")


def test_13_2_a_tree_priced_like_the_ring_fails(no_spawn):
    right = solution("13.2", "sync_seconds")

    def ring_for_tree(algorithm, n, size_bytes, d_s, alpha_s, kappa_s, beta_s_per_byte, gamma_s_per_byte):
        algorithm = "ring" if algorithm == "tree" else algorithm
        return right(algorithm, n, size_bytes, d_s, alpha_s, kappa_s, beta_s_per_byte, gamma_s_per_byte)

    for _ in range(5):  # the tree is among the first cases every time
        outcome = summary(check.ch13.round_model(ring_for_tree))
        assert outcome["status"] == "failed", outcome


def test_13_2_an_answer_that_ignores_an_argument_is_refused(no_spawn):
    def no_delay(algorithm, n, size_bytes, d_s, alpha_s, kappa_s, beta_s_per_byte, gamma_s_per_byte):
        return 2 * alpha_s + kappa_s * n + beta_s_per_byte * size_bytes + gamma_s_per_byte + len(algorithm)

    outcome = summary(check.ch13.round_model(no_delay))
    assert outcome["status"] == "failed" and "d_s" in outcome["message"], outcome


def test_the_checks_closed_forms_price_a_full_tree_by_its_depth():
    params = (1e-4, 2e-4, 1e-9, 1e-9)
    for n, depth in ((3, 1), (7, 2), (15, 3)):
        size = 4 * n * 1000
        want = depth * (2 * (1e-4 + 0.001) + 4 * (2e-4 + 1e-9 * size) + 3 * 1e-9 * size)
        assert math.isclose(ch13._round_seconds("tree", n, size, 0.001, params), want, rel_tol=1e-12)
