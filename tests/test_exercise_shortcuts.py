"""Issue 40: no checked exercise passes without its idea (all 24, 1.1 … 12.2).

For every exercise, the reference answer (the notebook's solution cell) is wrapped in a recorder
and run through its check; then three shortcuts are submitted and must be refused (status
"failed"):

- **constant**: returns what the reference returned on the visible check's first call;
- **echo**: returns its first argument unchanged (the natural echo of every signature here: the
  only argument, or the first of a formula's inputs);
- **transcription**: a lookup of inputs to answers, with the constant for any input it lacks. It is
  built from everything the reference answered in an earlier run of the visible check (so it holds
  every fixed case the check asks) and, where a chapter prints tables that could be taken as the
  answer, from those printed outputs (11.1's byte table and traced step, 11.2's times, 10.1's
  TF_CONFIG, 10.2's example).

Where the answer runs in the kernel, this runs in the fast tier and no process may start
(``no_spawn``): the shortcuts fail on the kernel's cases, and the parts that would start a
cluster (11.1's trace, 12.2's real run) are replaced by stand-ins for the reference's run, with
slow tests of the real parts beside them. Where the answer runs in tasks, the test is slow.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

import pytest
from test_exercises_1to4 import solution as solution_1to4
from test_exercises_5to9 import solution as solution_5to12

from dtfkit.course import check
from dtfkit.course.check import ch03, ch08, ch09, ch11, ch12_recovery
from dtfkit.recipes import compression


@pytest.fixture(autouse=True)
def _classroom(monkeypatch):
    monkeypatch.setenv("DTFKIT_CLASSROOM", "1")


# ------------------------------------------------------------------------ the shortcuts
def _key(args: tuple, kwargs: dict) -> str:
    return repr((args, sorted(kwargs.items())))


def solution(number: str, name: str) -> Callable:
    """The notebook's own answer for exercise ``number``."""
    chapter = int(number.split(".")[0])
    return solution_1to4(number, name) if chapter <= 4 else solution_5to12(number, name)


class Recorder:
    """The reference, wrapped: every call's inputs and result, in order."""

    def __init__(self, reference: Callable) -> None:
        self.reference = reference
        self.calls: list[tuple[str, Any]] = []
        self.__name__ = reference.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = self.reference(*args, **kwargs)
        self.calls.append((_key(args, kwargs), result))
        return result


def constant_answer(value: Any) -> Callable:
    def answer(*args, **kwargs):
        return value

    return answer


def echo_answer(*args, **kwargs):
    return args[0] if args else next(iter(kwargs.values()))


def transcription_answer(table: dict[str, Any], fallback: Any) -> Callable:
    def answer(*args, **kwargs):
        return table.get(repr((args, sorted(kwargs.items()))), fallback)

    return answer


class _NoCluster(Exception):
    """Raised where a check would start its cluster, in the runs that only record the reference."""


def _no_cluster(*args, **layout):
    raise _NoCluster("the recording run starts nothing")


def record(number: str, name: str, check_fn: Callable) -> Recorder:
    """Run the visible check on the reference, recorded (what would start is patched by the caller)."""
    recorder = Recorder(solution(number, name))
    check_fn(recorder)
    assert recorder.calls, f"exercise {number}'s check never called the reference"
    return recorder


def assert_refused(number: str, check_fn: Callable, answer: Callable, what: str) -> None:
    result = check_fn(answer)
    assert result.status == "failed", f"exercise {number}: the {what} shortcut was not refused: {result}"


def assert_all_shortcuts_refused(
    number: str, check_fn: Callable, recorder: Recorder, printed: dict[str, Any] | None = None
) -> None:
    first = recorder.calls[0][1]
    table = {key: result for key, result in recorder.calls}
    assert_refused(number, check_fn, constant_answer(first), "constant")
    assert_refused(number, check_fn, echo_answer, "echo")
    assert_refused(number, check_fn, transcription_answer(table, first), "replayed-run transcription")
    if printed:
        assert_refused(number, check_fn, transcription_answer(printed, first), "chapter transcription")


# ------------------------------------------------- the stand-ins for the clusters of 11.1 and 12.2
class _TracedCluster:
    """11.1's cluster, replaced: the trace moves exactly the payload (as the real one does; its slow
    test below runs the real trace)."""

    def run(self, fn, args, kwargs, on, timeout):
        floats = compression.model_floats(kwargs["hidden"])
        runs = []
        for method in args[0]:
            k = kwargs["k"] if method == "topk" else None
            moved = ch11._payload_bytes(method, floats, k)
            runs.append({"method": method, "bytes_to_ps": {"worker:0": moved}, "transfers": []})
        return {"worker:0": runs}


