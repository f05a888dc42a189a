"""Reading faulthandler's dumps (``dtfkit.engine.wire.dumps``): real dumps of real processes."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
import textwrap

from dtfkit.engine.wire import dumps

# A process with a second thread of its own, stuck in a regex (C code that holds the
# interpreter lock), armed as dtfkit's tasks are.
STUCK = textwrap.dedent(
    """
    import re, sys, threading
    from dtfkit.engine.wire import dumps
    dumps.arm(sys.argv[1])
    ready = threading.Event()

    def helper():  # one line: whenever the signal comes, the thread is on it
        ready.set(); threading.Event().wait()  # HELPER-WAITS

    threading.Thread(target=helper, name="helper").start()
    ready.wait()

    def stuck():  # "armed" is printed from inside, on the line that then gets stuck
        print("armed", flush=True); return re.match(r"(a+)+$", "a" * 64 + "b")  # STUCK-HERE

    stuck()
    """
)


def allow_core_files() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def dump_of(tmp_path) -> tuple[str, int]:
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    path = tmp_path / "stacks.txt"
    # As on a machine with `ulimit -c unlimited`: arm() must turn core files off itself.
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        preexec_fn=allow_core_files if can_allow_core_files() else None,
    )
    try:
        assert proc.stdout.readline() == "armed\n"
        proc.send_signal(signal.SIGABRT)
        code = proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    return path.read_text(), code


def can_allow_core_files() -> bool:
    return resource.getrlimit(resource.RLIMIT_CORE)[1] == resource.RLIM_INFINITY


def test_a_dump_on_sigabrt_reads_as_a_tasks_own_stacks(tmp_path):
    raw, code = dump_of(tmp_path)
    assert code == -signal.SIGABRT
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("core")] == []  # no core file left
    assert raw.startswith("Fatal Python error: Aborted"), raw
    threads = dumps.parse_dump(raw)
    assert sorted(t.current for t in threads) == [False, True]
    running = next(t for t in threads if t.current)
    # Outermost call first, as Python's tracebacks read (faulthandler writes innermost first).
    functions = [name for _, _, name in running.frames]
    assert functions[:2] == ["<module>", "stuck"], (
        functions
    )  # then re.match's frame, unless the signal came first
    text = dumps.format_dump(raw)
    assert text.startswith("Thread 0x") and "(the one that was running)" in text
    assert "in stuck\n" in text and "# STUCK-HERE" in text  # the line of code, from the file
    assert "# HELPER-WAITS" in text  # a thread of the user's own is kept


def test_threads_and_leading_frames_of_the_engine_are_left_out_and_paths_shortened():
    engine = dumps._ENGINE_DIR + "/task_main.py"
    stdlib = dumps._STDLIB_DIR + "/threading.py"
    package = dumps._PACKAGE_DIRS[0] + "/tensorflow/python/eager/context.py"
    raw = textwrap.dedent(
        f"""\
        Fatal Python error: Aborted

        Thread 0x0000000000000002 (most recent call first):
          File "{stdlib}", line 320 in wait
          File "{engine}", line 46 in _watch
          File "{stdlib}", line 975 in run

        Current thread 0x0000000000000001 (most recent call first):
          File "{package}", line 745 in ensure_initialized
          File "/home/ada/course/mine.py", line 3 in build
          File "{engine}", line 175 in _run_call
          File "<frozen runpy>", line 88 in _run_code

        Extension modules: numpy (total: 1)
        """
    )
    text = dumps.format_dump(raw)
    assert "0x0000000000000002" not in text and "_watch" not in text  # dtfkit's control thread
    assert text.count("Thread 0x") == 1 and "ensure_initialized" in text  # TensorFlow is not plumbing
    # Outermost first, from the learner's frame on: the engine's leading frames are left out (frames.trim),
    # and no folder of the machine shows (frames.short_path).
    assert "_run_call" not in text and "runpy" not in text
    assert text.index('File "~/course/mine.py", line 3, in build') < text.index(
        'File "tensorflow/python/eager/context.py", line 745, in ensure_initialized'
    )
    assert "Extension modules" not in text


def test_no_dump_reads_as_nothing(tmp_path):
    assert dumps.format_dump("") == ""
    assert dumps.read_dump(None) == ""
    assert dumps.read_dump(str(tmp_path / "never-written.txt")) == ""
    empty = tmp_path / "armed-but-never-fired.txt"
    empty.write_text("")
    assert dumps.read_dump(str(empty)) == ""
