"""``dtfkit export tfjob`` and ``dtfkit.kube``: the exported manifest against the Kubeflow v1.9.4 TFJob schema and
webhook rules, the CLI's errors, the entry point's flags (the same as ``dtfkit launch`` gives), and the simulated
operator running the tutorial-style example as a 1 ps + 2 workers TFJob."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import REPO, subprocess_env

import dtfkit
from dtfkit.engine.wire.layout import TaskId, cluster_dict, tutorial_flags
from dtfkit.kube import check_manifest, export_tfjob, manifest_problems, simulate
from dtfkit.kube.controller import is_distributed, operator_tf_config, pods_deleted_at_end, tf_config_text
from dtfkit.kube.validate import ManifestInvalid, is_dtfkit_rule, tfjob_schema

EXAMPLE = REPO / "dtfkit" / "examples" / "distributed_mnist.py"
ENTRY = REPO / "dtfkit" / "kube" / "tfjob_entry.py"

# A stdlib-only stand-in for a replica's script: prints what it was given, then behaves as told.
ECHO_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, threading, time
    args = sys.argv[1:]
    print("ARGV=" + json.dumps(args), flush=True)
    print("TF_CONFIG=" + os.environ.get("TF_CONFIG", ""), flush=True)
    job = next(a.split("=", 1)[1] for a in args if a.startswith("--job_name="))
    index = next(a.split("=", 1)[1] for a in args if a.startswith("--task_index="))
    behaviour = dict(a[2:].split("=", 1) for a in args if a.startswith("--on_") and "=" in a)
    what = behaviour.get(f"on_{job}{index}", behaviour.get(f"on_{job}", "exit0"))
    print(f"READY {job}{index} pid={os.getpid()}", flush=True)
    if os.environ.get("ECHO_ONLY"):  # only show the arguments
        sys.exit(0)
    ps_printed = os.environ.get("ECHO_PS_PRINTED")  # a file the ps creates once it printed
    if ps_printed and job == "ps":
        open(ps_printed, "w").close()
    elif ps_printed:  # the others wait for it (bounded): the launcher ends the ps once they are done
        deadline = time.monotonic() + 120
        while not os.path.exists(ps_printed) and time.monotonic() < deadline:
            time.sleep(0.05)
    if what == "hang":
        threading.Event().wait()
    sys.exit(int(what[4:]))
    """
)


def docs_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def replica_containers(job: dict) -> dict[str, dict]:
    return {t: s["template"]["spec"]["containers"][0] for t, s in job["spec"]["tfReplicaSpecs"].items()}


