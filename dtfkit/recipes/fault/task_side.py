"""Runs inside the tasks: fault-tolerant TF1 training with checkpoints (``train_with_checkpoints``), its hooks
and session creator, and the readers of what a run left on disk.

TensorFlow only inside functions: the kernel imports this module to name what it sends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from typing import Any

import dtfkit
from dtfkit.i18n import _
from dtfkit.recipes.tf1.task_side import (
    _sgd_model,
    on_ps,
    session_config,
    train_shard,
    training_session,
)


def train_with_checkpoints(
    *,
    checkpoint_dir: str,
    steps: int = 1_000_000,
    stop_file: str | None = None,
    save_checkpoint_steps: int = 20,
    save_summaries_steps: int | None = 20,
    log_every: int = 0,
    step_ms: float = 20.0,
    batch_size: int = 32,
    learning_rate: float = 0.1,
    hidden: int = 32,
    recovery_wait_secs: float = 0.2,
    stop_grace_secs: float = 1.0,
    seed: int = 0,
    run_name: str = "fault",
    tf_log_level: str = "INFO",
    log_checkpoints: bool = True,
    recovery_gist: bool = True,
) -> dict[str, Any]:
    """Train the digits MLP asynchronously until global step ``steps`` (or until
    ``stop_file`` exists); returns this worker's summary.

    Args:
        checkpoint_dir: a folder every task can reach (on one machine: a temporary
            folder). The chief restores the latest checkpoint from it whenever it
            creates a session, and saves one every ``save_checkpoint_steps``.
        steps: the global step at which ``StopAtStepHook`` ends training.
        stop_file: training also ends once this file exists (the notebook creates it
            to end a run whose length depends on what happened during it).
        save_summaries_steps: the chief writes the loss summary this often (None: never).
        log_every: ``LoggingTensorHook`` prints loss and global step this often (0: off;
            shown only at ``tf_log_level="INFO"``).
        step_ms: sleep per step, so that a person (or a notebook) can act mid-run.
        recovery_wait_secs: how often a non-chief checks whether the chief has
            initialized or restored the model. TensorFlow's default is 30 s.
        run_name: variable scope; keep it the same across runs that share a checkpoint.
        tf_log_level: TensorFlow's Python log level while this runs. At "INFO" (default) the
            log shows what the session creators and hooks do: "Restoring parameters from
            ...", "Waiting for model to be ready", "An error was raised. This may be due to
            a preemption ... Error: <the error, and the Python stack where its op was
            created>" (``_RecoverableSession``, as TensorFlow wrote it), "Saving checkpoints
            for N" (unless ``log_checkpoints=False``); deprecation notices are left out.
        recovery_gist: before each of TensorFlow's "An error was raised" records, print one
            line of dtfkit's own with the error's gist, labelled as dtfkit's ("dtfkit, in
            short: An error was raised: UnavailableError: recvmsg:Connection reset by peer");
            TensorFlow's record follows as it is.

    Reports, per step: ``step`` (global step), ``local_step``, ``loss``; per session
    created: ``session`` (1, 2, ...) with the global step it starts from; per
    checkpoint written (chief): ``checkpoint`` (its step).
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    x, y, rng = train_shard(ctx, seed)

    graph = tf.Graph()
    with (
        tidy_tf_log(tf, tf_log_level, log_checkpoints, recovery_gist),
        graph.as_default(),
        tf.compat.v1.variable_scope(run_name),
    ):
        with on_ps(tf, ctx):
            images, labels, loss, global_step, train_op = _sgd_model(tf, hidden, learning_rate)
            summary_op = tf.compat.v1.summary.scalar("loss", loss)

        # The chief's ReportHook looks up the checkpoint it restored, so it runs before the
        # CheckpointSaverHook (which saves a new one as soon as a session is created).
        report = ReportHook(tf, global_step, loss, checkpoint_dir if ctx.is_chief else None)
        hooks = [tf.compat.v1.train.StopAtStepHook(last_step=steps)]
        if log_every:
            hooks.append(
                tf.compat.v1.train.LoggingTensorHook(
                    {"global_step": global_step, "loss": loss}, every_n_iter=log_every
                )
            )
        config = session_config(tf, ctx)
        if ctx.is_chief:
            chief_hooks = [
                report,
                tf.compat.v1.train.CheckpointSaverHook(
                    checkpoint_dir,
                    save_steps=save_checkpoint_steps,
                    listeners=[CheckpointReporter(tf)],
                ),
            ]
            if save_summaries_steps:
                chief_hooks.append(
                    tf.compat.v1.train.SummarySaverHook(
                        save_steps=save_summaries_steps, output_dir=checkpoint_dir, summary_op=summary_op
                    )
                )
            # The hooks above replace the default ones (saver every 600 s, summaries and step
            # counter every 100 steps: training_session turns the last two off).
            session = training_session(
                tf,
                ctx,
                hooks=hooks,
                config=config,
                checkpoint_dir=checkpoint_dir,  # where the chief restores from
                chief_only_hooks=chief_hooks,
                stop_grace_period_secs=stop_grace_secs,
                save_checkpoint_secs=None,
                save_checkpoint_steps=None,
            )
        else:
            # MonitoredTrainingSession(is_chief=False) is MonitoredSession with a
            # WorkerSessionCreator, which checks every 30 s whether the chief has made the
            # model ready. The same, checking every `recovery_wait_secs`:
            session = tf.compat.v1.train.MonitoredSession(
                session_creator=FastWorkerSessionCreator(tf, ctx.target, config, recovery_wait_secs),
                hooks=[report, *hooks],
                stop_grace_period_secs=stop_grace_secs,
            )
        local_steps, value = 0, float("nan")
        with session as sess:
            while not sess.should_stop():
                if stop_file and os.path.exists(stop_file):
                    break
                idx = rng.integers(0, len(x), batch_size)
                if step_ms:
                    time.sleep(step_ms / 1000.0)
                _, value = sess.run([train_op, loss], {images: x[idx], labels: y[idx]})
                local_steps += 1
    return {
        "local_steps": local_steps,
        "sessions": report.sessions,
        "first_step": report.session_steps[0] if report.session_steps else None,
        "session_steps": report.session_steps,
        "global_step": report.last_step,
        "loss": float(value),
    }


