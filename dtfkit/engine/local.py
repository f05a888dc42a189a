"""Tasks as local processes: ``LocalLauncher``, one fresh interpreter per task.

Each task is ``python -m dtfkit.engine.task_main`` in its own process group (so a
kill ends whatever it started too), with its output on a pipe. With
``network="auto"`` or ``"isolated"`` the tasks share a private user + network
namespace held by an anchor process (``python -m dtfkit.engine.netns``), so their
TensorFlow servers, which listen on every interface without authentication, are
reachable from nowhere else. With ``link=`` every task gets a network namespace and
an address (``10.77.x.y``) of its own instead, joined to the others through a bridge
in the anchor's namespace by a rate-limited link (see ``dtfkit.engine.netns``). The warm pool (``dtfkit.engine.pool``) starts its
processes and anchors with the same helpers.

Example::

    >>> launcher = LocalLauncher(network="auto")                       # doctest: +SKIP
    >>> launcher = LocalLauncher(link={"ps": "50mbit", "worker": "200mbit"})  # doctest: +SKIP
    >>> runtime = ClusterRuntime(layout, launcher=launcher)             # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import subprocess
import sys
import threading
import warnings

from dtfkit.engine import lifeline, netns, state
from dtfkit.engine.launcher import Launcher, TaskHandle
from dtfkit.engine.logs import read_line
from dtfkit.engine.protocol import CONFIG_ENV, TaskConfig
from dtfkit.errors import ClusterStartError, DtfkitError

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

    def __init__(self, popen: subprocess.Popen, *, mark: str = "", connection=None):
        self.popen = popen
        self.identity = state.process_identity(popen.pid)
        if mark:  # its environment names the pool that started it, not the cluster
            self.identity["mark"] = mark
        self.connection = connection
        self.adopted = connection is not None

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

    def stopped(self) -> bool:
        import psutil

        try:
            return psutil.Process(self.pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
        except psutil.Error:
            return False


class NamespaceAnchor:
    """A process holding a fresh user + network namespace (loopback up) for tasks to join."""

    def __init__(self, popen: subprocess.Popen, namespace: str, mark: str = ""):
        self.popen = popen
        self.namespace = namespace
        self.mark = mark  # the DTFKIT_CLUSTER value in its environment, when not the cluster's

    @classmethod
    def start(cls, env: dict[str, str], mark: str = "", links: str | None = None) -> NamespaceAnchor:
        """Start an anchor and wait (bounded) until its namespace is up; ``ClusterStartError`` if not.

        ``links``: the path of a Unix socket where the anchor, the hub of emulated links,
        answers the tasks' requests for a link (``dtfkit.engine.netns.request_link``).
        """
        popen = subprocess.Popen(
            [sys.executable, "-m", "dtfkit.engine.netns", *(["--links", links] if links else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        line = _read_line_within(popen.stdout, ANCHOR_READY_SECONDS)
        if not line.startswith("ready "):
            kill_group(popen)
            popen.stdout.close()
            popen.stdin.close()
            if line.startswith("links unavailable"):
                raise ClusterStartError(
                    f"link= needs virtual network links in the cluster's namespace, and this system "
                    f"refused them ({line.partition(': ')[2]}); leave link= out to use loopback"
                )
            raise ClusterStartError(
                f"the network namespace could not be created: {line or 'no answer in 30 s'}; "
                "pass network='host' to run without isolation"
            )
        return cls(popen, line.split()[1], mark)

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
        try:
            self.popen.stdin.close()  # EOF: the anchor leaves, and with it the namespace
        except OSError:
            pass
        kill_group(self.popen)
        self.popen.stdout.close()


def spawn_task(config: TaskConfig, env: dict[str, str], cwd: str | None) -> subprocess.Popen:
    """Start ``python -m dtfkit.engine.task_main`` for ``config``, leader of its own process group."""
    env = {**env, CONFIG_ENV: config.to_json()}
    return subprocess.Popen(
        [sys.executable, "-m", "dtfkit.engine.task_main"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )


def kill_group(popen: subprocess.Popen, wait: float = 10.0) -> None:
    """SIGKILL a process and its process group, then reap it (bounded)."""
    if popen.poll() is None:
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        popen.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        pass


def with_lifeline(env: dict[str, str], *, from_long_lived_thread: bool) -> dict[str, str]:
    """``env`` plus what makes a child die with this process (see ``dtfkit.engine.lifeline``).

    ``PR_SET_PDEATHSIG`` fires when the *thread* that started the child ends, so it is
    asked for only from a thread that lives as long as the process.
    """
    env = dict(env)
    env.pop(lifeline.PDEATHSIG_ENV, None)
    env[lifeline.OWNER_ENV] = str(os.getpid())
    if from_long_lived_thread:
        env[lifeline.PDEATHSIG_ENV] = "1"
    return env


LINK_JOBS = ("ps", "worker", "chief", "evaluator", "client")
_LINK_KEY_FORM = "'default', a job ('ps', 'worker', 'chief', 'evaluator', 'client') or a task ('worker:1')"


def plan_links(link) -> dict[str, int] | None:
    """Check ``link=`` and turn it into ``{key: bits per second}`` (None: no links).

    ``"100mbit"`` is ``{"default": 100000000}``; a dict maps ``"default"``, a job or a
    task (``"worker:1"``) to a rate. ``DtfkitError`` naming the bad key or value.
    """
    if link is None:
        return None
    if isinstance(link, str):
        link = {"default": link}
    if not isinstance(link, dict) or not link:
        raise DtfkitError(
            f"link must be a rate such as '100mbit', or a dict such as "
            f"{{'ps': '50mbit', 'worker': '200mbit'}}, not {link!r}"
        )
    plan = {}
    for key, rate in link.items():
        job, colon, index = key.partition(":") if isinstance(key, str) else ("", "", "")
        if not (key == "default" or (job in LINK_JOBS and (not colon or index.isdigit()))):
            raise DtfkitError(f"link key {key!r} names no task: use {_LINK_KEY_FORM}")
        try:
            plan[key] = netns.parse_rate(rate)
        except ValueError as exc:
            raise DtfkitError(f"link[{key!r}]: {exc}") from None
    return plan


def link_rate(plan: dict[str, int], task: str) -> int | None:
    """The rate of ``task`` ("worker:1") in ``plan``: its own, its job's, the default, or None (no limit)."""
    for key in (task, task.partition(":")[0], "default"):
        if key in plan:
            return plan[key]
    return None


