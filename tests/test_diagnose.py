"""``dtfkit.diagnose``: every rule on broken configs (and combinations the chapter never shows),
correct clusters that must give no finding, log texts TensorFlow 2.21 really printed, and (slow)
real failures on real clusters: a killed task, MultiWorkerMirroredStrategy built after an op, a
peer that died, and a TensorFlow server started on a port another socket holds."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import pytest

import dtfkit
from dtfkit.diagnosis import NOTHING_FOUND, Diagnosis, Finding


def tf_config(cluster: dict, job: str, index: int) -> dict:
    return {"cluster": cluster, "task": {"type": job, "index": index}}


def every_process(cluster: dict, skip: tuple[str, ...] = ()) -> list[dict]:
    """One TF_CONFIG per task of ``cluster``, as a learner would set them (``skip``: "worker:1", ...)."""
    return [
        tf_config(cluster, job, i)
        for job, tasks in cluster.items()
        for i in range(len(tasks))
        if f"{job}:{i}" not in skip
    ]


def local(n: int, first: int = 2222) -> list[str]:
    return [f"localhost:{first + i}" for i in range(n)]


PS2_W2 = {"ps": local(2, 2222), "worker": local(2, 2232)}
MWMS3 = {"worker": local(3)}
PSS = {"chief": ["localhost:2220"], "ps": ["localhost:2221"], "worker": local(2, 2230)}
HOSTS = {
    "chief": ["node-a.example.com:2222"],
    "worker": ["node-b.example.com:2222", "node-c.example.com:2222"],
    "ps": ["10.0.0.4:2222"],
}


def codes_and_tasks(d: Diagnosis) -> set[tuple[str, str]]:
    return {(f.code, f.task) for f in d.findings}


# ------------------------------------------------------------------ correct clusters: no finding
@pytest.mark.parametrize(
    "configs, options",
    [
        (every_process(PS2_W2), {}),
        (every_process(MWMS3), {"strategy": "mwms"}),
        (every_process(PSS), {"strategy": "ps"}),
        (every_process(HOSTS), {"machines": 4}),
        (every_process(HOSTS), {"machines": ["node-a", "node-b", "node-c", "node-d"]}),
        ([json.dumps(c) for c in every_process(PS2_W2)], {}),  # as the environment holds them
        (PS2_W2, {}),  # a ClusterSpec dict alone
        (every_process({"worker": local(2), "evaluator": ["localhost:2299"]}, skip=("evaluator:0",)), {}),
        (tf_config({"worker": local(2)}, "evaluator", 0), {}),  # TF allows an evaluator outside the cluster
        (tf_config(PS2_W2, "worker", 1), {}),  # one process's TF_CONFIG alone
        (
            [
                tf_config({"worker": {"0": "localhost:2222", "1": "localhost:2223"}}, "worker", i)
                for i in (0, 1)
            ],
            {},
        ),
        (every_process({"worker": local(4)}), {"machines": 1}),
    ],
    ids=[
        "2ps-2workers",
        "mwms-3workers",
        "pss-chief-ps-workers",
        "multi-machine",
        "multi-machine-hostnames",
        "json-texts",
        "cluster-spec",
        "evaluator-not-launched",
        "evaluator-outside",
        "single-tf-config",
        "sparse-job",
        "one-machine",
    ],
)
def test_correct_clusters_give_no_finding(configs, options):
    d = dtfkit.diagnose(configs, **options)
    assert not d, str(d)
    assert d.findings == () and d.codes == set()
    assert str(d) == NOTHING_FOUND


# ------------------------------------------------------------------ one rule at a time
W1 = {"worker": ["localhost:2222"]}
W2 = {"worker": local(2)}

RULES = [
    ("tf-config-not-json", ['{"cluster": {"worker": ["localhost:2222"]}, }'], "TF_CONFIG"),
    ("tf-config-not-json", ["{'cluster': {}}", json.dumps(tf_config(W2, "worker", 1))], "TF_CONFIG #0"),
    ("tf-config-not-dict", ['["localhost:2222"]'], "TF_CONFIG"),
    ("missing-cluster", [{"task": {"type": "worker", "index": 0}}], "worker:0"),
    ("missing-task", [{"cluster": W1}], "TF_CONFIG"),
    ("missing-task", [{"cluster": W1, "task": {"type": "worker"}}], "TF_CONFIG"),
    ("bad-task-index", [{"cluster": W1, "task": {"type": "worker", "index": "first"}}], "TF_CONFIG"),
    (
        "bad-cluster",
        [{"cluster": {"worker": "localhost:2222"}, "task": {"type": "worker", "index": 0}}],
        "worker:0",
    ),
    ("bad-cluster", [{"cluster": ["localhost:2222"], "task": {"type": "worker", "index": 0}}], "worker:0"),
    ("task-type-not-in-cluster", tf_config(W1, "Worker", 0), "Worker:0"),
    ("task-index-out-of-range", [tf_config(W1, "worker", 0), tf_config(W1, "worker", 1)], "worker:1"),
    ("duplicate-task", every_process(W2) + [tf_config(W2, "worker", 1)], "worker:1"),
    (
        "clusters-disagree",
        [
            tf_config(W2, "worker", 0),
            tf_config({"worker": ["localhost:2222", "localhost:2299"]}, "worker", 1),
        ],
        "worker:1",
    ),
    ("duplicate-address", every_process({"ps": ["localhost:2222"], "worker": local(2)}), "worker:0"),
    ("duplicate-address", every_process({"worker": ["localhost:2222", "127.0.0.1:2222"]}), "worker:1"),
    ("address-no-port", every_process({"worker": ["localhost:2222", "localhost"]}), "worker:1"),
    ("address-bad-port", every_process({"worker": ["localhost:2222", "localhost:port"]}), "worker:1"),
    ("address-bad-port", every_process({"worker": ["localhost:2222", "localhost:70000"]}), "worker:1"),
    ("address-scheme", every_process({"worker": ["grpc://localhost:2222", "localhost:2223"]}), "worker:0"),
    ("localhost-multi-machine", every_process({"worker": ["node-a:2222", "localhost:2222"]}), "worker:1"),
    ("chief-and-master", every_process({"chief": ["a:1"], "master": ["b:1"], "worker": ["c:1"]}), "master"),
    ("unknown-job", every_process({"master": ["b:1"], "worker": ["c:1"]}), "master"),
    ("unknown-job", every_process({"workers": ["b:1", "c:1"]}), "workers"),
    ("several-chiefs", every_process({"chief": ["a:1", "b:1"], "worker": ["c:1"]}), "chief"),
    ("several-evaluators", every_process({"worker": ["c:1"], "evaluator": ["a:1", "b:1"]}), "evaluator"),
    ("never-launched", every_process(W2, skip=("worker:1",)), "worker:1"),
    ("never-launched", every_process(PSS, skip=("chief:0",)), "chief:0"),
]


@pytest.mark.parametrize("code, configs, task", RULES, ids=[f"{r[0]}-{i}" for i, r in enumerate(RULES)])
def test_each_rule_finds_its_mistake_and_nothing_else(code, configs, task):
    d = dtfkit.diagnose(configs)
    assert codes_and_tasks(d) == {(code, task)}, str(d)
    (finding,) = d.findings
    assert finding.message.endswith(".") and finding.fix.endswith(".")


def test_loopback_is_wrong_when_the_cluster_spans_machines():
    d = dtfkit.diagnose(every_process(MWMS3), machines=3)
    assert codes_and_tasks(d) == {("localhost-multi-machine", f"worker:{i}") for i in range(3)}
    assert "tensorflow/tensorflow#57372" in {f.see for f in d.findings}
    assert not dtfkit.diagnose(every_process(MWMS3), machines=["one-host", "one-host"])


def test_strategy_rules_follow_tensorflows_checks():
    assert codes_and_tasks(dtfkit.diagnose(every_process(PS2_W2), strategy="mwms")) == {
        ("mwms-with-ps", "ps")
    }
    assert dtfkit.diagnose(every_process(MWMS3), strategy="ParameterServerStrategy").codes == {"pss-needs-ps"}
    no_worker = {"chief": ["localhost:2220"], "ps": ["localhost:2221"]}
    assert dtfkit.diagnose(every_process(no_worker), strategy="ps").codes == {"pss-needs-worker"}
    assert not dtfkit.diagnose(every_process(PS2_W2))  # without a strategy, a ps job is fine
    with pytest.raises(ValueError, match="'mwms'"):
        dtfkit.diagnose(every_process(MWMS3), strategy="horovod")


# ------------------------------------------------------------------ held-out combinations
HELD_OUT = [
    # workers numbered from 1: an index out of range, and worker:0 nobody runs
    (
        [tf_config(W2, "worker", 1), tf_config(W2, "worker", 2)],
        {},
        {("task-index-out-of-range", "worker:2"), ("never-launched", "worker:0")},
    ),
    # the same TF_CONFIG copied to both processes
    ([tf_config(W2, "worker", 0)] * 2, {}, {("duplicate-task", "worker:0"), ("never-launched", "worker:1")}),
    # a ps-strategy layout given to MWMS, with the ps never started
    (
        every_process(PS2_W2, skip=("ps:0", "ps:1")),
        {"strategy": "mwms"},
        {("mwms-with-ps", "ps"), ("never-launched", "ps:0"), ("never-launched", "ps:1")},
    ),
    # one process got yesterday's cluster: a worker more, on other ports
    (
        [tf_config(W2, "worker", 0), tf_config({"worker": local(3, 3000)}, "worker", 1)],
        {},
        {("clusters-disagree", "worker:1")},
    ),
    # JSON with single quotes next to a good one: no never-launched guess from an unreadable list
    (
        ["{'cluster': 1}", json.dumps(tf_config(W2, "worker", 1))],
        {},
        {("tf-config-not-json", "TF_CONFIG #0")},
    ),
    # a chief listed twice and a master beside it
    (
        every_process({"chief": ["a:1", "a:2"], "master": ["b:1"], "worker": ["c:1"]}),
        {},
        {("several-chiefs", "chief"), ("chief-and-master", "master")},
    ),
    # capitalised job names, as Kubeflow spells replica types
    (
        every_process({"Worker": ["a:1", "b:1"], "PS": ["c:1"]}),
        {},
        {("unknown-job", "Worker"), ("unknown-job", "PS")},
    ),
    # addresses pasted with a scheme and one without a port, across machines
    (
        every_process({"worker": ["grpc://node-a:2222", "node-b"], "ps": ["node-c:2222"]}),
        {"machines": 3},
        {("address-scheme", "worker:0"), ("address-no-port", "worker:1")},
    ),
    # two jobs on one port of one machine, spelled two ways, on a multi-machine cluster
    (
        every_process({"ps": ["127.0.0.1:2222"], "worker": ["localhost:2222", "node-b:2222"]}),
        {},
        {
            ("duplicate-address", "worker:0"),
            ("localhost-multi-machine", "ps:0"),
            ("localhost-multi-machine", "worker:0"),
        },
    ),
    # PS strategy without a ps, and a task type the cluster lacks
    (
        tf_config({"chief": ["a:1"], "worker": ["b:1"]}, "ps", 0),
        {"strategy": "ps"},
        {("task-type-not-in-cluster", "ps:0"), ("pss-needs-ps", "ps")},
    ),
    # a ClusterSpec dict passed where a TF_CONFIG was meant, in a list
    ([{"worker": local(2)}], {}, {("missing-cluster", "TF_CONFIG"), ("missing-task", "TF_CONFIG")}),
    # port zero and a port past 65535
    (
        every_process({"worker": ["a:0", "b:65536"]}),
        {},
        {("address-bad-port", "worker:0"), ("address-bad-port", "worker:1")},
    ),
    # a negative index and a missing cluster in a three-process list
    (
        [
            tf_config(W2, "worker", 0),
            {"cluster": W2, "task": {"type": "worker", "index": -1}},
            {"task": {"type": "worker", "index": 1}},
        ],
        {},
        {("bad-task-index", "TF_CONFIG #1"), ("missing-cluster", "worker:1")},
    ),
    # sparse job with a gap: TensorFlow refuses index 2, as the job has 2 tasks
    # (multi_worker_util._validate_cluster_spec: task_id >= task_count, and num_tasks is len(job))
    (
        [tf_config({"worker": {"0": "a:1", "2": "c:1"}}, "worker", i) for i in (0, 2)],
        {},
        {("task-index-out-of-range", "worker:2")},
    ),
]


@pytest.mark.parametrize("configs, options, expected", HELD_OUT, ids=[str(i) for i in range(len(HELD_OUT))])
def test_held_out_combinations(configs, options, expected):
    d = dtfkit.diagnose(configs, **options)
    assert codes_and_tasks(d) == expected, str(d)
    assert bool(d) == bool(expected)


def test_the_odd_cluster_out_is_named_not_the_first():
    odd = {"worker": local(3, 4000)}
    configs = [tf_config(odd, "worker", 0), tf_config(MWMS3, "worker", 1), tf_config(MWMS3, "worker", 2)]
    assert codes_and_tasks(dtfkit.diagnose(configs)) == {("clusters-disagree", "worker:0")}


# ------------------------------------------------------------------ output
def test_text_and_html_name_task_message_and_fix():
    d = dtfkit.diagnose([tf_config(W1, "worker", 0), tf_config(W1, "worker", 1)])
    (line,) = str(d).splitlines()
    assert line.startswith("worker:1 — Task index 1 does not exist") and " Fix: " in line
    html = d._repr_html_()
    assert "dtfkit-diagnosis" in html and "task-index-out-of-range" in html and "worker:1" in html
    assert "<script>" not in dtfkit.diagnose(every_process({"<script>": ["a:1"]}))._repr_html_()
    assert NOTHING_FOUND in Diagnosis()._repr_html_()
    assert str(Finding("c", "", "m.", "f.")) == "cluster — m. Fix: f."


def test_diagnose_imports_no_tensorflow():
    code = (
        "import sys, dtfkit; dtfkit.diagnose([{'cluster': {'worker': ['a:1']}, 'task': {'type': 'worker', "
        "'index': 0}}], logs={'worker:0': 'x'}); print('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------ logs (texts TF 2.21 printed)
# From a worker whose ps was killed (the slow test below makes it again).
UNAVAILABLE = """tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:
UNAVAILABLE: From /job:worker/replica:0/task:0:
failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:54753: Failed to connect to remote host: Connection refused
Additional GRPC error information from remote target /job:ps/replica:0/task:0 while calling /tensorflow.WorkerService/RecvTensor:"""
# A tf.distribute.Server started on a port another socket holds.
PORT_TAKEN = """E0000 00:00:1795662751.569141   11726 add_port.cc:83] Failed to add port to server: No address added out of total 1 resolved for '0.0.0.0:58049'
E0000 00:00:1795662751.571587   11726 grpc_server_lib.cc:618] UNKNOWN: Could not start gRPC server"""
JOIN_STACK = """Thread MainThread:
  File "/venv/lib/python3.11/site-packages/tensorflow/python/training/server_lib.py", line 185, in join
    c_api.TF_ServerJoin(self._server)"""
STARTUP = 'raise RuntimeError("Collective ops must be configured at program startup")'
ABORTED = "Collective ops is aborted by: failed to connect to all addresses\nThe error could be from a previous operation."


@pytest.mark.parametrize(
    "text, code, peer",
    [
        (UNAVAILABLE, "peer-unavailable", "(ps:0)"),
        (PORT_TAKEN, "address-in-use", ""),
        (STARTUP, "collective-startup", ""),
        ("ValueError: Collective ops are already configured.", "collective-already-configured", ""),
        (ABORTED, "collective-aborted", ""),
        ("Socket closed", "peer-unavailable", ""),
        ("OSError: [Errno 98] Address already in use", "address-in-use", ""),
        (JOIN_STACK, "server-join-blocks", ""),
    ],
)
def test_log_rules_name_the_task_and_the_peer(text, code, peer):
    d = dtfkit.diagnose(logs={"worker:0": "some lines before\n" + text + "\nand after"})
    assert codes_and_tasks(d) == {(code, "worker:0")}, str(d)
    assert peer in d.findings[0].message


# A MultiWorkerMirroredStrategy survivor whose peer worker:1 died after step 12 (chapter 12, section 4.1,
# as TensorFlow 2.21 logged it on worker:0).
PEER_CRASHED = """E0000 00:00:1795675601.505837   11800 ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE: Socket closed
Additional GRPC error information from remote target /job:worker/replica:0/task:1 while calling /tensorflow.WorkerService/RecvBuf:
:UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"Socket closed"}
E0000 00:00:1795675601.505906   11800 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort UNAVAILABLE: Socket closed
Additional GRPC error information from remote target /job:worker/replica:0/task:1 while calling /tensorflow.WorkerService/RecvBuf:
:UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"Socket closed"}"""
# The survivor of a hung peer, with a 3 s collective timeout (chapter 12, section 4.2).
PEER_HUNG = """E0000 00:00:1795675619.546691   12834 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort DEADLINE_EXCEEDED: Collective has timed out during execution.
E0000 00:00:1795675619.546794   12834 ring_alg.cc:291] Aborting RingReduce with DEADLINE_EXCEEDED: Collective ops is aborted by: Collective has timed out during execution.
The error could be from a previous operation. Restart your program to reset. [type.googleapis.com/tensorflow.DerivedStatus='']"""
# TensorFlow 2.21's INFO line for MultiWorkerMirroredStrategy() built while TF_CONFIG was unset (it was
# set on the next line of the script; tf.get_logger().setLevel("INFO")).
SINGLE_WORKER = (
    "INFO:tensorflow:Single-worker MultiWorkerMirroredStrategy with local_devices = ('/device:CPU:0',), "
    "communication = CommunicationImplementation.AUTO"
)
# A bad embedding index, as TF 2.x logged it (a learner's log in a public repository): StartAbort of
# a local error, no peer's fault.
LOCAL_ABORT = (
    "2020-06-12 13:41:59.760226: W tensorflow/core/common_runtime/base_collective_executor.cc:216] "
    "BaseCollectiveExecutor::StartAbort Invalid argument: indices[0,2] = 12444 is not in [0, 10000)"
)


@pytest.mark.parametrize("text", [PEER_CRASHED, PEER_HUNG], ids=["crashed", "hung"])
def test_an_aborted_collective_is_named_from_the_lines_tensorflow_logs(text):
    d = dtfkit.diagnose(logs={"worker:0": text})
    assert codes_and_tasks(d) == {("collective-aborted", "worker:0")}, str(d)
    (finding,) = d.findings
    # TF's own word: the process's collectives stay aborted; every worker restarts from a checkpoint.
    assert "Restart your program to reset" in finding.message
    assert "Restart every worker" in finding.fix and "last checkpoint" in finding.fix
    assert "retry the step" not in finding.fix
    if text is PEER_CRASHED:
        assert "(worker:1)" in finding.message


def test_a_local_error_aborting_a_collective_is_no_peers_fault():
    assert not dtfkit.diagnose(logs={"worker:0": LOCAL_ABORT})


def test_a_strategy_built_before_tf_config_is_named_on_a_cluster_task():
    d = dtfkit.diagnose(logs={"worker:1": "step 1\n" + SINGLE_WORKER + "\nstep 2"})
    assert codes_and_tasks(d) == {("tf-config-after-strategy", "worker:1")}, str(d)
    assert "before creating the strategy" in d.findings[0].fix
    # one process on its own may mean to be a single worker: no cluster task, no finding
    assert not dtfkit.diagnose(logs=SINGLE_WORKER)


class _CrashedMWMS:
    """What a LocalCluster shows after chapter 12's section 4.1: worker:1 exited, worker:0 aborted."""

    closed = False

    def status(self):
        return {"worker:0": "running", "worker:1": "exited (17)"}

    def logs(self, task, tail=None, everything=False):
        return PEER_CRASHED if task == "worker:0" else ""


