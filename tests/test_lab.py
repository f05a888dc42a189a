"""dtfkit.lab (chapter 8): the sync/async lab's run API and its ipywidgets panel.

The fast tests need no TensorFlow (settings, records built by hand, the panel's widgets
and CSS classes). The slow ones press Run through the panel and the API on one shared
1 ps + 2 worker cluster and check what happened in the tasks: sync (R = N) aggregates
exactly ``replicas_to_aggregate`` gradients per update after the first in lockstep, async
interleaves with staleness, a straggler loses its share in async while sync still averages
exactly R gradients per update after the first (whichever of its two regimes the run
meets), Stop ends a run
promptly, and nothing a run prints lands outside the panel.

What is asserted about a real run is what TensorFlow guarantees (counts, the ledger) or
an ordering with a wide margin, never a timing outcome: ``python tests/under_load.py``
runs these tests with two CPU burners beside them."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import LineReader, processes_of, share_cluster, start_script, wait_gone, wait_until

from dtfkit.errors import DtfkitError
from dtfkit.lab import Lab, RunRecord, Settings
from dtfkit.lab.panel import Panel

# Real runs whose timing varies: tests/under_load.py runs them beside CPU burners.
pytestmark = pytest.mark.timing

W2 = ["worker:0", "worker:1"]


# ------------------------------------------------------------------ no TensorFlow
def test_settings_are_validated_with_the_setting_named():
    assert Settings().validate().aggregate == 2
    assert Settings(workers=3, replicas_to_aggregate=2).aggregate == 2
    assert Settings(straggler_ms=50, workers=3).straggler == "worker:2"
    assert Settings().straggler is None
    for bad, message in [
        ({"mode": "hogwild"}, "mode must be"),
        ({"workers": 0}, "workers must be"),
        ({"replicas_to_aggregate": 3}, "replicas_to_aggregate must be"),
        ({"learning_rate": 0}, "learning_rate"),
    ]:
        with pytest.raises(DtfkitError, match=message):
            Settings(**bad).validate()
    lab = Lab()
    with pytest.raises(DtfkitError, match="unknown setting"):
        lab.run(wrokers=2)
    with pytest.raises(DtfkitError, match="unknown setting"):  # warm() said TypeError from dataclasses
        lab.warm(wrokers=2)
    assert lab.runs == [] and lab.cluster is None


def _async_record() -> RunRecord:
    """Two async workers: worker:1's second update read step 1 and landed as step 4."""
    record = RunRecord(number=1, settings=Settings(mode="async"), state="finished")
    record.results = {
        "worker:0": {"pushes": [[0.0, 0.1, 0, 1], [0.1, 0.2, 1, 2], [0.2, 0.3, 2, 3]]},
        "worker:1": {"pushes": [[0.0, 0.15, 0, 2], [0.15, 0.4, 1, 4]]},
    }
    record.rows = [
        {"task": t, "time": p[1], "step": p[3], "loss": 1.0, "read_step": p[2], "start": p[0]}
        for t, r in record.results.items()
        for p in r["pushes"]
    ]
    record.evaluation = {"loss": 0.5, "accuracy": 0.9}
    return record


def test_a_record_counts_staleness_shares_and_interleaving():
    record = _async_record()
    assert sorted(record.staleness()) == [0, 0, 0, 1, 2]
    assert record.max_staleness() == 2 and record.mean_staleness() == pytest.approx(0.6)
    assert record.shares() == {"worker:0": 0.6, "worker:1": 0.4}
    assert record.interleavings() == 3  # 0 1 0 0 1 by end time
    assert record.global_step() == 4
    # From the moment both had stepped (0.15 s, step 2) to the last step (0.4 s, step 4).
    assert record.steps_per_sec() == pytest.approx(2 / 0.25)
    row = record.summary()
    assert row["mode"] == "async" and row["accuracy"] == 0.9 and row["staleness (mean/max)"] == "0.60 / 2"
    assert record.describe().startswith("finished: async, 2 workers, 8.0 steps/s")
    from dtfkit.i18n import set_language

    try:  # the lab's line in a Chinese chapter: every word of it Chinese but the mode's identifier
        set_language("zh_CN")
        assert record.describe() == "已完成：async，2 个 worker，8.0 步/秒"
        record.state, record.error = "failed", "RuntimeError: boom\nmore"
        assert record.describe() == "失败：async，2 个 worker（RuntimeError: boom）"
    finally:
        set_language(None)
        record.state, record.error = "finished", None
    with pytest.raises(DtfkitError, match="not a finished sync run"):
        record.update_sizes()


def test_plots_draw_without_tensorflow():
    import matplotlib

    matplotlib.use("Agg")
    from dtfkit.lab import plots

    record = _async_record()
    fig = plots.dashboard(record)
    assert len(fig.axes) == 6
    assert plots.png(plots.compare([record, record])).startswith(b"\x89PNG")