def _honest_real_run(every: int) -> dict:
    """12.2's real run, replaced by what it measures when TensorFlow restores as it should."""
    return {
        "killed_at": 2 * every,
        "resumed_from": every,
        "lost_steps": every,
        "first_step": every + 1,
        "restored_as_saved": True,
    }


@pytest.fixture
def fake_trace(monkeypatch):
    monkeypatch.setattr(ch11, "cluster", lambda **layout: contextlib.nullcontext(_TracedCluster()))


@pytest.fixture
def fake_real_run(monkeypatch):
    monkeypatch.setattr(ch12_recovery, "_real_run", _honest_real_run)


# ------------------------------------------- what the chapters print that could be taken as the answer
def _k(*args: Any) -> str:
    return _key(args, {})


# 11.1: section 4's traced table (38 410 floats, k=384) and the exercise's own output (650 floats, k=130).
PRINTED_11_1 = {
    _k("none", 38_410, None): 153_640,
    _k("fp16", 38_410, None): 76_820,
    _k("bf16", 38_410, None): 76_820,
    _k("topk", 38_410, 384): 3_072,
    _k("sign", 38_410, None): 4_806,
    _k("topk", 650, 130): 1_040,
    _k("sign", 650, None): 86,
}
# 11.2: section 2's times (n=3, S=1.2 MB, α = 1 and 20 ms, 100 Mbit/s), in seconds.
PRINTED_11_2 = {
    _k(method, 3, s, alpha, 8 / 100e6): ms / 1000
    for alpha, times in {
        0.001: {"ps": 578.0, "sharded_ps": 130.0, "ring": 132.0},
        0.02: {"ps": 616.0, "sharded_ps": 168.0, "ring": 208.0},
    }.items()
    for method, ms in times.items()
    for s in (1_200_000, 1_200_000.0)
}
# 10.1: section 5's TF_CONFIG of the exported job's worker 1.
_MNIST = {"PS": 1, "Worker": 2}
PRINTED_10_1 = {
    _k("distributed-mnist", "default", _MNIST, "Worker", 1): {
        "cluster": {
            "ps": ["distributed-mnist-ps-0.default.svc:2222"],
            "worker": [
                "distributed-mnist-worker-0.default.svc:2222",
                "distributed-mnist-worker-1.default.svc:2222",
            ],
        },
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
}
# 10.2: the exercise's own example under each policy (the text asks to predict them).
_EXAMPLE = {("PS", 0): None, ("Worker", 0): 0, ("Worker", 1): None}
PRINTED_10_2 = {_k(_MNIST, "", _EXAMPLE): "Succeeded", _k(_MNIST, "AllWorkers", _EXAMPLE): "Running"}


# ---------------------------------------------------------- answers that run in the kernel: fast
KERNEL = [
    # number, the solution's name, the check, the chapter's printed answers
    ("10.1", "operator_tf_config", check.ch10.tf_config, PRINTED_10_1),
    ("10.2", "job_state", check.ch10.job_state, PRINTED_10_2),
    ("11.2", "sync_seconds", check.ch11.alpha_beta, PRINTED_11_2),
    ("12.1", "find_mistake", check.ch12.broken_config, None),
]


@pytest.mark.parametrize("number, name, check_fn, printed", KERNEL, ids=[c[0] for c in KERNEL])
def test_kernel_exercises_refuse_every_shortcut(no_spawn, number, name, check_fn, printed):
    recorder = record(number, name, check_fn)
    assert check_fn(solution(number, name)).status == "passed"
    assert_all_shortcuts_refused(number, check_fn, recorder, printed)
    assert no_spawn == []


def test_11_1_refuses_every_shortcut_and_its_trace_can_fail(no_spawn, fake_trace):
    recorder = record("11.1", "bytes_to_ps", check.ch11.compressed_bytes)
    assert check.ch11.compressed_bytes(solution("11.1", "bytes_to_ps")).status == "passed"
    assert_all_shortcuts_refused("11.1", check.ch11.compressed_bytes, recorder, PRINTED_11_1)
    # The chapter's sizes are never asked, and no formula case has a size the traced model can have:
    # an answer right everywhere but at the traced model's sizes fails at the trace, and only there.
    reference = solution("11.1", "bytes_to_ps")
    traced_sizes = ch11._traced_sizes()

    def wrong_at_the_traced_size(method, floats, k=None):
        right = reference(method, floats, k)
        return right + 1 if floats in traced_sizes else right

    result = check.ch11.compressed_bytes(wrong_at_the_traced_size)
    assert result.status == "failed" and "the trace says" in result.message, result
    assert no_spawn == []


def test_11_1_never_asks_a_size_the_chapter_prints(no_spawn):
    import random

    for seed in range(200):
        cases = ch11._cases(random.Random(seed), hidden=seed % 2 == 0)
        assert not {f for _m, f, _k in cases} & (ch11.PRINTED_FLOATS | ch11._traced_sizes())


def test_12_2_refuses_every_shortcut_and_its_real_run_can_fail(no_spawn, fake_real_run):
    check_fn = ch12_recovery.check_12_2
    recorder = record("12.2", "choose_save_every", check_fn)
    assert check_fn(solution("12.2", "choose_save_every")).status == "passed"
    assert_all_shortcuts_refused("12.2", check_fn, recorder)
    assert no_spawn == []


def _one_more_than_the_real_budget(max_lost_steps, seconds_per_step, seconds_per_save, mtbf):
    import math

    young = math.sqrt(2 * seconds_per_save * mtbf) / seconds_per_step
    return max(5, min(max_lost_steps, max(1, round(young))))  # right for every budget of 5 steps or more


def test_12_2_an_answer_beyond_the_real_runs_budget_fails_on_what_the_run_measured(no_spawn, fake_real_run):
    result = ch12_recovery.check_12_2(_one_more_than_the_real_budget)
    assert result.status == "failed", result
    assert "resumed from step 5: 5 steps lost, more than max_lost_steps=4" in result.message, result


# Kernel cases first, then a cluster (or a lab run): recorded with the cluster refused; the shortcuts must fail
# before anything starts (their reference's full run is in tests/test_exercises_1to4.py, _5to9.py). The
# kernel's cases are fixed here (3.1's and 3.2's sizes, 8.2's histories, 9.2's rings of 3 to 6), so a
# replay of a whole earlier run would pass them: for 3.x and 8.x the real run that follows asks what no
# table holds (a lab's pushes, the tokens of real runs); 9.2's answer is a function of n alone, and a
# table of its rings written out by hand is the exercise done. Chapter 9 prints one ring, of 4 workers:
# its transcription is submitted below (test_9_2_...).
BEFORE_A_CLUSTER = [
    ("3.1", "sync_options", check.ch03.backup_workers, ch03, "cluster"),
    ("3.2", "tokens_handed_out", check.ch03.token_count, ch03, "cluster"),
    ("8.1", "predict", check.ch08.predict_ledger, ch08, "Lab"),
    ("8.2", "dropped_gradients", check.ch08.dropped, ch08, "Lab"),
    ("9.1", "ps_bytes_received", check.ch09.ps_bytes, ch09, "cluster"),
    ("9.2", "my_ring_schedule", check.ch09.ring, ch09, "cluster"),
]


@pytest.mark.parametrize(
    "number, name, check_fn, module, starter", BEFORE_A_CLUSTER, ids=[c[0] for c in BEFORE_A_CLUSTER]
)
def test_exercises_checked_in_the_kernel_first_refuse_every_shortcut_before_starting(
    monkeypatch, no_spawn, number, name, check_fn, module, starter
):
    monkeypatch.setattr(module, starter, _no_cluster)
    recorder = record(number, name, check_fn)
    first = recorder.calls[0][1]
    for what, answer in [("constant", constant_answer(first)), ("echo", echo_answer)]:
        result = check_fn(answer)
        assert result.status == "failed", f"exercise {number}: the {what} shortcut was not refused: {result}"
        assert "_NoCluster" not in result.message, f"{number} {what}: passed the kernel's cases: {result}"
    assert no_spawn == []


# ------------------------------------------------------- answers that run in tasks: slow, real clusters
# 1.1 and 1.2 build a graph from the `tf` they are given, 2.2 returns a placement function, 4.1 hooks
# made from the loss tensor it is given: no constant can be such an object, so only the echo applies.
# 2.1's ConfigProto, 4.2's keyword arguments, 7.1's sum and 7.2's report can be constants.
def _chapter_2_1_config(tf, job_name, task_index):
    return tf.compat.v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"])  # worker 0's, for all


def _chapter_4_2_options(checkpoint_dir, max_lost_steps):
    return {"checkpoint_dir": "/tmp/train_logs", "save_checkpoint_steps": 10}


def _chapter_7_2_report(steps):
    return {"count": 57, "device": "/job:ps/replica:0/task:0/device:CPU:0"}


def _steps_echo(steps):
    return {"count": steps, "device": "/job:ps/replica:0/task:0/device:CPU:0"}


def _steps_in_the_chief(steps):
    import tensorflow as tf

    from dtfkit.recipes import strategies_multi as sm

    strategy = tf.distribute.ParameterServerStrategy(sm.coordinator_resolver())
    tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        counter = tf.Variable(0, dtype=tf.int64)

    @tf.function(autograph=False)
    def step():
        counter.assign_add(1)

    for _ in range(steps):
        step()  # on the chief: no worker runs it
    return {"count": int(counter.numpy()), "device": counter.device}


def _sum_from_the_callers(value):

    frame = sys._getframe(1)
    while frame is not None:  # the other workers' values, if the check left them within reach
        values = frame.f_locals.get("values")
        if isinstance(values, dict):
            return float(sum(values.values()))
        frame = frame.f_back
    return value


TASKS = [
    ("1.1", check.ch01.variables_on_worker, echo_answer),
    ("1.2", check.ch01.model_parallel, echo_answer),
    ("2.1", check.ch02.device_filters, echo_answer),
    ("2.1", check.ch02.device_filters, _chapter_2_1_config),
    ("2.2", check.ch02.greedy_placement, echo_answer),
    ("4.1", check.ch04.stop_hooks, echo_answer),
    ("4.2", check.ch04.restore_after_ps_crash, echo_answer),
    ("4.2", check.ch04.restore_after_ps_crash, _chapter_4_2_options),
    ("7.1", check.ch07.all_reduce, echo_answer),
    ("7.1", check.ch07.all_reduce, constant_answer(6.0)),
    ("7.1", check.ch07.all_reduce, _sum_from_the_callers),
    ("7.2", check.ch07.ps_counter, echo_answer),
    ("7.2", check.ch07.ps_counter, _chapter_7_2_report),
    ("7.2", check.ch07.ps_counter, _steps_echo),
    ("7.2", check.ch07.ps_counter, _steps_in_the_chief),
]


@pytest.mark.slow
@pytest.mark.parametrize("number, check_fn, answer", TASKS, ids=[f"{n}-{a.__name__}" for n, _c, a in TASKS])
def test_exercises_run_in_tasks_refuse_their_shortcuts(number, check_fn, answer):
    result = check_fn(answer)
    assert result.status == "failed", f"exercise {number}: {answer.__name__} was not refused: {result}"


@pytest.mark.slow
def test_7_2_the_solution_passes_with_the_chief_watched():
    result = check.ch07.ps_counter(solution("7.2", "count_steps"))
    assert result.status == "passed", result


@pytest.mark.slow
def test_11_1_the_real_trace_of_a_drawn_model_agrees_with_the_reference():
    result = check.ch11.compressed_bytes(solution("11.1", "bytes_to_ps"))
    assert result.status == "passed", result


@pytest.mark.slow
def test_12_2_the_real_run_refuses_an_interval_beyond_its_budget():
    result = ch12_recovery.check_12_2(_one_more_than_the_real_budget)
    assert result.status == "failed", result
    assert "5 steps lost, more than max_lost_steps=4" in result.message, result


# 5.1's dict can be a constant (the chapter's 2 replicas); 5.2's model, 6.1's step and 6.2's
# dataset_fn are made from the strategy and model they are given: only the echo applies. They run in a
# TensorFlow kernel of their own (2 logical CPUs), as tests/test_exercises_5to9.py does.
def kernel_shortcuts() -> dict[str, str]:
    """Run in the subprocess: each shortcut's status."""

    def chapter_5_1(strategy, per_replica_batch=32, base_lr=0.05):
        return {"global_batch": 64, "learning_rate": 0.1}

    return {
        "5.1 constant": check.ch05.scaling_rule(chapter_5_1).status,
        "5.1 echo": check.ch05.scaling_rule(echo_answer).status,
        "5.2 echo": check.ch05.model_in_scope(echo_answer).status,
        "6.1 echo": check.ch06.distributed_step(echo_answer).status,
        "6.2 echo": check.ch06.input_pipeline(echo_answer).status,
    }


@pytest.mark.slow
def test_chapters_5_and_6_refuse_their_shortcuts():
    from conftest import in_a_classroom_kernel

    statuses = in_a_classroom_kernel("test_exercise_shortcuts", "kernel_shortcuts", timeout=600)
    assert statuses == dict.fromkeys(statuses, "failed"), statuses


def test_9_2_the_chapters_printed_ring_of_4_transcribed_fails_before_starting(monkeypatch, no_spawn):
    monkeypatch.setattr(ch09, "cluster", _no_cluster)
    ring_of_4 = solution("9.2", "my_ring_schedule")(4)  # section 2 prints ring_schedule(4), step by step
    result = check.ch09.ring(transcription_answer({_k(4): ring_of_4}, ring_of_4))
    assert result.status == "failed" and "_NoCluster" not in result.message, result
    assert no_spawn == []
