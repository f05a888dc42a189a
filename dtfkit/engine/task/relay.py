"""A delaying TCP relay in front of a task's TensorFlow server (``LocalCluster(delay=...)``).

The kernel cannot delay packets in an unprivileged namespace (see ``dtfkit.engine.platform.netns``),
so the delay is made in user space, one relay per task: this relay process holds the task's public
port (the one in ``cluster_spec``), and the TensorFlow server binds another, reachable only inside
the task's own network namespace. Every byte is held ``delay`` seconds after it arrived before it
goes on, either way: a request and its answer pay the delay once each way. The bytes keep their
order; the rate limit stays in the kernel (the token buckets on the links), so ``S`` bytes over a
link of rate ``r`` arrive ``delay + S/r`` after the first was sent.

Each connection is a TCP stream of its own, so this is a delay on messages, not on
packets: TCP's own ramp-up over a long round trip is not emulated (the relay's sockets
see no delay), but gRPC's flow control, which is end to end, is.

The delay of a connection is the larger of the two tasks' delays (as a transfer runs at
the slower task's rate): the relay gets ``{peer address: seconds}`` and its own delay
for peers it does not know.

The relay is a child of its task, in the task's process group (a kill of the task's
group ends it) and asks the kernel to end it when the task ends (``PR_SET_PDEATHSIG``).

Example (inside a task, before its server starts)::

    >>> server_port, process = start(reserved_socket, 0.02, {"10.77.0.3": 0.02})   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TypedDict

CONFIG_ENV = "DTFKIT_RELAY"
CHUNK = 1 << 16
# Bytes held at most per direction of a connection (in chunks): a peer that sends faster
# than its delay drains is slowed by TCP's own flow control beyond it.
MAX_CHUNKS = 1024
CONNECT_SECONDS = 30.0  # a peer may connect while the server behind the relay still starts
READY_SECONDS = 30.0  # the relay process's start-up (an interpreter and asyncio)


class RelayConfig(TypedDict):
    """What ``start`` hands the relay process (as JSON in ``CONFIG_ENV``)."""

    fd: int  # the listening socket, bound to the task's public port
    ready_fd: int  # the pipe's write end: b"1" once the relay accepts connections
    server_port: int  # where the task's server listens, behind the relay
    own: float  # this task's own delay, for a peer not in ``peers``
    peers: dict[str, float]  # {peer host: seconds}
    parent: int  # the task's pid: the relay ends with it


def peer_delays(
    cluster: Mapping[str, list[str] | dict[int, str]], task: str, plan: Mapping[str, float]
) -> tuple[float, dict[str, float]]:
    """This task's own delay, and ``{peer host: seconds}`` for every task of ``cluster``.

    A connection's delay is the larger of the two tasks' delays (``plan`` as
    ``dtfkit.engine.launchers.links.plan_delays`` makes it: ``{"default"|job|task: seconds}``).
    """
    from dtfkit.engine.platform.netns import task_value

    own = task_value(plan, task) or 0.0
    peers: dict[str, float] = {}
    for job, addresses in cluster.items():
        items = addresses.items() if isinstance(addresses, dict) else enumerate(addresses)
        for index, address in items:
            host = address.rpartition(":")[0]
            peers[host] = max(own, task_value(plan, f"{job}:{index}") or 0.0)
    return own, peers


def start(
    listener: socket.socket, own: float, peers: dict[str, float]
) -> tuple[int, subprocess.Popen[bytes]]:
    """Start the relay on ``listener`` (bound to the task's public port) as a child of this
    process; returns the port the server should bind instead, and the relay's process.

    Returns once the relay accepts connections; it listens only then, so that no peer's
    bytes wait in a backlog, unseen, before the relay holds them (they would arrive late
    by that wait, not by the delay alone). ``OSError`` if it ended or did not start within
    ``READY_SECONDS`` (its own words are in this process's output). Must be called from the thread
    that lives as long as the process (the main thread): ``PR_SET_PDEATHSIG`` fires when the thread
    that started the child ends.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))  # the namespace is the task's own: nobody takes it meanwhile
        server_port = probe.getsockname()[1]
    ready_read, ready_write = os.pipe()
    config: RelayConfig = {
        "fd": listener.fileno(),
        "ready_fd": ready_write,
        "server_port": server_port,
        "own": own,
        "peers": peers,
        "parent": os.getpid(),
    }
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = {**os.environ, CONFIG_ENV: json.dumps(config)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    # -S: only the standard library is needed (and dtfkit, on PYTHONPATH); its output goes
    # to the task's, so a failure shows in the task's log.
    try:
        process = subprocess.Popen(
            [sys.executable, "-S", "-m", "dtfkit.engine.task.relay"],
            stdin=subprocess.DEVNULL,
            env=env,
            pass_fds=(listener.fileno(), ready_write),
        )
    finally:
        os.close(ready_write)
    try:
        ready, _, _ = select.select([ready_read], [], [], READY_SECONDS)
        started = bool(ready) and os.read(ready_read, 1) == b"1"
    finally:
        os.close(ready_read)
    if not started:
        try:  # it closed the pipe: it ended, or is ending
            ended = process.wait(timeout=5) if ready else None
        except subprocess.TimeoutExpired:
            ended = None
        process.kill()
        process.wait()
        why = (
            f"ended with exit code {ended}" if ended is not None else f"did not start in {READY_SECONDS:g} s"
        )
        raise OSError(
            f"the delay relay (python -m dtfkit.engine.task.relay) {why}; its output is in this task's log"
        )
    return server_port, process


# ------------------------------------------------------------ the relay process
async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` s after it arrived, in order; an
    end of stream goes on as late as the bytes before it, a reset at once."""
    loop = asyncio.get_running_loop()
    held: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue(MAX_CHUNKS)  # None: a reset

    async def take() -> None:
        try:
            while True:
                data = await reader.read(CHUNK)
                await held.put((loop.time() + delay, data))
                if not data:
                    return
        except OSError:
            await held.put((loop.time(), None))

    taking = asyncio.ensure_future(take())
    try:
        while True:
            due, data = await held.get()
            if data is None:
                writer.transport.abort()
                return
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
    finally:
        taking.cancel()


def _no_delay(writer: asyncio.StreamWriter) -> None:
    # gRPC sends small frames and waits for answers: Nagle's algorithm would add its own delay.
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the server behind the relay, retrying (bounded) while it starts."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CONNECT_SECONDS
    while True:
        try:
            return await asyncio.open_connection("127.0.0.1", port, limit=CHUNK)
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


def _handler(config: RelayConfig) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    peers, own, port = config["peers"], config["own"], config["server_port"]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = (writer.get_extra_info("peername") or ("",))[0]
        delay = peers.get(peer, own)
        upstream = None
        try:
            up_reader, upstream = await _connect(port)
            _no_delay(writer)
            _no_delay(upstream)
            pumps = [
                asyncio.ensure_future(_pump(reader, upstream, delay)),
                asyncio.ensure_future(_pump(up_reader, writer, delay)),
            ]
            try:
                await asyncio.gather(*pumps)
            finally:
                for pump in pumps:
                    pump.cancel()
        except OSError:
            pass  # a peer or the server went away: so does this connection
        finally:
            for w in (writer, upstream):
                if w is not None:
                    w.close()

    return handle


async def _serve(config: RelayConfig) -> None:
    listener = socket.socket(fileno=config["fd"])
    listener.listen(128)
    listener.setblocking(False)
    server = await asyncio.start_server(_handler(config), sock=listener, limit=CHUNK)
    os.write(config["ready_fd"], b"1")
    os.close(config["ready_fd"])
    async with server:
        await server.serve_forever()


def _main() -> None:
    config: RelayConfig = json.loads(os.environ[CONFIG_ENV])
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: end with the task
    if os.getppid() != config["parent"]:
        os._exit(0)  # the task ended before prctl took effect
    # select(), not epoll: Python's epoll selector waits in whole milliseconds, rounded up
    # (selectors.EpollSelector.select: math.ceil(timeout * 1e3)), so a 0.2 ms delay held a message
    # for a millisecond whenever nothing else woke the loop; select() takes the timeout in
    # microseconds. A relay has a few sockets per peer, far below select's 1024.
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    try:
        loop.run_until_complete(_serve(config))
    finally:
        loop.close()


if __name__ == "__main__":
    _main()
