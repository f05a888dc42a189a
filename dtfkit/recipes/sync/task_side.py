"""Runs inside the tasks: the instrumented ``SyncReplicasOptimizer`` training (``train_sync``) and the reader of its
ledger (``read_sync_state``).

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import dtfkit
from dtfkit.datasets import load_digits, shard
from dtfkit.errors import DtfkitError
from dtfkit.recipes.tf1 import task_side as tf1


def ledger_capacity(steps: int, replicas_to_aggregate: int, total_num_replicas: int) -> int:
    """Local steps one worker can make at most: one token each, and the chief hands out
    ``replicas_to_aggregate`` tokens at the start and ``max(total, R)`` per update."""
    per_update = max(total_num_replicas, replicas_to_aggregate)
    return replicas_to_aggregate + per_update * (steps + 5) + 10


# --------------------------------------------------------------------- in the tasks
def train_sync(
    *,
    workers: list[str],
    steps: int = 60,
    replicas_to_aggregate: int | None = None,
    total_num_replicas: int | None = None,
    straggler_ms: dict[str, float] | None = None,
    stall_until_step: dict[str, int] | None = None,
    variables_on: str | None = None,
    stop_grace_secs: float = 1.0,
    start_barrier: bool = True,
    batch_size: int = 32,
    learning_rate: float = 0.1,
    hidden: int = 32,
    seed: int = 0,
    run_name: str | None = None,
    report_every: int = 1,
) -> dict[str, Any]:
    """Sync training in this worker, with a ledger of every gradient; returns this worker's record.

    Run it on exactly the tasks named in ``workers`` (``cluster.run(..., on=workers)``);
    the first one is the chief. ``run_sync`` does both for you.

    Args:
        workers: the tasks taking part, chief first (e.g. ``["worker:0", "worker:1"]``).
        steps: global steps (aggregated updates) to train for.
        replicas_to_aggregate, total_num_replicas: ``SyncReplicasOptimizer``'s
            arguments; both default to ``len(workers)``.
        straggler_ms: slows named workers down, ``{"worker:1": 50}`` sleeps 50 ms
            before each step.
        stall_until_step: ``{"worker:1": 30}``: after its first step, worker:1 pauses
            until the global step has reached 30 (a worker held up by a slow disk, a
            long pause, a busy machine) before it sends its next gradient.
        variables_on: put the variables (and the sync queues and accumulators) on
            this worker task instead of the ps tasks: a worker that is also a ps,
            as when the ps shares a machine with one worker (分布式TensorFlow 采坑记).
        stop_grace_secs: ``MonitoredTrainingSession``'s ``stop_grace_period_secs``
            (TensorFlow's default is 120; the chief waits that long on exit).
        start_barrier: after its first step, each worker waits until every worker has
            made its first step. A worker's first ``session.run`` sets the step up on the
            ps and can take a second on a busy machine; without the barrier, whoever gets
            through it first trains alone meanwhile.

    Returns a dict with ``pushes`` (one ``[start, end, tag, token]`` per local step:
    wall times, the global step its gradient was computed for, and the global step
    the token that released the worker carried; ``end``/``token`` are None for a
    step cut short when the chief closed the token queue), ``local_steps``,
    ``first_step``, ``last_step``, ``closed`` (when the session had closed), ``loss``;
    the chief's also has ``ledger_info`` for ``read_sync_state``.
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    workers = list(workers)
    if ctx.name not in workers:
        raise DtfkitError(f"{ctx.name} is not in workers={workers}: run train_sync on those tasks only")
    rank, count = workers.index(ctx.name), len(workers)
    is_chief = rank == 0
    aggregate = replicas_to_aggregate or count
    total = total_num_replicas or count
    capacity = ledger_capacity(steps, aggregate, total)
    delay = (straggler_ms or {}).get(ctx.name, 0.0) / 1000.0
    name = run_name or f"sync{ctx.call_id}"
    container = tf1.container_name(name)
    x, y = load_digits(split="train")
    x, y = shard(x, y, rank, count)
    rng = np.random.default_rng(seed * 1000 + rank)

    tf.get_logger().setLevel("ERROR")
    own_device = f"/job:{ctx.job_name}/task:{ctx.task_index}"
    with tf1.run_scope(tf, name):
        with tf.compat.v1.device(_device_function(tf, ctx, own_device, variables_on)):
            images, labels, logits, loss = tf1.classifier(tf, hidden)
            # The ledger: this gradient's one-hot mark at [rank, local step index].
            ledger = tf.compat.v1.get_variable(
                "ledger", [count, capacity], initializer=tf.compat.v1.zeros_initializer()
            )
            index = tf.compat.v1.placeholder(tf.int32, [])
            mark = tf.reshape(tf.one_hot(rank * capacity + index, count * capacity), [count, capacity])
            barrier = tf1.peer_barrier(tf)
            global_step = tf.compat.v1.train.get_or_create_global_step()
            opt = tf.compat.v1.train.SyncReplicasOptimizer(
                tf.compat.v1.train.GradientDescentOptimizer(learning_rate),
                replicas_to_aggregate=aggregate,
                total_num_replicas=total,
            )
            pushed = tf.compat.v1.get_variable(
                "pushed", [count], tf.int64, initializer=tf.compat.v1.zeros_initializer(), trainable=False
            )
            grads = opt.compute_gradients(loss + tf.reduce_sum(ledger * mark))
            train_op = opt.apply_gradients(_counted(tf, grads, pushed, rank, count), global_step=global_step)
            local_step = _sync_local_step(tf)
        hooks = [tf.compat.v1.train.StopAtStepHook(last_step=steps), opt.make_session_run_hook(is_chief)]
        filters = ["/job:ps", own_device] + ([_device_name(variables_on)] if variables_on else [])
        config = tf.compat.v1.ConfigProto(device_filters=filters)
        if not is_chief:
            tf1.wait_for_chief_init(tf, ctx.target, config)
        pushes: list[list] = []
        value = float("nan")
        with tf1.quiet_queue_runner_cancel(tf):
            with tf1.training_session(
                tf, ctx, hooks=hooks, config=config, is_chief=is_chief, stop_grace_period_secs=stop_grace_secs
            ) as sess:
                tag = int(sess.run(local_step))  # the global step the first gradient is computed for
                stall = (stall_until_step or {}).get(ctx.name)
                while not sess.should_stop():
                    if len(pushes) == 1:
                        if start_barrier:
                            tf1.wait_for_peers(tf, ctx.target, config, barrier, count)
                        if stall:
                            _wait_for_step(tf, ctx.target, config, global_step, stall)
                    if len(pushes) >= capacity:
                        raise DtfkitError(f"{ctx.name} ran out of ledger space after {capacity} local steps")
                    idx = rng.integers(0, len(x), batch_size)
                    if delay:
                        time.sleep(delay)
                    push = [time.time(), None, tag, None]
                    pushes.append(push)
                    try:
                        token, value = sess.run(
                            [train_op, loss], {images: x[idx], labels: y[idx], index: len(pushes) - 1}
                        )
                    except tf.errors.OutOfRangeError:
                        break  # the chief stopped and closed the token queue: this worker is done
                    push[1], push[3] = time.time(), int(token)
                    tag = int(token)
                    if report_every and len(pushes) % report_every == 0:
                        dtfkit.report(step=tag, loss=value, local_step=len(pushes))
            closed = time.time()
            # The chief's queue-runner thread dies with CancelledError once the session
            # closes; let it finish while that (useless) traceback is still hidden.
            tf1.join_queue_runner_threads(timeout=5.0)
    done = [p for p in pushes if p[1] is not None]
    record: dict[str, Any] = {
        "task": ctx.name,
        "rank": rank,
        "pushes": pushes,
        "local_steps": len(done),
        "first_step": done[0][0] if done else None,
        "last_step": done[-1][1] if done else None,
        "closed": closed,
        "loss": float(value),
    }
    if is_chief:
        record["ledger_info"] = {
            "container": container,
            "ledger": ledger.name,
            "ledger_device": ledger.device,
            "pushed": pushed.name,
            "pushed_device": pushed.device,
            "global_step": global_step.name,
            "global_step_device": global_step.device,
            "shape": [count, capacity],
            "filters": filters,
            "workers": workers,
            "replicas_to_aggregate": aggregate,
            "total_num_replicas": total,
            "learning_rate": learning_rate,
            "steps": steps,
        }
    return record


def read_sync_state(info: dict[str, Any]) -> dict[str, Any]:
    """Read a finished run's global step, ledger and the ledger accumulator's pending count.

    Run it in any task of the cluster once every worker of the run has returned
    (``run_sync`` runs it in the chief). ``info`` is the chief's ``ledger_info``.
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    config = tf.compat.v1.ConfigProto(device_filters=info["filters"])
    with tf.Graph().as_default(), tf.compat.v1.container(info["container"]):
        with tf.compat.v1.device(info["global_step_device"]):
            step = _read_variable(tf, info["global_step"], tf.int64, [])
        with tf.compat.v1.device(info["ledger_device"]):
            ledger = _read_variable(tf, info["ledger"], tf.float32, info["shape"])
            accumulator = tf.compat.v1.ConditionalAccumulator(
                tf.float32, shape=info["shape"], shared_name=info["ledger"] + "/grad_accum"
            )
            pending = accumulator.num_accumulated()
        with tf.compat.v1.device(info["pushed_device"]):
            pushed = _read_variable(tf, info["pushed"], tf.int64, info["shape"][:1])
        with tf.compat.v1.device(info["global_step_device"]):
            # The optimizer's token queue (the same shared name in the run's container). The
            # chief closed it on exit; a closed queue still hands out what it holds.
            queue = tf.compat.v1.FIFOQueue(-1, tf.int64, shapes=[[]], shared_name="sync_token_q")
            size = queue.size()
            left = queue.dequeue_up_to(tf.maximum(size, 1))
        with tf.compat.v1.Session(ctx.target, config=config) as sess:
            step, ledger, pushed, pending, count = sess.run([step, ledger, pushed, pending, size])
            tokens = sess.run(left).tolist() if count else []
    return {
        "global_step": int(step),
        "ledger": np.asarray(ledger),
        "pushed": [int(n) for n in pushed],
        "pending": int(pending),
        "tokens_left": [int(t) for t in tokens],
    }


def _device_function(tf, ctx, own_device: str, variables_on: str | None):
    if variables_on is None:
        return tf.compat.v1.train.replica_device_setter(worker_device=own_device, cluster=ctx.cluster_spec())
    job, index = variables_on.split(":")
    # A one-task "ps job" that is really a worker: variables go to /job:<job>/task:<index>.
    return tf.compat.v1.train.replica_device_setter(
        ps_tasks=1, ps_device=f"/job:{job}", worker_device=own_device, ps_strategy=lambda op: int(index)
    )


def _device_name(task: str) -> str:
    job, index = task.split(":")
    return f"/job:{job}/task:{index}"


def _counted(tf, grads_and_vars, pushed, rank: int, count: int):
    """The gradients, passed on only once ``pushed[rank]`` (a variable next to the ledger) has
    counted them: a count of this worker's gradient pushes kept by TensorFlow on the ps,
    apart from the Python record of its steps and from the ledger."""
    with tf.control_dependencies([g for g, _ in grads_and_vars if g is not None]):
        count_push = pushed.assign_add(tf.one_hot(rank, count, dtype=tf.int64))
    with tf.control_dependencies([count_push]):
        return [(None if g is None else tf.identity(g), v) for g, v in grads_and_vars]


def _sync_local_step(tf):
    """``SyncReplicasOptimizer``'s local variable: the global step this worker's next
    gradient is computed for (its "local_step" for the staleness check)."""
    found = [v for v in tf.compat.v1.local_variables() if "sync_rep_local_step" in v.name]
    if len(found) != 1:
        raise DtfkitError(f"expected one sync_rep_local_step variable, found {[v.name for v in found]}")
    return found[0]


def _wait_for_step(tf, target: str | None, config, global_step, step: int, timeout: float = 120.0) -> None:
    with tf.compat.v1.Session(target, config=config) as plain:
        deadline = time.monotonic() + timeout
        while plain.run(global_step) < step:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the global step did not reach {step} within {timeout:g} s")
            time.sleep(0.005)


def _read_variable(tf, name: str, dtype, shape):
    handle = tf.raw_ops.VarHandleOp(dtype=dtype, shape=shape, shared_name=name.split(":")[0])
    return tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype)
