"""What the Kubeflow training operator (kubeflow/trainer v1.9.4) decides for a TFJob, as plain functions.

Ported from kubeflow/trainer at tag v1.9.4 (then named training-operator); each function names the Go
function it follows:

- ``pkg/controller.v1/tensorflow/tensorflow.go``: ``genTFConfigJSONStr``, ``genClusterSpec`` (TF_CONFIG);
- ``pkg/controller.v1/tensorflow/util.go``: ``GetPortFromTFJob``, ``isDistributed``;
- ``pkg/controller.v1/tensorflow/tfjob_controller.go``: ``SetClusterSpec``, ``UpdateJobStatus`` (success, failure);
- ``pkg/controller.v1/common/pod.go``: ``ReconcilePods`` (which failed pods are restarted);
- ``pkg/controller.v1/common/job.go``: ``DeletePodsAndServices`` (``cleanPodPolicy``).

``tests/test_tfjob.py`` checks their output byte for byte against the operator's own test
(``pkg/controller.v1/tensorflow/pod_test.go``, "Test ClusterSpec"). ``dtfkit.kube.simulate`` uses them.

Example::

    >>> job = {"metadata": {"name": "mnist", "namespace": "ml"}, "spec": {"tfReplicaSpecs": {
    ...     "PS": {"replicas": 1}, "Worker": {"replicas": 2}}}}
    >>> operator_tf_config(job, "Worker", 1)
    '{"cluster":{"ps":["mnist-ps-0.ml.svc:2222"],"worker":["mnist-worker-0.ml.svc:2222","mnist-worker-1.ml.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}'
"""

from __future__ import annotations

import json

from dtfkit.i18n import _

DEFAULT_PORT = 2222
PORT_NAME = "tfjob-port"
CONTAINER = "tensorflow"
# dtfkit's order of the replica types (the operator has none: they are the keys of a Go map).
TYPE_ORDER = ("Chief", "Master", "PS", "Worker", "Evaluator")
# The replica types isDistributed and UpdateJobStatus iterate over (util.go, tfjob_controller.go: allTypes).
KNOWN_TYPES = frozenset(TYPE_ORDER)


def replica_counts(tfjob: dict) -> dict[str, int]:
    """``{"PS": 1, "Worker": 2}``: each replica type and its number of replicas (1 when not given).

    Example::

        >>> replica_counts({"spec": {"tfReplicaSpecs": {"Worker": {}, "PS": {"replicas": 2}}}})
        {'PS': 2, 'Worker': 1}
    """
    specs = tfjob["spec"]["tfReplicaSpecs"]
    known = [t for t in TYPE_ORDER if t in specs] + sorted(t for t in specs if t not in TYPE_ORDER)
    return {t: int((specs[t] or {}).get("replicas", 1)) for t in known}


def tensorflow_container(tfjob: dict, replica_type: str) -> dict:
    """The container named ``tensorflow`` of a replica type's pod template ({} if there is none).

    Example::

        >>> tensorflow_container({"spec": {"tfReplicaSpecs": {"PS": {"template": {"spec": {"containers": [
        ...     {"name": "tensorflow", "image": "x"}]}}}}}}, "PS")["image"]
        'x'
    """
    template = (tfjob["spec"]["tfReplicaSpecs"][replica_type] or {}).get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or []
    return next((c for c in containers if c.get("name") == CONTAINER), {})


def replica_port(tfjob: dict, replica_type: str) -> int:
    """The port of a replica type: the ``tfjob-port`` of its tensorflow container, else 2222.

    Example::

        >>> replica_port({"spec": {"tfReplicaSpecs": {"PS": {}}}}, "PS")
        2222
    """
    ports = tensorflow_container(tfjob, replica_type).get("ports") or []
    return next((int(p["containerPort"]) for p in ports if p.get("name") == PORT_NAME), DEFAULT_PORT)


def service_address(tfjob: dict, replica_type: str, index: int, cluster_domain: str = "") -> str:
    """``<job>-<type>-<index>.<namespace>.svc[.<domain>]:<port>``, the address the operator gives a replica.

    Example::

        >>> service_address({"metadata": {"name": "a"}, "spec": {"tfReplicaSpecs": {"PS": {}}}}, "PS", 0)
        'a-ps-0.default.svc:2222'
    """
    meta = tfjob["metadata"]
    host = f"{meta['name']}-{replica_type.lower()}-{index}.{meta.get('namespace') or 'default'}.svc"
    if cluster_domain:
        host += f".{cluster_domain}"
    return f"{host}:{replica_port(tfjob, replica_type)}"


def is_distributed(tfjob: dict) -> bool:
    """False for a single-replica job: the operator then sets no TF_CONFIG at all.

    As util.go ``isDistributed``: the replicas of the five known types total exactly 1;
    ``SetClusterSpec`` (tfjob_controller.go) then returns before writing TF_CONFIG.

    Example::

        >>> is_distributed({"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}})
        False
        >>> is_distributed({"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}, "Evaluator": {}}}})
        True
    """
    return sum(n for t, n in replica_counts(tfjob).items() if t in KNOWN_TYPES) != 1


def operator_cluster(tfjob: dict, cluster_domain: str = "") -> dict[str, list[str]]:
    """The ClusterSpec in TF_CONFIG: **every** replica type of the job, the evaluator included, lowercase.

    As tensorflow.go ``genClusterSpec`` (pod_test.go "Test ClusterSpec" expects ``"evaluator":[...]``). That
    does no harm: TensorFlow counts an evaluator apart (``multi_worker_util.worker_count``; the legacy
    ``distribute_coordinator._split_cluster_for_evaluator`` cut it out). Keys sorted, as Go's json.Marshal.

    Example::

        >>> operator_cluster({"metadata": {"name": "j"}, "spec": {"tfReplicaSpecs": {
        ...     "Worker": {}, "Evaluator": {}, "PS": {}}}})
        {'evaluator': ['j-evaluator-0.default.svc:2222'], 'ps': ['j-ps-0.default.svc:2222'], 'worker': ['j-worker-0.default.svc:2222']}
    """
    cluster = {
        rtype.lower(): [service_address(tfjob, rtype, i, cluster_domain) for i in range(n)]
        for rtype, n in replica_counts(tfjob).items()
    }
    return dict(sorted(cluster.items()))


