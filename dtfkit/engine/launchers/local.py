"""Tasks as local processes: ``LocalLauncher``, each task forked from the owner's task zygote.

Each task is ``dtfkit.engine.task.task_main`` in its own process group (so a kill ends whatever
it started too), with its output on a pipe: forked from the zygote, which imported TensorFlow
once (``dtfkit.engine.launchers.zygotes``), or, where the zygote cannot serve, a fresh
``python -m dtfkit.engine.task.task_main``. With
``network="auto"`` or ``"isolated"`` the tasks share a private user + network
namespace held by an anchor process (``python -m dtfkit.engine.platform.netns``), so their
TensorFlow servers, which listen on every interface without authentication, are
reachable from nowhere else. With ``link=`` every task gets a network namespace and
an address (``10.77.x.y``) of its own instead, joined to the others through a bridge
in the anchor's namespace by a rate-limited link (see ``dtfkit.engine.platform.netns``), and with
``delay=`` a relay in front of each task's server that holds every byte for the link's
delay (see ``dtfkit.engine.task.relay``).

Example::

    >>> launcher = LocalLauncher(network="auto")                       # doctest: +SKIP
    >>> launcher = LocalLauncher(link={"ps": "50mbit", "worker": "200mbit"})  # doctest: +SKIP
    >>> launcher = LocalLauncher(link="100mbit", delay="20ms")         # doctest: +SKIP
    >>> runtime = ClusterRuntime(layout, launcher=launcher)             # doctest: +SKIP
    >>> launcher.describe().network                                     # doctest: +SKIP
    'namespace'
"""

from __future__ import annotations

import dataclasses
import os
import re
import select
import signal
import subprocess
import sys
import threading
import types

from dtfkit.engine.launchers import zygotes
from dtfkit.engine.launchers.contract import ForkStart, Launcher, LauncherDescription, TaskHandle
from dtfkit.engine.platform import lifeline, netns, state
from dtfkit.engine.wire import frames
from dtfkit.engine.wire.lines import read_line
from dtfkit.engine.wire.protocol import CONFIG_ENV, TaskConfig
from dtfkit.errors import ClusterStartError, DtfkitError
from dtfkit.shown import shown

NETWORK_MODES = ("auto", "isolated", "host")
ANCHOR_READY_SECONDS = 30.0

HOST_NETWORK_WARNING = (
    "dtfkit: network='host': every TensorFlow server of this cluster listens on every "
    "network interface of this machine without authentication (TensorFlow offers no way "
    "to bind one address), so anyone who can reach its ports can run operations in the "
    "tasks: read and write files as you, read the tasks' environment. Only the control "
    "channel (a private Unix socket with a secret key) is protected. Use it only on a "
    "trusted network or behind a firewall; the default network='auto' keeps the servers "
    "in a private network namespace."
)


class LocalProcess(TaskHandle):
    """A task running as a child process of this one (the leader of its own process group)."""

    def __init__(self, popen: subprocess.Popen, *, host: str = "localhost"):
        self.popen = popen
        self.host = host
        self.identity = state.process_identity(popen.pid)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        kill_group(self.popen)

    def read_line(self) -> bytes:
        return read_line(self.popen.stdout)

    def close_output(self) -> None:
        self.popen.stdout.close()

    def abort(self) -> bool:
        if self.popen.poll() is not None:
            return False
        self.popen.send_signal(signal.SIGABRT)  # the leader only: kill() ends its group after
        return True

    def stopped(self) -> bool:
        return state.is_stopped(self.pid)


