"""Runs inside the tasks: training under ``MultiWorkerMirroredStrategy`` until a peer dies or hangs, and
with checkpoints, ``PreemptionCheckpointHandler`` or ``BackupAndRestore`` to recover.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from types import SimpleNamespace
from typing import Any

import numpy as np

import dtfkit
from dtfkit.datasets import load_digits
from dtfkit.recipes.strategies_multi.task_side import _mlp, _mwms_setup, _weights, _write_dir

DIED_EXIT_CODE = 17
"""The exit code of a worker these recipes make die (``os._exit``: no clean-up, as a crash)."""


def weights_digest(weights: list[np.ndarray]) -> str:
    """A short digest of a model's weights: equal digests, bit-identical weights.

    Example::

        weights_digest([np.zeros(2, np.float32)])   # 'af5570f5a181'
    """
    h = hashlib.sha256()
    for w in weights:
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()[:12]


def error_gist(message: str, limit: int = 160) -> str:
    """The line of a TensorFlow error message that says what happened.

    A step's error starts with "Graph execution error:" and where the op was defined; the cause
    comes after those lines.

    Example::

        error_gist('Graph execution error:\n\nDetected at node x defined at ...:\n  File "a.py", line 1\n\n'
                   'Collective has timed out during execution.\n\t [[{{node x}}]]')
        # 'Collective has timed out during execution.'
    """
    for line in message.strip().splitlines():
        text = line.strip()
        if text and not text.startswith(("Graph execution error", "Detected at node", "File ", "[[")):
            return text[:limit]
    return message.strip().splitlines()[0][:limit] if message.strip() else ""


def _squeeze(message: str, limit: int = 160) -> str:
    """A long multi-line message on one line: its start and its end."""
    text = " ".join(message.split())
    return text if len(text) <= limit else f"{text[: limit - 70]} ... {text[-60:]}"


def _setup(
    tf,
    collective_timeout: float | None,
    global_batch_size: int,
    learning_rate: float,
    hidden: int,
    seed: int,
) -> SimpleNamespace:
    """Chapter 7's set-up (``_mwms_setup``: the strategy first, before any op, with a ring and
    ``collective_timeout``), a step counter in the strategy's scope and the training step."""
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=collective_timeout,
    )
    run = _mwms_setup(tf, options, global_batch_size, learning_rate, hidden, seed)
    strategy = run.strategy
    with strategy.scope():
        run.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")

    @tf.function
    def train_step(iterator):
        loss, _ = strategy.run(run.step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)

    run.iterator = iter(run.dataset)
    run.train_step = train_step
    return run


def _digest(model) -> str:
    return weights_digest(_weights(model))


def _die() -> None:
    """Exit now, as a crash would: no clean-up, no goodbye to the peers."""
    os._exit(DIED_EXIT_CODE)


def _peers(run: SimpleNamespace) -> list[str]:
    return [t for t in _strategy_tasks(run.resolver.cluster_spec().as_dict()) if t != run.task]


def _mark_path(progress_dir: str, task: str, what: str) -> str:
    return os.path.join(progress_dir, f"{task.replace(':', '_')}.{what}")


def _mark(progress_dir: str, task: str, what: str, value: int | str) -> None:
    """Write ``value`` to ``<progress_dir>/<task>.<what>`` atomically (what a peer waits for)."""
    path = _mark_path(progress_dir, task, what)
    with open(path + ".new", "w") as f:
        f.write(str(value))
    os.replace(path + ".new", path)


def _read_mark(progress_dir: str, task: str, what: str) -> str:
    try:
        with open(_mark_path(progress_dir, task, what)) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _wait_for_peers(progress_dir: str, peers: list[str], what: str, step: int, timeout: float) -> None:
    """Wait until every peer marked ``what`` >= ``step``: then it has surely finished that step.

    The ring all-reduce lets a worker finish a step while a peer still fetches the step's last
    chunk from it; a worker that exited right away could fail that peer's step too, so the step
    at which the survivor stops would depend on timing.
    """
    deadline = time.monotonic() + timeout
    while True:
        behind = [
            p
            for p in peers
            if not _read_mark(progress_dir, p, what).isdigit()
            or int(_read_mark(progress_dir, p, what)) < step
        ]
        if not behind:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{', '.join(behind)} did not finish step {step} within {timeout:g} s")
        time.sleep(0.01)  # polling a file: the wait itself is bounded by the deadline