def test_a_crashed_mwms_peer_means_every_worker_restarts():
    d = dtfkit.diagnose(cluster=_CrashedMWMS())
    assert codes_and_tasks(d) == {("task-died", "worker:1"), ("collective-aborted", "worker:0")}, str(d)
    died = next(f for f in d.findings if f.code == "task-died")
    assert "restart every worker" in died.fix and "cluster.ensure_running(fresh='all')" in died.fix
    assert "then cluster.restart('worker:1')" not in died.fix

    # before any survivor logged the abort, saying the strategy is enough
    class _JustDied(_CrashedMWMS):
        def logs(self, task, tail=None, everything=False):
            return ""

    (alone,) = dtfkit.diagnose(cluster=_JustDied(), strategy="mwms").findings
    assert alone.code == "task-died" and "restart every worker" in alone.fix
    (ps_style,) = dtfkit.diagnose(cluster=_JustDied()).findings
    assert "then cluster.restart('worker:1')" in ps_style.fix


def test_a_cluster_spec_object_is_read_as_its_dict():
    class ClusterSpecLike:
        def as_dict(self):
            return {"worker": ["localhost:2222", "localhost"]}

    assert codes_and_tasks(dtfkit.diagnose(ClusterSpecLike())) == {("address-no-port", "worker:1")}


