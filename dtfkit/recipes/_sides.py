"""A recipe's two sides behind one name: ``recipes.sync.run_sync`` without importing both sides.

Every recipe is a package with up to two modules, named for the process that runs them:
``task_side`` (inside the tasks; TensorFlow only inside functions) and ``kernel_side`` (in the
notebook kernel: drivers that call ``cluster.run``, result objects, plots; never TensorFlow).
The package itself imports neither: a task that unpickles ``recipes.sync.task_side.train_sync``
imports the task side alone, and ``from dtfkit.recipes import sync; sync.run_sync`` imports the
kernel side when the name is first used (PEP 562).

Example::

    __getattr__, __dir__ = lazy_sides(__name__, task_side=("train_sync",), kernel_side=("run_sync",))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_sides(
    package: str, *, task_side: tuple[str, ...] = (), kernel_side: tuple[str, ...] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a recipe package whose names live in its two sides."""
    side_of = {name: "task_side" for name in task_side} | {name: "kernel_side" for name in kernel_side}

    sides = [side for side, names in (("kernel_side", kernel_side), ("task_side", task_side)) if names]

    def __getattr__(name: str) -> Any:
        side = side_of.get(name)
        if side is not None:
            return getattr(importlib.import_module(f"{package}.{side}"), name)
        if name in sides:
            return importlib.import_module(f"{package}.{name}")
        if not name.startswith("__"):  # a name a side imported (alpha_beta.METHODS from allreduce)
            for side in sides:
                module = importlib.import_module(f"{package}.{side}")
                if hasattr(module, name):
                    return getattr(module, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(side_of)

    return __getattr__, __dir__
