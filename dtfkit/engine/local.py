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
from dtfkit.engine.launcher import Launcher, StartAgain, TaskHandle
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
        answers the tasks' requests for a link (``dtfkit.engine.netns.request_link``).
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


class _NoNamespace(StartAgain):
    """The anchor launched alongside the tasks made no namespace; ``why`` is its answer."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def spawn_task(
    config: TaskConfig, env: dict[str, str], cwd: str | None, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen:
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
        pass_fds=pass_fds,
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
        known = netns.known_isolation()
        if known is not None and not known[0]:
            self._without_namespace(known[1])
            return
        # Launched, not awaited: the tasks are spawned at once and wait for the anchor
        # themselves (netns.wait_ready), so its start-up (a Python interpreter, ~0.1 s)
        # overlaps theirs; spawned() reads its answer. If this process has not probed
        # isolation yet, the anchor is the probe.
        main_thread = threading.current_thread() is threading.main_thread()
        self.anchor = NamespaceAnchor.launch(with_lifeline(env, from_long_lived_thread=main_thread))

    def use_anchor(self, anchor: NamespaceAnchor) -> None:
        """Run the tasks in ``anchor``'s namespace (this launcher ends it at ``close()``)."""
        self.anchor = anchor
        self._confirmed()

    def _confirmed(self) -> None:
        self.isolated = True
        self.isolation_note = f"isolated network namespace {self.anchor.namespace}"

    def start(self, config: TaskConfig, env: dict[str, str], cwd: str) -> TaskHandle:
        pass_fds: tuple[int, ...] = ()
        if self.anchor is not None:
            gate = self.anchor.gate  # set while the anchor may still be starting
            config = dataclasses.replace(config, netns_pid=self.anchor.pid, netns_ready_fd=gate)
            pass_fds = () if gate is None else (gate,)
        if self.links is not None:
            link = {
                "socket": self._links_socket,
                "address": self.host(config.task),
                "rate": link_rate(self.links, config.task),
            }
            config = dataclasses.replace(config, link=link)
        main_thread = threading.current_thread() is threading.main_thread()
        env = with_lifeline(env, from_long_lived_thread=main_thread)
        return LocalProcess(spawn_task(config, env, cwd, pass_fds=pass_fds))

    def spawned(self) -> None:
        if self.anchor is None or self.isolated:
            return
        why = self.anchor.confirm()
        if why:
            raise _NoNamespace(why)
        self._confirmed()

    def recover(self, failure: StartAgain) -> None:
        if not isinstance(failure, _NoNamespace):
            raise failure
        self.anchor = None  # confirm() ended it
        # The anchor doubled as the probe: ask the probe whether namespaces are
        # unavailable here, or only this anchor failed.
        ok, why = netns.isolation_available()
        if ok:
            raise ClusterStartError(
                f"the network namespace could not be created: {failure.why}; "
                "pass network='host' to run without isolation"
            )
        self._without_namespace(why)

    def _without_namespace(self, why: str) -> None:
        """No namespace: refuse (``network="isolated"``) or use the host network, with a warning."""
        if self.network == "isolated":
            raise ClusterStartError(f"network='isolated' was asked for, but {why}")
        self.isolation_note = f"NOT isolated: {why}; servers reachable from other machines"
        warnings.warn(
            f"dtfkit: {why}. The cluster uses the host network: its TensorFlow servers "
            "listen on every interface without authentication. Use it only on a trusted network.",
            stacklevel=6,
        )

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
