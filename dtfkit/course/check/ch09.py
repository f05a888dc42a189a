"""Checks for chapter 9 (parameter server vs ring all-reduce)."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from dtfkit.course.check._core import CheckResult, cluster, exercise, failed, passed
from dtfkit.i18n import N_, _
from dtfkit.recipes import allreduce

FLOATS = 1200  # divisible by 2, 3 and 4


@exercise("9.1", "Predict the parameter server's bytes")
def ps_bytes(ps_bytes_received: Callable, *, hidden: bool = False) -> CheckResult:
    """Compare ``ps_bytes_received(n, floats)`` with the formula for several sizes, then with the
    bytes ``ps:0`` received in a real, traced synchronisation of 3 workers.

    Example::

        check.ch09.ps_bytes(ps_bytes_received)
    """
    rng = random.Random()
    cases = [(3, FLOATS), (2, 12), (4, 36), (7, 1000), (rng.randint(2, 9), 4 * rng.randint(5, 500))]
    for n, floats in cases:
        want = allreduce.expected_bytes("ps", n, floats)["ps:0"]["received"]
        got = ps_bytes_received(n, floats)
        if got == want:
            continue
        size = 4 * floats
        hints = {
            n * floats: _("you counted floats, not bytes: a float32 is 4 bytes"),
            size: _("that is one worker's gradient: how many workers send theirs to the ps?"),
            2 * n * size: _("that counts what the ps sends too: only what it receives"),
            n * size // 2: _("every worker sends its whole gradient, not half of it"),
        }
        return failed(
            _("for {n} workers and {floats} floats you predicted {got!r} bytes; ps:0 receives {want}").format(
                n=n, floats=floats, got=got, want=want
            ),
            hints.get(
                got, _("count what arrives at ps:0 in one synchronisation: who sends, and how much (Part 1)")
            ),
        )
    n = 4 if hidden else 3
    # worker:0 is the client here: one process fewer to start than a separate client.
    with cluster(ps=1, workers=n) as c:
        (run,) = c.run(allreduce.sync_run, args=("ps", n, FLOATS), on="worker:0", timeout=180).values()
    traced = run["bytes"]["ps:0"]["received"]
    if traced != ps_bytes_received(n, FLOATS):
        return failed(
            _(
                "the trace says ps:0 received {traced} bytes from {n} workers, you predicted {predicted}"
            ).format(traced=traced, n=n, predicted=ps_bytes_received(n, FLOATS)),
            _("does your function depend on anything but n and floats?"),
        )
    return passed(
        _(
            "your prediction matches the {traced} bytes ps:0 received in a traced run with {n} workers of {FLOATS} floats, and the formula for {len_cases} sizes"
        ).format(traced=traced, n=n, FLOATS=FLOATS, len_cases=len(cases))
    )


def _left(src: int, n: int) -> int:
    """The neighbour exercise 9.2's ring sends to: worker ``src``'s left, ``(src - 1) % n``."""
    return (src - 1) % n


def _direction_problem(src: int, dst: int, n: int) -> str | None:
    """What is wrong with a send from ``src`` to ``dst`` in a ring of ``n`` going left, or None."""
    if dst == _left(src, n):
        return None
    if dst == (src + 1) % n:
        return _("worker {src} sends to worker {dst}, its right neighbour").format(src=src, dst=dst)
    return _("worker {src} sends to worker {dst}, not a neighbour").format(src=src, dst=dst)


_WRONG_WAY_HINT = N_(
    "this ring goes left, as the exercise says: every send of every step goes from worker i to "
    "left[i]; a ring that goes right (like Part 1's) is not the answer"
)


def _shape_problem(schedule: object, n: int) -> str | None:
    """What is wrong with a schedule's shape (not its direction or sums), or None."""
    if not isinstance(schedule, dict) or set(schedule) != {"reduce_scatter", "all_gather"}:
        return _("return a dict with the keys 'reduce_scatter' and 'all_gather'")
    for phase, steps in schedule.items():
        if len(steps) != n - 1:
            return _("{phase} has {len_steps} steps; a ring of {n} needs {n_1}").format(
                phase=phase, len_steps=len(steps), n=n, n_1=n - 1
            )
        for s, step in enumerate(steps):
            senders = sorted(src for src, _, _ in step)
            if senders != list(range(n)):
                return _(
                    "in {phase} step {s} the senders are {senders}: every worker sends exactly one chunk"
                ).format(phase=phase, s=s, senders=senders)
    return None


def _schedule_direction_problem(schedule: dict, n: int) -> str | None:
    """The first send of a (well-shaped) schedule that does not go to the sender's left, or None."""
    for phase, steps in schedule.items():
        for s, step in enumerate(steps):
            for src, dst, _size in step:
                problem = _direction_problem(src, dst, n)
                if problem:
                    return _("in {phase} step {s} {problem}").format(phase=phase, s=s, problem=problem)
    return None


