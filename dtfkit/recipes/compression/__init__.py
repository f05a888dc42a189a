"""Gradient compression up close: fewer bytes on the wire, and what it costs in accuracy.

A small model (an MLP, or softmax regression with ``hidden=0``, on the 8x8 digits) trains
synchronously with ``workers`` workers and ``ps:0``, full batch: every worker holds its shard
of the training split as constants, reads the weights from ``ps:0``, computes its gradient,
*compresses it on the worker*, and sends the compressed payload; ``ps:0`` decompresses each,
averages them and takes a gradient descent step. The cut between the worker's ops and the
ps's ops lies on the payload tensors, so what crosses the link is the payload: the traced
``_Send``/``_Recv`` pairs of the step (``timeline.step_records``) say so, byte for byte.

The methods (``METHODS``), for a gradient of ``floats`` float32 numbers (all of the model's
gradients flattened into one vector):

=========  ===============================================================  =====================
method     worker sends                                                     bytes to ``ps:0``
=========  ===============================================================  =====================
``none``   the float32 gradient                                             ``4 floats``
``fp16``   the gradient cast to float16 (Horovod's ``Compression.fp16``,    ``2 floats``
           PyTorch DDP's ``fp16_compress_hook``)
``bf16``   the gradient cast to bfloat16 (``bf16_compress_hook``)           ``2 floats``
``topk``   the ``k`` entries largest in magnitude: float32 values and       ``8 k``
           int32 indices (Stich et al. 2018, "Sparsified SGD with memory";
           Lin et al. 2018, "Deep Gradient Compression")
``sign``   1 bit per entry (its sign), packed 8 to a uint8, and one         ``ceil(floats/8) + 4``
           float32 scale, the mean magnitude (Seide et al. 2014, "1-bit
           SGD"; Karimireddy et al. 2019, "Error Feedback Fixes SignSGD")
=========  ===============================================================  =====================

``topk`` and ``sign`` keep *error feedback*: each worker has a residual variable holding what
it did not send; the next step compresses ``gradient + residual`` and keeps the rest again.
Nothing is lost, only delayed: after any number of steps, what ``ps:0`` received from a
worker plus that worker's residual is the sum of its raw gradients (``sums=True`` returns
the three, accumulated in the step itself: the received one on ``ps:0``, after
decompressing). ``error_feedback=False`` drops the rest instead, and the sum no longer holds.

The other direction is not compressed: each worker reads the float32 *weights* (not a
sum of gradients) from ``ps:0`` at the start of its step, ``4 floats`` bytes per worker,
whatever the method. So compressing the gradients can at most halve a step's bytes, and
over a slow link the weights set a floor on the step: ``workers * 4 floats / rate`` on the
ps's link. Measured at 50 mbit/s (``benchmarks/compression.py``, ``benchmarks/RESULTS.md``):
every compressed method, fp16 as much as top-k, steps in about 0.77 of ``none``'s time, a few
milliseconds above that floor.

The 1-bit method is the sign with a scale, not a low-rank one (PowerSGD): its bits pack and
unpack with plain graph ops (``compress``, ``decompress``).

TensorFlow's distribution strategies offer no option to compress gradients (a request for
one, tensorflow/tensorflow#40468, was closed as stale); PyTorch DDP has communication hooks
(fp16, bf16, PowerSGD) and Horovod a ``Compression.fp16``.

Example (in a notebook; TensorFlow runs only in the tasks)::

    import dtfkit
    from dtfkit.recipes import compression

    with dtfkit.LocalCluster(ps=1, workers=2, link="50mbit") as cluster:
        runs = compression.compare(cluster, steps=60)
    print(compression.table(runs))
    compression.plot_tradeoff(runs)
    runs[0]["bytes_to_ps"]                                   # {'worker:0': 153640, 'worker:1': 153640}
    compression.expected_compressed_bytes("none", 38410)     # {'to_ps': 153640, 'from_ps': 153640}

Importing this module does not import TensorFlow.

``task_side`` runs in the tasks, ``kernel_side`` in the notebook kernel; every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
