"""Exercises need the idea (issue 29): an answer that reaches into dtfkit is refused, naming the call.

The four shortcuts the review found (11.1 by ``compression.expected_compressed_bytes``, 11.2 by
``alpha_beta.alpha_beta_time``, 12.1 by ``dtfkit.diagnose``, 12.2 by ``ch12_recovery.best_interval``)
are tried as a learner would write them (the name in the code) and as one hiding the name (built
at run time, reached through ``importlib``, ``getattr``, ``sys.modules``, ``map``): the first is
refused before anything runs, the second while the answer runs. Tables built from the public
generators (the old fixed seeds' way around the checks) fail, since the variants are drawn fresh.

Fast tier: none of these checks starts a process for a refused answer (``no_spawn``). The one
case where the answer runs in a task (7.1, the watch inside the task process) is slow.
"""

from __future__ import annotations

import importlib
import json
import math
import random
import sys

import pytest
from test_exercises_12 import find_mistake
from test_exercises_12_recovery import reference as choose_save_every

import dtfkit
from dtfkit.course import check
from dtfkit.course.check import _guard, ch12, ch12_recovery
from dtfkit.recipes import alpha_beta
from dtfkit.recipes.compression import expected_compressed_bytes

REFUSED = "dtfkit's own code is not part of an answer"


def _hidden(*parts: str) -> str:
    """A dotted name no reading of the code can see: joined at run time."""
    return ".".join(p[::-1] for p in parts)


def assert_refused(result, *named: str) -> None:
    assert result.status == "failed", str(result)
    assert REFUSED in result.message, str(result)
    assert result.hint, str(result)
    for name in named:
        assert name in result.message, (name, str(result))


# --------------------------------------------------------------- the four shortcuts, by name
def cheat_11_1(method, floats, k):
    return expected_compressed_bytes(method, floats, k)["to_ps"]


def cheat_11_2(method, n, size_bytes, alpha_s, beta_s_per_byte):
    return alpha_beta.alpha_beta_time(method, n, size_bytes, alpha_s, beta_s_per_byte)


def cheat_12_1(tf_configs):
    (code,) = dtfkit.diagnose(tf_configs).codes
    return code


def cheat_12_2(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures):
    from dtfkit.course.check.ch12_recovery import best_interval

    return best_interval(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures)


@pytest.mark.parametrize(
    "run, cheat, named",
    [
        (
            lambda a: check.ch11.compressed_bytes(a),
            cheat_11_1,
            "dtfkit.recipes.compression.expected_compressed_bytes",
        ),
        (lambda a: check.ch11.alpha_beta(a), cheat_11_2, "dtfkit.recipes.alpha_beta.alpha_beta_time"),
        (lambda a: check.ch12.broken_config(a), cheat_12_1, "dtfkit.diagnose"),
        (
            lambda a: check.ch12.save_interval(a),
            cheat_12_2,
            "dtfkit.course.check.ch12_recovery.best_interval",
        ),
    ],
    ids=["11.1", "11.2", "12.1", "12.2"],
)
def test_the_reviews_shortcuts_are_refused_naming_the_call(no_spawn, run, cheat, named):
    result = run(cheat)
    assert_refused(result, named, "uses")
    assert result.headline().startswith(f"✘ exercise {result.exercise} ")
    assert no_spawn == []


# --------------------------------------------------------------- the same, with the names hidden
def evasive_11_1(method, floats, k):
    module = importlib.import_module(_hidden("tikftd", "sepicer", "noisserpmoc"))
    return getattr(module, "expected_compressed_bytes"[::-1][::-1])(method, floats, k)["to_ps"]


def evasive_11_2(method, n, size_bytes, alpha_s, beta_s_per_byte):
    module = importlib.import_module(_hidden("tikftd", "sepicer", "ateb_ahpla", "edis_lenrek"))
    formula = vars(module)["emit_ateb_ahpla"[::-1]]
    return next(map(formula, [method], [n], [size_bytes], [alpha_s], [beta_s_per_byte]))


def evasive_12_1(tf_configs):
    kit = __import__("tikftd"[::-1])
    (code,) = getattr(kit, "esongaid"[::-1])(tf_configs).codes
    return code


