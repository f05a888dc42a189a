"""What a cell shows while a cluster starts: TensorFlow's start-up lines once each (not once per task),
real errors and each task's own lines as they are, and the progress as one summary line."""

from __future__ import annotations

import collections
import re

import pytest

import dtfkit
from dtfkit.engine.owner.chatter import RepeatFolder, fold_repeats, is_startup_chatter
from dtfkit.progress import Progress, TextLine

ONEDNN = (
    "I0000 00:00:1795449112.797470   {tid} port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors from different computation orders."
)
SERVER = "I0000 00:00:1795449113.1{n}   {tid} grpc_server_lib.cc:467] Started server with target: grpc://localhost:{port}"
CUDA_ERROR = "E0000 00:00:1795449113.2   {tid} cuda_executor.cc:1228] INTERNAL: CUDA error: out of memory"


def test_fold_repeats_keeps_one_copy_of_each_startup_message_and_names_the_others():
    items = [
        ("ps:0", ONEDNN.format(tid=101)),
        ("worker:0", ONEDNN.format(tid=202)),
        ("ps:0", SERVER.format(n=1, tid=101, port=40001)),
        ("worker:0", "loading data"),
        ("worker:1", ONEDNN.format(tid=303)),
        ("worker:0", SERVER.format(n=2, tid=202, port=40002)),
        ("worker:1", SERVER.format(n=3, tid=303, port=40003)),
    ]
    out = fold_repeats(items)
    assert out == [
        ("ps:0", ONEDNN.format(tid=101) + " (same on worker:0, worker:1)"),
        # The copies differ in their port only: the folded line does not pretend all have ps:0's.
        ("ps:0", SERVER.format(n=1, tid=101, port="<port>") + " (same on worker:0, worker:1)"),
        ("worker:0", "loading data"),
    ]


def test_fold_repeats_counts_copies_when_each_task_printed_a_message_more_than_once():
    absl = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
    items = [
        ("worker:1", absl),
        ("worker:10", absl),
        ("ps:0", absl),
        ("worker:2", absl),
        ("worker:1", absl),
        ("ps:0", ONEDNN.format(tid=1)),
        ("worker:10", absl),
        ("ps:0", absl),
        ("worker:2", absl),
    ]
    assert fold_repeats(items) == [
        ("worker:1", absl + " (printed 8 times, by ps:0, worker:1, worker:2, worker:10)"),
        ("ps:0", ONEDNN.format(tid=1)),
    ]


def test_fold_repeats_keeps_distinct_lines_and_a_task_repeating_itself():
    items = [
        ("worker:0", "step 1"),
        ("worker:1", "step 2"),
        ("worker:0", "retrying"),
        ("worker:0", "retrying"),
    ]
    assert fold_repeats(items) == items
    assert fold_repeats([]) == []


def test_repeat_folder_echoes_errors_and_python_lines_at_once_and_folds_chatter_at_flush():
    shown: list[tuple[str, str]] = []
    folder = RepeatFolder(lambda task, line: shown.append((task, line)))
    folder.take("ps:0", ONEDNN.format(tid=1))
    folder.take("worker:0", CUDA_ERROR.format(tid=2))
    folder.take("worker:0", "Traceback (most recent call last):")
    folder.take("worker:0", ONEDNN.format(tid=2))
    # Errors and what Python prints are not held: they show while the start is still running.
    assert shown == [
        ("worker:0", CUDA_ERROR.format(tid=2)),
        ("worker:0", "Traceback (most recent call last):"),
    ]
    folder.flush()
    assert shown[2:] == [("ps:0", ONEDNN.format(tid=1) + " (same on worker:0)")]
    folder.flush()  # nothing held any more
    assert len(shown) == 3


def test_startup_chatter_is_tensorflow_info_and_warnings_only():
    assert is_startup_chatter(ONEDNN.format(tid=1))
    assert is_startup_chatter("W0000 00:00:1.5   7 cpu_feature_guard.cc:1] slow")
    assert not is_startup_chatter(CUDA_ERROR.format(tid=1))
    assert not is_startup_chatter("INFO:tensorflow:Done calling model_fn.")
    assert not is_startup_chatter("[dtfkit] worker:0 ready")


def test_progress_summary_lines():
    bar = Progress(["ps:0", "worker:0", "worker:1"], "starting 1 ps + 2 workers", enabled=False)
    bar.update(2)
    failed = bar.failed("failed with ClusterStartError")
    assert re.fullmatch(
        r"starting 1 ps \+ 2 workers: stopped after \d+\.\d s with 2 of 3 tasks ready \(failed with ClusterStartError\)",
        failed,
    )
    assert bar.done() == failed  # ended once: the first summary stays
    one = Progress(["client:0"], "starting 1 client", enabled=False)
    assert re.fullmatch(r"started 1 task \(client:0\) in \d+\.\d s", one.done())
    line = TextLine("started 1 task (client:0) in 0.4 s")
    assert line._repr_mimebundle_()["text/plain"] == "started 1 task (client:0) in 0.4 s"


def test_progress_outside_a_kernel_prints_one_summary_line(capfd):
    bar = Progress(["worker:0"], "starting 1 worker")
    bar.update(1)
    summary = bar.done()
    assert capfd.readouterr().err == summary + "\n"  # stderr is not a terminal here: no redrawn line


@pytest.mark.slow
@pytest.mark.parametrize("zygote", ["1", "0"])
def test_a_real_cluster_shows_each_tensorflow_startup_line_once(zygote, monkeypatch):
    """With TensorFlow's logs on, every task prints the same start-up lines; the cell shows each once.

    Forked from a zygote, a task prints no import-time lines (the zygote imported TensorFlow, and
    its log has them): the server's start is left; fresh interpreters print three kinds or more."""
    monkeypatch.setenv("DTFKIT_ZYGOTE", zygote)
    lines: list[tuple[str, str]] = []
    with dtfkit.LocalCluster(
        ps=1,
        workers=2,
        show_tf_logs=True,
        progress=False,
        name=None,
        echo=lambda task, line: lines.append((task, line)),
    ) as cluster:
        printed = {task: str(cluster.logs(task, everything=True)).splitlines() for task in cluster.tasks}
    echoed = [line for _, line in lines]
    # What the tasks really printed: this start-up message by each of the three tasks.
    assert sorted(printed) == ["ps:0", "worker:0", "worker:1"]
    assert all(any("Started server with target" in line for line in f) for f in printed.values()), printed
    assert sum("Started server with target" in line for line in echoed) == 1, echoed
    folded = [line for line in echoed if line.endswith(")") and "(same on " in line]
    assert any("Started server with target" in line for line in folded), echoed
    # Every start-up message shows once: no two echoed chatter lines say the same thing.
    chatter = [re.sub(r" \((same on|printed \d+ times, by) [^()]*\)$", "", line) for line in echoed]
    chatter = [line for line in chatter if is_startup_chatter(line)]
    keys = collections.Counter(
        re.sub(r"^[IWEF]\d{4} \S+\s+\d+ |localhost:(\d+|<port>)", "", line) for line in chatter
    )
    assert len(keys) >= (1 if zygote == "1" else 3) and max(keys.values()) == 1, keys
    # ... while the tasks printed them once each at least (the log keeps every copy).
    for key in keys:
        for task, task_lines in printed.items():
            assert any(key.split("] ")[-1][:40] in line for line in task_lines), (key, task)
