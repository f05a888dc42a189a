"""dtfkit.recipes.sync (chapter 3): the gradient ledger of SyncReplicasOptimizer.

The fast tests check the bookkeeping on hand-made records (no TensorFlow); the slow
ones run real sync training on the session's shared 1 ps + 2 worker cluster."""

from __future__ import annotations

import numpy as np
import pytest

from dtfkit.errors import DtfkitError
from dtfkit.recipes import sync

# Real runs whose timing varies: tests/under_load.py runs them beside CPU burners.
pytestmark = pytest.mark.timing

W2 = ["worker:0", "worker:1"]
LR = 0.1


# ------------------------------------------------------------------ no TensorFlow
def _fake_run(
    pushes: dict[str, list[tuple]], ledger_rows: dict[str, dict[int, int]], global_step, pending, pushed=None
):
    """A SyncRun from hand-made pushes ``(tag, token)`` and ledger cells ``{index: n averaged}``;
    ``pushed``: the ps's count per worker (default: one per recorded push)."""
    capacity = 10
    ledger = np.zeros((len(W2), capacity), np.float32)
    for rank, task in enumerate(W2):
        for index, n in ledger_rows.get(task, {}).items():
            ledger[rank, index] = -LR / n
    results = {}
    for rank, task in enumerate(W2):
        rows = [
            [100.0 + i, None if token is None else 100.5 + i, tag, token]
            for i, (tag, token) in enumerate(pushes[task])
        ]
        done = [r for r in rows if r[1] is not None]
        results[task] = {
            "task": task,
            "rank": rank,
            "pushes": rows,
            "local_steps": len(done),
            "first_step": done[0][0] if done else None,
            "last_step": done[-1][1] if done else None,
            "closed": done[-1][1] + 1.0 if done else 0.0,
        }
    results["worker:0"]["ledger_info"] = {
        "workers": W2,
        "replicas_to_aggregate": 2,
        "total_num_replicas": 2,
        "steps": global_step,
        "learning_rate": LR,
    }
    if pushed is None:
        pushed = [len(pushes[task]) for task in W2]
    state = {"global_step": global_step, "ledger": ledger, "pending": pending, "pushed": pushed}
    return sync.SyncRun(results, state)


def test_ledger_tells_each_gradients_fate_and_update():
    # worker:0: tag 0 (aggregated in update 1), tag 0 (stale), tag 1 (update 2), tag 2 (cut short, pending).
    # worker:1: tag 0 (update 1), tag 1 (update 2).
    run = _fake_run(
        {"worker:0": [(0, 0), (0, 1), (1, 2), (2, None)], "worker:1": [(0, 1), (1, 2)]},
        {"worker:0": {0: 2, 2: 2}, "worker:1": {0: 2, 1: 2}},
        global_step=2,
        pending=1,
    )
    fates = [g["fate"] for g in run.gradients_of("worker:0")]
    assert fates == ["aggregated", "dropped", "aggregated", "pending"]
    assert run.updates() == {1: ["worker:0", "worker:1"], 2: ["worker:0", "worker:1"]}
    assert run.update_sizes() == {2} and run.update_size_counts() == {2: 2}
    counts = run.counts()
    assert counts["worker:0"] == {"local_steps": 3, "pushed": 4, "aggregated": 2, "dropped": 1, "pending": 1}
    totals = run.totals()
    assert totals["pushed"] == totals["aggregated"] + totals["dropped"] + totals["pending"] == 6
    assert run.shares() == {"worker:0": 0.5, "worker:1": 0.5}
    assert run.single_worker_updates() == {"worker:0": 0, "worker:1": 0}
    assert run.exit_lags() == {"worker:0": pytest.approx(1.0), "worker:1": pytest.approx(1.0)}
    assert "global step 2 x replicas_to_aggregate 2 = 4 (aggregated can only be more)" in run.table()


def test_pushed_is_the_ps_count_so_the_bookkeeping_can_disagree():
    # The ps counted 3 pushes from worker:1, the worker recorded 2: the books no longer balance.
    run = _fake_run(
        {"worker:0": [(0, 0), (1, 1)], "worker:1": [(0, 1), (1, None)]},
        {"worker:0": {0: 2, 1: 2}, "worker:1": {0: 2, 1: 2}},
        global_step=2,
        pending=0,
        pushed=[2, 3],
    )
    totals = run.totals()
    assert run.counts()["worker:1"]["pushed"] == 3
    assert totals["pushed"] == 5 != totals["aggregated"] + totals["dropped"] + totals["pending"] == 4


def test_update_sizes_can_leave_out_the_first_update():
    # Update 1 averaged 3 gradients (both first steps and one from a start-up token), update 2 two.
    run = _fake_run(
        {"worker:0": [(0, 0), (0, 1), (1, 2)], "worker:1": [(0, 1), (1, 2)]},
        {"worker:0": {0: 3, 1: 3, 2: 2}, "worker:1": {0: 3, 1: 2}},
        global_step=2,
        pending=0,
    )
    assert run.update_sizes() == {2, 3} and run.update_sizes(first=2) == {2}


