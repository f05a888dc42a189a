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
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from typing import Any

import dtfkit
from dtfkit.errors import TaskFailed, TaskTimeout

# Short bounds: a hang is a symptom here, and every case must stay within about 15 s.
HANG_TIMEOUT = 6.0
# faulthandler writes every task's Python stacks this often while a case may hang.
DUMP_EVERY = 1.5

ISSUES = {
    "collective_after_op": "tensorflow/tensorflow#34568, #30551",
    "missing_worker": "tensorflow/tensorflow#39922",
    "localhost_config": "tensorflow/tensorflow#57372",
    "join_forever": "tensorflow/tensorflow#4713, tensorflow/ecosystem#19",
    "port_taken": "tensorflow/tensorflow#3517",
    "ps_died": "tensorflow/tensorflow#45088",
    "keras_fit_ps": "keras-team/keras#18624",
}


# ---------------------------------------------------------------------------------------
# Functions that run in the tasks
# ---------------------------------------------------------------------------------------
_DUMP_FILES: list = []  # kept open: faulthandler writes to the file's descriptor later


def dump_stacks_every(path: str, seconds: float = DUMP_EVERY) -> None:
    """Write this process's Python stacks to ``path`` every ``seconds``, from a C thread.

    dtfkit asks a stuck task for its stacks through a Python thread, which needs the
    interpreter lock; a TensorFlow call that blocks in C++ without releasing it (the
    ``MultiWorkerMirroredStrategy`` constructor waiting for its peers) never lets that
    thread run. ``faulthandler``'s watchdog is a C thread and needs no lock.
    """
    import faulthandler

    out = open(path, "w")  # noqa: SIM115 - must outlive this call
    _DUMP_FILES.append(out)
    faulthandler.dump_traceback_later(seconds, repeat=True, file=out)


def op_then_strategy() -> None:
    """The notebook trap: run an op, then create ``MultiWorkerMirroredStrategy``.

    Raises ``RuntimeError: Collective ops must be configured at program startup``
    (``Context.configure_collective_ops`` in tensorflow/python/eager/context.py, called by
    ``CollectiveAllReduceExtended._initialize_multi_worker`` in
    tensorflow/python/distribute/collective_all_reduce_strategy.py: the eager context
    already exists, and collectives can only be configured before it does).
    """
    import tensorflow as tf

    tf.constant([1.0, 2.0]) * 2.0  # any op creates the eager context
    tf.distribute.MultiWorkerMirroredStrategy()


def allreduce_ranks(*, stacks_file: str | None = None, timeout_seconds: float | None = None) -> dict:
    """Create ``MultiWorkerMirroredStrategy`` first (from ``TF_CONFIG``), then sum ``rank + 1``
    over every worker: ``{"task", "replicas", "sum", "cluster"}`` (2 workers: sum 3.0).

    ``stacks_file``: dump this task's stacks there every ``DUMP_EVERY`` s while it runs
    (``dump_stacks_every``). ``timeout_seconds``: ``CommunicationOptions(timeout_seconds=...)``
    for the all-reduce.
    """
    if stacks_file:
        dump_stacks_every(stacks_file)
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_seconds)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    resolver = strategy.cluster_resolver
    rank = resolver.task_id

    @tf.function
    def total():
        value = strategy.run(lambda: tf.constant(float(rank + 1)))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

    result = float(total())
    if stacks_file:
        import faulthandler

        faulthandler.cancel_dump_traceback_later()
    return {
        "task": f"{resolver.task_type}:{rank}",
        "replicas": int(strategy.num_replicas_in_sync),
        "sum": result,
        "cluster": resolver.cluster_spec().as_dict(),
    }


def localhost_tf_config() -> dict:
    """This task's ``TF_CONFIG`` with every host replaced by ``localhost`` (the ports kept):
    what a script copied from a one-machine tutorial onto two machines says."""
    config = json.loads(os.environ["TF_CONFIG"])
    config["cluster"] = {
        job: ["localhost:" + address.rsplit(":", 1)[1] for address in hosts]
        for job, hosts in config["cluster"].items()
    }
    return config


