"""Split a cluster address ``host:port`` and say what is wrong with it, as gRPC would read it.

Example::

    address_problem("localhost")          # ('address-no-port', "has no port ...")
    host_of("[::1]:2222")                  # '::1'
"""

from __future__ import annotations

import re

LOOPBACK = {"localhost", "127.0.0.1", "::1", "ip6-localhost"}
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def split(address: str) -> tuple[str, str | None]:
    """``(host, port text)``; port None when there is no ``:port``. IPv6 hosts come as ``[::1]:2222``."""
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else None
    host, sep, port = address.rpartition(":")
    return (host, port) if sep else (address, None)


def host_of(address: str) -> str:
    return split(address)[0].lower()


def is_loopback(address: str) -> bool:
    host = host_of(address)
    return host in LOOPBACK or host.startswith("127.")


def same_place(address: str) -> str:
    """A key under which two addresses of one machine's port are equal (localhost == 127.0.0.1)."""
    host, port = split(address)
    return f"{'loopback' if is_loopback(address) else host.lower()}:{port}"


def address_problem(address: object) -> tuple[str, str] | None:
    """``(code, what is wrong)`` for an address a TensorFlow server could not be reached at, else None."""
    if not isinstance(address, str):
        # server_lib.ClusterSpec._make_cluster_def: "Task address %r must be bytes or unicode".
        return "address-bad-port", f"is {address!r}, not a 'host:port' string"
    if _SCHEME.match(address):
        # The cluster holds plain gRPC targets; the protocol is the server's (rpc_layer), not the address's.
        return "address-scheme", f"{address!r} starts with a scheme; cluster addresses are plain host:port"
    host, port = split(address)
    if port is None or not host:
        return "address-no-port", f"{address!r} has no {'host' if port is not None else 'port'}"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return "address-bad-port", f"{address!r} has port {port!r}, not a number from 1 to 65535"
    return None
