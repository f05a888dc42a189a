"""TensorFlow's own partitioned variables: one variable cut into shards, spread over the ps tasks.

A variable too big for one parameter server, or whose updates would all crowd one ps's
link, is *partitioned*: TensorFlow cuts it along its first axis into ``shards`` pieces and
places piece ``i`` on ps task ``i mod (number of ps tasks)``. Two APIs do this in TF 2.21:

- TF1 graphs: ``tf.compat.v1.get_variable(..., partitioner=tf.compat.v1.fixed_size_partitioner(k))``
  under ``tf.compat.v1.train.replica_device_setter``, whose ``_RoundRobinStrategy`` gives
  each new variable op the next ps task (``tensorflow/python/training/device_setter.py``);
  the result is a ``PartitionedVariable`` whose reads concatenate the shards.
- TF2: ``tf.distribute.ParameterServerStrategy(resolver,
  variable_partitioner=tf.distribute.experimental.partitioners.FixedShardsPartitioner(k))``,
  whose ``_create_variable_round_robin`` places shard ``i`` on
  ``/job:ps/task:{count mod num_ps}`` (``tensorflow/python/distribute/parameter_server_strategy_v2.py``);
  the result is a ``ShardedVariable``. It needs a coordinator in a chief task.

``partition_variable`` (in a client task) builds the TF1 one on a running cluster, reads it
once on ``worker:0`` with a full trace, and reports where each shard's variable op really
ran, and how many bytes of each shard reached the worker (both from the trace). The TF2 API
is not run here: it needs a coordinator in a chief task (``allreduce.build_sharded_ps`` is
the same layout, with the shards' servers beside the workers).

Example (in a notebook)::

    with dtfkit.LocalCluster(ps=2, workers=1) as cluster:
        (report,) = cluster.run(partitioned.partition_variable, args=(1200, 3), on="client").values()
    [(s["shard"], s["task"], s["shape"]) for s in report["shards"]]
    # [(0, 'ps:0', [400]), (1, 'ps:1', [400]), (2, 'ps:0', [400])]

Importing this module does not import TensorFlow.

Its code is in ``task_side`` (inside the tasks); every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
