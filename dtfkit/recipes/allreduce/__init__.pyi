# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side, task_side as task_side
from .kernel_side import (
    MAX_TIMEOUT as MAX_TIMEOUT,
    MAX_TRACED_STEPS as MAX_TRACED_STEPS,
    SYNC_COPIES as SYNC_COPIES,
    busiest_link as busiest_link,
    expected_bytes as expected_bytes,
    expected_link_bytes as expected_link_bytes,
    require_workers as require_workers,
    simulate as simulate,
    trace_steps as trace_steps,
)
from .task_side import (
    ALGORITHMS as ALGORITHMS,
    MAX_FLOATS as MAX_FLOATS,
    METHODS as METHODS,
    Send as Send,
    build_allreduce as build_allreduce,
    build_ps as build_ps,
    build_ring as build_ring,
    build_sharded_ps as build_sharded_ps,
    build_tree as build_tree,
    bytes_by_task as bytes_by_task,
    check_sync_args as check_sync_args,
    gradient_variables as gradient_variables,
    master_session as master_session,
    mwms_allreduce as mwms_allreduce,
    ring_schedule as ring_schedule,
    run_schedule_check as run_schedule_check,
    sync_run as sync_run,
    sync_sweep as sync_sweep,
    time_steps as time_steps,
    time_sync as time_sync,
    trace_sync as trace_sync,
    tree_depth as tree_depth,
    tree_parent as tree_parent,
    worker_gradient as worker_gradient,
)
