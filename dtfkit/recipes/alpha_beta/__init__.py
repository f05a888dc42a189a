"""The α–β model of communication: when a parameter server, a sharded one or a ring is fastest.

A message of ``S`` bytes costs ``α + S·β``: a latency α, paid once however big the message
is, and β seconds per byte, the link's inverse rate (Hockney 1994; Thakur, Rabenseifner &
Gropp 2005 price MPI's collectives this way). ``alpha_beta_time`` gives the time of one
synchronisation of an ``S``-byte gradient over ``n`` workers, for the three methods of
``allreduce``, under these assumptions:

1. Every task has a link of its own, full duplex (sending does not slow receiving), to a
   switch that is never the bottleneck. A dtfkit cluster with ``link=`` is built so: a veth
   per task with a token bucket each way, on one bridge.
2. Messages sent at the same time pay α once (their latencies overlap), but their bytes
   queue on any link they share. A *round* is a set of messages that do not wait for one
   another; a round that needs the previous one's result starts when that one ends.
3. Adding numbers is free; so is a message to a task's own machine.

Then, with ``S`` the gradient's size in bytes:

- **ps** (one parameter server): round 1, ``n`` gradients into the ps's link: ``α + n·S·β``;
  round 2, ``n`` sums out of it: ``α + n·S·β``. In all ``2α + 2·n·S·β``: the ps's link
  carries ``n·S`` each way while every worker's carries ``S``.
- **sharded_ps** (shard ``i`` served on worker ``i``'s machine): round 1, every worker sends
  its ``n - 1`` foreign slices of ``S/n``, one to each other worker, and receives as many:
  ``(n - 1)·S/n`` on every link each way, ``α + (n - 1)·S·β/n``; round 2 the same with the
  summed shards. In all ``2α + 2·(n - 1)·S·β/n``.
- **ring**: ``2(n - 1)`` rounds (reduce-scatter, then all-gather), each one chunk of ``S/n``
  per link: ``2(n - 1)·(α + S·β/n)``.

With ``n = 1`` the ring and the sharded ps send nothing (0); the ps still sends to ps:0.
Every worker's link carries ``2(n - 1)/n·S`` each way in the ring and the sharded ps, which
is the least any all-reduce among the ``n`` workers alone can do (each worker must send out
what the others lack of its gradient and get what it lacks of theirs); the ps's link carries
``n·S`` each way. Machines that only add up lower the workers' share: with ``k`` summation
servers besides the workers, BytePS (Jiang et al., OSDI 2020, Theorem 1) splits the shards
optimally between them, and with ``k >= n`` every worker moves only ``S`` each way.

**When each wins.** The ps loses to the ring at large ``S`` (``n·S`` vs ``(n - 1)/n·S`` on
the busiest link) and beats it at small ``S`` when ``n > 2`` (2 rounds vs ``2(n - 1)``):
``crossover_size("ps", "ring", ...)`` is where they swap. In this model the sharded ps is
never slower than the ring: the same bytes on every link, in 2 rounds. What the model leaves
out decides between them in practice: the sharded ps sends to all ``n - 1`` peers at once, so
it needs a switch with full bisection bandwidth and suffers when ``n - 1`` senders hit one
receiver at the same time (incast), and each message costs CPU at both ends; the ring only
ever uses each link to one neighbour. If every message cost α on its own (one message at a
time per task, the "single-port" model), the sharded ps would take ``2(n - 1)·(α + S·β/n)``,
exactly the ring.

**In a dtfkit cluster.** ``LocalCluster(link="100mbit", delay=d)``: β is ``8 / rate`` and α
is about ``d`` (the relay in front of every task holds each message for ``d``) plus
TensorFlow's own cost of a transfer (a millisecond or so). A step also pays what no method
changes, the client's call to the master, the master's to every task and their answers
(about ``4d``), so ``measure`` subtracts the time of an empty step. What remains is expected
at the model's time plus one ``d``: a task asks for a tensor as soon as its piece of the
graph starts, so in later rounds the request already waits at the sender and the tensor
crosses in ``d``, but the first round pays the request's way too. And the token bucket lets
its first 10 ms of traffic through at once (125 kB at 100 mbit/s), so messages smaller
than that pay almost no ``S·β``.

``measure`` (in the notebook) times the methods on such clusters at two delays;
``plot_alpha_beta`` draws the model with the measured points. Everything here but
``measure``'s clusters is plain Python: no TensorFlow in the notebook.

Example::

    from dtfkit.recipes import alpha_beta
    alpha_beta.alpha_beta_time("ring", 3, 120_000, 0.02, 8e-8)                 # 0.0928 s
    alpha_beta.crossover_size("ps", "ring", 3, alpha_s=0.02, beta_s_per_byte=8e-8)  # ~107 kB
    rows = alpha_beta.measure(delays=("1ms", "20ms"))
    alpha_beta.plot_alpha_beta(3, 0.02, 8e-8, measured=[r for r in rows if r["delay"] == "20ms"])

Its code is in ``kernel_side`` (the notebook kernel); every name is reachable from here.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
