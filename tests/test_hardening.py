"""The adversarial cases of issue 11: task-count limits, Ctrl-C on a stuck task, the
shared base folder, escaped processes, concurrent calls, byte-bounded logs and marker
injection, plus the smaller ones (clear errors instead of raw exceptions).

The cheap cases start no process (``no_spawn``); the others use the shared cluster
(1 ps + 2 workers) and restart what they kill, or one small cluster of their own.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import psutil
import pytest
from conftest import subprocess_env, wait_gone, wait_until

import dtfkit
from dtfkit.engine.launchers.fake import FakeLauncher
from dtfkit.engine.launchers.local import LocalLauncher
from dtfkit.engine.owner import output, runtime, tasks
from dtfkit.engine.owner.settings import ClusterSettings
from dtfkit.engine.platform import state
from dtfkit.engine.wire import lines, protocol
from dtfkit.engine.wire.layout import ClusterLayout
from dtfkit.engine.wire.protocol import TaskConfig
from dtfkit.errors import ClusterStartError, DtfkitError, TaskExited, TaskTimeout

pytestmark = pytest.mark.timeout(240)


# --------------------------------------------------------- 1: task-count limit
def test_500_workers_fail_at_once_without_starting_anything(no_spawn):
    with pytest.raises(DtfkitError) as info:
        dtfkit.LocalCluster(ps=1, workers=500, start_timeout=40, progress=False, name=None)
    text = str(info.value)
    assert "501 tasks" in text and "max_tasks=501" in text and runtime.MAX_TASKS_ENV in text
    assert no_spawn == []  # refused before a single process was started


def test_the_task_limit_comes_from_the_environment_or_the_keyword(no_spawn, monkeypatch):
    monkeypatch.setenv(runtime.MAX_TASKS_ENV, "2")
    with pytest.raises(DtfkitError, match=f"{runtime.MAX_TASKS_ENV}=2"):
        dtfkit.LocalCluster(ps=1, workers=2, progress=False, name=None)
    runtime.check_task_count(3, max_tasks=3)  # the keyword overrides the machine's limit
    with pytest.raises(DtfkitError, match="max_tasks=2"):
        dtfkit.LocalCluster(ps=1, workers=2, progress=False, max_tasks=2, name=None)
    with pytest.raises(DtfkitError, match="max_tasks must be"):
        dtfkit.LocalCluster(workers=1, progress=False, max_tasks=0, name=None)


def test_the_task_limit_follows_the_available_memory(monkeypatch):
    monkeypatch.delenv(runtime.MAX_TASKS_ENV, raising=False)
    memory = types.SimpleNamespace(available=3 * runtime.TASK_MEMORY_BYTES + 1)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory)
    limit, why = runtime.task_limit()
    assert limit == 3 and "GB of memory" in why
    with pytest.raises(DtfkitError, match="more than this machine allows \\(3\\)"):
        runtime.check_task_count(4)
    runtime.check_task_count(3)


def test_the_start_timeout_covers_spawning(monkeypatch):
    """A machine so loaded that each spawn takes 10 s: a 15 s start stops after two."""
    layout = ClusterLayout.from_counts(workers=3)
    clock = [1000.0]
    spawned = []

    class SlowLauncher(FakeLauncher):
        def start(self, config):
            spawned.append(config.task)
            clock[0] += 10.0
            return super().start(config)

    rt = runtime.ClusterRuntime(layout, ClusterSettings(start_timeout=15), launcher=SlowLauncher())
    try:
        monkeypatch.setattr(tasks, "time", types.SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
        with pytest.raises(ClusterStartError, match="2 of 3 tasks were started within 15 s"):
            rt.tasks.start_tasks(layout.tasks)
        assert spawned == ["worker:0", "worker:1"]
    finally:
        monkeypatch.undo()
        rt.close()
    assert not any(view.alive for view in rt.tasks.snapshot().tasks.values())


# ------------------------------------------------------ 3: the base folder
@pytest.fixture
def home(tmp_path, monkeypatch):
    path = tmp_path / "home"
    monkeypatch.setenv(state.HOME_ENV, str(path))
    return path


def test_a_symlinked_base_folder_is_refused(home, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    home.symlink_to(target)
    with pytest.raises(state.UnsafeHomeError, match="symbolic link"):
        state.base_dir()


def test_a_base_folder_of_another_user_is_refused(home, monkeypatch):
    home.mkdir(mode=0o700)
    if os.getuid() == 0:
        os.chown(home, 12345, 12345)
    else:  # cannot give it away: pretend to be someone else instead
        me = os.getuid() + 1
        monkeypatch.setattr(os, "getuid", lambda: me)
    with pytest.raises(state.UnsafeHomeError, match="belongs to uid"):
        state.base_dir()


def test_a_base_folder_is_created_private_and_an_open_one_of_ours_is_made_private(home):
    assert state.base_dir() == str(home)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    home.chmod(0o777)
    state.base_dir()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_dtfkit_home_that_is_a_file_or_too_long_is_a_clear_error(tmp_path, monkeypatch, no_spawn):
    a_file = tmp_path / "file"
    a_file.write_text("")
    monkeypatch.setenv(state.HOME_ENV, str(a_file))
    with pytest.raises(DtfkitError, match="not a folder"):
        dtfkit.LocalCluster(workers=1, progress=False, name=None)
    monkeypatch.setenv(state.HOME_ENV, str(tmp_path / ("x" * 120)))
    with pytest.raises(DtfkitError, match="too long"):
        dtfkit.LocalCluster(workers=1, progress=False, name=None)


def test_xdg_runtime_dir_comes_first_when_it_is_private(monkeypatch):
    monkeypatch.delenv(state.HOME_ENV)
    # A short folder: pytest's tmp_path (pytest-of-<user>/pytest-<n>/popen-gw<k>/<test name>)
    # can be long enough that the socket path limit rules it out, as it should.
    runtime_dir = Path(tempfile.mkdtemp(prefix="xdg-"))  # made 0700
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime_dir))
        assert state.base_dir() == str(runtime_dir / "dtfkit")
        runtime_dir.chmod(0o755)  # not private: not used
        assert state._default_base() == os.path.join("/tmp", f"dtfkit-{os.getuid()}")
    finally:
        shutil.rmtree(runtime_dir)


def test_state_is_never_written_through_a_planted_link(home, tmp_path):
    folder = home / "1-cafe0000"
    folder.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    # Wherever an attacker guesses the temporary file, or at state.json itself.
    for name in (
        state.STATE_FILE + ".tmp",
        f"{state.STATE_FILE}.{os.getpid()}-{threading.get_ident()}.tmp",
        state.STATE_FILE,
    ):
        (folder / name).symlink_to(victim)
    state.write_state(str(folder), "1-cafe0000", [], "test")
    assert victim.read_text() == "precious\n"
    assert not (folder / state.STATE_FILE).is_symlink()
    assert json.loads((folder / state.STATE_FILE).read_text())["cluster"] == "1-cafe0000"


def _marked_sleeper(cluster_id: str, **extra: str) -> psutil.Process:
    env = subprocess_env(**{state.CLUSTER_ENV: cluster_id, **extra})
    popen = subprocess.Popen(
        [sys.executable, "-c", "import threading; print('up', flush=True); threading.Event().wait()"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    # Popen returns once exec began, when /proc/<pid>/environ can still read empty (the
    # kernel fills it in a moment later): wait until the program runs, or cleanup would
    # not see the mark.
    assert popen.stdout.readline() == b"up\n"
    popen.stdout.close()
    return psutil.Process(popen.pid)


def _dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    return int(done.stdout)


def test_cleanup_trusts_no_state_file_it_does_not_own(home, tmp_path):
    """A planted state.json (a link, or another user's file) naming a live task of ours
    with a dead owner: cleanup must not kill the task."""
    home.mkdir(mode=0o700)
    cluster_id = f"{os.getpid()}-0bad0000"  # its owner, this test, is alive
    victim = _marked_sleeper(cluster_id)
    try:
        planted = {
            "cluster": cluster_id,
            "owner": {"pid": _dead_pid(), "started": 1.0},
            "processes": [state.process_identity(victim.pid)],
        }
        folder = home / cluster_id
        folder.mkdir(mode=0o700)
        outside = tmp_path / "planted.json"
        outside.write_text(json.dumps(planted))
        (folder / state.STATE_FILE).symlink_to(outside)
        report = state.cleanup()
        assert report.killed == [] and victim.is_running()
        if os.getuid() == 0:  # a real file, owned by someone else
            (folder / state.STATE_FILE).unlink()
            (folder / state.STATE_FILE).write_text(json.dumps(planted))
            os.chown(folder / state.STATE_FILE, 12345, 12345)
            report = state.cleanup()
            assert report.killed == [] and victim.is_running()
    finally:
        victim.kill()
        wait_gone([victim], 10)


# --------------------------------------------------- 4: escaped processes
def test_cleanup_ends_processes_that_escaped_a_closed_cluster(home):
    """The dry run and the real run agree: a process a task started in a session of its
    own, still running after its cluster's folder lost its state file (closed) and its
    owner died, is ended; so is one whose folder an earlier cleanup removed."""
    home.mkdir(mode=0o700)
    base = state.base_dir()
    closed_id = f"{_dead_pid()}-c105ed00"
    (home / closed_id / "logs").mkdir(parents=True)
    gone_id = f"{_dead_pid()}-90ne0000"
    escaped = _marked_sleeper(closed_id, **{state.BASE_ENV: base})
    forgotten = _marked_sleeper(gone_id, **{state.BASE_ENV: base})
    try:
        dry = state.cleanup(dry_run=True)
        assert sorted(p for _, p in dry.killed) == sorted([escaped.pid, forgotten.pid])
        assert escaped.is_running() and (home / closed_id).exists()
        report = state.cleanup()
        assert sorted(p for _, p in report.killed) == sorted([escaped.pid, forgotten.pid])
        assert wait_gone([escaped, forgotten], 10) == []
        assert not (home / closed_id).exists()
    finally:
        for proc in (escaped, forgotten):
            try:
                proc.kill()
            except psutil.Error:
                pass


@pytest.mark.slow
def test_close_ends_what_a_task_started_in_a_session_of_its_own():
    with dtfkit.LocalCluster(workers=1, progress=False, start_timeout=120, name=None) as c:
        pid = c.run(lambda: subprocess.Popen(["sleep", "300"], start_new_session=True).pid)["worker:0"]
        escaped = psutil.Process(pid)
        assert os.getpgid(pid) != os.getpgid(c.pids()["worker:0"])
    assert wait_gone([escaped], 10) == [], "close() left the escaped process running"


# --------------------------------------------------- 6: byte-bounded logs
def test_a_huge_line_is_cut_but_its_end_is_kept():
    line = b"x" * (3 * lines.MAX_LINE_BYTES) + protocol.OUTPUT_DONE_MARK.encode() + b"7\n"
    stream = io.BytesIO(line + b"next\n")
    first = lines.read_line(stream)
    assert len(first) < lines.MAX_LINE_BYTES + lines.LINE_END_BYTES + 100
    assert b"bytes cut by dtfkit" in first
    before, kind, number = protocol.parse_done_mark(first.decode().rstrip("\n"))
    assert (kind, number) == ("output_done", 7) and before.startswith("xxx")
    assert lines.read_line(stream) == b"next\n"


def test_memory_and_files_are_bounded_in_bytes(tmp_path):
    book = output.LogBook(str(tmp_path), task_bytes=100_000, recent_bytes=50_000, file_bytes=200_000)
    for i in range(100):
        book.add("worker:0", f"{i:04d}" + "y" * 10_000)
    kept = book.lines("worker:0")
    assert sum(len(line) for line in kept) <= 100_000
    assert kept[-1].startswith("0099")
    assert book.dropped["worker:0"] == 100 - len(kept)
    assert sum(len(r[3]) for r in book._recent) <= 50_000
    assert "oldest line(s) dropped" in book.dropped_note() and "rotated" in book.dropped_note()
    book.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["worker-0.log", "worker-0.log.1"]
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 2 * 200_000 + 20_000


def test_only_the_newest_closed_cluster_folders_are_kept(home):
    home.mkdir(mode=0o700)
    for i in range(state.KEEP_CLOSED_FOLDERS + 5):
        folder = home / f"1-{i:08x}"
        (folder / "logs").mkdir(parents=True)
        os.utime(folder, (1000 + i, 1000 + i))
    open_one = home / "1-0pen0000"
    open_one.mkdir()
    (open_one / state.STATE_FILE).write_text("{}")
    os.utime(open_one, (1, 1))
    cluster_id, path = state.new_cluster_dir()
    left = sorted(p.name for p in home.iterdir())
    assert len(left) == state.KEEP_CLOSED_FOLDERS + 2  # the newest closed ones, the open one, the new one
    assert "1-00000000" not in left and f"1-{state.KEEP_CLOSED_FOLDERS + 4:08x}" in left
    assert "1-0pen0000" in left and cluster_id in left


def test_folders_not_named_as_clusters_are_not_pruned(home):
    """DTFKIT_HOME may hold what is not dtfkit's (the test session keeps its own folders there):
    only folders named as dtfkit names a cluster's are pruned, however old the others are."""
    home.mkdir(mode=0o700)
    mine = home / "notes"
    mine.mkdir()
    os.utime(mine, (1, 1))
    for i in range(state.KEEP_CLOSED_FOLDERS + 2):
        folder = home / f"3-{i:08x}"
        folder.mkdir()
        os.utime(folder, (1000 + i, 1000 + i))
    removed = state.prune_closed(str(home))
    assert sorted(removed) == ["3-00000000", "3-00000001"] and mine.is_dir()


def test_a_cluster_folder_that_is_still_starting_is_never_pruned(home):
    # Another process of the same user may close many clusters while this one starts
    # (its tasks import TensorFlow for seconds): the new folder must not count as closed.
    home.mkdir(mode=0o700)
    starting, path = state.new_cluster_dir()
    os.utime(path, (1, 1))  # older than everything below
    for i in range(state.KEEP_CLOSED_FOLDERS + 5):
        folder = home / f"2-{i:08x}"
        folder.mkdir()
        os.utime(folder, (1000 + i, 1000 + i))
    removed = state.prune_closed(str(home))
    assert len(removed) == 5 and starting not in removed
    assert state.read_state(path)["description"] == "starting"


def test_lines_since_leave_out_earlier_output():
    book = output.LogBook(None)
    book.add("worker:0", "earlier")
    mark = book.seq
    book.add("worker:0", "later")
    assert book.lines("worker:0", since=mark) == ["later"]


# ----------------------------------------------------- 7: marker injection
def test_parse_done_mark_accepts_only_a_whole_mark():
    mark = protocol.OUTPUT_DONE_MARK
    assert protocol.parse_done_mark(f"{mark}oops") is None
    assert protocol.parse_done_mark(f"{mark}script x") is None
    assert protocol.parse_done_mark(f"{mark}12 trailing") is None
    assert protocol.parse_done_mark(f"text{mark}12") == ("text", "output_done", 12)
    assert protocol.parse_done_mark(f"{mark}script 3") == ("", "script_done", 3)


# ------------------------------------------------------------ smaller ones
def test_env_values_must_be_strings(no_spawn):
    with pytest.raises(DtfkitError, match=r"env\['A'\] is None"):
        dtfkit.LocalCluster(workers=1, env={"A": None}, progress=False, name=None)
    with pytest.raises(DtfkitError, match="not a valid environment variable name"):
        dtfkit.LocalCluster(workers=1, env={"A=B": "1"}, progress=False, name=None)


def test_bad_selectors_are_clear_errors():
    layout = ClusterLayout.from_counts(ps=1, workers=2)
    for bad in (5, None, 2.5):
        with pytest.raises(DtfkitError, match="cannot select tasks"):
            layout.select(bad)
    with pytest.raises(DtfkitError, match="whole number"):
        dtfkit.engine.wire.layout.TaskId.parse("worker", "x")


def test_host_network_warns_about_what_it_exposes(no_spawn):
    launcher = LocalLauncher(network="host")
    config = TaskConfig(task="worker:0", gen=1, mode="serve")
    with pytest.warns(UserWarning, match="every network interface") as record, pytest.raises(AssertionError):
        launcher.start(config)  # warns before it spawns (which no_spawn forbids)
    text = str(record[0].message)
    assert "without authentication" in text and "Unix socket" in text
    assert not launcher.describe().isolated and len(no_spawn) == 1


def _notebook(cells) -> str:
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("notes.txt", "hello", "is not a notebook"),
        ("broken.ipynb", '{"cells": [', "not valid JSON"),
        ("list.ipynb", "[1, 2]", "not a notebook"),
    ],
)
def test_student_copies_of_a_bad_file_fail_before_creating_anything(tmp_path, name, content, message):
    from dtfkit.cli import main
    from edition.student import write_student_copies

    source = tmp_path / name
    source.write_text(content)
    out = tmp_path / "out"
    with pytest.raises(DtfkitError, match=message):
        write_student_copies(source, out)
    assert not out.exists()
    assert main(["student-copies", str(source), "-o", str(out)]) == 2
    assert not out.exists()


