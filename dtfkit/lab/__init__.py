"""Chapter 8's sync/async lab: a run API (``Lab``) and the ipywidgets panel that drives it.

``import dtfkit.lab`` imports neither TensorFlow nor ipywidgets (the panel loads them
when asked for).

Example::

    from dtfkit.lab import Lab
    lab = Lab(steps=60)
    lab.panel()                    # the widgets (in a notebook)
    run = lab.run(mode="async")    # the same thing from code
    lab.close()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dtfkit.lazy import lazy_attributes

__all__ = ["Lab", "Panel", "RunRecord", "Settings"]

if TYPE_CHECKING:
    from dtfkit.lab.panel import Panel
    from dtfkit.lab.runner import Lab, RunRecord, Settings


# Loaded on first use: a task that imports dtfkit.lab.task_side must not load the lab's widgets.
__getattr__ = lazy_attributes(
    __name__,
    {
        "Lab": "dtfkit.lab.runner",
        "RunRecord": "dtfkit.lab.runner",
        "Settings": "dtfkit.lab.runner",
        "Panel": "dtfkit.lab.panel",
    },
)
