"""The wire protocol between a cluster's owner and its tasks, in one place.

Three channels carry it:

- **The task config** (``TaskConfig``), JSON in the ``DTFKIT_TASK`` environment
  variable of a task process: who it is and how to reach its owner.
- **Messages** on the control connection (a ``multiprocessing`` connection with an
  authkey): each one a named tuple below. The task sends ``Hello``
  first, then ``Port``, ``Ready``, replies to calls and metric rows; the owner
  sends ``Spec``, ``Call``, ``Interrupt``, ``DumpStacks`` and ``Exit``.
- **Done marks** in the task's output stream: a task writes ``OUTPUT_DONE_MARK<call id>``
  after a call's output and before its reply, so the owner accepts a reply only once
  every line the function printed is in (and shown by the cell that made the call).

Example::

    >>> cfg = TaskConfig(task="worker:1", gen=3, mode="serve", control="/tmp/x.sock")
    >>> TaskConfig.from_json(cfg.to_json()) == cfg
    True
    >>> parse_done_mark(OUTPUT_DONE_MARK + "7")
    ('', 'output_done', 7)
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

CONFIG_ENV = "DTFKIT_TASK"
# serve: start a tf.distribute.Server; noserve: TensorFlow imported and TF_CONFIG set,
# no server (strategies that start their own); script: run a launched script;
# client: no server, no port (a separate client).
CLUSTER_MODES = ("serve", "noserve", "script")  # what a cluster's tasks do (ClusterSettings.mode)
TASK_MODES = (*CLUSTER_MODES, "client")


@dataclass(frozen=True)
class TaskConfig:
    """What a task process needs to know before it can talk to its owner."""

    task: str  # "worker:1"
    gen: int  # generation: a restarted task gets a new one, and stale events are dropped
    mode: str  # one of TASK_MODES
    control: str = ""  # the owner's control address (a Unix socket path)
    authkey: str = ""  # hex
    port: int | None = None  # the port to bind (a restart keeps its address); None: any
    tensorflow: bool = True  # False: a plain Python task (FakeLauncher), no TensorFlow, no server
    script: str | None = None
    script_args: tuple[str, ...] = ()
    linger: bool = False  # a finished script stays (serving) until the launcher ends it
    cwd: str | None = None  # the cluster's working directory
    stacks_file: str | None = None  # where faulthandler writes the task's stacks (dumps.py)
    # The task's whole environment, GPU settings included. The owner's side only: the
    # process gets it as its environment, so to_json() leaves it out.
    env: dict[str, str] = field(default_factory=dict, compare=False)
    # What the launcher adds for its task (the launcher's alone, JSON-able). The local
    # launchers use "netns_pid" (join this process's network namespace first),
    # "netns_ready_fd" (an inherited pipe: EOF once that namespace exists, see
    # netns.wait_ready), "link" ({"socket", "address", "rate", "delays"}: a namespace of the
    # task's own, linked to the anchor's hub; "delays", when not None: a relay in front of
    # its server, see relay.py) and "env" (adoption: what to set, None: unset).
    launch: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in TASK_MODES:
            raise ValueError(f"unknown task mode {self.mode!r}")

    def to_json(self) -> str:
        """The config as the task process reads it (``env`` left out: it is the process's own)."""
        data = dataclasses.asdict(self)
        del data["env"]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> TaskConfig:
        data = json.loads(text)
        data["script_args"] = tuple(data.get("script_args") or ())
        data.pop("env", None)
        return cls(**data)

    @property
    def job(self) -> str:
        return self.task.partition(":")[0]

    @property
    def index(self) -> int:
        return int(self.task.partition(":")[2])


# ---------------------------------------------------------------- task -> owner
class Hello(NamedTuple):
    """First message of a cold task: who it is."""

    task: str
    gen: int
    pid: int


class Port(NamedTuple):
    port: int


class Ready(NamedTuple):
    target: str | None
    pid: int
    # When each step of the task's start ended, as ("phase", time.monotonic(), time.process_time()) in
    # order (the monotonic clock is the machine's, so the owner can set them against its own spawn time;
    # the process time is the task's CPU so far): where a cold start goes.
    phases: tuple[tuple[str, float, float], ...] = ()


class StartFailed(NamedTuple):
    stage: str  # "bind" | "import" | "setup" | "link"
    traceback: str


class Result(NamedTuple):
    call_id: int
    value: bytes  # cloudpickled


class Error(NamedTuple):
    call_id: int
    exc_type: str
    message: str
    traceback: str


class Stacks(NamedTuple):
    call_id: int
    text: str


class Metric(NamedTuple):
    row: dict[str, Any]


# ---------------------------------------------------------------- owner -> task
# {file name: (the name tracebacks give it, its lines)}: the source of the code a payload
# runs, which the task registers in linecache (dtfkit.engine.wire.sources).
Sources = dict[str, tuple[str, list[str]]]


class Spec(NamedTuple):
    cluster: dict[str, list[str]]
    tf_config: str
    setup: bytes | None  # cloudpickled (fn, args, kwargs) to run before the server starts
    sources: Sources | None = None  # the source of setup's code


class Call(NamedTuple):
    call_id: int
    payload: bytes  # cloudpickled (fn, args, kwargs)
    sources: Sources | None = None  # the source of its code


class Interrupt(NamedTuple):
    call_id: int


class DumpStacks(NamedTuple):
    call_id: int


class Exit(NamedTuple):
    pass


# ------------------------------------------------- read from the output stream
class OutputDone(NamedTuple):
    """Every line a call printed has been read (its done mark arrived)."""

    call_id: int


class ScriptDone(NamedTuple):
    """A launched script finished with ``code`` and lingers (its mark arrived)."""

    code: int


OUTPUT_DONE_MARK = "\x00dtfkit-output-done "
SCRIPT_DONE_MARK = OUTPUT_DONE_MARK + "script "  # a launched script ended; its exit code follows
# A done mark: the mark, "script " for a launched script's end, the number, at the end of a line.
DONE_MARK_RE = re.compile(re.escape(OUTPUT_DONE_MARK) + r"(script )?(\d{1,18})$")


# The done mark a task writes just before it sends ``Ready``: the owner counts the task as
# ready only once every line it printed while starting (TensorFlow's "Started server"
# included) is in the log book. Calls are numbered from 1, so 0 is free.
STARTUP_OUTPUT_ID = 0


def output_done_line(call_id: int) -> bytes:
    return f"{OUTPUT_DONE_MARK}{call_id}\n".encode()


def script_done_line(code: int) -> bytes:
    return f"{SCRIPT_DONE_MARK}{code}\n".encode()


def parse_done_mark(text: str) -> tuple[str, str, int] | None:
    """``(text before the mark, "output_done" | "script_done", number)`` for a line that
    ends with a well-formed done mark, else None (the line is plain output, even if a
    function printed the mark's text itself)."""
    match = DONE_MARK_RE.search(text)
    if match is None:
        return None
    kind = "script_done" if match.group(1) else "output_done"
    return text[: match.start()], kind, int(match.group(2))


def done_message(kind: str, number: int) -> OutputDone | ScriptDone:
    return ScriptDone(number) if kind == "script_done" else OutputDone(number)