def _traced_direction_problem(transfers: list[dict], n: int) -> str | None:
    """The first transfer of a traced ring run that does not go to the sender's left, or None."""
    for row in transfers:
        src, dst = (int(row[key].split(":")[1]) for key in ("from", "to"))
        problem = _direction_problem(src, dst, n)
        if problem:
            return _("the trace shows {problem}").format(problem=problem)
    return None


def _ring_problem(schedule_fn: Callable, sizes: tuple[int, ...]) -> CheckResult | None:
    """The schedules for rings of ``sizes`` workers, shapes first, then simulated on NumPy: a failed
    result, or None when every one is right."""
    schedules = {n: schedule_fn(n) for n in sizes}
    for n, schedule in schedules.items():
        problem = _shape_problem(schedule, n)
        if problem:
            return failed(
                _("the schedule for {n} workers is not a ring: {problem}").format(n=n, problem=problem),
                _(
                    "the check tries rings of {sizes_0} to {sizes_1} workers: build the schedule from n"
                ).format(sizes_0=sizes[0], sizes_1=sizes[-1]),
            )
        wrong_way = _schedule_direction_problem(schedule, n)
        if wrong_way:
            return failed(
                _("the schedule for {n} workers is not the left-going ring: {wrong_way}").format(
                    n=n, wrong_way=wrong_way
                ),
                _(_WRONG_WAY_HINT),
            )
    for n, schedule in schedules.items():
        grads = [np.full(FLOATS, 10.0**i) for i in range(n)]
        want = sum(10.0**i for i in range(n))
        for i, out in enumerate(allreduce.simulate(schedule, grads)):
            bad = [c for c, chunk in enumerate(np.array_split(out, n)) if not np.allclose(chunk, want)]
            if bad:
                return failed(
                    _(
                        "with {n} workers, worker {i} ends with the wrong value in chunk(s) {bad} (expected every number to be {want:g})"
                    ).format(n=n, i=i, bad=bad, want=want),
                    _(
                        "in reduce-scatter a worker must send the chunk it has just added to; follow one chunk round the ring, step by step"
                    ),
                )
    return None


@exercise("9.2", "Fix the ring")
def ring(schedule_fn: Callable, *, hidden: bool = False) -> CheckResult:
    """Check ``schedule_fn(n)`` (a ``ring_schedule``-like dict in which every worker sends to its
    left neighbour, ``(i - 1) % n``) on NumPy for 3 to 6 workers (and one larger ring when hidden),
    then build it in TensorFlow on 3 workers (4 when hidden), run it traced and compare sums, bytes
    and the direction of every traced transfer.

    Example::

        check.ch09.ring(my_ring_schedule)
    """
    n = 4 if hidden else 3
    sizes = (3, 4, 5, 6, random.Random().randint(7, 12)) if hidden else (3, 4, 5, 6)
    problem = _ring_problem(schedule_fn, sizes)  # NumPy: a wrong ring fails before any cluster starts
    if problem is not None:
        return problem
    with cluster(workers=n) as c:
        (run,) = c.run(
            allreduce.run_schedule_check, args=(schedule_fn, n, FLOATS), on="worker:0", timeout=180
        ).values()
    if not run["correct"]:
        return failed(
            _(
                "in TensorFlow the {n} workers did not all end with the sum (max error {run_max_error:g})"
            ).format(n=n, run_max_error=run["max_error"]),
            _(
                "the NumPy simulation passed: does your function give the same schedule every time it is called?"
            ),
        )
    wrong_way = _traced_direction_problem(run["transfers"], n)
    if wrong_way:
        return failed(
            _("in TensorFlow on {n} workers {wrong_way}, though the NumPy runs went left").format(
                n=n, wrong_way=wrong_way
            ),
            _("does your function give the same schedule every time it is called?")
            + " "
            + _(_WRONG_WAY_HINT),
        )
    if run["bytes"] != allreduce.expected_bytes("ring", n, FLOATS):
        return failed(
            _("the traced bytes {run_bytes} are not what a ring sends").format(run_bytes=run["bytes"]),
            _("every worker sends one chunk per step, to its left neighbour"),
        )
    per_worker = run["bytes"]["worker:0"]["sent"]
    return passed(
        _(
            "the schedule summed right on NumPy for {sizes_0} to {sizes_1} workers, every send to the left neighbour; in TensorFlow all {n} workers ended with the sum, every traced transfer went left, and each sent and received {per_worker} bytes = 2 x ({n} - 1) chunks of {v_4_floats_n} bytes"
        ).format(
            sizes_0=sizes[0], sizes_1=sizes[-1], n=n, per_worker=per_worker, v_4_floats_n=4 * FLOATS // n
        )
    )
