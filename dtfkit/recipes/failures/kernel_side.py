"""Runs in the notebook kernel: each failure reproduced on a cluster and fixed (``reproduce_*``, ``fix_*``), and
the readers of the stack dumps and logs the tasks left.

Never imports TensorFlow: what runs in the tasks is in ``task_side``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dtfkit.course import listing
from dtfkit.errors import TaskFailed, TaskTimeout
from dtfkit.i18n import _
from dtfkit.recipes.failures.task_side import (
    _allreduce_with_localhost_config_in,
    allreduce_ranks,
    keras_fit_under_ps,
    localhost_tf_config,
    op_then_strategy,
    say_done,
    second_server,
    serve_forever,
    serve_until_workers_done,
    server_on_a_free_port,
)

if TYPE_CHECKING:
    from dtfkit.running_cluster import RunningCluster

# Short bounds: a hang is a symptom here, and every case must stay within about 15 s.
HANG_TIMEOUT = 6.0

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


def _log_length(cluster: RunningCluster, task: str) -> int:
    """How many lines ``task``'s log has now (a restarted task's log goes on in the same file)."""
    return len(cluster.logs(task, everything=True).splitlines())


def _log_line(cluster: RunningCluster, task: str, *needles: str, since: int = 0) -> str:
    """The first line of ``task``'s log after line ``since`` that contains every needle (its
    log prefix cut), or ""."""
    for line in cluster.logs(task, everything=True).splitlines()[since:]:
        if all(n in line for n in needles):
            return re.sub(r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+\] ", "", line).strip()
    return ""


def source_without_docstring(fn: Callable[..., Any]) -> str:
    """``fn``'s source with its docstring left out, its comments in the reader's language: the code a case
    runs, to show it."""
    import ast
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(fn))
    defined = ast.parse(source).body[0]
    assert isinstance(defined, (ast.FunctionDef, ast.AsyncFunctionDef))  # the source of a def
    body = defined.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        lines = source.splitlines()
        del lines[body[0].lineno - 1 : body[0].end_lineno]
        source = "\n".join(lines) + "\n"
    return listing.in_the_language(source)


def summary_line(seen: dict[str, Any]) -> str:
    """One sentence for a case's dict: ``"<case> (<issue>): <symptom> — <key line>"`` (the key
    line alone when it starts with the symptom), or with a fixed outcome ``"<case>: fixed:
    <outcome>"``; the same on every machine."""
    if "fixed" in seen:
        return _("{case}: fixed: {fixed}").format(case=seen["case"], fixed=seen["fixed"])
    symptom, line = seen["symptom"], seen.get("key_line") or ""
    shown = _shown_symptom(symptom)
    said = line if line.startswith(symptom) else f"{shown} — {line}" if line else shown
    return f"{seen['case']} ({seen['issue']}): {said}"


def _shown_symptom(symptom: str) -> str:
    """A symptom as the reader reads it ("timed out in join" in their language); the data stays English."""
    if symptom.startswith("timed out in "):
        return _("timed out in {where}").format(where=symptom[len("timed out in ") :])
    if symptom == "still running":
        return _("still running")
    return symptom


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
    frames = {task: tensorflow_frames(stack) for task, stack in stacks.items()}
    stuck = {task: f[-1] for task, f in frames.items() if f}
    function = sorted({name for _file, name in stuck.values()})
    return {
        "symptom": "timed out in " + (", ".join(function) if function else "an unknown place"),
        "stuck": sorted(error.stacks),
        "where": {task: f"{name} ({file})" for task, (file, name) in sorted(stuck.items())},
        "dtfkit_stacks": dict(error.stacks),
        "stacks": {task: stack for task, stack in sorted(stacks.items()) if stack},
        "error": error,
    }


# ---------------------------------------------------------------------------------------
# The cases: reproduce_*() and fix_*(), called in the notebook with a running cluster
# ---------------------------------------------------------------------------------------
def reproduce_collective_after_op(cluster: RunningCluster) -> dict[str, Any]:
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