# ---------------------------------------------------------------------------------------
# Arguments checked before anything starts (a bad one would fail nothing, or fail late)
# ---------------------------------------------------------------------------------------
_NEEDS_FRESH = (
    "Next step: run it on LocalCluster(workers=2, start_servers=False) and call "
    'cluster.ensure_running(fresh="all") before each run.'
)


def _whole(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number of at least {least}, not {value!r}")
    return value


def _step_before_the_end(name: str, value: Any, steps: int) -> int:
    """A step at which something happens; it must come before the last step, or nothing happens."""
    _whole(name, value, 1)
    if value >= steps:
        raise ValueError(
            f"{name}={value} is not before steps={steps}: training would end before anything fails. "
            f"Next step: choose {name} from 1 to {steps - 1}, or raise steps."
        )
    return value


def _positive_seconds(name: str, value: Any, *, optional: bool) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        allowed = "None or " if optional else ""
        raise ValueError(f"{name} must be {allowed}a number of seconds above 0, not {value!r}")
    return float(value)


def _strategy_tasks(cluster: dict[str, list[str]]) -> list[str]:
    """The tasks of ``cluster`` that join MultiWorkerMirroredStrategy's collective group."""
    return [f"{job}:{i}" for job in ("chief", "worker") for i in range(len(cluster.get(job, ())))]


def _check_tasks(name: str, tasks: tuple[str, ...] | list[str], cluster: dict[str, list[str]]) -> None:
    """Every task named in ``name`` is one of the strategy's tasks, and there is a peer to fail."""
    members = _strategy_tasks(cluster)
    if not tasks:
        return
    if len(members) < 2:
        raise ValueError(
            f"the cluster has {len(members)} chief/worker task(s): a failing peer needs at least 2. "
            "Next step: LocalCluster(workers=2, start_servers=False)."
        )
    unknown = [t for t in tasks if t not in members]
    if unknown:
        raise ValueError(
            f"{name} names {', '.join(map(repr, unknown))}, which is not a task of this cluster's "
            f"collective group ({', '.join(members)}): nothing would fail. Next step: name one of those."
        )


def _check_this_task(name: str, tasks: tuple[str, ...] | list[str]) -> None:
    """In a task, before TensorFlow starts: no server of dtfkit's (the strategy starts its own), and
    ``tasks`` are members of the cluster."""
    ctx = dtfkit.this_task()
    if ctx.server is not None:
        raise ValueError(
            f"{ctx.name} already runs a TensorFlow server that dtfkit started, and "
            "MultiWorkerMirroredStrategy starts its own on the same port (TensorFlow would say "
            '"Could not start gRPC server"). ' + _NEEDS_FRESH
        )
    _check_tasks(name, tasks, ctx.cluster)


def _start_together(run: SimpleNamespace, progress_dir: str, peers: list[str], first_step: int) -> None:
    """Trace the step, then wait until every peer has traced it too, so that step ``first_step``
    starts on all workers together.

    A collective timeout bounds a collective from its start, the first step's parameter resolution
    included: ``BaseCollectiveExecutor::CompleteParamsAsync`` (tensorflow/core/common_runtime/
    base_collective_executor.cc) aborts with "Collective has timed out waiting for other workers"
    after ``timeout_seconds``. Workers that reach their first step further apart than that (one
    slower to import, load data or trace on a busy machine) would fail there, before any failure
    of the lesson.
    """
    run.train_step.get_concrete_function(run.iterator)
    _mark(progress_dir, run.task, "ready", first_step)
    _wait_for_peers(progress_dir, peers, "ready", first_step, timeout=120)


FAILURES = ("exit", "freeze", "hang")


def train_until_a_peer_fails(
    *,
    progress_dir: str,
    steps: int = 30,
    fail_at: int = 10,
    failing_task: str = "worker:1",
    failure: str = "exit",
    collective_timeout: float | None = None,
    hang_limit: float = 300.0,
    global_batch_size: int = 64,
    learning_rate: float = 0.1,
    hidden: int = 32,
    seed: int = 0,
) -> dict[str, Any]:
    """Train until ``failing_task`` fails after exactly ``fail_at`` steps; run on every worker of
    ``LocalCluster(workers=2, start_servers=False)`` (for ``"exit"``, one call per worker:
    ``cluster.submit(..., on="worker:0")``, so that the survivor's result stays readable).

    ``progress_dir``: an empty folder the workers share; each writes there the steps it finished,
    and the failing task waits until every peer has finished step ``fail_at`` before it fails, so
    the survivor always completes exactly ``fail_at`` steps. ``failure``:

    - ``"exit"``: the process exits (``os._exit(17)``), as a crash. Its sockets close, so the
      survivor's next all-reduce fails at once with ``UnavailableError`` (connection reset),
      collective timeout or not.
    - ``"freeze"``: the process stops (SIGSTOP, as a machine that froze or fell off the
      network): its sockets stay open, but it stops sending heartbeats to the coordination
      service that the strategy starts (leader: worker:0), which after its heartbeat timeout
      (10 s by default) aborts the survivor's collectives: ``UnavailableError`` "The following
      tasks are unhealthy (stopped sending heartbeats)". The survivor then wakes it (SIGCONT)
      so that it returns.
    - ``"hang"``: the process stays alive but stops training (a deadlock, a stuck input
      pipeline): nothing tells the survivor. With ``collective_timeout=None`` it waits in its
      all-reduce for ever: bound the call with ``timeout=`` and read the ``TaskTimeout``'s
      stacks. With ``collective_timeout=T`` (``CommunicationOptions(timeout_seconds=T)``) its
      step raises ``DeadlineExceededError`` after about ``T`` seconds. The hung task returns once
      the survivor has failed (or after ``hang_limit`` seconds).

    The survivor returns ``{"task": "worker:0", "steps_done": 10, "error_class":
    "DeadlineExceededError", "error_message": "...", "seconds_to_error": 3.0}``; a hung task
    ``{"task": "worker:1", "steps_done": 10, "error_class": None, "hung": True}``. Reports ``step``
    after every step.
    """
    if failure not in FAILURES:
        raise ValueError(f"failure must be one of {', '.join(FAILURES)}, not {failure!r}")
    _whole("steps", steps, 2)
    _step_before_the_end("fail_at", fail_at, steps)
    _positive_seconds("collective_timeout", collective_timeout, optional=True)
    _positive_seconds("hang_limit", hang_limit, optional=False)
    _check_this_task("failing_task", (failing_task,))
    import tensorflow as tf

    run = _setup(tf, collective_timeout, global_batch_size, learning_rate, hidden, seed)
    peers = _peers(run)
    _mark(progress_dir, run.task, "pid", os.getpid())
    if collective_timeout is not None:
        _start_together(run, progress_dir, peers, 1)
    done = 0
    started = time.monotonic()

    def result(error_class: str | None = None, error_message: str = "", **extra: Any) -> dict[str, Any]:
        return {
            "task": run.task,
            "steps_done": done,
            "error_class": error_class,
            "error_message": error_message,
            **extra,
        }

    try:
        for _ in range(steps):
            started = time.monotonic()
            run.train_step(run.iterator)
            done += 1
            _mark(progress_dir, run.task, "trained", done)
            dtfkit.report(step=done)
            if run.task == failing_task and done == fail_at:
                _wait_for_peers(progress_dir, peers, "trained", done, timeout=120)
                if failure == "exit":
                    _die()
                if failure == "freeze":
                    os.kill(os.getpid(), signal.SIGSTOP)  # every thread stops, heartbeats too
                    return result(frozen=True)
                deadline = time.monotonic() + hang_limit
                while not any(_read_mark(progress_dir, p, "failed") for p in peers):
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)  # a hung worker: it does nothing until its peers gave up
                return result(hung=True)
    except tf.errors.OpError as exc:
        _mark(progress_dir, run.task, "failed", type(exc).__name__)
        if failure == "freeze" and _read_mark(progress_dir, failing_task, "pid").isdigit():
            # Wake the frozen peer (a task of this same call) so that it can return.
            os.kill(int(_read_mark(progress_dir, failing_task, "pid")), signal.SIGCONT)
        return result(
            type(exc).__name__,
            error_gist(exc.message),
            seconds_to_error=round(time.monotonic() - started, 1),
        )
    return result()


