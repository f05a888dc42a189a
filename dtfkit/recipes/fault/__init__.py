"""Fault-tolerant between-graph training with checkpoints, TF1 style, run in a task.

The training loop of chapter 4: asynchronous between-graph training in a
``MonitoredTrainingSession`` whose chief restores from and saves to a shared
``checkpoint_dir``, so the notebook can kill and restart workers, the ps and
the chief while it runs, and watch ``MonitoredSession`` recover.

Every hook is spelled out (they are the lesson): ``StopAtStepHook``,
``CheckpointSaverHook`` (chief), ``SummarySaverHook`` (chief), optionally
``LoggingTensorHook``, and ``ReportHook``, a custom ``SessionRunHook`` that
sends every step to the notebook with ``dtfkit.report`` and says when a session
is (re)created and at which global step.

Example::

    from dtfkit.recipes import fault
    handle = cluster.submit(fault.train_with_checkpoints,
                            kwargs={"checkpoint_dir": ckpt, "stop_file": stop}, on_error="wait")
    cluster.metrics.wait_for(lambda r: r.get("step", 0) >= 100, timeout=60)
    cluster.kill("ps", 0); cluster.restart("ps", 0)   # the workers recover by themselves

Its code is in ``task_side`` (inside the tasks); every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
