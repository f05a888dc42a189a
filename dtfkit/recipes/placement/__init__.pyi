# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from . import task_side as task_side
from .kernel_side import (
    COLUMN_TITLES as COLUMN_TITLES,
)
from .kernel_side import (
    Table as Table,
)
from .kernel_side import (
    by_task as by_task,
)
from .kernel_side import (
    column_title as column_title,
)
from .kernel_side import (
    format_table as format_table,
)
from .kernel_side import (
    plot_timeline as plot_timeline,
)
from .task_side import (
    kernel_of as kernel_of,
)
from .task_side import (
    op_table as op_table,
)
from .task_side import (
    partition_table as partition_table,
)
from .task_side import (
    recv_tensor_log as recv_tensor_log,
)
from .task_side import (
    short_task as short_task,
)
from .task_side import (
    task_of as task_of,
)
from .task_side import (
    trace_options as trace_options,
)
from .task_side import (
    trace_run as trace_run,
)
from .task_side import (
    transfer_table as transfer_table,
)
from .task_side import (
    variable_devices as variable_devices,
)
