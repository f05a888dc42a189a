# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from . import task_side as task_side
from .kernel_side import (
    MAX_TIMEOUT as MAX_TIMEOUT,
)
from .kernel_side import (
    MAX_TRACED_STEPS as MAX_TRACED_STEPS,
)
from .kernel_side import (
    SYNC_COPIES as SYNC_COPIES,
)
from .kernel_side import (
    busiest_link as busiest_link,
)
from .kernel_side import (
    expected_bytes as expected_bytes,
)
from .kernel_side import (
    expected_link_bytes as expected_link_bytes,
)
from .kernel_side import (
    require_workers as require_workers,
)
from .kernel_side import (
    simulate as simulate,
)
from .kernel_side import (
    trace_steps as trace_steps,
)
from .task_side import (
    ALGORITHMS as ALGORITHMS,
)
from .task_side import (
    MAX_FLOATS as MAX_FLOATS,
)
from .task_side import (
    METHODS as METHODS,
)
from .task_side import (
    Send as Send,
)
from .task_side import (
    build_allreduce as build_allreduce,
)
from .task_side import (
    build_ps as build_ps,
)
from .task_side import (
    build_ring as build_ring,
)
from .task_side import (
    build_sharded_ps as build_sharded_ps,
)
from .task_side import (
    build_tree as build_tree,
)
from .task_side import (
    bytes_by_task as bytes_by_task,
)
from .task_side import (
    check_sync_args as check_sync_args,
)
from .task_side import (
    gradient_variables as gradient_variables,
)
from .task_side import (
    master_session as master_session,
)
from .task_side import (
    mwms_allreduce as mwms_allreduce,
)
from .task_side import (
    ring_schedule as ring_schedule,
)
from .task_side import (
    run_schedule_check as run_schedule_check,
)
from .task_side import (
    sync_run as sync_run,
)
from .task_side import (
    sync_sweep as sync_sweep,
)
from .task_side import (
    time_steps as time_steps,
)
from .task_side import (
    time_sync as time_sync,
)
from .task_side import (
    trace_sync as trace_sync,
)
from .task_side import (
    tree_depth as tree_depth,
)
from .task_side import (
    tree_parent as tree_parent,
)
from .task_side import (
    worker_gradient as worker_gradient,
)
