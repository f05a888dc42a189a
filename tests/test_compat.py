"""``python -m dtfkit compat``: which way to train works under which strategy, found by running it (issue 40).

The table's cells are real runs on real local clusters. What is asserted is what the installed
TensorFlow 2.21 and Keras 3.15 do, read in their source: Keras 3's ``fit`` builds the model symbolically by
handing its first batch, a tuple of per-replica values, to ``strategy.reduce`` (``keras/src/backend/tensorflow/
trainer.py`` ``TensorFlowTrainer._maybe_symbolic_build``), which takes no tuple: with two workers the collective
path tries to make one tensor of it and raises (``CollectiveAllReduceExtended._reduce_to``); under
``ParameterServerStrategy`` the dataset it is given was never passed to
``ClusterCoordinator.create_per_worker_dataset`` (``tensorflow/python/distribute/input_lib.py``
``DistributedDataset.__iter__``). A Keras or TensorFlow upgrade that changes either fails here, and the
chapters that quote the table are to be run again.

Keras 3's ``optimizer.iterations`` goes through ``KerasVariable.assign_add`` = ``assign(self + value)``
(``keras/src/backend/common/variables.py``): concurrent workers can lose increments, never add one, so
without a worker failure the count never exceeds the steps that ran; how many it loses is timing, not asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dtfkit.recipes import compat
from dtfkit.recipes.compat import kernel_side


def test_first_error_line_quotes_the_error_not_the_user_code_preamble():
    message = 'in user code:\n\n    File "x.py", line 3, in step\n\n    ValueError: shapes differ\n'
    assert compat.first_error_line("ValueError", message) == "ValueError: shapes differ"
    assert compat.first_error_line("KeyError", "'w'") == "KeyError: 'w'"
    long = "x" * 400
    assert len(compat.first_error_line("ValueError", long)) <= 160


def test_unknown_names_and_bad_numbers_are_refused_before_anything_starts(no_spawn):
    with pytest.raises(ValueError, match="choose among .*MirroredStrategy"):
        compat.compatibility_table(strategies=["MirrorStrategy"])
    with pytest.raises(ValueError, match="choose among .*keras3_fit"):
        compat.compatibility_table(trainers=["fit"])
    with pytest.raises(ValueError, match="steps"):
        compat.compatibility_table(steps=1)
    assert no_spawn == []


def test_the_cli_refuses_bad_steps_with_a_usage_error():
    done = subprocess.run(
        [sys.executable, "-m", "dtfkit", "compat", "--steps", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--steps of at least 2" in done.stderr


@pytest.mark.slow
def test_the_table_shows_what_keras_3_does_under_each_multi_worker_strategy():
    table = compat.compatibility_table(
        strategies=["MultiWorkerMirroredStrategy", "ParameterServerStrategy"],
        trainers=["keras3_fit", "keras3_custom_loop", "tf_only_loop"],
        steps=30,
        progress=False,
    )
    mwms_fit = table.cell("MultiWorkerMirroredStrategy", "keras3_fit")
    assert mwms_fit.outcome == kernel_side.FAILS
    assert mwms_fit.detail.startswith("ValueError: Attempt to convert a value (PerReplica"), mwms_fit.detail
    pss_fit = table.cell("ParameterServerStrategy", "keras3_fit")
    assert pss_fit.outcome == kernel_side.FAILS
    assert "ClusterCoordinator.create_per_worker_dataset" in pss_fit.detail, pss_fit.detail
    for strategy in ("MultiWorkerMirroredStrategy", "ParameterServerStrategy"):
        for trainer in ("keras3_custom_loop", "tf_only_loop"):
            cell = table.cell(strategy, trainer)
            assert cell.outcome == kernel_side.WORKS, (strategy, trainer, cell)
            assert cell.steps_run >= 30, cell  # at least once: a closure may be re-run
    # Keras 3's counter: exact where every step is one synchronous update, never above the steps run.
    assert table.cell("MultiWorkerMirroredStrategy", "keras3_custom_loop").iterations == 30
    pss = table.cell("ParameterServerStrategy", "keras3_custom_loop")
    assert 1 <= pss.iterations <= pss.steps_run
    text = str(table)
    assert "fails (" in text and "optimizer.iterations counted" in text
    assert "dtfkit-compat" in table._repr_html_()


@pytest.mark.slow
def test_the_cli_prints_json_for_one_cell():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dtfkit",
            "compat",
            "--strategy",
            "MirroredStrategy",
            "--trainer",
            "tf_only_loop",
            "--trainer",
            "tf_keras_fit",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table = json.loads(done.stdout)
    cells = {c["trainer"]: c for c in table["cells"]}
    assert cells["tf_only_loop"]["outcome"] == "works" and cells["tf_only_loop"]["steps_run"] == 40
    try:
        import tf_keras  # noqa: F401
    except ImportError:
        assert cells["tf_keras_fit"]["outcome"] == "not installed"
        assert "pip install tf-keras" in cells["tf_keras_fit"]["detail"]
    else:
        assert cells["tf_keras_fit"]["outcome"] == "works"
    assert "TensorFlow" in table["versions"] and "Keras" in table["versions"]


def test_a_fault_of_tensorflows_transport_is_run_again_and_said(monkeypatch, no_spawn):
    """A cell spoiled by TensorFlow's own gRPC fault ("Unable to parse request", seen once under load) is run
    again on a fresh cluster; it works then, and its footnote says what happened. A real error is not."""
    runs = iter(
        [
            (
                kernel_side.Cell(
                    "ParameterServerStrategy",
                    "tf_only_loop",
                    kernel_side.FAILS,
                    "InternalError: 2 root error(s) found. …",
                ),
                "InternalError: 2 root error(s) found. … (Unable to parse request)",
            ),
            (
                kernel_side.Cell("ParameterServerStrategy", "tf_only_loop", kernel_side.WORKS, "", 40, None),
                None,
            ),
        ]
    )
    monkeypatch.setattr(kernel_side, "_run_once", lambda *args: next(runs))
    cell = kernel_side.run_cell("ParameterServerStrategy", "tf_only_loop")
    assert cell.outcome == kernel_side.WORKS and "after 1 run(s) again on a fresh cluster" in cell.detail
    table = kernel_side.CompatTable((cell,), 40)
    assert "works (1)" in str(table) and "Unable to parse request" in str(table)
    real = kernel_side.Cell("MultiWorkerMirroredStrategy", "keras3_fit", kernel_side.FAILS, "ValueError: …")
    monkeypatch.setattr(kernel_side, "_run_once", lambda *args: (real, None))
    assert kernel_side.run_cell("MultiWorkerMirroredStrategy", "keras3_fit").detail == "ValueError: …"
    assert no_spawn == []