def train_with_checkpoints(
    *,
    checkpoint_dir: str,
    steps: int = 30,
    save_every: int = 5,
    die_at: int | None = None,
    dying_tasks: tuple[str, ...] = ("worker:1",),
    progress_dir: str | None = None,
    die_before_save: bool = False,
    collective_timeout: float | None = 10.0,
    global_batch_size: int = 64,
    learning_rate: float = 0.1,
    hidden: int = 32,
    seed: int = 0,
) -> dict[str, Any]:
    """Checkpoint-and-restart for all-reduce training (``BackupAndRestore`` in a custom loop);
    run on every worker of ``LocalCluster(workers=2, start_servers=False)``.

    Restores the latest checkpoint of ``tf.train.Checkpoint(model, optimizer, step)`` in
    ``checkpoint_dir`` (none: starts at 0), trains to step ``steps`` and saves after every
    ``save_every``-th step and the last (numbered by the step). Every worker saves, as
    TensorFlow's multi-worker tutorial does (the chief into ``checkpoint_dir``, the others into a
    folder of their own there); all of them restore the chief's.

    ``die_at``: each task of ``dying_tasks`` exits (``os._exit(17)``) after step ``die_at``: after
    that step's save (``die_before_save=False``) or right before it, the worst moment. It first
    waits until every peer has finished that step (and its save), through marks in
    ``progress_dir`` (default: ``<checkpoint_dir>/progress``), so what the survivors saved does
    not depend on timing. A survivor's next step fails (``UnavailableError``: the dead peer's
    connection is reset) and it returns what it had; ``collective_timeout`` bounds the wait on a
    peer that hangs instead.

    Returns ``{"task", "resumed_from" (the step restored, 0 if none), "first_step" (the first
    step trained in this run), "steps_done" (the last step reached), "last_saved_step",
    "error_class" (None, or the survivor's error), "error_message", "weights_digest",
    "restored_digest" (the weights right after the restore; None without a checkpoint),
    "saved_digests" ({step: digest of the weights this task saved})}``.
    Reports ``step`` after every step and ``saved`` (with ``digest``) after every save.
    """
    _whole("steps", steps, 1)
    _whole("save_every", save_every, 1)
    if die_at is not None:
        _step_before_the_end("die_at", die_at, steps)
    _positive_seconds("collective_timeout", collective_timeout, optional=True)
    _check_this_task("dying_tasks", tuple(dying_tasks) if die_at is not None else ())
    import tensorflow as tf

    run = _setup(tf, collective_timeout, global_batch_size, learning_rate, hidden, seed)
    write_dir = _write_dir(checkpoint_dir, run)
    checkpoint = tf.train.Checkpoint(model=run.model, optimizer=run.optimizer, step=run.step)
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
    manager = tf.train.CheckpointManager(checkpoint, write_dir, max_to_keep=2)
    resumed_from = int(run.step.numpy())
    # What TensorFlow restored, to compare with what the saving run had (recovery_summary).
    restored_digest = _digest(run.model) if latest else None
    last_saved = resumed_from if latest else None
    saved_digests: dict[int, str] = {}
    dying = die_at is not None and run.task in dying_tasks
    progress = progress_dir or os.path.join(checkpoint_dir, "progress")
    os.makedirs(progress, exist_ok=True)
    peers = _peers(run)
    if collective_timeout is not None:
        _start_together(run, progress, peers, resumed_from + 1)
    out: dict[str, Any] = {
        "task": run.task,
        "resumed_from": resumed_from,
        "first_step": resumed_from + 1,
        "restored_digest": restored_digest,
        "error_class": None,
        "error_message": "",
    }
    try:
        while int(run.step.numpy()) < steps:
            run.train_step(run.iterator)
            now = int(run.step.assign_add(1).numpy())
            dtfkit.report(step=now)
            _mark(progress, run.task, "trained", now)
            if dying and die_before_save and now == die_at:
                _wait_for_peers(progress, peers, "trained", now, timeout=120)
                _die()
            if now % save_every == 0 or now == steps:
                manager.save(checkpoint_number=now)
                last_saved = now
                saved_digests[now] = _digest(run.model)
                dtfkit.report(saved=now, digest=saved_digests[now])
            _mark(progress, run.task, "saved", now)
            if dying and now == die_at:
                _wait_for_peers(progress, peers, "saved", now, timeout=120)
                _die()
    except tf.errors.OpError as exc:
        out.update(error_class=type(exc).__name__, error_message=error_gist(exc.message))
    if write_dir != checkpoint_dir:
        tf.io.gfile.rmtree(write_dir)
    out.update(
        steps_done=int(run.step.numpy()),
        last_saved_step=last_saved,
        saved_digests=saved_digests,
        weights_digest=_digest(run.model),
    )
    return out


