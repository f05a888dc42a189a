# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import task_side as task_side
from .task_side import (
    CheckpointReporter as CheckpointReporter,
)
from .task_side import (
    FastWorkerSessionCreator as FastWorkerSessionCreator,
)
from .task_side import (
    ReportHook as ReportHook,
)
from .task_side import (
    checkpoint_writers as checkpoint_writers,
)
from .task_side import (
    error_gist as error_gist,
)
from .task_side import (
    forget_model as forget_model,
)
from .task_side import (
    read_scalars as read_scalars,
)
from .task_side import (
    recovery_gist_line as recovery_gist_line,
)
from .task_side import (
    tidy_tf_log as tidy_tf_log,
)
from .task_side import (
    train_with_checkpoints as train_with_checkpoints,
)
