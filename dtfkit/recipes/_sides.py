"""A recipe's two sides behind one name: ``recipes.sync.run_sync`` without importing both sides.

Every recipe is a package with up to two modules, named for the process that runs them:
``task_side`` (inside the tasks; TensorFlow only inside functions) and ``kernel_side`` (in the
notebook kernel: drivers that call ``cluster.run``, result objects, plots; never TensorFlow).
The package itself imports neither: a task that unpickles ``recipes.sync.task_side.train_sync``
imports the task side alone, and ``from dtfkit.recipes import sync; sync.run_sync`` imports the
sides when a name is first looked up (PEP 562), the task side first.

Example (a recipe's ``__init__.py``)::

    __getattr__, __dir__ = lazy_sides(__name__)
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

SIDES = ("task_side", "kernel_side")


def lazy_sides(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a recipe package whose names live in its sides."""
    sides = [side for side in SIDES if importlib.util.find_spec(f"{package}.{side}") is not None]

    def __getattr__(name: str) -> Any:
        if name in sides:
            return importlib.import_module(f"{package}.{name}")
        if not name.startswith("__"):
            for side in sides:  # the task side first: the kernel side imports it anyway
                module = importlib.import_module(f"{package}.{side}")
                if hasattr(module, name):
                    return getattr(module, name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        names = set(sides)
        for side in sides:
            names.update(
                n for n in vars(importlib.import_module(f"{package}.{side}")) if not n.startswith("__")
            )
        return sorted(names)

    return __getattr__, __dir__
