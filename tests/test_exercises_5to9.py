"""Exercises 5.1-9.2 (issue 14): each notebook's own solution passes its check, and wrong answers fail.

The solutions are not copied here: each is taken from its notebook's answer cell and executed,
after the exercises section's import cell, as the learner's kernel would. Every wrong answer
must fail with feedback that does not give the answer away (no line of the solution, none of the
exercise's give-away fragments). Most wrong answers fail before anything starts (``no_spawn``);
the shortcuts the review named (7.1's ``n(n+1)/2``, 5.2's optimizer made outside the scope, a
count hard-coded in 7.2) run for real.

Chapters 5 and 6 check in a TensorFlow kernel with 2 logical CPUs, which a pytest process
that may have touched TensorFlow already cannot promise: they run in one subprocess
(``_kernel_results``), which imports this module and calls ``kernel_cases()``.

Everything runs in classroom mode (``DTFKIT_CLASSROOM=1``), as nbgrader grades.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
CHAPTER = {
    "5": "05_keras_mirrored_strategy",
    "6": "06_custom_training_loops",
    "7": "07_multi_worker_and_parameter_server",
    "8": "08_sync_async_lab",
    "9": "09_ps_vs_ring_allreduce",
    "10": "10_beyond_one_machine",  # its tests: tests/test_exercises_10.py, with the helpers below
    "11": "11_communication_up_close",  # its tests: tests/test_exercises_11.py
    "12": "12_when_things_go_wrong",  # its tests: tests/test_exercises_12*.py
    "13": "13_predict_then_run",  # its tests: tests/test_exercises_13.py
}
# Words that would hand the learner the answer: no feedback of a wrong answer may contain them.
GIVEAWAYS = {
    "5.1": ["num_replicas_in_sync *", "* strategy.num_replicas_in_sync", "base_lr *"],
    "5.2": ["with strategy.scope()", "inside the scope"],
    "6.1": ["compute_average_loss", "global_batch_size=", "ReduceOp.SUM"],
    "6.2": ["get_per_replica_batch_size", ".shard(", "input_pipeline_id)"],
    "7.1": ["strategy.reduce(", "ReduceOp", "MultiWorkerMirroredStrategy()"],
    "7.2": ["coordinator.join()", "with strategy.scope()"],
    "8.1": ["replicas_to_aggregate or workers", "steps * "],
    "8.2": ["read + 1", "read < global_step"],
    "9.1": ["n * floats * 4", "4 * n * floats"],
    "9.2": ["(i + s) % n", "(i - 1 + s) % n"],
}


# --------------------------------------------------------------------- the notebooks
def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _exercise_cells(chapter: str) -> list[dict]:
    nb = json.loads((NOTEBOOKS / f"{CHAPTER[chapter]}.ipynb").read_text(encoding="utf-8"))
    return [c for c in nb["cells"] if "dtfkit-exercise" in c.get("metadata", {}).get("tags", [])]


def answer_cell(number: str) -> str:
    """The source of exercise ``number``'s answer cell (the code cell after its markdown)."""
    cells = _exercise_cells(number.split(".")[0])
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and _source(cell).startswith(f"### Exercise {number} "):
            code = cells[i + 1]
            assert code["cell_type"] == "code" and "### BEGIN SOLUTION" in _source(code), number
            return _source(code)
    raise AssertionError(f"no answer cell for exercise {number}")


def solution_lines(number: str) -> list[str]:
    """The solution's lines (between the markers) that say something: none may appear in feedback."""
    inside, out = False, []
    for line in answer_cell(number).splitlines():
        if "### BEGIN SOLUTION" in line:
            inside = True
        elif "### END SOLUTION" in line:
            inside = False
        elif inside:
            text = line.strip().removeprefix("return ").strip()
            if len(text) > 8 and not text.startswith(("#", "@", "def ", "return")):
                out.append(text)
    return out


def kernel(chapter: str) -> dict:
    """A namespace that ran the exercises section's first code cell (its imports), as a kernel would."""
    namespace: dict = {"__name__": f"exercises_{chapter}"}
    first = next(c for c in _exercise_cells(chapter) if c["cell_type"] == "code")
    exec(compile(_source(first), f"<chapter {chapter} imports>", "exec"), namespace)
    return namespace


