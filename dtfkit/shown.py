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

_REPR = reprlib.Repr()
_REPR.maxstring = 64
_REPR.maxother = 64
_REPR.maxlevel = 3
_REPR.maxdict = 10  # a trace event or a record has about ten keys
_REPR.maxlist = 10


def shown(value: object) -> str:
    """``repr(value)``, cut to a few dozen characters per string and a few items per container."""
    try:
        return _REPR.repr(value)
    except Exception:  # noqa: BLE001 - an int too long to print, a __repr__ that raises
        return f"<{type(value).__name__} object>"
