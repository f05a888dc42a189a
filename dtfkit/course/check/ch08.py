"""Checks for chapter 8 (the sync/async lab).

Both exercises are graded on what the lab's ledger guarantees, never on timing: a sync run
makes its updates from at least ``replicas_to_aggregate`` gradients each and drops (or leaves
pending) the others; an async run makes one update per local step.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from dtfkit.course import classroom
from dtfkit.course.check._core import CheckResult, exercise, failed, passed
from dtfkit.i18n import _
from dtfkit.lab import Lab

DELAY_MS = 150
KEYS = ("global_step", "per_update", "applied")


# ------------------------------------------------------------------ 8.1 predict the ledger
def _least(mode: str, workers: int, steps: int, replicas_to_aggregate: int) -> dict[str, int]:
    """The least a lab run's ledger can show: final global step, gradients per update, gradients
    that changed the parameters (``replicas_to_aggregate=0``: as many as workers, as in the lab).
    Sync: ``SyncReplicasOptimizer`` makes each update from at least R gradients, and the run stops
    at ``steps``. Async: one gradient per update, and workers still in a step when the global
    step reaches ``steps`` apply theirs too (so a run can end above it)."""
    per_update = (replicas_to_aggregate or workers) if mode == "sync" else 1
    return {"global_step": steps, "per_update": per_update, "applied": steps * per_update}


def _prediction_problem(predict: Callable, mode: str, workers: int, steps: int, r: int) -> CheckResult | None:
    got = predict(mode=mode, workers=workers, steps=steps, replicas_to_aggregate=r)
    setting = f"mode={mode!r}, workers={workers}, steps={steps}, replicas_to_aggregate={r}"
    if not isinstance(got, dict) or set(KEYS) - set(got):
        return failed(
            _("predict({setting}) returned {got!r:.100}").format(setting=setting, got=got),
            _("return a dict with the keys {list_keys}").format(list_keys=list(KEYS)),
        )
    want = _least(mode, workers, steps, r)
    wrong = [k for k in KEYS if got[k] != want[k]]
    if not wrong:
        return None
    key = wrong[0]
    value = got[key]
    if key == "global_step":
        hint = (
            _("`steps` is where StopAtStepHook stops: which counter does it watch, and who moves it?")
            if value in (steps * workers, steps * (r or workers))
            else _("the lab stops a run when its global step reaches `steps`")
        )
    elif key == "per_update" and mode == "async":
        hint = _("in async mode, what does one update of the parameters on the ps carry?")
    elif key == "per_update":
        hint = (
            _(
                "replicas_to_aggregate counts gradients, not workers (tensorflow#11753); 0 means as many as workers"
            )
            if r
            else _("in the lab, replicas_to_aggregate=0 means as many as there are workers")
        )
    else:
        hint = _("how many updates does the run make at least, and how many gradients does each one apply?")
    return failed(
        _("for {setting} you predicted {key}={value!r}, which is not the least the ledger can show").format(
            setting=setting, key=key, value=value
        ),
        hint,
    )


def _lab_facts(run: Any) -> dict[str, int]:
    """What a finished lab run's ledger shows (the same keys as ``_least``)."""
    if run.sync is not None:
        sizes = [len(tasks) for tasks in run.sync.updates().values()]
        return {
            "global_step": run.sync.global_step,
            "per_update": min(sizes) if sizes else 0,
            "applied": sum(sizes),
        }
    steps = [p for summary in run.results.values() for p in summary["pushes"]]
    return {"global_step": max(a for _, _, _, a in steps), "per_update": 1, "applied": len(steps)}


