"""A remote traceback shows the learner's own code: the file (or ``Cell In[N]``), the line
number and the line's text, wherever the function came from and whatever cloudpickle does
with code file names (``dtfkit.engine.wire.sources``).

The unit tests need no task process; the cluster tests run plain Python tasks
(``FakeLauncher``, a fraction of a second); one runs a notebook in a real kernel on a real
TensorFlow task, as a learner would."""

from __future__ import annotations

import importlib.util
import linecache
import re
import sys
import textwrap
import types

import cloudpickle
import pytest
from conftest import share_cluster, subprocess_env

import dtfkit
from dtfkit.engine.launchers.fake import FakeLauncher
from dtfkit.engine.wire import frames, sources
from dtfkit.errors import ClusterStartError, TaskFailed, TaskTimeout

pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------- task functions
def calls_a_nested_function():
    def inner(x):
        return 10 // x  # NESTED-HERE

    return inner(0)


# -------------------------------------------------------------------- helpers
@pytest.fixture
def fake_file():
    """Code compiled under a made-up file name whose lines only this process's linecache
    holds, as IPython does for a cell; the task registrations are undone afterwards."""
    made: list[str] = []

    def make(name: str, source: str) -> dict:
        source = textwrap.dedent(source)
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        made.append(name)
        namespace = {"__name__": "__main__"}  # pickled by value, as a notebook's functions are
        exec(compile(source, name, "exec"), namespace)
        return namespace

    yield make
    for name in made:
        linecache.cache.pop(name, None)
        sources._DISPLAY.pop(name, None)


