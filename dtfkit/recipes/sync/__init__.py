"""``SyncReplicasOptimizer``, instrumented: who supplied each aggregated gradient, which were dropped.

The kit's TF1 recipe (``tf1``) trains; this one also keeps a *ledger* so a lesson
can see inside the sync optimizer. Every gradient a worker pushes carries a
one-hot mark in an extra variable, ``ledger[worker, local_step]``. The mark is
aggregated like any other gradient: plain SGD then moves the ledger entry of each
gradient an update aggregated by ``-learning_rate / n`` (the accumulator averages
``n`` gradients) and leaves the entry of a gradient that was dropped (or is still
waiting in the accumulator) at zero. Reading the ledger after training tells,
gradient by gradient, which update used it and how many gradients that update
averaged. The extra loss term ``sum(ledger * mark)`` does not touch the model's
gradients.

Every run lives in its own resource container (``tf.compat.v1.container``):
``SyncReplicasOptimizer`` names its token queue ``sync_token_q`` in every graph,
and the chief *closes* that queue when it stops, so without a container a second
sync run on the same ps fails with "FIFOQueue 'sync_token_q' is closed".

Example (in the notebook; the kernel never imports TensorFlow)::

    from dtfkit.recipes import sync
    with dtfkit.LocalCluster(ps=1, workers=2) as cluster:
        run = sync.run_sync(cluster, ["worker:0", "worker:1"], steps=60)
        run.update_sizes()             # {2}: every update averaged 2 gradients
        run.shares()                   # {'worker:0': 0.51, 'worker:1': 0.49}: of the aggregated ones
        print(run.table())             # local steps, aggregated, dropped, pending per worker
        run.plot_timeline()

``task_side`` runs in the tasks, ``kernel_side`` in the notebook kernel; every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