class NamespaceAnchor:
    """A process holding a fresh user + network namespace (loopback up) for tasks to join.

    ``start()`` waits until the namespace exists. ``launch()`` does not: tasks spawned
    meanwhile get ``gate`` (the read end of a pipe the anchor closes once ready) and wait
    on it themselves, so the anchor's start-up overlaps theirs; ``confirm()`` then reads
    the anchor's answer.
    """

    def __init__(self, popen: subprocess.Popen, namespace: str = "", mark: str = "", gate: int | None = None):
        self.popen = popen
        self.namespace = namespace  # "" until confirmed
        self.mark = mark  # the DTFKIT_CLUSTER value in its environment, when not the cluster's
        self.gate = gate

    @classmethod
    def launch(cls, env: dict[str, str], mark: str = "", links: str | None = None) -> NamespaceAnchor:
        """Start an anchor without waiting for it (see ``confirm()``); ``links`` as in ``start()``."""
        gate, ready_end = os.pipe()  # not inheritable: only the children given it by pass_fds
        try:
            popen = subprocess.Popen(
                netns.anchor_command(links),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**env, netns.READY_FD_ENV: str(ready_end)},
                start_new_session=True,
                pass_fds=(ready_end,),
            )
        except BaseException:
            os.close(gate)
            raise
        finally:
            os.close(ready_end)  # the anchor holds the only write end now
        return cls(popen, mark=mark, gate=gate)

    @classmethod
    def start(cls, env: dict[str, str], mark: str = "", links: str | None = None) -> NamespaceAnchor:
        """Start an anchor and wait (bounded) until its namespace is up; ``ClusterStartError`` if not.

        ``links``: the path of a Unix socket where the anchor, the hub of emulated links,
        answers the tasks' requests for a link (``dtfkit.engine.platform.netns.request_link``).
        """
        anchor = cls.launch(env, mark, links)
        why = anchor.confirm()
        if why.startswith("links unavailable"):
            raise ClusterStartError(
                f"link= needs virtual network links in the cluster's namespace, and this system "
                f"refused them ({why.partition(': ')[2]}); leave link= out to use loopback"
            )
        if why:
            raise ClusterStartError(
                f"the network namespace could not be created: {why}; "
                "pass network='host' to run without isolation"
            )
        return anchor

    def confirm(self) -> str:
        """Wait (bounded) for the anchor's answer: ``""`` once its namespace is up, else why not
        (the anchor is then ended)."""
        if self.gate is not None:
            os.close(self.gate)  # every task that waits on it has its own copy
            self.gate = None
        if self.namespace:
            return ""
        line = _read_line_within(self.popen.stdout, ANCHOR_READY_SECONDS)
        if not line.startswith("ready "):
            self.close()
            return line or f"no answer in {ANCHOR_READY_SECONDS:g} s"
        netns.remember_isolation(True)
        self.namespace = line.split()[1]
        return ""

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def identity(self) -> dict:
        ident = state.process_identity(self.popen.pid)
        if self.mark:
            ident["mark"] = self.mark
        return ident

    def close(self) -> None:
        if self.gate is not None:
            os.close(self.gate)
            self.gate = None
        try:
            self.popen.stdin.close()  # EOF: the anchor leaves, and with it the namespace
        except OSError:
            pass
        kill_group(self.popen)
        self.popen.stdout.close()