def allreduce_with_localhost_config(*, stacks_file: str | None = None) -> dict:
    """``allreduce_ranks`` after setting ``TF_CONFIG`` to ``localhost_tf_config()``."""
    os.environ["TF_CONFIG"] = json.dumps(localhost_tf_config())
    return allreduce_ranks(stacks_file=stacks_file)


def serve_forever() -> None:
    """What the TF1 tutorials run on a ps: ``server.join()``, which returns only when the
    server stops, and a ``tf.distribute.Server`` has no public way to stop it
    (``Server.join`` in tensorflow/python/training/server_lib.py calls ``TF_ServerJoin``)."""
    dtfkit.this_task().server.join()


def _done_queue(tf, ctx, ps_index: int = 0):
    """A queue on a ps that every worker can reach by its shared name (tensorflow/ecosystem#19)."""
    with tf.compat.v1.device(f"/job:ps/task:{ps_index}"):
        return tf.queue.FIFOQueue(len(_trainers(ctx)), tf.int32, shared_name=f"done_queue{ps_index}")


def _trainers(ctx) -> list[str]:
    return [f"{job}:{i}" for job in ("chief", "worker") for i in range(len(ctx.cluster.get(job, ())))]


def serve_until_workers_done(timeout: float = 60.0) -> dict:
    """The ps side of a coordinated shutdown: serve until every worker (and the chief) has
    said it is done, by taking one token each from a queue on this ps, then return.

    Returns ``{"task", "tokens"}`` (the tasks that said they were done, in order)."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    with tf.Graph().as_default():
        queue = _done_queue(tf, ctx, ctx.task_index)
        take = queue.dequeue()
        options = tf.compat.v1.RunOptions(timeout_in_ms=int(timeout * 1000))
        with tf.compat.v1.Session(ctx.target) as sess:
            tokens = [int(sess.run(take, options=options)) for _ in _trainers(ctx)]
    names = _trainers(ctx)
    return {"task": ctx.name, "tokens": [names[t] for t in tokens]}


def say_done() -> str:
    """The worker side: put this task's token into every ps's done queue; returns the task."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    rank = _trainers(ctx).index(ctx.name)
    with tf.Graph().as_default():
        puts = [_done_queue(tf, ctx, ps).enqueue(tf.constant(rank)) for ps in range(ctx.num_ps)]
        with tf.compat.v1.Session(ctx.target) as sess:
            sess.run(puts)
    return ctx.name


def second_server() -> None:
    """Start another ``tf.distribute.Server`` for this task's own ``ClusterSpec`` entry: its
    port is served already (by dtfkit's server for this task).

    Raises ``UnknownError: Could not start gRPC server`` (``GrpcServer::Init`` in
    tensorflow/core/distributed_runtime/rpc/grpc_server_lib.cc, after gRPC's
    "Failed to add port to server" on stderr; TensorFlow 1.x said "Address already in use").
    """
    import tensorflow as tf

    ctx = dtfkit.this_task()
    tf.distribute.Server(ctx.cluster_spec(), job_name=ctx.job_name, task_index=ctx.task_index)


def server_on_a_free_port() -> dict:
    """The fix: let the OS choose the port (port 0): ``Server.create_local_server()``.
    Returns ``{"target", "port", "cluster_port"}`` (the new port and this task's own)."""
    import tensorflow as tf

    ctx = dtfkit.this_task()
    server = tf.distribute.Server.create_local_server()
    port = int(server.target.rsplit(":", 1)[1])
    return {"target": server.target, "port": port, "cluster_port": int(ctx.target.rsplit(":", 1)[1])}