def train_with_preemption_handler(
    *,
    checkpoint_dir: str,
    steps: int = 30,
    signal_at: int | None = None,
    signal_task: str = "worker:1",
    global_batch_size: int = 64,
    learning_rate: float = 0.1,
    hidden: int = 32,
    seed: int = 0,
) -> dict[str, Any]:
    """Train under ``tf.distribute.experimental.PreemptionCheckpointHandler``; run on every worker
    of ``LocalCluster(workers=2, start_servers=False)``.

    The handler restores the latest checkpoint in ``checkpoint_dir`` when it is created (its
    ``step`` variable is the number of steps already done) and wraps every step
    (``handler.run``). ``signal_task`` sends itself SIGTERM after step ``signal_at`` (a preemption
    notice; the handler has installed its own SIGTERM handler): before its next step it publishes
    "save after step ``signal_at + 1``" in the coordination service, every worker saves after that
    step and calls ``exit_fn`` (default outside Google Cloud: ``sys.exit(42)``, a ``SystemExit``
    this recipe catches).

    Keep ``signal_at < steps - 1``: the save comes before the step after the agreed one.
    The handler's checkpoints are numbered by its saves (``ckpt-1``), not by the step; it keeps one.

    Returns ``{"task", "resumed_from", "steps_done", "exit_code" (None when training ended),
    "saved_step" (the step of the handler's save; None without a preemption), "weights_digest"}``.
    Reports ``step`` after every step.
    """
    _whole("steps", steps, 1)
    if signal_at is not None and (_whole("signal_at", signal_at, 1) >= steps - 1):
        raise ValueError(
            f"signal_at={signal_at} leaves no step to save after: the handler saves after step signal_at + 1, "
            f"before step signal_at + 2, and steps={steps}. Next step: signal_at from 1 to {steps - 2}."
        )
    _check_this_task("signal_task", (signal_task,) if signal_at is not None else ())
    import tensorflow as tf

    run = _setup(tf, None, global_batch_size, learning_rate, hidden, seed)
    # The step count is a variable of the checkpoint, as TensorFlow advises: the handler's own
    # ``total_run_calls`` is deprecated (and its warning names this file by its absolute path).
    # The handler saves at the start of ``run``, before the step, so the count includes every step done.
    checkpoint = tf.train.Checkpoint(model=run.model, optimizer=run.optimizer, step=run.step)
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(run.resolver, checkpoint, checkpoint_dir)
    resumed_from = int(run.step.numpy())
    out: dict[str, Any] = {
        "task": run.task,
        "resumed_from": resumed_from,
        "exit_code": None,
        "saved_step": None,
    }
    try:
        while int(run.step.numpy()) < steps:
            handler.run(run.train_step, run.iterator)
            done = int(run.step.assign_add(1).numpy())
            dtfkit.report(step=done)
            if run.task == signal_task and done == signal_at:
                signal.raise_signal(signal.SIGTERM)
    except SystemExit as exc:  # the handler's exit_fn, after its checkpoint
        out.update(exit_code=exc.code, saved_step=int(run.step.numpy()))
    out.update(steps_done=int(run.step.numpy()), weights_digest=_digest(run.model))
    return out