def solution(number: str, name: str, namespace: dict | None = None):
    """The notebook's own answer for exercise ``number`` (the function ``name`` its cell defines)."""
    namespace = namespace if namespace is not None else kernel(number.split(".")[0])
    exec(compile(answer_cell(number), f"<answer {number}>", "exec"), namespace)
    return namespace[name]


def summary(result) -> dict:
    return {"status": result.status, "message": result.message, "hint": result.hint}


def assert_fails_without_giving_away(number: str, outcome: dict, *expected: str) -> None:
    assert outcome["status"] == "failed", outcome
    text = f"{outcome['message']}\n{outcome['hint']}"
    for piece in expected:
        assert piece in text, (piece, outcome)
    assert outcome["hint"], f"exercise {number}: a failure without a hint: {outcome}"
    for line in solution_lines(number) + GIVEAWAYS[number]:
        assert line not in text, f"exercise {number}'s feedback gives away {line!r}: {outcome}"


@pytest.fixture(autouse=True)
def _classroom(monkeypatch):
    monkeypatch.setenv("DTFKIT_CLASSROOM", "1")


def test_every_exercise_has_its_answer_cell():
    for number in [n for n in GIVEAWAYS if not n.startswith(("10.", "11."))]:
        assert solution_lines(number), number


# ------------------------------------------- chapters 5 and 6: a TensorFlow kernel of its own
def _wrong_5_1_two_replicas(strategy, per_replica_batch=32, base_lr=0.05):
    return {"global_batch": per_replica_batch * 2, "learning_rate": base_lr * 2}  # the chapter's 2 replicas


def _wrong_5_1_by_class(strategy, per_replica_batch=32, base_lr=0.05):
    import tensorflow as tf

    replicas = 2 if isinstance(strategy, tf.distribute.MirroredStrategy) else 1  # the review's shortcut
    return {"global_batch": per_replica_batch * replicas, "learning_rate": base_lr * replicas}


def _wrong_5_1_logical_devices(strategy, per_replica_batch=32, base_lr=0.05):
    import tensorflow as tf

    replicas = len(tf.config.list_logical_devices())  # this kernel's devices, not the strategy's
    return {"global_batch": per_replica_batch * replicas, "learning_rate": base_lr * replicas}


def _wrong_5_1_mirrored_devices(strategy, per_replica_batch=32, base_lr=0.05):
    import tensorflow as tf

    mirrored = isinstance(strategy, tf.distribute.MirroredStrategy)
    replicas = len(strategy.extended.worker_devices) if mirrored else 1  # right for the real ones only
    return {"global_batch": per_replica_batch * replicas, "learning_rate": base_lr * replicas}


def _wrong_5_1_rate_unscaled(strategy, per_replica_batch=32, base_lr=0.05):
    return {"global_batch": per_replica_batch * strategy.num_replicas_in_sync, "learning_rate": base_lr}


def _model():
    import keras

    return keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
    )


def _compile(model, optimizer):
    import keras

    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _wrong_5_2_optimizer_outside(strategy):
    import keras

    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)  # made before the scope: the review's shortcut
    with strategy.scope():
        return _compile(_model(), optimizer)


def _wrong_5_2_model_outside(strategy):
    import keras

    model = _model()
    with strategy.scope():
        return _compile(model, keras.optimizers.SGD(0.1, momentum=0.9))


def _wrong_5_2_no_momentum(strategy):
    import keras

    with strategy.scope():
        return _compile(_model(), keras.optimizers.SGD(0.1))


