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
"""

import lazy_loader

# Loaded on first use: importing ``tfjob_entry`` from here pulls in no YAML or jsonschema.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