def import_file(path, name: str) -> types.ModuleType:
    """Import ``path`` as module ``name``, pickled by value (no task could import it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    return module


@pytest.fixture
def learner_module(tmp_path):
    path = tmp_path / "learner_code.py"
    path.write_text(
        textwrap.dedent(
            """\
            def check(n):
                if n < 0:
                    raise ValueError(f"negative: {n}")  # FILE-RAISES-HERE
                return n
            """
        )
    )
    module = import_file(path, "learner_code")
    yield path, module
    cloudpickle.unregister_pickle_by_value(module)
    del sys.modules["learner_code"]
    linecache.cache.pop(str(path), None)


# ------------------------------------------------------------------ unit tests
def test_pickled_code_keeps_its_file_name_and_its_source_comes_along(fake_file):
    namespace = fake_file(
        "<cell-a>",
        """\
        def outer():
            def inner():
                return 1
            return inner
        """,
    )
    call = sources.pickle_call(namespace["outer"], (1,), {"k": 2})
    fn, args, kwargs = cloudpickle.loads(call.data)
    assert (args, kwargs) == ((1,), {"k": 2})
    assert fn.__code__.co_filename == "<cell-a>"
    assert fn().__code__.co_filename == "<cell-a>"  # nested code too
    assert call.sources == {"<cell-a>": ("<cell-a>", linecache.cache["<cell-a>"][2])}


def test_code_that_marshal_cannot_write_travels_as_cloudpickle_sends_it(fake_file):
    namespace = fake_file("<cell-c>", "def three():\n    return 3\n")
    three = namespace["three"]
    three.__code__ = three.__code__.replace(co_consts=(*three.__code__.co_consts, range(2)))
    fn, _, _ = cloudpickle.loads(sources.pickle_call(three, (), {}).data)
    assert fn() == 3


def test_collect_skips_what_the_task_imports_itself_unknown_names_and_big_files(tmp_path, monkeypatch):
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * 100)
    small = tmp_path / "small.py"
    small.write_text("y = 2\n")
    monkeypatch.setattr(sources, "MAX_FILE_BYTES", 300)
    found = sources.collect({sources.__file__, textwrap.__file__, "<string>", str(big), str(small)})
    assert found == {str(small): (str(small), ["y = 2\n"])}


def test_a_deleted_file_keeps_the_lines_this_process_read(tmp_path):
    path = tmp_path / "gone.py"
    path.write_text("z = 3\n")
    assert sources.collect({str(path)}) == {str(path): (str(path), ["z = 3\n"])}
    path.unlink()
    assert sources.collect({str(path)}) == {str(path): (str(path), ["z = 3\n"])}
    linecache.cache.pop(str(path), None)


def test_a_kernel_cell_is_named_as_ipython_names_it(monkeypatch):
    from IPython.core.compilerop import CachingCompiler

    compiler = CachingCompiler()
    cell = compiler.cache("def mine():\n    raise ValueError\n", number=5)
    shell = types.SimpleNamespace(compile=compiler)
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    assert sources.display_name(cell) == "Cell In[5]"
    assert sources.display_name("/home/me/train.py") == "/home/me/train.py"
    assert sources.collect({cell})[cell][0] == "Cell In[5]"
    linecache.cache.pop(cell, None)


def test_registered_lines_and_names_show_in_tracebacks_and_stacks(fake_file):
    namespace = fake_file("<cell-b>", "def mine():\n    raise KeyError('k')  # CELL-B\n")
    call = sources.pickle_call(namespace["mine"], (), {})
    del linecache.cache["<cell-b>"]  # as in a task, which never saw the cell
    sources.register({"<cell-b>": ("Cell In[9]", call.sources["<cell-b>"][1])})
    fn, _, _ = cloudpickle.loads(call.data)
    try:
        fn()
    except KeyError:
        text = sources.format_exc()
    assert "  Cell In[9], line 2, in mine\n    raise KeyError('k')  # CELL-B\n" in text
    assert '  File "' in text  # the frames of real files keep their form
    stack = sources.format_stack(sys._getframe())
    assert "in test_registered_lines_and_names_show_in_tracebacks_and_stacks" in stack


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


def failure_text(cluster, fn, *args) -> str:
    with pytest.raises(TaskFailed) as info:
        cluster.run(fn, args=args, on="worker:0", timeout=30)
    return str(info.value)


def test_a_function_from_a_file(cluster, learner_module):
    path, module = learner_module
    text = failure_text(cluster, module.check, -1)
    assert f'File "{frames.short_path(str(path))}", line 3, in check\n' in text  # as tasks show files
    assert 'raise ValueError(f"negative: {n}")  # FILE-RAISES-HERE' in text


def test_a_function_from_a_file_deleted_since(cluster, learner_module):
    path, module = learner_module
    assert cluster.run(module.check, args=(1,), on="worker:0") == {"worker:0": 1}  # read here once
    path.unlink()  # now no task can read it
    text = failure_text(cluster, module.check, -2)
    assert f'File "{frames.short_path(str(path))}", line 3, in check\n' in text  # as tasks show files
    assert "# FILE-RAISES-HERE" in text


def test_a_lambda(cluster):
    text = failure_text(cluster, lambda: {}["missing"])  # LAMBDA-HERE
    assert 'File "tests/test_remote_source.py"' in text  # the checkout's path, shortened
    assert 'failure_text(cluster, lambda: {}["missing"])  # LAMBDA-HERE' in text


def test_a_nested_function(cluster):
    text = failure_text(cluster, calls_a_nested_function)
    assert "in calls_a_nested_function\n" in text
    assert re.search(r"line \d+, in inner\n +return 10 // x  # NESTED-HERE", text)


def test_a_method_of_a_class_from_a_cell(cluster, fake_file):
    namespace = fake_file(
        "<learner-cell-3>",
        """\
        class Model:
            def step(self):
                raise RuntimeError("diverged")  # METHOD-HERE
        """,
    )
    text = failure_text(cluster, namespace["Model"]().step)
    assert (
        'File "<learner-cell-3>", line 3, in step\n    raise RuntimeError("diverged")  # METHOD-HERE' in text
    )


def test_a_timeout_shows_the_stuck_line_of_a_cell_under_its_cell_name(cluster, fake_file, monkeypatch):
    namespace = fake_file(
        "<learner-cell-4>",
        """\
        import threading

        def stuck():
            threading.Event().wait()  # STUCK-IN-CELL
        """,
    )
    monkeypatch.setattr(sources, "display_name", lambda f: "Cell In[4]" if f == "<learner-cell-4>" else f)
    with pytest.raises(TaskTimeout) as info:
        cluster.run(namespace["stuck"], on="worker:0", timeout=1)
    stack = info.value.stacks["worker:0"]
    assert "  Cell In[4], line 4, in stuck\n    threading.Event().wait()  # STUCK-IN-CELL" in stack


def test_a_failing_setup_from_a_cell(fake_file):
    namespace = fake_file(
        "<learner-cell-5>", "def configure():\n    raise OSError('no devices')  # SETUP-HERE\n"
    )
    with pytest.raises(ClusterStartError) as info:
        dtfkit.LocalCluster(
            workers=1, launcher=FakeLauncher(), setup=namespace["configure"], progress=False, name=None
        )
    assert (
        "File \"<learner-cell-5>\", line 2, in configure\n    raise OSError('no devices')  # SETUP-HERE"
        in str(info.value)
    )


# ------------------------------------------------------------- a real kernel
NOTEBOOK_CELLS = [
    "import dtfkit\ncluster = dtfkit.LocalCluster(workers=1, progress=False)",
    'def mine(x):\n    y = x + 1\n    raise ValueError(f"mine got {y}")  # RAISES-IN-CELL\n\n\ncluster.run(mine, args=(1,))',
    "def stuck():\n    import threading\n    threading.Event().wait()  # STUCK-IN-CELL\n\n\n"
    "try:\n    cluster.run(stuck, timeout=3)\nexcept dtfkit.TaskTimeout as exc:\n"
    '    print(exc.stacks["worker:0"])',
    "cluster.close()",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_in_a_kernel_a_remote_error_names_the_cell_and_shows_the_line(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in NOTEBOOK_CELLS])
    client = NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    with client.setup_kernel(env=subprocess_env(DTFKIT_HOME=str(home))):
        try:
            for index, cell in enumerate(nb.cells[:-1]):
                client.execute_cell(cell, index)
        finally:
            client.execute_cell(nb.cells[-1], len(nb.cells) - 1)  # the cluster ends with the kernel's cells

    start = nb.cells[0].outputs
    assert not [o for o in start if o.output_type == "error"], start
    errors = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert [e.ename for e in errors] == ["TaskFailed"], nb.cells[1].outputs
    remote = errors[0].evalue.partition("--- remote traceback (worker:0) ---")[2]
    count = nb.cells[1].execution_count
    assert f"  Cell In[{count}], line 3, in mine\n" in remote, remote
    assert '    raise ValueError(f"mine got {y}")  # RAISES-IN-CELL' in remote, remote
    # As a local traceback reads: the cell is the first frame (the engine's own are left out).
    assert remote.strip().splitlines()[:2] == [
        "Traceback (most recent call last):",
        f"  Cell In[{count}], line 3, in mine",
    ]

    printed = "".join(o.get("text", "") for o in nb.cells[2].outputs if o.output_type == "stream")
    count = nb.cells[2].execution_count
    assert (
        f"Thread MainThread:\n  Cell In[{count}], line 3, in stuck\n    threading.Event().wait()  # STUCK-IN-CELL"
        in printed
    ), nb.cells[2].outputs
    assert "task_main" not in printed and 'File "/' not in printed, printed