def keras_fit_under_ps() -> None:
    """Keras 3 ``model.fit`` with the model built in ``ParameterServerStrategy.scope()``.

    Keras 3 knows nothing of the strategy's ``ClusterCoordinator``: its TensorFlow
    trainer distributes the data with ``strategy.experimental_distribute_dataset``, and
    iterating that dataset outside a coordinator raises ``ValueError: To use this dataset,
    you need to pass this dataset to ClusterCoordinator.create_per_worker_dataset``
    (``__iter__`` of the parameter-server dataset in tensorflow/python/distribute/input_lib.py).
    Run on the chief of ``LocalCluster(chief=1, ps=1, workers=2, env={"GRPC_FAIL_FAST": "use_caller"})``.
    """
    import numpy as np
    import tensorflow as tf

    from dtfkit.recipes.strategies_multi import coordinator_resolver

    strategy = tf.distribute.ParameterServerStrategy(coordinator_resolver())
    import keras

    with strategy.scope():
        model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    x = np.zeros((32, 4), "float32")
    model.fit(x, x[:, :1], epochs=1, steps_per_epoch=2, verbose=0)


# ---------------------------------------------------------------------------------------
# Reading what a failure left behind (in the notebook's process)
# ---------------------------------------------------------------------------------------
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<name>\S+)')


def tensorflow_frames(stack: str) -> list[tuple[str, str]]:
    """``(file under tensorflow/, function)`` of every TensorFlow frame of a stack, outermost
    first; reads Python's traceback format and faulthandler's (innermost first) alike.

    >>> tensorflow_frames('  File "/v/site-packages/tensorflow/python/training/server_lib.py", line 185, in join')
    [('tensorflow/python/training/server_lib.py', 'join')]
    >>> tensorflow_frames('  File "tensorflow/python/training/server_lib.py", line 185, in join')  # as shown
    [('tensorflow/python/training/server_lib.py', 'join')]
    """
    frames = []
    for match in _FRAME.finditer(stack):
        path = "/" + match["file"]  # a task's stacks show the path as Python finds it (engine/wire/frames.py)
        if "/tensorflow/" in path:
            frames.append(("tensorflow/" + path.split("/tensorflow/", 1)[1], match["name"]))
    if "most recent call first" in stack:
        frames.reverse()
    return frames


def main_thread_dumps(text: str) -> list[str]:
    """The main thread's stack of every dump ``faulthandler`` wrote into ``text``."""
    dumps = []
    for block in re.split(r"^Timeout \([\d:.]+\)!\s*$", text, flags=re.M):
        for thread in re.split(r"\n\s*\n", block):
            if "Current thread" in thread or "<module>" in thread:  # the main thread runs the task's main
                dumps.append(thread.strip())
    return dumps


def _last_dump(stacks_file: str) -> str:
    """The main thread's stack in the last dump the task wrote that shows TensorFlow, or ""."""
    try:
        with open(stacks_file) as f:
            text = f.read()
    except OSError:
        return ""
    for dump in reversed(main_thread_dumps(text)):
        if tensorflow_frames(dump):
            return dump
    return ""


def _innermost(stack: str) -> tuple[str, str] | None:
    frames = tensorflow_frames(stack)
    return frames[-1] if frames else None


def _log_length(cluster, task: str) -> int:
    """How many lines ``task``'s log has now (a restarted task's log goes on in the same file)."""
    return len(cluster.logs(task, everything=True).splitlines())


def _log_line(cluster, task: str, *needles: str, since: int = 0) -> str:
    """The first line of ``task``'s log after line ``since`` that contains every needle (its
    log prefix cut), or ""."""
    for line in cluster.logs(task, everything=True).splitlines()[since:]:
        if all(n in line for n in needles):
            return re.sub(r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+\] ", "", line).strip()
    return ""


def source_without_docstring(fn) -> str:
    """``fn``'s source with its docstring left out: the code a case runs, to show it."""
    import ast
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(fn))
    body = ast.parse(source).body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        lines = source.splitlines()
        del lines[body[0].lineno - 1 : body[0].end_lineno]
        source = "\n".join(lines) + "\n"
    return source


def summary_line(seen: dict[str, Any]) -> str:
    """One sentence for a case's dict: ``"<case> (<issue>): <symptom> — <key line>"`` (the key
    line alone when it starts with the symptom), or with a fixed outcome ``"<case>: fixed:
    <outcome>"``; the same on every machine."""
    if "fixed" in seen:
        return f"{seen['case']}: fixed: {seen['fixed']}"
    symptom, line = seen["symptom"], seen.get("key_line") or ""
    said = line if line.startswith(symptom) else f"{symptom} — {line}" if line else symptom
    return f"{seen['case']} ({seen['issue']}): {said}"


