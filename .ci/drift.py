"""Compare the installed versions with constraints.txt, for this interpreter.

    python3 .ci/drift.py constraints.txt              # a table of what differs; exit 0
    python3 .ci/drift.py --require constraints.txt    # exit 1 when a pinned package differs (.ci/run)

`.ci/newest` uses the table to say what the newest versions are; `.ci/run` uses --require to make sure the run
tests what the file promises (a package installed outside pip's view, or a second constraint, would break that).
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import metadata
from pathlib import Path


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(path: Path, python: str) -> dict[str, str]:
    """{name: version} that the file pins for Python `python` (X.Y); its only markers are python_version ==."""
    pins = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        spec, _, marker = line.partition(";")
        name, _, version = spec.strip().partition("==")
        wanted = re.fullmatch(r'\s*python_version\s*==\s*"([\d.]+)"\s*', marker) if marker else None
        if marker and not wanted:
            raise SystemExit(f"{path}: cannot read the marker in {raw!r}")
        if wanted is None or wanted.group(1) == python:
            pins[normalise(name)] = version.strip()
    return pins


def installed() -> dict[str, str]:
    return {normalise(d.metadata["Name"]): d.version for d in metadata.distributions()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("constraints", type=Path)
    parser.add_argument(
        "--require", action="store_true", help="fail when an installed pinned package differs"
    )
    args = parser.parse_args(argv)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    pins, have = pinned(args.constraints, python), installed()
    differ = sorted((n, v, have[n]) for n, v in pins.items() if n in have and have[n] != v)
    if not differ:
        print(f"drift: every installed package is at its version in {args.constraints} (Python {python})")
        return 0
    width = max(len(n) for n, _, _ in differ)
    print(f"drift: {len(differ)} installed package(s) differ from {args.constraints} (Python {python}):")
    print(f"  {'package':<{width}}  {'tested':<12}  installed")
    for name, tested, now in differ:
        print(f"  {name:<{width}}  {tested:<12}  {now}")
    return 1 if args.require else 0


if __name__ == "__main__":
    sys.exit(main())