def evasive_12_2(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures):
    checker = importlib.import_module(_hidden("tikftd", "esruoc", "kcehc", "yrevocer_21hc"))
    pick = checker.__dict__["lavretni_tseb"[::-1]]
    return pick(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures)


@pytest.mark.parametrize(
    "run, cheat, named",
    [
        (
            lambda a: check.ch11.compressed_bytes(a),
            evasive_11_1,
            "dtfkit.recipes.compression.expected_compressed_bytes",
        ),
        (lambda a: check.ch11.alpha_beta(a), evasive_11_2, "dtfkit.recipes.alpha_beta.alpha_beta_time"),
        (lambda a: check.ch12.broken_config(a), evasive_12_1, "dtfkit.diagnose"),
        (
            lambda a: check.ch12.save_interval(a),
            evasive_12_2,
            "dtfkit.course.check.ch12_recovery.best_interval",
        ),
    ],
    ids=["11.1", "11.2", "12.1", "12.2"],
)
def test_a_shortcut_whose_name_is_hidden_is_refused_while_it_runs(no_spawn, run, cheat, named):
    assert _guard.refused_names(cheat, _guard.Policy("x")) == []  # nothing to read: only the watch sees it
    assert_refused(run(cheat), named, "called")
    assert no_spawn == []


def test_a_shortcut_the_answer_catches_the_error_of_is_still_refused(no_spawn):
    """The watch records the call: an answer cannot swallow the refusal."""

    def swallowing(method, n, size_bytes, alpha_s, beta_s_per_byte):
        try:
            return evasive_11_2(method, n, size_bytes, alpha_s, beta_s_per_byte)
        except Exception:  # noqa: BLE001 - what a learner hiding the call would write
            return 0.0

    assert_refused(check.ch11.alpha_beta(swallowing), "alpha_beta_time")


def test_a_shortcut_in_a_thread_the_answer_starts_is_refused(no_spawn):
    import threading

    def in_a_thread(method, n, size_bytes, alpha_s, beta_s_per_byte):
        out = []
        worker = threading.Thread(
            target=lambda: out.append(evasive_11_2(method, n, size_bytes, alpha_s, beta_s_per_byte))
        )
        worker.start()
        worker.join()
        return out[0]

    assert_refused(check.ch11.alpha_beta(in_a_thread), "dtfkit.recipes.alpha_beta.alpha_beta_time")
    assert no_spawn == []


def test_an_answer_that_turns_the_watch_off_is_refused(no_spawn):
    def unwatched(method, n, size_bytes, alpha_s, beta_s_per_byte):
        watch = sys.getprofile()
        getattr(sys, "eliforptes"[::-1])(None)
        try:
            return evasive_11_2(method, n, size_bytes, alpha_s, beta_s_per_byte)
        finally:
            sys.setprofile(watch)

    assert_refused(check.ch11.alpha_beta(unwatched), "sys.setprofile")
    assert no_spawn == []


def test_a_helper_a_default_argument_or_a_partial_is_followed(no_spawn):
    import functools

    def helper(*args):
        return alpha_beta.alpha_beta_time(*args)

    def through_helper(method, n, size_bytes, alpha_s, beta_s_per_byte):
        return helper(method, n, size_bytes, alpha_s, beta_s_per_byte)

    def through_default(method, n, size_bytes, alpha_s, beta_s_per_byte, _f=alpha_beta.alpha_beta_time):
        return _f(method, n, size_bytes, alpha_s, beta_s_per_byte)

    formula = functools.partial(alpha_beta.alpha_beta_time)

    def through_partial(method, n, size_bytes, alpha_s, beta_s_per_byte):
        return formula(method, n, size_bytes, alpha_s, beta_s_per_byte)

    for answer in (through_helper, through_default, through_partial):
        assert_refused(check.ch11.alpha_beta(answer), "dtfkit.recipes.alpha_beta.alpha_beta_time")
    assert no_spawn == []


# --------------------------------------------------------------- right answers still pass
def right_11_2(method, n, size_bytes, alpha_s, beta_s_per_byte):
    rounds = {"ps": 2, "sharded_ps": 2, "ring": 2 * (n - 1)}[method]
    busiest = n * size_bytes if method == "ps" else (n - 1) * size_bytes / n
    return rounds * alpha_s + 2 * busiest * beta_s_per_byte


