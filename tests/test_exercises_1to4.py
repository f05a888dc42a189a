"""Exercises 1.1 to 4.2 need the idea, not the text (issue 14, point 1).

For each checked exercise of chapters 1-4:

- the notebook's own solution passes, hidden variants included: it is taken from the answer cell
  of the instructor notebook and executed here, never copied;
- wrong answers fail, the shortcut the review found among them (a hard-coded answer, the
  `num_steps` hook, no NaN hook, `checkpoint_dir` alone), and the feedback never holds the
  answer. Most of them fail before any process starts (``no_spawn``); one per exercise where a
  real run is what catches it (a swapped placement, a silent hook, a ps crash mid-run).

Everything runs in classroom mode (small runs).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest
from conftest import REPO

from dtfkit.course import check
from dtfkit.course.check import _core, ch02, ch03, ch04
from dtfkit.recipes.between_graph import greedy_bytes, layer_variables

NOTEBOOKS = {
    "1": "01_clusterspec_basics",
    "2": "02_between_graph_replication",
    "3": "03_sync_replicas_optimizer",
    "4": "04_monitored_training_session",
}


@pytest.fixture(autouse=True)
def classroom_mode(monkeypatch):
    monkeypatch.setenv("DTFKIT_CLASSROOM", "1")


def _src(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def solution(number: str, name: str) -> Callable:
    """The function ``name`` defined by exercise ``number``'s answer cell in the instructor notebook."""
    path = REPO / "notebooks" / f"{NOTEBOOKS[number[0]]}.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    start = next(
        i
        for i, c in enumerate(cells)
        if c["cell_type"] == "markdown" and _src(c).startswith(f"### Exercise {number} ")
    )
    answer = next(
        c for c in cells[start + 1 :] if c["cell_type"] == "code" and "### BEGIN SOLUTION" in _src(c)
    )
    namespace: dict = {"__name__": f"exercise_{number.replace('.', '_')}"}
    exec(compile(_src(answer), f"{path.name}: exercise {number}", "exec"), namespace)
    return namespace[name]


def assert_fails(result: _core.CheckResult, *answer_bits: str) -> str:
    """The result failed and its feedback names none of ``answer_bits``; returns the feedback."""
    text = str(result)
    assert result.status == _core.FAILED, text
    assert result.hint, text
    for bit in answer_bits:
        assert bit not in text, (bit, text)
    return text


def assert_passes(result: _core.CheckResult) -> None:
    assert result.status == _core.PASSED, str(result)


# ---------------------------------------------------------------- chapter 1
@pytest.mark.slow
def test_1_1_solution_passes_with_other_devices():
    assert_passes(check.ch01.variables_on_worker(solution("1.1", "build"), hidden=True))


def test_1_1_hard_coded_devices_fail_before_starting_anything(no_spawn):
    def text_only(tf, variables_on, compute_on):  # the text's devices, whatever the arguments
        with tf.compat.v1.device("/job:worker/task:1"):
            x = tf.compat.v1.get_variable("x", initializer=tf.fill([2, 2], 3.0))
            y = tf.compat.v1.get_variable("y", initializer=tf.fill([2, 2], 4.0))
        with tf.compat.v1.device("/job:worker/task:0"):
            return x + y

    def z_with_the_variables(tf, variables_on, compute_on):
        with tf.compat.v1.device(variables_on):
            x = tf.compat.v1.get_variable("x", initializer=tf.fill([2, 2], 3.0))
            y = tf.compat.v1.get_variable("y", initializer=tf.fill([2, 2], 4.0))
            return x + y

    for wrong in (text_only, z_with_the_variables):
        text = assert_fails(
            check.ch01.variables_on_worker(wrong), "device(variables_on)", "device(compute_on)"
        )
        assert "never reads" in text and "compute_on" in text
    assert no_spawn == []


@pytest.mark.slow
def test_1_1_swapped_devices_fail_in_the_real_run():
    def swapped(tf, variables_on, compute_on):
        with tf.compat.v1.device(compute_on):
            x = tf.compat.v1.get_variable("x", initializer=tf.fill([2, 2], 3.0))
            y = tf.compat.v1.get_variable("y", initializer=tf.fill([2, 2], 4.0))
        with tf.compat.v1.device(variables_on):
            return x + y

    text = assert_fails(check.ch01.variables_on_worker(swapped), "device(variables_on)")
    assert "the variables are not all on worker:1" in text


@pytest.mark.slow
def test_1_2_solution_passes_with_other_splits():
    assert_passes(check.ch01.model_parallel(solution("1.2", "place_layers"), hidden=True))