def fix_collective_after_op(cluster: RunningCluster) -> dict[str, Any]:
    """Fresh processes, the strategy created first: every worker all-reduces (sum 3.0)."""
    return _allreduced(cluster, "collective_after_op", _("the strategy was created before any op"))


def _allreduced(cluster: RunningCluster, name: str, how: str, addresses: bool = False) -> dict[str, Any]:
    """Fresh workers, ``allreduce_ranks`` on each: the fixed outcome of case ``name`` (``addresses``:
    with the cluster the workers found)."""
    cluster.ensure_running(fresh="workers")
    results = cluster.run(allreduce_ranks, timeout=60)
    sums = sorted({r["sum"] for r in results.values()})
    replicas = sorted({r["replicas"] for r in results.values()})
    return _case(
        name,
        sums=sums,
        replicas=replicas,
        workers=sorted(results),
        fixed=_(
            "{how}: {workers} workers all-reduced 1 + 2 = {total:g} with {replicas} replicas in sync"
        ).format(how=how, workers=len(results), total=sums[0], replicas=replicas[0]),
        **({"addresses": results["worker:0"]["cluster"]} if addresses else {}),
    )


def reproduce_missing_worker(cluster: RunningCluster, timeout: float = HANG_TIMEOUT) -> dict[str, Any]:
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
    folder = tempfile.mkdtemp(prefix="dtfkit-stacks-")
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


def _stragglers(cluster: RunningCluster, task: str, since: int = 0) -> list[str]:
    """The tasks the coordination service names after "Example stragglers:" in ``task``'s log."""
    lines = cluster.logs(task, everything=True).splitlines()[since:]
    found = []
    for number, line in enumerate(lines):
        if "Example stragglers" in line:
            found += [x.strip() for x in lines[number + 1 : number + 3] if x.strip().startswith("/job:")]
    return sorted(set(found))


def fix_missing_worker(cluster: RunningCluster) -> dict[str, Any]:
    """Start every task of the cluster: the same function on both workers all-reduces."""
    return _allreduced(cluster, "missing_worker", _("both workers started"))


def reproduce_localhost_config(cluster: RunningCluster, timeout: float = HANG_TIMEOUT) -> dict[str, Any]:
    """Case d on ``LocalCluster(workers=2, start_servers=False, link=...)``: each task its own
    machine (network namespace, address 10.77.x.y), both ``TF_CONFIG``s saying localhost.

    worker:0 leads the coordination service and waits for worker:1; worker:1 looks for
    the service at localhost, its own loopback, where nothing listens. Both hang in the
    strategy's constructor. Returns ``symptom`` ``"timed out in ensure_initialized"``,
    ``key_line`` (worker:0's "Waiting for 1/2 tasks to connect"), ``config`` (the
    localhost cluster) and ``addresses`` (the real ones).
    """
    cluster.ensure_running(fresh="workers")
    folder = tempfile.mkdtemp(prefix="dtfkit-stacks-")
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


def fix_localhost_config(cluster: RunningCluster) -> dict[str, Any]:
    """The real addresses (``cluster.address(...)``, what dtfkit's ``TF_CONFIG`` has): it all-reduces."""
    return _allreduced(cluster, "localhost_config", _("TF_CONFIG with each machine's own address"), True)


def reproduce_join_forever(cluster: RunningCluster, timeout: float = HANG_TIMEOUT) -> dict[str, Any]:
    """Case e on a cluster with a ps: ``server.join()`` on ps:0, bounded by ``timeout``.

    Returns ``symptom`` ``"timed out in join"`` and ``where`` (``join`` in server_lib.py).
    The ps was killed by the timeout; the next case's ``ensure_running`` starts it again.
    """
    cluster.ensure_running()
    try:
        cluster.run(serve_forever, on="ps:0", timeout=timeout)
    except TaskTimeout as error:
        facts = _timed_out(error, error.stacks)
        lines = [line.strip() for line in error.stacks["ps:0"].splitlines() if line.strip()]
        return _case("join_forever", key_line=lines[-1] if lines else "", **facts)
    raise AssertionError("server.join() returned")


