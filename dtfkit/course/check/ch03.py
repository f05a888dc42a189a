"""Checks for chapter 3 (SyncReplicasOptimizer)."""

from __future__ import annotations

import random
from collections.abc import Callable

from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, Rng, cluster, exercise, failed, passed
from dtfkit.i18n import _
from dtfkit.recipes import sync

# (workers, backups) the chapter never names; each check runs them before any cluster starts.
BACKUP_CASES = ((4, 1), (5, 2), (2, 0), (6, 3))
# (replicas_to_aggregate, total_num_replicas, updates): R > N, R < N, R = N, no update yet.
TOKEN_CASES = ((2, 3, 60), (3, 2, 10), (1, 4, 7), (4, 4, 25), (5, 2, 0), (2, 5, 13))


def hidden_backup_cases(
    rng: random.Random | None = None,
) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """3.1's hidden variants, drawn from ``rng`` (by default seeded fresh every run): three more
    (workers, backups) for the options alone, and the (workers, backups) of the second real run.

    Valid for every draw: the options must be ``R = workers - backups`` and ``N = workers`` for any
    0 <= backups < workers (the reference's arithmetic holds for all). The real run checks that
    every update averaged at least R gradients, which ``take_grad(R)`` guarantees for any R <= N
    (see ``SyncRun``: it waits for R, then averages all it holds). It runs 2 or 3 of the visible
    cluster's 3 workers, without a straggler, as the fixed (2, 1) did: no more processes, and with
    R = N at most the waiting of a synchronous step.

    >>> hidden_backup_cases(random.Random(1)) == hidden_backup_cases(random.Random(1))
    True
    """
    rng = rng if rng is not None else random.Random()
    options = []
    for _draw in range(3):
        n = rng.randint(2, 32)
        options.append((n, rng.randrange(n)))
    size = rng.randint(2, 3)
    return options, (size, rng.randrange(size))


def hidden_token_cases(
    rng: random.Random | None = None,
) -> tuple[list[tuple[int, int, int]], int]:
    """3.2's hidden variants, drawn from ``rng`` (by default seeded fresh every run): three more
    (replicas_to_aggregate, total_num_replicas, updates) for the arithmetic alone, and the
    replicas_to_aggregate of the second real run (1, 2 or 4: R < N, R = N, R > N beside the
    visible R = 3).

    Valid for every draw: ``SyncReplicasOptimizer`` (``sync_replicas_optimizer.py``) puts
    ``replicas_to_aggregate`` tokens in at the start (``get_init_tokens_op``'s default) and
    ``max(total_num_replicas, replicas_to_aggregate)`` at each update, so the count is
    ``R + max(N, R) * updates`` for any R, N >= 1 and updates >= 0. The real run keeps 2 workers and
    N = 2, the number of workers that push gradients (what ``total_num_replicas`` means): a worker
    count below N could leave a worker waiting on the token queue. R = 4 takes about 4/3 of the
    visible run's local steps.

    >>> hidden_token_cases(random.Random(1)) == hidden_token_cases(random.Random(1))
    True
    """
    rng = rng if rng is not None else random.Random()
    arithmetic = [(rng.randint(1, 8), rng.randint(1, 8), rng.randint(0, 200)) for _ in range(3)]
    return arithmetic, rng.choice((1, 2, 4))


def _workers(n: int) -> list[str]:
    return [f"worker:{i}" for i in range(n)]


def _options_problem(sync_options: Callable, n: int, backups: int) -> CheckResult | None:
    """A failed result when ``sync_options(n, backups)`` is not what TensorFlow needs, else None."""
    options = sync_options(num_workers=n, num_backups=backups)
    if not isinstance(options, dict) or "replicas_to_aggregate" not in options:
        return failed(
            _("sync_options(num_workers={n}, num_backups={backups}) returned {options!r}").format(
                n=n, backups=backups, options=options
            ),
            _("return a dict with replicas_to_aggregate and total_num_replicas"),
        )
    # TensorFlow's default, not the kit's: left out, total_num_replicas is replicas_to_aggregate.
    aggregate = options["replicas_to_aggregate"]
    total = options.get("total_num_replicas", aggregate)
    if aggregate != n - backups:
        return failed(
            _(
                "for {n} workers with {backups} backup(s) you chose replicas_to_aggregate={aggregate!r}: an update would wait for {aggregate!r} gradients, not {n_backups}"
            ).format(n=n, backups=backups, aggregate=aggregate, n_backups=n - backups),
            _("a backup worker is one whose gradient an update does not wait for"),
        )
    if total != n:
        return failed(
            _(
                "for {n} workers with {backups} backup(s), total_num_replicas is {total!r} (left out, it defaults to replicas_to_aggregate), not the number of workers that push gradients"
            ).format(n=n, backups=backups, total=total),
            _("total_num_replicas counts every worker, backups included (it sizes the token queue)"),
        )
    return None


