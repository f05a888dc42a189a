"""Private network namespaces for a cluster (Linux, unprivileged).

TensorFlow servers listen on every interface, with no authentication, and run any
graph they are sent. dtfkit therefore starts each cluster inside its own user +
network namespace: one small *anchor* process creates the namespaces and brings
the loopback interface up; every task of the cluster joins them with ``setns``
before it starts a thread or opens a network socket (tasks are spawned while the
anchor still starts and wait for it, see ``wait_ready``). Nothing outside the
namespace can reach the servers, and the ports cannot collide with any other cluster.

With emulated links (``LocalCluster(link="100mbit")``) the anchor's namespace is a
*hub* instead: it holds a bridge, and every task makes a network namespace of its own
(a child of the anchor's user namespace, ``enter_own()``), then asks the anchor
(``request_link()``, over a Unix socket, passing the namespace as a file descriptor)
to connect it: a veth pair, one end on the bridge, the other the task's ``eth0`` with
a ``10.77.x.y`` address, and a token bucket (``tbf``) on both ends' egress so that what
the task sends and what it receives are limited to its rate. The interfaces vanish
with the namespaces: the hub's when the anchor ends, a task's when the task does.

A link's *delay* (``LocalCluster(delay="20ms")``) is not made here, and not in the
kernel: in this kernel's unprivileged namespaces (tried 2026-11-26 with ``unshare -Urn``
on a veth, Linux 6.18, iproute2 6.1) ``tc qdisc add`` accepts only ``tbf``, ``htb``,
``pfifo`` and ``bfifo``; ``netem``, ``fq``, ``etf``, ``taprio``, ``cake``, ``plug`` and
the rest are "Specified qdisc kind is unknown". None of the four holds a packet for a
fixed time (tbf's ``latency`` only bounds its queue, so a delay made with it would
depend on the load), and the other route, a BPF program stamping departure times for an
``fq``/``etf`` qdisc, is closed too (no ``fq``/``etf``, no classifier behind ``clsact``,
``kernel.unprivileged_bpf_disabled = 2``). So the delay is a user-space relay in front of
each task's server (``dtfkit.engine.task.relay``), with the rate left to the token buckets
here; measured against ``d + S/r`` in ``benchmarks/RESULTS.md`` (every transfer of 1 MB
or more within 10%, a TensorFlow read paying the delay once each way).

Example::

    >>> from dtfkit.engine.platform import netns
    >>> netns.isolation_available()          # doctest: +SKIP
    (True, '')
    >>> netns.parse_rate("100mbit")
    100000000
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import select
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import TypeVar

from dtfkit.shown import shown

V = TypeVar("V")  # a plan's values: bits per second, or seconds

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sh14x"
# The write end of a pipe the owner gives the anchor: the anchor writes READY_BYTE and
# closes it once the namespace is ready (or dies without writing), so tasks spawned
# alongside it see EOF then, and know which (wait_ready).
READY_FD_ENV = "DTFKIT_NETNS_READY_FD"
READY_BYTE = b"1"
# A task spawned alongside an anchor that made no namespace leaves with this code,
# before connecting to its owner; its launcher starts it again (``LocalLauncher``).
NO_NAMESPACE_EXIT = 75

_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _linux_libc() -> ctypes.CDLL:
    if _libc is None:
        raise OSError("network namespaces need Linux")
    return _libc


def _setns(pid: int, kind: str, flag: int) -> None:
    """Join the ``kind`` namespace (``"user"``, ``"net"``) of process ``pid``."""
    libc = _linux_libc()
    fd = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY)
    try:
        _check(libc.setns(fd, flag), f"setns({kind} namespace of pid {pid})")
    finally:
        os.close(fd)


def unshare_user_and_net() -> None:
    """Move the calling (single-threaded) process into new user + network namespaces.

    The calling user is mapped to root inside, which grants the capabilities needed
    to bring the loopback interface up and no more than the user had outside.
    """
    libc = _linux_libc()
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare(CLONE_NEWUSER|CLONE_NEWNET)")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")


def loopback_up() -> None:
    """Bring ``lo`` up in the current network namespace (it starts DOWN)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def enter(anchor_pid: int) -> None:
    """Join the user and network namespaces of ``anchor_pid``.

    Must run before the process starts any thread (``setns`` into a user
    namespace is refused to multi-threaded processes).
    """
    for kind, flag in (("user", CLONE_NEWUSER), ("net", CLONE_NEWNET)):
        _setns(anchor_pid, kind, flag)


