"""TF2 multi-worker strategies, run in the tasks of a ``LocalCluster`` (chapter 7).

Two training loops, each a plain function the notebook ships to the tasks:
``train_multi_worker_mirrored`` (synchronous all-reduce, a custom loop over a tiny Keras 3
model, on every worker of ``LocalCluster(workers=2, start_servers=False)``: the strategy
starts its own server from ``TF_CONFIG``) and ``train_parameter_server`` (a
``ClusterCoordinator`` in the chief task schedules the steps on workers that only serve, so
the notebook can kill a worker and watch its functions move). ``startup_check`` tells whether
a task is still in the state ``MultiWorkerMirroredStrategy`` needs; ``sidecar_evaluate``, in
the ``evaluator`` task, evaluates every checkpoint the workers write (TensorFlow keeps the
evaluator out of the cluster it trains with).

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
