"""A Ray cluster of several nodes on this one machine, for lessons and tests.

``SimulatedRayCluster(nodes=2)`` starts a head (no CPUs, so tasks go to the nodes)
and ``nodes`` worker nodes with ``ray.cluster_utils.Cluster``, every node on
127.0.0.1, told apart by its node id. It runs in a small supervisor process of its
own (``python -m dtfkit.ray.simulated``), leader of its own process group: Ray leaves
some of its agents running when the process that started the cluster dies, so the
supervisor ends every process of its group when its owner closes it, when its
owner dies (EOF on its stdin, or ``PR_SET_PDEATHSIG``), and the owner's ``close()``
kills the group by id if the supervisor did not. Ray's files live in a fresh short
temporary folder (``RAY_TMPDIR``), removed at close.

Example::

    >>> with SimulatedRayCluster(nodes=2) as sim:                 # doctest: +SKIP
    ...     ray.init(address=sim.address)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

from dtfkit.engine.platform import state
from dtfkit.engine.platform.groups import kill_group
from dtfkit.engine.platform.taskenv import PACKAGE_ROOT
from dtfkit.errors import ClusterStartError, DtfkitError
from dtfkit.i18n import _

START_SECONDS = 120.0  # a head and two nodes take 10-15 s on a busy 2-core machine
CLOSE_SECONDS = 20.0
INSTALL_HINT = 'pip install "dtfkit[ray]"'


def require_ray() -> Any:  # the ray module
    """Import and return ``ray``, or raise ``DtfkitError`` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise DtfkitError(
            _(
                "Ray is not installed in this Python ({python}): {error}. "
                "Next step: {install}, or use dtfkit.LocalCluster for tasks on this machine."
            ).format(python=sys.executable, error=exc, install=INSTALL_HINT)
        ) from None
    return ray


LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def use_loopback() -> None:
    """Make this process's Ray use 127.0.0.1 as its own address, as the simulated nodes do.

    Ray picks this machine's outward address otherwise, which the simulated cluster does
    not listen on (and which a sandbox may block). Ray reads the setting at import, so
    it is set both in the environment and, if Ray is imported already, in Ray's constants.
    """
    os.environ[LOOPBACK_ENV] = "0"
    constants: Any = sys.modules.get("ray._private.ray_constants")  # Ray's module: its settings are untyped
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False


def is_loopback(address: str | None) -> bool:
    """True for an address on this machine's loopback (``127.0.0.1:6379``, ``localhost:6379``)."""
    host = (address or "").rpartition(":")[0]
    return host in ("127.0.0.1", "localhost")


def connect(address: str, **options: Any) -> None:
    """``ray.init(address)``, quietly, with loopback addresses for a simulated cluster's address."""
    import logging

    if is_loopback(address):
        use_loopback()
    ray = require_ray()
    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, **options)