def test_an_exception_naming_its_task_works_as_logs():
    class TaskFailedLike(Exception):
        task = "worker:1"

    d = dtfkit.diagnose(logs=TaskFailedLike(UNAVAILABLE))
    assert codes_and_tasks(d) == {("peer-unavailable", "worker:1")}
    assert not dtfkit.diagnose(logs={"worker:0": "step 10 loss 0.3"})


def test_state_rules_read_killed_exited_and_starting_tasks():
    from dtfkit.diagnosis.runtime import state_findings

    found = state_findings(
        {"ps:0": "killed", "worker:0": "exited (1)", "worker:1": "starting", "worker:2": "running"},
        {"worker:0": "ValueError: boom"},
    )
    assert {(f.code, f.task) for f in found} == {
        ("task-died", "ps:0"),
        ("task-died", "worker:0"),
        ("task-not-started", "worker:1"),
    }
    exited = next(f for f in found if f.task == "worker:0")
    assert "code 1" in exited.message and "ValueError: boom" in exited.message


# ------------------------------------------------------------------ real failures (slow)
def _peer_step():
    """Keep a TF1 session with a variable on ps:0 in the task between calls; read it."""
    import sys
    import types

    import tensorflow as tf

    import dtfkit as kit

    state = sys.modules.get("_diagnose_test_state")
    if state is None:
        state = sys.modules["_diagnose_test_state"] = types.ModuleType("_diagnose_test_state")
        tf.compat.v1.disable_eager_execution()
        with tf.device("/job:ps/task:0"):
            state.v = tf.compat.v1.Variable(1.0, name="v")
        config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=30_000)
        state.session = tf.compat.v1.Session(kit.this_task().server.target, config=config)
        state.session.run(state.v.initializer)
    return float(state.session.run(state.v))