@exercise("3.1", "Backup workers")
def backup_workers(sync_options: Callable, *, hidden: bool = False, rng: Rng = None) -> CheckResult:
    """Check ``sync_options(num_workers, num_backups)`` for several sizes, then train 3 workers (worker:2
    a straggler) with ``sync_options(3, 1)`` and read the ledger; ``hidden`` also checks other sizes
    and trains 2 or 3 workers with a number of backups, drawn fresh (``hidden_backup_cases``; ``rng``
    for tests).

    Example::

        check.ch03.backup_workers(sync_options)
    """
    more, second = hidden_backup_cases(rng) if hidden else ([], None)
    n, backups = 3, 1
    for case in (*BACKUP_CASES, *more, (n, backups)):
        problem = _options_problem(sync_options, *case)
        if problem is not None:
            return problem
    runs: list[tuple[int, int, sync.SyncRun]] = []
    steps = classroom.scaled(40, minimum=10)
    with cluster(ps=1, workers=n) as c:
        plan = [(n, backups, {"worker:2": 150})] + ([(*second, None)] if second else [])
        for size, spare, straggler in plan:
            options = dict(sync_options(num_workers=size, num_backups=spare))
            run = sync.run_sync(
                c, _workers(size), steps=steps, straggler_ms=straggler, timeout=180, **options
            )
            runs.append((size, spare, run))
    for size, spare, run in runs:
        # An update averages every gradient accumulated when the chief takes it: at least R, sometimes more.
        if min(run.update_sizes()) < size - spare:
            return failed(
                _(
                    "with {size} workers and {spare} backup(s) an update averaged {min_run_update_sizes} gradients, fewer than the {size_spare} it should wait for"
                ).format(
                    size=size,
                    spare=spare,
                    min_run_update_sizes=min(run.update_sizes()),
                    size_spare=size - spare,
                ),
                _("replicas_to_aggregate is the number of gradients an update waits for"),
            )
    shares = runs[0][2].shares()
    # How much the straggler still got in depends on the machine's load: shown, not graded.
    return passed(
        _(
            "each update needed only {n_backups} of the {n} workers' gradients: none waits for the slowest worker; sync_options also fits the other sizes the check tried"
        ).format(n_backups=n - backups, n=n),
        _("this run: the straggler worker:2 supplied {straggler_share:.0%} of the gradients used").format(
            straggler_share=shares.get("worker:2", 0)
        ),
    )


def _token_hint(aggregate: int, total: int, updates: int) -> str:
    """A hint for a wrong token count: which part of the arithmetic it missed (never the formula)."""
    if updates == 0:
        return _("before the first update, the chief has only put in the tokens it starts with")
    if aggregate > total:
        return _(
            "with fewer workers than replicas_to_aggregate, how many tokens must each update hand out for the next update to get its gradients?"
        )
    if aggregate < total:
        return _("how many tokens does the chief put in at the very start, before any update (section 1)?")
    return _("count the tokens the chief puts in at the start, then those each update adds (section 1)")


@exercise("3.2", "Predict the tokens")
def token_count(tokens_handed_out: Callable, *, hidden: bool = False, rng: Rng = None) -> CheckResult:
    """Compare ``tokens_handed_out(replicas_to_aggregate, total_num_replicas, updates)`` with
    TensorFlow's token arithmetic for several settings, then with the tokens counted one by one
    (taken by the workers' local steps + left in the queue) in real sync runs: 2 workers with
    R = 3, N = 2 (and, ``hidden``, more settings and a run with R = 1, 2 or 4, drawn fresh:
    ``hidden_token_cases``; ``rng`` for tests).

    Example::

        check.ch03.token_count(tokens_handed_out)
    """
    more, hidden_aggregate = hidden_token_cases(rng) if hidden else ([], None)
    for aggregate, total, updates in (*TOKEN_CASES, *more):
        want = aggregate + max(aggregate, total) * updates
        got = tokens_handed_out(aggregate, total, updates)
        if got != want:
            return failed(
                _(
                    "for replicas_to_aggregate={aggregate}, total_num_replicas={total} and {updates} updates you predicted {got!r} tokens; SyncReplicasOptimizer hands out {want}"
                ).format(aggregate=aggregate, total=total, updates=updates, got=got, want=want),
                _token_hint(aggregate, total, updates),
            )
    settings = [(3, 2)] + ([(hidden_aggregate, 2)] if hidden_aggregate else [])
    steps = classroom.scaled(24, minimum=8)
    counted = []
    with cluster(ps=1, workers=2) as c:
        for aggregate, total in settings:
            run = sync.run_sync(
                c,
                _workers(2),
                steps=steps,
                replicas_to_aggregate=aggregate,
                total_num_replicas=total,
                timeout=180,
            )
            counts = run.tokens_counted()
            # The updates that handed out tokens: the highest global step a token carried (the
            # final global step, unless the chief closed the queue just as one more update landed).
            updates = max(counts)
            real = sum(counts.values())
            predicted = tokens_handed_out(aggregate, total, updates)
            left = len(run.tokens_left)
            ledger = {"aggregate": aggregate, "total": total, "updates": updates, "real": real, "left": left}
            ledger["taken"] = real - left
            if predicted != real:
                return failed(
                    _(
                        "with 2 workers, replicas_to_aggregate={aggregate} and total_num_replicas={total}, {updates} updates handed out {real} tokens ({taken} taken by local steps, {left} left in the queue); you predicted {predicted!r}"
                    ).format(**ledger, predicted=predicted),
                    _("count the tokens the chief puts in at the start, then those each update adds"),
                )
            counted.append(
                _(
                    "R={aggregate}, N={total}: {updates} updates, {real} tokens = {taken} local steps + {left} left in the queue"
                ).format(**ledger)
            )
    return passed(
        _(
            "your prediction matched the tokens counted one by one in a real run of 2 workers with replicas_to_aggregate=3, and TensorFlow's arithmetic for other settings"
        ),
        *counted,
    )