def test_1_2_the_text_s_split_alone_fails_before_starting_anything(no_spawn):
    from dtfkit.recipes.tf1 import dense

    def text_only(tf, images, devices, units):
        with tf.compat.v1.device("/job:worker/task:0"):
            hidden = dense(tf, images, 32, "layer1", tf.nn.relu)
        with tf.compat.v1.device("/job:worker/task:1"):
            return dense(tf, hidden, 10, "layer2")

    text = assert_fails(check.ch01.model_parallel(text_only), "device(device)")
    assert "never reads `devices` and `units`" in text
    assert no_spawn == []


@pytest.mark.slow
def test_1_2_variables_without_their_matmuls_fail_in_the_real_run():
    def variables_only(tf, images, devices, units):
        net = images
        for i, (device, size) in enumerate(zip(devices, units, strict=True)):
            with tf.compat.v1.device(device):
                w = tf.compat.v1.get_variable(f"kernel{i}", [int(net.shape[-1]), size])
                b = tf.compat.v1.get_variable(f"bias{i}", [size])
            net = tf.matmul(net, w) + b  # computed wherever the master puts it
            net = net if i == len(units) - 1 else tf.nn.relu(net)
        return net

    text = assert_fails(check.ch01.model_parallel(variables_only), "device(device)")
    assert "layer 2's matmuls ran on worker:0, not worker:1" in text


# ---------------------------------------------------------------- chapter 2
@pytest.mark.slow
def test_2_1_solution_passes_for_other_workers():
    assert_passes(check.ch02.device_filters(solution("2.1", "session_config"), hidden=True))


def test_2_1_wrong_filters_fail_before_starting_anything(no_spawn):
    def text_only(tf, job_name, task_index):  # worker:1's filters, for every worker
        return tf.compat.v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:1"])

    def whole_job(tf, job_name, task_index):
        return tf.compat.v1.ConfigProto(
            device_filters=["/job:ps", f"/job:{job_name}/task:{task_index}", f"/job:{job_name}"]
        )

    def no_filters(tf, job_name, task_index):
        return tf.compat.v1.ConfigProto(device_filters=[]) if task_index >= 0 else None

    def without_ps(tf, job_name, task_index):
        return tf.compat.v1.ConfigProto(device_filters=[f"/job:{job_name}/task:{task_index}"])

    expected = {
        text_only: "never reads `task_index`",
        whole_job: "also cover worker:1, worker:2, worker:3",
        no_filters: "worker:0 gets no device filters",
        without_ps: "leave out the ps",
    }
    for wrong, says in expected.items():
        text = assert_fails(check.ch02.device_filters(wrong), "task:{task_index}", "device_filters=[")
        assert says in text, text
    assert no_spawn == []


@pytest.mark.slow
def test_2_2_solution_passes_on_other_models():
    assert_passes(check.ch02.greedy_placement(solution("2.2", "ps_strategy"), hidden=True))


def test_2_2_wrong_strategies_fail_before_starting_anything(no_spawn):
    def round_robin(num_ps):
        count = [0]

        def choose(op):
            count[0] += 1
            return (count[0] - 1) % num_ps

        return choose

    def by_count(num_ps):  # greedy, but counting variables instead of bytes
        loads = [0] * num_ps

        def choose(op):
            task = loads.index(min(loads))
            loads[task] += 1
            return task

        return choose

    def text_only(num_ps):  # balanced for the uneven model of section 1 on 2 ps, by name
        return lambda op: 0 if op.name.startswith(("dense_1/", "dense_2/")) else 1

    for wrong in (round_robin, by_count, text_only):
        text = assert_fails(check.ch02.greedy_placement(wrong), "min(loads)", "loads.index")
        assert "greedy-by-bytes manages" in text or "ps_strategy chose" in text, text
    assert no_spawn == []


# ---------------------------------------------------------------- chapter 3
@pytest.mark.slow
@pytest.mark.timing  # real runs whose timing varies: the graded facts must hold under load
def test_3_1_solution_passes_for_other_sizes():
    assert_passes(check.ch03.backup_workers(solution("3.1", "sync_options"), hidden=True))


