"""Run an unmodified tutorial-style TF1 script (`--ps_hosts --worker_hosts --job_name --task_index`) as every task of a local cluster.

Each task runs ``script.py --ps_hosts=... --worker_hosts=... --job_name=... --task_index=...``
(plus ``TF_CONFIG`` and any extra arguments). ps tasks, which ``join()`` forever,
are ended when every worker is done; and when the chief (or worker 0 without one) exits 0
while every other task only ``join()``s its server (a TF2 ``ParameterServerStrategy`` job,
whose coordinator is the chief), they are ended too and the launch succeeds, as the TFJob that
``dtfkit export`` writes for the same script ends with its chief.

Example::

    >>> result = launch("distributed_mnist.py", ps=2, workers=2, args=["--is_sync=True"])  # doctest: +SKIP
    >>> result.ok, result.exit_codes                                                        # doctest: +SKIP
    (True, {'ps:0': None, 'ps:1': None, 'worker:0': 0, 'worker:1': 0})
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from dtfkit.engine.launchers.choose import choose_launcher
from dtfkit.engine.launchers.contract import LauncherSpec
from dtfkit.engine.owner.output import OUTPUT_DRAIN_SECONDS
from dtfkit.engine.owner.runtime import ClusterRuntime
from dtfkit.engine.owner.settings import ClusterSettings, Script
from dtfkit.engine.wire.layout import ClusterLayout, TaskId
from dtfkit.errors import DtfkitError
from dtfkit.i18n import _, joined
from dtfkit.log import note
from dtfkit.progress import start_display

HANG_HINT_AFTER = 30.0


@dataclass
class LaunchResult:
    """How each task of a launched script ended.

    ``exit_codes`` maps task names to exit codes; ``None`` for tasks the launcher
    ended itself (ps tasks, or everything after a failure or a timeout).
    """

    exit_codes: dict[str, int | None]
    failed: list[str]
    timed_out: bool
    seconds: float
    log_dir: str
    messages: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.timed_out

    def summary(self) -> str:
        parts = []
        for name, code in self.exit_codes.items():
            ending = _("ended by the launcher") if code is None else _("exit {code}").format(code=code)
            parts.append(_("{task}: {ending}").format(task=name, ending=ending))
        if self.ok:
            head = _("all workers finished")
        else:
            head = _("FAILED: {tasks}").format(tasks=", ".join(self.failed or [_("timeout")]))
        return _("{head} in {seconds:.1f} s ({exit_codes}); logs in {log_dir}").format(
            head=head, seconds=self.seconds, exit_codes=joined(parts, clauses=True), log_dir=self.log_dir
        )


def launch(
    script: str,
    *,
    ps: int = 1,
    workers: int = 2,
    chief: int = 0,
    evaluator: int = 0,
    args: list[str] | tuple[str, ...] = (),
    network: str = "auto",
    gpus: str = "auto",
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    show_tf_logs: bool = False,
    start_timeout: float = 60.0,
    progress: bool = False,
    echo=None,
    max_tasks: int | None = None,
    ray: str | None = None,
) -> LaunchResult:
    """Start a cluster whose every task runs ``script``; wait for the workers; end the rest.

    A worker that exits non-zero stops the others at once (they would usually wait
    for it forever). ``timeout`` bounds the whole run.

    ``ray``: run the tasks on a Ray cluster instead of this machine: its address
    (``"auto"``, ``"ray://<head>:10001"``, ``"<head>:6379"``), or ``"simulated"`` /
    ``"simulated:N"`` for a simulated cluster of 2 / N nodes started for the run. The
    script's content is sent to the nodes (a script that imports files beside it needs
    them on the nodes too). ``network`` does not apply then.

    Example::

        >>> launch("distributed_mnist.py", ray="simulated", args=["--train_steps=50"])  # doctest: +SKIP
    """
    path = os.path.abspath(script)
    if not os.path.isfile(path):
        raise DtfkitError(f"script not found: {script} (looked for {path})")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise DtfkitError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    layout = ClusterLayout.from_counts(ps=ps, workers=workers, chief=chief, evaluator=evaluator)
    settings = ClusterSettings(
        mode="script",
        gpus=gpus,
        env={} if env is None else env,
        show_tf_logs=show_tf_logs,
        start_timeout=start_timeout,
        progress=start_display(progress),
        script=Script(path, tuple(str(a) for a in args), linger=True),
        max_tasks=max_tasks,
    )
    if ray is None:  # no launcher= given: a spec
        chosen = choose_launcher(layout, network=network)
        launcher = chosen.build() if isinstance(chosen, LauncherSpec) else chosen
    else:
        launcher = _ray_launcher(ray, layout)
    runtime = ClusterRuntime(layout, settings, launcher=launcher, echo=echo)
    started = time.monotonic()
    try:
        runtime.start()
        return _supervise(runtime, layout, timeout, started)
    finally:
        runtime.close()


def _ray_launcher(ray: str, layout: ClusterLayout):
    """A ``RayLauncher`` for ``launch(ray=...)``: an address, or ``simulated[:N]``."""
    import warnings

    from dtfkit.ray.cluster import RAY_NETWORK_WARNING
    from dtfkit.ray.launcher import RayLauncher

    if not isinstance(ray, str) or not ray:
        raise DtfkitError(f"ray must be a Ray address or 'simulated[:N]', not {ray!r}")
    address: str | None = ray
    nodes = 2
    if ray == "simulated" or ray.startswith("simulated:"):
        count = ray.partition(":")[2] or "2"
        if not count.isdigit() or int(count) < 1:
            raise DtfkitError(f"ray={ray!r}: the number of simulated nodes must be a positive whole number")
        address, nodes = None, int(count)
        note(
            _(
                "dtfkit: starting a simulated {nodes}-node Ray cluster on this machine (10-20 s); for a "
                "real one give its address instead (--ray ray://<head>:10001, or --ray auto on a node)"
            ).format(nodes=nodes)
        )
    warnings.warn(_(RAY_NETWORK_WARNING), stacklevel=3)
    return RayLauncher(address, nodes=nodes, tasks=[t.name for t in layout.tasks])


def _supervise(
    runtime: ClusterRuntime, layout: ClusterLayout, timeout: float | None, started: float
) -> LaunchResult:
    finishing = [t for t in layout.tasks if t.job in ("chief", "worker", "evaluator")]
    codes: dict[TaskId, int | None] = {t: None for t in layout.tasks}
    failed: list[str] = []
    messages: list[str] = []
    timed_out = False
    deadline = started + timeout if timeout else None
    chief = next((t for t in finishing if t.job == "chief"), TaskId("worker", 0))
    chief_done_at: float | None = None
    last_output = {t.name: time.monotonic() for t in finishing}
    hinted = False
    checked_servers = False

    def note(text: str) -> None:
        messages.append(text)
        runtime.output.echo("dtfkit", text)

    def finished(task: TaskId) -> bool:
        # Process state, not events: an exit may have been seen while the cluster started.
        # A finished worker lingers (its server up for peers that need it) and says so
        # with its exit code, after its last line of output.
        view = runtime.task_view(task)
        return not view.alive or view.script_code is not None

    def exited() -> list[TaskId]:
        gone = sorted(t for t in remaining if finished(t))
        for task in gone:
            if runtime.task_view(task).script_code is None:
                # Its last lines may still be in the pipe; bounded, as a grandchild may hold it open.
                runtime.wait_output(task, OUTPUT_DRAIN_SECONDS)
        return gone

    def saw(event) -> None:
        if event.kind == "log":
            last_output[event.task] = time.monotonic()

    # Everything not shown yet: a script may print between start() and here.
    with runtime.live_output(since=runtime.output.printed_seq):
        remaining = set(finishing)
        while remaining:
            for task in exited():
                remaining.discard(task)
                proc = runtime.task_view(task)
                code = proc.script_code if proc.script_code is not None else proc.exit_code
                codes[task] = code
                if task == chief:
                    chief_done_at = time.monotonic()
                if code != 0:
                    failed.append(task.name)
            if chief_done_at is not None and not checked_servers and not failed and remaining:
                checked_servers = True  # once now, and again at the hang hint's time
                if codes[chief] == 0 and _only_servers_left(runtime, remaining, chief, note):
                    break
            if failed:
                runtime.events.drain()  # the failed task's last lines come before the verdict
                if remaining:
                    note(
                        f"{failed[0]} exited with code {codes[TaskId.parse(failed[0])]}; stopping {', '.join(t.name for t in sorted(remaining))}"
                    )
                break
            if not remaining:
                break
            wake = [d for d in (deadline,) if d is not None]
            if chief_done_at is not None and not hinted:
                wake.append(chief_done_at + HANG_HINT_AFTER)
            # Until a task finishes, or the timeout or the time for the hang hint comes.
            if runtime.events.wait_until(
                lambda: any(finished(t) for t in remaining), min(wake) if wake else None, saw
            ):
                continue
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                timed_out = True
                note(f"timeout after {timeout:g} s: stopping {', '.join(t.name for t in sorted(remaining))}")
                break
            if chief_done_at is not None and not hinted:
                hinted = True
                if codes[chief] == 0 and _only_servers_left(runtime, remaining, chief, note):
                    break
                quiet = [
                    t for t in sorted(remaining) if now - last_output.get(t.name, now) >= HANG_HINT_AFTER
                ]
                if quiet:
                    note(_hang_hint(runtime, quiet, chief))
        # Inside the live output: a stopped task's last lines reach the log book while
        # close() waits for its reader, and are shown when the block ends.
        runtime.close()
    seconds = time.monotonic() - started
    ordered = {t.name: codes[t] for t in layout.tasks}
    return LaunchResult(ordered, failed, timed_out, seconds, runtime.output.logbook.directory or "", messages)


# Where a task's main thread is when it only serves: tf.distribute.Server.join() (server_lib.py).
_JOIN_FRAME = re.compile(r'server_lib\.py", line \d+, in join\b')
# Where a TF1 between-graph worker waits for every task of the cluster (no device_filters).
_SESSION_WAIT = ("session_manager.py", "monitored_session.py", "client/session.py")


def _main_thread(stacks: str) -> str:
    """The main thread's part of a ``DumpStacks`` answer ("Thread MainThread:" up to the next thread)."""
    start = stacks.find("Thread MainThread:")
    if start < 0:
        return ""
    end = stacks.find("\nThread ", start + 1)
    return stacks[start : end if end >= 0 else len(stacks)]


