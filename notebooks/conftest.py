"""What pytest collects under notebooks/: the English chapters, each run under nbval.

The Chinese edition (notebooks/zh_CN/) is built from the English chapters and their catalogs
(``python -m dtfkit translations build``): the same code cells with the same outputs, prose in
translation. ``tests/test_translations.py`` keeps it in step with the English in the fast tier.
Not collected here yet: until the library's own messages (exercise feedback, the lab's labels)
speak Chinese too, its runs would print exactly what the English chapters' runs print.
"""

collect_ignore_glob = ["zh_CN/*"]
