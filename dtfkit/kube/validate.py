"""Check a TFJob manifest offline, as the Kubernetes API server and the Kubeflow operator would.

Three layers, each problem reported with its path (``spec.tfReplicaSpecs.Worker.template.spec.containers[0].image:
required``):

1. the OpenAPI v3 schema of the ``TFJob`` CRD of kubeflow/trainer v1.9.4
   (``manifests/base/crds/kubeflow.org_tfjobs.yaml``, vendored in ``dtfkit/kube/crd/``), made strict: a field the
   schema does not name is an error (the API server would silently drop it, so a typo such as ``cleanpodPolicy``
   would take no effect);
2. the operator's admission webhook (``pkg/webhooks/tensorflow/tfjob_webhook.go`` at the same tag): the name is a
   DNS-1035 label, every replica has containers, each with an image, one of them named ``tensorflow``, and at most
   one Chief/Master replica type; ``runPolicy.managedBy`` is one of the two known controllers;
3. dtfkit's own rules, each problem marked ``dtfkit rule:`` (``is_dtfkit_rule``): what a real v1.9.4 accepts
   but what would not run as written, e.g. a ``restartPolicy`` outside the operator's named values (the CRD
   types the policies as plain strings with no enum) or a service name (``<job>-<type>-<index>``) over 63.

ConfigMaps in the same manifest are checked as the API server checks them.

Example::

    >>> problems = tfjob_problems({"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
    ...                            "metadata": {"name": "Bad_Name"}, "spec": {"tfReplicaSpecs": {}}})
    >>> print(problems[-2])
    metadata.name: 'Bad_Name' is not a DNS-1035 label (the admission webhook): contains uppercase letters, contains '_' (only lowercase letters, digits and '-' are allowed)
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from dtfkit.errors import DtfkitError
from dtfkit.i18n import _, joined
from dtfkit.kube.names import (
    configmap_key_problems,
    dns1035_problems,
    dns1123_label_problems,
    dns1123_subdomain_problems,
)

CRD_PATH = Path(__file__).with_name("crd") / "kubeflow.org_tfjobs.yaml"
CRD_SOURCE = "kubeflow/trainer v1.9.4, manifests/base/crds/kubeflow.org_tfjobs.yaml"
REPLICA_TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("None", "Running", "All")
SUCCESS_POLICIES = ("", "AllWorkers")
MANAGED_BY = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")
DTFKIT_RULE = "dtfkit rule: "
CONFIGMAP_MAX_BYTES = 1024 * 1024
CONFIGMAP_FIELDS = ("apiVersion", "kind", "metadata", "data", "binaryData", "immutable")


def is_dtfkit_rule(problem: str) -> bool:
    """Whether a problem is one of dtfkit's own rules, which a real operator would accept.

    Example::

        >>> is_dtfkit_rule("spec.successPolicy: dtfkit rule: 'all' is not one of '', AllWorkers")
        True
    """
    return DTFKIT_RULE in problem


def _dtfkit_rule(path: str, message: str) -> str:
    return f"{path}: {DTFKIT_RULE}{message}"


class ManifestInvalid(DtfkitError):
    """A manifest with problems; ``problems`` lists each one with its path.

    Problems marked ``dtfkit rule:`` are dtfkit's own: the API server and the operator's webhook accept
    them; the others ``kubectl apply`` would refuse.
    """

    def __init__(self, problems: list[str], what: str | None = None):
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        ours = sum(is_dtfkit_rule(p) for p in self.problems)
        theirs = len(self.problems) - ours
        super().__init__(
            _(
                "{what} is not valid: {theirs} problem(s) that kubectl apply would refuse (the TFJob schema, "
                "the API server, the operator's admission webhook), {ours} of dtfkit's own rules (marked "
                "{marker}, which a real operator accepts but which would not run as written):"
            ).format(
                what=_("the manifest") if what is None else what,
                theirs=theirs,
                ours=ours,
                marker=repr(DTFKIT_RULE.strip()),
            )
            + f"\n{lines}"
        )


def _need(module: str):
    try:
        return __import__(module)
    except ImportError:
        raise DtfkitError(
            _(
                "checking a TFJob needs the {module} package, which is not installed: "
                "pip install pyyaml jsonschema"
            ).format(module=module)
        ) from None


@functools.lru_cache(maxsize=1)
def tfjob_schema() -> dict[str, Any]:
    """The strict JSON schema of a ``TFJob`` (kubeflow.org/v1), from the vendored CRD.

    Every object schema that lists ``properties`` and allows nothing else on its own gets
    ``additionalProperties: false``, so unknown fields are errors.

    Example::

        >>> tfjob_schema()["additionalProperties"]
        False
    """
    yaml = _need("yaml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(CRD_PATH.read_text(encoding="utf-8"), Loader=loader)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
    _close(schema)
    return schema


def _close(node: Any) -> None:
    if isinstance(node, dict):
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for value in node.values():
            _close(value)
    elif isinstance(node, list):
        for value in node:
            _close(value)


def path_text(parts: Any) -> str:
    """``['spec', 'containers', 0, 'image']`` -> ``'spec.containers[0].image'``.

    Example::

        >>> path_text(["spec", "tfReplicaSpecs", "Worker", "template", "spec", "containers", 0, "image"])
        'spec.tfReplicaSpecs.Worker.template.spec.containers[0].image'
    """
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(the document)"


def _object(value: Any) -> dict[str, Any]:
    """``value`` where it is a JSON object, else ``{}`` (a value of another type is its own rule's problem)."""
    return value if isinstance(value, dict) else {}


def _join(base: str, key: str) -> str:
    return key if base == "(the document)" else f"{base}.{key}"


def _schema_problems(job: dict) -> list[str]:
    jsonschema = _need("jsonschema")
    validator = jsonschema.Draft7Validator(tfjob_schema())
    problems = []
    for error in sorted(validator.iter_errors(job), key=lambda e: [str(p) for p in e.absolute_path]):
        where = path_text(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = set(error.schema.get("properties", {}))
            for key in sorted(k for k in error.instance if k not in known):
                problems.append(
                    f"{_join(where, key)}: "
                    + _("unknown field (not in the TFJob schema, {source})").format(source=CRD_SOURCE)
                )
        elif error.validator == "required" and isinstance(error.instance, dict):
            for key in error.validator_value:
                if key not in error.instance:
                    problems.append(f"{_join(where, key)}: " + _("required"))
        else:
            problems.append(f"{where}: {error.message}")
    return problems


def _replica_problems(rtype: str, spec: Any) -> list[str]:
    base = f"spec.tfReplicaSpecs.{rtype}"
    if not isinstance(spec, dict):
        return [f"{base}: " + _("must be an object with 'replicas' and 'template'")]
    problems = []
    if rtype not in REPLICA_TYPES:
        problems.append(
            _dtfkit_rule(
                base,
                _(
                    "unknown replica type {replica_type!r}: use one of {types} (the operator takes any "
                    "key: its defaulting renames a known type in another case, and gives any other type pods "
                    "that count for neither the job's success nor isDistributed)"
                ).format(replica_type=rtype, types=", ".join(REPLICA_TYPES)),
            )
        )
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in RESTART_POLICIES:
        problems.append(
            _dtfkit_rule(
                f"{base}.restartPolicy",
                _(
                    "{policy!r} is not one of {policies} (the CRD has no enum and the webhook "
                    "does not check it; the operator copies it to the pods, which the API server then refuses)"
                ).format(policy=policy, policies=", ".join(RESTART_POLICIES)),
            )
        )
    replicas = spec.get("replicas", 1)
    if rtype in ("Chief", "Master") and isinstance(replicas, int) and replicas > 1:
        problems.append(
            _dtfkit_rule(
                f"{base}.replicas",
                _("a TensorFlow cluster has one {role}, not {replicas}").format(
                    role=rtype.lower(), replicas=replicas
                ),
            )
        )
    containers_path = f"{base}.template.spec.containers"
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers:
        return problems + [f"{containers_path}: " + _("required (the admission webhook: must be specified)")]
    for i, container in enumerate(containers):
        if isinstance(container, dict) and not container.get("image"):
            problems.append(
                f"{containers_path}[{i}].image: "
                + _("required (the admission webhook: every container needs an image)")
            )
    if not any(isinstance(c, dict) and c.get("name") == "tensorflow" for c in containers):
        problems.append(
            f"{containers_path}: "
            + _(
                "must have a container named 'tensorflow' (the admission webhook; "
                "the operator gives TF_CONFIG and the port to that container only)"
            )
        )
    return problems


def _webhook_problems(job: dict) -> list[str]:
    """The webhook's rules (pkg/webhooks/tensorflow/tfjob_webhook.go ``validateTFJob``), then dtfkit's own."""
    problems = []
    metadata = _object(job.get("metadata"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        problems.append("metadata.name: " + _("required"))
        name = None
    else:
        why = dns1035_problems(name)
        if why:
            problems.append(
                "metadata.name: "
                + _("{name!r} is not a DNS-1035 label (the admission webhook): {reasons}").format(
                    name=name, reasons=joined(why)
                )
            )
    namespace = metadata.get("namespace")
    if namespace is not None:
        why = dns1123_label_problems(namespace) if isinstance(namespace, str) else [_("is not text")]
        if why:
            problems.append(
                "metadata.namespace: "
                + _("{namespace!r} is not a namespace name (the API server): {reasons}").format(
                    namespace=namespace, reasons=joined(why)
                )
            )
    spec = _object(job.get("spec"))
    run_policy = _object(spec.get("runPolicy"))
    managed_by = run_policy.get("managedBy")
    if managed_by is not None and managed_by not in MANAGED_BY:
        problems.append(
            "spec.runPolicy.managedBy: "
            + _("{value!r} is not one of {allowed} (the admission webhook)").format(
                value=managed_by, allowed=", ".join(MANAGED_BY)
            )
        )
    return problems + _policy_problems(spec, run_policy) + _replica_set_problems(spec, name)


def _policy_problems(spec: dict, run_policy: dict) -> list[str]:
    """dtfkit's rules on the two job policies, which the CRD types as plain strings and nobody checks."""
    rules = (
        (
            "spec.runPolicy.cleanPodPolicy",
            run_policy.get("cleanPodPolicy"),
            CLEAN_POD_POLICIES,
            ", ".join(CLEAN_POD_POLICIES),
            _(
                "the operator accepts any text: the CRD has no enum and the webhook does not check it; it then "
                "deletes every pod, as with All"
            ),
        ),
        (
            "spec.successPolicy",
            spec.get("successPolicy"),
            SUCCESS_POLICIES,
            "'', AllWorkers",
            _("the operator accepts any text and treats anything but AllWorkers as ''"),
        ),
    )
    return [
        _dtfkit_rule(
            field,
            _("{value!r} is not one of {allowed} ({why})").format(value=value, allowed=allowed_text, why=why),
        )
        for field, value, allowed, allowed_text, why in rules
        if value is not None and value not in allowed
    ]


def _replica_set_problems(spec: dict, name: str | None) -> list[str]:
    problems = []
    replicas = spec.get("tfReplicaSpecs")
    if not isinstance(replicas, dict):
        return ["spec.tfReplicaSpecs: " + _("required (the admission webhook: must be required)")]
    if not replicas:
        return [_dtfkit_rule("spec.tfReplicaSpecs", _("no replica types: the job would run nothing"))]
    if sum(t in ("Chief", "Master") for t in replicas) > 1:
        problems.append(
            "spec.tfReplicaSpecs: "
            + _("must not have more than 1 Chief or Master role (the admission webhook)")
        )
    for rtype, rspec in replicas.items():
        problems += _replica_problems(rtype, rspec)
        count = rspec.get("replicas", 1) if isinstance(rspec, dict) else 1
        if name and not dns1035_problems(name) and isinstance(count, int) and count > 0:
            service = f"{name}-{str(rtype).lower()}-{count - 1}"
            if len(service) > 63:
                problems.append(
                    _dtfkit_rule(
                        "metadata.name",
                        _(
                            "the operator's service name {service!r} would be {length} characters long "
                            "(at most 63, or the API server refuses the Service): use a shorter name"
                        ).format(service=service, length=len(service)),
                    )
                )
    return problems


def tfjob_problems(job: dict) -> list[str]:
    """Every problem of a TFJob object (schema, webhook, dtfkit's own rules), each with its path; empty if none.

    Example::

        >>> tfjob_problems({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "a"},
        ...                 "spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [
        ...                     {"name": "tensorflow", "image": "python:3.11"}]}}}}}})
        []
    """
    problems = _kind_problems(job, "kubeflow.org/v1", "TFJob")
    if problems is None:
        return [
            "(the document): " + _("a TFJob must be a mapping, not {type}").format(type=type(job).__name__)
        ]
    return problems + _schema_problems(job) + _webhook_problems(job)


def _kind_problems(document: object, api_version: str, kind: str) -> list[str] | None:
    """The apiVersion and kind of a document, checked; None if it is not a mapping at all."""
    if not isinstance(document, dict):
        return None
    problems = []
    if document.get("apiVersion") != api_version:
        problems.append(
            "apiVersion: "
            + _("{value!r} is not {wanted!r}").format(value=document.get("apiVersion"), wanted=api_version)
        )
    if document.get("kind") != kind:
        problems.append(
            "kind: " + _("{value!r} is not {wanted!r}").format(value=document.get("kind"), wanted=kind)
        )
    return problems


def configmap_problems(cm: dict) -> list[str]:
    """Every problem of a ConfigMap object, each with its path; empty if none.

    Example::

        >>> configmap_problems({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "f"},
        ...                     "data": {"bad key": "x"}})
        ["data.bad key: not a valid key: must be letters, digits, '-', '_' and '.' only"]
    """
    problems = _kind_problems(cm, "v1", "ConfigMap")
    if problems is None:
        return [
            "(the document): " + _("a ConfigMap must be a mapping, not {type}").format(type=type(cm).__name__)
        ]
    for key in cm:
        if key not in CONFIGMAP_FIELDS:
            problems.append(
                f"{key}: "
                + _("unknown field (a ConfigMap has {fields})").format(fields=", ".join(CONFIGMAP_FIELDS))
            )
    metadata = cm.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str):
        problems.append("metadata.name: " + _("required"))
    else:
        why = dns1123_subdomain_problems(name)
        if why:
            problems.append(
                "metadata.name: "
                + _("{name!r} is not a DNS-1123 subdomain: {reasons}").format(name=name, reasons=joined(why))
            )
    data = cm.get("data", {})
    if not isinstance(data, dict):
        return problems + ["data: " + _("must be a mapping of file names to text")]
    size = 0
    for key, value in data.items():
        why = configmap_key_problems(str(key))
        if why:
            problems.append(f"data.{key}: " + _("not a valid key: {reasons}").format(reasons=joined(why)))
        if not isinstance(value, str):
            problems.append(f"data.{key}: " + _("must be text, not {type}").format(type=type(value).__name__))
        else:
            size += len(value.encode("utf-8"))
    if size > CONFIGMAP_MAX_BYTES:
        problems.append(
            "data: "
            + _(
                "{size} bytes, more than a ConfigMap holds ({limit}): put the files in the image instead"
            ).format(size=size, limit=CONFIGMAP_MAX_BYTES)
        )
    return problems


def load_documents(manifest: str | list[dict]) -> list[dict]:
    """The documents of a manifest: YAML text (``---``-separated) or a list of dicts, empty documents dropped.

    Example::

        >>> load_documents([{"a": 1}, None, {"b": 2}])
        [{'a': 1}, {'b': 2}]
    """
    if isinstance(manifest, str):
        yaml = _need("yaml")
        try:
            docs = list(yaml.safe_load_all(manifest))
        except yaml.YAMLError as exc:
            raise ManifestInvalid([f"(YAML): {exc}"]) from None
    else:
        docs = list(manifest)
    return [d for d in docs if d is not None]


def manifest_problems(manifest: str | list[dict]) -> list[str]:
    """Every problem of a manifest's TFJobs and ConfigMaps, each prefixed by its document (``TFJob/name: ...``).

    Also checks that the ConfigMaps a TFJob mounts, when in the manifest, share its namespace.

    Example::

        >>> manifest_problems([{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}])
        ["document 1 (Secret/x): kind 'Secret' is not checked here: only TFJob and ConfigMap"]
    """
    problems = []
    docs = load_documents(manifest)
    maps: dict[str, object] = {}  # ConfigMap name: its namespace
    for n, doc in enumerate(docs, 1):
        kind = doc.get("kind") if isinstance(doc, dict) else None
        meta = _object(doc.get("metadata")) if isinstance(doc, dict) else {}
        label = f"document {n} ({kind}/{meta.get('name')})"
        if kind == "TFJob":
            found = tfjob_problems(doc)
        elif kind == "ConfigMap":
            found = configmap_problems(doc)
            if isinstance(meta.get("name"), str):  # another name is configmap_problems' to report
                maps[meta["name"]] = meta.get("namespace", "default")
        else:
            found = [_("kind {kind!r} is not checked here: only TFJob and ConfigMap").format(kind=kind)]
        problems += [f"{label}: {p}" for p in found]
    if not docs:
        problems.append("(the manifest): " + _("no documents"))
    for n, doc in enumerate(docs, 1):
        if isinstance(doc, dict) and doc.get("kind") == "TFJob":
            problems += [f"document {n} (TFJob): {p}" for p in _mount_problems(doc, maps)]
    return problems


def _mount_problems(job: dict, maps: dict[str, object]) -> list[str]:
    # A part of another type than the schema's is tfjob_problems' to report: it mounts nothing here.
    namespace = _object(job.get("metadata")).get("namespace", "default")
    problems = []
    replicas = _object(_object(job.get("spec")).get("tfReplicaSpecs"))
    for rtype, rspec in replicas.items():
        pod = _object(_object(_object(rspec).get("template")).get("spec"))
        volumes = pod.get("volumes")
        for i, volume in enumerate(volumes if isinstance(volumes, list) else []):
            name = _object(_object(volume).get("configMap")).get("name")
            if isinstance(name, str) and name in maps and maps[name] != namespace:
                problems.append(
                    _dtfkit_rule(
                        f"spec.tfReplicaSpecs.{rtype}.template.spec.volumes[{i}].configMap.name",
                        _(
                            "ConfigMap {name!r} is in namespace {its_namespace!r}, the TFJob in {namespace!r}: "
                            "a pod mounts only its own namespace's"
                        ).format(name=name, its_namespace=maps[name], namespace=namespace),
                    )
                )
    return problems


def check_manifest(manifest: str | list[dict]) -> list[dict]:
    """The manifest's documents, or ManifestInvalid listing every problem.

    Example::

        >>> from dtfkit.kube import export_tfjob
        >>> docs = check_manifest(export_tfjob("train.py", image="python:3.11"))  # doctest: +SKIP
        >>> [d["kind"] for d in docs]  # doctest: +SKIP
        ['ConfigMap', 'TFJob']
    """
    problems = manifest_problems(manifest)
    if problems:
        raise ManifestInvalid(problems)
    return load_documents(manifest)
