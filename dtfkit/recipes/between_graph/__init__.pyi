# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side, task_side as task_side
from .kernel_side import (
    greedy_bytes as greedy_bytes,
    interleavings as interleavings,
    layer_variables as layer_variables,
    overlap_seconds as overlap_seconds,
    round_robin_bytes as round_robin_bytes,
    stack_excerpt as stack_excerpt,
)
from .task_side import (
    TRACES as TRACES,
    UNEVEN_LAYERS as UNEVEN_LAYERS,
    GreedyByBytes as GreedyByBytes,
    StandInVariable as StandInVariable,
    place_variables as place_variables,
    recv_bytes as recv_bytes,
    sparse_vs_dense_read as sparse_vs_dense_read,
    train_in_graph as train_in_graph,
    tutorial_worker as tutorial_worker,
    uneven_mlp as uneven_mlp,
    variable_bytes as variable_bytes,
)
