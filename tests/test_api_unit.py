"""Fast tests (no TensorFlow process): import cost, input validation, task naming,
TF_CONFIG format and the GPU policy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import subprocess_env

import dtfkit
from dtfkit.engine.platform import gpu_plan as gpu
from dtfkit.engine.wire.layout import ClusterLayout, TaskId, cluster_dict, tf_config, tutorial_flags
from dtfkit.errors import DtfkitError

pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------------- import cost
def test_import_dtfkit_does_not_import_tensorflow():
    code = (
        "import json, sys\n"
        "import dtfkit\n"
        "after_import = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))\n"
        # The lazily loaded public names and every module the notebook side uses.
        "dtfkit.LocalCluster, dtfkit.launch, dtfkit.cleanup\n"
        "import dtfkit.cli, dtfkit.engine.owner.runtime, dtfkit.cluster, dtfkit.launch_script, dtfkit.engine.platform.state, dtfkit.engine.platform.gpu_plan\n"
        "after_api = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))\n"
        "print(json.dumps([after_import, after_api]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), timeout=60
    )
    assert out.returncode == 0, out.stderr
    after_import, after_api = json.loads(out.stdout.strip().splitlines()[-1])
    assert after_import == [], "import dtfkit imported TensorFlow"
    assert after_api == [], "dtfkit's notebook-side modules imported TensorFlow"


# Modules the notebook side or a task's bootstrap imports before it wants TensorFlow.
TF_FREE_MODULES = [
    "dtfkit.course.devices",
    "dtfkit.datasets",
    "dtfkit.recipes.tf1",
    "dtfkit.recipes.analysis",
    "dtfkit.htmltable",
    "dtfkit.recipes.placement",
    "dtfkit.recipes.between_graph",
    "dtfkit.recipes.sync",
    "dtfkit.recipes.fault",
    "dtfkit.recipes.strategies_multi",
    "dtfkit.recipes.allreduce",
    "dtfkit.recipes.alpha_beta",
    "dtfkit.recipes.partitioned",
    "dtfkit.lab",
    "dtfkit.lab.panel",
    "dtfkit.lab.plots",
    "dtfkit.lab.task_side",
]


@pytest.mark.parametrize("module", TF_FREE_MODULES)
def test_importing_the_module_does_not_import_tensorflow(module):
    code = (
        f"import json, sys, {module}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], f"{module} imported TensorFlow"


def test_this_task_outside_a_task_is_a_clear_error():
    with pytest.raises(DtfkitError, match="only works inside a dtfkit task"):
        dtfkit.this_task()


def test_report_outside_a_task_is_kept_locally():
    from dtfkit import taskapi

    before = len(taskapi.STATE.local_metrics)
    dtfkit.report(step=3, loss=0.5)
    assert taskapi.STATE.local_metrics[before:] and taskapi.STATE.local_metrics[-1]["step"] == 3
    assert taskapi.STATE.local_metrics[-1]["loss"] == 0.5
    with pytest.raises(TypeError):
        dtfkit.report(loss=[1, 2])


# ------------------------------------------------------------- names and TF_CONFIG
def test_tf_config_is_the_standard_format():
    cluster = {"ps": ["localhost:1"], "worker": ["localhost:2", "localhost:3"]}
    config = json.loads(tf_config(cluster, TaskId("worker", 1)))
    assert config == {"cluster": cluster, "task": {"type": "worker", "index": 1}}


def test_cluster_dict_orders_tasks_and_leaves_out_the_evaluator():
    addresses = {
        TaskId("worker", 1): "localhost:13",
        TaskId("worker", 0): "localhost:12",
        TaskId("ps", 0): "localhost:11",
        TaskId("chief", 0): "localhost:10",
        TaskId("evaluator", 0): "localhost:14",
    }
    spec = cluster_dict(addresses)
    assert spec == {
        "chief": ["localhost:10"],
        "ps": ["localhost:11"],
        "worker": ["localhost:12", "localhost:13"],
    }
    assert list(spec) == ["chief", "ps", "worker"]
    assert tutorial_flags(spec, TaskId("worker", 1))[-2:] == ["--job_name=worker", "--task_index=1"]


def test_layout_names_every_task():
    layout = ClusterLayout.from_counts(ps=2, workers=2, chief=1, evaluator=1)
    assert [t.name for t in layout.tasks] == [
        "chief:0",
        "ps:0",
        "ps:1",
        "worker:0",
        "worker:1",
        "evaluator:0",
    ]
    assert [t.name for t in layout.select("workers")] == ["chief:0", "worker:0", "worker:1"]
    assert [t.name for t in layout.select(["worker:1", "ps:0"])] == ["worker:1", "ps:0"]
    assert TaskId.parse("worker", 1) == TaskId.parse("worker:1") == TaskId("worker", 1)


@pytest.mark.parametrize(
    "selector, message",
    [
        ("workerz", "cannot name a task"),
        ("workerz:0", "unknown role 'workerz'"),
        ("worker:5", "no task worker:5"),
        ("worker:one", "not a whole number"),
        (["worker:0", "gpu:0"], "unknown role 'gpu'"),
        ([], "selects no task"),
        ("evaluator", "selects no task"),
    ],
)
def test_bad_task_selectors_are_clear_errors(selector, message):
    layout = ClusterLayout.from_counts(ps=1, workers=2)
    with pytest.raises(DtfkitError, match=message):
        layout.select(selector)


# -------------------------------------------------------------- bad input: clusters
BAD_COUNTS = [
    ({"workers": -1}, "cannot be negative"),
    ({"ps": -2}, "cannot be negative"),
    ({"workers": 0}, "at least one worker or a chief"),
    ({"workers": 0, "ps": 2}, "at least one worker or a chief"),
    ({"workers": 1.5}, "whole number"),
    ({"workers": "2"}, "whole number"),
    ({"workers": True}, "whole number"),
    ({"ps": None}, "whole number"),
    ({"chief": 2}, "at most one chief"),
    ({"evaluator": 2}, "at most one evaluator"),
]


@pytest.mark.parametrize("kwargs, message", BAD_COUNTS, ids=[str(k) for k, _ in BAD_COUNTS])
def test_bad_counts_fail_before_any_process_starts(no_spawn, kwargs, message):
    with pytest.raises(DtfkitError, match=message):
        dtfkit.LocalCluster(progress=False, **kwargs)
    assert no_spawn == []


BAD_OPTIONS = [
    ({"network": "bridge"}, "network must be one of"),
    ({"network": None}, "network must be one of"),
    ({"start_timeout": 0}, "start_timeout must be a positive number"),
    ({"start_timeout": -5}, "start_timeout must be a positive number"),
    ({"start_timeout": "10"}, "start_timeout must be a positive number"),
    ({"gpus": "all"}, "unknown gpus policy"),
]


@pytest.mark.parametrize("kwargs, message", BAD_OPTIONS, ids=[str(k) for k, _ in BAD_OPTIONS])
def test_bad_options_fail_before_any_process_starts(no_spawn, kwargs, message):
    home = os.environ["DTFKIT_HOME"]
    folders = set(os.listdir(home))
    with pytest.raises(DtfkitError, match=message):
        dtfkit.LocalCluster(workers=1, progress=False, **kwargs)
    assert no_spawn == []
    # Nothing may be left behind either: no cluster folder (with a bound control socket).
    assert set(os.listdir(home)) == folders


# --------------------------------------------------------------- bad input: launch
@pytest.fixture
def tiny_script(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text("print('hello')\n")
    return str(path)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"timeout": -1}, "timeout must be a positive number"),
        ({"timeout": "5"}, "timeout must be a positive number"),
        ({"workers": 0}, "at least one worker"),
        ({"ps": -1}, "cannot be negative"),
        ({"network": "lan"}, "network must be one of"),
        ({"start_timeout": 0}, "start_timeout must be a positive number"),
    ],
)
def test_bad_launch_arguments_fail_before_any_process_starts(no_spawn, tiny_script, kwargs, message):
    with pytest.raises(DtfkitError, match=message):
        dtfkit.launch(tiny_script, **kwargs)
    assert no_spawn == []


def test_launch_of_a_missing_script_is_a_clear_error(no_spawn, tmp_path):
    missing = tmp_path / "no_such_script.py"
    with pytest.raises(DtfkitError, match="script not found"):
        dtfkit.launch(str(missing))
    assert no_spawn == []


def test_cli_launch_of_a_missing_script_exits_2(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "dtfkit", "launch", str(tmp_path / "nope.py")],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=60,
        cwd=str(tmp_path),
    )
    assert out.returncode == 2
    assert "dtfkit: error: script not found" in out.stderr


# ---------------------------------------------------------------------- GPU policy
TASKS = ["ps:0", "ps:1", "worker:0", "worker:1"]


@pytest.fixture
def no_cuda_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_gpu_auto_gives_each_worker_its_own_gpu_and_ps_none(no_cuda_env):
    plan = gpu.plan_visible_devices(TASKS, n_gpus=2, policy="auto")
    assert plan == {
        "ps:0": ("", False),
        "ps:1": ("", False),
        "worker:0": ("0", False),
        "worker:1": ("1", False),
    }


def test_gpu_auto_with_more_gpus_than_workers(no_cuda_env):
    plan = gpu.plan_visible_devices(["chief:0", "worker:0", "evaluator:0"], n_gpus=4, policy="auto")
    assert plan == {"chief:0": ("0", False), "worker:0": ("1", False), "evaluator:0": ("", False)}


def test_gpu_auto_shares_with_memory_growth_when_too_few(no_cuda_env):
    plan = gpu.plan_visible_devices(TASKS + ["worker:2"], n_gpus=2, policy="auto")
    assert plan["ps:0"] == ("", False)
    for w in ("worker:0", "worker:1", "worker:2"):
        assert plan[w] == ("0,1", True)


def test_gpu_share_and_none(no_cuda_env):
    shared = gpu.plan_visible_devices(TASKS, n_gpus=2, policy="share")
    assert shared["worker:0"] == shared["worker:1"] == ("0,1", True)
    assert shared["ps:1"] == ("", False)
    none = gpu.plan_visible_devices(TASKS, n_gpus=2, policy="none")
    assert set(none.values()) == {("", False)}


def test_gpu_no_gpus_means_nothing_visible(no_cuda_env):
    plan = gpu.plan_visible_devices(TASKS, n_gpus=0, policy="auto")
    assert set(plan.values()) == {("", False)}


def test_gpu_plan_respects_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    plan = gpu.plan_visible_devices(TASKS, n_gpus=8, policy="auto")
    assert plan["worker:0"] == ("3", False) and plan["worker:1"] == ("5", False)
    assert gpu.count_gpus() == 2


def test_gpu_unknown_policy():
    with pytest.raises(DtfkitError, match="unknown gpus policy"):
        gpu.plan_visible_devices(TASKS, n_gpus=1, policy="some")


def test_a_checks_time_out_carries_the_stuck_tasks_stacks_into_require():
    """An exercise's hidden run that times out in CI must say where the task waited: ``require()``'s
    AssertionError is all nbgrader and the CI log keep."""
    from dtfkit.course.check._core import _from_exception
    from dtfkit.errors import TaskTimeout

    stack = 'Thread 0x1 (most recent call first):\n  File "queue.py", line 9, in dequeue\n  File "w.py", line 3, in step\n'
    result = _from_exception(
        TaskTimeout("train_sync did not finish in 180 s", {"worker:0": stack}), "`answer`"
    )
    assert not result.passed
    with pytest.raises(AssertionError) as raised:
        result.require()
    assert "worker:0:" in str(raised.value) and 'File "queue.py", line 9, in dequeue' in str(raised.value)
