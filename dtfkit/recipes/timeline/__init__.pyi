# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side, task_side as task_side
from .kernel_side import (
    link_usage as link_usage,
    plot_timeline as plot_timeline,
    step_layout as step_layout,
    tasks_of as tasks_of,
)
from .task_side import (
    MAX_RECORDS as MAX_RECORDS,
    RECORD_FORM as RECORD_FORM,
    check_records as check_records,
    link_bytes as link_bytes,
    step_records as step_records,
)
