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

The structure is the tutorial's: ps tasks create a server and ``join()`` forever
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
``Train step S, loss: L`` when the global step it reads is a multiple of 100
(``--log_every``; 1 prints every local step),
``worker N stopped training, closing the session (...)`` when its loop ends,
and finally ``worker N done: local_steps=<int> global_step=<int>`` (the steps
this worker ran, and the global step read when its session closed); these lines
are in the language of ``DTFKIT_LANG`` (``dtfkit.i18n``), English by default. The chief
(worker 0) checkpoints into ``--checkpoint_dir``, by default a fresh temp dir
removed at exit, so two runs never share state.

Flags and behaviours (measured with 2 ps + 2 workers on one 2-core host):

- default (async): both workers train (e.g. ``local_steps`` 186 and 215) and
  exit about 1 s after their last step; the global step may overshoot
  ``train_steps`` by one or two (steps in flight).
- ``--poll_chief_secs=0`` restores the tutorial's start-up: a non-chief that
  starts before the chief has initialized the variables (the usual case: the
  chief has more to do) logs ``Waiting for model to be ready`` and checks
  again only 30 s later (SessionManager's ``recovery_wait_secs``, which
  MonitoredTrainingSession does not expose). By then the chief has run every
  step alone; the non-chief runs one step and exits. The default (0.5) polls
  for the chief's initialization before opening the MonitoredTrainingSession.
- ``--device_filters=False --poll_chief_secs=0`` reproduces the tutorial's hang:
  without a device filter a worker's session needs every task of the
  cluster, so the late non-chief, once the chief has exited, hangs forever,
  silently. The default ``--device_filters=True`` restricts each worker's
  session to ``/job:ps`` and itself.
