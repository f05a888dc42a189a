"""Name the known mistakes of a distributed TensorFlow setup, each with its fix (``dtfkit.diagnose``).

``diagnose`` reads TF_CONFIGs (one, or a list: one per process), a ClusterSpec dict, a
``LocalCluster``'s tasks (states and logs) or raw log text, and returns a ``Diagnosis``: one
``Finding(code, task, message, fix)`` per mistake. It imports no TensorFlow.

Example::

    import dtfkit

    configs = [
        {"cluster": {"worker": ["localhost:2222"]}, "task": {"type": "worker", "index": 0}},
        {"cluster": {"worker": ["localhost:2222"]}, "task": {"type": "worker", "index": 1}},
    ]
    d = dtfkit.diagnose(configs)
    d.codes            # {'task-index-out-of-range'}
    print(d)           # worker:1 — Task index 1 does not exist: ... Fix: Count task indices from 0: ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dtfkit.diagnosis import inputs
from dtfkit.diagnosis.configs import read_configs
from dtfkit.diagnosis.findings import NOTHING_FOUND, Diagnosis, Finding
from dtfkit.diagnosis.inputs import DiagnoseInputError
from dtfkit.diagnosis.runtime import cluster_findings, log_findings
from dtfkit.diagnosis.static import MWMS, config_findings, strategy_name

__all__ = ["NOTHING_FOUND", "DiagnoseInputError", "Diagnosis", "Finding", "diagnose"]


def diagnose(
    tf_config: Any = None,
    *,
    cluster: Any = None,
    logs: Mapping[str, Any] | BaseException | str | None = None,
    machines: int | Iterable[str] | None = None,
    strategy: str | None = None,
) -> Diagnosis:
    """Find the known mistakes in a cluster's configuration, state and logs.

    Args:
        tf_config: a TF_CONFIG (dict, or JSON as str or UTF-8 bytes), a list of them (one per process, as you
            would set them: then a task none of them runs is reported), or a ClusterSpec dict
            ``{"worker": [...], "ps": [...]}``. None: only ``cluster``/``logs`` are read.
        cluster: a ``LocalCluster``: its tasks' states (killed, exited, not started) and logs.
        logs: ``{"worker:0": text}``: what tasks printed (an exception works as text too), one
            error that names its task (a ``TaskFailed`` from ``cluster.run``), or one text.
        machines: how many machines the cluster spans (or their hostnames): with more than
            one, localhost addresses are a mistake.
        strategy: ``"mwms"`` or ``"ps"``, to check the rules of that strategy too
            (MultiWorkerMirroredStrategy has no ps; ParameterServerStrategy needs ps and workers;
            with ``cluster``, a dead worker of MultiWorkerMirroredStrategy means every worker restarts).

    Returns a ``Diagnosis``: ``bool(d)`` is True when something was found; ``d.codes`` the codes;
    ``print(d)`` one line per finding; in a notebook, a table. A TF_CONFIG that TensorFlow could not
    read (not JSON, not UTF-8, nested too deep, the wrong shape) is a finding too.

    Raises:
        DiagnoseInputError (a ValueError and a TypeError): an argument diagnose cannot read, named
            with what to pass instead: nothing to diagnose at all (``diagnose(None)``, as
            ``diagnose(os.environ.get("TF_CONFIG"))`` is when TF_CONFIG is not set), a wrong type
            (``strategy=42``, ``machines="node-a"``, ``cluster="x"``), or a size no cluster has (a text
            over 16 MB, more than 10,000 TF_CONFIGs, 20,000 tasks in a cluster or 200,000 addresses in all).

    Example::

        dtfkit.diagnose({"cluster": {"worker": ["a:2222", "b"]}, "task": {"type": "worker", "index": 0}}).codes
        # {'address-no-port'}
        dtfkit.diagnose(cluster=cluster)     # after cluster.kill("worker", 1): {'task-died', ...}
    """
    chosen = strategy_name(strategy)
    machine_count = inputs.machine_count(machines)
    if cluster is None and logs is None:
        if tf_config is None:
            raise inputs.nothing_to_diagnose()
        if isinstance(tf_config, (list, tuple)) and not tf_config:
            raise inputs.nothing_to_diagnose(f"tf_config is an empty {type(tf_config).__name__}")
    if cluster is not None:
        inputs.check_cluster(cluster)
    if logs is not None:
        inputs.check_logs(logs)
    findings = []
    if tf_config is not None:
        given, unreadable = read_configs(tf_config)
        findings += unreadable + config_findings(given, machines=machine_count, strategy=chosen)
    if cluster is not None:
        findings += cluster_findings(cluster, all_reduce=chosen == MWMS)
    if logs is not None:
        findings += log_findings(logs)
    return Diagnosis(tuple(findings))