def test_plots_draw_without_tensorflow():
    import matplotlib

    matplotlib.use("Agg")
    run = _fake_run(
        {"worker:0": [(0, 0), (0, 1), (1, 2)], "worker:1": [(0, 1), (1, 2)]},
        {"worker:0": {0: 2, 2: 2}, "worker:1": {0: 2, 1: 2}},
        global_step=2,
        pending=0,
    )
    ax = run.plot_timeline(title="t")
    assert len(ax.collections) == 3  # the first step of each worker is left out
    assert len(run.plot_timeline(skip_first=False).collections) == 5
    assert len(run.plot_updates().patches) == 4  # 2 updates x 2 workers
    assert len(sync.plot_shares({"a": run, "b": run}).patches) == 4


def test_ledger_spots_updates_made_by_one_worker_and_inconsistent_sizes():
    run = _fake_run(
        {"worker:0": [(0, 0), (0, 1)], "worker:1": [(0, 1)]},
        {"worker:0": {0: 2, 1: 2}},
        global_step=1,
        pending=0,
    )
    assert run.updates() == {1: ["worker:0", "worker:0"]}
    assert run.single_worker_updates() == {"worker:0": 1, "worker:1": 0}
    assert run.shares() == {"worker:0": 1.0, "worker:1": 0.0}
    # A ledger cell saying "averaged with 2 others" in an update of 2 gradients is inconsistent.
    bad = _fake_run({"worker:0": [(0, 0), (0, 1)], "worker:1": []}, {"worker:0": {0: 3, 1: 3}}, 1, 0)
    with pytest.raises(DtfkitError, match="inconsistent"):
        bad.update_sizes()


def test_ledger_capacity_covers_every_token_a_worker_can_get():
    assert sync.ledger_capacity(60, 2, 2) >= 2 + 2 * 60
    assert sync.ledger_capacity(60, 2, 3) >= 2 + 3 * 60


def test_stack_excerpt_keeps_the_stable_frames_of_one_task():
    worker_0 = (
        "Thread QueueRunnerThread-sync_token_q-sync_token_q_EnqueueMany:\n"
        '  File "/x/threading.py", line 982, in run\n'
        '  File "/x/training/queue_runner_impl.py", line 254, in _run\n'
        '  File "/x/client/session.py", line 1328, in _single_operation_run\n'
        "\n"
        "Thread MainThread:\n"
        '  File "/x/training/monitored_session.py", line 1384, in close\n'
        '  File "/x/training/coordinator.py", line 369, in join\n'
    )
    worker_1 = 'Thread MainThread:\n  File "/x/training/coordinator.py", line 1, in other\n'
    assert sync.stack_excerpt(worker_0) == [
        "QueueRunnerThread: queue_runner_impl.py _run > session.py _single_operation_run",
        "MainThread: monitored_session.py close > coordinator.py join",
    ]
    assert sync.stack_excerpt(worker_1) == ["MainThread: coordinator.py other"]
    assert sync.stack_excerpt("(no stack received)") == []


# ------------------------------------------------------------- real TensorFlow
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lockstep_bookkeeping_then_a_second_run_with_a_stalled_worker(cluster):
    run = sync.run_sync(cluster, W2, steps=20, timeout=120)
    totals = run.totals()
    first = len(run.updates()[1])
    assert run.global_step == 20 and run.update_sizes(first=2) == {2} and 2 <= first <= 4
    assert totals["aggregated"] == 2 * 19 + first
    # pushed is counted on the ps, apart from the ledger: the books balance for real.
    assert totals["pushed"] == totals["aggregated"] + totals["dropped"] + totals["pending"]
    assert run.pending_read == totals["pending"]
    # Each worker's first gradient is in update 1 (the start barrier); the ones from the two
    # initial tokens were computed for step 0 too, and those update 1 did not take came too late.
    assert run.gradients_of("worker:0")[0]["update"] == run.gradients_of("worker:1")[0]["update"] == 1
    assert [g["tag"] for g in run.gradients if g["fate"] == "dropped"] == [0] * (4 - first)
    assert max(run.exit_lags().values()) < 5

    # A second sync run on the same ps works (each run has its own resource container),
    # and R counts gradients: while worker:1 stalls, worker:0 makes every update alone.
    stalled = sync.run_sync(cluster, W2, steps=16, stall_until_step={"worker:1": 8}, timeout=120)
    updates = stalled.updates()
    assert all(updates[u] == ["worker:0", "worker:0"] for u in range(2, 9)), updates
    assert stalled.gradients_of("worker:1")[1]["fate"] == "dropped"
    assert stalled.shares()["worker:0"] > 0.5


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_variables_on_a_worker_and_backup_replicas(cluster):
    run = sync.run_sync(
        cluster,
        W2,
        steps=15,
        replicas_to_aggregate=1,
        total_num_replicas=2,
        variables_on="worker:1",
        timeout=120,
    )
    info = run.results["worker:0"]["ledger_info"]
    assert info["ledger_device"].startswith("/job:worker/task:1")
    assert info["global_step_device"].startswith("/job:worker/task:1")
    # With replicas_to_aggregate=1 the chief's queue runner applies worker:1's gradient on its own
    # thread: one may land after the chief's StopAtStepHook has seen step 15 and before the session
    # closes, so the run can end past 15 (seen: 16). Every update still took at least one gradient.
    assert run.global_step >= 15 and min(run.update_sizes()) >= 1
    totals = run.totals()
    assert totals["aggregated"] >= run.global_step
    assert totals["pushed"] == totals["aggregated"] + totals["dropped"] + totals["pending"]
    assert run.pending_read == totals["pending"]