def wait_ready(fd: int) -> bool:
    """Block until the anchor closed its end of the readiness pipe ``fd``; True if it
    made its namespace, False if it died first.

    Lets the owner spawn a task while its anchor still starts: Python's start-up in
    both overlaps. The owner reads the anchor's answer too, and starts the task again
    when there was no namespace.
    """
    ready = False
    try:
        while chunk := os.read(fd, 4096):
            ready = ready or READY_BYTE in chunk
    finally:
        os.close(fd)
    return ready


def enter_own(anchor_pid: int) -> None:
    """Join the user namespace of ``anchor_pid`` and make a network namespace of one's own.

    The new network namespace belongs to the anchor's user namespace, so the anchor can
    move an interface into it. Must run before the process starts any thread.
    """
    _setns(anchor_pid, "user", CLONE_NEWUSER)
    _check(_linux_libc().unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    loopback_up()


# ------------------------------------------------------------------ emulated links
LINK_PREFIX = "10.77"  # every cluster has its own hub, so every cluster may use the same range
LINK_REPLY_SECONDS = 30.0
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(kbit|mbit|gbit)\s*$", re.IGNORECASE)
_RATE_UNITS = {"kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
RATE_FORM = "a number and kbit, mbit or gbit, as tc writes rates: '500kbit', '100mbit', '1.5gbit'"


def parse_rate(value: object) -> int:
    """A tc-style rate (``"100mbit"``) in bits per second; ``ValueError`` naming the bad value."""
    # A rate is a few characters: a longer string is no rate, and is not parsed.
    match = _RATE.match(value) if isinstance(value, str) and len(value) <= 64 else None
    bits = float(match.group(1)) * _RATE_UNITS[match.group(2).lower()] if match else 0
    # Below 1 kB/s a link is no use; above 10 Gbit/s loopback is the better model (and
    # the token bucket's rate field, in bytes/s, holds 34 Gbit/s at most).
    if not 8000 <= bits <= 10**10:
        raise ValueError(
            f"link rate {shown(value)} is not a rate: expected {RATE_FORM}, from 8kbit to 10gbit"
        )
    return int(bits)


def format_rate(bits: int) -> str:
    """``100000000`` -> ``'100mbit'`` (the largest unit that keeps it whole)."""
    for unit in ("gbit", "mbit", "kbit"):
        if bits % _RATE_UNITS[unit] == 0:
            return f"{bits // _RATE_UNITS[unit]}{unit}"
    return f"{bits}bit"


_DELAY = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
_DELAY_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
DELAY_FORM = "a number and us, ms or s, with no space, as tc writes times: '0ms', '500us', '20ms', '1.5s'"
MAX_DELAY_SECONDS = 10.0


def parse_delay(value: object) -> float:
    """A tc-style one-way delay (``"20ms"``) in seconds; ``ValueError`` naming the bad value.

    Example::

        >>> parse_delay("20ms"), parse_delay("1.5s"), parse_delay("0ms")
        (0.02, 1.5, 0.0)
    """
    match = _DELAY.match(value) if isinstance(value, str) and len(value) <= 64 else None
    if match is None:
        raise ValueError(f"delay {shown(value)} is not a time: expected {DELAY_FORM}")
    seconds = float(match.group(1)) * _DELAY_UNITS[match.group(2)]
    # Beyond seconds, gRPC's and the learner's own timeouts fire first: no lesson needs it.
    if seconds > MAX_DELAY_SECONDS:
        raise ValueError(f"delay {shown(value)} is more than {MAX_DELAY_SECONDS:g} s: use 0ms to 10s")
    return round(seconds, 9)


def format_delay(seconds: float) -> str:
    """``0.02`` -> ``'20ms'``, ``1.5`` -> ``'1.5s'``, ``0.0005`` -> ``'500us'``."""
    if seconds >= 1:
        return f"{seconds:g}s"
    if seconds == 0 or seconds * 1000 >= 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds * 1e6:g}us"


def task_value(plan: Mapping[str, V], task: str) -> V | None:
    """``task``'s value ("worker:1") in a link plan: its own, its job's, the default, or None."""
    for key in (task, task.partition(":")[0], "default"):
        if key in plan:
            return plan[key]
    return None


def link_address(n: int) -> str:
    """The ``n``-th task address of a hub (``n`` from 0): ``10.77.0.2``, ``10.77.0.3``, ..."""
    third, fourth = divmod(n + 1, 254)  # the last byte runs 1..254: never .0 or .255
    return f"{LINK_PREFIX}.{third}.{fourth + 1}"


def request_link(path: str, address: str, rate: int | None, timeout: float = LINK_REPLY_SECONDS) -> None:
    """Ask the anchor listening at ``path`` to connect this process's network namespace.

    ``rate`` in bits per second (None: no limit). Raises ``OSError`` with the anchor's
    reason, or after ``timeout`` seconds without an answer.
    """
    fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            try:
                sock.connect(path)
                socket.send_fds(sock, [json.dumps({"address": address, "rate": rate}).encode()], [fd])
                reply = sock.recv(4096).decode("utf-8", errors="replace")
            except TimeoutError:
                raise OSError(
                    f"the namespace anchor did not connect {address} within {timeout:g} s"
                ) from None
            except OSError as exc:
                raise OSError(f"the namespace anchor could not be asked for a link ({exc})") from None
    finally:
        os.close(fd)
    if reply != "ok":
        raise OSError(f"the link for {address} could not be made: {reply or 'the anchor gave no answer'}")


def token_burst_bytes(rate: int) -> int:
    """The bytes a link of ``rate`` bits/s lets through at once after a pause: 10 ms of traffic, at
    least 16 KiB (more than one full-size frame).

    >>> token_burst_bytes(1_000_000_000)
    1250000
    """
    return max(16 * 1024, rate // 8 // 100)


def _tbf_args(rate: int) -> dict[str, str | int]:
    """Token bucket settings for ``rate`` bits/s: a burst of ``token_burst_bytes``, up to 50 ms of queue."""
    return {"rate": f"{max(rate // 1000, 1)}kbit", "burst": token_burst_bytes(rate), "latency": "50ms"}


def _mac_of(address: str) -> str:
    """A fixed, locally administered MAC address for ``address``: a restarted task keeps its
    MAC too, so its peers' ARP caches stay right."""
    return "02:00:" + ":".join(f"{int(octet):02x}" for octet in address.split("."))


class _Hub:
    """The anchor's side: a bridge in the hub namespace, and a veth pair per request."""

    BRIDGE = "dtfbr0"

    def __init__(self) -> None:
        from pyroute2 import IPRoute

        self.IPRoute = IPRoute
        self.ipr = IPRoute()
        self.ipr.link("add", ifname=self.BRIDGE, kind="bridge")
        self.bridge = self.ipr.link_lookup(ifname=self.BRIDGE)[0]
        self.ipr.link("set", index=self.bridge, state="up")
        self.count = 0

    def serve(self, conn: socket.socket) -> None:
        conn.settimeout(10.0)
        fds: list[int] = []
        try:
            message, fds, _, _ = socket.recv_fds(conn, 4096, 1)
            request = json.loads(message)
            if len(fds) != 1:
                raise ValueError("the request carried no network namespace")
            self.connect(fds[0], request["address"], request.get("rate"))
            reply = "ok"
        except Exception as exc:  # noqa: BLE001 - the task gets the reason
            reply = f"{type(exc).__name__}: {exc}"
        finally:
            for fd in fds:
                os.close(fd)
        with contextlib.suppress(OSError):
            conn.sendall(reply.encode())

    def connect(self, ns_fd: int, address: str, rate: int | None) -> None:
        libc = _linux_libc()  # the hub runs only where unshare_user_and_net() worked
        self.count += 1
        # A fresh hub-side name each time: the pair of a restarted task's old process may
        # still be on its way out (namespaces are torn down asynchronously).
        hub_name = f"dtf{self.count}"
        ipr = self.ipr
        ipr.link("add", ifname=hub_name, kind="veth", peer={"ifname": "eth0", "net_ns_fd": ns_fd})
        index = ipr.link_lookup(ifname=hub_name)[0]
        ipr.link("set", index=index, master=self.bridge, state="up")
        if rate:
            ipr.tc("add", "tbf", index=index, handle="1:", **_tbf_args(rate))
        # A netlink socket works in the namespace it was made in: make one in the task's.
        own = os.open("/proc/self/ns/net", os.O_RDONLY)
        try:
            _check(libc.setns(ns_fd, CLONE_NEWNET), "setns(the task's network namespace)")
            try:
                task_ipr = self.IPRoute()
            finally:
                _check(libc.setns(own, CLONE_NEWNET), "setns(back to the hub)")
        finally:
            os.close(own)
        with task_ipr:
            eth = task_ipr.link_lookup(ifname="eth0")[0]
            task_ipr.link("set", index=eth, address=_mac_of(address))
            task_ipr.addr("add", index=eth, address=address, prefixlen=16)
            if rate:
                task_ipr.tc("add", "tbf", index=eth, handle="1:", **_tbf_args(rate))
            task_ipr.link("set", index=eth, state="up")


def namespace_id(pid: int | str = "self") -> str:
    """The network namespace identity of a process, e.g. ``'net:[4026532281]'``."""
    return os.readlink(f"/proc/{pid}/ns/net")


# The answer of isolation_available(), once known in this process. A cluster's own
# anchor answers it too (see known_isolation): the first cluster need not wait for a
# separate probe process before its anchor (about 0.1 s on two cores).
_KNOWN: tuple[bool, str] | None = None
_KNOWN_LOCK = threading.Lock()


def known_isolation() -> tuple[bool, str] | None:
    """What ``isolation_available()`` would answer, if this process knows it already (else None)."""
    return _KNOWN


def remember_isolation(ok: bool, why: str = "") -> None:
    """Record what an anchor showed (it does what the probe does); a known answer stays."""
    global _KNOWN
    with _KNOWN_LOCK:
        if _KNOWN is None:
            _KNOWN = (ok, why)


def isolation_available() -> tuple[bool, str]:
    """Whether unprivileged user + network namespaces work here, and why not if not.

    The answer is measured once per process by starting a tiny probe process (or
    taken from an anchor that already succeeded, see ``remember_isolation``).
    """
    global _KNOWN
    if _KNOWN is None:
        answer = _probe()
        with _KNOWN_LOCK:
            if _KNOWN is None:
                _KNOWN = answer
    return _KNOWN


def _probe() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces are Linux-only (this is {sys.platform})"
    probe = "from dtfkit.engine.platform import netns; netns.unshare_user_and_net(); netns.loopback_up(); print('ok')"
    try:
        out = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            timeout=30,
            env=_env_with_package_path(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"the namespace probe failed to run: {exc}"
    if out.returncode == 0 and out.stdout.strip() == "ok":
        return True, ""
    last = (out.stderr.strip().splitlines() or ["no output"])[-1]
    return False, f"user namespaces are not available ({last})"


def anchor_command(links: str | None = None) -> list[str]:
    """The command that starts an anchor (``_anchor_main``); ``links``: the hub's socket path.

    ``-S``: no site module. The anchor needs only the standard library and dtfkit
    (on PYTHONPATH, which -S keeps); site's .pth processing (an editable install's
    finder, certifi, ...) was about a third of its start-up (59 -> 41 ms alone), and
    tasks spawned alongside it wait for it (see wait_ready). A hub of emulated links
    needs pyroute2 from site-packages, so it keeps the site module.
    """
    if links:
        return [sys.executable, "-m", "dtfkit.engine.platform.netns", "--links", links]
    return [sys.executable, "-S", "-m", "dtfkit.engine.platform.netns"]


def _env_with_package_path() -> dict[str, str]:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _anchor_main(argv: list[str]) -> None:
    """Entry point of the anchor process: hold the namespaces until stdin closes.

    ``--links PATH``: also be the hub of emulated links, answering ``request_link()``
    at the Unix socket ``PATH``.
    """
    from dtfkit.engine.platform import lifeline

    lifeline.die_with_parent()
    try:
        unshare_user_and_net()
        loopback_up()
    except OSError as exc:
        # One line the owner can show (it reads only the first); tasks waiting on the
        # readiness pipe see EOF when we exit.
        sys.stdout.write(f"failed {exc}\n")
        sys.stdout.flush()
        sys.exit(1)
    hub = listener = None
    if argv[:1] == ["--links"]:
        try:
            hub = _Hub()
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(argv[1])
            listener.listen(64)
        except Exception as exc:  # noqa: BLE001 - the owner shows the reason
            sys.stdout.write(f"links unavailable: {type(exc).__name__}: {exc}\n")
            sys.stdout.flush()
            return
    sys.stdout.write(f"ready {namespace_id()}\n")
    sys.stdout.flush()
    ready_fd = os.environ.get(READY_FD_ENV)
    if ready_fd:
        # BrokenPipeError: no task waits on the pipe (every task spawned with it ended).
        with contextlib.suppress(BrokenPipeError):
            os.write(int(ready_fd), READY_BYTE)
        os.close(int(ready_fd))  # tasks waiting in wait_ready() may join now
    # The owner keeps our stdin open; EOF means it closed the cluster or died.
    watched = [0] + ([listener] if listener is not None else [])
    while True:
        ready, _, _ = select.select(watched, [], [])
        if 0 in ready and not os.read(0, 4096):
            return
        if hub is not None and listener is not None and listener in ready:
            conn, _ = listener.accept()
            with conn:
                hub.serve(conn)


if __name__ == "__main__":
    _anchor_main(sys.argv[1:])