def test_3_1_wrong_options_fail_before_starting_anything(no_spawn):
    def text_only(num_workers, num_backups):
        return {"replicas_to_aggregate": 2, "total_num_replicas": 3}

    def no_total(num_workers, num_backups):
        return {"replicas_to_aggregate": num_workers - num_backups}

    def backups_counted_in(num_workers, num_backups):
        return {"replicas_to_aggregate": num_workers, "total_num_replicas": num_workers + num_backups}

    for wrong in (text_only, no_total, backups_counted_in):
        assert_fails(check.ch03.backup_workers(wrong), "num_workers - num_backups")
    assert "for 4 workers with 1 backup(s)" in check.ch03.backup_workers(text_only).message
    assert "defaults to replicas_to_aggregate" in check.ch03.backup_workers(no_total).message
    assert no_spawn == []


@pytest.mark.slow
@pytest.mark.timing  # real runs whose timing varies: the graded facts must hold under load
def test_3_2_solution_predicts_the_tokens_of_real_runs():
    result = check.ch03.token_count(solution("3.2", "tokens_handed_out"), hidden=True)
    assert_passes(result)
    assert len(result.details) == 2 and result.details[0].startswith("R=3, N=2: "), result.details
    assert result.details[1].startswith(("R=1, N=2: ", "R=2, N=2: ", "R=4, N=2: ")), result.details


def test_3_2_wrong_predictions_fail_before_starting_anything(no_spawn):
    def section_4_number(replicas_to_aggregate, total_num_replicas, updates):
        return 2 + 3 * 60  # the chapter's backup run, whatever the settings

    def n_per_update(replicas_to_aggregate, total_num_replicas, updates):
        return replicas_to_aggregate + total_num_replicas * updates

    def n_at_the_start(replicas_to_aggregate, total_num_replicas, updates):
        return total_num_replicas + max(total_num_replicas, replicas_to_aggregate) * updates

    for wrong in (section_4_number, n_per_update, n_at_the_start):
        assert_fails(check.ch03.token_count(wrong), "max(", "per_update", "+ max")
    assert "fewer workers than replicas_to_aggregate" in check.ch03.token_count(n_per_update).hint
    assert "at the very start" in check.ch03.token_count(n_at_the_start).hint
    assert no_spawn == []


# ---------------------------------------------------------------- chapter 4
@pytest.mark.slow
@pytest.mark.timing  # real runs whose timing varies: the graded facts must hold under load
def test_4_1_solution_stops_at_last_step_and_on_nan():
    assert_passes(check.ch04.stop_hooks(solution("4.1", "make_hooks"), hidden=True))


def test_4_1_num_steps_and_no_nan_hook_fail_before_starting_anything(no_spawn):
    def num_steps(tf, last_step, loss):
        return [
            tf.compat.v1.train.StopAtStepHook(num_steps=last_step),
            tf.compat.v1.train.NanTensorHook(loss),
        ]

    def no_nan_hook(tf, last_step, loss):
        return [tf.compat.v1.train.StopAtStepHook(last_step=last_step)]

    def fixed_step(tf, last_step, loss):
        return [tf.compat.v1.train.StopAtStepHook(last_step=60), tf.compat.v1.train.NanTensorHook(loss)]

    answer = ("last_step=last_step", "NanTensorHook")
    assert "StopAtStepHook(num_steps=...) counts steps" in assert_fails(
        check.ch04.stop_hooks(num_steps), *answer
    )
    assert "loss becomes NaN" in assert_fails(check.ch04.stop_hooks(no_nan_hook), *answer)
    assert "never reads `last_step`" in assert_fails(check.ch04.stop_hooks(fixed_step), *answer)
    assert no_spawn == []


@pytest.mark.slow
def test_4_1_the_real_runs_catch_num_steps_and_a_missing_nan_hook():
    # Each also returns a do-nothing hook of its own class: the quick look cannot judge such an
    # answer, so the real runs have to.
    def num_steps(tf, last_step, loss):
        silent = type("Silent", (tf.compat.v1.train.SessionRunHook,), {})()
        return [
            tf.compat.v1.train.StopAtStepHook(num_steps=last_step),
            tf.compat.v1.train.NanTensorHook(loss),
            silent,
        ]

    def no_nan_hook(tf, last_step, loss):
        assert loss is not None
        silent = type("Silent", (tf.compat.v1.train.SessionRunHook,), {})()
        return [tf.compat.v1.train.StopAtStepHook(last_step=last_step), silent]

    text = assert_fails(check.ch04.stop_hooks(num_steps), "last_step=last_step")
    assert "as after a restore" in text
    text = assert_fails(check.ch04.stop_hooks(no_nan_hook), "NanTensorHook")
    assert "the loss turned NaN at global step" in text


