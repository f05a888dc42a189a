"""Between-graph replication, up close: the pieces chapter 2 runs in the tasks.

Every function whose docstring says "run in a task" imports TensorFlow itself and
is meant for ``cluster.run(...)``; the rest is plain Python the notebook may call.

- ``GreedyByBytes``: a ``ps_strategy`` for ``replica_device_setter`` that puts each
  variable on the ps holding the fewest bytes so far. TF1's
  ``tf.contrib.training.GreedyLoadBalancingStrategy`` went with ``tf.contrib``; TF 2.21
  keeps only the round-robin strategy (``device_setter._RoundRobinStrategy``).
- ``place_variables``: where round-robin and greedy put the variables of a model with
  uneven layers, and how many bytes each ps holds.
- ``tutorial_worker``: the worker of Ye Hu's tutorial, as written (no ``wait_for_chief_init``),
  to reproduce the non-chief hang and its fix with ``device_filters``.
- ``train_in_graph``: in-graph replication, one client driving a tower on every worker.
- ``sparse_vs_dense_read``: an embedding table on a ps, read by row lookup or whole,
  with the bytes each moves measured from the run's trace.
- ``interleavings``, ``overlap_seconds``: what the metric rows say about two workers'
  steps (from ``dtfkit.recipes.analysis``, where the lab and the demo count the same way).

Example::

    from dtfkit.recipes import between_graph as bg
    with dtfkit.LocalCluster(ps=2, workers=2) as cluster:
        cluster.run(bg.place_variables, on="worker:0")

``task_side`` runs in the tasks, ``kernel_side`` in the notebook kernel; every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
