"""When distributed TensorFlow goes wrong: seven failures users report, reproduced for real (chapter 12).

Each case is a pair of functions the notebook calls with a running ``LocalCluster``:
``reproduce_<case>(cluster)`` makes the failure happen, bounded by a timeout (a hang
becomes dtfkit's ``TaskTimeout``, with the stuck tasks' stacks), and returns a plain
dict; ``fix_<case>(cluster)`` applies the fix and returns what the fixed run did.
The dicts say the same thing on every machine, so a notebook can print them as
sentences:

- ``case``, ``issue`` (where users reported it), ``symptom`` (its class: the
  exception type, or ``"timed out in <TensorFlow function>"`` for a hang), ``key_line``
  (the line of the log or the error that names it), ``error`` (the exception itself,
  to show; not in the fixed dicts), and for a fix ``fixed`` (the fixed outcome).

| case | cluster | what goes wrong | issue |
|---|---|---|---|
| ``collective_after_op`` | ``workers=2, start_servers=False`` | an op ran before ``MultiWorkerMirroredStrategy`` | tensorflow/tensorflow#34568, #30551 |
| ``missing_worker`` | same | worker:1 never launched: worker:0 waits in the strategy's constructor | tensorflow/tensorflow#39922 |
| ``localhost_config`` | same, ``link="100mbit"`` | ``TF_CONFIG`` says localhost on every machine | tensorflow/tensorflow#57372 |
| ``join_forever`` | ``ps=1, workers=2`` | ``server.join()`` on the ps never returns | tensorflow/tensorflow#4713, tensorflow/ecosystem#19 |
| ``port_taken`` | same | a second server on a port already served | tensorflow/tensorflow#3517 |
| ``ps_died`` | same | the ps died: the workers' sessions retry for ever | tensorflow/tensorflow#45088 |
| ``keras_fit_ps`` | ``chief=1, ps=1, workers=2`` | Keras 3 ``model.fit`` under ``ParameterServerStrategy`` | keras-team/keras#18624 |

The functions that run in the tasks import TensorFlow inside, so importing this
module does not. The drivers call ``cluster.ensure_running(fresh=...)`` first where
a case needs fresh processes (``MultiWorkerMirroredStrategy`` can be set up once per
process), so each one can be run again.

Example::

    from dtfkit.recipes import failures
    with dtfkit.LocalCluster(workers=2, start_servers=False) as cluster:
        seen = failures.reproduce_collective_after_op(cluster)
        print(seen["symptom"], "-", seen["key_line"])   # RuntimeError - Collective ops must ...
        print(failures.fix_collective_after_op(cluster)["fixed"])

``task_side`` runs in the tasks, ``kernel_side`` in the notebook kernel; every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