@pytest.mark.slow
@pytest.mark.timing  # real runs whose timing varies: the graded facts must hold under load
def test_4_2_solution_survives_a_ps_crash_mid_run():
    result = check.ch04.restore_after_ps_crash(solution("4.2", "session_options"), hidden=True)
    assert_passes(result)
    assert len(result.details) == 2 and all("ps:0 killed at global step" in d for d in result.details)


def test_4_2_checkpoint_dir_alone_and_seconds_fail_before_starting_anything(no_spawn):
    def checkpoint_dir_alone(checkpoint_dir, max_lost_steps):
        assert max_lost_steps > 0
        return {"checkpoint_dir": checkpoint_dir}

    def seconds(checkpoint_dir, max_lost_steps):
        return {"checkpoint_dir": checkpoint_dir, "save_checkpoint_secs": max_lost_steps / 10}

    def too_rarely(checkpoint_dir, max_lost_steps):
        return {"checkpoint_dir": checkpoint_dir, "save_checkpoint_steps": 2 * max_lost_steps}

    def fixed(checkpoint_dir, max_lost_steps):
        return {"checkpoint_dir": checkpoint_dir, "save_checkpoint_steps": 10}

    def one_too_many(checkpoint_dir, max_lost_steps):
        # Right when the ps dies between two steps, wrong when it dies after a step's update and
        # before the chief's save (the review's shortcut).
        return {"checkpoint_dir": checkpoint_dir, "save_checkpoint_steps": max_lost_steps + 1}

    expected = {
        checkpoint_dir_alone: "a checkpoint every 600 seconds",
        seconds: "depends on the machine's speed",
        too_rarely: "would lose more than 3 steps",
        one_too_many: "would lose more than 3 steps",
        fixed: "never reads `max_lost_steps`",
    }
    for wrong, says in expected.items():
        text = assert_fails(
            check.ch04.restore_after_ps_crash(wrong), "save_checkpoint_steps", "max_lost_steps + 1"
        )
        assert says in text, text
    assert no_spawn == []


@pytest.mark.slow
@pytest.mark.timing  # real runs whose timing varies: the graded facts must hold under load
def test_4_2_the_mid_run_crash_catches_checkpoint_dir_alone(monkeypatch):
    # Without the quick look at the options, the crash itself must show the rollback.
    monkeypatch.setattr(ch04, "_quick_options_problem", lambda session_options, *cases: None)

    def checkpoint_dir_alone(checkpoint_dir, max_lost_steps):
        assert max_lost_steps > 0
        return {"checkpoint_dir": checkpoint_dir}

    text = assert_fails(check.ch04.restore_after_ps_crash(checkpoint_dir_alone), "save_checkpoint_steps")
    assert "ps:0 was killed at global step 7" in text and "went on from global step 0" in text


@pytest.mark.slow
@pytest.mark.timing  # real runs whose timing varies: the graded facts must hold under load
def test_4_2_the_mid_step_crash_catches_one_step_too_many(monkeypatch):
    # The ps dies after the update of global step max_lost_steps + 1 and before the chief's save:
    # an interval of max_lost_steps + 1 has saved nothing since step 0, whatever the timing.
    monkeypatch.setattr(ch04, "_quick_options_problem", lambda session_options, *cases: None)

    def one_too_many(checkpoint_dir, max_lost_steps):
        return {"checkpoint_dir": checkpoint_dir, "save_checkpoint_steps": max_lost_steps + 1}

    text = assert_fails(check.ch04.restore_after_ps_crash(one_too_many), "save_checkpoint_steps")
    assert "ps:0 was killed at global step 7" in text and "went on from global step 0" in text


# ---------------------------------------------------------------- hidden variants, drawn fresh (issue 29)
DRAWS = {
    "2.1": ch02.hidden_filters_case,
    "2.2": ch02.hidden_place_case,
    "3.1": ch03.hidden_backup_cases,
    "3.2": ch03.hidden_token_cases,
    "4.1 classroom": lambda rng=None: ch04.hidden_stop_cases(20, rng),
    "4.1 full": lambda rng=None: ch04.hidden_stop_cases(60, rng),
    "4.2": ch04.hidden_lost_cases,
}


@pytest.mark.parametrize("number", DRAWS)
def test_hidden_variants_differ_across_runs_and_repeat_with_the_same_rng(number):
    draw = DRAWS[number]
    assert draw(random.Random(29)) == draw(random.Random(29))
    fresh = {repr(draw()) for _ in range(40)}  # no rng: a generator seeded fresh each call
    assert len(fresh) > 1, fresh


