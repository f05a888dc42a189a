"""Run a tutorial-style TensorFlow script as one replica of a Kubeflow TFJob.

The Kubeflow training operator tells each replica who it is through ``TF_CONFIG``
(``{"cluster": {...}, "task": {"type": "worker", "index": 1}, "environment": "cloud"}``).
The scripts of Ye Hu's tutorial read ``--ps_hosts``/``--worker_hosts``/``--job_name``/
``--task_index`` flags instead. This program turns the first into the second and
replaces itself with the script (``os.execv``), so signals, output and the exit code
are the script's own; ``TF_CONFIG`` stays in the environment.

It uses only the standard library, so a TFJob can run it from a ConfigMap in any
image that has Python (``dtfkit export tfjob`` puts it there). dtfkit's own launcher
gets the flags from ``dtfkit.engine.wire.layout.tutorial_flags``, the same rule (the engine
imports nothing from ``dtfkit.kube``; ``tests/test_layering.py`` checks the two agree), so a
script sees the same flags under ``dtfkit launch`` and in a TFJob.

Usage (the container command ``dtfkit export tfjob`` writes)::

    python dtfkit_tfjob_entry.py SCRIPT [-- SCRIPT_ARGS...]

Example::

    >>> tutorial_flags({"ps": ["p:2222"], "worker": ["w0:2222", "w1:2222"]}, "worker", 1)
    ['--ps_hosts=p:2222', '--worker_hosts=w0:2222,w1:2222', '--job_name=worker', '--task_index=1']
"""

from __future__ import annotations

import json
import os
import sys

# dtfkit's order of the jobs in a ClusterSpec; jobs it does not know follow in their own order.
JOB_ORDER = ("chief", "ps", "worker", "evaluator")
PROG = "dtfkit tfjob entry"


def tutorial_flags(cluster: dict[str, list[str]], job: str, index: int) -> list[str]:
    """The tutorial's command-line flags for task ``job:index`` of ``cluster``.

    One ``--<job>_hosts=a,b`` flag per training job of the cluster (chief, ps, worker first, in
    that order), then ``--job_name`` and ``--task_index``. An ``evaluator`` job gets no flag: it
    trains with nobody, TensorFlow counts it apart (``multi_worker_util.worker_count``; the legacy
    ``distribute_coordinator._split_cluster_for_evaluator`` cut it off the cluster), and ``dtfkit launch`` never lists it,
    so a script sees the same flags from both, whether or not the operator put it in ``TF_CONFIG``.

    Example::

        >>> tutorial_flags({"worker": ["w:1"], "chief": ["c:1"]}, "chief", 0)
        ['--chief_hosts=c:1', '--worker_hosts=w:1', '--job_name=chief', '--task_index=0']
        >>> tutorial_flags({"evaluator": ["e:1"], "worker": ["w:1"]}, "evaluator", 0)
        ['--worker_hosts=w:1', '--job_name=evaluator', '--task_index=0']
    """
    cluster = {j: hosts for j, hosts in cluster.items() if j != "evaluator"}
    known = [j for j in JOB_ORDER if j in cluster]
    jobs = known + [j for j in cluster if j not in JOB_ORDER]
    flags = [f"--{j}_hosts={','.join(cluster[j])}" for j in jobs]
    return flags + [f"--job_name={job}", f"--task_index={index}"]


class EntryError(Exception):
    """TF_CONFIG or the command line cannot be used; the message says why and what to do."""


def parse_tf_config(text: str | None) -> tuple[dict[str, list[str]], str, int]:
    """``(cluster, job, index)`` from the text of ``TF_CONFIG``; EntryError if it is unusable.

    Example::

        >>> parse_tf_config('{"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "index": 0}}')
        ({'worker': ['w:1']}, 'worker', 0)
    """
    hint = (
        "this program runs as a replica of a Kubeflow TFJob, whose operator sets TF_CONFIG; "
        "to run the script by hand, give it the --ps_hosts/--worker_hosts/--job_name/--task_index flags"
    )
    if not text:
        raise EntryError(f"TF_CONFIG is not set: {hint}")
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise EntryError(f"TF_CONFIG is not valid JSON ({exc}): {text[:200]!r}; {hint}") from None
    if not isinstance(config, dict):
        raise EntryError(f"TF_CONFIG must be a JSON object, not {type(config).__name__}; {hint}")
    cluster = config.get("cluster")
    task = config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise EntryError(f"TF_CONFIG has no 'cluster' object of jobs and addresses; {hint}")
    for job, hosts in cluster.items():
        if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
            raise EntryError(f"TF_CONFIG's cluster job {job!r} is not a list of 'host:port' strings")
    if not isinstance(task, dict):
        raise EntryError(f"TF_CONFIG has no 'task' object with 'type' and 'index'; {hint}")
    job, index = task.get("type"), task.get("index")
    if not isinstance(job, str) or not job:
        raise EntryError(f"TF_CONFIG's task has no 'type' (got {job!r}); {hint}")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise EntryError(f"TF_CONFIG's task index must be a whole number >= 0, not {index!r}")
    # The operator lists every replica type in the cluster, the evaluator included (genClusterSpec in
    # kubeflow/trainer v1.9.4, pkg/controller.v1/tensorflow/tensorflow.go); other writers of TF_CONFIG
    # (dtfkit's own launcher, TensorFlow's guides) leave the evaluator out. Both are accepted.
    if job in cluster and index >= len(cluster[job]):
        raise EntryError(
            f"TF_CONFIG names task {job}:{index}, but the cluster has {len(cluster[job])} {job} task(s)"
        )
    if job not in cluster and job != "evaluator":
        raise EntryError(
            f"TF_CONFIG names task type {job!r}, which is not in its cluster ({', '.join(cluster)})"
        )
    return cluster, job, index


def script_command(argv: list[str], environ: dict[str, str]) -> list[str]:
    """The command this entry point replaces itself with: ``[python, SCRIPT, flags..., args...]``.

    Example::

        >>> env = {"TF_CONFIG": '{"cluster": {"ps": ["p:1"], "worker": ["w:1"]}, "task": {"type": "ps", "index": 0}}'}
        >>> script_command(["entry.py", "train.py", "--", "--is_sync=True"], env)[1:]
        ['train.py', '--ps_hosts=p:1', '--worker_hosts=w:1', '--job_name=ps', '--task_index=0', '--is_sync=True']
    """
    if len(argv) < 2 or argv[1].startswith("-"):
        raise EntryError("usage: python dtfkit_tfjob_entry.py SCRIPT [-- SCRIPT_ARGS...]: no script given")
    script, rest = argv[1], list(argv[2:])
    if rest and rest[0] == "--":
        rest = rest[1:]
    cluster, job, index = parse_tf_config(environ.get("TF_CONFIG"))
    return [sys.executable or "python3", script, *tutorial_flags(cluster, job, index), *rest]


def main(argv: list[str] | None = None) -> int:
    """Exec the script with the tutorial's flags; return 2 (message on stderr) if that cannot be done."""
    argv = list(sys.argv if argv is None else argv)
    try:
        command = script_command(argv, dict(os.environ))
        if not os.path.isfile(command[1]):
            raise EntryError(
                f"the script {command[1]} does not exist in this container; "
                "check the ConfigMap volume and its mountPath"
            )
    except EntryError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"{PROG}: running {' '.join(command[1:])}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execv(command[0], command)
    return 0  # not reached: execv replaced this process


if __name__ == "__main__":
    sys.exit(main())
