"""``shown(value)``: a value as an error message may quote it, however large it is.

A bad argument is named in its error; a 10 MB string or a deep structure must not make
the message 10 MB long (nor take seconds to write). ``reprlib`` cuts long strings and
containers and stops at a fixed depth.

Example::

    >>> len(shown("x" * 10_000_000)) < 80
    True
    >>> shown({"ps": "50ms"})
    "{'ps': '50ms'}"
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable


def repr_cutter(**limits: int) -> Callable[[object], str]:
    """A ``repr`` cut to ``limits`` (``reprlib.Repr``'s attributes: ``maxstring``, ``maxlist``,
    ``maxlevel``, ...); a value whose ``repr`` raises is named by its type."""
    cutter = reprlib.Repr()
    for name, limit in limits.items():
        setattr(cutter, name, limit)

    def cut(value: object) -> str:
        try:
            return cutter.repr(value)
        except Exception:  # noqa: BLE001 - an int too long to print, a __repr__ that raises
            return f"<{type(value).__name__} object>"

    return cut


# a trace event or a record has about ten keys
shown = repr_cutter(maxstring=64, maxother=64, maxlevel=3, maxdict=10, maxlist=10)
shown.__doc__ = "``repr(value)``, cut to a few dozen characters per string and a few items per container."
