# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side, task_side as task_side
from .kernel_side import (
    COLUMN_TITLES as COLUMN_TITLES,
    Table as Table,
    by_task as by_task,
    column_title as column_title,
    format_table as format_table,
    plot_timeline as plot_timeline,
)
from .task_side import (
    kernel_of as kernel_of,
    op_table as op_table,
    partition_table as partition_table,
    recv_tensor_log as recv_tensor_log,
    short_task as short_task,
    task_of as task_of,
    trace_options as trace_options,
    trace_run as trace_run,
    transfer_table as transfer_table,
    variable_devices as variable_devices,
)
