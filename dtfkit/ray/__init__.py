"""dtfkit's tasks on a Ray cluster: ``RayCluster``, ``RayLauncher``, ``SimulatedRayCluster``.

Importing this package does not import Ray; its classes do, when used (``pip install
"dtfkit[ray]"``). See ``docs/ray.md``.

Example::

    >>> from dtfkit.ray import RayCluster                   # doctest: +SKIP
    >>> cluster = RayCluster(ps=1, workers=2)               # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dtfkit.ray.cluster import RayCluster
    from dtfkit.ray.launcher import RayLauncher
    from dtfkit.ray.simulated import SimulatedRayCluster

__all__ = ["RayCluster", "RayLauncher", "SimulatedRayCluster"]

_LAZY = {
    "RayCluster": "dtfkit.ray.cluster",
    "RayLauncher": "dtfkit.ray.launcher",
    "SimulatedRayCluster": "dtfkit.ray.simulated",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dtfkit.ray' has no attribute {name!r}")
