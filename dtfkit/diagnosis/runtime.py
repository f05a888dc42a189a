"""Rules about a running (or failed) cluster: its tasks' states and what they printed.

The patterns are TensorFlow 2.21's own messages; each says where it comes from.

Example::

    log_findings({"worker:0": "RuntimeError: Collective ops must be configured at program startup"})
    # [Finding('collective-startup', 'worker:0', ...)]
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dtfkit.diagnosis.findings import Finding
from dtfkit.i18n import N_, _


@dataclass(frozen=True)
class LogRule:
    code: str
    pattern: re.Pattern[str]
    message: str  # what is wrong; {peer} is the task named in the matching line, if any
    fix: str
    see: str = ""
    cluster_task_only: bool = False  # fires only on the log of a task of a cluster ("worker:1")


_RULES = (
    LogRule(
        "collective-startup",
        # tensorflow/python/eager/context.py, Context.configure_collective_ops (raise RuntimeError).
        re.compile(r"Collective ops must be configured at program startup"),
        N_(
            "MultiWorkerMirroredStrategy was created after this process had already run a TensorFlow op, and collective ops can only be configured before the first one."
        ),
        N_(
            "Create the strategy first thing in the process (right after setting TF_CONFIG), before any tf call; on a LocalCluster use start_servers=False and a fresh process."
        ),
        "tensorflow/tensorflow#34568, #30551",
    ),
    LogRule(
        "collective-already-configured",
        # tensorflow/python/eager/context.py, Context.configure_collective_ops (raise ValueError).
        re.compile(r"Collective ops are already configured"),
        N_("MultiWorkerMirroredStrategy was created a second time in the same process."),
        N_(
            "Create the strategy once per process and reuse it; to change it, start the process again (cluster.ensure_running(fresh=...))."
        ),
    ),
    LogRule(
        "address-in-use",
        # grpc_server_lib.cc: "Could not start gRPC server"; add_port.cc: "Failed to add port to server:
        # No address added out of total 1 resolved for '0.0.0.0:PORT'" (measured: TF 2.21, port held by
        # another socket); older gRPC printed the OS's "Address already in use".
        re.compile(
            r"Address already in use|Could not start gRPC server|Failed to add port to server: No address added|"
            # dtfkit/engine/owner/tasks.py: a restart on a shared network whose port another program holds.
            r"\bPortTaken\b|could not bind its port|another program now holds its old address"
        ),
        N_(
            "This task's server could not listen on its port: something else (another task, an old process, another program) already holds it."
        ),
        N_("End the process that holds the port (an earlier run still alive?) or give the task a free port."),
        "tensorflow/tensorflow#3517",
    ),
    LogRule(
        "server-join-blocks",
        # A stack (TaskTimeout.stacks) inside tensorflow/python/training/server_lib.py, Server.join: it
        # returns only when the server ends, which a ps or worker server never does by itself.
        re.compile(r'server_lib\.py", line \d+, in join'),
        N_(
            "This task is blocked in server.join(), which never returns: the server serves until its process ends."
        ),
        N_(
            "Call server.join() only in a process whose sole job is to serve (a ps); to stop it, end the process (cluster.kill / restart), or leave join out and let your own loop decide when to stop."
        ),
    ),
    LogRule(
        "collective-aborted",
        # What a MultiWorkerMirroredStrategy worker logs when a peer dies or hangs mid all-reduce (TF 2.21,
        # chapter 12's runs): "ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE: Socket closed",
        # "base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort UNAVAILABLE: Socket closed",
        # "BaseCollectiveExecutor::StartAbort DEADLINE_EXCEEDED: Collective has timed out during execution.",
        # and the error: "Collective ops is aborted by: ... The error could be from a previous operation.
        # Restart your program to reset." (tensorflow/core/common_runtime/base_collective_executor.cc,
        # ring_alg.cc; strings of libtensorflow_framework.so.2). StartAbort with other statuses (an input's
        # "End of sequence") is no peer's fault, so only UNAVAILABLE and DEADLINE_EXCEEDED count.
        re.compile(
            r"Collective ops is aborted by|Restart your program to reset|"
            r"(?:BaseCollectiveExecutor::StartAbort|Aborting Ring\w+ with) (?:UNAVAILABLE|DEADLINE_EXCEEDED)|"
            r"Collective has timed out during execution|DEADLINE_EXCEEDED|DeadlineExceeded"
        ),
        N_(
            'A collective (all-reduce) was aborted: a peer{peer} died or stopped taking part, so this worker\'s step failed, and TensorFlow cannot run collectives again in this process ("Restart your program to reset").'
        ),
        N_(
            "Restart every worker, not only the one that failed (cluster.ensure_running(fresh='all')), and let all of them resume from the last checkpoint (tf.train.CheckpointManager, or Keras' BackupAndRestore); first read the log of the task that died or hung (cluster.status(), cluster.logs(task))."
        ),
    ),
    LogRule(
        "tf-config-after-strategy",
        # collective_all_reduce_strategy._initialize_local logs this when the strategy was built with an
        # empty cluster (TF_CONFIG unset or without 'cluster'): the strategy reads TF_CONFIG only once, when
        # it is created. TensorFlow's logger shows INFO lines in interactive shells, or after
        # tf.get_logger().setLevel("INFO").
        re.compile(r"Single-worker MultiWorkerMirroredStrategy with local_devices"),
        N_(
            'This task built MultiWorkerMirroredStrategy as a single worker (TensorFlow logged "Single-worker MultiWorkerMirroredStrategy"): TF_CONFIG was not set, or had no cluster, when the strategy was created, so the task trains alone instead of with its cluster.'
        ),
        N_(
            "Set os.environ['TF_CONFIG'] before creating the strategy (the strategy reads it once, when it is built), then start the task again."
        ),
        cluster_task_only=True,
    ),
    LogRule(
        "peer-unavailable",
        # UnavailableError (tensorflow/python/framework/errors_impl.py); "Socket closed", "failed to connect to
        # all addresses" and the coordination service's "heartbeat timeout" / "tasks are unhealthy" are
        # strings of libtensorflow_cc.so.2 (TF 2.21).
        re.compile(
            r"UnavailableError|UNAVAILABLE:|Socket closed|failed to connect to all addresses|Connection reset by peer|"
            r"Broken pipe|"
            r"heartbeat timeout|tasks are unhealthy"
        ),
        N_(
            "A peer{peer} could not be reached: its process died or was never started, so the call to it failed."
        ),
        N_(
            "Look at that task's state and log (cluster.status(), cluster.logs(task)), start it again (cluster.restart), and retry the step; ParameterServerStrategy's coordinator retries workers but not a lost ps."
        ),
        "tensorflow/tensorflow#45088",
    ),
)
# One finding per task from these, the most specific first: an abort usually quotes the Unavailable cause.
_EXCLUSIVE = ("collective-aborted", "peer-unavailable")
_PEER = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
# TF's gRPC errors name the task that failed to answer: "... from remote target /job:ps/replica:0/task:0 ...".
_REMOTE = re.compile(r"remote target /job:(\w+)/replica:\d+/task:(\d+)")


_CLUSTER_TASK = re.compile(r"(chief|worker|ps|evaluator|master):\d+")


def as_logs(logs: Any) -> dict[str, str]:
    """``{"worker:0": text}`` from a mapping of texts (or exceptions), from one error that names its
    task (``TaskFailed``: ``.task``) or its stuck tasks' stacks (``TaskTimeout``: ``.stacks``); any
    other text or exception counts as the cluster's."""
    if isinstance(logs, Mapping):
        return {str(task): _text(value) for task, value in logs.items()}
    stacks = getattr(logs, "stacks", None)  # TaskTimeout: where each stuck task was, by task
    if isinstance(stacks, Mapping) and stacks:
        return {str(task): str(stack) for task, stack in stacks.items()}
    return {str(getattr(logs, "task", "") or ""): _text(logs)}


