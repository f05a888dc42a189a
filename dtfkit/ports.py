"""Free TCP ports on the loopback interface, for programs the kit starts beside its tasks.

Example::

    >>> ports = free_ports(3)
    >>> len(set(ports))
    3
"""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free right now (held open together so that they differ).

    Free when asked, not reserved: another program may take one before the caller binds it.
    """
    holders = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            holders.append(s)
        return [s.getsockname()[1] for s in holders]
    finally:
        for s in holders:
            s.close()
