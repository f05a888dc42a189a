"""Which way to train works under which ``tf.distribute`` strategy, found by running each (issue 40).

``compatibility_table()`` (kernel side) starts, for every strategy × trainer, the small local cluster
that strategy needs, trains a linear model a few steps in it (``task_side.train``) and records "works"
or the first line of the real error, each bounded. It also measures what Keras 3's
``optimizer.iterations`` counted against the steps that ran. ``python -m dtfkit compat`` prints it.

Example::

    from dtfkit.recipes import compat
    table = compat.compatibility_table(strategies=["MultiWorkerMirroredStrategy"])
    print(table)

Its code is in ``task_side`` (inside the tasks) and ``kernel_side`` (in the notebook kernel).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
