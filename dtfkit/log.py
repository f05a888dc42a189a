"""dtfkit's own notes ("closed the cluster this cell started before", "started again: ..."), through one logger.

They go to the ``"dtfkit"`` logger at INFO, which by default prints them where they always appeared: on
standard output, in the cell that caused them. Silence or route them as any Python logger's::

    >>> import logging
    >>> logging.getLogger("dtfkit").setLevel(logging.WARNING)   # dtfkit's notes are quiet now
    >>> logging.getLogger("dtfkit").setLevel(logging.INFO)      # and shown again

To send them elsewhere, put your handler in place of the default one, e.g. into Python's logging setup::

    >>> logging.getLogger("dtfkit").handlers[:] = []       # no printing of its own
    >>> logging.getLogger("dtfkit").propagate = True       # the root logger's handlers decide
"""

from __future__ import annotations

import logging
import sys

LOGGER = logging.getLogger("dtfkit")


class _ToStandardOutput(logging.Handler):
    """Prints the message alone on whatever ``sys.stdout`` is now (a notebook gives each cell its own)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(record.getMessage(), file=sys.stdout, flush=True)
        except Exception:  # noqa: BLE001 - logging's contract: a handler reports its failure, never raises
            self.handleError(record)


if not LOGGER.handlers:  # set once, at the first import; what a user sets afterwards stays theirs
    LOGGER.addHandler(_ToStandardOutput())
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False  # shown once, not again by a root handler a notebook may have


def note(message: str) -> None:
    """Tell the reader something dtfkit did on its own (INFO on the ``"dtfkit"`` logger).

    Example::

        >>> note("dtfkit: started again: worker:0 (exited)")
        dtfkit: started again: worker:0 (exited)
    """
    LOGGER.info(message)