def checkpoint_writers(ps_tasks: int, hidden: int = 32) -> dict[str, list[str]]:
    """Where the ops that write a checkpoint run, for the graph of ``train_with_checkpoints``
    with its variables on ``ps_tasks`` parameter servers (the graph is built, nothing runs).

    The saver is the one ``MonitoredTrainingSession`` makes (``Scaffold``:
    ``Saver(sharded=True, allow_empty=True)``): one ``SaveV2`` per device holding variables,
    then one ``MergeV2Checkpoints`` on the last of those devices, which writes ``.index``
    (``_AddShardedSaveOpsForV2`` in ``tensorflow/python/training/saver.py``).

    >>> checkpoint_writers(2)     # doctest: +SKIP
    {'SaveV2': ['/job:ps/task:0/device:CPU:0', '/job:ps/task:1/device:CPU:0'],
     'MergeV2Checkpoints': ['/job:ps/task:1/device:CPU:0']}
    """
    import tensorflow as tf

    with tf.Graph().as_default() as graph:
        setter = tf.compat.v1.train.replica_device_setter(
            ps_tasks=ps_tasks, worker_device="/job:worker/task:0"
        )
        with tf.compat.v1.device(setter):
            _sgd_model(tf, hidden, 0.1)
        tf.compat.v1.train.Saver(sharded=True, allow_empty=True)
        ops = graph.get_operations()
    return {kind: [op.device for op in ops if op.type == kind] for kind in ("SaveV2", "MergeV2Checkpoints")}


def ReportHook(tf, global_step, loss, checkpoint_dir: str | None = None):  # noqa: N802 - needs tf
    """A ``SessionRunHook`` that reports every step and every new session to the notebook.

    With ``checkpoint_dir`` (the chief's), a new session also reports ``restored``: the
    step of the checkpoint the chief has just restored, or -1 when there was none and
    it initialized the variables.
    """

    class _ReportHook(tf.compat.v1.train.SessionRunHook):
        def __init__(self):
            self.sessions = 0
            self.session_steps: list[int] = []
            self.local_steps = 0
            self.last_step: int | None = None

        def after_create_session(self, session, coord):
            # Called for the first session and again after every recovery.
            step = int(session.run(global_step))
            self.sessions += 1
            self.session_steps.append(step)
            extra = {}
            if checkpoint_dir is not None:
                latest = tf.train.latest_checkpoint(checkpoint_dir)
                extra["restored"] = int(latest.rsplit("-", 1)[1]) if latest else -1
            dtfkit.report(step=step, session=self.sessions, **extra)

        def before_run(self, run_context):
            return tf.compat.v1.train.SessionRunArgs({"step": global_step, "loss": loss})

        def after_run(self, run_context, run_values):
            self.local_steps += 1
            self.last_step = int(run_values.results["step"])
            dtfkit.report(step=self.last_step, loss=run_values.results["loss"], local_step=self.local_steps)

    return _ReportHook()


def CheckpointReporter(tf: Any) -> Any:  # noqa: N802
    """A ``CheckpointSaverListener`` that reports the step of every checkpoint written."""

    class _CheckpointReporter(tf.compat.v1.train.CheckpointSaverListener):
        def after_save(self, session, global_step_value):
            dtfkit.report(step=int(global_step_value), checkpoint=int(global_step_value))

    return _CheckpointReporter()


