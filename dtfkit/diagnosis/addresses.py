"""Split a cluster address ``host:port`` and say what is wrong with it, as gRPC would read it.

Example::

    address_problem("localhost")          # ('address-no-port', "has no port ...")
    address_problem("::1:2222")           # ('address-not-dialable', "... brackets ...")
    host_of("[::1]:2222")                  # '::1'
"""

from __future__ import annotations

import re

from dtfkit.i18n import _

LOOPBACK = {"localhost", "127.0.0.1", "::1", "ip6-localhost"}
# The "any address" a server listens on: a peer that dials it reaches its own machine.
WILDCARD = {"0.0.0.0", "::"}
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
# What a DNS name or an IPv4 address is made of (RFC 1123 letters, digits, hyphens and dots; the
# underscore too, which resolvers accept in /etc/hosts names).
_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?")


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


def is_this_machine(address: str) -> bool:
    """Loopback, or the wildcard 0.0.0.0/[::]: a peer that dials it reaches its own machine."""
    return is_loopback(address) or host_of(address) in WILDCARD


def same_place(address: str) -> str:
    """A key under which two addresses of one machine's port are equal (localhost == 127.0.0.1)."""
    host, port = split(address)
    return f"{'loopback' if is_loopback(address) else host.lower()}:{port}"


def address_problem(address: object) -> tuple[str, str] | None:
    """``(code, what is wrong)`` for an address a TensorFlow server could not be reached at, else None."""
    if not isinstance(address, str):
        # server_lib.ClusterSpec._make_cluster_def: "Task address %r must be bytes or unicode".
        return "address-not-dialable", f"is {address!r}, not a 'host:port' string"
    if _SCHEME.match(address):
        # The cluster holds plain gRPC targets; the protocol is the server's (rpc_layer), not the address's.
        return (
            "address-scheme",
            _("{address_80!r} starts with a scheme; cluster addresses are plain host:port").format(
                address_80=address[:80]
            ),
        )
    if address != address.strip():
        # gRPC resolves the host as written: " node-a" is no name a resolver knows.
        return (
            "address-not-dialable",
            _("{address_80!r} has spaces around it, which gRPC keeps in the host name").format(
                address_80=address[:80]
            ),
        )
    if not address.startswith("[") and address.count(":") > 1:
        # gRPC's DoSplitHostPort (src/core/lib/gprpp/host_port.cc): "0 or 2+ colons. Bare hostname or IPv6
        # literal" -- the whole text is the host, and there is no port.
        return (
            "address-not-dialable",
            _(
                "{address_80!r} is an IPv6 address without brackets, which gRPC reads as a host with no port"
            ).format(address_80=address[:80]),
        )
    host, port = split(address)
    if port is None or not host:
        return "address-no-port", (
            _("{address!r} has no host") if port is not None else _("{address!r} has no port")
        ).format(address=address[:80])
    if not (port.isascii() and port.isdigit() and len(port) <= 5) or not 1 <= int(port) <= 65535:
        return "address-bad-port", _(
            "{address_80!r} has port {port_20!r}, not a number from 1 to 65535"
        ).format(address_80=address[:80], port_20=port[:20])
    # DoSplitHostPort: "Require all bracketed hosts to contain a colon, because a hostname or IPv4 address
    # should never use brackets."
    bracketed = address.startswith("[")
    valid = (_IPV6.fullmatch(host) and ":" in host) if bracketed else _HOSTNAME.fullmatch(host)
    if not valid or len(host) > 253:  # RFC 1035: a name is at most 253 characters written out
        return (
            "address-not-dialable",
            _(
                "{address_80!r} has the host {host_60!r}, which is no hostname or IP address a resolver knows (hostnames are ASCII letters, digits, '-' and '.')"
            ).format(address_80=address[:80], host_60=host[:60]),
        )
    return None
