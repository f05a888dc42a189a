"""Between-graph replicated training with parameter servers, TF1 style, on TF 2.x.

A minimal port of the ``distributed_mnist.py`` script from the tutorial
"分布式TensorFlow入门教程" (叶虎, 2018, section 5) to TensorFlow 2.21:

- graph mode via ``tf.compat.v1.disable_eager_execution()``; every TF1 API is
  reached through ``tf.compat.v1`` (flags, Server, ClusterSpec,
  replica_device_setter, SyncReplicasOptimizer, MonitoredTrainingSession, ...);
- ``tf.compat.v1.device(replica_device_setter(...))``: ``tf.device`` refuses a
  device function in TF 2.x;
- the model is the same 2-hidden-layer MLP, built from
  ``tf.compat.v1.get_variable`` + ``tf.matmul`` (``tf.compat.v1.layers.dense``
  does not exist with Keras 3), 128 hidden units by default;
- the data are the offline UCI 8x8 digits (64 features, 10 classes, one-hot)
  from ``dtfkit.datasets``, not MNIST (``tensorflow.contrib`` and its MNIST
  downloader are gone); each worker trains on its own shard with its own
  shuffle seed.

The structure is the seed's: ps tasks create a server and ``join()`` forever
(they never exit; kill them), workers build the graph, optionally wrap the
optimizer in ``SyncReplicasOptimizer(replicas_to_aggregate=total_num_replicas=
num_workers)`` plus its hook, and train in a ``MonitoredTrainingSession`` with
``is_chief=(task_index == 0)`` and ``StopAtStepHook(last_step=train_steps)``.

Launch (one process per task; ``--is_sync=True`` for synchronous training)::

    python -m dtfkit.examples.distributed_mnist --ps_hosts=localhost:2222,localhost:2223 \\
        --worker_hosts=localhost:2224,localhost:2225 --job_name=ps --task_index=0

The cluster can instead come from ``TF_CONFIG`` (``{"cluster": {"ps": [...],
"worker": [...]}, "task": {"type": "worker", "index": 1}}``); a flag given on
the command line wins over ``TF_CONFIG``.

Output: a ps prints ``ps N serving at grpc://...``; a worker prints
``Train step S, loss: L`` when the global step it reads is a multiple of 100,
and finally ``worker N done: local_steps=<int> global_step=<int>`` (the last
global step it saw).

Flags that reproduce the classic pitfalls:

- ``--device_filters=False`` (the seed's behaviour), async: the chief finishes
  and exits; the non-chief never gets a session (its session needs every task
  of the cluster, including the worker that has gone) and hangs silently.
  The default ``--device_filters=True`` restricts each worker's session to
  ``/job:ps`` and itself.
- ``--is_sync=True --stop_grace_secs=120`` (TF's default, as in the seed): the
  chief's last step is followed by a wait of about 120 s before it exits, as
  SyncReplicasOptimizer's queue-runner thread stays blocked waiting for
  gradients that nobody will send. ``--stop_grace_secs=2`` shortens it.
- ``--is_sync=True``: ``replicas_to_aggregate`` counts gradients, not distinct
  workers; compare each worker's ``local_steps`` with the global step.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

from dtfkit.datasets import load_digits, shard

tf.compat.v1.disable_eager_execution()

flags = tf.compat.v1.app.flags
# The seed's flags. Defaults of None mean "take it from TF_CONFIG, else the
# seed's default" (localhost:2222 / localhost:2223,localhost:2224 / worker / 0).
flags.DEFINE_string("ps_hosts", None, "Comma-separated ps hosts (default: TF_CONFIG)")
flags.DEFINE_string("worker_hosts", None, "Comma-separated worker hosts (default: TF_CONFIG)")
flags.DEFINE_string("job_name", None, "'ps' or 'worker' (default: TF_CONFIG task type)")
flags.DEFINE_integer("task_index", None, "Index of task within the job (default: TF_CONFIG)")
flags.DEFINE_integer("num_workers", None, "Number of workers (default: len(worker_hosts))")
flags.DEFINE_boolean("is_sync", False, "Use synchronous training (SyncReplicasOptimizer)")
# Added for the port.
flags.DEFINE_integer("train_steps", 400, "Stop at this global step")
flags.DEFINE_integer("batch_size", 32, "Per-worker batch size")
flags.DEFINE_float("learning_rate", 1e-3, "Adam learning rate")
flags.DEFINE_integer("hidden_units", 128, "Units in each of the 2 hidden layers")
flags.DEFINE_string(
    "checkpoint_dir", None, "Checkpoint directory (default: a fresh temp dir, removed at exit)"
)
flags.DEFINE_integer(
    "stop_grace_secs", 120, "MonitoredTrainingSession stop_grace_period_secs (TF default 120)"
)
flags.DEFINE_boolean(
    "device_filters",
    True,
    "Restrict each worker's session to /job:ps and itself (False = the seed: non-chief hangs)",
)

FLAGS = flags.FLAGS

NUM_FEATURES = 64
NUM_CLASSES = 10
DEFAULT_PS_HOSTS = "localhost:2222"
DEFAULT_WORKER_HOSTS = "localhost:2223,localhost:2224"


def resolve_cluster(flag_values, environ=os.environ):
    """Return (cluster dict, job_name, task_index) from flags, then TF_CONFIG, then defaults."""
    tf_config = json.loads(environ.get("TF_CONFIG") or "{}")
    tf_cluster = tf_config.get("cluster", {})
    tf_task = tf_config.get("task", {})
    extra = sorted(set(tf_cluster) - {"ps", "worker"})
    if extra and (flag_values.ps_hosts is None or flag_values.worker_hosts is None):
        raise ValueError(
            f"TF_CONFIG cluster has jobs {extra}: this script knows only 'ps' and 'worker' "
            "(worker 0 is the chief)"
        )

    def hosts(flag, job, default):
        if flag is not None:
            return [h.strip() for h in flag.split(",") if h.strip()]
        if job in tf_cluster:
            return list(tf_cluster[job])
        return default.split(",")

    cluster = {
        "ps": hosts(flag_values.ps_hosts, "ps", DEFAULT_PS_HOSTS),
        "worker": hosts(flag_values.worker_hosts, "worker", DEFAULT_WORKER_HOSTS),
    }
    job_name = flag_values.job_name or tf_task.get("type") or "worker"
    task_index = flag_values.task_index
    if task_index is None:
        task_index = int(tf_task.get("index", 0))
    if job_name not in cluster:
        raise ValueError(f"job_name must be 'ps' or 'worker', got {job_name!r}")
    if not 0 <= task_index < len(cluster[job_name]):
        raise ValueError(
            f"task_index {task_index} out of range for job {job_name!r} "
            f"with {len(cluster[job_name])} task(s): {cluster[job_name]}"
        )
    return cluster, job_name, task_index


def dense(x, units, name, activation=None):
    """A fully connected layer from tf.compat.v1.get_variable + tf.matmul."""
    with tf.compat.v1.variable_scope(name):
        w = tf.compat.v1.get_variable(
            "kernel",
            [int(x.shape[-1]), units],
            initializer=tf.compat.v1.glorot_uniform_initializer(),
        )
        b = tf.compat.v1.get_variable("bias", [units], initializer=tf.compat.v1.zeros_initializer())
        y = tf.matmul(x, w) + b
        return activation(y) if activation is not None else y


def model(images, hidden_units):
    """Define a simple digits classifier (the seed's MLP)."""
    net = dense(images, hidden_units, "dense_1", tf.nn.relu)
    net = dense(net, hidden_units, "dense_2", tf.nn.relu)
    return dense(net, NUM_CLASSES, "dense_3")


def make_batches(task_index, num_shards, batch_size):
    """Endless shuffled one-hot batches of this worker's shard of the training digits."""
    x, y = load_digits(split="train")
    x, y = shard(x, y, task_index % num_shards, num_shards)
    rng = np.random.default_rng(task_index)
    eye = np.eye(NUM_CLASSES, dtype=np.float32)
    while True:
        perm = rng.permutation(len(x))
        for start in range(0, len(x) - batch_size + 1, batch_size):
            idx = perm[start : start + batch_size]
            yield x[idx], eye[y[idx]]


class FinalStepHook(tf.compat.v1.train.SessionRunHook):
    """Reads the global step once more when the session ends (for the final report)."""

    def __init__(self):
        self.global_step = None

    def begin(self):
        self._global_step_tensor = tf.compat.v1.train.get_global_step()

    def end(self, session):
        self.global_step = int(session.run(self._global_step_tensor))


def run_worker(server, cluster, task_index):
    num_workers = FLAGS.num_workers or len(cluster.as_dict()["worker"])
    is_chief = task_index == 0
    with tf.compat.v1.device(
        tf.compat.v1.train.replica_device_setter(
            worker_device="/job:worker/task:%d" % task_index, cluster=cluster
        )
    ):
        images = tf.compat.v1.placeholder(tf.float32, [None, NUM_FEATURES])
        labels = tf.compat.v1.placeholder(tf.float32, [None, NUM_CLASSES])

        logits = model(images, FLAGS.hidden_units)
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(logits=logits, labels=labels))

        # The StopAtStepHook handles stopping after running given steps.
        final_step = FinalStepHook()
        hooks = [tf.compat.v1.train.StopAtStepHook(last_step=FLAGS.train_steps), final_step]

        global_step = tf.compat.v1.train.get_or_create_global_step()
        optimizer = tf.compat.v1.train.AdamOptimizer(learning_rate=FLAGS.learning_rate)

        if FLAGS.is_sync:
            # synchronous training: wrap the optimizer in SyncReplicasOptimizer
            optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
                optimizer, replicas_to_aggregate=num_workers, total_num_replicas=num_workers
            )
            # the hook handles initialization and the chief's token queue runner
            hooks.append(optimizer.make_session_run_hook(is_chief))

        train_op = optimizer.minimize(
            loss, global_step=global_step, aggregation_method=tf.AggregationMethod.ADD_N
        )

    config = None
    if FLAGS.device_filters:
        # Without this, a worker's session depends on every task of the cluster:
        # a non-chief hangs once the chief has exited (or before it has started).
        config = tf.compat.v1.ConfigProto(
            device_filters=["/job:ps", "/job:worker/task:%d" % task_index]
        )

    checkpoint_dir = FLAGS.checkpoint_dir
    own_tmp = checkpoint_dir is None
    if own_tmp:
        checkpoint_dir = tempfile.mkdtemp(prefix="dtfkit_mnist_w%d_" % task_index)

    batches = make_batches(task_index, num_workers, FLAGS.batch_size)
    local_steps = 0
    step = 0
    try:
        # The MonitoredTrainingSession takes care of session initialization,
        # restoring from a checkpoint, saving to a checkpoint, and closing when
        # done or an error occurs.
        with tf.compat.v1.train.MonitoredTrainingSession(
            master=server.target,
            is_chief=is_chief,
            checkpoint_dir=checkpoint_dir,
            hooks=hooks,
            config=config,
            stop_grace_period_secs=FLAGS.stop_grace_secs,
        ) as mon_sess:
            while not mon_sess.should_stop():
                img_batch, label_batch = next(batches)
                _, ls, step = mon_sess.run(
                    [train_op, loss, global_step],
                    feed_dict={images: img_batch, labels: label_batch},
                )
                local_steps += 1
                if step % 100 == 0:
                    print("Train step %d, loss: %f" % (step, ls), flush=True)
            print(
                "worker %d last step at %.3f" % (task_index, time.time()),
                flush=True,
            )
    finally:
        if own_tmp:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
    print(
        "worker %d done: local_steps=%d global_step=%d"
        % (task_index, local_steps, step if final_step.global_step is None else final_step.global_step),
        flush=True,
    )


def main(_):
    cluster_dict, job_name, task_index = resolve_cluster(FLAGS)
    # create the cluster configured by `ps_hosts' and 'worker_hosts'
    cluster = tf.compat.v1.train.ClusterSpec(cluster_dict)
    # create a server for local task
    server = tf.compat.v1.train.Server(cluster, job_name=job_name, task_index=task_index)

    if job_name == "ps":
        print("ps %d serving at %s" % (task_index, server.target), flush=True)
        server.join()  # ps hosts only join
    else:
        run_worker(server, cluster, task_index)


if __name__ == "__main__":
    tf.compat.v1.app.run(main, argv=sys.argv)
