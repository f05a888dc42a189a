"""Traced steps as a Chrome trace file: open it in Perfetto (https://ui.perfetto.dev) or
``chrome://tracing`` and zoom into every op and transfer.

The file follows the Trace Event Format (the catapult project's "Trace Event Format"
document): a JSON object whose ``traceEvents`` list holds complete events
(``"ph": "X"``, with ``ts`` and ``dur`` in microseconds) and metadata events
(``"ph": "M"``) that name the processes and threads. Here every task is a process; its
threads are its ops (``compute``) and the transfers it received and sent (``receive``,
``send``), each split into as many lanes as it needs so that no two events of a thread
overlap. Every transfer is drawn twice, on the sender's ``send`` and the receiver's
``receive`` thread; its ``args`` name ``sender``, ``receiver``, ``tensor`` and ``bytes``.
A ``steps`` process on top marks each step; steps follow one another on the time axis
(``timeline.step_layout``).

Example::

    from dtfkit.recipes import allreduce, chrome_trace

    records = allreduce.trace_steps(cluster, "ps", 2, 1200, steps=3)
    chrome_trace.write_chrome_trace(records, "ps_steps.json")   # then open it in ui.perfetto.dev
    chrome_trace.check_chrome_trace("ps_steps.json")["events"]

Plain Python: no TensorFlow, no matplotlib.

Its code is in ``kernel_side`` (the notebook kernel); every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
