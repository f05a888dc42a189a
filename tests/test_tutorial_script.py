"""``dtfkit.recipes.tutorial_script``: reading the tutorial's script and what its launched workers printed,
and (slow) the invariants chapters 2 and 3 check on a real launch of it, async and sync."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import subprocess_env

import dtfkit
from dtfkit.recipes import tutorial_script as script


def test_the_script_is_found_without_importing_it_or_tensorflow():
    assert script.PATH.endswith("dtfkit/examples/distributed_mnist.py")
    # a fresh interpreter: a notebook kernel that uses the module must stay free of TensorFlow
    code = (
        "import sys; from dtfkit.recipes import tutorial_script as s; s.source_lines('main'); "
        "print(sorted(m for m in ('tensorflow', 'dtfkit.examples.distributed_mnist') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_show_prints_the_ps_join_of_main_with_its_line_numbers(capsys):
    first, lines = script.source_lines("main")
    assert lines[0].startswith("def main(")
    script.show("main", start='if job_name == "ps"', stop="server.join()")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# distributed_mnist.py, lines ")
    assert 'if job_name == "ps":' in out[1] and "server.join()" in out[-1]
    assert len(out) == 5  # the header, the if, the line, its print, the join
    number = int(out[-1].split()[0])
    assert "server.join()" in lines[number - first]


def test_show_names_a_missing_function():
    with pytest.raises(dtfkit.DtfkitError, match="no function 'nope'"):
        script.show("nope")


def test_echo_hides_tensorflow_log_lines_only(capsys):
    for line in [
        "INFO:tensorflow:Graph was finalized.",
        "I1123 15:46:50.682624 140375780522880 monitored_session.py:240] Graph was finalized.",
        "WARNING:tensorflow:It seems that global step (tf.train.get_global_step) has not been increased.",
        "W1123 15:47:12.442603 140126397619072 basic_session_run_hooks.py:742] It seems that ...",
        "Instructions for updating:",
        "The `SyncReplicaOptimizer` class is deprecated. For synchronous training, please use ...",
        "Train step 10, loss: 2.1",
        "worker 1 done: local_steps=3 global_step=4",
        "Traceback (most recent call last):",
    ]:
        script.echo_script_lines("worker:1", line)
    assert capsys.readouterr().out.splitlines() == [
        "[worker:1] Train step 10, loss: 2.1",
        "[worker:1] worker 1 done: local_steps=3 global_step=4",
        "[worker:1] Traceback (most recent call last):",
    ]


def test_worker_reports_read_each_workers_log(tmp_path):
    (tmp_path / "worker-0.log").write_text(
        "INFO:tensorflow:Graph was finalized.\nTrain step 0, loss: 2.3\nTrain step 20, loss: 1.0\n"
        "worker 0 stopped training, closing the session (stop_grace_secs=1)\n"
        "worker 0 done: local_steps=25 global_step=41\n"
    )
    (tmp_path / "worker-1.log").write_text("Train step 20, loss: 1.1\n")  # never got to its last line
    (tmp_path / "ps-0.log").write_text("ps 0 serving at grpc://localhost:1\n")
    result = SimpleNamespace(exit_codes={"ps:0": None, "worker:0": 0, "worker:1": 1}, log_dir=str(tmp_path))
    assert script.worker_reports(result) == {
        "worker:0": {"printed": [0, 20], "local_steps": 25, "global_step": 41},
        "worker:1": {"printed": [20], "local_steps": None, "global_step": None},
    }


def test_print_steps_wraps_long_lines(capsys):
    script.print_steps({"worker:0": {"printed": list(range(0, 400, 10))}}, width=40)
    out = capsys.readouterr().out.splitlines()
    assert len(out) > 1 and all(len(line) <= 40 for line in out)
    assert out[0].startswith("worker:0 printed 40 steps: 0 10")
    assert " ".join(out).split()[-1] == "390"


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_launched_script_keeps_the_step_arithmetic_the_chapters_check(sync):
    args = ["--train_steps=60", "--log_every=10"]
    if sync:
        args += ["--is_sync=True", "--stop_grace_secs=1"]
    result = dtfkit.launch(script.PATH, ps=1, workers=2, args=args, timeout=240)
    assert result.ok, result.summary()
    assert result.exit_codes == {"ps:0": None, "worker:0": 0, "worker:1": 0}
    reports = script.worker_reports(result)
    final = max(r["global_step"] for r in reports.values())
    local = sum(r["local_steps"] for r in reports.values())
    assert final >= 60
    if sync:
        assert 2 * final - 2 <= local <= 2 * final + 2, reports  # R = N = 2 tokens per update, 2 at the start
    else:
        assert local == final, reports  # every async step added 1 to the global step
    printed = [step for r in reports.values() for step in r["printed"]]
    assert printed and all(step % 10 == 0 for step in printed), reports
