"""The owner's side of a control socket: authenticate each connection, read its first message.

A cluster (``owner.events``, for ``owner.tasks``) listens on a Unix socket for its task processes. Each accepted connection is authenticated in its own thread,
so a stalled or foreign peer holds up nobody.

Example::

    >>> listener = Listener(path, family="AF_UNIX")              # doctest: +SKIP
    >>> serve(listener, lambda: closed, lambda conn: ..., "dtfkit-accept")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, Listener, answer_challenge, deliver_challenge
from typing import TypeVar

M = TypeVar("M")  # a message type of dtfkit.engine.wire.protocol


def serve(
    listener: Listener, is_closed: Callable[[], bool], handle: Callable[[Connection], None], name: str
) -> None:
    """Accept until ``is_closed()``; run ``handle(conn)`` for each connection in a daemon thread."""
    while not is_closed():
        try:
            conn = listener.accept()
        except Exception:  # noqa: BLE001 - a failed accept must not stop accepting
            if is_closed():
                return
            continue
        if is_closed():
            conn.close()
            return
        threading.Thread(target=handle, args=(conn,), name=name, daemon=True).start()


def first_message(conn: Connection, authkey: bytes, kind: type[M]) -> M | None:
    """Authenticate both ways (what ``Listener(authkey=...).accept()`` would do, the same way
    round as ``Client()``), then read the peer's first message: a ``kind`` (a message
    type of ``dtfkit.engine.wire.protocol``).

    Returns None, with the connection closed, for a peer that fails any of that.
    """
    try:
        deliver_challenge(conn, authkey)
        answer_challenge(conn, authkey)
        message = conn.recv()
    except (EOFError, OSError, AuthenticationError):
        message = None
    if not isinstance(message, kind):
        conn.close()
        return None
    return message


def stop_listening(listener: Listener, address: str) -> None:
    """Close ``listener`` and wake the ``serve()`` loop blocked in ``accept()`` so its thread ends.

    The wake-up is a bare connection, not ``Client()``: the loop may have ended already
    (it stops after any accept once closed), and ``Client()`` would then wait for a
    handshake for ever.
    """
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        sock.connect(address)
    listener.close()
