"""The chapters' recipes, one package each: ``task_side`` runs in the tasks, ``kernel_side`` in the
notebook kernel; each package's ``__init__.pyi`` names what both sides hold, and lazy_loader imports a name's side on
first use (``docs/architecture.md``, "Where a chapter's code lives")."""
