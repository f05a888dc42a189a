"""Read what ``diagnose`` is given (TF_CONFIG dicts or JSON texts, a list of them, or a
ClusterSpec dict) into ``Process`` records, with a finding for each one TensorFlow could
not read at all.

A cluster is read as ``{job: {index: address}}``: a sparse job ``{"1000000000": "a:1"}`` stays
one entry. An address that is not a string is kept as a ``NotAnAddress`` (its short repr), so
no rule ever recurses into what it was given.

Example::

    given, findings = read_configs(['{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}'])
    given.processes[0].label         # 'worker:0'
"""

from __future__ import annotations

import difflib
import itertools
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from dtfkit.diagnosis import inputs
from dtfkit.diagnosis.findings import Finding
from dtfkit.diagnosis.inputs import a_type, describe
from dtfkit.i18n import N_, _

# multi_worker_util._validate_cluster_spec: allowed_task_types = ("chief", "worker", "evaluator", "ps", None)
KNOWN_JOBS = ("chief", "worker", "ps", "evaluator")
# What TensorFlow reads of a TF_CONFIG (tfconfig_cluster_resolver, distribute_coordinator): any other key
# is ignored, so a misspelt one is as good as missing.
TOP_KEYS = ("cluster", "task", "rpc_layer", "environment")
TASK_KEYS = ("type", "index")
# Names other tools use for the two task keys (Kubeflow's replica type and index, torch's rank ...).
_TASK_ALIASES = {
    "type": ("job", "job_name", "task_type", "replica_type", "role", "name"),
    "index": ("id", "task_id", "task_index", "idx", "rank", "replica_index", "number"),
}
_ASCII_INDEX = re.compile(r"[0-9]{1,10}")
MAX_NAME = 100  # characters of a job name: "chief", "worker", "ps", "evaluator" and the like
# ServerDef.task_index and JobDef's task keys are int32: no task number is larger.
MAX_INDEX = 2**31 - 1


@dataclass(frozen=True)
class NotAnAddress:
    """A cluster entry that is not a string: ``shown`` is its short repr."""

    shown: str

    def __repr__(self) -> str:
        return self.shown


Job = dict[int, Any]  # index -> address (a str, or a NotAnAddress)


@dataclass(frozen=True)
class Process:
    """One process's TF_CONFIG, read: ``label`` names it in messages ("worker:1", or
    "TF_CONFIG #2" when it names no task); ``cluster`` is None when it has none usable."""

    position: int
    label: str
    cluster: dict[str, Job] | None
    task_type: str | None
    task_index: int | None
    cluster_key: str = ""  # equal for equal clusters (see cluster_key)


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
    budget = [inputs.MAX_ADDRESSES]  # addresses left to read in this call
    if isinstance(tf_config, dict) and looks_like_cluster_spec(tf_config):
        cluster = _cluster_of(tf_config, "cluster", findings, budget)
        process = Process(0, "cluster", cluster, None, None, cluster_key(cluster))
        return Given((process,), complete=False), findings
    if isinstance(tf_config, (list, tuple)):
        inputs.check_count("tf_config", len(tf_config), inputs.MAX_PROCESSES, "TF_CONFIGs")
        items = list(tf_config)
    else:
        items = [tf_config]
    processes: list[Process] = []
    for position, item in enumerate(items):
        read = _read_one(position, item, len(items) > 1, findings, budget)
        if read is not None:
            processes.append(read)
    # Only a list of readable TF_CONFIGs, each naming its task, says which tasks nobody runs.
    complete = isinstance(tf_config, (list, tuple)) and all(
        p.task_type is not None and p.task_index is not None for p in processes
    )
    return Given(tuple(processes), complete=complete and len(processes) == len(items)), findings


def _not_json(label: str, why: str, fix: str) -> Finding:
    # TFConfigClusterResolver._load_tf_config: json.loads(os.environ['TF_CONFIG']) raises here.
    return Finding(
        "tf-config-not-json", label, _("{label} is not valid JSON ({why}).").format(label=label, why=why), fix
    )


_JSON_FIX = N_(
    "Build it as a dict and set os.environ['TF_CONFIG'] = json.dumps(config); JSON needs double quotes and no trailing commas."
)


