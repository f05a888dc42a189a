"""What pytest collects under notebooks/: every English chapter, and one Chinese one, each run under nbval.

The Chinese edition (notebooks/zh_CN/) is built from the English chapters and their catalogs
(``python -m dtfkit translations build``): the same code cells with the same outputs, prose in
translation. ``tests/test_translations.py`` keeps every chapter of it in step with the English in
the fast tier; chapter 1 (a cluster, its exercises and their checks) also runs here, so that a
Chinese chapter is shown to run and print what it shows. The others are left out: until the
library's own messages (exercise feedback, the lab's labels) speak Chinese too, their runs would
repeat the English chapters' runs, line for line.
"""

from pathlib import Path

RUN_IN_CHINESE = {"01_clusterspec_basics.ipynb"}
collect_ignore = [
    f"zh_CN/{path.name}"
    for path in sorted((Path(__file__).parent / "zh_CN").glob("*.ipynb"))
    if path.name not in RUN_IN_CHINESE
]
