"""Between-graph replication, up close: the pieces chapter 2 runs in the tasks.

Every function whose docstring says "run in a task" imports TensorFlow itself and
is meant for ``cluster.run(...)``; the rest is plain Python the notebook may call.

``GreedyByBytes`` is TF1's ``tf.contrib.training.GreedyLoadBalancingStrategy``, which went
with ``tf.contrib`` (TF 2.21 keeps only ``device_setter._RoundRobinStrategy``);
``place_variables`` compares the two. ``tutorial_worker`` is the worker of Ye Hu's tutorial
as written (no ``wait_for_chief_init``), to reproduce the non-chief hang and its fix with
``device_filters``. ``train_in_graph`` is in-graph replication, ``sparse_vs_dense_read`` an
embedding table read by row lookup or whole. ``interleavings`` and ``overlap_seconds`` come
from ``dtfkit.recipes.analysis``, where the lab and the demo count the same way.

Example::

    from dtfkit.recipes import between_graph as bg
    with dtfkit.LocalCluster(ps=2, workers=2) as cluster:
        cluster.run(bg.place_variables, on="worker:0")

``task_side`` runs in the tasks, ``kernel_side`` in the notebook kernel; every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