@exercise("8.1", "Predict the ledger")
def predict_ledger(predict: Callable, *, hidden: bool = False) -> CheckResult:
    """Compare ``predict(mode, workers, steps, replicas_to_aggregate)`` with the least a run can show
    for many settings (plain Python, nothing started), then run the lab (3 workers, worker:2
    straggling) in sync with a backup worker and in async, and check each ledger against it.
    ``hidden=True`` adds a sync run with ``replicas_to_aggregate=1``.

    Example::

        check.ch08.predict_ledger(predict)
    """
    rng = random.Random()
    settings = [
        ("sync", 2, 40, 0),
        ("sync", 3, 30, 2),
        ("async", 3, 30, 2),
        ("async", 2, 40, 0),
        ("sync", 4, 25, 1),
        ("sync", 5, 17, 3),
        ("async", 4, 23, 0),
        (rng.choice(("sync", "async")), rng.randint(2, 8), rng.randint(10, 99), 0),
    ]
    workers = rng.randint(2, 8)
    settings.append(("sync", workers, rng.randint(10, 99), rng.randint(1, workers)))
    for setting in settings:
        problem = _prediction_problem(predict, *setting)
        if problem is not None:
            return problem
    steps = classroom.scaled(30, minimum=12)
    runs = [("sync", 2), ("async", 0)] + ([("sync", 1)] if hidden else [])
    shown = []
    with Lab(steps=steps, run_timeout=classroom.timeout(180)) as lab:
        lab.echo = lambda task, line: None
        for mode, r in runs:
            run = lab.run(mode=mode, workers=3, ps=1, straggler_ms=DELAY_MS, replicas_to_aggregate=r)
            facts = _lab_facts(run)
            predicted = predict(mode=mode, workers=3, steps=steps, replicas_to_aggregate=r)
            below = [k for k in KEYS if facts[k] < predicted[k]]
            if below:
                return failed(
                    _(
                        "the {run_settings_describe} run's ledger shows {below_0}={facts_below_0}, less than your prediction {predicted_below_0}"
                    ).format(
                        run_settings_describe=run.settings.describe(),
                        below_0=below[0],
                        facts_below_0=facts[below[0]],
                        predicted_below_0=predicted[below[0]],
                    ),
                    _(
                        "your function gave other numbers here than for the same settings before: does it depend on anything but its arguments?"
                    ),
                )
            shown.append(
                _(
                    "{run_settings_describe}: global step {facts_global_step}, {facts_applied} gradients applied, at least {facts_per_update} per update (predicted at least {predicted_global_step}, {predicted_applied}, {predicted_per_update})"
                ).format(
                    run_settings_describe=run.settings.describe(),
                    facts_global_step=facts["global_step"],
                    facts_applied=facts["applied"],
                    facts_per_update=facts["per_update"],
                    predicted_global_step=predicted["global_step"],
                    predicted_applied=predicted["applied"],
                    predicted_per_update=predicted["per_update"],
                )
            )
    return passed(
        _(
            "your predictions hold for {len_settings} settings, and the ledgers of {len_runs} real runs reached them"
        ).format(len_settings=len(settings), len_runs=len(runs)),
        *shown,
    )


# ------------------------------------------------------------- 8.2 the dropped gradients
def _dropped_truth(pushes: dict[str, list], global_step: int) -> dict[int, list[str]]:
    """For a sync run: ``{update: sorted tasks whose gradient computed for it was dropped}``, one
    entry per update ``1..global_step``; ``pushes`` as ``{task: [(start, end, read, applied)]}``
    (``applied`` None: no update averaged that gradient). The ledger's own rule (``SyncRun``): a
    gradient no update averaged was dropped when its global step had passed, else it is pending."""
    out: dict[int, list[str]] = {u: [] for u in range(1, global_step + 1)}
    for task, steps in pushes.items():
        for _pushed, _worker_step, read, applied in steps:
            if applied is None and read < global_step:
                out[read + 1].append(task)
    return {u: sorted(tasks) for u, tasks in out.items()}


def _synthetic() -> list[tuple[dict[str, list], int]]:
    """Two small sync ledgers written by hand (a start-up token, a backup worker, pending gradients)."""

    def timed(rows: list[tuple[int, int | None]]) -> list[tuple[float, float, int, int | None]]:
        return [(float(i), i + 0.5, read, applied) for i, (read, applied) in enumerate(rows)]

    two = {
        "worker:0": timed([(0, 1), (0, None), (1, 2), (2, 3)]),
        "worker:1": timed([(0, 1), (1, 2), (2, 3), (3, None)]),
    }
    three = {
        "worker:0": timed([(0, 1), (0, None), (1, 2), (2, 3), (3, 4), (4, None)]),
        "worker:1": timed([(0, 1), (1, 2), (1, None), (2, None), (3, 4)]),
        "worker:2": timed([(0, None), (1, None), (2, 3), (3, None), (4, None)]),
    }
    return [(two, 3), (three, 4)]


