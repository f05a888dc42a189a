"""constraints.txt, the tested versions: it pins every dependency pyproject.toml names, for each supported Python,
at a version pyproject.toml allows; and the tools that write and read it (.ci/lock.py, .ci/drift.py) agree."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

try:
    import tomllib
except ImportError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
SUPPORTED = ("3.10", "3.11", "3.12")


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / ".ci" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


drift, lock = load("drift"), load("lock")


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = list(project["dependencies"])
    for extra in ("notebooks", "test", "ray"):
        names += project["optional-dependencies"][extra]
    return [r for r in map(Requirement, names) if r.name != "dtfkit"]


@pytest.mark.parametrize("python", SUPPORTED)
def test_every_dependency_is_pinned_at_a_version_pyproject_allows(python):
    pins = drift.pinned(ROOT / "constraints.txt", python)
    env = {"python_version": python, "platform_machine": "x86_64", "sys_platform": "linux"}
    for req in requirements():
        if req.marker and not req.marker.evaluate(env):
            continue
        name = drift.normalise(req.name)
        assert name in pins, (
            f"constraints.txt pins no version of {req.name} for Python {python}: run .ci/lock.py"
        )
        assert Version(pins[name]) in req.specifier, (
            f"constraints.txt pins {name}=={pins[name]} for Python {python}, outside pyproject's {req}: "
            "run .ci/lock.py"
        )


def test_the_supported_pythons_are_the_ones_pyproject_allows():
    allowed = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert lock.SUPPORTED == SUPPORTED
    assert all(f"{v}.0" in SpecifierSet(allowed) for v in SUPPORTED)
    assert "3.13.0" not in SpecifierSet(allowed) and "3.9.0" not in SpecifierSet(allowed)


def test_merge_pins_once_when_equal_and_per_python_when_not():
    lines = lock.merge(
        {
            "3.10": {"numpy": "2.2.6", "six": "1.17.0", "tensorflow-cpu": "2.21.0", "tomli": "2.5.0"},
            "3.11": {"numpy": "2.4.6", "six": "1.17.0", "tensorflow-cpu": "2.21.0"},
        }
    )
    assert lines == [
        'numpy==2.2.6 ; python_version == "3.10"',
        'numpy==2.4.6 ; python_version == "3.11"',
        "six==1.17.0",
        "tensorflow-cpu==2.21.0",
        "tensorflow==2.21.0",
        'tomli==2.5.0 ; python_version == "3.10"',
    ]


def test_drift_reads_what_lock_writes(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text(
        "# header\n" + "\n".join(lock.merge({"3.10": {"a-b": "1"}, "3.12": {"a-b": "2", "c": "3"}}))
    )
    assert drift.pinned(path, "3.10") == {"a-b": "1"}
    assert drift.pinned(path, "3.12") == {"a-b": "2", "c": "3"}
    path.write_text('x==1 ; sys_platform == "linux"\n')
    with pytest.raises(SystemExit, match="cannot read the marker"):
        drift.pinned(path, "3.11")


def test_drift_require_fails_on_a_differing_package(tmp_path, capsys):
    path = tmp_path / "c.txt"
    name, version = "pytest", drift.installed()["pytest"]
    path.write_text(f"{name}=={version}\n")
    assert drift.main([str(path), "--require"]) == 0
    path.write_text(f"{name}=={version}.post999\n")
    assert drift.main([str(path), "--require"]) == 1
    assert re.search(
        rf"{name}\s+{re.escape(version)}\.post999\s+{re.escape(version)}", capsys.readouterr().out
    )