def _text(value: Any) -> str:
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def log_findings(logs: Any) -> list[Finding]:
    """Findings from each task's log text (``{"worker:0": text}``; see ``as_logs``)."""
    found: list[Finding] = []
    for task, text in as_logs(logs).items():
        matched: set[str] = set()
        for rule in _RULES:
            if rule.code in _EXCLUSIVE and matched & set(_EXCLUSIVE):
                continue
            if rule.cluster_task_only and not _CLUSTER_TASK.fullmatch(task):
                continue
            match = rule.pattern.search(text)
            if match is None:
                continue
            matched.add(rule.code)
            found.append(
                Finding(
                    rule.code,
                    task,
                    _(rule.message).format(peer=_peer_near(text, match, task)),
                    _(rule.fix),
                    rule.see,
                )
            )
    return found


def _peer_near(text: str, match: re.Match[str], task: str) -> str:
    """`` (ps:0)``: the remote target TF's gRPC error names, else another task's device name on the
    matching line, else ""."""
    for job, index in _REMOTE.findall(text):
        if f"{job}:{index}" != task:
            return f" ({job}:{index})"
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    line = text[start : end if end >= 0 else len(text)]
    for job, index in _PEER.findall(line):
        if f"{job}:{index}" != task:
            return f" ({job}:{index})"
    return ""