@pytest.mark.slow
def test_a_killed_ps_is_named_and_the_worker_that_needed_it_too():
    with dtfkit.LocalCluster(ps=1, workers=2, progress=False, name="") as cluster:
        assert not dtfkit.diagnose(cluster=cluster), cluster.status()
        assert cluster.run(_peer_step, on="worker:0", timeout=120) == {"worker:0": 1.0}
        cluster.kill("ps", 0)
        cluster.kill("worker", 1)
        with pytest.raises(dtfkit.TaskFailed) as failure:
            cluster.run(_peer_step, on="worker:0", timeout=120)
        d = dtfkit.diagnose(cluster=cluster, logs=failure.value)
    assert codes_and_tasks(d) == {
        ("task-died", "ps:0"),
        ("task-died", "worker:1"),
        ("peer-unavailable", "worker:0"),
    }, str(d)
    assert "(ps:0)" in next(f for f in d.findings if f.task == "worker:0").message


def _mwms_after_an_op():
    import tensorflow as tf

    tf.constant(1) + 1
    tf.distribute.MultiWorkerMirroredStrategy()


@pytest.mark.slow
def test_mwms_built_after_an_op_is_named():
    with dtfkit.LocalCluster(workers=1, start_servers=False, progress=False, name="") as cluster:
        with pytest.raises(dtfkit.TaskFailed) as failure:
            cluster.run(_mwms_after_an_op, timeout=120)
        d = dtfkit.diagnose(cluster=cluster, logs=failure.value)
    assert codes_and_tasks(d) == {("collective-startup", "worker:0")}, str(d)
    assert "#34568" in d.findings[0].see