def _case(name: str, **facts: Any) -> dict[str, Any]:
    return {"case": name, "issue": ISSUES[name], **facts}


def _failed(error: TaskFailed) -> dict[str, Any]:
    return {
        "symptom": error.exc_type,
        "task": error.task,
        "key_line": f"{error.exc_type}: {error.remote_message.splitlines()[0]}",
        "error": error,
    }


def _timed_out(error: TaskTimeout, stacks: dict[str, str]) -> dict[str, Any]:
    """The facts of a hang, from each stuck task's stack (dtfkit's, or faulthandler's dump)."""
    where = {task: _innermost(stack) for task, stack in stacks.items()}
    stuck = {task: w for task, w in where.items() if w is not None}
    function = sorted({name for _, name in stuck.values()})
    return {
        "symptom": "timed out in " + (", ".join(function) if function else "an unknown place"),
        "stuck": sorted(error.stacks),
        "where": {task: f"{name} ({file})" for task, (file, name) in sorted(stuck.items())},
        "dtfkit_stacks": dict(error.stacks),
        "stacks": {task: stack for task, stack in sorted(stacks.items()) if stack},
        "error": error,
    }


def _stacks_dir() -> str:
    return tempfile.mkdtemp(prefix="dtfkit-stacks-")


# ---------------------------------------------------------------------------------------
# The cases: reproduce_*() and fix_*(), called in the notebook with a running cluster
# ---------------------------------------------------------------------------------------
def reproduce_collective_after_op(cluster) -> dict[str, Any]:
    """Case a on ``LocalCluster(workers=2, start_servers=False)``: an op ran before the strategy.

    Returns ``symptom`` ``"RuntimeError"`` with ``key_line``
    ``"RuntimeError: Collective ops must be configured at program startup"``.
    """
    cluster.ensure_running(fresh="workers")
    try:
        cluster.run(op_then_strategy, timeout=HANG_TIMEOUT)
    except TaskFailed as error:
        return _case("collective_after_op", **_failed(error))
    raise AssertionError("the strategy was created after an op, and TensorFlow accepted it")


def fix_collective_after_op(cluster) -> dict[str, Any]:
    """Fresh processes, the strategy created first: every worker all-reduces (sum 3.0)."""
    cluster.ensure_running(fresh="workers")
    results = cluster.run(allreduce_ranks, timeout=60)
    return _allreduced("collective_after_op", results, "the strategy was created before any op")


def _allreduced(name: str, results: dict[str, dict], how: str) -> dict[str, Any]:
    sums = sorted({r["sum"] for r in results.values()})
    replicas = sorted({r["replicas"] for r in results.values()})
    return _case(
        name,
        sums=sums,
        replicas=replicas,
        workers=sorted(results),
        fixed=f"{how}: {len(results)} workers all-reduced 1 + 2 = {sums[0]:g} with {replicas[0]} replicas in sync",
    )