def test_the_panel_honours_the_browser_contract():
    lab = Lab()
    panel = Panel(lab)
    classes = {
        "dtfkit-lab-mode": panel.mode,
        "dtfkit-lab-run": panel.run_button,
        "dtfkit-lab-stop": panel.stop_button,
        "dtfkit-lab-plot": panel.plot_area,
        "dtfkit-lab-history": panel.history,
        "dtfkit-lab-status": panel.status,
    }
    for name, widget in classes.items():
        assert name in widget._dom_classes, name
    assert list(panel.mode.options) == ["sync", "async"]
    assert panel.run_button.description == "Run" and panel.stop_button.description == "Stop"
    # The controls are the lab's settings; replicas_to_aggregate follows the worker count.
    panel.set(mode="async", workers=3, straggler_ms=100)
    assert panel.values()["replicas_to_aggregate"] == 3 and panel.aggregate.disabled
    panel.set(mode="sync", replicas_to_aggregate=2)
    assert panel.values() == {**panel.values(), "mode": "sync", "workers": 3, "replicas_to_aggregate": 2}
    # A finished run shows as one <tr class="dtfkit-lab-row">.
    lab.runs.append(_async_record())
    panel._refresh_history()
    assert panel.history.value.count("<tr class='dtfkit-lab-row'>") == 1
    panel.close()


def test_exercise_8_1_fails_wrong_predictions_before_starting_anything(no_spawn):
    # More wrong answers, and the solution on real runs: tests/test_exercises_5to9.py.
    from dtfkit.course import check

    def answer(per_update):
        return lambda mode, workers, steps, replicas_to_aggregate: {
            "global_step": steps,
            "per_update": per_update(mode, workers, replicas_to_aggregate),
            "applied": steps * per_update(mode, workers, replicas_to_aggregate),
        }

    for wrong, says in [
        (answer(lambda mode, n, r: n), "per_update="),  # every worker in every update
        (answer(lambda mode, n, r: r or n), "per_update="),  # replicas_to_aggregate in async too
        (answer(lambda mode, n, r: r if mode == "sync" else 1), "means as many as"),  # 0 taken literally
        (lambda **settings: None, "return a dict"),
    ]:
        result = check.ch08.predict_ledger(wrong)
        assert not result.passed and says in str(result), str(result)


