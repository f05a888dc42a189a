"""nbval runs each chapter's stateful sections twice in a row (tests/section_reruns.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from section_reruns import insert_reruns  # noqa: E402


def pytest_collection_modifyitems(session, config, items):
    insert_reruns(items)