# ------------------------------------------------------------------------------------------------ the manifest
@pytest.mark.parametrize(
    "ps, workers, chief, args",
    [(1, 2, 0, []), (2, 4, 1, []), (1, 2, 0, ["--train_steps=200", "--is_sync=True", "two words"])],
    ids=["1ps-2w", "2ps-4w-chief", "with-args"],
)
def test_exported_manifest_is_schema_and_webhook_valid(ps, workers, chief, args):
    text = export_tfjob(EXAMPLE, image="my/tf:2.21", ps=ps, workers=workers, chief=chief, args=args)
    assert manifest_problems(text) == []
    configmap, job = check_manifest(text)
    assert text.startswith("# Kubeflow TFJob: distributed_mnist.py")
    head = text[: text.index("apiVersion:")]
    assert all(line.startswith("#") for line in head.splitlines())
    assert "kubectl apply -f" in head and "sidecar" in head and "NetworkPolicy" in head

    assert (configmap["kind"], job["kind"], job["apiVersion"]) == ("ConfigMap", "TFJob", "kubeflow.org/v1")
    assert job["metadata"]["name"] == "distributed-mnist"
    # the ConfigMap holds the script and the entry point verbatim
    assert configmap["data"]["distributed_mnist.py"] == EXAMPLE.read_text(encoding="utf-8")
    assert configmap["data"]["dtfkit_tfjob_entry.py"] == ENTRY.read_text(encoding="utf-8")

    spec = job["spec"]
    assert spec["runPolicy"]["cleanPodPolicy"] == "Running"
    # the operator's default: the job ends when its chief does (the Chief, else worker 0)
    assert "successPolicy" not in spec
    assert ("  # no successPolicy: with a Chief" in text) == bool(chief)
    assert ("  # no successPolicy: the job succeeds when worker 0, the chief, does" in text) == (not chief)
    assert "# No device_filters" not in head  # the example sets them
    expected = {"PS": ps, "Worker": workers, **({"Chief": 1} if chief else {})}
    assert {t: s["replicas"] for t, s in spec["tfReplicaSpecs"].items()} == expected
    for rtype, container in replica_containers(job).items():
        replica = spec["tfReplicaSpecs"][rtype]
        assert replica["restartPolicy"] == "ExitCode"
        assert replica["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
        assert replica["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "distributed-mnist"
        assert container["name"] == "tensorflow"
        assert container["command"] == [
            "python",
            "/opt/dtfkit/dtfkit_tfjob_entry.py",
            "/opt/dtfkit/distributed_mnist.py",
            "--",
            *args,
        ]
        assert container["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
        assert container["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
        assert container["volumeMounts"][0]["mountPath"] == "/opt/dtfkit"
        volume = replica["template"]["spec"]["volumes"][0]
        assert volume["configMap"]["name"] == configmap["metadata"]["name"]


@pytest.mark.parametrize(
    "source, args, warned",
    [
        ("config = tf.compat.v1.ConfigProto(device_filters=['/job:ps'])\n", [], False),
        ("config = None\n", [], True),
        ("config = None  # no filters here\n", ["--train_steps=5"], True),
    ],
    ids=["sets-them", "none", "none-with-args"],
)
def test_a_script_without_device_filters_gets_the_fix_in_the_header(tmp_path, source, args, warned):
    script = tmp_path / "train.py"
    script.write_text(source)
    text = export_tfjob(script, image="x", ps=1, workers=2, args=args)
    head = text[: text.index("apiVersion:")]
    assert ("# No device_filters" in head) == warned
    if warned:
        assert 'device_filters=["/job:ps", f"/job:worker/task:{task_index}"]' in head
        assert "The job still ends when worker 0 does" in head


@pytest.mark.parametrize("off", ["--device_filters=False", "--nodevice_filters", "--device_filters=false"])
def test_device_filters_turned_off_by_an_argument_get_the_fix_in_the_header(off):
    text = export_tfjob(EXAMPLE, image="x", ps=1, workers=2, chief=1, args=["--train_steps=5", off])
    head = text[: text.index("apiVersion:")]
    assert "# No device_filters" in head and "The job still ends when the chief does" in head


def test_gpus_go_to_chief_and_workers_only():
    job = docs_of(export_tfjob(EXAMPLE, image="x", ps=1, workers=2, chief=1, gpus_per_worker=1))[1]
    limits = {t: c["resources"].get("limits") for t, c in replica_containers(job).items()}
    assert limits == {"Chief": {"nvidia.com/gpu": 1}, "PS": None, "Worker": {"nvidia.com/gpu": 1}}


def test_the_vendored_schema_is_the_v1_tfjob_schema_made_strict():
    crd_dir = REPO / "dtfkit" / "kube" / "crd"
    crd = yaml.load((crd_dir / "kubeflow.org_tfjobs.yaml").read_text(), Loader=yaml.CSafeLoader)
    assert crd["spec"]["names"]["kind"] == "TFJob"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1"]
    assert "Apache License" in (crd_dir / "LICENSE").read_text()
    assert "v1.9.4" in (crd_dir / "README.md").read_text()
    schema = tfjob_schema()
    assert schema["additionalProperties"] is False
    container = schema["properties"]["spec"]["properties"]["tfReplicaSpecs"]["additionalProperties"]
    assert container["additionalProperties"] is False  # a ReplicaSpec takes no unknown field either


def _mutate(text: str, change) -> list[dict]:
    docs = copy.deepcopy(docs_of(text))
    change(docs[0], docs[1])
    return docs


def _worker(job: dict) -> dict:
    return job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


MUTATIONS = {
    "unknown field in a container": (
        lambda cm, job: _worker(job).update(imagePullPolicyy="Always"),
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].imagePullPolicyy: unknown field",
    ),
    "misspelt cleanPodPolicy": (
        lambda cm, job: job["spec"]["runPolicy"].update(cleanpodPolicy="Running"),
        "spec.runPolicy.cleanpodPolicy: unknown field",
    ),
    "uppercase name": (
        lambda cm, job: job["metadata"].update(name="Mnist"),
        "metadata.name: 'Mnist' is not a DNS-1035 label (the admission webhook): contains uppercase letters",
    ),
    "underscore name": (
        lambda cm, job: job["metadata"].update(name="my_job"),
        "metadata.name: 'my_job' is not a DNS-1035 label (the admission webhook): contains '_'",
    ),
    "missing image": (
        lambda cm, job: _worker(job).pop("image"),
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: required",
    ),
    "container not named tensorflow": (
        lambda cm, job: _worker(job).update(name="trainer"),
        "spec.tfReplicaSpecs.Worker.template.spec.containers: must have a container named 'tensorflow'",
    ),
    "a Chief and a Master": (
        lambda cm, job: job["spec"]["tfReplicaSpecs"].update(
            Chief=copy.deepcopy(job["spec"]["tfReplicaSpecs"]["PS"]),
            Master=copy.deepcopy(job["spec"]["tfReplicaSpecs"]["PS"]),
        ),
        "spec.tfReplicaSpecs: must not have more than 1 Chief or Master role",
    ),
    "two chief replicas": (
        lambda cm, job: job["spec"]["tfReplicaSpecs"].update(
            Chief=dict(copy.deepcopy(job["spec"]["tfReplicaSpecs"]["PS"]), replicas=2)
        ),
        "spec.tfReplicaSpecs.Chief.replicas: dtfkit rule: a TensorFlow cluster has one chief, not 2",
    ),
    "replicas as text": (
        lambda cm, job: job["spec"]["tfReplicaSpecs"]["PS"].update(replicas="2"),
        "spec.tfReplicaSpecs.PS.replicas: '2' is not of type 'integer'",
    ),
    "bad ConfigMap key": (
        lambda cm, job: cm["data"].update({"my script.py": "print(1)"}),
        "document 1 (ConfigMap/distributed-mnist-files): data.my script.py: not a valid key",
    ),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_broken_manifest_is_refused_with_the_path_of_the_problem(mutation):
    change, expected = MUTATIONS[mutation]
    text = export_tfjob(EXAMPLE, image="my/tf:2.21", ps=1, workers=2)
    problems = manifest_problems(_mutate(text, change))
    assert any(expected in p for p in problems), problems
    with pytest.raises(ManifestInvalid) as caught:
        check_manifest(_mutate(text, change))
    assert expected in str(caught.value)


WRONG_TYPES = {
    "ConfigMap name a list": lambda cm, job: cm["metadata"].update(name=["files"]),
    "TFJob metadata text": lambda cm, job: job.update(metadata="train"),
    "TFJob spec text": lambda cm, job: job.update(spec="train"),
    "replica spec text": lambda cm, job: job["spec"]["tfReplicaSpecs"].update(Worker="x"),
    "volume text": lambda cm, job: job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"].update(
        volumes=["files"]
    ),
    "mounted ConfigMap name a list": lambda cm, job: job["spec"]["tfReplicaSpecs"]["Worker"]["template"][
        "spec"
    ].update(volumes=[{"name": "files", "configMap": {"name": ["files"]}}]),
}


@pytest.mark.parametrize("mutation", list(WRONG_TYPES))
def test_a_part_of_another_type_is_a_problem_not_a_crash(mutation):
    # The ConfigMap mount rule read such parts as dicts and names as keys (AttributeError, unhashable list).
    text = export_tfjob(EXAMPLE, image="my/tf:2.21", ps=1, workers=2)
    assert manifest_problems(_mutate(text, WRONG_TYPES[mutation]))


def test_every_problem_is_listed_not_only_the_first():
    text = export_tfjob(EXAMPLE, image="my/tf:2.21", ps=1, workers=2)

    def many(cm, job):
        job["metadata"]["name"] = "Bad_Name"
        _worker(job).pop("image")
        job["spec"]["runPolicy"]["cleanpodPolicy"] = "Running"

    problems = manifest_problems(_mutate(text, many))
    assert len(problems) == 3, problems
    assert [p.split(": ")[1] for p in problems] == [
        "spec.runPolicy.cleanpodPolicy",
        "metadata.name",
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image",
    ]


@pytest.mark.parametrize(
    "field, value",
    [
        (("spec", "runPolicy", "cleanPodPolicy"), "Sometimes"),
        (("spec", "successPolicy"), "AllOfThem"),
        (("spec", "tfReplicaSpecs", "Worker", "restartPolicy"), "Sometimes"),
    ],
    ids=["cleanPodPolicy", "successPolicy", "restartPolicy"],
)
def test_values_the_operator_accepts_are_refused_only_as_dtfkit_rules(field, value):
    # kubeflow/trainer v1.9.4: the CRD types these fields as plain strings with no enum
    # (manifests/base/crds/kubeflow.org_tfjobs.yaml), and the admission webhook
    # (pkg/webhooks/tensorflow/tfjob_webhook.go, validateTFJob) checks only the name, managedBy and the
    # replicas' containers: kubectl apply takes these manifests.
    text = export_tfjob(EXAMPLE, image="my/tf:2.21", ps=1, workers=2)

    def change(cm, job):
        node = job
        for key in field[:-1]:
            node = node[key]
        node[field[-1]] = value

    problems = manifest_problems(_mutate(text, change))
    assert len(problems) == 1, problems
    assert is_dtfkit_rule(problems[0]) and f"{'.'.join(field)}: dtfkit rule: {value!r}" in problems[0]
    with pytest.raises(ManifestInvalid) as caught:
        check_manifest(_mutate(text, change))
    assert "0 problem(s) that kubectl apply would refuse" in str(caught.value)
    assert "1 of dtfkit's own rules" in str(caught.value)


def test_problems_kubectl_would_refuse_carry_no_dtfkit_label():
    text = export_tfjob(EXAMPLE, image="my/tf:2.21", ps=1, workers=2)
    for mutation in (
        "unknown field in a container",
        "uppercase name",
        "missing image",
        "a Chief and a Master",
    ):
        change, expected = MUTATIONS[mutation]
        found = [p for p in manifest_problems(_mutate(text, change)) if expected in p]
        assert found and not any(is_dtfkit_rule(p) for p in found), (mutation, found)


# ------------------------------------------------------------------------- the operator's rules, as its tests say
def _operator_test_job(namespace: str, worker: int, ps: int, evaluator: int = 0, chief: int = 0) -> dict:
    """testutil.NewTFJobWithNamespace / NewTFJobWithEvaluatorAndNamespace / NewTFJobWithChief
    (pkg/controller.v1/tensorflow/testutil/tfjob.go, v1.9.4): a type with 0 replicas is left out, every
    container is "tensorflow" with the port "tfjob-port" 2222 (NewTFReplicaSpecTemplate)."""
    template = {
        "spec": {
            "containers": [{"name": "tensorflow", "ports": [{"name": "tfjob-port", "containerPort": 2222}]}]
        }
    }
    counts = {"Worker": worker, "PS": ps, "Evaluator": evaluator, "Chief": chief}
    specs = {t: {"replicas": n, "template": template} for t, n in counts.items() if n > 0}
    return {"metadata": {"name": "test-tfjob", "namespace": namespace}, "spec": {"tfReplicaSpecs": specs}}


# Copied from kubeflow/trainer v1.9.4, pkg/controller.v1/tensorflow/pod_test.go, Describe("TFJob controller"),
# Context("Test ClusterSpec"), "should generate desired cluster spec": (job, rt, index, customClusterDomain,
# expectedClusterSpec), with tftestutil.TestTFJobName = "test-tfjob" written out. "" means no TF_CONFIG at all.
OPERATOR_POD_TEST_CASES = [
    (_operator_test_job("ns0", 1, 0), "worker", "0", "", ""),
    (_operator_test_job("ns1", 1, 0), "worker", "0", "tf.training.com", ""),
    (
        _operator_test_job("ns2", 1, 1),
        "worker",
        "0",
        "tf.training.org",
        '{"cluster":{"ps":["test-tfjob-ps-0.ns2.svc.tf.training.org:2222"],"worker":["test-tfjob-worker-0.ns2.svc.tf.training.org:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}',
    ),
    (
        _operator_test_job("ns3", 1, 1, evaluator=1),
        "worker",
        "0",
        "tf.training.io",
        '{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc.tf.training.io:2222"],"ps":["test-tfjob-ps-0.ns3.svc.tf.training.io:2222"],"worker":["test-tfjob-worker-0.ns3.svc.tf.training.io:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}',
    ),
    (
        _operator_test_job("ns3", 1, 1, evaluator=1),
        "worker",
        "0",
        "",
        '{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc:2222"],"ps":["test-tfjob-ps-0.ns3.svc:2222"],"worker":["test-tfjob-worker-0.ns3.svc:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}',
    ),
]


@pytest.mark.parametrize(
    "job, rt, index, domain, expected",
    OPERATOR_POD_TEST_CASES,
    ids=["ns0", "ns1", "ns2", "ns3-domain", "ns3"],
)
def test_tf_config_is_byte_for_byte_what_the_operators_own_test_expects(job, rt, index, domain, expected):
    assert operator_tf_config(job, rt.capitalize(), int(index), cluster_domain=domain) == expected


def test_is_distributed_as_the_operators_own_test_says():
    # pod_test.go (v1.9.4), Context("Test IsDistributed"): NewTFJob(1, 0) false, NewTFJob(1, 1) true,
    # NewTFJob(0, 1) false, NewTFJobWithChief(1, 0) true.
    cases = [((1, 0, 0), False), ((1, 1, 0), True), ((0, 1, 0), False), ((1, 0, 1), True)]
    for (worker, ps, chief), expected in cases:
        assert is_distributed(_operator_test_job("default", worker, ps, chief=chief)) is expected


def test_clean_pod_policy_deletes_as_delete_pods_and_services_does():
    # pkg/controller.v1/common/job.go (v1.9.4), DeletePodsAndServices: None keeps every pod; Running skips a
    # pod that is neither running nor pending; any other value deletes every pod.
    assert [pods_deleted_at_end(p, running=True) for p in (None, "None", "Running", "All", "Sometimes")] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert [pods_deleted_at_end(p, running=False) for p in ("None", "Running", "All", "Sometimes")] == [
        False,
        False,
        True,
        True,
    ]


# ---------------------------------------------------------------------------------------------------- the CLI
def run_export(args: list[str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dtfkit", "export", "tfjob", *args],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=str(cwd),
        timeout=120,
    )


def test_cli_prints_a_manifest_kubectl_takes_as_it_is(tmp_path):
    script = tmp_path / "My_Train.py"
    script.write_text("print('hi')\n")
    out = run_export(
        ["--ps", "2", "--workers", "4", "--chief", "1", "--image", "x", str(script), "--", "-v"], tmp_path
    )
    assert out.returncode == 0, out.stderr
    configmap, job = check_manifest(out.stdout)
    assert job["metadata"]["name"] == "my-train"  # from the file name, made a DNS-1035 label
    assert replica_containers(job)["Worker"]["command"][-2:] == ["--", "-v"]
    assert configmap["data"]["My_Train.py"] == "print('hi')\n"


@pytest.mark.parametrize(
    "args, cause",
    [
        (
            ["--name", "My_Job"],
            r"--name 'My_Job' cannot name a TFJob: it contains uppercase letters, contains '_'",
        ),
        (["--name", "a" * 70], r"is 70 characters long \(at most 54\)"),
        (["--workers", "0"], r"needs at least one worker \(got --workers 0\)"),
        (["--ps", "-1"], r"number of ps replicas cannot be negative \(got -1\)"),
        (["--chief", "2"], r"at most one chief \(got --chief 2\)"),
        (["--image", ""], r"no container image given: use --image"),
        (["--missing"], r"the script .*nope\.py does not exist"),
        (["--cpu", "lots"], r"--cpu 'lots' is not a Kubernetes quantity"),
    ],
    ids=[
        "bad-name",
        "long-name",
        "zero-workers",
        "negative-ps",
        "two-chiefs",
        "no-image",
        "no-script",
        "bad-cpu",
    ],
)
def test_cli_refuses_bad_input_with_exit_2_naming_the_cause(tmp_path, args, cause):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    image = [] if "--image" in args else ["--image", "x"]
    target = str(tmp_path / "nope.py") if args == ["--missing"] else str(script)
    out = run_export([*image, *[a for a in args if a != "--missing"], target], tmp_path)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stdout == ""
    assert out.stderr.startswith("dtfkit: error: ")
    assert re.search(cause, out.stderr), out.stderr
    if args[0] == "--name" and len(args[1]) < 10:
        assert "for example --name my-job" in out.stderr  # a fixed name is suggested


def test_cli_without_image_says_so(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    out = run_export([str(script)], tmp_path)
    assert out.returncode == 2 and "no container image given" in out.stderr, out.stderr


# ---------------------------------------------------------------------------------------------- the entry point
def run_entry(script: Path, tf_config: str | None, args=()) -> subprocess.CompletedProcess:
    env = subprocess_env(ECHO_ONLY="1")
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    return subprocess.run(
        [sys.executable, str(ENTRY), str(script), "--", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def argv_of(stdout: str) -> list[str]:
    return json.loads(next(line[5:] for line in stdout.splitlines() if line.startswith("ARGV=")))


def test_entry_point_gives_the_flags_of_dtfkit_layout_without_a_chief(tmp_path):
    script = tmp_path / "echo.py"
    script.write_text(ECHO_SCRIPT)
    addresses = {
        TaskId("ps", 0): "h-ps-0:2222",
        TaskId("worker", 0): "h-w-0:2222",
        TaskId("worker", 1): "h-w-1:2222",
    }
    cluster = cluster_dict(addresses)
    for task in addresses:
        tf_config = tf_config_text(cluster, task.job, task.index)
        out = run_entry(script, tf_config, ["--is_sync=True"])
        assert out.returncode == 0, out.stderr
        assert argv_of(out.stdout) == [*tutorial_flags(cluster, task), "--is_sync=True"]
        assert f"TF_CONFIG={tf_config}" in out.stdout  # left in place for the script


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_entry_point_gives_the_flags_dtfkit_launch_gives_with_a_chief(tmp_path):
    script = tmp_path / "echo.py"
    script.write_text(ECHO_SCRIPT)
    # Under load the workers can be done before the ps ran a line, and the launcher ends the ps then.
    env = {"ECHO_PS_PRINTED": str(tmp_path / "ps-printed")}
    result = dtfkit.launch(
        str(script), ps=1, workers=2, chief=1, args=["--on_ps=hang", "--x=1"], env=env, timeout=240
    )
    assert result.ok, result.summary()
    logs = Path(result.log_dir)
    launched = {
        name: argv_of((logs / f"{name.replace(':', '-')}.log").read_text()) for name in result.exit_codes
    }
    assert set(launched) == {"chief:0", "ps:0", "worker:0", "worker:1"}
    cluster = {}
    for flag in launched["worker:0"]:
        if "_hosts=" in flag:
            key, hosts = flag[2:].split("=", 1)
            cluster[key.removesuffix("_hosts")] = hosts.split(",")
    assert list(cluster) == ["chief", "ps", "worker"]
    for name, argv in launched.items():
        job, index = name.split(":")
        # the operator's TF_CONFIG for the same cluster: the entry point must give exactly the launcher's flags
        out = run_entry(script, tf_config_text(cluster, job, int(index)), ["--on_ps=hang", "--x=1"])
        assert out.returncode == 0, out.stderr
        assert argv_of(out.stdout) == argv, name
        assert argv[-4:] == [f"--job_name={job}", f"--task_index={index}", "--on_ps=hang", "--x=1"]


def test_entry_point_gives_an_evaluator_the_flags_dtfkit_layout_gives(tmp_path):
    # The operator lists the evaluator in every replica's cluster (genClusterSpec); dtfkit's own layout does
    # not; the script must see the same flags from both: no --evaluator_hosts.
    script = tmp_path / "echo.py"
    script.write_text(ECHO_SCRIPT)
    job = _operator_test_job("ml", 2, 1, evaluator=1)
    addresses = {TaskId("ps", 0): "p:1", TaskId("worker", 0): "w0:1", TaskId("worker", 1): "w1:1"}
    launched = cluster_dict({**addresses, TaskId("evaluator", 0): "e:1"})
    assert "evaluator" not in launched
    for rtype, index in (("Evaluator", 0), ("Worker", 1), ("PS", 0)):
        text = operator_tf_config(job, rtype, index)
        assert '"evaluator":["test-tfjob-evaluator-0.ml.svc:2222"]' in text
        out = run_entry(script, text)
        assert out.returncode == 0, out.stderr
        flags = argv_of(out.stdout)
        assert not any(f.startswith("--evaluator_hosts") for f in flags)
        ml = {k: [f"test-tfjob-{k}-{i}.ml.svc:2222" for i in range(len(v))] for k, v in launched.items()}
        assert flags == tutorial_flags(ml, TaskId(rtype.lower(), index))


@pytest.mark.parametrize(
    "tf_config, cause",
    [
        (None, "TF_CONFIG is not set"),
        ("{not json", "TF_CONFIG is not valid JSON"),
        ('{"task": {"type": "worker", "index": 0}}', "TF_CONFIG has no 'cluster'"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}', "has 1 worker task"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}}', "task type 'ps'"),
    ],
    ids=["missing", "not-json", "no-cluster", "index-out-of-range", "type-not-in-cluster"],
)
def test_entry_point_refuses_an_unusable_tf_config_with_exit_2(tmp_path, tf_config, cause):
    script = tmp_path / "echo.py"
    script.write_text(ECHO_SCRIPT)
    out = run_entry(script, tf_config)
    assert out.returncode == 2
    assert out.stdout == ""  # the script never ran
    assert out.stderr.startswith("dtfkit tfjob entry: error: ") and cause in out.stderr, out.stderr


# ------------------------------------------------------------------------------------------ the simulated operator
def assert_all_gone(result) -> None:
    pids = [r.pid for r in result.replicas.values()]
    assert pids and all(p is not None for p in pids)
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], alive


def echo_manifest(tmp_path, *, args, workers=2, success_policy="", clean=None) -> list[dict]:
    script = tmp_path / "echo.py"
    script.write_text(ECHO_SCRIPT)
    docs = docs_of(export_tfjob(script, image="x", ps=1, workers=workers, args=args))
    assert "successPolicy" not in docs[1]["spec"]  # the export leaves the operator's default
    if success_policy:
        docs[1]["spec"]["successPolicy"] = success_policy
    if clean is not None:
        docs[1]["spec"]["runPolicy"]["cleanPodPolicy"] = clean
    return docs


@pytest.mark.parametrize(
    "args, success_policy, clean, verdict, outcomes",
    [
        (
            ["--on_ps=hang"],
            "AllWorkers",
            None,
            "Succeeded",
            ("deleted by cleanPodPolicy Running", "exited 0", "exited 0"),
        ),
        (
            ["--on_ps=hang", "--on_worker0=hang", "--on_worker1=exit3"],
            "",
            None,
            "Failed",
            ("deleted by cleanPodPolicy Running", "deleted by cleanPodPolicy Running", "exited 3"),
        ),
        (
            ["--on_ps=hang", "--on_worker1=hang"],
            "",
            None,
            "Succeeded",
            ("deleted by cleanPodPolicy Running", "exited 0", "deleted by cleanPodPolicy Running"),
        ),
        (
            ["--on_ps=hang"],
            "AllWorkers",
            "None",
            "Succeeded",
            ("left running by cleanPodPolicy None (ended by the simulator)", "exited 0", "exited 0"),
        ),
    ],
    ids=["all-workers", "worker-fails", "default-policy-worker0", "clean-none"],
)
def test_simulator_applies_success_and_clean_pod_policies(
    tmp_path, args, success_policy, clean, verdict, outcomes
):
    docs = echo_manifest(tmp_path, args=args, success_policy=success_policy, clean=clean)
    lines: list[str] = []
    result = simulate(docs, timeout=120, grace=2, env=subprocess_env(), echo=lines.append)
    assert result.verdict == verdict, (result.summary(), lines)
    assert tuple(result.replicas[n].outcome for n in ("ps-0", "worker-0", "worker-1")) == outcomes
    for run in result.replicas.values():
        # what the process saw is the operator's TF_CONFIG, with the services mapped to local ports
        if run.exit_code is not None:
            assert f"TF_CONFIG={run.tf_config}" in run.output
    assert_all_gone(result)


def test_simulator_timeout_and_ctrl_c_leave_nothing_running(tmp_path):
    docs = echo_manifest(tmp_path, args=["--on_ps=hang", "--on_worker=hang"])
    result = simulate(docs, timeout=4, grace=1, env=subprocess_env(), echo=None)
    assert result.verdict == "Timeout"
    assert {r.outcome for r in result.replicas.values()} == {"ended by the simulator's timeout"}
    assert_all_gone(result)

    ready: list[str] = []

    def ctrl_c_once_all_are_up(line: str) -> None:  # called from the simulator's reader threads
        if "READY" in line:
            ready.append(line)
            if len(ready) == 3:
                os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C would: KeyboardInterrupt in the main thread

    # Ctrl-C in a terminal meets Python's default handler; an earlier test of this process (a
    # pytest-xdist worker runs many files) may have left another one, put back afterwards.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            result = simulate(docs, timeout=120, grace=1, env=subprocess_env(), echo=ctrl_c_once_all_are_up)
            pytest.fail(
                f"simulate() returned ({result.summary()}) with {len(ready)} of 3 replicas READY: "
                f"{ready}; SIGINT was sent: {len(ready) == 3}"
            )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(ready) == 3
    # The replicas by their own pids (in a full run this process has other children: a task zygote, say),
    # ended and reaped before simulate() raised.
    replicas = [int(line.split("pid=")[1].split()[0]) for line in ready]
    assert [pid for pid in replicas if psutil.pid_exists(pid)] == [], replicas


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_simulated_operator_runs_the_tutorial_example_as_a_tfjob():
    args = ["--train_steps=40", "--log_every=10"]
    text = export_tfjob(EXAMPLE, image="my/tf:2.21", ps=1, workers=2, args=args)
    lines: list[str] = []
    result = simulate(text, timeout=300, env=subprocess_env(), echo=lines.append)
    assert result.ok, (result.summary(), lines[-40:])
    assert result.replicas["ps-0"].outcome == "deleted by cleanPodPolicy Running"
    assert result.replicas["ps-0"].exit_code is None
    chief = result.replicas["worker-0"]
    assert chief.exit_code == 0, chief.output[-20:]
    assert any(re.fullmatch(r"worker 0 done: local_steps=\d+ global_step=\d+", line) for line in chief.output)
    # The job ends with worker 0 (no successPolicy): worker 1 has finished too, or is still closing its
    # session and is deleted; it never fails.
    other = result.replicas["worker-1"]
    if other.exit_code is None:
        assert other.outcome == "deleted by cleanPodPolicy Running", other.outcome
    else:
        assert other.exit_code == 0, other.output[-20:]
        assert any(
            re.fullmatch(r"worker 1 done: local_steps=\d+ global_step=\d+", line) for line in other.output
        )

    # the TF_CONFIG each replica got is the operator's, to the byte, with only the addresses mapped
    services = {
        "ps": ["distributed-mnist-ps-0.default.svc:2222"],
        "worker": [f"distributed-mnist-worker-{i}.default.svc:2222" for i in (0, 1)],
    }
    assert sorted(result.mapping) == sorted(services["ps"] + services["worker"])
    local = {job: [result.mapping[s] for s in hosts] for job, hosts in services.items()}
    for name, run in result.replicas.items():
        job, index = name.split("-")
        task = f'"task":{{"type":"{job}","index":{index}}},"environment":"cloud"}}'
        assert (
            run.operator_tf_config == '{"cluster":' + json.dumps(services, separators=(",", ":")) + "," + task
        )
        assert run.tf_config == '{"cluster":' + json.dumps(local, separators=(",", ":")) + "," + task
        rtype = {"ps": "PS", "worker": "Worker"}[job]
        assert run.operator_tf_config == operator_tf_config(docs_of(text)[1], rtype, int(index))
        # the entry point ran the script with the flags from that TF_CONFIG
        started = next(line for line in run.output if line.startswith("dtfkit tfjob entry: running "))
        assert started.endswith(
            f"--ps_hosts={local['ps'][0]} --worker_hosts={','.join(local['worker'])} "
            f"--job_name={job} --task_index={index} {' '.join(args)}"
        )
    assert_all_gone(result)


# The tutorial's own settings (no device filters, no polling for the chief), and one change of timing only: the
# non-chief opens its session after the chief has exited. That happens when SessionManager finds the model not yet
# initialized and sleeps its 30 s recovery_wait_secs while a short run ends, or when the non-chief's pod starts
# late. TensorFlow then logs "CreateSession still waiting for response from worker: /job:worker/replica:0/task:0"
# every 10 s, for ever (DeviceFinder::Wait in core/distributed_runtime/master.cc has no timeout).
LATE_NON_CHIEF = textwrap.dedent(
    """
    import runpy, socket, sys, time

    import tensorflow as tf

    from dtfkit.recipes.tutorial_script import PATH

    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    chief_host, chief_port = flags["worker_hosts"].split(",")[0].rsplit(":", 1)
    session = tf.compat.v1.train.MonitoredTrainingSession


    def chief_listening():
        try:
            socket.create_connection((chief_host, int(chief_port)), timeout=1).close()
            return True
        except OSError:
            return False


    def after_the_chief_left(*args, **kwargs):
        if not kwargs.get("is_chief", True):
            deadline = time.monotonic() + 240
            while chief_listening() and time.monotonic() < deadline:
                time.sleep(0.1)
            print(f"worker {flags['task_index']}: the chief has left; opening my session", flush=True)
        return session(*args, **kwargs)


    tf.compat.v1.train.MonitoredTrainingSession = after_the_chief_left
    sys.argv[0] = PATH
    runpy.run_path(PATH, run_name="__main__")
    """
)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_tfjob_whose_non_chief_waits_for_a_departed_chief_still_ends(tmp_path):
    """Issue 29: with successPolicy AllWorkers this job never ended (worker 1 waited for worker 0 for ever)."""
    script = tmp_path / "tutorial_late_non_chief.py"
    script.write_text(LATE_NON_CHIEF)
    args = ["--device_filters=False", "--poll_chief_secs=0", "--train_steps=40", "--log_every=10"]
    text = export_tfjob(script, image="my/tf:2.21", ps=2, workers=2, args=args)
    lines: list[str] = []
    result = simulate(text, timeout=240, grace=2, env=subprocess_env(), echo=lines.append)
    assert result.verdict == "Succeeded", (result.summary(), lines[-40:])
    assert result.reason.startswith("worker 0 succeeded"), result.reason
    chief = result.replicas["worker-0"]
    assert chief.exit_code == 0 and "worker 0 done: local_steps=40 global_step=40" in chief.output, (
        chief.output[-20:]
    )
    # every other replica was still running when the job ended, and was deleted
    for name in ("ps-0", "ps-1", "worker-1"):
        assert result.replicas[name].outcome == "deleted by cleanPodPolicy Running", result.summary()
    assert not any(line.startswith("Train step") for line in result.replicas["worker-1"].output)
    assert_all_gone(result)
    assert "# No device_filters" in text  # and the manifest's header names the fix
