# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side, task_side as task_side
from .kernel_side import (
    FATE_COLORS as FATE_COLORS,
    FATE_LABELS as FATE_LABELS,
    SyncRun as SyncRun,
    plot_shares as plot_shares,
    run_sync as run_sync,
    stack_excerpt as stack_excerpt,
)
from .task_side import (
    ledger_capacity as ledger_capacity,
    read_sync_state as read_sync_state,
    train_sync as train_sync,
)
