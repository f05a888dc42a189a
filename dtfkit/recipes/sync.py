"""``SyncReplicasOptimizer``, instrumented: who supplied each aggregated gradient, which were dropped.

The kit's TF1 recipe (``tf1``) trains; this one also keeps a *ledger* so a lesson
can see inside the sync optimizer. Every gradient a worker pushes carries a
one-hot mark in an extra variable, ``ledger[worker, local_step]``. The mark is
aggregated like any other gradient: plain SGD then moves the ledger entry of each
gradient an update aggregated by ``-learning_rate / n`` (the accumulator averages
``n`` gradients) and leaves the entry of a gradient that was dropped (or is still
waiting in the accumulator) at zero. Reading the ledger after training tells,
gradient by gradient, which update used it and how many gradients that update
averaged. The extra loss term ``sum(ledger * mark)`` does not touch the model's
gradients.

Every run lives in its own resource container (``tf.compat.v1.container``):
``SyncReplicasOptimizer`` names its token queue ``sync_token_q`` in every graph,
and the chief *closes* that queue when it stops, so without a container a second
sync run on the same ps fails with "FIFOQueue 'sync_token_q' is closed".

Example (in the notebook; the kernel never imports TensorFlow)::

    from dtfkit.recipes import sync
    with dtfkit.LocalCluster(ps=1, workers=2) as cluster:
        run = sync.run_sync(cluster, ["worker:0", "worker:1"], steps=60)
        run.update_sizes()             # {2}: every update averaged 2 gradients
        run.shares()                   # {'worker:0': 0.51, 'worker:1': 0.49}: of the aggregated ones
        print(run.table())             # local steps, aggregated, dropped, pending per worker
        run.plot_timeline()
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from typing import Any

import numpy as np

import dtfkit
from dtfkit.course.datasets import load_digits, shard
from dtfkit.errors import DtfkitError
from dtfkit.recipes import analysis, tf1

AGGREGATED, DROPPED, PENDING = "aggregated", "dropped", "pending"
FATE_COLORS = {AGGREGATED: "tab:green", DROPPED: "tab:red", PENDING: "tab:gray"}


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


def _wait_for_step(tf, target: str, config, global_step, step: int, timeout: float = 120.0) -> None:
    with tf.compat.v1.Session(target, config=config) as plain:
        deadline = time.monotonic() + timeout
        while plain.run(global_step) < step:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the global step did not reach {step} within {timeout:g} s")
            time.sleep(0.005)


def _read_variable(tf, name: str, dtype, shape):
    handle = tf.raw_ops.VarHandleOp(dtype=dtype, shape=shape, shared_name=name.split(":")[0])
    return tf.raw_ops.ReadVariableOp(resource=handle, dtype=dtype)


# --------------------------------------------------------------- in the notebook
def run_sync(cluster, workers: list[str], *, timeout: float = 180.0, **kwargs) -> SyncRun:
    """Run ``train_sync`` on ``workers`` (chief first), read the ledger, return a ``SyncRun``.

    Keyword arguments go to ``train_sync``. Each call gets its own ``run_name``
    (variables, queues and accumulators never shared with another run).

    Example::

        run = run_sync(cluster, ["worker:0", "worker:1", "worker:2"], replicas_to_aggregate=2)
    """
    workers = list(workers)
    kwargs.setdefault("run_name", f"sync{uuid.uuid4().hex[:8]}")
    results = cluster.run(train_sync, kwargs={**kwargs, "workers": workers}, on=workers, timeout=timeout)
    info = results[workers[0]]["ledger_info"]
    state = cluster.run(read_sync_state, kwargs={"info": info}, on=workers[0], timeout=60)[workers[0]]
    return SyncRun(results, state)


class SyncRun:
    """One sync run, taken apart gradient by gradient (no TensorFlow needed).

    Attributes:
        workers: the tasks, chief first. ``replicas_to_aggregate``, ``total_num_replicas``.
        global_step: the final global step (= number of aggregated updates).
        gradients: one dict per pushed gradient: ``task``, ``index`` (its local step),
            ``tag`` (the global step it was computed for), ``start``/``end`` times,
            ``fate`` (``"aggregated"``, ``"dropped"`` or ``"pending"``) and, when
            aggregated, ``update`` (1-based: the update that used it) and ``n``
            (how many gradients that update averaged).
        pending_read: gradients the ledger's accumulator still held at the end, as read
            from the accumulator itself (``num_accumulated``).
        pushed_read: ``{task: gradients it pushed}``, as counted by TensorFlow on the ps
            (``train_sync``'s ``pushed`` variable, incremented in the step itself before the
            gradient goes to the accumulators): a count apart from the ledger and from the
            workers' Python records, so ``pushed == aggregated + dropped + pending`` can fail.

    What ``SyncReplicasOptimizer`` guarantees about the sizes (``update_sizes``), from its
    source (``tensorflow/python/training/sync_replicas_optimizer.py``) and the accumulator's
    (``tensorflow/core/kernels/conditional_accumulator_base.cc``): ``take_grad(R)`` waits
    until the accumulator holds at least R gradients, then averages *all* it holds. Update
    ``u + 1`` accepts only gradients computed for global step ``u``, and only the
    ``max(N, R)`` tokens of update ``u`` carry it, so update ``u + 1`` (``u >= 1``) averages
    between R and ``max(N, R)``: exactly R when ``R >= N``. Update 1 can average up to
    ``N + R`` (each worker's first gradient plus the R start-up tokens).
    """

    def __init__(self, results: dict[str, dict], state: dict[str, Any]):
        self.results = results
        info = next(r["ledger_info"] for r in results.values() if "ledger_info" in r)
        self.workers: list[str] = list(info["workers"])
        self.replicas_to_aggregate: int = info["replicas_to_aggregate"]
        self.total_num_replicas: int = info["total_num_replicas"]
        self.steps: int = info["steps"]
        self.global_step: int = state["global_step"]
        self.pending_read: int = state["pending"]
        self.pushed_read: dict[str, int] = dict(zip(self.workers, state["pushed"], strict=True))
        # The global step each token still in the queue carried when the run ended.
        self.tokens_left: list[int] = list(state.get("tokens_left", []))
        self.ledger = np.asarray(state["ledger"])
        lr = info["learning_rate"]
        self.gradients: list[dict[str, Any]] = []
        for rank, task in enumerate(self.workers):
            for i, (start, end, tag, token) in enumerate(results[task]["pushes"]):
                value = float(self.ledger[rank, i])
                g = {"task": task, "index": i, "tag": tag, "start": start, "end": end, "token": token}
                if abs(value) > 1e-3 * lr / max(1, self.replicas_to_aggregate):
                    g.update(fate=AGGREGATED, update=tag + 1, n=int(round(lr / abs(value))))
                elif tag >= self.global_step:
                    g["fate"] = PENDING  # accepted by the accumulator, never taken
                else:
                    g["fate"] = DROPPED  # computed for an older global step: silently discarded
                self.gradients.append(g)

    # ------------------------------------------------------------- counting
    def counts(self) -> dict[str, dict[str, int]]:
        """Per worker: ``local_steps`` (its completed steps, counted by the worker), ``pushed``
        (counted on the ps: ``pushed_read``), and the ledger's ``aggregated``, ``dropped``,
        ``pending`` (over every step the worker recorded, one cut short included)."""
        out = {}
        for task in self.workers:
            mine = [g for g in self.gradients if g["task"] == task]
            c = Counter(g["fate"] for g in mine)
            out[task] = {
                "local_steps": self.results[task]["local_steps"],
                "pushed": self.pushed_read[task],
                AGGREGATED: c[AGGREGATED],
                DROPPED: c[DROPPED],
                PENDING: c[PENDING],
            }
        return out

    def totals(self) -> dict[str, int]:
        out = Counter()
        for row in self.counts().values():
            out.update(row)
        return dict(out)

    def updates(self) -> dict[int, list[str]]:
        """``{update number: [task of each gradient it averaged]}``, for every update."""
        out: dict[int, list[str]] = {u: [] for u in range(1, self.global_step + 1)}
        for g in self.gradients:
            if g["fate"] == AGGREGATED:
                out.setdefault(g["update"], []).append(g["task"])
        return out

    def gradients_of(self, task: str) -> list[dict[str, Any]]:
        """The gradients one worker pushed, in order."""
        return [g for g in self.gradients if g["task"] == task]

    def update_size_counts(self) -> dict[int, int]:
        """``{gradients averaged: number of updates}``, e.g. ``{2: 57, 3: 3}``."""
        return dict(sorted(Counter(len(tasks) for tasks in self.updates().values()).items()))

    def update_sizes(self, first: int = 1) -> set[int]:
        """The set of "how many gradients did an update average" over updates ``first`` to the
        last: ``{2}`` when each averaged exactly 2. Checks the two ways to count agree.

        Always at least R. ``first=2`` leaves out update 1, the only one that can average
        more than R when ``R >= N`` (see the class docstring)."""
        sizes = {len(tasks) for u, tasks in self.updates().items() if u >= first}
        updates = self.updates()
        for g in self.gradients:
            if g["fate"] == AGGREGATED and g["n"] != len(updates[g["update"]]):
                raise DtfkitError(
                    f"ledger inconsistent: {g['task']}'s gradient {g['index']} says its update averaged "
                    f"{g['n']}, but {len(updates[g['update']])} gradients were computed for update {g['update']}"
                )
        return sizes

    def shares(self, of: str = AGGREGATED) -> dict[str, float]:
        """Each worker's fraction of the aggregated gradients (``of="local_steps"``: of the steps)."""
        return analysis.shares({task: row[of] for task, row in self.counts().items()})

    def single_worker_updates(self) -> dict[str, int]:
        """How many updates averaged gradients of one worker only, per worker."""
        out = dict.fromkeys(self.workers, 0)
        for tasks in self.updates().values():
            if tasks and len(set(tasks)) == 1:
                out[tasks[0]] += 1
        return out

    def update_times(self) -> dict[int, float]:
        """When each update was seen done: the first moment a worker got its token."""
        out: dict[int, float] = {}
        for g in self.gradients:
            if g["token"] is not None and g["end"] is not None:
                out[g["token"]] = min(out.get(g["token"], g["end"]), g["end"])
        return out

    def median_update_interval(self) -> float:
        """Median seconds between consecutive updates."""
        times = np.sort(list(self.update_times().values()))
        return float(np.median(np.diff(times))) if len(times) > 1 else float("nan")

    def median_step_interval(self, task: str) -> float:
        """Median seconds between the starts of one worker's consecutive local steps,
        its first step left out (TensorFlow sets the step up during it). Compare it with
        ``median_update_interval()``: both are medians over the same run."""
        starts = np.sort([g["start"] for g in self.gradients_of(task) if g["index"] > 0])
        return float(np.median(np.diff(starts))) if len(starts) > 1 else float("nan")

    def tokens_handed_out(self) -> int:
        """Tokens the chief put into the token queue: ``replicas_to_aggregate`` at the start,
        then ``max(total_num_replicas, replicas_to_aggregate)`` per update. Each completed
        local step took one, so the workers' local steps can never add up to more."""
        per_update = max(self.total_num_replicas, self.replicas_to_aggregate)
        return self.replicas_to_aggregate + per_update * self.global_step

    def tokens_counted(self) -> dict[int, int]:
        """``{global step a token carried: how many such tokens}``, counted token by token: the
        tokens the workers' completed local steps took plus those left in the queue at the end.
        Every token the chief put into the queue is one of the two."""
        taken = [g["token"] for g in self.gradients if g["token"] is not None]
        return dict(sorted(Counter(taken + self.tokens_left).items()))

    def time_origin(self, skip_first: bool = True) -> float:
        """The wall time ``plot_timeline`` puts at x = 0 (the same ``skip_first``)."""
        return self._t0(skip_first)

    def update_window(self, first: int, last: int, skip_first: bool = True) -> tuple[float, float]:
        """The x range of ``plot_timeline`` (same origin) from just before update ``first``
        to just after update ``last``: ``ax.set_xlim(*run.update_window(20, 24))`` zooms in."""
        return analysis.update_window(self.update_times(), first, last, origin=self._t0(skip_first), pad=0.15)

    def exit_lags(self) -> dict[str, float]:
        """Per worker, seconds from its last step to its session being closed."""
        return {
            t: r["closed"] - r["last_step"] for t, r in self.results.items() if r["last_step"] is not None
        }

    def table(self) -> str:
        """The counts as a small text table."""
        head = f"{'worker':<10}{'local steps':>12}{'aggregated':>12}{'dropped':>9}{'pending':>9}{'share':>8}"
        lines = [head]
        shares = self.shares()
        for task, row in self.counts().items():
            lines.append(
                f"{task:<10}{row['local_steps']:>12}{row[AGGREGATED]:>12}{row[DROPPED]:>9}"
                f"{row[PENDING]:>9}{shares[task]:>8.0%}"
            )
        t = self.totals()
        lines.append(f"{'total':<10}{t['local_steps']:>12}{t[AGGREGATED]:>12}{t[DROPPED]:>9}{t[PENDING]:>9}")
        lines.append(
            f"global step {self.global_step} x replicas_to_aggregate {self.replicas_to_aggregate} "
            f"= {self.global_step * self.replicas_to_aggregate} (aggregated can only be more); "
            f"the accumulator still held {self.pending_read}"
        )
        return "\n".join(lines)

    # ---------------------------------------------------------------- plots
    def _t0(self, skip_first: bool = False) -> float:
        return min(g["start"] for g in self.gradients if not (skip_first and g["index"] == 0))

    def plot_timeline(
        self, ax=None, title: str | None = None, show_updates: bool = True, skip_first: bool = True
    ):
        """One lane per worker, one bar per local step (from sending the gradient until the
        token came back), coloured by the gradient's fate; grey lines mark updates.

        ``skip_first`` leaves out each worker's first step: TensorFlow sets the step up
        on the ps during it, which takes up to a second and would squeeze the rest."""
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch

        if ax is None:
            _, ax = plt.subplots(figsize=(9, 0.6 + 0.55 * len(self.workers)))
        t0 = self._t0(skip_first)
        if show_updates:
            for t in self.update_times().values():
                if t >= t0:
                    ax.axvline(t - t0, color="0.85", lw=0.6, zorder=0)
        for lane, task in enumerate(self.workers):
            for g in self.gradients_of(task):
                if skip_first and g["index"] == 0:
                    continue
                end = g["end"] if g["end"] is not None else g["start"] + 0.002
                ax.broken_barh(
                    [(g["start"] - t0, max(end - g["start"], 0.002))],
                    (lane - 0.35, 0.7),
                    facecolors=FATE_COLORS[g["fate"]],
                    edgecolor="white",
                    linewidth=0.3,
                )
        ax.set_yticks(range(len(self.workers)), self.workers)
        ax.invert_yaxis()
        ax.set_xlabel("wall time (s)" + (", from each worker's second step" if skip_first else ""))
        ax.legend(
            handles=[Patch(color=c, label=f) for f, c in FATE_COLORS.items()],
            loc="upper left",
            bbox_to_anchor=(1.0, 1.0),
            fontsize="small",
        )
        if title:
            ax.set_title(title)
        return ax

    def plot_updates(self, ax=None, title: str | None = None):
        """For each update, a stacked bar: whose gradients it averaged."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(9, 2.2))
        updates = self.updates()
        xs = np.array(sorted(updates))
        bottom = np.zeros(len(xs))
        for task in self.workers:
            n = np.array([updates[u].count(task) for u in xs])
            ax.bar(xs, n, bottom=bottom, width=1.0, label=task, edgecolor="white", linewidth=0.3)
            bottom += n
        ax.set_xlabel("update (global step)")
        ax.set_ylabel("gradients")
        ax.set_yticks(range(int(bottom.max()) + 1 if len(bottom) else 1))
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
        if title:
            ax.set_title(title)
        return ax


def plot_shares(runs: dict[str, SyncRun], ax=None, of: str = AGGREGATED, title: str | None = None):
    """Grouped bars: each worker's share of the aggregated gradients, one group per run."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 2.8))
    tasks = sorted({t for run in runs.values() for t in run.workers})
    width = 0.8 / max(1, len(tasks))
    for k, task in enumerate(tasks):
        values = [run.shares(of).get(task, 0.0) for run in runs.values()]
        xs = np.arange(len(runs)) + (k - (len(tasks) - 1) / 2) * width
        ax.bar(xs, values, width=width, label=task)
    ax.set_xticks(range(len(runs)), list(runs))
    ax.set_ylabel("share of aggregated gradients" if of == AGGREGATED else f"share of {of}")
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    if title:
        ax.set_title(title)
    return ax


# ------------------------------------------------------------------ stack excerpts
_FRAME = re.compile(r'File ".*?([\w.]+\.py)", line \d+, in (\w+)')


def stack_excerpt(
    stacks: str,
    modules: tuple[str, ...] = (
        "monitored_session.py",
        "coordinator.py",
        "queue_runner_impl.py",
        "session.py",
    ),
) -> list[str]:
    """From one task's stacks (``TaskTimeout.stacks[task]``), the innermost frames of each
    thread that lie in ``modules``: ``["MainThread: coordinator.py join", ...]`` (no line
    numbers, so the lines are stable across runs).

    Example::

        except dtfkit.TaskTimeout as exc:
            sync.stack_excerpt(exc.stacks["worker:0"])
    """
    out = []
    for block in re.split(r"^Thread ", stacks, flags=re.M)[1:]:
        thread, _, frames = block.partition(":\n")
        hits = [f"{m.group(1)} {m.group(2)}" for m in _FRAME.finditer(frames) if m.group(1) in modules]
        if hits:
            kind = "QueueRunnerThread" if "QueueRunnerThread" in thread else thread.split("(")[0].strip()
            out.append(f"{kind}: " + " > ".join(hits[-3:]))
    return out
