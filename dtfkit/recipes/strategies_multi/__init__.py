"""TF2 multi-worker strategies, run in the tasks of a ``LocalCluster`` (chapter 7).

Two training loops, each a plain function the notebook ships to the tasks:

- ``train_multi_worker_mirrored``: ``tf.distribute.MultiWorkerMirroredStrategy``
  (synchronous all-reduce between workers) with a custom training loop
  (``strategy.run`` + ``strategy.reduce``, ``tf.nn.compute_average_loss``,
  ``distribute_datasets_from_function`` sharded per worker) and a tiny Keras 3
  model. Run it on every worker of ``LocalCluster(workers=2, start_servers=False)``:
  the strategy starts its own server from ``TF_CONFIG``.
- ``train_parameter_server``: ``tf.distribute.ParameterServerStrategy`` driven by a
  ``tf.distribute.coordinator.ClusterCoordinator`` in the chief task (the workers
  and ps only serve). It schedules ``steps`` training functions, fetches each
  result, and reports every completed step so the notebook can kill a worker and
  watch the scheduled functions move to the surviving worker.

``startup_check`` tells whether a task is still in the state
``MultiWorkerMirroredStrategy`` needs (``TF_CONFIG`` set, its port free, no op run).

A side-car evaluator: ``read_tf_config`` returns a task's ``TF_CONFIG``;
``sidecar_evaluate`` runs in the ``evaluator`` task of
``LocalCluster(workers=2, evaluator=1, start_servers=False)`` and evaluates every
checkpoint that ``train_multi_worker_mirrored(checkpoint_dir=...)`` writes, until the
last one (TensorFlow keeps the evaluator out of the cluster it trains with).

TensorFlow is imported inside the functions, so importing this module does not.

Example::

    from dtfkit.recipes import strategies_multi as sm
    with dtfkit.LocalCluster(workers=2, start_servers=False) as cluster:
        cluster.run(sm.startup_check)
        cluster.run(sm.train_multi_worker_mirrored, kwargs={"steps": 40})

    d = tempfile.mkdtemp()  # the checkpoints, shared by the workers and the evaluator
    with dtfkit.LocalCluster(workers=2, evaluator=1, start_servers=False) as cluster:
        evaluation = cluster.submit(sm.sidecar_evaluate, kwargs={"checkpoint_dir": d, "last_step": 40},
                                    on="evaluator")
        cluster.run(sm.train_multi_worker_mirrored, kwargs={"steps": 40, "checkpoint_dir": d})
        evaluation.result()

Its code is in ``task_side`` (inside the tasks); every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
