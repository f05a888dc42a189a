"""Write a Kubeflow TFJob manifest that runs an unmodified tutorial-style script on Kubernetes.

The manifest has two documents: a ConfigMap holding the script and dtfkit's TFJob entry
point (``dtfkit/kube/tfjob_entry.py``, standard library only), and a ``TFJob``
(``kubeflow.org/v1``) whose ``tensorflow`` containers mount the ConfigMap at
``/opt/dtfkit`` and run ``python /opt/dtfkit/dtfkit_tfjob_entry.py /opt/dtfkit/SCRIPT -- ARGS``.
The entry point turns the operator's ``TF_CONFIG`` into the tutorial's flags. The
manifest is checked (``dtfkit.kube.validate``) before it is returned.

Example::

    >>> text = export_tfjob("dtfkit/examples/distributed_mnist.py", image="tensorflow/tensorflow:2.21.0",
    ...                     ps=1, workers=2, args=["--train_steps=200"])  # doctest: +SKIP
    >>> print(text)  # then: kubectl apply -f -  # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from dtfkit.errors import DtfkitError
from dtfkit.i18n import N_, _, joined
from dtfkit.kube import tfjob_entry
from dtfkit.kube.names import (
    LABEL_MAX,
    configmap_key_problems,
    dns1035_problems,
    dns1123_label_problems,
    to_dns1035,
)
from dtfkit.kube.validate import CONFIGMAP_MAX_BYTES, ManifestInvalid, check_manifest, manifest_problems

MOUNT_PATH = "/opt/dtfkit"
ENTRY_KEY = "dtfkit_tfjob_entry.py"
PORT = 2222
PORT_NAME = "tfjob-port"
VOLUME = "dtfkit-files"
# The order in which the replica types appear in the manifest, and their TF_CONFIG job names.
REPLICA_ORDER = (("Chief", "chief"), ("PS", "ps"), ("Worker", "worker"), ("Evaluator", "evaluator"))
_QUANTITY = re.compile(r"^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[numkMGTPE]|[KMGTPE]i)?$")

# The manifest's comments, for the reader: each line is written as a YAML comment (``_commented``), so that
# the words (and their translations) need no "#".
HEADER = N_(
    """\
Kubeflow TFJob: {summary}
Made by dtfkit:
  {command}
Needs the Kubeflow Training Operator v1 (TFJob kubeflow.org/v1, e.g. v1.9.4) in the cluster. Apply, watch, delete:
  kubectl apply -f job.yaml        (or pipe this output to: kubectl apply -f -)
  kubectl -n {namespace} get tfjob {name}
  kubectl -n {namespace} logs -f {name}-{first}-0
  kubectl -n {namespace} delete -f job.yaml
Checked offline against the TFJob schema of kubeflow/trainer v1.9.4 (unknown fields rejected) and the rules of
its admission webhook (pkg/webhooks/tensorflow/tfjob_webhook.go).
Service meshes: every pod is annotated sidecar.istio.io/inject: "false". An injected proxy sidecar keeps running
after the tensorflow container exits, so its pod, and the job, never complete; and the proxy's mTLS and
redirection get in the way of TensorFlow's direct gRPC connections between the pods. Another mesh needs its own
opt-out annotation (Linkerd: linkerd.io/inject: disabled).
Security: each TensorFlow server (port {port}) takes unauthenticated gRPC on every interface of its pod. Allow
only this job's pods to reach it with a NetworkPolicy (dtfkit's docs/kubeflow.md has one).
"""
)

# Above tfReplicaSpecs (indented as the spec's keys): why the manifest has no successPolicy.
SUCCESS_NOTE_CHIEF = N_(
    "no successPolicy: with a Chief the operator ends the job when the chief succeeds, whatever successPolicy says"
)
SUCCESS_NOTE_WORKER0 = N_(
    "no successPolicy: the job succeeds when worker 0, the chief, does (the operator's default);\n"
    "cleanPodPolicy then deletes the ps and any worker still running. AllWorkers would wait for\n"
    "every worker, and one that opens its session after worker 0 has exited may wait for it for ever."
)
NO_DEVICE_FILTERS = N_(
    """\
No device_filters (none in the script, or its arguments turn them off): a worker's session then needs every
task of the cluster, so a worker that opens its session after {chief} has exited waits for it for ever (TensorFlow logs
"CreateSession still waiting for response from worker: ..."). The job still ends when {chief} does, and
cleanPodPolicy deletes the waiting worker. To let every worker finish by itself, give its session
  tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{{task_index}}"])