class SimulatedRayCluster(contextlib.AbstractContextManager):
    """A head node plus ``nodes`` Ray nodes of ``cpus_per_node`` CPUs each, on this machine.

    Args:
        nodes: how many worker nodes (the head has no CPUs, so actors that need a
            CPU land on them; dtfkit places its tasks on them by node id).
        cpus_per_node: the CPUs each node announces (what placement counts, not a limit).
        start_timeout: seconds the cluster gets to come up.

    Example::

        >>> sim = SimulatedRayCluster(nodes=2)                     # doctest: +SKIP
        >>> sim.address                                            # doctest: +SKIP
        '127.0.0.1:6379'
        >>> sim.close()                                            # doctest: +SKIP
    """

    def __init__(self, nodes: int = 2, cpus_per_node: int = 1, *, start_timeout: float = START_SECONDS):
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
            raise DtfkitError(_("nodes must be a positive whole number, not {nodes!r}").format(nodes=nodes))
        if isinstance(cpus_per_node, bool) or not isinstance(cpus_per_node, int) or cpus_per_node < 1:
            raise DtfkitError(
                _("cpus_per_node must be a positive whole number, not {cpus!r}").format(cpus=cpus_per_node)
            )
        require_ray()  # a clear error before anything starts
        self.nodes = nodes
        self.closed = False
        self.address = ""
        # A dtfkit cluster folder with a state file: `dtfkit cleanup` reaps the
        # supervisor's processes (marked with this id) if both it and its owner crash.
        self.id, self.dir = state.new_cluster_dir()
        self.ray_dir = tempfile.mkdtemp(prefix="dtr")  # short: Ray's Unix sockets live inside it
        env = dict(os.environ)
        env.update(
            {
                "RAY_TMPDIR": self.ray_dir,
                LOOPBACK_ENV: "0",
                state.CLUSTER_ENV: self.id,
                state.BASE_ENV: os.path.dirname(self.dir),
                "PYTHONPATH": os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH")) if p),
                "DTFKIT_RAY_OWNER": str(os.getpid()),
            }
        )
        env.pop("RAY_ADDRESS", None)
        self.popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dtfkit.ray.simulated",
                "--nodes",
                str(nodes),
                "--cpus",
                str(cpus_per_node),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.ray_dir,
            start_new_session=True,
        )
        state.write_state(
            self.dir,
            self.id,
            [state.process_identity(self.popen.pid)],
            f"simulated Ray cluster ({nodes} nodes)",
        )
        try:
            self.address = self._read_address(start_timeout)
        except BaseException:
            self.close()
            raise

    def _read_address(self, timeout: float) -> str:
        out = self.popen.stdout
        assert out is not None  # stdout=PIPE
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            ready, _writable, _errors = select.select([out], [], [], max(0.0, left))
            if not ready:
                raise ClusterStartError(
                    _("the simulated Ray cluster did not come up within {seconds:g} s; its output:").format(
                        seconds=timeout
                    )
                    + "\n"
                    + "\n".join(seen[-20:])
                    + "\n"
                    + _("Next step: on a busy machine pass a larger start_timeout.")
                )
            line = out.readline().decode("utf-8", errors="replace").rstrip("\n")
            if not line:
                raise ClusterStartError(
                    _("the simulated Ray cluster failed to start (exit code {code}); its output:").format(
                        code=self.popen.wait()
                    )
                    + "\n"
                    + "\n".join(seen[-20:])
                )
            if line.startswith("dtfkit-ray-address "):
                # Keep reading (and dropping) what Ray prints, so that the pipe never fills.
                threading.Thread(target=_drain, args=(out,), daemon=True).start()
                return line.split()[1]
            seen.append(line)

    @property
    def pid(self) -> int:
        """The supervisor's pid (the leader of the group of every Ray process of this cluster)."""
        return self.popen.pid

    def close(self) -> None:
        """End every process of the simulated cluster and remove its files. Safe to call again."""
        if self.closed:
            return
        self.closed = True
        stdin = self.popen.stdin
        assert stdin is not None  # stdin=PIPE
        with contextlib.suppress(OSError):
            stdin.close()  # EOF: the supervisor ends its group and exits
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=CLOSE_SECONDS)
        # What the supervisor did not end (or all of it, if the supervisor hangs).
        kill_group(self.popen, leftovers=True)
        state.end_marked_processes(self.id)
        shutil.rmtree(self.ray_dir, ignore_errors=True)
        state.remove_state(self.dir)

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        status = _("closed") if self.closed else _("address {address}").format(address=self.address)
        return _("SimulatedRayCluster({nodes} nodes, {status}, supervisor pid {pid})").format(
            nodes=self.nodes, status=status, pid=self.pid
        )


def _drain(stream: IO[bytes]) -> None:
    with contextlib.suppress(OSError, ValueError):
        while stream.read(65536):
            pass


# ------------------------------------------------------------------ the supervisor
def _end_own_group() -> None:
    """Kill every other process of this process group (the Ray processes), then leave."""
    import psutil

    me = os.getpid()
    group = os.getpgid(0)
    victims = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != me and os.getpgid(proc.pid) == group:
                proc.kill()
                victims.append(proc)
        except (psutil.Error, OSError):
            continue
    psutil.wait_procs(victims, timeout=10)
    if os.environ.get("RAY_TMPDIR"):
        shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)
    os._exit(0)


def _serve(nodes: int, cpus: int) -> None:
    # SIGTERM when the owner dies (even by SIGKILL): end the group first, then leave.
    signal.signal(signal.SIGTERM, lambda *_: _end_own_group())
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    owner = os.environ.get("DTFKIT_RAY_OWNER")
    if owner and os.getppid() != int(owner):
        _end_own_group()  # the owner died before prctl took effect
    threading.Thread(target=_wait_for_eof, daemon=True).start()
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        shutdown_at_exit=False,
        head_node_args={"num_cpus": 0, "include_dashboard": False},
    )
    for _node in range(nodes):
        cluster.add_node(num_cpus=cpus)
    cluster.wait_for_nodes()
    print(f"dtfkit-ray-address {cluster.address}", flush=True)
    threading.Event().wait()


def _wait_for_eof() -> None:
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(4096):
            pass
    _end_own_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the supervisor of a simulated Ray cluster (internal)")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=1)
    ns = parser.parse_args(argv)
    try:
        _serve(ns.nodes, ns.cpus)
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stdout.flush()
        _end_own_group()


if __name__ == "__main__":
    main()
