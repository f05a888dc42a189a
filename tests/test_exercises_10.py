"""Exercises 10.1 and 10.2: the notebook's own solutions pass, and wrong answers fail without
giving the answer away. Both checks compare with the Kubeflow operator's rules in plain Python
(``dtfkit.kube.controller``): no process starts (``no_spawn``)."""

from __future__ import annotations

import pytest
from test_exercises_5to9 import GIVEAWAYS, assert_fails_without_giving_away, solution, summary

from dtfkit.course import check

GIVEAWAYS["10.1"] = [
    '"environment": "cloud"',
    "evaluator is in the cluster",
    "every replica type, the evaluator",
]
GIVEAWAYS["10.2"] = ['!= "AllWorkers"', '("Worker", 0)) == 0']


def test_10_1_the_notebooks_solution_passes_with_its_hidden_variants(no_spawn):
    answer = solution("10.1", "operator_tf_config")
    assert check.ch10.tf_config(answer).status == "passed"
    assert check.ch10.tf_config(answer, hidden=True).status == "passed"
    assert no_spawn == []


def _cluster(job_name, namespace, replicas, skip=(), case=str.lower):
    return {
        case(t): [f"{job_name}-{t.lower()}-{i}.{namespace}.svc:2222" for i in range(n)]
        for t, n in replicas.items()
        if t not in skip
    }


def _wrong_evaluator_left_out(job_name, namespace, replicas, replica_type, index):
    """Chapter 7's layout (and TensorFlow's guides'), not the operator's: genClusterSpec lists the evaluator."""
    cluster = _cluster(job_name, namespace, replicas, skip=("Evaluator",))
    return {
        "cluster": cluster,
        "task": {"type": replica_type.lower(), "index": index},
        "environment": "cloud",
    }


def _wrong_type_as_spelled(job_name, namespace, replicas, replica_type, index):
    cluster = _cluster(job_name, namespace, replicas)
    return {"cluster": cluster, "task": {"type": replica_type, "index": index}, "environment": "cloud"}


def _wrong_default_namespace(job_name, namespace, replicas, replica_type, index):
    cluster = _cluster(job_name, "default", replicas)
    return {
        "cluster": cluster,
        "task": {"type": replica_type.lower(), "index": index},
        "environment": "cloud",
    }


def _wrong_no_environment(job_name, namespace, replicas, replica_type, index):
    cluster = _cluster(job_name, namespace, replicas)
    return {"cluster": cluster, "task": {"type": replica_type.lower(), "index": index}}


@pytest.mark.parametrize(
    "wrong, expected",
    [
        (_wrong_evaluator_left_out, "which replica types does the operator list"),
        (_wrong_type_as_spelled, "how the task's type is spelled"),
        (_wrong_default_namespace, "never reads `namespace`"),
        (_wrong_no_environment, "one more key"),
    ],
)
def test_10_1_wrong_answers_fail_with_a_hint(no_spawn, wrong, expected):
    assert_fails_without_giving_away("10.1", summary(check.ch10.tf_config(wrong)), expected)
    assert no_spawn == []


def test_10_1_a_hard_coded_address_fails_on_another_job(no_spawn):
    def wrong(job_name, namespace, replicas, replica_type, index):
        cluster = {
            t.lower(): [f"distributed-mnist-{t.lower()}-{i}.default.svc:2222" for i in range(n)]
            for t, n in replicas.items()
        }
        # reads every argument, so only the comparison can catch it
        _ = (job_name, namespace)
        return {
            "cluster": cluster,
            "task": {"type": replica_type.lower(), "index": index},
            "environment": "cloud",
        }

    assert_fails_without_giving_away("10.1", summary(check.ch10.tf_config(wrong)), "<job>-<type>-<index>")


def test_10_2_the_notebooks_solution_passes_with_its_hidden_variants(no_spawn):
    answer = solution("10.2", "job_state")
    assert check.ch10.job_state(answer).status == "passed"
    assert check.ch10.job_state(answer, hidden=True).status == "passed"
    assert no_spawn == []


