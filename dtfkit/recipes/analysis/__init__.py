"""What a run's metric rows and step records say: interleaving, staleness, shares, pace.

Pure Python (no TensorFlow, no NumPy): the chapters (``between_graph``, ``sync``), the
lab (``dtfkit.lab``) and ``python -m dtfkit demo`` all count with these functions, so
"interleaving" or "staleness" means one thing everywhere.

A metric row is what ``cluster.metrics.rows()`` returns: a dict with ``task`` and
``time`` (when it was reported), and ``step`` (the global step) for a training step.

Example::

    >>> rows = [{"task": "worker:0", "time": 0.0, "step": 1}, {"task": "worker:1", "time": 0.1, "step": 2},
    ...         {"task": "worker:0", "time": 0.2, "step": 3}]
    >>> interleavings(rows), interleaving_fraction(rows)
    (2, 1.0)
    >>> staleness(read=3, applied=6)
    2
    >>> shares({"worker:0": 3, "worker:1": 1})
    {'worker:0': 0.75, 'worker:1': 0.25}

Its code is in ``kernel_side`` (the notebook kernel); every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
