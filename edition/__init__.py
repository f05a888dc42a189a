"""The course's other editions, made from the English chapters: the translated ones (``translate.py``,
``python -m dtfkit translations extract|build|check``) and the students' (``student.py``, student copies and
nbgrader source notebooks: ``python -m dtfkit student-copies``).

It reads and writes the checkout (``notebooks/``, ``README.md``, ``docs/``, the catalogs under ``locale/``
folders), so it lives beside the package students install, not in it: a student's ``pip install dtfkit``
reads the catalogs (``dtfkit.i18n``) and never builds them. Runs in the developer's or instructor's process.
"""
