"""dtfkit's tasks on a Ray cluster: ``RayCluster``, ``RayLauncher``, ``SimulatedRayCluster``.

Importing this package does not import Ray; its classes do, when used (``pip install
"dtfkit[ray]"``). See ``docs/ray.md``.

Example::

    >>> from dtfkit.ray import RayCluster                   # doctest: +SKIP
    >>> cluster = RayCluster(ps=1, workers=2)               # doctest: +SKIP
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