def _compiled_mlp(keras, hidden: int, seed: int):
    """The MLP compiled for ``model.fit``: SGD at 0.1, cross-entropy on the logits."""
    model = _mlp(keras, hidden, seed)
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


class _Interrupted(Exception):
    """Raised by the test callback to end a ``fit`` as a crash would."""


def fit_with_backup_and_restore(
    *,
    backup_dir: str,
    epochs: int = 4,
    interrupt_after_epoch: int = 2,
    steps_per_epoch: int = 5,
    batch_size: int = 32,
    hidden: int = 32,
    seed: int = 0,
) -> dict[str, Any]:
    """``keras.callbacks.BackupAndRestore`` where Keras 3 supports it: ``model.fit`` on one worker,
    without a distribution strategy. Run in any one task.

    A first ``fit`` is interrupted (an exception from a callback) at the end of epoch
    ``interrupt_after_epoch`` (1-based), after ``BackupAndRestore`` backed that epoch up; a second
    ``fit`` with a new model and the same ``backup_dir`` resumes at the next epoch.

    Returns ``{"first_run_epochs": [1, 2], "second_run_epochs": [3, 4], "lost_epochs": 0,
    "backup_left": False}`` (epochs 1-based; ``backup_left``: whether the backup is still there
    after the completed fit, which deletes it by default).
    """
    import keras

    x, y = load_digits(split="train", seed=seed)
    x = x.astype("float32")

    class Epochs(keras.callbacks.Callback):
        def __init__(self, stop_after: int | None):
            super().__init__()
            self.seen: list[int] = []
            self.stop_after = stop_after

        def on_epoch_begin(self, epoch, logs=None):
            self.seen.append(epoch + 1)

        def on_epoch_end(self, epoch, logs=None):
            if self.stop_after is not None and epoch + 1 == self.stop_after:
                raise _Interrupted(f"interrupted after epoch {epoch + 1}")

    def fit(stop_after: int | None) -> list[int]:
        model = _compiled_mlp(keras, hidden, seed)
        epochs_seen = Epochs(stop_after)
        backup = keras.callbacks.BackupAndRestore(backup_dir)
        try:
            model.fit(
                x,
                y,
                batch_size=batch_size,
                epochs=epochs,
                steps_per_epoch=steps_per_epoch,
                callbacks=[backup, epochs_seen],  # the backup first: it saves before the interruption
                verbose=0,
            )
        except _Interrupted:
            pass
        return epochs_seen.seen

    first = fit(interrupt_after_epoch)
    second = fit(None)
    return {
        "first_run_epochs": first,
        "second_run_epochs": second,
        "lost_epochs": first[-1] - (second[0] - 1),
        "backup_left": os.path.exists(backup_dir) and bool(os.listdir(backup_dir)),
    }