def spawn_task(
    config: TaskConfig, env: dict[str, str], cwd: str | None, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen:
    """Start ``python -m dtfkit.engine.task.task_main`` for ``config``, leader of its own process group."""
    command = [sys.executable, "-m", "dtfkit.engine.task.task_main"]
    return spawn_group(command, {**env, CONFIG_ENV: config.to_json()}, cwd, pass_fds)


def spawn_group(
    command: list[str], env: dict[str, str], cwd: str | None, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen:
    """Start ``command`` as the leader of a new session and process group (so that
    ``kill_group`` ends all it starts), stdin closed, stdout and stderr on one pipe.

    Example::

        >>> p = spawn_group(["sleep", "60"], dict(os.environ), None)
        >>> kill_group(p); p.returncode
        -9
    """
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
        pass_fds=pass_fds,
    )


def kill_group(
    popen: subprocess.Popen, wait: float = 10.0, *, grace: float = 0.0, leftovers: bool = False
) -> None:
    """SIGKILL a process and its process group, then reap it (bounded by ``wait`` s).

    ``grace`` > 0: SIGTERM the group first and give it that long (a pod's deletion).
    ``leftovers``: SIGKILL the group even when its leader has exited already (what it
    started may live on); off by default, since an exited leader's pid may be reused.
    """
    if popen.poll() is None:
        if grace > 0:
            lifeline.signal_group(popen.pid, signal.SIGTERM)
            try:
                popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        lifeline.signal_group(popen.pid, signal.SIGKILL)  # the leader's group, even if SIGTERM ended it
    elif leftovers:
        lifeline.signal_group(popen.pid, signal.SIGKILL)
    try:
        popen.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        pass


# Tasks whose TensorFlow server dtfkit does not start cannot have the relay in front of it.
DELAY_REFUSED_MODES = {
    "noserve": (
        "delay= needs dtfkit to start the TensorFlow servers (a relay holds the server's "
        "port), and start_servers=False lets TensorFlow start them: leave delay out, or "
        "start the servers (start_servers=True)"
    ),
    "script": (
        "delay= is not available for scripts, which start their own TensorFlow servers: "
        "use LocalCluster(link=..., delay=...) and cluster.run() instead"
    ),
}

LINK_JOBS = ("ps", "worker", "chief", "evaluator", "client")
_LINK_KEY_FORM = "'default', a job ('ps', 'worker', 'chief', 'evaluator', 'client') or a task ('worker:1')"


def plan_links(link) -> dict[str, int] | None:
    """Check ``link=`` and turn it into ``{key: bits per second}`` (None: no links).

    ``"100mbit"`` is ``{"default": 100000000}``; a dict maps ``"default"``, a job or a
    task (``"worker:1"``) to a rate. ``DtfkitError`` naming the bad key or value.
    """
    if link is None or isinstance(link, LinkPlan):
        return link
    example = "a rate such as '100mbit', or a dict such as {'ps': '50mbit', 'worker': '200mbit'}"
    return LinkPlan(_plan("link", link, netns.parse_rate, example))


def plan_delays(delay) -> dict[str, float] | None:
    """Check ``delay=`` and turn it into ``{key: seconds}`` (None: no delay).

    ``"20ms"`` is ``{"default": 0.02}``; a dict maps ``"default"``, a job or a task to a
    one-way delay (a task no key names: 0). ``DtfkitError`` naming the bad key or value.

    Example::

        >>> plan_delays({"ps": "50ms", "default": "1.5s"})
        {'ps': 0.05, 'default': 1.5}
    """
    if delay is None or isinstance(delay, DelayPlan):
        return delay
    example = "a time such as '20ms', or a dict such as {'ps': '50ms', 'worker': '5ms'}"
    return DelayPlan(_plan("delay", delay, netns.parse_delay, example))


def _plan(option: str, given, parse, example: str) -> dict:
    """``given`` (one value, or a dict by default/job/task) checked with ``parse``."""
    if isinstance(given, str):
        given = {"default": given}
    if not isinstance(given, dict) or not given:
        raise DtfkitError(f"{option} must be {example}, not {shown(given)}")
    plan = {}
    for key, value in given.items():
        _check_key(option, key)
        try:
            plan[key] = parse(value)
        except ValueError as exc:
            raise DtfkitError(f"{option}[{shown(key)}]: {exc}") from None
    return plan


# A task index as the cluster writes it: "worker:1", never "worker:01" or "worker:¹".
_INDEX = re.compile(r"0|[1-9][0-9]{0,5}")


def _check_key(option: str, key) -> None:
    """Refuse a key that cannot name a task of any cluster, and say how keys are written."""
    job, colon, index = key.partition(":") if isinstance(key, str) else ("", "", "")
    if key == "default" or (job in LINK_JOBS and (not colon or _INDEX.fullmatch(index))):
        return
    hint = ""
    if job in LINK_JOBS and re.fullmatch(r"\s*[0-9]{1,6}\s*", index):
        hint = f" (write '{job}:{int(index)}', as the cluster names its tasks)"
    raise DtfkitError(f"{option} key {shown(key)} names no task{hint}: use {_LINK_KEY_FORM}")


def check_plan_tasks(option: str, plan, tasks: list[str]) -> None:
    """Refuse keys of a checked ``link=``/``delay=`` plan that name no task of ``tasks``.

    A key for a task or job the cluster does not have would be ignored in silence (a
    typo, or a cluster started with fewer tasks than the plan assumed). ``"client"``
    keys stay: clients join later (``cluster.run(..., on="client")``).

    Example::

        >>> check_plan_tasks("delay", {"worker:7": 0.02}, ["ps:0", "worker:0"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        dtfkit.errors.DtfkitError: delay key 'worker:7' names no task of this cluster: its tasks are ps:0, worker:0. ...
    """
    if not plan:
        return
    jobs = {task.partition(":")[0] for task in tasks}
    for key in plan:
        job = key.partition(":")[0]
        if key == "default" or job == "client" or key in tasks or (key == job and job in jobs):
            continue
        listed = ", ".join(repr(job) for job in sorted(jobs))
        names = ", ".join(tasks[:12]) + (f" and {len(tasks) - 12} more" if len(tasks) > 12 else "")
        raise DtfkitError(
            f"{option} key {key!r} names no task of this cluster: its tasks are {names}. "
            f"Next step: use 'default', one of its jobs ({listed}) or one of its tasks "
            f"(such as {tasks[-1]!r}), or start the cluster with the task the key names"
        )


class LinkPlan(dict):
    """A checked ``link=`` (``plan_links``): ``{key: bits per second}``; checking it again returns it."""


class DelayPlan(dict):
    """A checked ``delay=`` (``plan_delays``): ``{key: seconds}``; checking it again returns it."""


def link_rate(plan: dict[str, int], task: str) -> int | None:
    """The rate of ``task`` ("worker:1") in ``plan``: its own, its job's, the default, or None (no limit)."""
    return netns.task_value(plan, task)


def link_delay(plan: dict[str, float] | None, task: str) -> float:
    """The one-way delay of ``task``'s link in seconds, as ``link_rate`` finds a rate (0: none)."""
    return (netns.task_value(plan, task) or 0.0) if plan else 0.0


class LocalLauncher(Launcher):
    """Every task a fresh local interpreter; a private network namespace unless ``network="host"``.

    The first ``start()`` sets up the network: it launches the namespace anchor and
    spawns that first task alongside it (the task waits for the anchor itself, so the
    two start-ups overlap), then reads the anchor's answer. If the anchor made no
    namespace, the task leaves unseen and starts again on the host network, with a
    warning (or ``network="isolated"`` refuses, or an anchor failing where namespaces
    work is an error).

    Args:
        network: ``"auto"`` (a private namespace when the OS allows, else the host
            network with a warning), ``"isolated"`` (required), ``"host"``.
        link: emulated, rate-limited links: every task gets its own network namespace
            and address, limited to the rate ``plan_links(link)`` gives it (see
            ``LocalCluster``). Refused on the host network, or where namespaces are
            unavailable. None (default): all tasks share one namespace over loopback.
        delay: a one-way delay per link, ``plan_delays(delay)`` (see ``LocalCluster``):
            a relay in front of every task's server holds what it receives and what it
            answers that long (``dtfkit.engine.task.relay``). Implies links (without a rate
            limit where ``link`` names none); only for tasks whose server dtfkit starts.
        fork: fork each task from this process's zygote, which imported TensorFlow once
            (``dtfkit.engine.launchers.zygotes``); where it cannot, or with ``fork=False``, every
            task is a fresh interpreter.
    """

    def __init__(self, network: str = "auto", link=None, *, delay=None, fork: bool = True):
        if network not in NETWORK_MODES:
            raise DtfkitError(f"network must be one of {', '.join(NETWORK_MODES)}, not {network!r}")
        self.network = network
        self.anchor: NamespaceAnchor | None = None
        self.links = plan_links(link)
        self.delays = plan_delays(delay)
        if self.delays is not None and self.links is None:
            self.links = LinkPlan()  # a namespace and address per task, no rate limit
        self.fork = fork
        self.forked = 0  # tasks forked from a zygote so far
        self.spawned = 0  # tasks started as fresh interpreters so far
        self.why_spawned = "" if fork else "fork=False"
        self._net = LauncherDescription(network="pending")  # network, namespace, why
        self._addresses: dict[str, str] = {}  # task name -> its link address (kept on restart)
        self._links_socket: str | None = None
        if self.links is not None:
            option = "link=" if link is not None else "delay="
            if network == "host":
                raise DtfkitError(
                    f"{option} needs each task in a network namespace of its own, and network='host' "
                    "puts them all on this machine's network: leave network at 'auto' (or "
                    f"'isolated'), or leave {option[:-1]} out"
                )
            ok, why = netns.isolation_available()
            if not ok:
                raise DtfkitError(f"{option} needs network namespaces, and {why}; leave {option[:-1]} out")

    # ------------------------------------------------------------- describe
    def describe(self) -> LauncherDescription:
        anchor = self.anchor
        alive = anchor is not None and anchor.alive
        return dataclasses.replace(
            self._net,
            start=self._start_facts(),
            links=None if self.links is None else types.MappingProxyType(dict(self.links)),
            delays=None if self.delays is None else types.MappingProxyType(dict(self.delays)),
            processes=(anchor.identity(),) if alive else (),
            pids=types.MappingProxyType({"netns": anchor.pid} if anchor is not None else {}),
        )

    def _start_facts(self) -> ForkStart:
        return ForkStart(forked=self.forked, started=self.forked + self.spawned, why=self.why_spawned)

    def host_of(self, task: str) -> str:
        """The host of ``task``'s address: its own link address with ``link=``, else localhost."""
        if self.links is None:
            return "localhost"
        if task not in self._addresses:
            self._addresses[task] = netns.link_address(len(self._addresses))
        return self._addresses[task]

    # ---------------------------------------------------------------- start
    def start(self, config: TaskConfig) -> TaskHandle:
        if self.delays is not None and config.mode in DELAY_REFUSED_MODES:
            raise DtfkitError(f"{config.task}: {DELAY_REFUSED_MODES[config.mode]}")
        if self._net.network != "pending":
            return self._spawn(config)
        env = _with_lifeline(config.env)
        if self.links is not None:
            self._start_hub(env)
            return self._spawn(config)
        if self.network == "host":
            self._net = LauncherDescription(network="host")
            _warn(HOST_NETWORK_WARNING)
            return self._spawn(config)
        known = netns.known_isolation()
        if known is not None and not known[0]:
            self._without_namespace(known[1])
            return self._spawn(config)
        return self._start_with_anchor(config, env)

    def _start_hub(self, env: dict[str, str]) -> None:
        # The cluster's private folder (0700): only its owner can ask for links.
        folder = os.path.join(env[state.BASE_ENV], env[state.CLUSTER_ENV])
        self._links_socket = os.path.join(folder, "links.sock")
        anchor = NamespaceAnchor.start(env, links=self._links_socket)
        self.use_anchor(anchor, network="links")

    def _start_with_anchor(self, config: TaskConfig, env: dict[str, str]) -> TaskHandle:
        """Launch the anchor, spawn the first task alongside it, then read its answer.

        If this process has not probed isolation yet, the anchor is the probe."""
        self.anchor = NamespaceAnchor.launch(env)
        try:
            handle = self._spawn(config)
        except BaseException:
            self.anchor.close()
            self.anchor = None
            raise
        why = self.anchor.confirm()
        if not why:
            self._net = LauncherDescription(network="namespace", namespace=self.anchor.namespace)
            return handle
        # No namespace: the task saw the anchor fail and leaves without a word.
        handle.kill()
        handle.close_output()
        self.anchor = None  # confirm() ended it
        # Ask the probe whether namespaces are unavailable here, or only this anchor failed.
        ok, probe_why = netns.isolation_available()
        if ok:
            raise ClusterStartError(
                f"the network namespace could not be created: {why}; pass network='host' to run without isolation"
            )
        self._without_namespace(probe_why)
        return self._spawn(config)

    def use_anchor(self, anchor: NamespaceAnchor, network: str = "namespace") -> None:
        """Run the tasks in ``anchor``'s namespace (this launcher ends it at ``close()``)."""
        self.anchor = anchor
        self._net = LauncherDescription(network=network, namespace=anchor.namespace)

    def _without_namespace(self, why: str) -> None:
        """No namespace: refuse (``network="isolated"``) or use the host network, with a warning."""
        if self.network == "isolated":
            raise ClusterStartError(f"network='isolated' was asked for, but {why}")
        self._net = LauncherDescription(network="fallback", why=why)
        _warn(
            f"dtfkit: {why}. The cluster uses the host network: its TensorFlow servers "
            "listen on every interface without authentication. Use it only on a trusted network."
        )

    def _spawn(self, config: TaskConfig) -> LocalProcess:
        """Start ``config``'s task in the network set up by the first start."""
        launch: dict = {}
        pass_fds: tuple[int, ...] = ()
        if self.anchor is not None:
            launch["netns_pid"] = self.anchor.pid
            gate = self.anchor.gate  # set while the anchor may still be starting
            if gate is not None:
                launch["netns_ready_fd"] = gate
                pass_fds = (gate,)
        host = self.host_of(config.task)
        if self.links is not None:
            launch["link"] = {
                "socket": self._links_socket,
                "address": host,
                "rate": link_rate(self.links, config.task),
                "delays": None if self.delays is None else dict(self.delays),
            }
        config = dataclasses.replace(config, launch={**config.launch, **launch})
        env = _with_lifeline(config.env)
        if self.fork and config.tensorflow:
            forked, why = zygotes.fork_task(
                {**env, CONFIG_ENV: config.to_json()}, config.cwd, launch.get("netns_ready_fd")
            )
            if forked is not None:
                forked.host = host
                self.forked += 1
                return forked
            self.why_spawned = why
        popen = spawn_task(config, env, config.cwd, pass_fds=pass_fds)
        self.spawned += 1
        return LocalProcess(popen, host=host)

    def close(self) -> None:
        if self.anchor is not None:
            self.anchor.close()


def _with_lifeline(env) -> dict[str, str]:
    main_thread = threading.current_thread() is threading.main_thread()
    return lifeline.with_lifeline(env, from_long_lived_thread=main_thread)


def _warn(message: str) -> None:
    """Warn, naming the first caller outside dtfkit (the learner's cell, a test) as a traceback does."""
    frames.warn(message)


def _read_line_within(stream, timeout: float) -> str:
    """One line from a pipe, waiting at most ``timeout`` seconds."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        return ""
    return stream.readline().decode("utf-8", errors="replace").strip()
