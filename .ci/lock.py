"""Write constraints.txt: the exact versions CI tests, for every Python version dtfkit supports.

The README's install command, `.ci/run` and `environment.yml` all install with `-c constraints.txt`, so a
classroom gets what CI tested. Re-run this after `.ci/newest` shows that the newest versions pass, then run
`bash .ci/run` and commit the new file with the test result.

    python3 .ci/lock.py                                   # python3.10, 3.11 and 3.12 from PATH or pyenv
    python3 .ci/lock.py --python ~/.pyenv/versions/3.12.1/bin/python

Each interpreter resolves `.[test]` (a superset of `.[notebooks]`) in a throw-away virtual environment with
`pip install --dry-run --report`; nothing is installed. A package whose version differs between Pythons gets one
line per Python with a `python_version` marker.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUPPORTED = ("3.10", "3.11", "3.12")  # keep in step with requires-python in pyproject.toml
EXTRAS = ".[test]"
# Pinned beside tensorflow-cpu: the same release where the CPU-only wheel does not exist (macOS, aarch64).
ALSO_PIN = {"tensorflow-cpu": "tensorflow"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def find_python(version: str) -> str | None:
    """The interpreter for `version` on PATH, else the newest pyenv one (pyenv's shims may not run)."""
    pyenv = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")))
    for candidate in [shutil.which(f"python{version}"), *reversed(pyenv)]:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    return None


def resolve(python: str, workdir: Path) -> tuple[str, dict[str, str]]:
    """(X.Y, {name: version}) that pip would install for EXTRAS with this interpreter today."""
    venv = workdir / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    vpy = str(venv / "bin" / "python")
    subprocess.run([vpy, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    report = workdir / "report.json"
    subprocess.run(
        [vpy, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--report", str(report)]
        + ["-e", EXTRAS],
        check=True,
        cwd=ROOT,
    )
    version = subprocess.run(
        [vpy, "-c", "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    installs = json.loads(report.read_text())["install"]
    pins = {normalise(i["metadata"]["name"]): i["metadata"]["version"] for i in installs}
    pins.pop("dtfkit", None)
    return version, pins


def merge(by_python: dict[str, dict[str, str]]) -> list[str]:
    """One `name==version` line per package, or one line per Python where they differ."""
    lines = []
    for name in sorted(set().union(*by_python.values())):
        versions = {py: pins[name] for py, pins in by_python.items() if name in pins}
        if len(versions) == len(by_python) and len(set(versions.values())) == 1:
            lines.append(f"{name}=={next(iter(versions.values()))}")
        else:
            lines += [f'{name}=={v} ; python_version == "{py}"' for py, v in sorted(versions.items())]
        if name in ALSO_PIN:
            lines += [line.replace(name, ALSO_PIN[name], 1) for line in lines if line.startswith(name + "==")]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", help="an interpreter to resolve with (repeatable)")
    parser.add_argument("-o", "--output", default=str(ROOT / "constraints.txt"))
    args = parser.parse_args(argv)
    pythons = args.python or [p for p in map(find_python, SUPPORTED) if p]
    if not pythons:
        parser.error(f"no interpreter found for Python {', '.join(SUPPORTED)}; name one with --python")
    by_python = {}
    for python in pythons:
        with tempfile.TemporaryDirectory(prefix="dtfkit-lock-") as tmp:
            version, pins = resolve(python, Path(tmp))
        print(f"Python {version}: {len(pins)} packages ({python})", file=sys.stderr)
        by_python[version] = pins
    missing = [v for v in SUPPORTED if v not in by_python]
    today = datetime.date.today().isoformat()
    header = [
        '# The versions CI tests (`bash .ci/run`). Install with: python3 -m pip install -c constraints.txt -e ".[notebooks]"',
        f"# Written by `python3 .ci/lock.py` on {today}, resolving {EXTRAS} for Python {', '.join(sorted(by_python))}"
        + (f" (not {', '.join(missing)}: no interpreter)" if missing else "")
        + ".",
        "# `bash .ci/newest` runs the fast tests against the newest versions instead, to find drift before users do.",
    ]
    Path(args.output).write_text("\n".join(header + merge(by_python)) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