def try_fit_under_mwms(*, backup_dir: str, epochs: int = 2, steps_per_epoch: int = 5) -> dict[str, Any]:
    """Try Keras 3 ``model.fit`` with ``BackupAndRestore`` under ``MultiWorkerMirroredStrategy``; run
    on every worker of ``LocalCluster(workers=2, start_servers=False)``, with a ``timeout``.

    Returns ``{"task", "fit_ran": False, "error_class": "ValueError", "error_message": ...}`` in
    TensorFlow 2.21 with Keras 3 (keras-team/keras#20585): the reason the chapter's recovery is
    a ``CheckpointManager`` in a custom loop.
    """
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import keras

    resolver = strategy.cluster_resolver
    task = f"{resolver.task_type}:{resolver.task_id}"
    x, y = load_digits(split="train")
    ds = tf.data.Dataset.from_tensor_slices((x.astype("float32"), y.astype("int64"))).repeat().batch(32)
    with strategy.scope():
        model = _compiled_mlp(keras, 32, 0)
    try:
        model.fit(
            ds,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            callbacks=[keras.callbacks.BackupAndRestore(backup_dir)],
            verbose=0,
        )
    except Exception as exc:  # noqa: BLE001 - what fails, and how, is the result
        return {
            "task": task,
            "fit_ran": False,
            "error_class": type(exc).__name__,
            "error_message": _squeeze(str(exc)),
        }
    return {"task": task, "fit_ran": True, "error_class": None, "error_message": ""}
