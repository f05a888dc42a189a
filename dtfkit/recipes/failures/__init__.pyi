# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from . import task_side as task_side
from .kernel_side import (
    HANG_TIMEOUT as HANG_TIMEOUT,
)
from .kernel_side import (
    ISSUES as ISSUES,
)
from .kernel_side import (
    fix_collective_after_op as fix_collective_after_op,
)
from .kernel_side import (
    fix_join_forever as fix_join_forever,
)
from .kernel_side import (
    fix_keras_fit_ps as fix_keras_fit_ps,
)
from .kernel_side import (
    fix_localhost_config as fix_localhost_config,
)
from .kernel_side import (
    fix_missing_worker as fix_missing_worker,
)
from .kernel_side import (
    fix_port_taken as fix_port_taken,
)
from .kernel_side import (
    fix_ps_died as fix_ps_died,
)
from .kernel_side import (
    main_thread_dumps as main_thread_dumps,
)
from .kernel_side import (
    reproduce_collective_after_op as reproduce_collective_after_op,
)
from .kernel_side import (
    reproduce_join_forever as reproduce_join_forever,
)
from .kernel_side import (
    reproduce_keras_fit_ps as reproduce_keras_fit_ps,
)
from .kernel_side import (
    reproduce_localhost_config as reproduce_localhost_config,
)
from .kernel_side import (
    reproduce_missing_worker as reproduce_missing_worker,
)
from .kernel_side import (
    reproduce_port_taken as reproduce_port_taken,
)
from .kernel_side import (
    reproduce_ps_died as reproduce_ps_died,
)
from .kernel_side import (
    source_without_docstring as source_without_docstring,
)
from .kernel_side import (
    summary_line as summary_line,
)
from .kernel_side import (
    tensorflow_frames as tensorflow_frames,
)
from .task_side import (
    DUMP_EVERY as DUMP_EVERY,
)
from .task_side import (
    allreduce_ranks as allreduce_ranks,
)
from .task_side import (
    allreduce_with_localhost_config as allreduce_with_localhost_config,
)
from .task_side import (
    dump_stacks_every as dump_stacks_every,
)
from .task_side import (
    keras_fit_under_ps as keras_fit_under_ps,
)
from .task_side import (
    localhost_tf_config as localhost_tf_config,
)
from .task_side import (
    op_then_strategy as op_then_strategy,
)
from .task_side import (
    say_done as say_done,
)
from .task_side import (
    second_server as second_server,
)
from .task_side import (
    serve_forever as serve_forever,
)
from .task_side import (
    serve_until_workers_done as serve_until_workers_done,
)
from .task_side import (
    server_on_a_free_port as server_on_a_free_port,
)
