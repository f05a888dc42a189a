"""The chapters' recipes, one package each: ``task_side`` runs in the tasks, ``kernel_side`` in the
notebook kernel (``_sides.py``; ``docs/architecture.md``, "Where a chapter's code lives")."""
