"""dtfkit/ and hubbench/ type-check clean under mypy with the repository's settings ([tool.mypy] in
pyproject.toml), and those settings really hold the engine to --strict (issue 42). Fast tier: mypy starts no
TensorFlow; it reads the source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "pyproject.toml"

pytest.importorskip("mypy", reason="mypy comes with the [test] extra")


def mypy(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(CONFIG), "--no-color-output", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_library_type_checks_clean(tmp_path):
    result = mypy("--cache-dir", str(tmp_path / "cache"), cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout, result.stdout


def test_the_settings_hold_the_engine_to_strict_and_the_rest_to_checked_bodies(tmp_path):
    """An unannotated function is an error in an engine module and allowed elsewhere; a wrong type inside an
    unannotated body is found everywhere (check_untyped_defs)."""
    engine = tmp_path / "dtfkit" / "engine"
    engine.mkdir(parents=True)
    for folder in (tmp_path / "dtfkit", engine):
        (folder / "__init__.py").write_text("")
    (engine / "planted.py").write_text("def untyped(x):\n    return x\n")
    (tmp_path / "dtfkit" / "front.py").write_text("def untyped(x):\n    n: int = 'two'\n    return x\n")
    result = mypy("--cache-dir", str(tmp_path / "cache"), "dtfkit", cwd=tmp_path)
    found = result.stdout
    assert result.returncode == 1, found
    assert "dtfkit/engine/planted.py:1: error: Function is missing a type annotation" in found, found
    assert "dtfkit/front.py:1:" not in found, found
    assert "dtfkit/front.py:2: error: Incompatible types in assignment" in found, found


def test_every_stub_the_package_reads_at_run_time_ships_in_its_wheel():
    """lazy_loader.attach_stub reads each __init__.pyi when the package is imported, in a task too: a stub
    that package-data does not name would be missing from a student's pip install (an editable install, as
    in CI, would not show it)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser, before it joined the standard library
        import tomli as tomllib

    package = REPO / "dtfkit"
    globs = tomllib.loads(CONFIG.read_text())["tool"]["setuptools"]["package-data"]["dtfkit"]
    shipped = {path for pattern in globs for path in package.glob(pattern)}
    stubs = set(package.rglob("__init__.pyi"))
    assert stubs and stubs <= shipped, sorted(str(s.relative_to(package)) for s in stubs - shipped)