def _make_step(reduce_loss, reduce_losses="SUM"):
    """A ``make_step`` whose replicas scale their loss with ``reduce_loss(per_example, global_batch)``."""

    def make_step(strategy, model, optimizer, global_batch):
        import keras
        import tensorflow as tf

        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = reduce_loss(tf, loss_fn(y, model(x, training=True)), global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        @tf.function
        def step(batch):
            per_replica = strategy.run(replica_step, args=batch)
            return strategy.reduce(getattr(tf.distribute.ReduceOp, reduce_losses), per_replica, axis=None)

        return step

    return make_step


_wrong_6_1_replica_mean = _make_step(lambda tf, per_example, g: tf.reduce_mean(per_example))
_wrong_6_1_batch_64 = _make_step(lambda tf, per_example, g: tf.reduce_sum(per_example) / 64.0)


def _wrong_6_2_batch_32(x, y, global_batch):
    import tensorflow as tf

    def dataset_fn(ctx):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.repeat().batch(32)  # the chapter's 64 / 2

    return dataset_fn


def _wrong_6_2_no_shard(x, y, global_batch):
    import tensorflow as tf

    def dataset_fn(ctx):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=ctx.input_pipeline_id)
        return ds.repeat().batch(ctx.get_per_replica_batch_size(global_batch))

    return dataset_fn


def _wrong_6_2_two_shards(x, y, global_batch):
    import tensorflow as tf

    def dataset_fn(ctx):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(2, ctx.input_pipeline_id % 2)
        return ds.repeat().batch(ctx.get_per_replica_batch_size(global_batch))

    return dataset_fn


def kernel_cases() -> dict[str, dict]:
    """Run chapters 5 and 6's checks in this process (a kernel with 2 logical CPUs): ``{case: outcome}``."""
    from dtfkit.course import check

    out: dict[str, dict] = {}
    ns5 = kernel("5")  # ensure_replicas(2), TensorFlow, keras, check: the chapter's exercise imports
    out["5.1 solution"] = summary(
        check.ch05.scaling_rule(solution("5.1", "training_setup", ns5), hidden=True)
    )
    out["5.1 two replicas"] = summary(check.ch05.scaling_rule(_wrong_5_1_two_replicas))
    out["5.1 rate unscaled"] = summary(check.ch05.scaling_rule(_wrong_5_1_rate_unscaled))
    out["5.1 by class"] = summary(check.ch05.scaling_rule(_wrong_5_1_by_class))
    out["5.1 logical devices"] = summary(check.ch05.scaling_rule(_wrong_5_1_logical_devices))
    out["5.1 mirrored devices"] = summary(check.ch05.scaling_rule(_wrong_5_1_mirrored_devices))
    out["5.2 solution"] = summary(
        check.ch05.model_in_scope(solution("5.2", "build_and_compile", ns5), hidden=True)
    )
    out["5.2 optimizer outside"] = summary(check.ch05.model_in_scope(_wrong_5_2_optimizer_outside))
    out["5.2 model outside"] = summary(check.ch05.model_in_scope(_wrong_5_2_model_outside))
    out["5.2 no momentum"] = summary(check.ch05.model_in_scope(_wrong_5_2_no_momentum))
    ns6 = kernel("6")
    out["6.1 solution"] = summary(check.ch06.distributed_step(solution("6.1", "make_step", ns6), hidden=True))
    out["6.1 replica mean"] = summary(check.ch06.distributed_step(_wrong_6_1_replica_mean))
    out["6.1 batch 64"] = summary(check.ch06.distributed_step(_wrong_6_1_batch_64))
    out["6.2 solution"] = summary(
        check.ch06.input_pipeline(solution("6.2", "make_dataset_fn", ns6), hidden=True)
    )
    out["6.2 batch 32"] = summary(check.ch06.input_pipeline(_wrong_6_2_batch_32))
    out["6.2 no shard"] = summary(check.ch06.input_pipeline(_wrong_6_2_no_shard))
    out["6.2 two shards"] = summary(check.ch06.input_pipeline(_wrong_6_2_two_shards))
    return out


@pytest.fixture(scope="module")
def kernel_results() -> dict[str, dict]:
    from conftest import in_a_classroom_kernel

    return in_a_classroom_kernel("test_exercises_5to9", "kernel_cases", timeout=900)


@pytest.mark.slow
@pytest.mark.parametrize("number", ["5.1", "5.2", "6.1", "6.2"])
def test_kernel_solutions_pass_with_hidden_variants(kernel_results, number):
    outcome = kernel_results[f"{number} solution"]
    assert outcome["status"] == "passed", outcome


