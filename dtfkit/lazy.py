"""Names a package hands out without importing their modules first (PEP 562).

``import dtfkit`` (which every task does) and ``import dtfkit.kube`` stay cheap: the module
behind a name is imported the first time the name is looked up, then kept.

Example (a package's ``__init__.py``)::

    __getattr__ = lazy_attributes(__name__, {"RayCluster": "dtfkit.ray.cluster"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``where[name]`` and returns its ``name``."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        setattr(sys.modules[package], name, value)  # looked up once
        return value

    return __getattr__
