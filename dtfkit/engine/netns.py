"""Private network namespaces for a cluster (Linux, unprivileged).

TensorFlow servers listen on every interface, with no authentication, and run any
graph they are sent. dtfkit therefore starts each cluster inside its own user +
network namespace: one small *anchor* process creates the namespaces and brings
the loopback interface up; every task of the cluster joins them with ``setns``
before it starts a thread or opens a network socket (tasks are spawned while the
anchor still starts and wait for it, see ``wait_ready``). Nothing outside the
namespace can reach the servers, and the ports cannot collide with any other cluster.

Example::

    >>> from dtfkit.engine import netns
    >>> netns.isolation_available()          # doctest: +SKIP
    (True, '')
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import subprocess
import sys
import threading

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sh14x"
# The write end of a pipe the owner gives the anchor: the anchor closes it once the
# namespace is ready (or dies), so tasks spawned alongside it see EOF then (wait_ready).
READY_FD_ENV = "DTFKIT_NETNS_READY_FD"

_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare_user_and_net() -> None:
    """Move the calling (single-threaded) process into new user + network namespaces.

    The calling user is mapped to root inside, which grants the capabilities needed
    to bring the loopback interface up and no more than the user had outside.
    """
    if _libc is None:
        raise OSError("network namespaces need Linux")
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare(CLONE_NEWUSER|CLONE_NEWNET)")
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
    if _libc is None:
        raise OSError("network namespaces need Linux")
    for kind, flag in (("user", CLONE_NEWUSER), ("net", CLONE_NEWNET)):
        fd = os.open(f"/proc/{anchor_pid}/ns/{kind}", os.O_RDONLY)
        try:
            _check(_libc.setns(fd, flag), f"setns({kind} namespace of pid {anchor_pid})")
        finally:
            os.close(fd)


def wait_ready(fd: int) -> None:
    """Block until the anchor closed its end of the readiness pipe ``fd`` (ready or dead).

    Lets the owner spawn a cluster's tasks while its anchor still starts: Python's
    start-up in both overlaps. If the anchor died instead, ``enter`` then fails and
    the owner, which reads the anchor's answer, reports why.
    """
    try:
        while os.read(fd, 4096):
            pass
    finally:
        os.close(fd)


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
    probe = "from dtfkit.engine import netns; netns.unshare_user_and_net(); netns.loopback_up(); print('ok')"
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


def anchor_command() -> list[str]:
    """The command that starts an anchor (``_anchor_main``).

    ``-S``: no site module. The anchor needs only the standard library and dtfkit
    (on PYTHONPATH, which -S keeps); site's .pth processing (an editable install's
    finder, certifi, ...) was about a third of its start-up (59 -> 41 ms alone), and
    tasks spawned alongside it wait for it (see wait_ready).
    """
    return [sys.executable, "-S", "-m", "dtfkit.engine.netns"]


def _env_with_package_path() -> dict[str, str]:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _anchor_main() -> None:
    """Entry point of the anchor process: hold the namespaces until stdin closes."""
    from dtfkit.engine import lifeline

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
    sys.stdout.write(f"ready {namespace_id()}\n")
    sys.stdout.flush()
    ready_fd = os.environ.get(READY_FD_ENV)
    if ready_fd:
        os.close(int(ready_fd))  # tasks waiting in wait_ready() may join now
    # The owner keeps our stdin open; EOF means it closed the cluster or died.
    while sys.stdin.buffer.read(4096):
        pass


if __name__ == "__main__":
    _anchor_main()