@pytest.mark.slow
@pytest.mark.parametrize(
    "case, expected",
    [
        ("5.1 two replicas", ["MirroredStrategy (1 replica(s))"]),
        ("5.1 rate unscaled", ["learning rate"]),
        ("5.1 by class", ["MirroredStrategy (1 replica(s))"]),
        ("5.1 logical devices", ["MirroredStrategy (1 replica(s))"]),
        ("5.1 mirrored devices", ["a 4-replica strategy"]),
        ("5.2 optimizer outside", ["step counter", "not mirrored"]),
        ("5.2 model outside", ["is not mirrored"]),
        ("5.2 no momentum", ["slot"]),
        ("6.1 replica mean", ["the right size"]),
        ("6.1 batch 64", ["global batch 40"]),
        ("6.2 batch 32", ["global batch 48"]),
        ("6.2 no shard", ["of the same examples"]),
        ("6.2 two shards", ["of 3"]),
    ],
)
def test_kernel_wrong_answers_fail(kernel_results, case, expected):
    assert_fails_without_giving_away(case.split()[0], kernel_results[case], *expected)


def test_6_hidden_batches_differ_across_runs_and_repeat_with_the_same_rng():
    import random

    from dtfkit.course.check import ch06

    for draw in (ch06.hidden_step_batches, lambda rng=None: ch06.hidden_pipeline_cases(1438, rng)):
        assert draw(random.Random(29)) == draw(random.Random(29))
        assert len({draw() for _ in range(40)}) > 1  # no rng: a generator seeded fresh each call


def test_6_every_hidden_batch_splits_exactly_and_no_pipeline_runs_out():
    import random

    from dtfkit.course.check import ch06
    from dtfkit.datasets import load_digits

    examples = len(load_digits(split="train")[0])
    for seed in range(300):
        one, two = ch06.hidden_step_batches(random.Random(seed))
        assert 16 <= one <= 64 and 16 <= two <= 64 and two % 2 == 0
        assert 3 * 100 + max(one, two) <= examples  # the fourth case's offset and batch fit the data
        strategy_batch, (pipelines, global_batch) = ch06.hidden_pipeline_cases(examples, random.Random(seed))
        assert strategy_batch % 2 == 0 and 16 <= strategy_batch <= 96
        assert 2 <= pipelines <= 5 and global_batch % pipelines == 0
        per_pipeline = global_batch // pipelines
        assert 8 <= per_pipeline <= 32
        assert ch06.PIPELINE_STEPS * per_pipeline <= examples // pipelines  # read once, a shard lasts


# ---------------------------------------------------------------- chapter 7: real clusters
def _wrong_7_1_from_tf_config(value):
    import json
    import os

    n = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    return n * (n + 1) / 2  # the review's shortcut: the old exercise's sum without any all-reduce


def _wrong_7_1_old_signature():
    return 3.0


def _wrong_7_2_hard_coded(steps):
    return {"count": 10, "device": "/job:ps/replica:0/task:0/device:CPU:0"}


def _wrong_7_2_no_steps():
    return {"count": 10, "device": "/job:ps/replica:0/task:0/device:CPU:0"}


def _run(check_fn, answer, **kw) -> dict:
    return summary(check_fn(answer, **kw))


@pytest.mark.slow
def test_7_1_solution_passes():
    from dtfkit.course import check

    outcome = _run(check.ch07.all_reduce, solution("7.1", "sum_over_workers"))
    assert outcome["status"] == "passed", outcome


@pytest.mark.slow
def test_7_1_tf_config_shortcut_fails():
    from dtfkit.course import check

    outcome = _run(check.ch07.all_reduce, _wrong_7_1_from_tf_config)
    assert_fails_without_giving_away("7.1", outcome, "worker:", "not the sum")


def test_7_1_old_signature_fails_before_starting(no_spawn):
    from dtfkit.course import check

    outcome = _run(check.ch07.all_reduce, _wrong_7_1_old_signature)
    assert_fails_without_giving_away("7.1", outcome, "one argument")
    assert no_spawn == []