def _only_servers_left(runtime: ClusterRuntime, remaining: set[TaskId], chief: TaskId, note) -> bool:
    """After ``chief`` exited 0: when every task left only ``join()``s its server (a TF2
    parameter-server job: the coordinator is done), say so and return True (the caller ends them,
    as the TFJob that ``dtfkit export`` writes ends with its chief). False: one is still working."""
    stacks = runtime.stacks(sorted(remaining))
    if not remaining or any(not _JOIN_FRAME.search(_main_thread(stacks.get(t, ""))) for t in remaining):
        return False
    names = ", ".join(t.name for t in sorted(remaining))
    note(
        f"{chief} exited 0 and {names} only join() their servers: ending them, as a TFJob ends "
        f"when its {chief.job} succeeds"
    )
    return True


def _hang_hint(runtime: ClusterRuntime, quiet: list[TaskId], chief: TaskId) -> str:
    """Why ``quiet`` tasks may still run after ``chief`` finished, from where their main threads are."""
    stacks = runtime.stacks(quiet)
    names = ", ".join(t.name for t in quiet)
    head = f"{names} still running {HANG_HINT_AFTER:.0f} s after {chief} finished, printing nothing"
    if any(frame in _main_thread(stacks.get(t, "")) for t in quiet for frame in _SESSION_WAIT):
        return (
            f"{head}: a between-graph worker waits until every task of the cluster answers (set "
            "device_filters in its session config). Ctrl-C or --timeout ends it."
        )
    if any(_JOIN_FRAME.search(_main_thread(stacks.get(t, ""))) for t in quiet):
        return f"{head}: it only join()s its server, which never returns. Ctrl-C or --timeout ends it."
    return f"{head}. Ctrl-C or --timeout ends it."
