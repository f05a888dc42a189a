# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from . import task_side as task_side
from .kernel_side import (
    hang_with_collective_timeout as hang_with_collective_timeout,
)
from .kernel_side import (
    recovery_summary as recovery_summary,
)
from .task_side import (
    DIED_EXIT_CODE as DIED_EXIT_CODE,
)
from .task_side import (
    FAILURES as FAILURES,
)
from .task_side import (
    error_gist as error_gist,
)
from .task_side import (
    fit_with_backup_and_restore as fit_with_backup_and_restore,
)
from .task_side import (
    train_until_a_peer_fails as train_until_a_peer_fails,
)
from .task_side import (
    train_with_checkpoints as train_with_checkpoints,
)
from .task_side import (
    train_with_preemption_handler as train_with_preemption_handler,
)
from .task_side import (
    try_fit_under_mwms as try_fit_under_mwms,
)
from .task_side import (
    weights_digest as weights_digest,
)
