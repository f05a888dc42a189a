"""When a peer of all-reduce training fails: ``MultiWorkerMirroredStrategy`` faults (chapter 12).

Chapters 4 and 7 recover parameter-server training, where the chief or the coordinator
goes on without a dead worker. All-reduce training has no such slack: every step needs
every worker, so a failed peer stops the others. The recipes are functions run on every
worker of ``LocalCluster(workers=2, start_servers=False)`` (the strategy starts its own
server; collectives are configured once per process, so start new processes between runs
with ``cluster.ensure_running(fresh="all")``):

- ``train_until_a_peer_fails``: ``failing_task`` crashes (``"exit"``), freezes (``"freeze"``) or
  hangs (``"hang"``) after exactly ``fail_at`` steps, and the survivor's step fails (or waits)
  in a different way for each; ``hang_with_collective_timeout`` runs the last case with
  ``CommunicationOptions(timeout_seconds=T)``, again when TensorFlow crashes while aborting the
  collective.
- ``train_with_checkpoints``: the custom-loop form of Keras' ``BackupAndRestore``, a
  ``tf.train.CheckpointManager``; ``recovery_summary`` counts the steps a crash lost.
  ``BackupAndRestore`` itself needs ``model.fit``, which Keras 3 cannot run under this strategy
  (keras-team/keras#20585; ``try_fit_under_mwms`` shows the error), and ``tf_keras`` (Keras 2)
  is not installed; ``fit_with_backup_and_restore`` shows it resuming ``model.fit`` on one
  worker without a strategy, where Keras 3 supports it.
- ``train_with_preemption_handler``: ``tf.distribute.experimental.PreemptionCheckpointHandler``
  saves every worker's state when one gets SIGTERM, and its ``exit_fn`` (``sys.exit(42)``
  outside Google Cloud) is caught and returned as ``exit_code`` (uncaught, dtfkit would report
  ``TaskFailed`` with ``exc_type="SystemExit"``; an ``exit_fn`` that ends the process,
  ``os._exit``, gives ``TaskExited``). Started again, the handler restores: no step is lost.

When a worker dies, submit one call per worker so that the survivor's result stays readable
(a call on both raises the dead one's ``TaskExited``). TensorFlow is imported inside the
functions, so importing this module does not.

Example::

    from dtfkit.recipes import mwms_fault as mf
    with dtfkit.LocalCluster(workers=2, start_servers=False) as cluster:
        calls = {t: cluster.submit(mf.train_until_a_peer_fails, on=t, timeout=90,
                                   kwargs={"progress_dir": tempfile.mkdtemp(), "fail_at": 8})
                 for t in ("worker:0", "worker:1")}
        calls["worker:0"].result()   # {'worker:0': {'steps_done': 8, 'error_class': 'UnavailableError', ...}}
        calls["worker:1"].result()   # raises TaskExited: worker:1 exited with code 17

``task_side`` runs in the tasks, ``kernel_side`` in the notebook kernel; every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
