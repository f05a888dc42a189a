"""Between-graph replicated training, TF1 style (graph mode, ``tf.compat.v1``), run in a task.

The recipe of Ye Hu's tutorial *分布式TensorFlow入门教程* (2018), with its pitfalls defused by default: each worker's
session only needs the ps tasks and itself (``device_filters``), the
``MonitoredTrainingSession`` grace period is short, and every step is reported
with ``dtfkit.report`` so the notebook can plot it.

Its parts are public and small (``classifier``, ``on_ps``, ``run_scope``,
``training_session``, ``peer_barrier``/``wait_for_peers``, ...): chapter 3's ``sync``
recipe, the course checks and the lab's recorded runs (``dtfkit.lab.task_side``) are built
from them, so the recipe itself keeps only what a chapter teaches.

Example::

    from dtfkit.recipes import tf1
    with dtfkit.LocalCluster(ps=2, workers=2) as cluster:
        results = cluster.run(tf1.train_between_graph, kwargs={"sync": True, "steps": 200})

Its code is in ``task_side`` (inside the tasks); every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
