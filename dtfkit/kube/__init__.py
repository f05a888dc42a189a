"""Kubeflow TFJob export: run a tutorial-style script on Kubernetes, and try the manifest offline first.

- ``export_tfjob(script, image=..., ps=1, workers=2, ...) -> str``: a ConfigMap + TFJob manifest
  (``python -m dtfkit export tfjob`` prints it);
- ``check_manifest(manifest) -> list[dict]`` / ``manifest_problems(manifest) -> list[str]``: the
  TFJob schema of kubeflow/trainer v1.9.4 (unknown fields rejected) plus its admission webhook's rules,
  then dtfkit's own stricter rules, each problem marked ``dtfkit rule:`` (a real operator accepts those);
- ``simulate(manifest, timeout=...) -> SimulationResult``: every replica's container command run
  locally with the ``TF_CONFIG`` the operator would write (``python -m dtfkit.kube.simulate``).

Example::

    from dtfkit.kube import export_tfjob, simulate
    text = export_tfjob("dtfkit/examples/distributed_mnist.py", image="my/tf:2.21", ps=1, workers=2,
                        args=["--train_steps=100"])
    result = simulate(text, timeout=300)
    print(result.summary())

Attributes are imported on first use, so that importing ``tfjob_entry`` from here does not pull in
YAML or jsonschema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dtfkit.kube.export import export_tfjob, tfjob_documents
    from dtfkit.kube.simulate import ReplicaRun, SimulationResult, simulate
    from dtfkit.kube.validate import ManifestInvalid, check_manifest, manifest_problems

from dtfkit.lazy import lazy_attributes

_LAZY = {
    "export_tfjob": "dtfkit.kube.export",
    "tfjob_documents": "dtfkit.kube.export",
    "check_manifest": "dtfkit.kube.validate",
    "manifest_problems": "dtfkit.kube.validate",
    "ManifestInvalid": "dtfkit.kube.validate",
    "simulate": "dtfkit.kube.simulate",
    "SimulationResult": "dtfkit.kube.simulate",
    "ReplicaRun": "dtfkit.kube.simulate",
}

__all__ = [
    "ManifestInvalid",
    "ReplicaRun",
    "SimulationResult",
    "check_manifest",
    "export_tfjob",
    "manifest_problems",
    "simulate",
    "tfjob_documents",
]


__getattr__ = lazy_attributes(__name__, _LAZY)