def _dropped_problem(
    dropped_gradients: Callable, pushes: dict[str, list], g: int, where: str
) -> CheckResult | None:
    want = _dropped_truth(pushes, g)
    answer = dropped_gradients({t: list(s) for t, s in pushes.items()}, g)
    if not isinstance(answer, dict):
        return failed(
            _("{where}: dropped_gradients returned {__name__} {answer!r:.80}").format(
                where=where, __name__=type(answer).__name__, answer=answer
            ),
            _("return a dict {update number: [task of each dropped gradient]}"),
        )
    if any(not isinstance(u, int) for u in answer):
        return failed(
            _("{where}: the keys of your dict are {answers}, not update numbers").format(
                where=where, answers=sorted(map(repr, answer))[:4]
            ),
            _("use the update numbers (int, 1 to global_step) as keys"),
        )
    extra = sorted(u for u in answer if u not in want and answer[u])
    if extra:
        return failed(
            _("{where}: you name update {extra_0}, but the run made updates 1 to {g} only").format(
                where=where, extra_0=extra[0], g=g
            ),
            _(
                "a gradient that no update averaged is dropped only if the update it was meant for was made; the others were still waiting when the run ended"
            ),
        )
    for u in sorted(want):
        got = sorted(answer.get(u) or [])
        if got != want[u]:
            return failed(
                _(
                    "{where}: for update {u} you say the gradients of {got_or_no_worker} were dropped; the ledger says {want_u_or_none}"
                ).format(
                    where=where,
                    u=u,
                    got_or_no_worker=got or _("no worker"),
                    want_u_or_none=want[u] or _("none"),
                ),
                _(
                    "which update was a gradient computed at global step `read` meant for? The averaged ones show it (compare their read and applied); a worker can have several gradients dropped from the same update"
                ),
            )
    return None


def _sync_pushes(run: Any) -> dict[str, list]:
    out: dict[str, list] = {task: [] for task in run.sync.workers}
    for g in run.sync.gradients:
        out[g["task"]].append((g["start"], g["end"], g["tag"], g.get("update")))
    return out


@exercise("8.2", "The dropped gradients")
def dropped(dropped_gradients: Callable, *, hidden: bool = False) -> CheckResult:
    """Compare ``dropped_gradients(pushes, global_step)`` with the ledger: on two hand-written sync
    ledgers first (nothing started), then on a real sync run of 3 workers with one backup worker
    (worker:2 straggles); ``hidden=True`` adds a run with ``replicas_to_aggregate=1``.

    Example::

        check.ch08.dropped(dropped_gradients)
    """
    for i, (pushes, g) in enumerate(_synthetic(), start=1):
        problem = _dropped_problem(dropped_gradients, pushes, g, _("in the small example {i}").format(i=i))
        if problem is not None:
            return problem
    shown = []
    with Lab(steps=classroom.scaled(30, minimum=12), run_timeout=classroom.timeout(180)) as lab:
        lab.echo = lambda task, line: None
        for r in [2] + ([1] if hidden else []):
            run = lab.run(mode="sync", workers=3, ps=1, straggler_ms=DELAY_MS, replicas_to_aggregate=r)
            pushes, g = _sync_pushes(run), run.sync.global_step
            problem = _dropped_problem(
                dropped_gradients,
                pushes,
                g,
                _("in the {run_settings_describe} run").format(run_settings_describe=run.settings.describe()),
            )
            if problem is not None:
                return problem
            lost = {t: sum(u.count(t) for u in _dropped_truth(pushes, g).values()) for t in run.sync.workers}
            shown.append(
                _("{run_settings_describe}: dropped gradients per worker {lost} in {g} updates").format(
                    run_settings_describe=run.settings.describe(), lost=lost, g=g
                )
            )
    return passed(
        _(
            "your dropped gradients match the ledger, update by update, for two small examples and {len_shown} real sync run(s)"
        ).format(len_shown=len(shown)),
        *shown,
    )
