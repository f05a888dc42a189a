# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side, task_side as task_side
from .kernel_side import (
    hang_with_collective_timeout as hang_with_collective_timeout,
    recovery_summary as recovery_summary,
)
from .task_side import (
    DIED_EXIT_CODE as DIED_EXIT_CODE,
    FAILURES as FAILURES,
    error_gist as error_gist,
    fit_with_backup_and_restore as fit_with_backup_and_restore,
    train_until_a_peer_fails as train_until_a_peer_fails,
    train_with_checkpoints as train_with_checkpoints,
    train_with_preemption_handler as train_with_preemption_handler,
    try_fit_under_mwms as try_fit_under_mwms,
    weights_digest as weights_digest,
)
