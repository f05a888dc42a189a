# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from . import task_side as task_side
from .kernel_side import (
    link_usage as link_usage,
)
from .kernel_side import (
    plot_timeline as plot_timeline,
)
from .kernel_side import (
    step_layout as step_layout,
)
from .kernel_side import (
    tasks_of as tasks_of,
)
from .task_side import (
    MAX_RECORDS as MAX_RECORDS,
)
from .task_side import (
    RECORD_FORM as RECORD_FORM,
)
from .task_side import (
    check_records as check_records,
)
from .task_side import (
    link_bytes as link_bytes,
)
from .task_side import (
    step_records as step_records,
)