def test_student_copies_of_a_folder_with_one_broken_notebook_write_nothing(tmp_path):
    from edition.student import write_student_copies

    (tmp_path / "a.ipynb").write_text(_notebook([]))
    (tmp_path / "b.ipynb").write_text("{")
    with pytest.raises(DtfkitError, match="b.ipynb"):
        write_student_copies(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------- on the shared cluster (slow)
def ignore_interrupts_for_ever(token: str) -> None:
    announced = False
    while True:
        try:
            # Inside the try: the test interrupts as soon as it reads the token, which can be
            # while print() still returns (seen under load: the KeyboardInterrupt escaped).
            if not announced:
                print(token, flush=True)
                announced = True
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


@pytest.mark.slow
def test_stop_on_a_stuck_task_raises_a_clear_error_not_keyerror(cluster):
    handle = cluster.submit(ignore_interrupts_for_ever, args=("stuck-1",), on="worker:0", grace=0.5)
    assert wait_until(lambda: "stuck-1" in cluster.logs("worker:0", tail=1), 60)
    handle.stop()
    for _ in range(2):  # and every later result() says the same
        with pytest.raises(TaskExited, match="was interrupted \\(it was stopped\\).*was killed"):
            handle.result()
    assert cluster.status()["worker:0"] == "killed"
    cluster.restart("worker:0")


@pytest.mark.slow
def test_ctrl_c_on_a_stuck_task_re_raises_keyboardinterrupt(cluster):
    handle = cluster.submit(ignore_interrupts_for_ever, args=("stuck-2",), on="worker:0", grace=0.5)
    main = threading.main_thread().ident

    def main_thread_waits_in_result() -> bool:
        # Ctrl-C must land while the main thread is inside result(), not before it got
        # there (e.g. still in presser.start()), where nothing would catch it.
        frame = sys._current_frames().get(main)
        while frame is not None:
            if frame.f_code.co_name == "result" and frame.f_code.co_filename.endswith("calls.py"):
                return True
            frame = frame.f_back
        return False

    def press_ctrl_c() -> None:
        if wait_until(
            lambda: "stuck-2" in cluster.logs("worker:0", tail=1) and main_thread_waits_in_result(), 60
        ):
            signal.pthread_kill(main, signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    # Ctrl-C meets Python's default handler, unblocked; an earlier test of this process (a
    # pytest-xdist worker runs many files) may have left another handler: put back afterwards.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        presser.start()
        with pytest.raises(KeyboardInterrupt):
            handle.result(timeout=120)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        signal.signal(signal.SIGINT, previous)
    presser.join(10)
    with pytest.raises(TaskExited, match="the cell was interrupted"):
        handle.result()
    cluster.restart("worker:0")


def print_the_marker() -> str:
    print("\x00dtfkit-output-done oops")
    print("\x00dtfkit-output-done script nope", end="")
    print(" still going")
    return "returned"


@pytest.mark.slow
def test_printing_the_output_marker_does_not_kill_the_reader(cluster):
    assert cluster.run(print_the_marker, on="worker:1", timeout=30) == {"worker:1": "returned"}
    text = cluster.logs("worker:1", tail=5)
    assert "dtfkit-output-done oops" in text and "still going" in text
    assert cluster.run(lambda: 1, on="worker:1", timeout=30) == {"worker:1": 1}


def print_huge_lines(n: int) -> int:
    line = "z" * (1024 * 1024)
    for _ in range(n):
        print(line)
    return n


@pytest.mark.slow
def test_huge_output_is_bounded_in_memory_and_said_so(cluster, capsys):
    assert cluster.run(print_huge_lines, args=(80,), on="worker:1", timeout=120) == {"worker:1": 80}
    capsys.readouterr()
    kept = cluster._rt.output.logbook.lines("worker:1")
    assert max(len(line) for line in kept) < 64 * 1024 + 1000  # lines.MAX_LINE_BYTES and its kept end
    assert sum(len(line) for line in kept) <= 4 * 1024 * 1024  # output.TASK_MEMORY_BYTES
    assert "worker:1:" in repr(cluster) and "dropped from memory" in repr(cluster)
    assert "dropped from memory" in cluster._repr_html_()


def wait_for_file(path: str) -> str:
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    return "released"


@pytest.mark.slow
def test_a_second_thread_waiting_on_the_cluster_is_refused_at_once(cluster, tmp_path):
    gate = tmp_path / "gate"
    handle = cluster.submit(wait_for_file, args=(str(gate),), on="worker:0")
    results: list = []
    waiter = threading.Thread(target=lambda: results.append(handle.result()), daemon=True)
    waiter.start()
    try:
        assert wait_until(lambda: cluster._rt.events.waiting_for is not None, 10)
        # Refused, not queued: waiting would end in a TaskTimeout after 30 s (the gate
        # opens only below), which the message match tells apart.
        with pytest.raises(DtfkitError, match="already waiting for wait_for_file"):
            cluster.run(lambda: 1, on="worker:1", timeout=30)
        with pytest.raises(DtfkitError, match="already waiting"):
            cluster.restart()
    finally:
        gate.write_text("")
        waiter.join(60)
    assert results == [{"worker:0": "released"}]
    assert cluster.run(lambda: 2, on="worker:1", timeout=30) == {"worker:1": 2}


def stop_myself() -> None:
    os.kill(os.getpid(), signal.SIGSTOP)


@pytest.mark.slow
def test_a_timeout_says_when_a_task_was_stopped(cluster):
    # The stopped task is named as such, and its stack is not waited for (it cannot send one).
    with pytest.raises(TaskTimeout, match="STOPPED \\(state T\\)") as info:
        cluster.run(stop_myself, on="worker:1", timeout=2)
    assert "so it could not run at all" in str(info.value)
    cluster.restart("worker:1")


def exit_after(word: str) -> None:
    print(word, flush=True)
    os._exit(3)


@pytest.mark.slow
def test_task_exited_shows_only_this_calls_lines_and_a_current_restart_hint(cluster):
    cluster.run(lambda: print("EARLIER-CALL"), on="worker:1")
    with pytest.raises(TaskExited) as info:
        cluster.run(exit_after, args=("THIS-CALL",), on="worker:1", timeout=60)
    assert "THIS-CALL" in str(info.value) and "EARLIER-CALL" not in str(info.value)
    cluster.restart("worker:1")

    handle = cluster.submit(ignore_interrupts_for_ever, args=("stuck-3",), on="worker:1")
    assert wait_until(lambda: "stuck-3" in cluster.logs("worker:1", tail=1), 60)
    cluster.kill("worker:1")
    cluster.restart("worker:1")
    with pytest.raises(TaskExited, match="has been started again since") as info:
        handle.result()
    assert "cluster.restart('worker:1') starts it again" not in str(info.value)


@pytest.mark.slow
def test_run_on_a_number_and_an_unknown_address_are_clear_errors(cluster):
    with pytest.raises(DtfkitError, match="cannot select tasks"):
        cluster.run(lambda: 1, on=5)
    with pytest.raises(DtfkitError, match="no task ps:3"):
        cluster.address("ps:3")
    assert cluster.address("ps:0").startswith("localhost:")


def test_cli_launch_of_500_workers_fails_at_once(no_spawn, tmp_path, capsys):
    from dtfkit.cli import main

    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    assert main(["launch", "--workers", "500", str(script)]) == 2
    assert "max_tasks=501" in capsys.readouterr().err
    assert no_spawn == []


@pytest.mark.slow
def test_restart_on_a_port_another_program_took_is_a_clear_error_and_leaves_nothing_starting():
    import socket

    with pytest.warns(UserWarning, match="every network interface"):
        cluster = dtfkit.LocalCluster(workers=1, network="host", progress=False, name=None)
    with cluster:
        port = int(cluster.address("worker", 0).rsplit(":", 1)[1])
        cluster.kill("worker", 0)
        squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            squatter.bind(("", port))
            squatter.listen()
            with pytest.raises(
                ClusterStartError, match=f"worker:0 could not be started again.*:{port}.*Next step"
            ):
                cluster.restart("worker", 0)
            assert cluster.status()["worker:0"] != "starting"
        finally:
            squatter.close()
        cluster.restart("worker", 0)  # the port is free again
        assert cluster.run(lambda: 7, timeout=60) == {"worker:0": 7}


def test_a_clusters_settings_are_checked_once_when_made_and_frozen():
    """issue 42: one object, validated when made; the runtime takes it as it is, and a restart reuses it."""
    import dataclasses

    with pytest.raises(DtfkitError, match="unknown task mode 'train'"):
        ClusterSettings(mode="train")
    with pytest.raises(DtfkitError, match="mode='script' needs script"):
        ClusterSettings(mode="script")
    with pytest.raises(DtfkitError, match="unknown gpus policy 'all'"):
        ClusterSettings(gpus="all")
    with pytest.raises(DtfkitError, match="start_timeout must be a positive number of seconds, not True"):
        ClusterSettings(start_timeout=True)
    with pytest.raises(DtfkitError, match="max_tasks must be a positive whole number or None, not 0"):
        ClusterSettings(max_tasks=0)
    with pytest.raises(DtfkitError, match="env: 'A=B' is not a valid environment variable name"):
        ClusterSettings(env={"A=B": "1"})
    settings = ClusterSettings(env={"GRPC_FAIL_FAST": "use_caller"}, max_tasks=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.mode = "noserve"  # type: ignore[misc]
    with pytest.raises(TypeError):
        settings.env["X"] = "1"  # type: ignore[index]
    assert dataclasses.replace(settings, start_timeout=5).env == {"GRPC_FAIL_FAST": "use_caller"}
    with pytest.raises(DtfkitError, match="a cluster of 3 tasks is more than max_tasks=2 allows"):
        runtime.ClusterRuntime(ClusterLayout.from_counts(workers=3), settings, launcher=FakeLauncher())