def test_right_answers_pass_and_may_use_what_every_answer_may(no_spawn):
    assert check.ch11.alpha_beta(right_11_2, hidden=True).passed
    assert check.ch12.broken_config(find_mistake, hidden=True).passed

    def catches_dtfkit_errors(method, n, size_bytes, alpha_s, beta_s_per_byte):
        try:
            return right_11_2(method, n, size_bytes, alpha_s, beta_s_per_byte)
        except dtfkit.DtfkitError:  # an exception class: on every exercise's allow-list
            raise

    assert check.ch11.alpha_beta(catches_dtfkit_errors).passed
    assert no_spawn == []


def test_the_notebooks_solutions_use_only_their_exercises_allow_lists():
    """Every exercise of chapters 1-13 has an allow-list; every solution that builds without
    TensorFlow in this process (all but 5.x and 6.x, which use only ``tf`` and what the check hands
    them) names no dtfkit code its exercise refuses. Only 1.2, 2.2 and 7.2 need one: the helper
    their cell imports."""
    from test_exercises_5to9 import CHAPTER, NOTEBOOKS, solution

    for path in NOTEBOOKS.glob("*.ipynb"):
        CHAPTER.setdefault(str(int(path.name[:2])), path.stem)
    answers = {
        "1.1": "build", "1.2": "place_layers", "2.1": "session_config", "2.2": "ps_strategy",
        "3.1": "sync_options", "3.2": "tokens_handed_out", "4.1": "make_hooks", "4.2": "session_options",
        "5.1": "training_setup", "5.2": "build_and_compile", "6.1": "make_step", "6.2": "make_dataset_fn",
        "7.1": "sum_over_workers", "7.2": "count_steps", "8.1": "predict", "8.2": "dropped_gradients",
        "9.1": "ps_bytes_received", "9.2": "my_ring_schedule", "10.1": "operator_tf_config",
        "10.2": "job_state", "11.1": "bytes_to_ps", "11.2": "sync_seconds", "12.1": "find_mistake",
        "12.2": "choose_save_every", "13.1": "fit_link", "13.2": "sync_seconds",
    }  # fmt: skip
    checks = {
        f.exercise: f
        for n in range(1, 14)
        for f in vars(getattr(check, f"ch{n:02d}")).values()
        if callable(f) and hasattr(f, "allowed")
    }
    assert sorted(checks, key=lambda k: tuple(map(int, k.split(".")))) == list(answers)
    assert {k: f.allowed for k, f in checks.items() if f.allowed} == {
        "1.2": ("dtfkit.recipes.tf1.dense",),
        "2.2": ("dtfkit.recipes.between_graph.variable_bytes",),
        "7.2": ("dtfkit.recipes.strategies_multi.coordinator_resolver",),
    }
    for number, name in answers.items():
        if number.startswith(("5.", "6.")):
            continue  # their first cell builds a 2-device TensorFlow kernel: the slow kernel tests run them
        answer = solution(number, name)
        reached = _guard.reached_names(answer)
        policy = _guard.Policy(number, checks[number].allowed)
        assert _guard.refused_names(answer, policy) == [], (number, reached)
        assert _guard.refused_names(answer, _guard.Policy(number)) == reached  # what the allow-list lets in
        assert bool(reached) == bool(checks[number].allowed), (number, reached)


# --------------------------------------------------------------- variants drawn fresh
def test_12_1_a_table_of_the_generators_cases_fails(no_spawn):
    """The old fixed seeds (range(12), range(1200, 1254)) let a table pass; now every run draws anew."""
    table = {}
    for seed in [*range(12), *range(1200, 1254)]:
        for configs, kind in ch12.broken_clusters(hidden=True, rng=random.Random(seed)):
            table[json.dumps(configs, sort_keys=True)] = kind

    def from_the_table(tf_configs):
        return table.get(json.dumps(tf_configs, sort_keys=True), "duplicate-task")

    result = check.ch12.broken_config(from_the_table)
    assert result.status == "failed", str(result)
    assert "not their mistake" in result.message
    assert no_spawn == []