class LocalLauncher(Launcher):
    """Every task a fresh local interpreter; a private network namespace unless ``network="host"``.

    Args:
        network: ``"auto"`` (a private namespace when the OS allows, else the host
            network with a warning), ``"isolated"`` (required), ``"host"``.
        link: emulated, rate-limited links: every task gets its own network namespace
            and address, limited to the rate ``plan_links(link)`` gives it (see
            ``LocalCluster``). Refused on the host network, or where namespaces are
            unavailable. None (default): all tasks share one namespace over loopback.
    """

    def __init__(self, network: str = "auto", link=None):
        if network not in NETWORK_MODES:
            raise DtfkitError(f"network must be one of {', '.join(NETWORK_MODES)}, not {network!r}")
        self.network = network
        self.anchor: NamespaceAnchor | None = None
        self.links = plan_links(link)
        self._addresses: dict[str, str] = {}  # task name -> its link address (kept on restart)
        self._links_socket: str | None = None
        if self.links is not None:
            if network == "host":
                raise DtfkitError(
                    "link= needs each task in a network namespace of its own, and network='host' "
                    "puts them all on this machine's network: leave network at 'auto' (or "
                    "'isolated'), or leave link out"
                )
            ok, why = netns.isolation_available()
            if not ok:
                raise DtfkitError(f"link= needs network namespaces, and {why}; leave link out")

    def link_of(self, task: str) -> str:
        """``"100mbit"``, ``"no limit"``, or ``""`` without links: what the cluster table shows."""
        if self.links is None:
            return ""
        rate = link_rate(self.links, task)
        return netns.format_rate(rate) if rate else "no limit"

    def host(self, task: str) -> str:
        if self.links is None:
            return "localhost"
        if task not in self._addresses:
            self._addresses[task] = netns.link_address(len(self._addresses))
        return self._addresses[task]

    def prepare(self, tasks: int, env: dict[str, str], cwd: str, *, gpus: int = 0) -> None:
        if self.links is not None:
            main_thread = threading.current_thread() is threading.main_thread()
            # The cluster's private folder (0700): only its owner can ask for links.
            folder = os.path.join(env[state.BASE_ENV], env[state.CLUSTER_ENV])
            self._links_socket = os.path.join(folder, "links.sock")
            anchor = NamespaceAnchor.start(
                with_lifeline(env, from_long_lived_thread=main_thread), links=self._links_socket
            )
            self.use_anchor(anchor)
            self.isolation_note = f"isolated, emulated links: each task its own network namespace, bridged in {anchor.namespace}"
            return
        if self.network == "host":
            self.isolation_note = "host network (opted out): servers reachable from other machines"
            warnings.warn(HOST_NETWORK_WARNING, stacklevel=5)
            return
        ok, why = netns.isolation_available()
        if not ok:
            if self.network == "isolated":
                raise ClusterStartError(f"network='isolated' was asked for, but {why}")
            self.isolation_note = f"NOT isolated: {why}; servers reachable from other machines"
            warnings.warn(
                f"dtfkit: {why}. The cluster uses the host network: its TensorFlow servers "
                "listen on every interface without authentication. Use it only on a trusted network.",
                stacklevel=5,
            )
            return
        main_thread = threading.current_thread() is threading.main_thread()
        self.use_anchor(NamespaceAnchor.start(with_lifeline(env, from_long_lived_thread=main_thread)))

    def use_anchor(self, anchor: NamespaceAnchor) -> None:
        """Run the tasks in ``anchor``'s namespace (this launcher ends it at ``close()``)."""
        self.anchor = anchor
        self.isolated = True
        self.isolation_note = f"isolated network namespace {anchor.namespace}"

    def start(self, config: TaskConfig, env: dict[str, str], cwd: str) -> TaskHandle:
        if self.anchor is not None:
            config = dataclasses.replace(config, netns_pid=self.anchor.pid)
        if self.links is not None:
            link = {
                "socket": self._links_socket,
                "address": self.host(config.task),
                "rate": link_rate(self.links, config.task),
            }
            config = dataclasses.replace(config, link=link)
        main_thread = threading.current_thread() is threading.main_thread()
        return LocalProcess(spawn_task(config, with_lifeline(env, from_long_lived_thread=main_thread), cwd))

    def processes(self) -> list[dict]:
        return [self.anchor.identity()] if self.anchor is not None and self.anchor.alive else []

    def pids(self) -> dict[str, int]:
        return {"netns": self.anchor.pid} if self.anchor is not None else {}

    def close(self) -> None:
        if self.anchor is not None:
            self.anchor.close()


def _read_line_within(stream, timeout: float) -> str:
    """One line from a pipe, waiting at most ``timeout`` seconds."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        return ""
    return stream.readline().decode("utf-8", errors="replace").strip()
