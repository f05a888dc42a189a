"""A class on a real JupyterHub, measured: ``python -m dtfkit classroom-bench`` (see docs/teaching.md).

Each module says which process runs it: ``spawner`` runs inside the JupyterHub process; ``limits`` in the hub
and the bench; everything else in the bench's own process, as root (``hub`` starts the hub, ``users`` makes the
students' system accounts, ``student`` drives one student over HTTP and the kernel's websocket, ``measure``
samples memory, ``grading`` runs nbgrader as the grader account, ``bench`` runs whole classes and the table).
Nothing here is imported by ``import dtfkit``.
"""
