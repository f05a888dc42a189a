"""dtfkit.engine.platform.notebook: the one place that decides kernel, task and cell."""

from __future__ import annotations

import sys
import types

from dtfkit.engine.platform import notebook
from dtfkit.engine.wire import protocol


def fake_ipython(monkeypatch, shell) -> None:
    """Put an ``IPython`` module whose ``get_ipython()`` returns ``shell`` in sys.modules."""
    module = types.ModuleType("IPython")
    module.get_ipython = lambda: shell
    monkeypatch.setitem(sys.modules, "IPython", module)


class Kernel:
    def __init__(self, cell_id):
        self.cell_id = cell_id

    def get_parent(self, channel):
        return {"metadata": {"cellId": self.cell_id}} if self.cell_id else {}


class Compiler:
    def format_code_name(self, name):
        return ("Cell", "In[5]") if name.startswith("/tmp/ipykernel_") else None


def test_outside_ipython_there_is_no_kernel_cell_or_shell(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert notebook.shell() is None
    assert notebook.in_kernel() is False
    assert notebook.cell_key() is None
    assert notebook.cell_name("/tmp/ipykernel_1/2.py") is None
    assert "IPython" not in sys.modules  # asking never imports it


def test_a_terminal_ipython_is_no_kernel(monkeypatch):
    fake_ipython(monkeypatch, types.SimpleNamespace(kernel=None, compile=Compiler()))
    assert notebook.in_kernel() is False
    assert notebook.cell_key() is None
    assert notebook.cell_name("/tmp/ipykernel_1/2.py") == "Cell In[5]"  # IPython names cells anyway


def test_in_a_kernel_the_cell_is_known(monkeypatch):
    fake_ipython(monkeypatch, types.SimpleNamespace(kernel=Kernel("abc-1"), compile=Compiler()))
    assert notebook.in_kernel() is True
    assert notebook.cell_key() == "cell:abc-1"
    assert notebook.cell_name("/tmp/ipykernel_1/2.py") == "Cell In[5]"
    assert notebook.cell_name("/home/me/train.py") is None


def test_a_front_end_without_cell_ids_gives_no_key(monkeypatch):
    fake_ipython(monkeypatch, types.SimpleNamespace(kernel=Kernel(None)))
    assert notebook.cell_key() is None


def test_a_task_is_known_by_its_config_variable(monkeypatch):
    assert notebook.TASK_ENV == protocol.CONFIG_ENV
    monkeypatch.delenv(notebook.TASK_ENV, raising=False)
    assert notebook.in_task() is False
    monkeypatch.setenv(notebook.TASK_ENV, "{}")
    assert notebook.in_task() is True