def FastWorkerSessionCreator(tf, master: str | None, config, recovery_wait_secs: float):  # noqa: N802
    """``WorkerSessionCreator`` that polls for a ready model every ``recovery_wait_secs``."""

    class _FastWorkerSessionCreator(tf.compat.v1.train.SessionCreator):
        def __init__(self):
            self.scaffold = tf.compat.v1.train.Scaffold()

        def create_session(self):
            self.scaffold.finalize()
            manager = tf.compat.v1.train.SessionManager(
                local_init_op=self.scaffold.local_init_op,
                ready_op=self.scaffold.ready_op,
                ready_for_local_init_op=self.scaffold.ready_for_local_init_op,
                graph=tf.compat.v1.get_default_graph(),
                recovery_wait_secs=recovery_wait_secs,
            )
            return manager.wait_for_session(master, config=config, max_wait_secs=600)

    return _FastWorkerSessionCreator()


_DROP = re.compile(r"is deprecated and will be removed|Calling checkpoint listeners|^all_hooks ")
_RECOVERY = re.compile(r"^An error was raised")


class _TidyLog(logging.Filter):
    """Keeps TensorFlow's INFO log readable in a notebook (see ``train_with_checkpoints``): drops
    deprecation notices (and, unless ``log_checkpoints``, "Saving checkpoints for"); never changes
    a record it lets through. With ``recovery_gist``, writes dtfkit's one-line gist of each
    "An error was raised" record just before it, on the stream TensorFlow's handler writes to."""

    def __init__(self, log_checkpoints: bool, recovery_gist: bool = False):
        super().__init__()
        self.log_checkpoints = log_checkpoints
        self.recovery_gist = recovery_gist

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if _DROP.search(text):
            return False
        if not self.log_checkpoints and text.startswith("Saving checkpoints for"):
            return False
        if self.recovery_gist and _RECOVERY.match(text) and isinstance(record.args, tuple) and record.args:
            gist = recovery_gist_line(text, record.args[-1])
            _write_beside(record, _("dtfkit, in short: {gist}").format(gist=gist))
        return True


def recovery_gist_line(text: str, error: BaseException | Any) -> str:
    """``An error was raised[ while a session was being created]: UnavailableError: <cause>``: the
    gist of one of ``_RecoverableSession``'s records (``text``: the record's message)."""
    if "being created" in text:
        return _("An error was raised while a session was being created: {error}").format(
            error=error_gist(error)
        )
    return _("An error was raised: {error}").format(error=error_gist(error))


def _write_beside(record: logging.LogRecord, line: str) -> None:
    """Write ``line`` to the stream of the handler that will write ``record`` (so it stays in order)."""
    import sys

    logger = logging.getLogger(record.name)
    streams = [h.stream for h in logger.handlers if isinstance(h, logging.StreamHandler)]
    stream = streams[0] if streams else sys.stderr
    stream.write(line + "\n")
    stream.flush()


def error_gist(error: BaseException | Any) -> str:
    """``UnavailableError: recvmsg:Connection reset by peer`` for a long TF error."""
    name = type(error).__name__
    text = str(getattr(error, "message", error))
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("Graph execution error", "=====", "Additional GRPC", "[[")):
            continue
        if re.match(r"^([A-Z_]+: )?From /job:", line):
            continue
        return f"{name}: {line}"
    return name


@contextlib.contextmanager
def tidy_tf_log(tf, level: str, log_checkpoints: bool = True, recovery_gist: bool = False):
    """Set TensorFlow's Python log level and the readability filter, for a block."""
    logger = tf.get_logger()
    previous = logger.level
    tidy = _TidyLog(log_checkpoints, recovery_gist)
    logger.setLevel(level)
    logger.addFilter(tidy)
    try:
        yield
    finally:
        logger.removeFilter(tidy)
        logger.setLevel(previous)


def forget_model() -> None:
    """Empty the variables of every ps (``tf.compat.v1.Session.reset``), as a ps restart
    would, without restarting anything. Run it in one task (``on="worker:0"``)."""
    import tensorflow as tf

    tf.compat.v1.Session.reset(dtfkit.this_task().target)


def read_scalars(directory: str, tag: str = "loss") -> list[tuple[int, float]]:
    """``(step, value)`` of every scalar summary whose tag ends with ``tag`` in the event
    files of ``directory`` (what TensorBoard would plot). Run it in a task."""
    import glob

    import tensorflow as tf

    out = []
    with tidy_tf_log(tf, "WARNING"):  # summary_iterator's deprecation notice teaches nothing here
        for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
            for event in tf.compat.v1.train.summary_iterator(path):
                for value in event.summary.value:
                    if value.tag == tag or value.tag.endswith("/" + tag):
                        out.append((int(event.step), float(value.simple_value)))
    return out
