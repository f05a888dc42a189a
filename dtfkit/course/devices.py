"""Give every learner at least two replicas, with or without GPUs.

``MirroredStrategy`` needs several devices to show anything interesting. A laptop has
one CPU and maybe no GPU, so :func:`ensure_replicas` asks TensorFlow for *logical*
devices before it initializes its runtime:

- at least ``n`` physical GPUs: every GPU is used as it is;
- exactly one GPU: it is split into ``n`` logical GPUs of ``gpu_memory_mb`` each;
- no GPU: the CPU is split into ``n`` logical CPUs.

TensorFlow fixes its devices the first time anything touches them (creating a tensor,
listing logical devices, building a strategy), so call it first: in the first code
cell of a notebook, or as ``setup=`` of a :class:`dtfkit.LocalCluster` so that each
task runs it before its server starts::

    >>> import dtfkit.course.devices                            # does not import TensorFlow
    >>> devices = dtfkit.course.devices.ensure_replicas(2)      # e.g. ['/device:CPU:0', '/device:CPU:1']
    >>> import tensorflow as tf
    >>> strategy = tf.distribute.MirroredStrategy(devices)
    >>> strategy.num_replicas_in_sync
    2

In a cluster::

    cluster = dtfkit.LocalCluster(workers=1, setup=functools.partial(dtfkit.course.devices.ensure_replicas, 2))

The decision (:func:`plan_replicas`) is a pure function of the physical device
counts, so it is tested without a GPU; :func:`ensure_replicas` applies it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dtfkit.errors import DtfkitError

__all__ = ["ReplicaPlan", "plan_replicas", "ensure_replicas"]


@dataclass(frozen=True)
class ReplicaPlan:
    """What :func:`ensure_replicas` will do.

    Attributes:
        kind: ``"gpus"`` (use the physical GPUs as they are), ``"split_gpu"`` (split
            GPU 0 into ``count`` logical GPUs) or ``"split_cpu"`` (split the CPU into
            ``count`` logical CPUs).
        device_type: ``"GPU"`` or ``"CPU"``, the type of the returned devices.
        count: how many devices the strategy gets.
        memory_limit_mb: the memory limit of each logical GPU (``"split_gpu"`` only).
    """

    kind: str
    device_type: str
    count: int
    memory_limit_mb: int | None = None

    def describe(self) -> str:
        """One sentence for a student, e.g. ``"2 logical CPUs (the CPU split in 2)"``."""
        if self.kind == "gpus":
            return f"{self.count} physical GPUs"
        if self.kind == "split_gpu":
            return f"{self.count} logical GPUs of {self.memory_limit_mb} MB (GPU 0 split in {self.count})"
        return f"{self.count} logical CPUs (the CPU split in {self.count})"


def plan_replicas(n: int, n_gpus: int, *, gpu_memory_mb: int = 1024) -> ReplicaPlan:
    """Decide how to get ``n`` replicas from ``n_gpus`` physical GPUs (pure function).

    >>> plan_replicas(2, n_gpus=4).kind, plan_replicas(2, n_gpus=4).count
    ('gpus', 4)
    >>> plan_replicas(2, n_gpus=1).kind
    'split_gpu'
    >>> plan_replicas(2, n_gpus=0).describe()
    '2 logical CPUs (the CPU split in 2)'
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise DtfkitError(f"ensure_replicas: n must be a positive integer, got {n!r}")
    if gpu_memory_mb < 1:
        raise DtfkitError(f"ensure_replicas: gpu_memory_mb must be positive, got {gpu_memory_mb!r}")
    if n_gpus >= n:
        return ReplicaPlan("gpus", "GPU", n_gpus)
    if n_gpus >= 1:
        return ReplicaPlan("split_gpu", "GPU", n, gpu_memory_mb)
    return ReplicaPlan("split_cpu", "CPU", n)


def _wanted_config(tf, plan: ReplicaPlan) -> list:
    if plan.kind == "split_gpu":
        return [
            tf.config.LogicalDeviceConfiguration(memory_limit=plan.memory_limit_mb) for _ in range(plan.count)
        ]
    return [tf.config.LogicalDeviceConfiguration() for _ in range(plan.count)]


def _same_config(current, wanted) -> bool:
    if current is None or len(current) != len(wanted):
        return False
    return all(c.memory_limit == w.memory_limit for c, w in zip(current, wanted, strict=True))


def _too_late(plan: ReplicaPlan, detail: str) -> DtfkitError:
    return DtfkitError(
        f"ensure_replicas could not set up {plan.describe()}: TensorFlow has already initialized its "
        f"devices in this process ({detail}). Logical devices can only be configured before anything "
        "touches TensorFlow's devices (a tensor, a model, a strategy, tf.config.list_logical_devices). "
        "Restart the kernel (in a notebook) and call dtfkit.course.devices.ensure_replicas() first, "
        "before any other TensorFlow code; in a cluster pass it as setup=."
    )


def ensure_replicas(n: int = 2, *, gpu_memory_mb: int = 1024) -> list[str]:
    """Make sure TensorFlow offers at least ``n`` devices for replicas; return their names.

    Args:
        n: how many replicas you want (at least 1).
        gpu_memory_mb: memory limit of each logical GPU when one GPU is split.

    Returns:
        The logical device names to give ``tf.distribute.MirroredStrategy(devices)``,
        e.g. ``['/device:CPU:0', '/device:CPU:1']`` or ``['/device:GPU:0', '/device:GPU:1']``.

    Raises:
        DtfkitError: TensorFlow already initialized its devices with another
            configuration (restart the kernel and call this first).

    Calling it again with the same ``n`` returns the same devices. It imports
    TensorFlow; importing :mod:`dtfkit.course.devices` does not.

    Example::

        devices = ensure_replicas(2)
        strategy = tf.distribute.MirroredStrategy(devices)
    """
    import tensorflow as tf

    n_gpus = len(tf.config.list_physical_devices("GPU"))
    plan = plan_replicas(n, n_gpus, gpu_memory_mb=gpu_memory_mb)
    if plan.kind != "gpus":
        physical = tf.config.list_physical_devices(plan.device_type)[0]
        wanted = _wanted_config(tf, plan)
        current = tf.config.get_logical_device_configuration(physical)
        if not _same_config(current, wanted):
            try:
                tf.config.set_logical_device_configuration(physical, wanted)
            except RuntimeError as exc:  # "Virtual devices cannot be modified after being initialized"
                raise _too_late(plan, f"RuntimeError: {exc}") from None
    names = [d.name for d in tf.config.list_logical_devices(plan.device_type)]
    if len(names) < min(n, plan.count):
        raise _too_late(plan, f"it shows {len(names)} {plan.device_type} device(s), not {plan.count}")
    return names if plan.kind == "gpus" else names[: plan.count]