- ``--is_sync=True`` (SyncReplicasOptimizer) with the default
  ``--stop_grace_secs=120`` (TF's default, as in the tutorial): the chief exits
  about 121 s after its last step. Its token queue-runner thread is blocked in
  the gradient accumulators' ``take_grad``, waiting for gradients nobody will
  send; ``MonitoredSession.close()`` waits the whole grace period
  (``Coordinator stopped with threads still running:
  QueueRunnerThread-sync_token_q-sync_token_q_EnqueueMany``), then closing the
  session cancels that step (``CancelledError: Step was cancelled by an
  explicit call to `Session::Close()```, printed as a thread traceback;
  harmless). ``--stop_grace_secs=2``: the chief exits 3-6 s after its last step.
- ``--is_sync=True`` also shows that ``replicas_to_aggregate`` counts gradients,
  not distinct workers (tensorflow#11753): with both workers in, about 800
  local steps in all make 400 global steps; with ``--poll_chief_secs=0`` the
  chief often runs alone, ``local_steps=801`` (two of its own gradients per
  update), and the non-chief then runs one step.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import numpy as np
import tensorflow as tf

from dtfkit import i18n  # i18n._: the lines it prints, in the language of DTFKIT_LANG
from dtfkit.datasets import batches, load_digits, shard

flags = tf.compat.v1.app.flags
# The tutorial's flags. Defaults of None mean "take it from TF_CONFIG, else the
# tutorial's default" (localhost:2222 / localhost:2223,localhost:2224 / worker / 0).
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
    "checkpoint_dir", None, "Chief's checkpoint dir (default: a fresh temp dir, removed at exit)"
)
flags.DEFINE_integer(
    "stop_grace_secs", 120, "MonitoredTrainingSession stop_grace_period_secs (TF default 120)"
)
flags.DEFINE_integer(
    "log_every",
    100,
    "Print 'Train step' when the global step read is a multiple of this (the tutorial: 100; "
    "1 prints every local step, to watch the workers' global steps interleave or march together)",
)
flags.DEFINE_boolean(
    "device_filters",
    True,
    "Restrict each worker's session to /job:ps and itself (False = as in the tutorial: non-chief hangs)",
)

flags.DEFINE_float(
    "poll_chief_secs",
    0.5,
    "Non-chief: poll this often (s) for the chief's initialization before starting its "
    "session (0 = as in the tutorial: MonitoredTrainingSession checks only every 30 s)",
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
    """Define a simple digits classifier (the tutorial's MLP)."""
    net = dense(images, hidden_units, "dense_1", tf.nn.relu)
    net = dense(net, hidden_units, "dense_2", tf.nn.relu)
    return dense(net, NUM_CLASSES, "dense_3")


def make_batches(task_index, num_shards, batch_size):
    """Endless shuffled one-hot batches of this worker's own shard of the training digits."""
    x, y = load_digits(split="train")
    x, y = shard(x, y, task_index, num_shards)
    eye = np.eye(NUM_CLASSES, dtype=np.float32)
    for xb, yb in batches(x, y, batch_size, seed=task_index, drop_remainder=True):
        yield xb, eye[yb]


def wait_for_chief(target, config, task_index, poll_secs):
    """Block until the chief has initialized every global variable on the ps.

    MonitoredTrainingSession does the same check on a non-chief, but sleeps
    30 s between checks (SessionManager's recovery_wait_secs, which it does not
    expose): a non-chief that starts a moment before the chief then misses most
    of a short run. Polling here first makes its own check succeed at once.
    """
    # global variables only: local ones (e.g. SyncReplicasOptimizer's
    # sync_rep_local_step) are this worker's own and get initialized by its session.
    not_ready = tf.compat.v1.report_uninitialized_variables(tf.compat.v1.global_variables())
    announced = False
    with tf.compat.v1.Session(target, config=config) as sess:
        while sess.run(not_ready).size:
            if not announced:
                print(
                    i18n._("worker {index} waiting for the chief to initialize the model").format(
                        index=task_index
                    ),
                    flush=True,
                )
                announced = True
            time.sleep(poll_secs)


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
            worker_device=f"/job:worker/task:{task_index}", cluster=cluster
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
        config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{task_index}"])

    # Only the chief reads and writes checkpoints (MonitoredTrainingSession
    # ignores checkpoint_dir on other workers), so only it gets a temp dir.
    checkpoint_dir = FLAGS.checkpoint_dir
    own_tmp = checkpoint_dir is None and is_chief
    if own_tmp:
        checkpoint_dir = tempfile.mkdtemp(prefix=f"dtfkit_mnist_w{task_index}_")

    if not is_chief and FLAGS.poll_chief_secs > 0:
        wait_for_chief(server.target, config, task_index, FLAGS.poll_chief_secs)

    # explicit sharding: worker i trains on shard i of len(worker_hosts), seed i
    data = make_batches(task_index, len(cluster.as_dict()["worker"]), FLAGS.batch_size)
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
                img_batch, label_batch = next(data)
                _, ls, step = mon_sess.run(
                    [train_op, loss, global_step],
                    feed_dict={images: img_batch, labels: label_batch},
                )
                local_steps += 1
                if step % FLAGS.log_every == 0:
                    print(
                        i18n._("Train step {step:d}, loss: {loss:f}").format(step=step, loss=ls), flush=True
                    )
            print(
                i18n._(
                    "worker {index} stopped training, closing the session (stop_grace_secs={grace})"
                ).format(index=task_index, grace=FLAGS.stop_grace_secs),
                flush=True,
            )
    finally:
        if own_tmp:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
    if final_step.global_step is not None:
        step = final_step.global_step
    print(
        i18n._("worker {index} done: local_steps={local_steps:d} global_step={step:d}").format(
            index=task_index, local_steps=local_steps, step=step
        ),
        flush=True,
    )


def main(_):
    # TF1 graph mode (done here rather than at import, so that importing this
    # module, e.g. to reuse resolve_cluster, leaves the importer in eager mode).
    tf.compat.v1.disable_eager_execution()
    cluster_dict, job_name, task_index = resolve_cluster(FLAGS)
    # create the cluster configured by `ps_hosts' and 'worker_hosts'
    cluster = tf.compat.v1.train.ClusterSpec(cluster_dict)
    # create a server for local task
    server = tf.compat.v1.train.Server(cluster, job_name=job_name, task_index=task_index)

    if job_name == "ps":
        serving = i18n._("ps {index} serving at {target}").format(index=task_index, target=server.target)
        print(serving, flush=True)
        server.join()  # ps hosts only join
    else:
        run_worker(server, cluster, task_index)


if __name__ == "__main__":
    tf.compat.v1.app.run(main)
