"""Owner process: ``LocalLauncher``, tasks as local processes, each forked from the owner's task zygote.

Each task is ``dtfkit.engine.task.task_main`` in its own process group (so a kill ends whatever
it started too; ``dtfkit.engine.launchers.local_process``), with its output on a pipe: forked from
the zygote (``dtfkit.engine.launchers.zygotes``), or, where the zygote cannot serve, a fresh
interpreter. With ``network="auto"`` or ``"isolated"`` the tasks share a private network namespace
held by an anchor process (``dtfkit.engine.platform.anchor``; why: ``dtfkit.engine.platform.netns``).
With ``link=`` every task gets a namespace and an address (``10.77.x.y``) of its own, joined to the
others by a rate-limited link (``netns``), and with ``delay=`` a relay in front of each task's server
(``dtfkit.engine.task.relay``); ``dtfkit.engine.launchers.links`` checks both options.

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
import types
from typing import Any

from dtfkit.engine.launchers import zygotes
from dtfkit.engine.launchers.contract import ForkStart, Launcher, LauncherDescription, TaskHandle
from dtfkit.engine.launchers.links import (
    DELAY_REFUSED_MODES,
    DelayOption,
    LinkOption,
    LinkPlan,
    link_rate,
    plan_delays,
    plan_links,
)
from dtfkit.engine.launchers.local_process import LocalProcess, spawn_task
from dtfkit.engine.platform import lifeline, netns, state
from dtfkit.engine.platform.anchor import NamespaceAnchor
from dtfkit.engine.wire import frames
from dtfkit.engine.wire.layout import SERVING_ROLES
from dtfkit.engine.wire.protocol import CONFIG_ENV, TaskConfig
from dtfkit.errors import ClusterStartError, DtfkitError

NETWORK_MODES = ("auto", "isolated", "host")

HOST_NETWORK_WARNING = (
    "dtfkit: network='host': every TensorFlow server of this cluster listens on every "
    "network interface of this machine without authentication (TensorFlow offers no way "
    "to bind one address), so anyone who can reach its ports can run operations in the "
    "tasks: read and write files as you, read the tasks' environment. Only the control "
    "channel (a private Unix socket with a secret key) is protected. Use it only on a "
    "trusted network or behind a firewall; the default network='auto' keeps the servers "
    "in a private network namespace."
)


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

    def __init__(
        self, network: str = "auto", link: LinkOption = None, *, delay: DelayOption = None, fork: bool = True
    ):
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
        return dataclasses.replace(
            self._net,
            start=ForkStart(forked=self.forked, started=self.forked + self.spawned, why=self.why_spawned),
            links=None if self.links is None else types.MappingProxyType(dict(self.links)),
            delays=None if self.delays is None else types.MappingProxyType(dict(self.delays)),
            processes=(anchor.identity(),) if anchor is not None and anchor.alive else (),
            pids=types.MappingProxyType({"netns": anchor.pid} if anchor is not None else {}),
        )

    def host_of(self, task: str) -> str:
        """The host of ``task``'s address: its own link address with ``link=``, else localhost."""
        if self.links is None:
            return "localhost"
        if task not in self._addresses:
            self._addresses[task] = netns.link_address(len(self._addresses))
        return self._addresses[task]

    # ---------------------------------------------------------------- start
    def start(self, config: TaskConfig) -> TaskHandle:
        # An evaluator runs no server by its role (its mode is noserve, whatever start_servers says):
        # there is no port to put a relay in front of, and nothing to refuse.
        serving_role = config.task.partition(":")[0] in SERVING_ROLES  # a client task is no role of a layout
        if self.delays is not None and config.mode in DELAY_REFUSED_MODES and serving_role:
            raise DtfkitError(f"{config.task}: {DELAY_REFUSED_MODES[config.mode]}")
        if self._net.network != "pending":
            return self._spawn(config)
        env = lifeline.with_lifeline_here(config.env)
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

    def _spawn(self, config: TaskConfig) -> TaskHandle:
        """Start ``config``'s task in the network set up by the first start."""
        launch: dict[str, Any] = {}  # TaskConfig.launch: JSON for the task
        pass_fds: tuple[int, ...] = ()
        gate: int | None = None
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
        env = lifeline.with_lifeline_here(config.env)
        if self.fork and config.tensorflow:
            forked, why = zygotes.fork_task({**env, CONFIG_ENV: config.to_json()}, config.cwd, gate)
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


def _warn(message: str) -> None:
    """Warn, naming the first caller outside dtfkit (the learner's cell, a test) as a traceback does."""
    frames.warn(message)
