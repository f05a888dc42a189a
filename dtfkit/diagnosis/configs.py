"""Read what ``diagnose`` is given (TF_CONFIG dicts or JSON texts, a list of them, or a
ClusterSpec dict) into ``Process`` records, with a finding for each one TensorFlow could
not read at all.

Example::

    processes, findings = read_configs(['{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}'])
    processes[0].name          # 'worker:0'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dtfkit.diagnosis.findings import Finding

# multi_worker_util._validate_cluster_spec: allowed_task_types = ("chief", "worker", "evaluator", "ps", None)
KNOWN_JOBS = ("chief", "worker", "ps", "evaluator")


@dataclass(frozen=True)
class Process:
    """One process's TF_CONFIG, read: ``label`` names it in messages ("worker:1", or
    "TF_CONFIG #2" when it names no task); ``cluster`` is None when it has none usable."""

    position: int
    label: str
    cluster: dict[str, list[Any]] | None
    task_type: str | None
    task_index: int | None


@dataclass(frozen=True)
class Given:
    """What ``diagnose`` was given: the processes, and whether they are every process of the
    cluster (a list: one TF_CONFIG per process), so a task none of them runs is never launched."""

    processes: tuple[Process, ...]
    complete: bool


def looks_like_cluster_spec(value: dict) -> bool:
    """``{"worker": [...], "ps": [...]}``: every value a list (or TF's sparse {index: address})."""
    return (
        bool(value)
        and "cluster" not in value
        and "task" not in value
        and all(isinstance(v, (list, tuple, dict)) for v in value.values())
    )


def read_configs(tf_config: Any) -> tuple[Given, list[Finding]]:
    """The processes described by ``tf_config`` and the findings about configs TF cannot read."""
    findings: list[Finding] = []
    if callable(getattr(tf_config, "as_dict", None)):  # a tf.train.ClusterSpec (or a resolver's)
        tf_config = tf_config.as_dict()
    if isinstance(tf_config, dict) and looks_like_cluster_spec(tf_config):
        cluster = _cluster_of(tf_config, "cluster", findings)
        return Given((Process(0, "cluster", cluster, None, None),), complete=False), findings
    items = list(tf_config) if isinstance(tf_config, (list, tuple)) else [tf_config]
    processes = []
    for position, item in enumerate(items):
        process = _read_one(position, item, len(items) > 1, findings)
        if process is not None:
            processes.append(process)
    # Only a list of readable TF_CONFIGs, each naming its task, says which tasks nobody runs.
    complete = isinstance(tf_config, (list, tuple)) and all(
        p.task_type is not None and p.task_index is not None for p in processes
    )
    return Given(tuple(processes), complete=complete and len(processes) == len(items)), findings


def _read_one(position: int, item: Any, several: bool, findings: list[Finding]) -> Process | None:
    label = f"TF_CONFIG #{position}" if several else "TF_CONFIG"
    if isinstance(item, (str, bytes)):
        try:
            item = json.loads(item)
        except ValueError as exc:
            # TFConfigClusterResolver._load_tf_config: json.loads(os.environ['TF_CONFIG']) raises here.
            findings.append(
                Finding(
                    "tf-config-not-json",
                    label,
                    f"{label} is not valid JSON ({exc.msg} at character {exc.pos}).",
                    "Build it as a dict and set os.environ['TF_CONFIG'] = json.dumps(config); "
                    "JSON needs double quotes and no trailing commas.",
                )
            )
            return None
    if not isinstance(item, dict):
        findings.append(
            Finding(
                "tf-config-not-dict",
                label,
                f"{label} is a {type(item).__name__}, not a JSON object with 'cluster' and 'task'.",
                'Write {"cluster": {"worker": [...]}, "task": {"type": "worker", "index": 0}}.',
            )
        )
        return None
    task_type, task_index = _task_of(item, label, findings)
    if task_type is not None and task_index is not None:
        label = f"{task_type}:{task_index}"
    if "cluster" not in item:
        # tfconfig_cluster_resolver.cluster_spec(): no 'cluster' key gives an empty ClusterSpec,
        # which strategies treat as a single local process.
        shape = " (it looks like a ClusterSpec: wrap it)" if looks_like_cluster_spec(item) else ""
        findings.append(
            Finding(
                "missing-cluster",
                label,
                f"{label} has no 'cluster' key{shape}, so TensorFlow sees an empty cluster and runs alone.",
                "Put every job's addresses under 'cluster', the same in every process's TF_CONFIG.",
            )
        )
        cluster = None
    else:
        cluster = _cluster_of(item["cluster"], label, findings)
    return Process(position, label, cluster, task_type, task_index)


def _task_of(item: dict, label: str, findings: list[Finding]) -> tuple[str | None, int | None]:
    task = item.get("task")
    # tfconfig_cluster_resolver.task_type/task_id: None when 'type'/'index' is missing;
    # collective_all_reduce_strategy._initialize_multi_worker then raises
    # "When `cluster_spec` is given, you must also specify `task_type` and `task_id`."
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        missing = "no 'task'" if not isinstance(task, dict) else "a 'task' without 'type' or 'index'"
        findings.append(
            Finding(
                "missing-task",
                label,
                f"{label} has {missing}, so the process does not know which task of the cluster it is.",
                'Add "task": {"type": "worker", "index": N}, different in every process.',
            )
        )
        return None, None
    task_type = str(task["type"])
    try:
        # task_id is int(task_info['index']): "1" works, "one" or 1.5 does not mean an index.
        index = int(task["index"])
        if isinstance(task["index"], float) and index != task["index"]:
            raise ValueError
    except (TypeError, ValueError):
        index = -1
    if index < 0:
        findings.append(
            Finding(
                "bad-task-index",
                label,
                f"{label}'s task index {task['index']!r} is not a task number (0, 1, 2, ...).",
                "Use the task's position in its job's address list, counting from 0.",
            )
        )
        return task_type, None
    return task_type, index


def _cluster_of(cluster: Any, label: str, findings: list[Finding]) -> dict[str, list[Any]] | None:
    """The cluster as {job: [address, ...]}, or None (with a finding) when ClusterSpec would refuse it."""
    # server_lib.ClusterSpec.__init__: a job's tasks must be a list or a dict {int: str}.
    problem = ""
    jobs: dict[str, list[Any]] = {}
    if not isinstance(cluster, dict) or not cluster:
        problem = f"its cluster is {cluster!r}, not a dict of job names to address lists"
    else:
        for job, tasks in cluster.items():
            if isinstance(tasks, (list, tuple)):
                jobs[str(job)] = list(tasks)
            elif isinstance(tasks, dict) and all(str(k).isdigit() for k in tasks):
                # A sparse job {index: address}; the missing indices have no address.
                by_index = {int(k): v for k, v in tasks.items()}
                jobs[str(job)] = [by_index.get(i) for i in range(max(by_index, default=-1) + 1)]
            else:
                problem = f"job {job!r} is {tasks!r}, not a list of 'host:port' addresses"
                break
    if problem:
        findings.append(
            Finding(
                "bad-cluster",
                label,
                f"In {label}, {problem}.",
                'Write the cluster as {"worker": ["host1:2222", "host2:2222"], "ps": ["host3:2222"]}.',
            )
        )
        return None
    return jobs
