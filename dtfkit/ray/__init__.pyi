# What dtfkit.ray hands out: type checkers and editors read it here; lazy_loader.attach_stub imports each
# name from its module on first use.

from .cluster import RayCluster as RayCluster
from .launcher import RayLauncher as RayLauncher
from .simulated import SimulatedRayCluster as SimulatedRayCluster