"""
)

# Shown after the first line that reads exactly like the key (YAML comments, for the reader).
INLINE_NOTES = {
    "cleanPodPolicy: Running": N_(
        "delete pods still running (the ps) when the job ends (kubeflow/trainer#774, #657)"
    ),
    "restartPolicy: ExitCode": N_(
        "recreate after a kill (exit 128+); fail the job on a script error (1-127)"
    ),
    "sidecar.istio.io/inject: 'false'": N_("no service-mesh sidecar (see the note at the top)"),
    f"name: {PORT_NAME}": N_("the operator reads the TF_CONFIG port from this name"),
}


def _counts(ps: int, workers: int, chief: int, evaluator: int) -> dict[str, int]:
    counts = {"chief": chief, "ps": ps, "worker": workers, "evaluator": evaluator}
    for role, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, int):
            raise DtfkitError(
                _("the number of {role} replicas must be a whole number, not {count!r}").format(
                    role=role, count=n
                )
            )
        if n < 0:
            raise DtfkitError(
                _(
                    "the number of {role} replicas cannot be negative (got {count}); use 0 to leave them out"
                ).format(role=role, count=n)
            )
    if workers == 0:
        raise DtfkitError(
            _(
                "a TFJob for a tutorial-style script needs at least one worker (got --workers 0): "
                "the workers train; for example --ps 1 --workers 2"
            )
        )
    if chief > 1:
        raise DtfkitError(
            _("a TFJob has at most one chief (got --chief {chief}): use --chief 1 or leave it out").format(
                chief=chief
            )
        )
    if evaluator > 1:
        raise DtfkitError(
            _("dtfkit exports at most one evaluator (got --evaluator {evaluator}): use --evaluator 1").format(
                evaluator=evaluator
            )
        )
    return counts


def _job_name(name: str | None, script: Path, counts: dict[str, int]) -> str:
    # The operator names a service per replica "<job>-<type>-<index>": that too must be a DNS-1035 label.
    longest = max(len(f"-{role}-{n - 1}") for role, n in counts.items() if n > 0)
    limit = LABEL_MAX - longest
    if name is None:
        return to_dns1035(script.stem, limit)
    why = dns1035_problems(name, limit)
    if why:
        raise DtfkitError(
            _(
                "--name {name!r} cannot name a TFJob: it {reasons}. Kubernetes needs a DNS-1035 label "
                "(lowercase letters, digits and '-', starting with a letter, at most {limit} characters here so "
                "that the operator's per-replica service names fit in 63); for example --name {suggestion}"
            ).format(name=name, reasons=joined(why), limit=limit, suggestion=to_dns1035(name, limit))
        )
    return name


def _quantity(flag: str, value: str) -> str:
    if not isinstance(value, str) or not _QUANTITY.match(value):
        raise DtfkitError(
            _(
                "{flag} {value!r} is not a Kubernetes quantity: use for example --cpu 500m or --cpu 2, --memory 2Gi"
            ).format(flag=flag, value=value)
        )
    return value


def _read_script(script: Path) -> str:
    if not script.is_file():
        raise DtfkitError(
            _(
                "the script {script} does not exist (or is not a file): give the path of the Python script to "
                "run, relative to this folder or absolute"
            ).format(script=script)
        )
    why = configmap_key_problems(script.name)
    if why or script.name == ENTRY_KEY:
        reason = joined(why) or _("is the entry point's own name {entry}").format(entry=ENTRY_KEY)
        raise DtfkitError(
            _(
                "the script's file name {name!r} cannot be a ConfigMap key: it {reason}; "
                "rename the file (letters, digits, '-', '_', '.')"
            ).format(name=script.name, reason=reason)
        )
    try:
        return script.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DtfkitError(
            _("the script {script} is not UTF-8 text; a ConfigMap holds text").format(script=script)
        ) from None


def tfjob_documents(
    script: str | os.PathLike,
    *,
    image: str,
    ps: int = 1,
    workers: int = 2,
    chief: int = 0,
    evaluator: int = 0,
    args: Sequence[str] = (),
    name: str | None = None,
    namespace: str = "default",
    cpu: str = "1",
    memory: str = "2Gi",
    gpus_per_worker: int = 0,
) -> list[dict]:
    """The ConfigMap and the TFJob (as dicts) that ``export_tfjob`` prints, not yet checked.

    Example::

        >>> cm, job = tfjob_documents("train.py", image="python:3.11")  # doctest: +SKIP
        >>> sorted(job["spec"]["tfReplicaSpecs"])  # doctest: +SKIP
        ['PS', 'Worker']
    """
    if not image or not isinstance(image, str):
        raise DtfkitError(
            _(
                "no container image given: use --image with an image that has Python and TensorFlow "
                "(and whatever the script imports), e.g. --image tensorflow/tensorflow:2.21.0"
            )
        )
    counts = _counts(ps, workers, chief, evaluator)
    path = Path(script)
    source = _read_script(path)
    job = _job_name(name, path, counts)
    why = dns1123_label_problems(namespace)
    if why:
        raise DtfkitError(
            _(
                "--namespace {namespace!r} is not a namespace name: it {reasons}; e.g. --namespace default"
            ).format(namespace=namespace, reasons=joined(why))
        )
    if isinstance(gpus_per_worker, bool) or not isinstance(gpus_per_worker, int) or gpus_per_worker < 0:
        raise DtfkitError(
            _("--gpus-per-worker must be a whole number >= 0, not {gpus!r}").format(gpus=gpus_per_worker)
        )
    requests = {"cpu": _quantity("--cpu", cpu), "memory": _quantity("--memory", memory)}
    entry_source = Path(tfjob_entry.__file__).read_text(encoding="utf-8")
    files = {ENTRY_KEY: entry_source, path.name: source}
    size = sum(len(v.encode("utf-8")) for v in files.values())
    if size > CONFIGMAP_MAX_BYTES:
        raise DtfkitError(
            _(
                "the script and the entry point are {size} bytes, more than a ConfigMap holds "
                "({limit}): put the script in the image instead"
            ).format(size=size, limit=CONFIGMAP_MAX_BYTES)
        )
    labels = {"app.kubernetes.io/created-by": "dtfkit", "app.kubernetes.io/name": job}
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{job}-files", "namespace": namespace, "labels": labels},
        "data": files,
    }
    command = ["python", f"{MOUNT_PATH}/{ENTRY_KEY}", f"{MOUNT_PATH}/{path.name}", "--", *map(str, args)]
    replicas = {}
    for rtype, role in REPLICA_ORDER:
        if counts[role] == 0:
            continue
        resources: dict = {"requests": dict(requests)}
        if gpus_per_worker and role in ("chief", "worker"):
            resources["limits"] = {"nvidia.com/gpu": gpus_per_worker}
        container = {
            "name": "tensorflow",
            "image": image,
            "command": list(command),
            "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
            "ports": [{"name": PORT_NAME, "containerPort": PORT}],
            "resources": resources,
            "volumeMounts": [{"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True}],
        }
        replicas[rtype] = {
            "replicas": counts[role],
            "restartPolicy": "ExitCode",
            "template": {
                # The labels let a NetworkPolicy select this job's pods (docs/kubeflow.md).
                "metadata": {"labels": dict(labels), "annotations": {"sidecar.istio.io/inject": "false"}},
                "spec": {
                    "containers": [container],
                    "volumes": [{"name": VOLUME, "configMap": {"name": f"{job}-files"}}],
                },
            },
        }
    # No successPolicy: the operator's default ends the job when its chief succeeds: the Chief, or
    # without one worker 0 (IsMasterRole, UpdateJobStatus in tfjob_controller.go), the task a
    # tutorial script makes its chief (is_chief=(task_index == 0)). "AllWorkers" would wait for
    # every worker, and a non-chief without device_filters that opens its session after the chief
    # has exited waits for the chief's server for ever (CreateSession in TensorFlow's master.cc).
    spec: dict = {"runPolicy": {"cleanPodPolicy": "Running"}, "tfReplicaSpecs": replicas}
    tfjob = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": job, "namespace": namespace, "labels": labels},
        "spec": spec,
    }
    return [configmap, tfjob]


def _sets_device_filters(source: str, args: Sequence[str]) -> bool:
    """Whether the script (as far as its text and arguments show) restricts its sessions' devices.

    A hint for the reader only, never a guarantee: the word in the source, and not turned off by an
    argument such as the example's ``--device_filters=False``.
    """
    turned_off = any(
        re.fullmatch(r"--(nodevice_filters|device_filters=(false|f|0|no))", str(a), re.I) for a in args
    )
    return "device_filters" in source and not turned_off


def _commented(text: str, indent: str = "") -> str:
    """``text`` as YAML comment lines, each ``indent`` + ``# `` + the line, ending with a newline.

    Example::

        >>> _commented("a\\n  b", indent="  ")
        '  # a\\n  #   b\\n'
    """
    return "".join(f"{indent}#{' ' + line if line else ''}\n" for line in text.splitlines())


def _dump(docs: list[dict]) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value):
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    body = "---\n".join(
        yaml.dump(d, Dumper=Dumper, sort_keys=False, width=120, allow_unicode=True) for d in docs
    )
    lines, seen = [], set()
    for line in body.splitlines():
        key = line.strip().removeprefix("- ")
        if key in INLINE_NOTES and key not in seen:
            seen.add(key)
            line = f"{line}  # {' '.join(_(INLINE_NOTES[key]).splitlines())}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def export_tfjob(
    script: str | os.PathLike,
    *,
    image: str,
    ps: int = 1,
    workers: int = 2,
    chief: int = 0,
    evaluator: int = 0,
    args: Sequence[str] = (),
    name: str | None = None,
    namespace: str = "default",
    cpu: str = "1",
    memory: str = "2Gi",
    gpus_per_worker: int = 0,
) -> str:
    """A multi-document YAML manifest (ConfigMap + TFJob) that ``kubectl apply -f -`` takes as it is.

    ``name`` defaults to the script's file name made a DNS-1035 label; ``cpu``/``memory`` are
    every container's resource requests; ``gpus_per_worker`` sets an ``nvidia.com/gpu`` limit on
    chief and workers. Raises DtfkitError naming the cause and the next step on bad input, and
    ManifestInvalid if the result would not pass the schema, webhook and dtfkit-rule checks.

    Example::

        >>> text = export_tfjob("dtfkit/examples/distributed_mnist.py", image="my/tf:2.21", ps=1, workers=2)
        >>> text.splitlines()[0]
        '# Kubeflow TFJob: distributed_mnist.py as 1 ps + 2 workers, image my/tf:2.21'
    """
    docs = tfjob_documents(
        script,
        image=image,
        ps=ps,
        workers=workers,
        chief=chief,
        evaluator=evaluator,
        args=args,
        name=name,
        namespace=namespace,
        cpu=cpu,
        memory=memory,
        gpus_per_worker=gpus_per_worker,
    )
    configmap, tfjob = docs
    check_manifest(docs)
    counts = _counts(ps, workers, chief, evaluator)
    parts = " + ".join(f"{n} {r}{'s' if n > 1 and r == 'worker' else ''}" for r, n in counts.items() if n)
    command = ["python", "-m", "dtfkit", "export", "tfjob", "--ps", str(ps), "--workers", str(workers)]
    command += ["--chief", str(chief)] if chief else []
    command += ["--evaluator", str(evaluator)] if evaluator else []
    command += ["--image", image, "--name", tfjob["metadata"]["name"]]
    command += ["--namespace", namespace] if namespace != "default" else []
    command += ["--cpu", cpu] if cpu != "1" else []
    command += ["--memory", memory] if memory != "2Gi" else []
    command += ["--gpus-per-worker", str(gpus_per_worker)] if gpus_per_worker else []
    command += [str(script), "--", *map(str, args)] if args else [str(script)]
    header = _commented(_(HEADER)).format(
        summary=_("{script} as {replicas}, image {image}").format(
            script=Path(script).name, replicas=parts, image=image
        ),
        command=shlex.join(command),
        namespace=namespace,
        name=tfjob["metadata"]["name"],
        first="chief" if chief else "worker",
        port=PORT,
    )
    if re.search(r"^\s*(import|from)\s+dtfkit\b", configmap["data"][Path(script).name], re.M):
        header += _commented(
            _("The script imports dtfkit: the image must have it installed (pip install dtfkit).")
        )
    if not _sets_device_filters(configmap["data"][Path(script).name], args):
        header += _commented(_(NO_DEVICE_FILTERS)).format(chief=_("the chief") if chief else _("worker 0"))
    body = _dump(docs)
    note = _commented(_(SUCCESS_NOTE_CHIEF) if chief else _(SUCCESS_NOTE_WORKER0), indent="  ")
    body = body.replace("\n  tfReplicaSpecs:\n", "\n" + note + "  tfReplicaSpecs:\n", 1)
    text = header + body
    problems = manifest_problems(text)  # what kubectl will read: the text, not the dicts
    if problems:
        raise ManifestInvalid(problems, _("the exported manifest"))
    return text
