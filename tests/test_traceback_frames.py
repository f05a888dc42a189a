"""A task's tracebacks and stacks read like local ones (``dtfkit.engine.wire.frames``): dtfkit's
engine frames that ran the call are left out, and no folder of the machine shows.

The paths are checked against literal expectations, and the tracebacks are real ones: raised
in real task processes (``FakeLauncher``: the engine's own ``task_main``, no TensorFlow).
"""

from __future__ import annotations

import json
import os
import re
import sysconfig
import threading
from pathlib import Path

import pytest
from conftest import share_cluster

import dtfkit
from dtfkit.engine.launchers.fake import FakeLauncher
from dtfkit.engine.wire import frames
from dtfkit.errors import ClusterStartError, TaskFailed, TaskTimeout
from dtfkit.recipes.alpha_beta import kernel_side as alpha_beta

pytestmark = pytest.mark.timeout(120)

HERE = "tests/test_traceback_frames.py"  # this file as tasks show it: the checkout's path, shortened
ABSOLUTE_FILE = re.compile(r'File "(/[^"]*)"')


# ----------------------------------------------------------------- short_path
@pytest.mark.parametrize(
    ("path", "shown"),
    [
        # Another machine's layout: a virtual environment, conda, Debian's Python, pyenv, home folders.
        (
            "/srv/venv/lib/python3.11/site-packages/tensorflow/python/ops/math_ops.py",
            "tensorflow/python/ops/math_ops.py",
        ),
        ("/opt/conda/envs/tf/lib/python3.10/site-packages/keras/src/trainer.py", "keras/src/trainer.py"),
        ("/usr/lib/python3/dist-packages/numpy/core/numeric.py", "numpy/core/numeric.py"),
        ("/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", "threading.py"),
        ("/usr/lib/python3.12/concurrent/futures/thread.py", "concurrent/futures/thread.py"),
        ("/home/ada/course/train.py", "~/course/train.py"),
        ("/Users/ada/course/train.py", "~/course/train.py"),
        ("/root/work/train.py", "~/work/train.py"),
        # Names that are no folder of a machine stay as they are.
        ("<frozen runpy>", "<frozen runpy>"),
        ("Cell In[5]", "Cell In[5]"),
        ("<string>", "<string>"),
        ("/tmp/ipykernel_4711/123.py", "/tmp/ipykernel_4711/123.py"),
    ],
)
def test_short_path_of_any_machine(path, shown):
    assert frames.short_path(path) == shown


def test_short_path_of_this_machines_folders():
    assert frames.short_path(json.__file__) == "json/__init__.py"
    purelib = sysconfig.get_paths()["purelib"]
    assert frames.short_path(os.path.join(purelib, "tensorflow/python/eager/context.py")) == (
        "tensorflow/python/eager/context.py"
    )
    assert frames.short_path(alpha_beta.__file__) == "dtfkit/recipes/alpha_beta/kernel_side.py"
    assert (
        frames.short_path(os.path.realpath(alpha_beta.__file__)) == "dtfkit/recipes/alpha_beta/kernel_side.py"
    )
    assert frames.short_path(__file__) == HERE


def test_only_file_names_are_shortened():
    text = (
        '  File "/home/ada/x.py", line 3, in f\n    open("/home/ada/data.csv")\nOSError: /home/ada/data.csv'
    )
    assert frames.shorten_paths(text) == (
        '  File "~/x.py", line 3, in f\n    open("/home/ada/data.csv")\nOSError: /home/ada/data.csv'
    )


def test_trim_keeps_a_stack_that_is_all_engine():
    engine = str(Path(frames.__file__).with_name("task_main.py"))
    only_engine = [(engine, 1, "main"), ("<frozen runpy>", 88, "_run_code")]
    assert frames.trim(only_engine, filename=lambda f: f[0]) == only_engine
    mixed = [
        ("<frozen runpy>", 88, "_run_code"),
        (engine, 175, "_run_call"),
        ("mine.py", 3, "f"),
        (engine, 9, "g"),
    ]
    assert (
        frames.trim(mixed, filename=lambda f: f[0]) == mixed[2:]
    )  # an engine frame the learner called stays


# ------------------------------------------------------ task functions (by value)
def parses_bad_json():
    return json.loads("{")  # LEARNER-PARSES


def calls_a_recipe_badly():
    return alpha_beta.alpha_beta_time("ring", 4, -1, 1e-3, 1e-9)  # LEARNER-CALLS-RECIPE


def fails_while_handling():
    try:
        {}["missing"]  # FIRST-FAILURE
    except KeyError as exc:
        raise RuntimeError("could not read the config") from exc  # SECOND-FAILURE


def waits_for_ever():
    threading.Event().wait()  # LEARNER-WAITS


def a_thread_fails():
    worker = threading.Thread(target=parses_bad_json, name="learner-thread")
    worker.start()
    worker.join()
    return "joined"


def raises_with_a_location_in_its_message():
    raise RuntimeError(f'defined at (most recent call last):\n  File "{json.__file__}", line 1, in <module>')


def setup_that_fails():
    raise OSError("no devices")  # SETUP-FAILS


