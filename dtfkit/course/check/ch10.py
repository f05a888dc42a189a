"""Checks for chapter 10 (beyond one machine: Ray and Kubeflow TFJob).

Both compare the learner's function with what the Kubeflow training operator (kubeflow/trainer
v1.9.4, ported in ``dtfkit.kube.controller`` and tested there against the operator's own
``pod_test.go``) does, for the chapter's case and for layouts the text never names. They run in
plain Python: no cluster starts.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from dtfkit.course.check._core import CheckResult, exercise, failed, passed
from dtfkit.i18n import N_, _
from dtfkit.kube import controller as operator


def _tfjob(job_name: str, namespace: str, replicas: dict[str, int], success_policy: str = "") -> dict:
    spec: dict[str, Any] = {"tfReplicaSpecs": {t: {"replicas": n} for t, n in replicas.items()}}
    if success_policy:
        spec["successPolicy"] = success_policy
    return {"metadata": {"name": job_name, "namespace": namespace}, "spec": spec}


def _config_hint(got: Any, want: dict, replicas: dict[str, int]) -> str:
    if not isinstance(got, dict):
        return _("return the TF_CONFIG as a dict (json.loads of the operator's text), not a string")
    task = got.get("task")
    if isinstance(task, dict) and task.get("type") != want["task"]["type"]:
        if str(task.get("type")).lower() == want["task"]["type"]:
            return _("look at how the task's type is spelled in TF_CONFIG, and in the TFJob's replica names")
        return _("which replica is this TF_CONFIG for? read replica_type and index")
    if isinstance(task, dict) and task.get("index") != want["task"]["index"]:
        return _("the task's index comes from the index argument")
    cluster = got.get("cluster")
    if not isinstance(cluster, dict):
        return _("TF_CONFIG has a 'cluster' dict: every job, with the address of each of its tasks")
    if "Evaluator" in replicas and not any(str(j).lower() == "evaluator" for j in cluster):
        return _(
            "chapter 7's cluster left the evaluator out, but which replica types does the operator list in its cluster? (section 5)"
        )
    if set(cluster) != set(want["cluster"]):
        return _("the cluster's jobs are the TFJob's replica types, in lowercase")
    for job, hosts in want["cluster"].items():
        have = cluster.get(job)
        if not isinstance(have, list) or len(have) != len(hosts):
            return _("job {job!r} has one address per replica: how many {job} replicas are there?").format(
                job=job
            )
        if have != hosts:
            return _(
                "compare your address {have_0!r} with the form <job>-<type>-<index>.<namespace>.svc:<port> of section 5: every part comes from the arguments"
            ).format(have_0=have[0])
    if got.get("environment") != want.get("environment"):
        return _("the operator adds one more key to TF_CONFIG, besides 'cluster' and 'task' (section 5)")
    return _("compare your dict with the operator's TF_CONFIG printed in section 5, key by key")


@exercise(
    "10.1",
    "The operator's TF_CONFIG",
    reads=("job_name", "namespace", "replicas", "replica_type", "index"),
    varies=N_("job names, namespaces and layouts"),
)
def tf_config(operator_tf_config: Callable, *, hidden: bool = False) -> CheckResult:
    """Compare ``operator_tf_config(job_name, namespace, replicas, replica_type, index)`` (a dict) with
    the TF_CONFIG the Kubeflow operator writes, for the chapter's job and for other layouts.

    Example::

        check.ch10.tf_config(operator_tf_config)
    """
    rng = random.Random()
    name = rng.choice(["lab", "mnist", "digits", "class"]) + f"-{rng.randint(2, 99)}"
    cases = [
        ("distributed-mnist", "default", {"PS": 1, "Worker": 2}, "Worker", 1),
        (name, "class-7", {"PS": 2, "Worker": 3}, "PS", 1),
        (name, "ml", {"Chief": 1, "PS": 1, "Worker": 2}, "Chief", 0),
        ("digits", "default", {"PS": 1, "Worker": 2, "Evaluator": 1}, "Evaluator", 0),
    ]
    if hidden:
        cases += [
            (name, "team-b", {"Chief": 1, "Worker": 4, "Evaluator": 1}, "Worker", 3),
            ("a", "x", {"PS": 3, "Worker": 1}, "PS", 2),
        ]
    for job_name, namespace, replicas, rtype, index in cases:
        want = json.loads(operator.operator_tf_config(_tfjob(job_name, namespace, replicas), rtype, index))
        got = operator_tf_config(job_name, namespace, dict(replicas), rtype, index)
        if got == want:
            continue
        layout = ", ".join(f"{n} {t}" for t, n in replicas.items())
        return failed(
            _(
                "for replica {rtype} {index} of TFJob {namespace}/{job_name} ({layout}) your TF_CONFIG differs from the one the operator writes"
            ).format(rtype=rtype, index=index, namespace=namespace, job_name=job_name, layout=layout),
            _config_hint(got, want, replicas),
        )
    return passed(
        _(
            "your TF_CONFIG matches the operator's for {len_cases} replicas of {len_cases} TFJobs (ps, workers, a chief and an evaluator, several namespaces)"
        ).format(len_cases=len(cases))
    )


_STATES = ("Succeeded", "Failed", "Running")


def _scenarios(rng: random.Random, count: int) -> list[tuple[dict[str, int], str, dict]]:
    """Random layouts, success policies and replica exit codes (None: still running)."""
    out = []
    for _draw in range(count):
        replicas = {"PS": rng.randint(1, 2), "Worker": rng.randint(1, 4)}
        if rng.random() < 0.35:
            replicas = {rng.choice(["Chief", "Master"]): 1, **replicas}
        codes: dict[tuple[str, int], int | None] = {}
        for rtype, n in replicas.items():
            for i in range(n):
                if rtype == "PS":
                    codes[(rtype, i)] = None  # a ps joins for ever
                else:
                    codes[(rtype, i)] = rng.choices([None, 0, 1], weights=[4, 5, 1])[0]
        out.append((replicas, rng.choice(["", "AllWorkers"]), codes))
    return out


def _want_state(replicas: dict[str, int], policy: str, codes: dict) -> str:
    verdict = operator.job_verdict(_tfjob("job", "default", replicas, policy), codes)
    return "Running" if verdict is None else verdict[0]


def _describe(codes: dict) -> str:
    def state(code: int | None) -> str:
        return _("running") if code is None else _("exited {code}").format(code=code)

    return ", ".join(f"{t.lower()}-{i} {state(c)}" for (t, i), c in codes.items())


@exercise(
    "10.2",
    "When is a TFJob done?",
    reads=("replicas", "success_policy", "exit_codes"),
    varies=N_("layouts and policies"),
)
def job_state(job_state: Callable, *, hidden: bool = False) -> CheckResult:
    """Compare ``job_state(replicas, success_policy, exit_codes)`` ("Succeeded", "Failed" or
    "Running") with the operator's rules, for the chapter's cases and random ones.

    Example::

        check.ch10.job_state(job_state)
    """
    two = {"PS": 1, "Worker": 2}
    named = [
        (two, "", {("PS", 0): None, ("Worker", 0): 0, ("Worker", 1): None}),
        (two, "AllWorkers", {("PS", 0): None, ("Worker", 0): 0, ("Worker", 1): None}),
        (two, "AllWorkers", {("PS", 0): None, ("Worker", 0): None, ("Worker", 1): 0}),
        (two, "", {("PS", 0): None, ("Worker", 0): None, ("Worker", 1): 1}),
        (
            {"Chief": 1, "PS": 1, "Worker": 2},
            "AllWorkers",
            {("Chief", 0): 0, ("PS", 0): None, ("Worker", 0): None, ("Worker", 1): None},
        ),
        (
            {"Chief": 1, "PS": 1, "Worker": 2},
            "",
            {("Chief", 0): None, ("PS", 0): None, ("Worker", 0): 0, ("Worker", 1): 0},
        ),
        # With a chief, a failing worker still fails the job: the chief decides success only.
        (
            {"Chief": 1, "PS": 1, "Worker": 2},
            "",
            {("Chief", 0): None, ("PS", 0): None, ("Worker", 0): 0, ("Worker", 1): 1},
        ),
        # Seen in one reconcile, the chief's success and a worker's failure: the operator sets
        # Succeeded (Chief comes first), then Failed; the job's state is its last condition, Failed.
        (
            {"Chief": 1, "PS": 1, "Worker": 2},
            "AllWorkers",
            {("Chief", 0): 0, ("PS", 0): None, ("Worker", 0): 1, ("Worker", 1): None},
        ),
        # Master is a chief too: worker 0's success decides nothing, the master's does.
        (
            {"Master": 1, "Worker": 2},
            "",
            {("Master", 0): None, ("Worker", 0): 0, ("Worker", 1): None},
        ),
        (
            {"Master": 1, "PS": 1, "Worker": 2},
            "AllWorkers",
            {("Master", 0): 0, ("PS", 0): None, ("Worker", 0): None, ("Worker", 1): None},
        ),
        (
            {"Master": 1, "Worker": 1},
            "",
            {("Master", 0): None, ("Worker", 0): 2},
        ),
        # Without a chief, worker 0's success does not hide another worker's failure.
        (two, "", {("PS", 0): None, ("Worker", 0): 0, ("Worker", 1): 1}),
    ]
    cases = named + _scenarios(random.Random(), 40 if hidden else 12)
    for replicas, policy, codes in cases:
        want = _want_state(replicas, policy, codes)
        got = job_state(dict(replicas), policy, dict(codes))
        if got == want:
            continue
        if got not in _STATES:
            return failed(
                _("job_state returned {got!r}").format(got=got),
                _("return one of {states}").format(states=", ".join(map(repr, _STATES))),
            )
        shown_policy = repr(policy) if policy else _('"" (the default)')
        hint = {
            ("Running", "Succeeded"): _(
                "which replica's success decides the job, with this layout and policy?"
            ),
            ("Succeeded", "Running"): _(
                "is the replica whose success ends the job done yet? (with a chief, only the chief counts)"
            ),
            ("Failed", "Succeeded"): _(
                "seen in the same reconcile, a success and a failure are both recorded, the failure last, and a TFJob's state is its last condition"
            ),
            ("Failed", "Running"): _("a replica that exits non-zero fails the job, whatever the others do"),
        }.get(
            (want, got),
            _("go through the rules of section 5 in order: failures first, then the chief, then the policy"),
        )
        return failed(
            _(
                "with {replica_list}, successPolicy {shown_policy} and {describe_codes}, you said {got!r}; the operator says the job is {want!r}"
            ).format(
                replica_list=", ".join(f"{n} {t}" for t, n in replicas.items()),
                shown_policy=shown_policy,
                describe_codes=_describe(codes),
                got=got,
                want=want,
            ),
            hint,
        )
    return passed(
        _(
            "your job states match the operator's for {len_cases} layouts and exit histories ({len_named} named, {len_cases_len_named} random), with and without a chief"
        ).format(len_cases=len(cases), len_named=len(named), len_cases_len_named=len(cases) - len(named))
    )
