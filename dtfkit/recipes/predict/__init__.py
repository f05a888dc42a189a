"""Predict, then run (chapter 13): a model of one gradient synchronisation with terms you can name,
fitted to measured runs and tested on runs it never saw.

Each algorithm of ``allreduce`` (ps, sharded ps, ring, and the binary tree) is written here as the
graph TensorFlow runs (``steps``): messages (``Step(task, to, nbytes)``) and adds
(``Step(task, None, nbytes)``), each waiting for the steps it reads. ``price`` plays that graph out
on the links of a dtfkit cluster (``Link``: a delay d, a rate r and a token bucket's burst):

- a message first takes the machine's CPU, which every task of the cluster shares, for
  ``μ + η·bytes`` (one message at a time);
- then both its links (the sender's out, the receiver's in), each one message at a time, for
  ``κ + β·bytes`` plus any wait for their token buckets (refilled at the rate r): ``n`` senders into
  one ps queue there (incast);
- it arrives ``α + d`` after it leaves them; an add holds its task for ``γ·bytes``;
- the latency is priced apart and added: how many ``d`` the run's critical path crosses when
  TensorFlow runs it from worker:0's master (every other task starts its piece ``d`` late, a
  receiver's request crosses the link before the answer, the master hears of the end ``d`` later),
  less an empty step's ``2d``.

The time of a run is a sum along its critical path, linear in the parameters ``PARAMS``
(α, κ, μ, β, η, γ): ``fit`` solves that least-squares problem for the relative errors, prices again
with what it found and repeats until the paths stop changing, and reports each parameter's
standard error. ``plain_alpha_beta`` is chapter 11's model (α = d, β = 1/r, nothing else) on the
same graphs, for comparison. ``measure`` times the algorithms on ``LocalCluster(link=...,
delay=...)``; ``errors``, ``summary`` and ``choices`` test the predictions against runs.
``time_buckets`` and ``time_overlap`` (task side) time a many-tensor model in buckets and a real
step with its synchronisation overlapped with the backward pass.

Example (in a notebook; TensorFlow runs only in the tasks)::

    from dtfkit.recipes import predict

    seen = predict.measure(["0ms", "5ms"], [2, 4], [12_000, 1_200_000])
    model = predict.fit(seen)
    new = predict.measure(["20ms"], [3], [120_000])
    predict.summary(predict.errors(new, model))

``task_side`` runs in the tasks, ``kernel_side`` in the notebook kernel; every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
