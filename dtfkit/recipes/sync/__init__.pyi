# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from . import task_side as task_side
from .kernel_side import (
    FATE_COLORS as FATE_COLORS,
)
from .kernel_side import (
    FATE_LABELS as FATE_LABELS,
)
from .kernel_side import (
    SyncRun as SyncRun,
)
from .kernel_side import (
    plot_shares as plot_shares,
)
from .kernel_side import (
    run_sync as run_sync,
)
from .kernel_side import (
    stack_excerpt as stack_excerpt,
)
from .task_side import (
    ledger_capacity as ledger_capacity,
)
from .task_side import (
    read_sync_state as read_sync_state,
)
from .task_side import (
    train_sync as train_sync,
)
