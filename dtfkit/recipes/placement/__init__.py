"""Where did each op run? Placement tables from a traced ``Session.run``, as plain Python.

In a distributed TF1 graph you *ask* for a device with ``tf.device(...)``; the master
of the session's target decides the rest (ops with no device, colocation with a
variable), cuts the graph into one piece per task and has each task's worker
service run its piece. A run with ``RunOptions(trace_level=FULL_TRACE)`` reports
what actually ran where (``RunMetadata.step_stats``), and which tensors crossed
from one task to another. This module turns that into lists of dicts, so the
notebook (which never imports TensorFlow) can show and check them.

Run inside a task (``cluster.run(fn, on="client")`` or on a worker)::

    import tensorflow as tf
    import dtfkit
    from dtfkit.recipes import placement

    with tf.Graph().as_default() as graph:
        with tf.device("/job:ps/task:0"):
            x = tf.Variable(tf.ones([2, 2]), name="x")
        with tf.device("/job:worker/task:0"):
            z = tf.matmul(x, x, name="z")
        with tf.compat.v1.Session("grpc://" + dtfkit.this_task().cluster["worker"][0]) as sess:
            sess.run(x.initializer)
            traced = placement.trace_run(sess, z)
    traced["ops"]        # [{'op': 'x', 'type': 'VarHandleOp', 'task': 'ps:0', ...}, ...]
    traced["transfers"]  # [{'tensor': 'z/ReadVariableOp', 'from': 'ps:0', 'to': 'worker:0', ...}]

and in the notebook::

    placement.Table(traced["ops"], ["op", "type", "task"])   # an HTML table

Importing this module does not import TensorFlow: every function that needs it
imports it inside.

``task_side`` runs in the tasks, ``kernel_side`` in the notebook kernel; every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