def test_12_2_a_table_of_the_old_seeds_cases_fails(no_spawn):
    table = {
        case: ch12_recovery.best_interval(*case)
        for seed in (122, 1221, 1222, 12)
        for case in ch12_recovery.cases(seed, 20)
    }

    def from_the_table(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures):
        case = (max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures)
        return table.get(case, max(1, max_lost_steps // 2))

    result = check.ch12.save_interval(from_the_table)
    assert result.status == "failed", str(result)
    assert no_spawn == []


def test_11_2_a_table_of_the_texts_cases_fails(no_spawn):
    def from_the_text(method, n, size_bytes, alpha_s, beta_s_per_byte):
        if (n, size_bytes, alpha_s, beta_s_per_byte) == (3, 120_000, 0.02, 8e-8):
            return right_11_2(method, 3, 120_000, 0.02, 8e-8)
        return math.nan

    result = check.ch11.alpha_beta(from_the_text)
    assert result.status == "failed" and "you predicted nan" in result.message, str(result)
    assert no_spawn == []


def test_the_passing_line_does_not_depend_on_the_draw(no_spawn):
    lines_12_1 = {check.ch12.broken_config(find_mistake).message for _ in range(5)}
    assert len(lines_12_1) == 1, lines_12_1
    assert no_spawn == []


def test_12_2_variants_differ_between_runs_and_the_reference_meets_them_all():
    seen = set()
    calls = []

    def recording(max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures):
        calls.append((max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures))
        return choose_save_every(
            max_lost_steps, seconds_per_step, seconds_per_save, mean_seconds_between_failures
        )

    for _ in range(2):
        calls.clear()
        for case in ch12_recovery.cases(random.getrandbits(64), 10):
            assert ch12_recovery._grade(recording, case) is None, case
        seen.add(tuple(calls))
    assert len(seen) == 2


# --------------------------------------------------------------- in a task process
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_shortcut_in_a_task_is_refused_naming_the_task_and_the_call():
    """7.1 runs the answer in every worker: the wrapped answer travels there and is watched there."""

    def sum_over_workers(value):
        module = importlib.import_module(_hidden("tikftd", "sepicer", "ateb_ahpla"))
        getattr(module, "emit_ateb_ahpla"[::-1])("ring", 3, 1.0, 1e-3, 1e-8)
        return value * 3

    result = check.ch07.all_reduce(sum_over_workers)
    assert_refused(result, "dtfkit.recipes.alpha_beta.alpha_beta_time", "in worker:")


def test_stand_ins_a_check_hands_over_may_be_used_its_module_functions_may_not():
    """2.1's and 4.1's quick checks pass a stand-in ``tf`` (a class and nested functions of the check's
    module): an answer using it is fine; the module's own functions are refused."""
    from dtfkit.course.check import ch02, ch04

    def session_config(tf, job_name, task_index):
        return tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:{job_name}/task:{task_index}"])

    config = _guard.GuardedAnswer(session_config, _guard.Policy("2.1", (), ch02.__name__))
    assert config(ch02._stand_in_tf(), "worker", 1).device_filters == ["/job:ps", "/job:worker/task:1"]

    def make_hooks(tf, last_step, loss):
        return [
            tf.compat.v1.train.StopAtStepHook(last_step=last_step),
            tf.compat.v1.train.NanTensorHook(loss),
        ]

    hooks = _guard.GuardedAnswer(make_hooks, _guard.Policy("4.1", (), ch04.__name__))
    assert len(hooks(ch04._stand_in_tf(), 5, "loss")) == 2

    def borrowing(tf, job_name, task_index):
        return ch02._stand_in_tf()  # the module-level function itself

    borrowed = _guard.GuardedAnswer(borrowing, _guard.Policy("2.1", (), ch02.__name__))
    with pytest.raises(_guard.AnswerReachedIntoDtfkit, match="dtfkit.course.check.ch02._stand_in_tf"):
        borrowed(None, "worker", 0)


def test_12_2_the_real_runs_interval_does_not_depend_on_the_draw():
    """The passing line names the real run's interval: the budget binds whatever the draw, so it is
    always ``REAL_RUN_BUDGET`` (and so are the steps killed at and resumed from)."""
    budget = ch12_recovery.REAL_RUN_BUDGET
    for seed in range(500):
        case = ch12_recovery._case(random.Random(seed), budget * 5.0, budget)
        assert ch12_recovery.best_interval(*case) == budget == choose_save_every(*case), case
