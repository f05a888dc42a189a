"""What the owner and its task zygote say to each other: one JSON packet a message, file
descriptors beside it.

The zygote (``python -m dtfkit.engine.task.zygote``) imports TensorFlow once and forks one child
per task on request (see ``dtfkit.engine.launchers.zygotes``). They talk over a Unix
``SOCK_SEQPACKET`` socket pair, so every message arrives whole, with the descriptors it carries
(``SCM_RIGHTS``): the write end of the task's output pipe, and the namespace anchor's readiness
pipe while it still starts.

Owner to zygote: ``{"op": "fork", "id": 7, "env": {...}, "cwd": "/x" | None, "fds": ["output", ...]}``
(``fds`` names the descriptors sent with it, in their order).

Zygote to owner: ``{"op": "ready", "pid": 12, "threads": [...], "refuse": ""}`` once its imports are
done (``refuse``: why it will not fork, with the threads it found); ``{"op": "forked", "id": 7,
"pid": 13}`` or ``{"op": "failed", "id": 7, "why": "..."}``; ``{"op": "exit", "pid": 13, "code": -9}``
when a child ends (``code`` as ``Popen.returncode``: minus the signal that ended it).

Example::

    >>> import socket
    >>> a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    >>> send(a, {"op": "fork", "id": 1}, [])
    >>> receive(b)
    ({'op': 'fork', 'id': 1}, [])
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from typing import Any

SOCKET_FD_ENV = "DTFKIT_ZYGOTE_FD"  # the zygote's end of the socket pair, inherited
MAX_MESSAGE_BYTES = 160 * 1024  # a fork request carries the task's whole environment; a packet must
# fit the socket's default send buffer (about 208 KiB): a larger one is refused, and the task starts cold
MAX_FDS = 8


def send(sock: socket.socket, message: dict[str, Any], fds: list[int]) -> None:
    """Send ``message`` with ``fds`` (duplicated into the receiver) as one packet."""
    data = json.dumps(message).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(f"a zygote message of {len(data)} bytes is over {MAX_MESSAGE_BYTES}")
    socket.send_fds(sock, [data], fds)


def receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors that came with it; ``(None, [])`` at the end."""
    data, fds, _flags, _address = socket.recv_fds(sock, MAX_MESSAGE_BYTES, MAX_FDS)
    if not data:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        return None, []
    return json.loads(data), list(fds)