def _wrong_ignores_policy(replicas, success_policy, exit_codes):
    _ = success_policy
    if any(code not in (None, 0) for code in exit_codes.values()):
        return "Failed"
    if "Chief" in replicas:
        return "Succeeded" if exit_codes.get(("Chief", 0)) == 0 else "Running"
    return "Succeeded" if exit_codes.get(("Worker", 0)) == 0 else "Running"


def _wrong_waits_for_every_replica(replicas, success_policy, exit_codes):
    _ = (replicas, success_policy)
    if any(code not in (None, 0) for code in exit_codes.values()):
        return "Failed"
    return "Succeeded" if all(code == 0 for code in exit_codes.values()) else "Running"


def _wrong_chief_waits_for_workers(replicas, success_policy, exit_codes):
    if any(code not in (None, 0) for code in exit_codes.values()):
        return "Failed"
    workers = [c for (t, _), c in exit_codes.items() if t in ("Worker", "Chief")]
    if all(c == 0 for c in workers):
        return "Succeeded"
    if "Chief" not in replicas and success_policy != "AllWorkers" and exit_codes.get(("Worker", 0)) == 0:
        return "Succeeded"
    return "Running"


def _no_chief_state(success_policy, exit_codes):
    workers = [c for (t, _), c in exit_codes.items() if t == "Worker"]
    if workers and all(c == 0 for c in workers):
        return "Succeeded"
    if success_policy != "AllWorkers" and exit_codes.get(("Worker", 0)) == 0:
        return "Succeeded"
    return "Running"


def _wrong_with_a_chief_only_the_chief_counts(replicas, success_policy, exit_codes):
    # The review's: with a chief, the workers' failures are not looked at (41 % of visible runs passed).
    if "Chief" in replicas or "Master" in replicas:
        leaders = [c for (t, _), c in exit_codes.items() if t in ("Chief", "Master")]
        if any(c not in (None, 0) for c in leaders):
            return "Failed"
        return "Succeeded" if leaders and all(c == 0 for c in leaders) else "Running"
    if any(code not in (None, 0) for code in exit_codes.values()):
        return "Failed"
    return _no_chief_state(success_policy, exit_codes)


def _wrong_success_checked_before_failure(replicas, success_policy, exit_codes):
    # The review's: a success seen decides before any failure is read (46 % of visible runs passed).
    if "Chief" in replicas or "Master" in replicas:
        leaders = [c for (t, _), c in exit_codes.items() if t in ("Chief", "Master")]
        if leaders and all(c == 0 for c in leaders):
            return "Succeeded"
    elif _no_chief_state(success_policy, exit_codes) == "Succeeded":
        return "Succeeded"
    if any(code not in (None, 0) for code in exit_codes.values()):
        return "Failed"
    return "Running"


def _wrong_master_is_a_worker(replicas, success_policy, exit_codes):
    if any(code not in (None, 0) for code in exit_codes.values()):
        return "Failed"
    if "Chief" in replicas:
        return "Succeeded" if exit_codes.get(("Chief", 0)) == 0 else "Running"
    return _no_chief_state(success_policy, exit_codes)


@pytest.mark.parametrize(
    "wrong, expected",
    [
        (_wrong_ignores_policy, "the operator says the job is"),
        (_wrong_waits_for_every_replica, "the operator says the job is"),
        (_wrong_chief_waits_for_workers, "only the chief counts"),
        (_wrong_with_a_chief_only_the_chief_counts, "fails the job, whatever the others do"),
        (_wrong_success_checked_before_failure, "its last condition"),
        (_wrong_master_is_a_worker, "which replica's success decides the job"),
    ],
)
def test_10_2_wrong_answers_fail_with_a_hint(no_spawn, wrong, expected):
    for _run in range(20):  # the named cases refuse them every time, not by the luck of the draw
        assert_fails_without_giving_away("10.2", summary(check.ch10.job_state(wrong)), expected)
    assert no_spawn == []
