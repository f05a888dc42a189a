# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side, task_side as task_side
from .kernel_side import (
    HANG_TIMEOUT as HANG_TIMEOUT,
    ISSUES as ISSUES,
    fix_collective_after_op as fix_collective_after_op,
    fix_join_forever as fix_join_forever,
    fix_keras_fit_ps as fix_keras_fit_ps,
    fix_localhost_config as fix_localhost_config,
    fix_missing_worker as fix_missing_worker,
    fix_port_taken as fix_port_taken,
    fix_ps_died as fix_ps_died,
    main_thread_dumps as main_thread_dumps,
    reproduce_collective_after_op as reproduce_collective_after_op,
    reproduce_join_forever as reproduce_join_forever,
    reproduce_keras_fit_ps as reproduce_keras_fit_ps,
    reproduce_localhost_config as reproduce_localhost_config,
    reproduce_missing_worker as reproduce_missing_worker,
    reproduce_port_taken as reproduce_port_taken,
    reproduce_ps_died as reproduce_ps_died,
    source_without_docstring as source_without_docstring,
    summary_line as summary_line,
    tensorflow_frames as tensorflow_frames,
)
from .task_side import (
    DUMP_EVERY as DUMP_EVERY,
    allreduce_ranks as allreduce_ranks,
    allreduce_with_localhost_config as allreduce_with_localhost_config,
    dump_stacks_every as dump_stacks_every,
    keras_fit_under_ps as keras_fit_under_ps,
    localhost_tf_config as localhost_tf_config,
    op_then_strategy as op_then_strategy,
    say_done as say_done,
    second_server as second_server,
    serve_forever as serve_forever,
    serve_until_workers_done as serve_until_workers_done,
    server_on_a_free_port as server_on_a_free_port,
)