# A MultiWorkerMirroredStrategy cluster cannot take one restarted worker back: the survivors' collectives
# are aborted for good ("Restart your program to reset"), so every worker restarts from a checkpoint.
_RESTART_ALL = N_(
    "Read its log (cluster.logs('{task}')) for the cause, fix it, then restart every worker "
    "(cluster.ensure_running(fresh='all')) so all resume from the last checkpoint: the others' collectives "
    "were aborted and cannot run again in their processes."
)


def state_findings(
    status: Mapping[str, str], last_lines: Mapping[str, str], collectives_aborted: bool = False
) -> list[Finding]:
    """Findings from ``cluster.status()``: tasks that are gone or never came up
    (``collectives_aborted``: another task's collectives were aborted, so all must restart)."""
    found = []
    for task, state in status.items():
        tail = last_lines.get(task, "").strip()
        said = _(" Its last lines: {tail!r}.").format(tail=tail) if tail else _(" It printed nothing.")
        if state == "killed" or state.startswith("exited"):
            if state == "killed":
                what = _("{task} was killed (SIGKILL); tasks that talk to it fail or wait.{said}")
                fix = _("Restart it (cluster.restart('{task}')) and let the others resume from a checkpoint.")
            else:
                what = _(
                    "{task}'s process exited with code {code}; tasks that talk to it fail or wait.{said}"
                )
                fix = _(
                    "Read its log (cluster.logs('{task}')) for the cause, fix it, then cluster.restart('{task}')."
                )
            code = state[state.find("(") + 1 : state.rfind(")")] if "(" in state else "?"
            fix = _(_RESTART_ALL) if collectives_aborted else fix
            found.append(
                Finding(
                    "task-died", task, what.format(task=task, code=code, said=said), fix.format(task=task)
                )
            )
        elif state == "starting":
            found.append(
                Finding(
                    "task-not-started",
                    task,
                    _("{task} has not come up yet: its server is not serving.{said}").format(
                        task=task, said=said
                    ),
                    _("Wait for the start to finish, or read its log for the error that holds it up."),
                )
            )
    return found


def cluster_findings(cluster: Any, all_reduce: bool = False) -> list[Finding]:
    """Findings from a ``LocalCluster``'s public state: its tasks' states and logs (``all_reduce``:
    it trains with MultiWorkerMirroredStrategy, so a lost worker means every worker restarts)."""
    if cluster.closed:
        return []
    status = cluster.status()
    last = {task: str(cluster.logs(task, tail=3)) for task in status}
    logs = {task: str(cluster.logs(task, everything=True)) for task in status}
    from_logs = log_findings(logs)
    aborted = all_reduce or any(f.code == "collective-aborted" for f in from_logs)
    return state_findings(status, last, collectives_aborted=aborted) + from_logs