def tf_config_text(cluster: dict[str, list[str]], replica_type: str, index: int) -> str:
    """TF_CONFIG as Go's json.Marshal writes the operator's TFConfig struct (compact, fields in order).

    tensorflow.go ``genTFConfigJSONStr`` (without ``enableDynamicWorker``).

    Example::

        >>> tf_config_text({"worker": ["w:1"]}, "Worker", 0)
        '{"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":0},"environment":"cloud"}'
    """
    config = {
        "cluster": dict(sorted(cluster.items())),
        "task": {"type": replica_type.lower(), "index": index},
        "environment": "cloud",
    }
    return json.dumps(config, separators=(",", ":"))


def operator_tf_config(tfjob: dict, replica_type: str, index: int, cluster_domain: str = "") -> str:
    """The exact ``TF_CONFIG`` the operator gives replica ``index`` of ``replica_type`` ("" if none).

    ``cluster_domain``: the operator's ``CUSTOM_CLUSTER_DOMAIN`` (genClusterSpec). ``enableDynamicWorker``
    is not ported.

    Example: see the module's docstring.
    """
    if not is_distributed(tfjob):
        return ""
    return tf_config_text(operator_cluster(tfjob, cluster_domain), replica_type, index)


def container_exit_code(returncode: int) -> int:
    """A process's return code as a container reports it: killed by signal N is 128 + N.

    Example::

        >>> container_exit_code(-9)
        137
    """
    return 128 - returncode if returncode < 0 else returncode


def restarts(restart_policy: str, exit_code: int) -> bool:
    """Whether the operator (or the kubelet) would start a replica that exited with ``exit_code`` again.

    ``OnFailure``/``Always``: the kubelet restarts in place (util.go ``setRestartPolicy`` copies them to
    the pod). ``ExitCode`` is the pod's ``Never``; the operator recreates a failed pod only for a retryable
    code (common/pod.go ``ReconcilePods``, pkg/util/train/train_util.go ``IsRetryableExitCode``).

    Example::

        >>> restarts("ExitCode", 137), restarts("ExitCode", 1), restarts("OnFailure", 1)
        (True, False, True)
    """
    if exit_code == 0:
        return restart_policy == "Always"
    return restart_policy in ("Always", "OnFailure") or (restart_policy == "ExitCode" and exit_code >= 128)


def job_verdict(tfjob: dict, exit_codes: dict[tuple[str, int], int | None]) -> tuple[str, str] | None:
    """``("Succeeded" | "Failed", reason)`` once the operator would decide, else None.

    ``exit_codes`` maps ``(replica_type, index)`` to a container exit code, or None while it runs: one
    reconcile's view (a finished job is not reconciled again). As tfjob_controller.go ``UpdateJobStatus``
    (``IsWorker0Completed``); restarts are not modelled. A failure seen with a success wins: the operator
    records it last (``pkg/util/status.go`` ``setCondition``), and the last condition is the job's state
    (the CRD's ``State`` column reads ``.status.conditions[-1:].type``).

    Example::

        >>> job = {"spec": {"successPolicy": "AllWorkers", "tfReplicaSpecs": {"PS": {}, "Worker": {"replicas": 2}}}}
        >>> job_verdict(job, {("PS", 0): None, ("Worker", 0): 0, ("Worker", 1): None}) is None
        True
        >>> job_verdict(job, {("PS", 0): None, ("Worker", 0): 0, ("Worker", 1): 0})[0]
        'Succeeded'
    """
    failed = [(t, i, c) for (t, i), c in exit_codes.items() if c not in (None, 0)]
    if failed:
        t, i, c = failed[0]
        return "Failed", _("{replica} exited {code}").format(replica=f"{t.lower()}-{i}", code=c)
    leaders = [t for t in replica_counts(tfjob) if t in ("Chief", "Master")]
    if leaders:
        mine = [c for (t, _index), c in exit_codes.items() if t in leaders]
        if mine and all(c == 0 for c in mine):
            return "Succeeded", _("the {replica_type} succeeded").format(replica_type=leaders[0].lower())
        return None
    workers = {i: c for (t, i), c in exit_codes.items() if t == "Worker"}
    if workers and all(c == 0 for c in workers.values()):
        return "Succeeded", _("every worker succeeded")
    if tfjob["spec"].get("successPolicy", "") != "AllWorkers" and workers.get(0) == 0:
        return "Succeeded", _('worker 0 succeeded (successPolicy "": the others are not waited for)')
    return None


def pods_deleted_at_end(clean_pod_policy: str | None, running: bool) -> bool:
    """Whether the operator deletes a pod when the job has finished, under ``runPolicy.cleanPodPolicy``.

    As common/job.go ``DeletePodsAndServices``; absent is ``None`` (``SetDefaults_TFJob``), and an unknown
    value deletes every pod, as ``All``.

    Example::

        >>> [pods_deleted_at_end(p, running=True) for p in (None, "None", "Running", "All", "Sometimes")]
        [False, False, True, True, True]
        >>> pods_deleted_at_end("Running", running=False)
        False
    """
    if clean_pod_policy in (None, "None"):
        return False
    return running or clean_pod_policy != "Running"