def fix_join_forever(cluster: RunningCluster, timeout: float = 60.0) -> dict[str, Any]:
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
        fixed=_("every ps returned once {workers} workers said they were done").format(workers=len(tokens)),
    )


def reproduce_port_taken(cluster: RunningCluster) -> dict[str, Any]:
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


def fix_port_taken(cluster: RunningCluster) -> dict[str, Any]:
    """Port 0: the OS picks a free port (``create_local_server``); it starts."""
    result = cluster.run(server_on_a_free_port, on="worker:0", timeout=30)["worker:0"]
    return _case(
        "port_taken",
        started=result["port"] > 0,
        other_port=result["port"] != result["cluster_port"],
        fixed=_("a server on port 0 started, on a free port the OS chose"),
    )


# _RecoverableSession's record, as TensorFlow 2.21 logs it (tensorflow/python/training/monitored_session.py):
# its first sentence says where the error was caught; the second is the same in all three records.
_RECOVERY_RECORD = re.compile(r"An error was raised[^.]*\. This may be due to a preemption[^.]*\.")


def reproduce_ps_died(
    cluster: RunningCluster,
    checkpoint_dir: str,
    wait: float = 6.0,
    first_checkpoint: int = 20,
    bound: float = 120.0,
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
    while not (line := _log_line(cluster, "worker:0", "An error was raised", since=since)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker:0 logged no recovery within {bound:g} s of ps:0's death")
        _still_running(handle, 1.0)  # waits on the cluster's events (its log lines among them)
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


def fix_ps_died(
    cluster: RunningCluster, seen: dict[str, Any], more_steps: int = 40, bound: float = 120.0
) -> dict[str, Any]:
    """Start the ps again: the chief restores the newest checkpoint, every worker makes a new
    session; once every task trained on from it (``more_steps`` global steps past it), the stop
    file ends the same call. ``sessions`` (2 on every worker), ``restored`` (the step)."""
    restarted_at = time.time()
    cluster.restart("ps", 0)
    tasks = set(seen["handle"].tasks)
    # each task's first row of a new session (the predicate runs under the log's lock)
    back: dict[str, dict] = {}

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
        fixed=_(
            "the ps restarted: every worker made session {session} and training went on to the end"
        ).format(session=sessions[-1]),
    )


def reproduce_keras_fit_ps(cluster: RunningCluster) -> dict[str, Any]:
    """Case h: Keras 3 ``model.fit`` on the chief under ``ParameterServerStrategy``.
    ``symptom`` ``"ValueError"``, ``key_line`` ``"ValueError: To use this dataset, ..."``."""
    cluster.ensure_running(fresh="chief")
    try:
        cluster.run(keras_fit_under_ps, on="chief", timeout=60)
    except TaskFailed as error:
        return _case("keras_fit_ps", **_failed(error))
    raise AssertionError("Keras 3 model.fit trained under ParameterServerStrategy")


def fix_keras_fit_ps(cluster: RunningCluster, steps: int = 20) -> dict[str, Any]:
    """A custom loop with a ``ClusterCoordinator`` (chapter 7's ``train_parameter_server``)."""
    from dtfkit.recipes.strategies_multi import train_parameter_server

    cluster.ensure_running(fresh="chief")
    result = cluster.run(train_parameter_server, kwargs={"steps": steps}, on="chief", timeout=90)["chief:0"]
    return _case(
        "keras_fit_ps",
        completed=result["completed"],
        scheduled=result["scheduled"],
        fixed=_("a ClusterCoordinator ran {completed} of {scheduled} scheduled steps").format(
            completed=result["completed"], scheduled=result["scheduled"]
        ),
    )