SERVER_ON_TAKEN_PORT = textwrap.dedent(
    """
    import sys
    import tensorflow as tf
    address = sys.argv[1]
    try:
        tf.distribute.Server({"worker": [address]}, job_name="worker", task_index=0, start=True)
    except Exception as exc:
        print(type(exc).__name__, exc)
        sys.exit(3)
    """
)


@pytest.mark.slow
def test_a_server_on_a_taken_port_is_named():
    with socket.socket() as holder:
        holder.bind(("localhost", 0))
        holder.listen()
        address = f"localhost:{holder.getsockname()[1]}"
        out = subprocess.run(
            [sys.executable, "-c", SERVER_ON_TAKEN_PORT, address],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert out.returncode == 3, out.stdout + out.stderr
    d = dtfkit.diagnose(logs={"worker:0": out.stdout + out.stderr})
    assert codes_and_tasks(d) == {("address-in-use", "worker:0")}, str(d)


@pytest.mark.slow
def test_a_crashed_mwms_peer_is_named_from_the_survivors_real_log(tmp_path):
    from dtfkit.errors import TaskExited
    from dtfkit.recipes import mwms_fault

    with dtfkit.LocalCluster(workers=2, start_servers=False, progress=False, name="") as cluster:
        calls = {
            task: cluster.submit(
                mwms_fault.train_with_checkpoints,
                kwargs={"checkpoint_dir": str(tmp_path), "steps": 10, "save_every": 2, "die_at": 4},
                on=task,
                timeout=120,
            )
            for task in ("worker:0", "worker:1")
        }
        survivor = calls["worker:0"].result()["worker:0"]
        with pytest.raises(TaskExited):
            calls["worker:1"].result()
        d = dtfkit.diagnose(cluster=cluster)
    assert survivor["error_class"] == "UnavailableError", survivor
    assert codes_and_tasks(d) == {("task-died", "worker:1"), ("collective-aborted", "worker:0")}, str(d)
    assert all("every worker" in f.fix for f in d.findings), str(d)


def _join():
    import dtfkit as kit

    kit.this_task().server.join()


@pytest.mark.slow
def test_a_task_stuck_in_server_join_is_named_from_its_stack():
    with dtfkit.LocalCluster(workers=1, progress=False, name="") as cluster:
        with pytest.raises(dtfkit.TaskTimeout) as stuck:
            cluster.run(_join, timeout=20)
    assert "worker:0" in stuck.value.stacks
    d = dtfkit.diagnose(logs=stuck.value)
    assert codes_and_tasks(d) == {("server-join-blocks", "worker:0")}, str(d)