SEEDS = range(300)


def test_2_1_every_hidden_draw_keeps_the_cluster_and_the_solution_passes_its_quick_look():
    right = solution("2.1", "session_config")
    for seed in SEEDS:
        workers, alone = ch02.hidden_filters_case(random.Random(seed))
        assert 5 <= workers <= 12 and sorted(alone) == ["worker:1", "worker:2"]  # 3 workers, as visible
        assert ch02._quick_filters_problem(right, workers) is None


def test_2_2_the_solution_meets_greedy_by_bytes_on_every_hidden_model():
    right = solution("2.2", "ps_strategy")
    for seed in SEEDS:
        layers, num_ps = ch02.hidden_place_case(random.Random(seed))
        assert num_ps in (2, 3) and layers[0] == 64 and layers[-1] == 10  # at most the 3 ps of before
        assert all(8 <= w <= 1024 for w in layers[1:-1]) and 2 <= len(layers) - 2 <= 4
        variables = layer_variables(layers)
        choose = right(num_ps)
        loads = [0] * num_ps
        for v in variables:
            loads[choose(v)] += v.nbytes
        assert max(loads) == max(greedy_bytes([v.nbytes for v in variables], num_ps))
        assert ch02._quick_placement_problem(right, random.Random(seed)) is None


def test_3_1_every_hidden_draw_is_a_valid_size_the_solution_fits():
    right = solution("3.1", "sync_options")
    for seed in SEEDS:
        options, (size, spare) = ch03.hidden_backup_cases(random.Random(seed))
        assert size in (2, 3) and 0 <= spare < size  # no more than the visible run's 3 workers
        for n, backups in (*options, (size, spare)):
            assert 0 <= backups < n
            assert ch03._options_problem(right, n, backups) is None


def test_3_2_every_hidden_draw_is_a_setting_the_solution_counts():
    right = solution("3.2", "tokens_handed_out")
    for seed in SEEDS:
        arithmetic, aggregate = ch03.hidden_token_cases(random.Random(seed))
        assert aggregate in (1, 2, 4)
        for r, n, updates in arithmetic:
            assert r >= 1 and n >= 1 and updates >= 0
            assert right(r, n, updates) == r + max(r, n) * updates


@pytest.mark.parametrize("steps", [20, 60])
def test_4_1_every_hidden_run_stops_inside_the_cost_of_the_fixed_one(steps):
    right = solution("4.1", "make_hooks")
    for seed in SEEDS:
        quick_last, (start, last) = ch04.hidden_stop_cases(steps, random.Random(seed))
        assert 0 <= start <= steps // 2 and steps // 2 <= last - start <= steps + 7
        assert ch04._quick_hooks_problem(right, (quick_last,)) is None


def test_4_2_every_hidden_limit_is_one_the_solution_keeps():
    right = solution("4.2", "session_options")
    for seed in SEEDS:
        quick_lost, second = ch04.hidden_lost_cases(random.Random(seed))
        assert 1 <= quick_lost <= 100 and 2 <= second <= 8
        assert ch04._quick_options_problem(right, (quick_lost, second)) is None


def test_answers_that_know_only_the_fixed_cases_fail_the_hidden_draw_before_starting_anything(no_spawn):
    rng = random.Random(2929)

    def first_four_workers(tf, job_name, task_index):  # right for the 4 workers the visible check reads
        mine = [f"/job:{job_name}/task:{task_index}"] if task_index < 4 else [f"/job:{job_name}"]
        return tf.compat.v1.ConfigProto(device_filters=["/job:ps", *mine])

    known_tokens = {case: case[0] + max(case[:2]) * case[2] for case in ch03.TOKEN_CASES}

    def token_table(replicas_to_aggregate, total_num_replicas, updates):
        return known_tokens.get((replicas_to_aggregate, total_num_replicas, updates), 0)

    def lost_table(checkpoint_dir, max_lost_steps):
        every = max_lost_steps if max_lost_steps in (*ch04.LOST_CASES, 6) else 1000
        return {"checkpoint_dir": checkpoint_dir, "save_checkpoint_steps": every}

    assert "the check tries" in assert_fails(
        check.ch02.device_filters(first_four_workers, hidden=True, rng=rng)
    )
    assert_fails(check.ch03.token_count(token_table, hidden=True, rng=random.Random(2929)))
    assert "saves every 1000 global steps" in assert_fails(
        check.ch04.restore_after_ps_crash(lost_table, hidden=True, rng=random.Random(2929))
    )
    assert no_spawn == []