# ------------------------------------------------------------- real TensorFlow
@pytest.fixture(scope="module")
def lab():
    """One lab on one warm 1 ps + 2 worker cluster for the module's runs."""
    lab = Lab(steps=40, start_timeout=120)
    cluster = lab.warm(ps=1, workers=2)
    with share_cluster(cluster):
        yield lab
        lab.stop()
    lab.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sync_through_the_panel_aggregates_exactly_r_gradients_in_lockstep(lab, capsys):
    panel = Panel(lab)
    panel.set(mode="sync", workers=2, ps=1, straggler_ms=0, steps=30)
    record = panel.press_run()
    assert record is not None and lab.wait(240) is record
    assert record.state == "finished", record.error
    # R = N = 2: every update after the first averaged exactly 2 gradients, the first at least 2
    # (only 2 tokens carry each global step; update 1 can also take the start-up tokens' gradients).
    assert record.global_step() == 30 and record.update_sizes(first=2) == {2}
    first = len(record.sync.updates()[1])
    assert 2 <= first <= 4
    # Every aggregated gradient was computed on the parameters of the step it was applied
    # to (staleness 0; stale ones are dropped). Who supplied them is timing, not checked.
    assert record.staleness() and set(record.staleness()) == {0}
    assert record.sync.totals()["aggregated"] == 2 * 29 + first
    assert record.accuracy > 0.2
    # The panel shows it: status, a plot, one history row; and nothing was printed here.
    assert panel.status.value.startswith("finished: sync, 2 workers")
    assert bytes(panel.plot.value).startswith(b"\x89PNG") and panel.plot_area.children == (panel.plot,)
    assert panel.history.value.count("dtfkit-lab-row") == len(lab.history)
    assert capsys.readouterr().out == ""
    panel.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_async_steps_interleave_and_updates_are_stale(lab):
    record = lab.run(mode="async", steps=60, straggler_ms=0)
    assert record.state == "finished" and record.global_step() >= 60
    # Each worker makes one step before the start barrier lets either go on, so in time order they switch
    # at least once; how often after that is the load's doing (a busy machine once let one worker run 37
    # steps while the other's second one waited).
    assert record.interleavings() >= 1, [r["task"] for r in record.rows]
    assert record.max_staleness() >= 1, sorted(record.staleness())
    assert all(share > 0 for share in record.shares().values()), record.shares()
    # The staleness is measured, not assumed: every update read a step before the one it made.
    for steps in record.pushes().values():
        assert all(applied > read for _, _, read, applied, _ in steps)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_straggler_loses_its_share_in_async_and_sync_still_averages_r_gradients(lab):
    delay = 150
    fast = lab.run(mode="async", steps=40, straggler_ms=0)
    slow_async = lab.run(mode="async", steps=100, straggler_ms=delay)
    slow_sync = lab.run(mode="sync", steps=30, straggler_ms=delay)
    straggler = slow_async.settings.straggler
    assert straggler == "worker:1"
    # Async: the others do not wait, so the straggler applies few updates (150 ms per step
    # against a few ms: a wide margin), and its own are stale (its delay sits between
    # reading the parameters and writing its update, and the peer updates meanwhile).
    shares = slow_async.shares()
    assert shares[straggler] < 0.5 * shares["worker:0"], shares
    straggler_steps = slow_async.pushes()[straggler]
    assert max(applied - read - 1 for _, _, read, applied, _ in straggler_steps[1:]) >= 1
    # Sync: whichever regime the run met (the updates waited for the straggler, or the fast
    # worker took every token while the straggler was busy, filled the updates alone, and
    # the straggler's gradients came for old steps and were dropped),
    # every update after the first averaged exactly 2 gradients (the first at least 2) and each
    # gradient was applied whole or not at all.
    ledger = slow_sync.sync
    sizes = slow_sync.update_sizes()
    assert slow_sync.update_sizes(first=2) == {2} and min(sizes) >= 2
    assert ledger.totals()["aggregated"] == 2 * 29 + len(ledger.updates()[1])
    lr = slow_sync.settings.learning_rate
    for row in ledger.ledger:
        assert all(abs(v) < 1e-4 * lr or min(abs(v + lr / n) for n in sizes) < 1e-4 * lr for v in row), row
    regime = slow_sync.straggler_regime()
    assert regime == ("waited" if slow_sync.participation(straggler, last=0.5) >= 0.5 else "filled")
    if regime == "filled":  # the straggler's gradients were computed for old steps and dropped
        assert ledger.counts()[straggler]["dropped"] > 0, ledger.table()
    assert [r.number for r in lab.history[-3:]] == [fast.number, slow_async.number, slow_sync.number]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_stop_ends_a_run_promptly_and_the_next_run_works(lab, capsys):
    lines: list[tuple[str, str]] = []
    lab.echo = lambda task, line: lines.append((task, line))
    cluster = lab.cluster
    record = lab.start(mode="async", steps=1_000_000)
    assert wait_until(lambda: len(record.rows) >= 10, timeout=120), record.state
    lab.stop()  # interrupts the tasks; those still inside TensorFlow after 3 s are killed
    assert not lab.running and record.state == "stopped"
    assert record not in lab.history
    # The next run on the same (warm) cluster works, after any killed task is restarted.
    after = lab.run(mode="sync", steps=10)
    assert after.state == "finished" and lab.cluster is cluster
    assert capsys.readouterr().out == ""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_new_shape_starts_a_new_cluster_and_close_ends_every_process(lab):
    # Runs last: it replaces the module's cluster and closes the lab.
    first = lab.cluster
    first_procs = processes_of(first.pids().values())
    record = lab.run(mode="sync", workers=3, replicas_to_aggregate=2, straggler_ms=0, steps=15)
    # One backup worker: an update waits for 2 of the 3 gradients (it averages every gradient
    # that has arrived by then, so now and then more): never fewer than 2.
    assert min(record.update_sizes()) >= 2 and record.sync.totals()["aggregated"] >= 2 * 15
    assert lab.cluster is not first and first.closed
    assert wait_gone(first_procs, 10) == []
    second_procs = processes_of(lab.cluster.pids().values())
    assert len(second_procs) >= 4  # 1 ps + 3 workers
    lab.close()
    assert lab.cluster is None
    assert wait_gone(second_procs, 10) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_kernel_that_exits_mid_run_leaves_no_process(tmp_path):
    code = (
        "import json, sys, time\n"
        "from dtfkit.lab import Lab\n"
        "lab = Lab()\n"
        "record = lab.start(mode='async', steps=1_000_000)\n"
        "deadline = time.monotonic() + 180\n"
        "while len(record.rows) < 5 and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print('PIDS ' + json.dumps(list(lab.cluster.pids().values())), flush=True)\n"
        "sys.stdin.readline()  # the test has seen the tasks (or is gone: end of file)\n"
        "sys.exit(0)  # no lab.close(): the interpreter ends with the run in progress\n"
    )
    proc = start_script(tmp_path, code, stdin=subprocess.PIPE)
    reader = LineReader(proc)
    pids = json.loads(reader.expect(r"^PIDS ", timeout=240).string[len("PIDS ") :])
    # Seen while the script waits for the word to exit: found once exiting the script made the check race with
    # the tasks' own end (1 of 3 left, in a fresh-clone run).
    procs = processes_of(pids)
    proc.stdin.write("exit\n")
    proc.stdin.close()
    assert len(procs) >= 3
    assert proc.wait(timeout=60) == 0, reader.rest(5)
    assert wait_gone(procs, 15) == []
