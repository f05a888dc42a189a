"""Rules about the cluster's configuration alone: what TensorFlow would refuse, or what makes
a cluster wait for ever, read from the TF_CONFIGs before any process starts.

Each rule names the TensorFlow source it follows (TF 2.21, tensorflow/python/...).

Example::

    given, _ = read_configs([config_0, config_1])
    config_findings(given, machines=2, strategy=None)    # [Finding(...), ...]
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dtfkit.diagnosis import addresses, inputs
from dtfkit.diagnosis.configs import KNOWN_JOBS, Given, Job, Process
from dtfkit.diagnosis.findings import Finding
from dtfkit.i18n import N_, _

MWMS = "multi_worker_mirrored"
PSS = "parameter_server"
STRATEGIES = {
    "mwms": MWMS,
    "multiworkermirroredstrategy": MWMS,
    "multi_worker_mirrored": MWMS,
    "ps": PSS,
    "pss": PSS,
    "parameterserverstrategy": PSS,
    "parameter_server": PSS,
}


def strategy_name(strategy: Any) -> str | None:
    """``"mwms"``/``"MultiWorkerMirroredStrategy"`` -> MWMS, ``"ps"`` -> PSS; None stays None."""
    if strategy is None:
        return None
    inputs.check_strategy(strategy)
    key = strategy.replace("tf.distribute.", "").replace("experimental.", "").lower()
    if key not in STRATEGIES:
        raise inputs.DiagnoseInputError(
            f"strategy={inputs.describe(strategy)} is not one diagnose knows: use 'mwms' (MultiWorkerMirroredStrategy) "
            "or 'ps' (ParameterServerStrategy). Next: pass one of these names, or leave strategy out to "
            "check only the rules every strategy shares."
        )
    return STRATEGIES[key]


def config_findings(given: Given, *, machines: int = 0, strategy: str | None = None) -> list[Finding]:
    """Every static finding about the processes ``given`` (see the module docstring); ``machines``:
    how many machines the cluster spans (0: not said)."""
    found: list[Finding] = []
    distinct = _distinct_clusters(given)  # first: it refuses clusters too large to check
    for process in given.processes:
        found += _task_in_cluster(process)
    found += _duplicate_tasks(given)
    found += _disagreeing_clusters(given)
    for cluster in distinct:
        found += _job_names(cluster)
        found += _chiefs(cluster)
        found += _address_rules(cluster, machines)
        found += _strategy_rules(cluster, strategy)
    found += _never_launched(given)
    return found


def _name(job: str, index: int) -> str:
    return f"{job}:{index}"


def _distinct_clusters(given: Given) -> list[dict[str, Job]]:
    seen: dict[str, dict[str, Job]] = {}
    for process in given.processes:
        if process.cluster is not None:
            seen.setdefault(process.cluster_key, process.cluster)
    distinct = list(seen.values())
    inputs.check_count(
        "tf_config", sum(map(_task_count, distinct)), inputs.MAX_TASKS, "tasks in its clusters"
    )
    return distinct


def _task_count(cluster: dict[str, Job]) -> int:
    return sum(len(tasks) for tasks in cluster.values())


def _task_in_cluster(process: Process) -> list[Finding]:
    cluster, job, index = process.cluster, process.task_type, process.task_index
    if cluster is None or job is None or index is None:
        return []
    # multi_worker_util._validate_cluster_spec: "`task_type` %r not found in cluster_spec." (the evaluator
    # is exempt: "it is still a valid configuration when `task_type` is `evaluator` but it doesn't appear").
    if job not in cluster:
        if job == "evaluator":
            return []
        near = [j for j in cluster if j.lower().rstrip("s") == job.lower().rstrip("s")]
        spelled = _(" (the cluster spells it {near_0!r})").format(near_0=near[0]) if near else ""
        return [
            Finding(
                "task-type-not-in-cluster",
                process.label,
                _(
                    "This process says it is a {job!r} task, but the cluster has no {job!r} job{spelled}; its jobs are {join_map_repr_cluster}."
                ).format(job=job, spelled=spelled, join_map_repr_cluster=", ".join(map(repr, cluster))),
                _("Set task.type to one of the cluster's job names, spelled exactly as in 'cluster'."),
            )
        ]
    # _validate_cluster_spec: "The `task_id` %d exceeds the maximum id of %s." (task_id >= the job's
    # task count; a sparse job's count is how many indices it gives).
    tasks = cluster[job]
    count = len(tasks)
    if index in tasks and index < count:
        return []
    if set(tasks) == set(range(count)):  # a dense job: a list, or a dict of every index from 0
        which = _("indices 0 to {count_1}").format(count_1=count - 1)
        fix = _("Count task indices from 0: {indices}, or add {job} addresses to the cluster.")
    else:
        which = (_("index {tasks}") if count == 1 else _("indices {tasks}")).format(
            tasks=_some(sorted(tasks))
        )
        fix = (
            _("Number the {job} job's tasks 0 to {last} (or write its addresses as a list).")
            if count > 1
            else _("Give the {job} job's only task the index 0 (or write its address as a list).")
        )
    what = (
        _("TensorFlow refuses task index {index}: a task's index must be below its job's task count, and ")
        if index in tasks
        else _("Task index {index} does not exist: ")
    ).format(index=index)
    message = (
        _("{what}job {job!r} has {count} tasks ({which}).")
        if count != 1
        else _("{what}job {job!r} has {count} task ({which}).")
    )
    return [
        Finding(
            "task-index-out-of-range",
            process.label,
            message.format(what=what, job=job, count=count, which=which),
            fix.format(indices=_indices(job, count), job=job, last=count - 1),
        )
    ]


def _some(indices: list[int]) -> str:
    shown = ", ".join(map(str, indices[:5]))
    return shown + (f", ... ({len(indices) - 5} more)" if len(indices) > 5 else "")


def _indices(job: str, count: int) -> str:
    return (
        _("the only {job} is {job}:0").format(job=job)
        if count == 1
        else _("the {count} {job} tasks are {job}:0 to {job}:{count_1}").format(
            count=count, job=job, count_1=count - 1
        )
    )


def _duplicate_tasks(given: Given) -> list[Finding]:
    claims = Counter(
        (p.task_type, p.task_index)
        for p in given.processes
        if p.task_type is not None and p.task_index is not None
    )
    return [
        Finding(
            "duplicate-task",
            _name(job, index),
            _(
                "{count} processes claim to be {name_job_index}: the second cannot bind the task's port, and the task it should have been is never launched."
            ).format(count=count, name_job_index=_name(job, index)),
            _("Give every process its own task type and index (copy the TF_CONFIG, then change 'task')."),
        )
        for (job, index), count in claims.items()
        if count > 1
    ]


def _disagreeing_clusters(given: Given) -> list[Finding]:
    with_cluster = [p for p in given.processes if p.cluster is not None]
    if len(with_cluster) < 2:
        return []
    # Compare with the cluster most processes hold (the first of them on a tie): the odd ones out are named.
    common = Counter(p.cluster_key for p in with_cluster).most_common(1)[0][0]
    first = next(p for p in with_cluster if p.cluster_key == common)
    found = []
    for other in with_cluster:
        if other.cluster_key == common:
            continue
        found.append(
            Finding(
                "clusters-disagree",
                other.label,
                _(
                    "{label}'s cluster differs from {label_2}'s ({difference_first_cluster_oth}): the tasks will wait for peers at addresses nobody serves."
                ).format(
                    label=other.label,
                    label_2=first.label,
                    difference_first_cluster_oth=_difference(first.cluster or {}, other.cluster or {}),
                ),
                _("Write the cluster once and give every process the same 'cluster'; only 'task' differs."),
                see="tensorflow/tensorflow#31154",
            )
        )
    return found


def _difference(a: dict[str, Job], b: dict[str, Job]) -> str:
    for job in sorted(set(a) | set(b)):
        if job not in a or job not in b:
            return _("job {job!r} is in only one of them").format(job=job)
        if len(a[job]) != len(b[job]):
            return _("job {job!r} has {len_a_job} tasks in one and {len_b_job} in the other").format(
                job=job, len_a_job=len(a[job]), len_b_job=len(b[job])
            )
        for i in sorted(set(a[job]) | set(b[job])):
            x, y = a[job].get(i), b[job].get(i)
            if repr(x) != repr(y):
                return _("{name_job_i} is {short_x} in one and {short_y} in the other").format(
                    name_job_i=_name(job, i), short_x=_short(x), short_y=_short(y)
                )
    return _("the jobs are in a different order")


def _short(address: Any) -> str:
    return inputs.describe(address) if isinstance(address, str) else repr(address)


def _job_names(cluster: dict[str, Job]) -> list[Finding]:
    found = []
    for job in cluster:
        if job in KNOWN_JOBS or job == "master":
            continue
        # multi_worker_util._validate_cluster_spec: "Disallowed task type found in cluster spec."
        near = [k for k in KNOWN_JOBS if k == job.lower().rstrip("s") or k == job.lower()]
        hint = _(" (did you mean {near_0!r}?)").format(near_0=near[0]) if near else ""
        found.append(
            Finding(
                "unknown-job",
                job[:80],
                _(
                    "Job {inputs_describe_job} is not one TensorFlow's strategies accept{hint}: they allow chief, worker, ps and evaluator."
                ).format(inputs_describe_job=inputs.describe(job), hint=hint),
                _("Rename the job to 'chief', 'worker', 'ps' or 'evaluator' (lower case)."),
            )
        )
    if "master" in cluster and "chief" not in cluster:
        found.append(
            Finding(
                "unknown-job",
                "master",
                _(
                    "Job 'master' is TensorFlow 1's name for the coordinating task; TF 2's strategies refuse it (they allow chief, worker, ps and evaluator)."
                ),
                _("Rename 'master' to 'chief'."),
            )
        )
    return found


def _chiefs(cluster: dict[str, Job]) -> list[Finding]:
    found = []
    if "chief" in cluster and "master" in cluster:
        found.append(
            Finding(
                "chief-and-master",
                "master",
                _(
                    "The cluster has both a 'chief' and a 'master' job: two tasks would each act as the one that coordinates, and TF 2's strategies refuse 'master'."
                ),
                _("Keep one coordinating task, named 'chief'; drop the 'master' job."),
            )
        )
    # _validate_cluster_spec: "There must be at most one 'chief' job." / "... at most one 'evaluator' job."
    for job, code in (("chief", "several-chiefs"), ("evaluator", "several-evaluators")):
        if len(cluster.get(job, [])) > 1:
            found.append(
                Finding(
                    code,
                    job,
                    _("Job {job!r} has {len_cluster_job} tasks; TensorFlow allows at most one {job}.").format(
                        job=job, len_cluster_job=len(cluster[job])
                    ),
                    _("Keep one {job} task and make the others workers.").format(job=job),
                )
            )
    return found


def _address_rules(cluster: dict[str, Job], machines: int) -> list[Finding]:
    found: list[Finding] = []
    good: dict[str, str] = {}
    places: dict[str, list[str]] = {}
    for job, tasks in cluster.items():
        for index, address in tasks.items():
            task = _name(job, index)
            problem = addresses.address_problem(address)
            if problem is not None:
                code, what = problem
                found.append(
                    Finding(
                        code,
                        task,
                        _("{task}'s address {what}.").format(task=task, what=what),
                        _(_ADDRESS_FIX[code]),
                    )
                )
                continue
            good[task] = address
            places.setdefault(addresses.same_place(address), []).append(task)
    for sharing in places.values():
        if len(sharing) > 1:
            named = (
                _(" and ").join(sharing)
                if len(sharing) <= 5
                else _("{join_tasks_5} and {len_tasks_5} more").format(
                    join_tasks_5=", ".join(sharing[:5]), len_tasks_5=len(sharing) - 5
                )
            )
            found.append(
                Finding(
                    "duplicate-address",
                    sharing[1],
                    _(
                        "{named} have the same address ({good_tasks_0}): two servers cannot listen on one port of one machine."
                    ).format(named=named, good_tasks_0=good[sharing[0]]),
                    _("Give every task its own host:port."),
                )
            )
    found += _loopback_rules(good, machines)
    return found


_ADDRESS_FIX = {
    "address-no-port": N_("Write every address as host:port, e.g. 'worker0.example.com:2222'."),
    "address-bad-port": N_("Use a port number from 1 to 65535 after the colon, e.g. 'host:2222'."),
    "address-scheme": N_(
        "Drop the 'grpc://' prefix: the cluster holds host:port, and the protocol is set separately (rpc_layer)."
    ),
    "address-not-dialable": N_(
        "Write each address as a string: the exact hostname or IP address and the port "
        "a peer dials, no spaces, IPv6 in brackets ('[fe80::1]:2222')."
    ),
}


def _loopback_rules(good: dict[str, str], machines: int) -> list[Finding]:
    loopback = [task for task, address in good.items() if addresses.is_this_machine(address)]
    if not loopback:
        return []
    other_hosts = {addresses.host_of(a) for a in good.values() if not addresses.is_this_machine(a)}
    if machines <= 1 and not other_hosts:  # one machine: loopback reaches every task
        return []
    shown = sorted(other_hosts)
    hosts = ", ".join(shown[:5]) + (
        _(" and {count} more").format(count=len(shown) - 5) if len(shown) > 5 else ""
    )
    why = (
        _("the cluster spans {machines} machines").format(machines=machines)
        if machines > 1
        else _("other tasks are on {hosts}").format(hosts=hosts)
    )
    return [
        Finding(
            "localhost-multi-machine",
            task,
            _(
                "{task}'s address {good_task} is this machine's {loopback_if_addresses_is_loo}, but {why}: a task on another machine that dials it reaches itself, not this task."
            ).format(
                task=task,
                good_task=good[task],
                loopback_if_addresses_is_loo=_("loopback")
                if addresses.is_loopback(good[task])
                else _("any-address (where a server listens)"),
                why=why,
            ),
            _("Use each machine's hostname or network IP in the cluster (the same list on every machine)."),
            see="tensorflow/tensorflow#57372",
        )
        for task in loopback
    ]


def _strategy_rules(cluster: dict[str, Job], strategy: str | None) -> list[Finding]:
    if strategy == MWMS and cluster.get("ps"):
        # multi_worker_util.worker_count: a ps task raises "Unexpected `task_type` 'ps'"; the collective
        # group is chief + workers only, so the ps tasks have nothing to do.
        return [
            Finding(
                "mwms-with-ps",
                "ps",
                _(
                    "MultiWorkerMirroredStrategy has no parameter servers: every worker keeps its own copy of the variables, and a ps process that builds the strategy fails with \"Unexpected `task_type` 'ps'\"."
                ),
                _("Drop the 'ps' job from the cluster (or use ParameterServerStrategy)."),
            )
        ]
    if strategy == PSS:
        # parameter_server_strategy_v2._verify_args_and_config: "There must be at least one ps." /
        # "There must be at least one worker."
        return [
            Finding(
                f"pss-needs-{job}",
                job,
                _("ParameterServerStrategy needs at least one {job} task and the cluster has none.").format(
                    job=job
                ),
                _("Add a '{job}' job to the cluster.").format(job=job),
            )
            for job in ("ps", "worker")
            if not cluster.get(job)
        ]
    return []


def _never_launched(given: Given) -> list[Finding]:
    if not given.complete:
        return []
    clusters = _distinct_clusters(given)
    if len(clusters) != 1:
        return []  # clusters-disagree says what is wrong; which one is right is the learner's call
    run = {(p.task_type, p.task_index) for p in given.processes}
    missing = [
        _name(job, index)
        for job, tasks in clusters[0].items()
        # The evaluator is outside the training: nothing waits for it (multi_worker_util.worker_count,
        # and MWMS's coordination service coordinates only chief and worker).
        if job != "evaluator"
        for index in tasks
        if (job, index) not in run
    ]
    return [
        Finding(
            "never-launched",
            task,
            _(
                "{task} is in the cluster but none of the {len_given_processes} TF_CONFIGs runs it: the others will wait for it for ever."
            ).format(task=task, len_given_processes=len(given.processes)),
            _(
                "Start a process whose TF_CONFIG says task {{'type': '{task_split_0}', 'index': {task_split_1}}}, or remove it from the cluster."
            ).format(task_split_0=task.split(":")[0], task_split_1=task.split(":")[1]),
            see="tensorflow/tensorflow#39922",
        )
        for task in missing
    ]
