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

import lazy_loader

# Loaded on first use: a task that imports dtfkit.lab.task_side must not load the lab's widgets.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
