"""Exercise 12.2 (choose how often all-reduce training saves, for a loss budget): the reference
answer passes, hidden variants and the real run included; wrong answers fail before anything
starts, with a hint that does not give the answer away."""

from __future__ import annotations

import math

import pytest

from dtfkit.course.check import ch12_recovery


def reference(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures):
    """The answer the chapter expects: Young's interval, in whole steps, capped by the budget."""
    young = math.sqrt(2 * seconds_per_save * mean_seconds_between_failures) / seconds_per_step
    return min(max_lost_steps, max(1, round(young)))


GIVEAWAYS = ("sqrt", "2 * seconds_per_save * mean_seconds_between_failures", "min(max_lost_steps")


def assert_fails_with(result, *expected: str) -> str:
    assert result.status == "failed", result
    assert result.hint, result
    text = f"{result.message}\n{result.hint}"
    for piece in expected:
        assert piece in text, (piece, str(result))
    for piece in GIVEAWAYS:
        assert piece not in text, (piece, str(result))
    return text


@pytest.fixture(autouse=True)
def _classroom(monkeypatch):
    monkeypatch.setenv("DTFKIT_CLASSROOM", "1")


@pytest.mark.slow
def test_12_2_reference_passes_with_hidden_variants_and_a_real_crash():
    result = ch12_recovery.check_12_2(reference, hidden=True)
    assert result.status == "passed", str(result)
    assert result.exercise == "12.2"
    # budget 4 binds in the real run: both workers die right before the save of step 8
    assert "resumed from step 4, with the weights saved there bit for bit: 4 steps lost" in result.message


def test_12_2_the_reference_is_the_best_interval_everywhere(no_spawn):
    for case in ch12_recovery.cases(122, 10) + ch12_recovery.cases(1221, 20) + ch12_recovery.edge_cases():
        got, best = reference(*case), ch12_recovery.best_interval(*case)
        assert ch12_recovery.waste(got, *case[1:]) <= ch12_recovery.waste(best, *case[1:]) * 1.05, case
    assert no_spawn == []


def test_12_2_an_interval_beyond_the_budget_fails(no_spawn):
    def no_cap(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures):
        _ = max_lost_steps
        return max(
            1, round(math.sqrt(2 * seconds_per_save * mean_seconds_between_failures) / seconds_per_step)
        )

    assert_fails_with(ch12_recovery.check_12_2(no_cap), "would lose", "worst moment")
    assert no_spawn == []


def test_12_2_saving_every_step_fails_on_its_cost(no_spawn):
    def every_step(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures):
        return min(
            max_lost_steps, 1 + int(0 * seconds_per_step * seconds_per_save * mean_seconds_between_failures)
        )

    assert_fails_with(ch12_recovery.check_12_2(every_step), "save more often than this case needs")
    assert no_spawn == []


def test_12_2_always_the_budget_fails_when_failures_are_frequent(no_spawn):
    def the_budget(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures):
        return max_lost_steps + int(0 * seconds_per_step * seconds_per_save * mean_seconds_between_failures)

    assert_fails_with(ch12_recovery.check_12_2(the_budget), "failures come often")
    assert no_spawn == []


def test_12_2_an_answer_that_ignores_the_failure_rate_fails_before_grading(no_spawn):
    def no_rate(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures):
        return min(max_lost_steps, max(1, round(seconds_per_save / seconds_per_step)))

    assert_fails_with(ch12_recovery.check_12_2(no_rate), "never reads `mean_seconds_between_failures`")
    assert no_spawn == []


def test_12_2_a_fractional_interval_fails(no_spawn):
    def fractional(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures):
        young = math.sqrt(2 * seconds_per_save * mean_seconds_between_failures) / seconds_per_step
        return min(float(max_lost_steps), young)

    assert_fails_with(ch12_recovery.check_12_2(fractional), "whole number of steps")
    assert no_spawn == []


def test_12_2_the_hidden_edge_cases_catch_an_interval_of_zero(no_spawn):
    def floor_only(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures):
        young = math.sqrt(2 * seconds_per_save * mean_seconds_between_failures) / seconds_per_step
        return min(max_lost_steps, math.floor(young))

    # the seeded variants all have optima of 4 steps or more; an edge case's optimum is below 1
    assert_fails_with(ch12_recovery.check_12_2(floor_only, hidden=True), "at least 1")
    assert no_spawn == []


@pytest.mark.parametrize(
    ("restored_from", "as_saved"),
    [(4, False), (0, True), (0, None)],  # other weights restored; nothing restored (resumed from 0)
)
def test_12_2_the_real_run_fails_when_the_checkpoint_is_not_restored_as_saved(
    monkeypatch, no_spawn, restored_from, as_saved
):
    def measured(every):
        return {
            "killed_at": 2 * every,
            "resumed_from": restored_from,
            "first_step": restored_from + 1,
            "lost_steps": 2 * every - restored_from,
            "restored_as_saved": as_saved,
        }

    monkeypatch.setattr(ch12_recovery, "_real_run", measured)
    result = ch12_recovery.check_12_2(reference)
    assert result.status == "failed", result
    assert f"resumed from step {restored_from}" in result.message
    assert no_spawn == []
