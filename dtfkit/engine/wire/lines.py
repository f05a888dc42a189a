"""Reading a task's output, a line at a time, with a bound: shared by every launcher that reads a pipe.

Example::

    >>> import io
    >>> read_line(io.BytesIO(b"hello\\nworld\\n"))
    b'hello\\n'
"""

from __future__ import annotations

from typing import Protocol

# One line is cut after MAX_LINE_BYTES, keeping its last LINE_END_BYTES (where a done mark may be).
MAX_LINE_BYTES = 64 * 1024
LINE_END_BYTES = 256


class LineStream(Protocol):
    """A binary stream read a line at a time: a pipe's ``popen.stdout``, ``io.BytesIO``."""

    def readline(self, size: int = -1, /) -> bytes: ...


def read_line(stream: LineStream, limit: int = MAX_LINE_BYTES) -> bytes:
    """One line from a binary stream, at most about ``limit`` bytes of it kept.

    A longer line keeps its first ``limit`` bytes and its last ``LINE_END_BYTES``,
    with a note of how much was cut between them. Returns b"" at the end of the stream.
    """
    head = stream.readline(limit)
    if not head or head.endswith(b"\n") or len(head) < limit:
        return head
    end = b""
    cut = 0
    while True:
        more = stream.readline(limit)
        if not more:
            break
        joined = end + more
        cut += max(0, len(joined) - LINE_END_BYTES)
        end = joined[-LINE_END_BYTES:]
        if more.endswith(b"\n"):
            break
    if not cut:
        return head + end
    return head + f" [... {cut} bytes cut by dtfkit ...] ".encode() + end
