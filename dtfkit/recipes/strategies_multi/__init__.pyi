# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import task_side as task_side
from .task_side import (
    coordinator_resolver as coordinator_resolver,
    digits_dataset_fn as digits_dataset_fn,
    read_tf_config as read_tf_config,
    replica_step_fn as replica_step_fn,
    sidecar_evaluate as sidecar_evaluate,
    startup_check as startup_check,
    train_multi_worker_mirrored as train_multi_worker_mirrored,
    train_parameter_server as train_parameter_server,
)
