# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import task_side as task_side
from .task_side import (
    partition_variable as partition_variable,
)