# -------------------------------------------------------------- in real tasks
@pytest.fixture(scope="module")
def fake_cluster():
    with dtfkit.LocalCluster(workers=1, launcher=FakeLauncher(), progress=False, name=None) as cluster:
        with share_cluster(cluster):
            yield cluster


@pytest.fixture
def cluster(fake_cluster):
    if any(state != "running" for state in fake_cluster.status().values()):
        fake_cluster.restart()
    return fake_cluster


def remote_traceback(cluster, fn) -> str:
    with pytest.raises(TaskFailed) as info:
        cluster.run(fn, on="worker:0", timeout=30)
    return info.value.remote_traceback


def assert_reads_like_a_local_traceback(text: str, first_frame: str) -> None:
    """The learner's function is the first frame, no engine frame shows, and no absolute file path."""
    head = "Traceback (most recent call last):\n"
    assert text.startswith(head), text
    assert text[len(head) :].startswith(f'  File "{HERE}", line '), text
    assert text[len(head) :].splitlines()[0].endswith(f", in {first_frame}"), text
    assert "task_main" not in text and "runpy" not in text, text
    assert ABSOLUTE_FILE.findall(text) == [], text


def test_a_failure_in_the_standard_library(cluster):
    text = remote_traceback(cluster, parses_bad_json)
    assert_reads_like_a_local_traceback(text, "parses_bad_json")
    assert "# LEARNER-PARSES" in text
    assert re.search(r'File "json/decoder\.py", line \d+, in raw_decode\n', text), text


def test_a_recipe_the_learner_called_keeps_its_frame(cluster):
    text = remote_traceback(cluster, calls_a_recipe_badly)
    assert_reads_like_a_local_traceback(text, "calls_a_recipe_badly")
    # The recipe is code the learner chose to call: its frames stay, with its checkout path shortened.
    assert re.search(
        r'File "dtfkit/recipes/alpha_beta/kernel_side\.py", line \d+, in alpha_beta_time\n', text
    ), text
    assert "size_bytes must be a finite number >= 0" in text


def test_each_exception_of_a_chain_is_trimmed(cluster):
    text = remote_traceback(cluster, fails_while_handling)
    first, cause_note, second = text.partition(
        "The above exception was the direct cause of the following exception:"
    )
    assert cause_note, text
    assert_reads_like_a_local_traceback(first, "fails_while_handling")
    assert_reads_like_a_local_traceback(second.lstrip("\n"), "fails_while_handling")
    assert "# FIRST-FAILURE" in first and "# SECOND-FAILURE" in second


def test_a_location_in_the_message_is_shortened_too(cluster):
    # As TensorFlow's graph errors say where the failing op was defined.
    with pytest.raises(TaskFailed) as info:
        cluster.run(raises_with_a_location_in_its_message, on="worker:0", timeout=30)
    assert info.value.remote_message.endswith('File "json/__init__.py", line 1, in <module>')
    assert ABSOLUTE_FILE.findall(str(info.value)) == [], str(info.value)


def test_a_stuck_tasks_stack_starts_at_the_learners_frame(cluster):
    with pytest.raises(TaskTimeout) as info:
        cluster.run(waits_for_ever, on="worker:0", timeout=1)
    stack = info.value.stacks["worker:0"]
    main = stack.split("Thread MainThread:\n", 1)[1]
    assert main.startswith(f'  File "{HERE}", line '), stack
    assert main.splitlines()[0].endswith(", in waits_for_ever") and "# LEARNER-WAITS" in main, stack
    assert re.search(r'File "threading\.py", line \d+, in wait\n', main), stack
    assert "task_main" not in stack and "runpy" not in stack, stack
    assert ABSOLUTE_FILE.findall(stack) == [], stack


def test_an_exception_nobody_caught_in_a_thread_prints_as_python_would_without_paths(cluster):
    assert cluster.run(a_thread_fails, on="worker:0", timeout=30) == {"worker:0": "joined"}
    log = str(cluster.logs("worker:0", everything=True))
    text = log[log.index("Exception in thread learner-thread:") :]
    assert re.search(r'File "threading\.py", line \d+, in run\n', text), (
        text
    )  # a thread starts in threading.py
    assert f'File "{HERE}", line ' in text and "# LEARNER-PARSES" in text, text
    assert "json.decoder.JSONDecodeError" in text, text
    assert ABSOLUTE_FILE.findall(text) == [], text


def test_a_failing_setup_starts_at_the_setup_function():
    with pytest.raises(ClusterStartError) as info:
        dtfkit.LocalCluster(
            workers=1, launcher=FakeLauncher(), setup=setup_that_fails, progress=False, name=None
        )
    text = str(info.value)
    assert f'File "{HERE}", line ' in text and "# SETUP-FAILS" in text, text
    assert "task_main" not in text and ABSOLUTE_FILE.findall(text) == [], text


# ------------------------------------------------------------------ warnings
def test_dtfkits_warnings_name_the_learners_place_as_a_traceback_does():
    from dtfkit.engine.launchers import local

    with pytest.warns(UserWarning, match="exposed") as record:
        local._warn("exposed")  # WARNED-HERE: the first frame outside dtfkit
    assert record[0].filename == HERE  # not this machine's absolute path
    assert "# WARNED-HERE" in Path(__file__).read_text().splitlines()[record[0].lineno - 1]
