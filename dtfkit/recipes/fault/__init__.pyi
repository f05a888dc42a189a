# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import task_side as task_side
from .task_side import (
    CheckpointReporter as CheckpointReporter,
    FastWorkerSessionCreator as FastWorkerSessionCreator,
    ReportHook as ReportHook,
    checkpoint_writers as checkpoint_writers,
    error_gist as error_gist,
    forget_model as forget_model,
    read_scalars as read_scalars,
    recovery_gist_line as recovery_gist_line,
    tidy_tf_log as tidy_tf_log,
    train_with_checkpoints as train_with_checkpoints,
)