def _parse(item: str | bytes | bytearray, label: str, findings: list[Finding]) -> Any:
    """The JSON value of a TF_CONFIG text, or ``_UNREADABLE`` (with a finding)."""
    inputs.check_text_size("tf_config", item)
    if isinstance(item, (bytes, bytearray)):
        try:
            item = bytes(item).decode("utf-8")
        except UnicodeDecodeError as exc:
            findings.append(
                _not_json(
                    label,
                    _("its bytes are not UTF-8 text: byte {start} is {byte:#04x}").format(
                        start=exc.start, byte=item[exc.start]
                    ),
                    _("Pass the TF_CONFIG as text (str), or bytes encoded as UTF-8; ") + _(_JSON_FIX),
                )
            )
            return _UNREADABLE
    try:
        return json.loads(item)
    except RecursionError:
        findings.append(
            _not_json(
                label, _("it nests arrays or objects deeper than Python's json module reads"), _(_JSON_FIX)
            )
        )
    except ValueError as exc:
        where = (
            _("{msg} at character {pos}").format(msg=exc.msg, pos=exc.pos)
            if isinstance(exc, json.JSONDecodeError)
            else str(exc)
        )
        findings.append(_not_json(label, where, _(_JSON_FIX)))
    return _UNREADABLE


_UNREADABLE = object()


def _read_one(
    position: int, item: Any, several: bool, findings: list[Finding], budget: list[int]
) -> Process | None:
    label = f"TF_CONFIG #{position}" if several else "TF_CONFIG"
    if isinstance(item, (str, bytes, bytearray)):
        item = _parse(item, label, findings)
        if item is _UNREADABLE:
            return None
    if not isinstance(item, dict):
        findings.append(
            Finding(
                "tf-config-not-dict",
                label,
                _(
                    "{label} is {a_type_item} ({describe_item}), not a JSON object with 'cluster' and 'task'."
                ).format(label=label, a_type_item=a_type(item), describe_item=describe(item)),
                _('Write {"cluster": {"worker": [...]}, "task": {"type": "worker", "index": 0}}.'),
            )
        )
        return None
    misspelt = {} if looks_like_cluster_spec(item) else _misspelt_keys(item, TOP_KEYS, {}, label, "")
    task_type, task_index = _task_of(item, label, findings, task_misspelt="task" in misspelt)
    if task_type is not None and task_index is not None:
        label = f"{task_type}:{task_index}"
        misspelt = _misspelt_keys(item, TOP_KEYS, {}, label, "") if misspelt else misspelt
    findings += misspelt.values()
    if "cluster" not in item:
        if "cluster" not in misspelt:
            # tfconfig_cluster_resolver.cluster_spec(): no 'cluster' key gives an empty ClusterSpec,
            # which strategies treat as a single local process.
            shape = _(" (it looks like a ClusterSpec: wrap it)") if looks_like_cluster_spec(item) else ""
            findings.append(
                Finding(
                    "missing-cluster",
                    label,
                    _(
                        "{label} has no 'cluster' key{shape}, so TensorFlow sees an empty cluster and runs alone."
                    ).format(label=label, shape=shape),
                    _("Put every job's addresses under 'cluster', the same in every process's TF_CONFIG."),
                )
            )
        cluster = None
    else:
        cluster = _cluster_of(item["cluster"], label, findings, budget)
    return Process(position, label, cluster, task_type, task_index, cluster_key(cluster))


def cluster_key(cluster: dict[str, Job] | None) -> str:
    """The same text for equal clusters (an address that is not a string compares by its short repr)."""
    if cluster is None:
        return ""
    return repr(sorted((job, sorted(tasks.items())) for job, tasks in cluster.items()))


def _misspelt_keys(
    item: dict, known: tuple[str, ...], aliases: dict[str, tuple[str, ...]], label: str, where: str
) -> dict[str, Finding]:
    """A finding per key TensorFlow does not read that stands where a missing known key should be,
    by the key it stands for."""
    found: dict[str, Finding] = {}
    unknown = (key for key in item if key not in known and isinstance(key, str))
    for key in itertools.islice(unknown, 100):  # a real TF_CONFIG has a handful of keys
        lowered = key.strip().lower()
        if lowered.rstrip("s") in (*KNOWN_JOBS, "master"):
            continue  # a job name: a ClusterSpec's key, written where the TF_CONFIG's top level is
        missing = [k for k in known if k not in item]
        guess = [k for k in missing if lowered == k or lowered in aliases.get(k, ())]
        guess = guess or difflib.get_close_matches(lowered, missing, n=1, cutoff=0.6)
        if not guess:
            continue
        found.setdefault(
            guess[0],
            Finding(
                "misspelt-key",
                label,
                _(
                    "{label}{where} has the key {describe_key}, which TensorFlow does not read: it reads {guess_0!r}, and that key is missing, so TensorFlow acts as if it were not set."
                ).format(label=label, where=where, describe_key=describe(key), guess_0=guess[0]),
                _("Rename {describe_key} to {guess_0!r}.").format(
                    describe_key=describe(key), guess_0=guess[0]
                ),
            ),
        )
    return found


