"""``python -m dtfkit launch``: the seed-style example in both modes, a failing
worker, a timeout; and ``dtfkit.launch()``'s LaunchResult."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO, cluster_processes, processes_of, subprocess_env, wait_gone, wait_until

import dtfkit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

EXAMPLE = REPO / "dtfkit" / "examples" / "distributed_mnist.py"


def run_cli(args: list[str], cwd, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dtfkit", *args],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=str(cwd),
        timeout=timeout,
    )


def cluster_id_from(stdout: str) -> str:
    """The cluster id, from the summary line's log folder (<home>/<cluster id>/logs)."""
    match = re.search(r"logs in (\S+)", stdout)
    assert match, stdout
    return os.path.basename(os.path.dirname(match.group(1).rstrip("/")))


def assert_no_process_of(cluster_id: str) -> None:
    alive = wait_gone(cluster_processes(cluster_id), 10)
    assert alive == [], f"processes of {cluster_id} still running: {[p.pid for p in alive]}"


@pytest.mark.timing
@pytest.mark.parametrize(
    "extra",
    [["--train_steps=200"], ["--train_steps=200", "--is_sync=True", "--stop_grace_secs=2"]],
    ids=["async", "sync"],
)
def test_launch_the_example_with_2_ps_and_2_workers(tmp_path, extra):
    out = run_cli(["launch", "--ps", "2", "--workers", "2", str(EXAMPLE), "--", *extra], tmp_path, 300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert re.search(r"^\[worker:0\] ", out.stdout, re.M)
    assert re.search(r"^\[ps:1\] ", out.stdout, re.M)
    for index in (0, 1):
        match = re.search(
            rf"^\[worker:{index}\] worker {index} done: local_steps=(\d+) global_step=(\d+)$",
            out.stdout,
            re.M,
        )
        assert match, f"no 'worker {index} done' line:\n{out.stdout[-4000:]}"
        assert int(match.group(1)) >= 1 and int(match.group(2)) >= 200
    assert "all workers finished" in out.stdout
    assert_no_process_of(cluster_id_from(out.stdout))


# Every task writes its pid to a folder; worker:1 fails once every task is running,
# the others would run for ever.
FAILING = textwrap.dedent(
    """
    import os, sys, threading, time
    opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    me = f"{opts['job_name']}:{opts['task_index']}"
    folder = opts["pid_dir"]
    print(f"{me} running", flush=True)  # before the pid file: a task that is counted has printed
    path = os.path.join(folder, me.replace(":", "-") + ".pid")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)  # whole or not there: a task killed while it writes leaves no empty pid file
    if me == opts.get("fail", "-"):
        deadline = time.monotonic() + 60  # bounded wait for the other tasks
        written = lambda: [n for n in os.listdir(folder) if n.endswith(".pid")]
        while len(written()) < int(opts["tasks"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        print(f"{me} fails now", flush=True)
        sys.exit(1)
    threading.Event().wait()
    """
)


def _pids_in(folder) -> list[int]:
    return [int(p.read_text()) for p in folder.glob("*.pid")]


def test_a_worker_that_exits_1_fails_the_launch_and_stops_the_rest(tmp_path):
    script, pid_dir = tmp_path / "fails.py", tmp_path / "pids"
    script.write_text(FAILING)
    pid_dir.mkdir()
    args = [f"--pid_dir={pid_dir}", "--fail=worker:1", "--tasks=3"]
    out = run_cli(["launch", "--ps", "1", "--workers", "2", str(script), "--", *args], tmp_path, 120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[worker:1] worker:1 fails now" in out.stdout
    assert "worker:1 exited with code 1; stopping worker:0" in out.stdout
    assert "FAILED: worker:1" in out.stdout
    assert len(_pids_in(pid_dir)) == 3
    assert wait_gone(processes_of(_pids_in(pid_dir)), 10) == []
    assert_no_process_of(cluster_id_from(out.stdout))


def test_launch_timeout_stops_workers_that_never_finish(tmp_path):
    script, pid_dir = tmp_path / "forever.py", tmp_path / "pids"
    script.write_text(FAILING)
    pid_dir.mkdir()
    out = run_cli(
        [
            "launch",
            "--ps",
            "1",
            "--workers",
            "2",
            "--timeout",
            "5",
            str(script),
            "--",
            f"--pid_dir={pid_dir}",
        ],
        tmp_path,
        120,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "timeout after 5 s: stopping worker:0, worker:1" in out.stdout
    assert wait_gone(processes_of(_pids_in(pid_dir)), 10) == []
    assert_no_process_of(cluster_id_from(out.stdout))


@pytest.mark.timing
def test_launch_api_reports_each_task(tmp_path):
    script, pid_dir = tmp_path / "fails.py", tmp_path / "pids"
    script.write_text(FAILING)
    pid_dir.mkdir()
    lines: list[tuple[str, str]] = []
    result = dtfkit.launch(
        str(script),
        ps=1,
        workers=2,
        args=[f"--pid_dir={pid_dir}", "--fail=worker:1", "--tasks=3"],
        echo=lambda task, line: lines.append((task, line)),
    )
    assert not result.ok
    assert result.failed == ["worker:1"] and not result.timed_out
    assert result.exit_codes == {"ps:0": None, "worker:0": None, "worker:1": 1}
    assert "FAILED: worker:1" in result.summary()
    assert ("worker:1", "worker:1 fails now") in lines
    assert ("worker:0", "worker:0 running") in lines
    assert wait_gone(processes_of(_pids_in(pid_dir)), 10) == []


def test_launch_shows_lines_printed_before_it_starts_supervising(tmp_path, monkeypatch):
    # A script starts as soon as its task has the ClusterSpec, so it may print while
    # launch() is between starting the cluster and watching it. Make that certain:
    # start() returns only once worker:0's first line is in the log book.
    from dtfkit.engine.owner.runtime import ClusterRuntime

    script = tmp_path / "early.py"
    script.write_text(
        "import sys\n"
        "opts = dict(a[2:].split('=', 1) for a in sys.argv[1:] if a.startswith('--') and '=' in a)\n"
        "print(f\"{opts['job_name']}:{opts['task_index']} early\", flush=True)\n"
        "if opts['job_name'] == 'ps':\n"
        "    import threading; threading.Event().wait()\n"
    )
    real_start = ClusterRuntime.start

    def start_then_let_worker_0_print(runtime):
        real_start(runtime)
        assert wait_until(lambda: "worker:0 early" in runtime.output.logbook.lines("worker:0"), 60)

    monkeypatch.setattr(ClusterRuntime, "start", start_then_let_worker_0_print)
    lines: list[tuple[str, str]] = []
    result = dtfkit.launch(str(script), ps=1, workers=2, echo=lambda task, line: lines.append((task, line)))
    assert result.ok, result.summary()
    assert ("worker:0", "worker:0 early") in lines
    assert ("worker:1", "worker:1 early") in lines


def test_demo_trains_both_workers_and_ends_every_process(tmp_path):
    """The README's main-job command: `python -m dtfkit demo`."""
    out = run_cli(["demo", "--steps", "100"], tmp_path, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = re.findall(r"^(worker:\d)\s+(\d+)\s+(\d+)%", out.stdout, flags=re.M)
    assert [name for name, _, _ in rows] == ["worker:0", "worker:1"], out.stdout
    assert sum(int(steps) for _, steps, _ in rows) >= 100
    assert "every process ended: True" in out.stdout
    cluster_id = re.search(r"LocalCluster (\S+):", out.stdout).group(1)
    assert_no_process_of(cluster_id)


def test_student_copies_in_nbgrader_format_writes_one_assignment_per_chapter(tmp_path):
    """`student-copies --format nbgrader`: nbgrader's source folder layout, graded cells marked."""
    import json

    source = tmp_path / "course" / "source"
    args = ["student-copies", str(REPO / "notebooks"), "--format", "nbgrader", "-o", str(source)]
    out = run_cli([*args, "--exercises-only", "--lock-other-cells"], tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    chapters = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    written = sorted(p.relative_to(source).as_posix() for p in source.glob("*/*.ipynb"))
    assert written == [f"{c}/{c}.ipynb" for c in chapters]
    assert out.stdout.count("wrote ") == len(chapters) and "nbgrader generate_assignment" in out.stdout
    nb = json.loads((source / chapters[0] / f"{chapters[0]}.ipynb").read_text(encoding="utf-8"))
    ids = [c["metadata"]["nbgrader"]["grade_id"] for c in nb["cells"]]
    chapter = int(chapters[0].split("_")[0])
    assert {f"ex{chapter}_1_answer", f"ex{chapter}_1_check"} <= set(ids)
    assert all("dtfkit-exercise" in c["metadata"]["tags"] for c in nb["cells"])


def test_student_copies_refuses_nbgrader_options_without_the_format_and_names_a_broken_cell(tmp_path):
    wrong = run_cli(["student-copies", str(REPO / "notebooks"), "-o", "x", "--exercises-only"], tmp_path, 60)
    assert wrong.returncode == 2 and "--exercises-only needs --format nbgrader" in wrong.stderr
    broken = tmp_path / "broken.ipynb"
    broken.write_text(
        '{"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": null,'
        ' "source": "def f():\\n    ### BEGIN SOLUTION\\n    return 1\\n    ### END SOLUTION"}],'
        ' "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    )
    out = run_cli(["student-copies", str(broken), "--format", "nbgrader", "-o", "src"], tmp_path, 60)
    assert out.returncode == 2, out.stdout
    assert "broken.ipynb, cell 0: this answer cell has no check cell after it" in out.stderr
    assert not (tmp_path / "src").exists()


def test_student_copies_of_the_chinese_edition(tmp_path):
    """`--lang zh_CN`: the Chinese chapters, stubbed as the English ones are; nbgrader's format too."""
    import json

    from edition.code_units import skeleton

    out = run_cli(
        ["student-copies", str(REPO / "notebooks"), "--lang", "zh_CN", "-o", "student"], tmp_path, 120
    )
    assert out.returncode == 0, out.stderr
    written = sorted((tmp_path / "student").glob("*.ipynb"))
    assert [p.name for p in written] == sorted(
        p.name for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")
    )
    english = run_cli(["student-copies", str(REPO / "notebooks"), "-o", "english"], tmp_path, 120)
    assert english.returncode == 0, english.stderr
    for path in written:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        theirs = json.loads((tmp_path / "english" / path.name).read_text(encoding="utf-8"))["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        # The Chinese copy opens with the cell that sets dtfkit's language; then the English program, stubbed
        # alike (only its comments and printed words are in Chinese).
        assert 'dtfkit.set_language("zh_CN")' in code[0], path.name
        english_code = ["".join(c["source"]) for c in theirs if c["cell_type"] == "code"]
        assert [skeleton(c) for c in code[1:]] == [skeleton(c) for c in english_code], path.name
        assert "学习目标" in "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert any("raise NotImplementedError()" in code for code in code)  # solutions stubbed as in English
    graded = run_cli(
        [
            "student-copies",
            str(REPO / "notebooks"),
            "--lang",
            "zh_CN",
            "--format",
            "nbgrader",
            "-o",
            "source",
        ],
        tmp_path,
        120,
    )
    assert graded.returncode == 0 and graded.stdout.count("wrote ") == len(written), graded.stderr
    missing = run_cli(["student-copies", str(REPO / "notebooks"), "--lang", "fr", "-o", "x"], tmp_path, 60)
    assert missing.returncode == 2 and "there is no fr edition" in missing.stderr
    typo = run_cli(["student-copies", str(REPO / "notebook"), "--lang", "zh_CN", "-o", "x"], tmp_path, 60)
    assert typo.returncode == 2 and "notebook does not exist" in typo.stderr


def test_translations_check_says_the_edition_is_in_step_and_refuses_stray_arguments(tmp_path):
    out = run_cli(["translations", "check"], tmp_path, 120)
    assert out.returncode == 0 and "the zh_CN edition is in step with the English" in out.stdout, out.stdout
    stray = run_cli(["translations", "build", "09"], tmp_path, 60)
    assert stray.returncode == 2 and "takes no name" in stray.stderr
    todo = run_cli(["translations", "todo", "09"], tmp_path, 60)
    assert todo.returncode == 0 and todo.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "argv", [["student-copies", "notebooks", "-o", "student"], ["translations", "check"]], ids=lambda a: a[0]
)
def test_the_edition_commands_outside_a_checkout_say_to_run_them_from_one(argv, monkeypatch, capsys):
    """A student's ``pip install dtfkit`` has no edition/ (it lives in the checkout, beside the chapters)."""
    from dtfkit.cli import main

    for module in ("edition.student", "edition.translate"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setitem(sys.modules, "edition", None)  # None in sys.modules: the import fails
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{argv[0]}: the edition builder is not part of the installed package" in err
    assert "root of a dtfkit checkout" in err
