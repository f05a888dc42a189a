"""Synchronising gradients four ways: through a parameter server, through ``n`` ps shards,
around a ring (chapter 9), or up and down a binary tree (chapter 13).

Each of the first ``n`` workers holds a gradient vector of ``floats`` float32 numbers (a
variable on that worker). Four graphs add them up so that every worker ends with the sum:

- ``build_ps``: every worker sends its gradient to ``ps:0``, the ps adds them, and every
  worker reads the sum back. The ps receives ``n`` gradients and sends ``n`` sums.
- ``build_sharded_ps``: the gradient is cut into ``n`` shards and shard ``i`` is added up on
  worker ``i``'s machine, which sends the summed shard back to every other worker: a
  parameter server partitioned over ``n`` ps tasks, one beside each worker. Every worker
  sends and receives ``2 (n - 1) / n`` of the gradient, as in the ring, in two rounds of
  messages instead of the ring's ``2 (n - 1)``.
- ``build_ring``: ring all-reduce (Patarasuk & Yuan 2009; Baidu's write-up; Horovod). The
  gradient is cut into ``n`` chunks. Reduce-scatter: ``n - 1`` steps in which every worker
  sends one chunk to its right neighbour, which adds it to its own copy; then every worker
  holds one chunk fully summed. All-gather: ``n - 1`` steps in which the summed chunks go
  round the ring. Every worker sends and receives ``2 (n - 1) / n`` of the gradient,
  whatever ``n`` is.
- ``build_tree``: worker 0 is the root, the children of worker ``i`` are ``2i + 1`` and
  ``2i + 2``; every worker adds its children's partial sums to its gradient and sends the
  result up, then copies its parent's sum down. ``2 floor(log2 n)`` rounds, but a parent's
  link carries the whole gradient once for its parent and once for each child.

``ring_schedule(n)`` is the ring as plain Python, which ``build_ring`` turns into ops placed with
``tf.device``. ``sync_run`` (in a client task) runs one synchronisation traced and returns the bytes
every task sent and received (``placement.transfer_table``) and whether every worker got the right
sum; ``expected_bytes`` and ``expected_link_bytes`` give the formulas'. ``trace_steps`` (in the
notebook) traces a few up close (``timeline``, ``chrome_trace``), ``time_sync`` times the methods
for the α–β model (``alpha_beta``), and ``mwms_allreduce`` all-reduces the same vectors with
``MultiWorkerMirroredStrategy`` (RING) for comparison.

Example (in a notebook; TensorFlow runs only in the tasks)::

    import dtfkit
    from dtfkit.recipes import allreduce

    with dtfkit.LocalCluster(ps=1, workers=4) as cluster:
        (run,) = cluster.run(allreduce.sync_run, args=("ring", 4, 1200), on="client").values()
    run["correct"], run["bytes"]["worker:0"]          # True, {'sent': 7200, 'received': 7200}
    allreduce.expected_bytes("ring", 4, 1200)["worker:0"]   # the same, from the formula

Importing this module does not import TensorFlow.

``task_side`` runs in the tasks, ``kernel_side`` in the notebook kernel; every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
