"""Owner process: start and end the anchor, the process holding the tasks' private network namespace.

The anchor is ``python -m dtfkit.engine.platform.netns``: a fresh user + network namespace
(loopback up), and with ``link=`` the hub of the tasks' emulated links. Its namespace lives as
long as it does; the owner ends it by closing its stdin.

Example::

    >>> anchor = NamespaceAnchor.start(env)                          # doctest: +SKIP
    >>> anchor.namespace, anchor.alive                               # doctest: +SKIP
    ('net:[4026532600]', True)
    >>> anchor.close()                                               # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
from typing import IO

from dtfkit.engine.platform import netns, state
from dtfkit.engine.platform.groups import kill_group
from dtfkit.errors import ClusterStartError

ANCHOR_READY_SECONDS = 30.0


class NamespaceAnchor:
    """A process holding a fresh user + network namespace (loopback up) for tasks to join.

    ``start()`` waits until the namespace exists. ``launch()`` does not: tasks spawned
    meanwhile get ``gate`` (the read end of a pipe the anchor closes once ready) and wait
    on it themselves, so the anchor's start-up overlaps theirs; ``confirm()`` then reads
    the anchor's answer.
    """

    def __init__(
        self, popen: subprocess.Popen[bytes], namespace: str = "", mark: str = "", gate: int | None = None
    ):
        if popen.stdin is None or popen.stdout is None:
            raise ValueError("an anchor's stdin and stdout are pipes (launch() makes them)")
        self.popen = popen
        self._stdin: IO[bytes] = popen.stdin  # closed: the anchor leaves
        self._stdout: IO[bytes] = popen.stdout  # its one line: "ready <namespace>", or why not
        self.namespace = namespace  # "" until confirmed
        self.mark = mark  # the DTFKIT_CLUSTER value in its environment, when not the cluster's
        self.gate = gate

    @classmethod
    def launch(cls, env: dict[str, str], mark: str = "", links: str | None = None) -> NamespaceAnchor:
        """Start an anchor without waiting for it (see ``confirm()``); ``links`` as in ``start()``."""
        gate, ready_end = os.pipe()  # not inheritable: only the children given it by pass_fds
        try:
            popen = subprocess.Popen(
                netns.anchor_command(links),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**env, netns.READY_FD_ENV: str(ready_end)},
                start_new_session=True,
                pass_fds=(ready_end,),
            )
        except BaseException:
            os.close(gate)
            raise
        finally:
            os.close(ready_end)  # the anchor holds the only write end now
        return cls(popen, mark=mark, gate=gate)

    @classmethod
    def start(cls, env: dict[str, str], mark: str = "", links: str | None = None) -> NamespaceAnchor:
        """Start an anchor and wait (bounded) until its namespace is up; ``ClusterStartError`` if not.

        ``links``: the path of a Unix socket where the anchor, the hub of emulated links,
        answers the tasks' requests for a link (``dtfkit.engine.platform.netns.request_link``).
        """
        anchor = cls.launch(env, mark, links)
        why = anchor.confirm()
        if why.startswith("links unavailable"):
            raise ClusterStartError(
                f"link= needs virtual network links in the cluster's namespace, and this system "
                f"refused them ({why.partition(': ')[2]}); leave link= out to use loopback"
            )
        if why:
            raise ClusterStartError(
                f"the network namespace could not be created: {why}; "
                "pass network='host' to run without isolation"
            )
        return anchor

    def confirm(self) -> str:
        """Wait (bounded) for the anchor's answer: ``""`` once its namespace is up, else why not
        (the anchor is then ended)."""
        if self.gate is not None:
            os.close(self.gate)  # every task that waits on it has its own copy
            self.gate = None
        if self.namespace:
            return ""
        line = _read_line_within(self._stdout, ANCHOR_READY_SECONDS)
        if not line.startswith("ready "):
            self.close()
            return line or f"no answer in {ANCHOR_READY_SECONDS:g} s"
        netns.remember_isolation(True)
        self.namespace = line.split()[1]
        return ""

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def identity(self) -> state.ProcessIdentity:
        ident = state.process_identity(self.popen.pid)
        if self.mark:
            ident["mark"] = self.mark
        return ident

    def close(self) -> None:
        if self.gate is not None:
            os.close(self.gate)
            self.gate = None
        with contextlib.suppress(OSError):
            self._stdin.close()  # EOF: the anchor leaves, and with it the namespace
        kill_group(self.popen)
        self._stdout.close()


def _read_line_within(stream: IO[bytes], timeout: float) -> str:
    """One line from a pipe, waiting at most ``timeout`` seconds."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        return ""
    return stream.readline().decode("utf-8", errors="replace").strip()