@pytest.mark.slow
def test_7_2_solution_passes():
    from dtfkit.course import check

    outcome = _run(check.ch07.ps_counter, solution("7.2", "count_steps"))
    assert outcome["status"] == "passed", outcome


@pytest.mark.slow
def test_7_2_hard_coded_count_fails():
    from dtfkit.course import check

    outcome = _run(check.ch07.ps_counter, _wrong_7_2_hard_coded)
    assert_fails_without_giving_away("7.2", outcome, "chief:0", "at random")


def test_7_2_no_steps_argument_fails_before_starting(no_spawn):
    from dtfkit.course import check

    outcome = _run(check.ch07.ps_counter, _wrong_7_2_no_steps)
    assert_fails_without_giving_away("7.2", outcome, "one argument")


# ------------------------------------------------------------------- chapter 8: the lab
def _wrong_8_1_steps_per_worker(mode, workers, steps, replicas_to_aggregate):
    per_update = (replicas_to_aggregate or workers) if mode == "sync" else 1
    global_step = steps if mode == "sync" else steps * workers  # "each async worker makes `steps` steps"
    return {"global_step": global_step, "per_update": per_update, "applied": global_step * per_update}


def _wrong_8_1_r_in_async(mode, workers, steps, replicas_to_aggregate):
    per_update = replicas_to_aggregate or workers
    return {"global_step": steps, "per_update": per_update, "applied": steps * per_update}


def _wrong_8_1_every_worker(mode, workers, steps, replicas_to_aggregate):
    per_update = workers if mode == "sync" else 1  # "every worker's gradient goes into each update"
    return {"global_step": steps, "per_update": per_update, "applied": steps * per_update}


def _wrong_8_2_pending_too(pushes, global_step):
    out: dict = {}
    for task, steps in pushes.items():
        for _, _, read, applied in steps:
            if applied is None:
                out.setdefault(read + 1, []).append(task)
    return out


def _wrong_8_2_keyed_by_read(pushes, global_step):
    out = {u: [] for u in range(1, global_step + 1)}
    for task, steps in pushes.items():
        for _, _, read, applied in steps:
            if applied is None and 1 <= read <= global_step:
                out[read].append(task)
    return out


def _wrong_8_2_staleness(pushes, global_step):
    out = {u: [] for u in range(1, global_step + 1)}
    for task, steps in pushes.items():
        for _, _, read, applied in steps:
            if applied is not None and applied - read - 1 > 0:  # async's staleness formula
                out[applied].append(task)
    return out


@pytest.mark.slow
@pytest.mark.timing  # real runs whose timing varies: the graded facts must hold under load
def test_8_1_solution_passes():
    from dtfkit.course import check

    outcome = _run(check.ch08.predict_ledger, solution("8.1", "predict"))
    assert outcome["status"] == "passed", outcome


@pytest.mark.parametrize(
    "wrong, expected",
    [
        (_wrong_8_1_steps_per_worker, "global_step="),
        (_wrong_8_1_r_in_async, "per_update="),
        (_wrong_8_1_every_worker, "per_update="),
    ],
)
def test_8_1_wrong_predictions_fail_before_starting(no_spawn, wrong, expected):
    from dtfkit.course import check

    outcome = _run(check.ch08.predict_ledger, wrong)
    assert_fails_without_giving_away("8.1", outcome, expected)


@pytest.mark.slow
@pytest.mark.timing  # real runs whose timing varies: the graded facts must hold under load
def test_8_2_solution_passes():
    from dtfkit.course import check

    outcome = _run(check.ch08.dropped, solution("8.2", "dropped_gradients"))
    assert outcome["status"] == "passed", outcome


@pytest.mark.parametrize(
    "wrong, expected",
    [
        (_wrong_8_2_pending_too, "made updates 1 to"),
        (_wrong_8_2_keyed_by_read, "the ledger says"),
        (_wrong_8_2_staleness, "the ledger says"),
    ],
)
def test_8_2_wrong_answers_fail_before_starting(no_spawn, wrong, expected):
    from dtfkit.course import check

    outcome = _run(check.ch08.dropped, wrong)
    assert_fails_without_giving_away("8.2", outcome, "small example", expected)