def reproduce_missing_worker(cluster, timeout: float = HANG_TIMEOUT) -> dict[str, Any]:
    """Case c: the strategy on worker:0 only (worker:1 "never launched"), bounded by ``timeout``.

    The constructor of ``MultiWorkerMirroredStrategy`` waits in
    ``Context.ensure_initialized`` (tensorflow/python/eager/context.py) until every task
    has connected to the coordination service, which worker:0 leads and which logs
    "Waiting for 1/2 tasks to connect" and the stragglers (coordination_service.cc in
    TensorFlow's xla/tsl/distributed_runtime/coordination). It holds the interpreter lock
    while it waits, so dtfkit's stack request gets no answer: the stacks come from
    ``dump_stacks_every``. Returns ``symptom`` ``"timed out in ensure_initialized"``,
    ``key_line`` (the coordination service's line) and ``stragglers``.
    """
    cluster.ensure_running(fresh="workers")
    folder = _stacks_dir()
    stacks = os.path.join(folder, "worker-0.txt")
    since = _log_length(cluster, "worker:0")
    try:
        cluster.run(allreduce_ranks, kwargs={"stacks_file": stacks}, on="worker:0", timeout=timeout)
    except TaskTimeout as error:
        facts = _timed_out(error, {"worker:0": _last_dump(stacks)})
        line = _log_line(cluster, "worker:0", "Waiting for", "tasks to connect", since=since)
        return _case(
            "missing_worker",
            key_line=line,
            stragglers=_stragglers(cluster, "worker:0", since),
            **facts,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    raise AssertionError("worker:0 created MultiWorkerMirroredStrategy without worker:1")


def _stragglers(cluster, task: str, since: int = 0) -> list[str]:
    """The tasks the coordination service names after "Example stragglers:" in ``task``'s log."""
    lines = cluster.logs(task, everything=True).splitlines()[since:]
    found = []
    for number, line in enumerate(lines):
        if "Example stragglers" in line:
            found += [x.strip() for x in lines[number + 1 : number + 3] if x.strip().startswith("/job:")]
    return sorted(set(found))


def fix_missing_worker(cluster) -> dict[str, Any]:
    """Start every task of the cluster: the same function on both workers all-reduces."""
    cluster.ensure_running(fresh="workers")
    results = cluster.run(allreduce_ranks, timeout=60)
    return _allreduced("missing_worker", results, "both workers started")


def reproduce_localhost_config(cluster, timeout: float = HANG_TIMEOUT) -> dict[str, Any]:
    """Case d on ``LocalCluster(workers=2, start_servers=False, link=...)``: each task its own
    machine (network namespace, address 10.77.x.y), both ``TF_CONFIG``s saying localhost.

    worker:0 leads the coordination service and waits for worker:1; worker:1 looks for
    the service at localhost, its own loopback, where nothing listens. Both hang in the
    strategy's constructor. Returns ``symptom`` ``"timed out in ensure_initialized"``,
    ``key_line`` (worker:0's "Waiting for 1/2 tasks to connect"), ``config`` (the
    localhost cluster) and ``addresses`` (the real ones).
    """
    cluster.ensure_running(fresh="workers")
    folder = _stacks_dir()
    files = {task: os.path.join(folder, task.replace(":", "-") + ".txt") for task in cluster.tasks}
    bad = cluster.run(localhost_tf_config, timeout=30)["worker:0"]["cluster"]
    since = _log_length(cluster, "worker:0")
    try:
        cluster.run(
            _allreduce_with_localhost_config_in, kwargs={"files": files}, on="workers", timeout=timeout
        )
    except TaskTimeout as error:
        facts = _timed_out(error, {task: _last_dump(path) for task, path in files.items()})
        return _case(
            "localhost_config",
            key_line=_log_line(cluster, "worker:0", "Waiting for", "tasks to connect", since=since),
            config=bad,
            addresses=cluster.cluster_spec,
            **facts,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    raise AssertionError("the workers all-reduced with localhost addresses on separate machines")


def _allreduce_with_localhost_config_in(files: dict[str, str]) -> dict:
    return allreduce_with_localhost_config(stacks_file=files[dtfkit.this_task().name])


def fix_localhost_config(cluster) -> dict[str, Any]:
    """The real addresses (``cluster.address(...)``, what dtfkit's ``TF_CONFIG`` has): it all-reduces."""
    cluster.ensure_running(fresh="workers")
    results = cluster.run(allreduce_ranks, timeout=60)
    out = _allreduced("localhost_config", results, "TF_CONFIG with each machine's own address")
    out["addresses"] = results["worker:0"]["cluster"]
    return out


def reproduce_join_forever(cluster, timeout: float = HANG_TIMEOUT) -> dict[str, Any]:
    """Case e on a cluster with a ps: ``server.join()`` on ps:0, bounded by ``timeout``.

    Returns ``symptom`` ``"timed out in join"`` and ``where`` (``join`` in server_lib.py).
    The ps was killed by the timeout; the next case's ``ensure_running`` starts it again.
    """
    cluster.ensure_running()
    try:
        cluster.run(serve_forever, on="ps:0", timeout=timeout)
    except TaskTimeout as error:
        facts = _timed_out(error, error.stacks)
        return _case("join_forever", key_line=_innermost_line(error.stacks["ps:0"]), **facts)
    raise AssertionError("server.join() returned")


def _innermost_line(stack: str) -> str:
    lines = [line.strip() for line in stack.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def fix_join_forever(cluster, timeout: float = 60.0) -> dict[str, Any]:
    """A coordinated shutdown: the ps serves until every worker put a token in its done queue.

    Returns ``ps_returned`` (True), ``tokens`` (the workers, in the order they said done).
    """
    cluster.ensure_running()
    serving = cluster.submit(serve_until_workers_done, kwargs={"timeout": timeout}, on="ps", timeout=timeout)
    done = cluster.run(say_done, timeout=timeout)
    returned = serving.result()
    tokens = sorted(t for r in returned.values() for t in r["tokens"])
    return _case(
        "join_forever",
        ps_returned=sorted(returned),
        tokens=tokens,
        said_done=sorted(done.values()),
        fixed=f"every ps returned once {len(tokens)} workers said they were done",
    )


def reproduce_port_taken(cluster) -> dict[str, Any]:
    """Case g: a second server on worker:0's port. ``symptom`` ``"UnknownError"``, ``key_line``
    ``"UnknownError: Could not start gRPC server"``, ``grpc_line`` (gRPC's own complaint)."""
    cluster.ensure_running()
    since = _log_length(cluster, "worker:0")
    try:
        cluster.run(second_server, on="worker:0", timeout=30)
    except TaskFailed as error:
        facts = _failed(error)
        grpc = _log_line(cluster, "worker:0", "Failed to add port to server", since=since)
        return _case("port_taken", grpc_line=re.sub(r":\d+'", ":<port>'", grpc), **facts)
    raise AssertionError("a second server started on a port already served")


def fix_port_taken(cluster) -> dict[str, Any]:
    """Port 0: the OS picks a free port (``create_local_server``); it starts."""
    result = cluster.run(server_on_a_free_port, on="worker:0", timeout=30)["worker:0"]
    return _case(
        "port_taken",
        started=result["port"] > 0,
        other_port=result["port"] != result["cluster_port"],
        fixed="a server on port 0 started, on a free port the OS chose",
    )


# _RecoverableSession's record, as TensorFlow 2.21 logs it (tensorflow/python/training/monitored_session.py):
# its first sentence says where the error was caught; the second is the same in all three records.
_RECOVERY_RECORD = re.compile(r"An error was raised[^.]*\. This may be due to a preemption[^.]*\.")


def reproduce_ps_died(
    cluster, checkpoint_dir: str, wait: float = 6.0, first_checkpoint: int = 20, bound: float = 120.0
) -> dict[str, Any]:
    """Case f: chapter 4's ``MonitoredTrainingSession`` training (``fault.train_with_checkpoints``)
    on every worker; ps:0 killed once the chief reported a checkpoint at step ``first_checkpoint``
    or later.

    The training has no last step: it ends when ``fix_ps_died`` creates its stop file, so it cannot
    end before the kill however slowly the kill comes. ``MonitoredSession`` catches the
    ``UnavailableError`` and creates a new session, which cannot start without the ps: the call is
    still running ``wait`` seconds after the kill (it would be for ever: ``_RecoverableSession`` in
    tensorflow/python/training/monitored_session.py retries in a loop). Then it waits (up to
    ``bound`` s) until worker:0's log holds TensorFlow's record of the recovery. Returns
    ``symptom`` ``"still running"``, ``key_line`` (the record's first two sentences, as TensorFlow
    wrote them), ``log_line`` (the record's first line, as it is in the log), ``handle`` (the call,
    for ``fix_ps_died``) and ``stop_file``.
    """
    from dtfkit.recipes import fault

    cluster.ensure_running()
    since = _log_length(cluster, "worker:0")
    stop_file = os.path.join(checkpoint_dir, "stop-training")
    handle = cluster.submit(
        fault.train_with_checkpoints,
        kwargs={
            "checkpoint_dir": checkpoint_dir,
            "stop_file": stop_file,
            "step_ms": 10,
            "save_checkpoint_steps": first_checkpoint,
            "save_summaries_steps": None,
            "recovery_gist": False,  # TensorFlow's record only, as a user meets it
        },
        on_error="wait",
        timeout=3 * bound,
    )
    cluster.metrics.wait_for(
        lambda r: r.get("checkpoint", 0) >= first_checkpoint, timeout=bound, since=handle.submitted
    )
    killed_at = time.time()
    cluster.kill("ps", 0)
    still_running = _still_running(handle, wait)
    deadline = time.monotonic() + bound
    line = _log_line(cluster, "worker:0", "An error was raised", since=since)
    while not line:
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker:0 logged no recovery within {bound:g} s of ps:0's death")
        _still_running(handle, 1.0)  # waits on the cluster's events (its log lines among them)
        line = _log_line(cluster, "worker:0", "An error was raised", since=since)
    record = _RECOVERY_RECORD.search(line)
    return _case(
        "ps_died",
        symptom="still running",
        key_line=record.group(0) if record else line,
        log_line=line,
        still_running=still_running,
        killed_at=killed_at,
        handle=handle,
        stop_file=stop_file,
    )


def _still_running(handle, wait: float) -> str:
    """``handle``'s TimeoutError message after ``wait`` s; an AssertionError if the call ended."""
    try:
        handle.result(timeout=wait)
    except TimeoutError as error:
        return str(error)
    raise AssertionError("training ended on its own with the ps dead")


def fix_ps_died(cluster, seen: dict[str, Any], more_steps: int = 40, bound: float = 120.0) -> dict[str, Any]:
    """Start the ps again: the chief restores the newest checkpoint, every worker makes a new
    session; once every task trained on from it (``more_steps`` global steps past it), the stop
    file ends the same call. ``sessions`` (2 on every worker), ``restored`` (the step)."""
    restarted_at = time.time()
    cluster.restart("ps", 0)
    tasks = set(seen["handle"].tasks)
    back: dict[
        str, dict
    ] = {}  # each task's first row of a new session (the predicate runs under the log's lock)

    def all_back(row: dict) -> bool:
        if row.get("session", 0) >= 2 and row["task"] in tasks:
            back.setdefault(row["task"], row)
        return set(back) == tasks

    cluster.metrics.wait_for(all_back, timeout=bound, since=seen["killed_at"])
    restored = back.get("chief:0", {}).get("restored")
    target = (restored or 0) + more_steps
    cluster.metrics.wait_for(lambda r: r.get("step", 0) >= target, timeout=bound, since=restarted_at)
    with open(seen["stop_file"], "w"):
        pass
    results = seen["handle"].result()
    sessions = sorted({r["sessions"] for r in results.values()})
    return _case(
        "ps_died",
        sessions=sessions,
        restored=restored,
        finished=sorted(results),
        restarted_at=restarted_at,
        fixed=f"the ps restarted: every worker made session {sessions[-1]} and training went on to the end",
    )


def reproduce_keras_fit_ps(cluster) -> dict[str, Any]:
    """Case h: Keras 3 ``model.fit`` on the chief under ``ParameterServerStrategy``.
    ``symptom`` ``"ValueError"``, ``key_line`` ``"ValueError: To use this dataset, ..."``."""
    cluster.ensure_running(fresh="chief")
    try:
        cluster.run(keras_fit_under_ps, on="chief", timeout=60)
    except TaskFailed as error:
        return _case("keras_fit_ps", **_failed(error))
    raise AssertionError("Keras 3 model.fit trained under ParameterServerStrategy")


def fix_keras_fit_ps(cluster, steps: int = 20) -> dict[str, Any]:
    """A custom loop with a ``ClusterCoordinator`` (chapter 7's ``train_parameter_server``)."""
    from dtfkit.recipes.strategies_multi import train_parameter_server

    cluster.ensure_running(fresh="chief")
    result = cluster.run(train_parameter_server, kwargs={"steps": steps}, on="chief", timeout=90)["chief:0"]
    return _case(
        "keras_fit_ps",
        completed=result["completed"],
        scheduled=result["scheduled"],
        fixed=f"a ClusterCoordinator ran {result['completed']} of {result['scheduled']} scheduled steps",
    )
