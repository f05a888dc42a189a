"""A step up close: what every task computed, and what crossed every link, and when.

``step_records`` (in a task) turns one traced ``Session.run`` (``RunOptions(FULL_TRACE)``
with partition graphs, ``placement.trace_options()``) into plain records, one per op
and one per tensor that went from one task to another:

- compute: ``{"step", "kind": "compute", "task", "name", "op", "start_us", "end_us"}``
  (``op`` is the kernel the executor ran),
- transfer: ``{"step", "kind": "transfer", "from", "to", "tensor", "bytes", "ready_us",
  "start_us", "end_us", "used_us", "timed_by"}``.

Times are microseconds from the first thing any task did in that step (all tasks of a
``LocalCluster`` share one clock). A transfer's ``ready_us`` is when the op that made
the tensor ended on the sender, ``start_us`` to ``end_us`` the gRPC ``RecvTensor`` call
that carried it (from ``ready_us`` on: the receiver asks at the step's start, the
sender answers once the tensor exists), and ``used_us`` when the receiver's first op
that used it started. ``bytes`` is the tensor's size (``placement.transfer_table``):
the payload, not gRPC's framing around it.

The rest is plain Python for the notebook (no TensorFlow): ``link_bytes`` and
``link_usage`` add up each link, ``plot_timeline`` draws the steps, and
``dtfkit.recipes.chrome_trace`` writes them for a trace viewer.

Example (``allreduce.trace_steps`` runs the steps in a client task)::

    records = allreduce.trace_steps(cluster, "ring", 3, 1200, steps=2)
    timeline.link_bytes(records)[0]     # {('worker:0', 'worker:1'): 3200, ...}
    timeline.plot_timeline(records)

Importing this module does not import TensorFlow.

``task_side`` runs in the tasks, ``kernel_side`` in the notebook kernel; every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