# --------------------------------------------------------------- chapter 9: bytes and rings
def _wrong_9_1_floats(n, floats):
    return n * floats


def _wrong_9_1_chapter_size(n, floats):
    return 14400  # 3 workers x 1200 floats x 4 bytes, the chapter's traced run


def _wrong_9_2_broken(n):  # the exercise's own broken schedule
    left = [(i - 1) % n for i in range(n)]
    return {
        "reduce_scatter": [[(i, left[i], (i - s) % n) for i in range(n)] for s in range(n - 1)],
        "all_gather": [[(i, left[i], (i + 1 - s) % n) for i in range(n)] for s in range(n - 1)],
    }


def _wrong_9_2_three_only(n):  # a right schedule, written out for the chapter's 3 workers
    return {
        "reduce_scatter": [[(0, 2, 0), (1, 0, 1), (2, 1, 2)], [(0, 2, 1), (1, 0, 2), (2, 1, 0)]],
        "all_gather": [[(0, 2, 2), (1, 0, 0), (2, 1, 1)], [(0, 2, 0), (1, 0, 1), (2, 1, 2)]],
    }


def _wrong_9_2_right_going(n):  # Part 1's ring: sums right, but sends to the right neighbour
    right = [(i + 1) % n for i in range(n)]  # written out: an answer calling ring_schedule is refused
    return {
        "reduce_scatter": [[(i, right[i], (i - s) % n) for i in range(n)] for s in range(n - 1)],
        "all_gather": [[(i, right[i], (i + 1 - s) % n) for i in range(n)] for s in range(n - 1)],
    }


@pytest.mark.slow
def test_9_1_solution_passes():
    from dtfkit.course import check

    outcome = _run(check.ch09.ps_bytes, solution("9.1", "ps_bytes_received"))
    assert outcome["status"] == "passed", outcome


@pytest.mark.parametrize(
    "wrong, expected", [(_wrong_9_1_floats, "4 bytes"), (_wrong_9_1_chapter_size, "2 workers")]
)
def test_9_1_wrong_formulas_fail_before_starting(no_spawn, wrong, expected):
    from dtfkit.course import check

    assert_fails_without_giving_away("9.1", _run(check.ch09.ps_bytes, wrong), expected)


@pytest.mark.slow
def test_9_2_solution_passes():
    from dtfkit.course import check

    outcome = _run(check.ch09.ring, solution("9.2", "my_ring_schedule"))
    assert outcome["status"] == "passed", outcome


@pytest.mark.parametrize(
    "wrong, expected",
    [
        (_wrong_9_2_broken, "wrong value"),
        (_wrong_9_2_three_only, "4 workers"),
        (_wrong_9_2_right_going, "right neighbour"),
    ],
)
def test_9_2_wrong_schedules_fail_before_starting(no_spawn, wrong, expected):
    import numpy as np

    from dtfkit.course import check
    from dtfkit.recipes import allreduce

    # the written-out schedule is right for 3 workers: only another size catches it
    assert _wrong_9_2_three_only(3) == solution("9.2", "my_ring_schedule")(3)
    # the right-going ring sums right: only its direction is wrong
    grads = [np.full(12, 10.0**i) for i in range(4)]
    assert all(np.allclose(o, 1111.0) for o in allreduce.simulate(_wrong_9_2_right_going(4), grads))
    assert_fails_without_giving_away("9.2", _run(check.ch09.ring, wrong), expected)
    assert_fails_without_giving_away("9.2", _run(check.ch09.ring, wrong, hidden=True), expected)


@pytest.mark.slow
def test_9_2_direction_is_graded_in_tensorflow_too():
    import os

    from dtfkit.course import check

    here, right_answer = os.getpid(), solution("9.2", "my_ring_schedule")

    def left_here_right_in_the_tasks(n):  # passes the NumPy pre-check, goes right in TensorFlow
        return right_answer(n) if os.getpid() == here else _wrong_9_2_right_going(n)

    outcome = _run(check.ch09.ring, left_here_right_in_the_tasks)
    assert_fails_without_giving_away("9.2", outcome, "the trace shows", "right neighbour")
