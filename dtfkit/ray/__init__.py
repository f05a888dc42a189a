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

from dtfkit.lazy import lazy_attributes

_LAZY = {
    "RayCluster": "dtfkit.ray.cluster",
    "RayLauncher": "dtfkit.ray.launcher",
    "SimulatedRayCluster": "dtfkit.ray.simulated",
}


__getattr__ = lazy_attributes(__name__, _LAZY)