def _task_of(
    item: dict, label: str, findings: list[Finding], task_misspelt: bool
) -> tuple[str | None, int | None]:
    task = item.get("task")
    if isinstance(task, dict):
        misspelt = _misspelt_keys(task, TASK_KEYS, _TASK_ALIASES, label, "'s task")
        if misspelt:
            findings += misspelt.values()
            return None, None
    # tfconfig_cluster_resolver.task_type/task_id: None when 'type'/'index' is missing;
    # collective_all_reduce_strategy._initialize_multi_worker then raises
    # "When `cluster_spec` is given, you must also specify `task_type` and `task_id`."
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        if task is None and task_misspelt:
            return None, None  # the misspelt key's finding says it
        missing = "no 'task'" if not isinstance(task, dict) else "a 'task' without 'type' or 'index'"
        findings.append(
            Finding(
                "missing-task",
                label,
                _(
                    "{label} has {missing}, so the process does not know which task of the cluster it is."
                ).format(label=label, missing=missing),
                _('Add "task": {"type": "worker", "index": N}, different in every process.'),
            )
        )
        return None, None
    raw_type = task["type"]
    if not isinstance(raw_type, str) or not raw_type or len(raw_type) > MAX_NAME:
        findings.append(
            Finding(
                "bad-task-type",
                label,
                _("{label}'s task type {describe_raw_type} is not a job name.").format(
                    label=label, describe_raw_type=describe(raw_type)
                ),
                _(
                    "Set task.type to one of the cluster's job names as a string: 'chief', 'worker', 'ps' or 'evaluator'."
                ),
            )
        )
        return None, None
    index = _index(task["index"])
    if index is None:
        findings.append(
            Finding(
                "bad-task-index",
                label,
                _("{label}'s task index {describe_task_index} is not a task number (0, 1, 2, ...).").format(
                    label=label, describe_task_index=describe(task["index"])
                ),
                _("Use the task's position in its job's address list, counting from 0."),
            )
        )
        return raw_type, None
    return raw_type, index


def _index(value: Any) -> int | None:
    """The task number TensorFlow's ``int(task['index'])`` reads, or None when it is not one: "1" and
    1.0 work; "one", 1.5, inf, NaN, True and negative numbers do not mean an index."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and _ASCII_INDEX.fullmatch(value.strip()):
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_INDEX:
        return value
    return None


def _cluster_of(
    cluster: Any, label: str, findings: list[Finding], budget: list[int]
) -> dict[str, Job] | None:
    """The cluster as {job: {index: address}}, or None (with a finding) when ClusterSpec would refuse it."""
    # server_lib.ClusterSpec.__init__: a job's tasks must be a list or a dict {int(index): address}.
    problem = ""
    jobs: dict[str, Job] = {}
    if not isinstance(cluster, dict) or not cluster:
        problem = _("its cluster is {describe_cluster}, not a dict of job names to address lists").format(
            describe_cluster=describe(cluster)
        )
    else:
        size = 0
        for job, tasks in cluster.items():
            if not isinstance(job, str) or not job or len(job) > MAX_NAME:
                problem = _("the job name {describe_job} is not a name").format(describe_job=describe(job))
                break
            if isinstance(tasks, (list, tuple, dict)):
                count = max(1, len(tasks))  # a job counts as a task at least: empty jobs are work too
                size += count
                budget[0] -= count
                inputs.check_count(f"tf_config ({label}'s cluster)", size, inputs.MAX_TASKS, "tasks")
                if budget[0] < 0:
                    inputs.check_count(
                        "tf_config", inputs.MAX_ADDRESSES - budget[0], inputs.MAX_ADDRESSES, "addresses"
                    )
            if isinstance(tasks, (list, tuple)):
                jobs[job] = {i: _address(a) for i, a in enumerate(tasks)}
            elif isinstance(tasks, dict) and all(_index_key(k) is not None for k in tasks):
                # A sparse job {index: address}: only the given indices exist.
                jobs[job] = {
                    index: _address(a) for k, a in tasks.items() if (index := _index_key(k)) is not None
                }
                if len(jobs[job]) != len(tasks):
                    problem = _("job {job!r} gives one index twice ({describe_tasks})").format(
                        job=job, describe_tasks=describe(tasks)
                    )
                    break
            else:
                problem = _("job {job!r} is {describe_tasks}, not a list of 'host:port' addresses").format(
                    job=job, describe_tasks=describe(tasks)
                )
                break
    if problem:
        findings.append(
            Finding(
                "bad-cluster",
                label,
                _("In {label}, {problem}.").format(label=label, problem=problem),
                _('Write the cluster as {"worker": ["host1:2222", "host2:2222"], "ps": ["host3:2222"]}.'),
            )
        )
        return None
    return jobs


def _index_key(key: Any) -> int | None:
    if isinstance(key, bool):
        return None
    if isinstance(key, str) and _ASCII_INDEX.fullmatch(key):
        key = int(key)
    if isinstance(key, int) and 0 <= key <= MAX_INDEX:
        return key
    return None


def _address(value: Any) -> Any:
    return value if isinstance(value, str) else NotAnAddress(describe(value))
