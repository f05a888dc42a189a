# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side, task_side as task_side
from .kernel_side import (
    ATTEMPTS as ATTEMPTS,
    TRAINER_TITLES as TRAINER_TITLES,
    Cell as Cell,
    CompatTable as CompatTable,
    cluster_layout as cluster_layout,
    compatibility_table as compatibility_table,
    first_error_line as first_error_line,
    installed_versions as installed_versions,
    run_cell as run_cell,
)
from .task_side import (
    FEATURES as FEATURES,
    LOCAL_REPLICAS as LOCAL_REPLICAS,
    STRATEGIES as STRATEGIES,
    TRAINERS as TRAINERS,
    NotInstalled as NotInstalled,
    train as train,
)
