"""Notebook facts, decided in one place: are we in a kernel, which cell runs.

The bottom of dtfkit: standard library only, no dtfkit import, so every layer may ask it
(the engine's sources, the task zygote's start, ``dtfkit.progress``, ``dtfkit.cluster``, ``dtfkit.lab``).
It never imports IPython: importing it only to learn that we are not in a kernel costs
seconds, and a kernel has imported it long before any of these questions is asked.

Example (in a script)::

    >>> from dtfkit.engine.platform import notebook
    >>> notebook.in_kernel(), notebook.in_task(), notebook.cell_key()   # doctest: +SKIP
    (False, False, None)
"""

from __future__ import annotations

import os
import sys
from typing import Any

# The task config a launcher gives each task (dtfkit.engine.wire.protocol.CONFIG_ENV).
TASK_ENV = "DTFKIT_TASK"


def shell() -> Any | None:
    """The running IPython shell, or None (IPython not imported, or no shell started).

    Example::

        >>> shell() is None                                                # doctest: +SKIP
        True
    """
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        return ipython.get_ipython()
    except Exception:  # noqa: BLE001 - a half-imported or odd IPython: no shell
        return None


def in_kernel() -> bool:
    """True inside a Jupyter/IPython kernel (a shell with a kernel), False in a terminal or script.

    Example::

        >>> in_kernel()                                                    # doctest: +SKIP
        False
    """
    return getattr(shell(), "kernel", None) is not None


def in_task() -> bool:
    """True in a dtfkit task process (its launcher set ``DTFKIT_TASK``).

    Example::

        >>> in_task()                                                      # doctest: +SKIP
        False
    """
    return bool(os.environ.get(TASK_ENV))


def cell_key() -> str | None:
    """``"cell:<id>"`` of the notebook cell running now (JupyterLab and nbclient send the id),
    else None (no kernel, or a front end that sends no cell id).

    Example (in JupyterLab)::

        >>> cell_key()                                                     # doctest: +SKIP
        'cell:5f3c9a2e-...'
    """
    current = shell()
    kernel = getattr(current, "kernel", None)
    if current is None or kernel is None:
        return None
    try:
        parent = kernel.get_parent("shell") if hasattr(kernel, "get_parent") else current.parent_header
    except Exception:  # noqa: BLE001 - older ipykernels
        parent = getattr(current, "parent_header", {})
    cell = (parent or {}).get("metadata", {}).get("cellId")
    return f"cell:{cell}" if cell else None


def cell_name(filename: str) -> str | None:
    """How IPython names ``filename`` in a traceback (``"Cell In[5]"``) when it is a cell's
    file, else None.

    Example (in a kernel, for the file of the fifth cell run)::

        >>> cell_name("/tmp/ipykernel_1/2.py")                             # doctest: +SKIP
        'Cell In[5]'
    """
    compiler = getattr(shell(), "compile", None)
    formatted = getattr(compiler, "format_code_name", None)
    label = formatted(filename) if formatted is not None else None
    return f"{label[0]} {label[1]}" if label else None
