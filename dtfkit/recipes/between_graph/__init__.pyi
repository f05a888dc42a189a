# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from . import task_side as task_side
from .kernel_side import (
    greedy_bytes as greedy_bytes,
)
from .kernel_side import (
    interleavings as interleavings,
)
from .kernel_side import (
    layer_variables as layer_variables,
)
from .kernel_side import (
    overlap_seconds as overlap_seconds,
)
from .kernel_side import (
    round_robin_bytes as round_robin_bytes,
)
from .kernel_side import (
    stack_excerpt as stack_excerpt,
)
from .task_side import (
    TRACES as TRACES,
)
from .task_side import (
    UNEVEN_LAYERS as UNEVEN_LAYERS,
)
from .task_side import (
    GreedyByBytes as GreedyByBytes,
)
from .task_side import (
    StandInVariable as StandInVariable,
)
from .task_side import (
    place_variables as place_variables,
)
from .task_side import (
    recv_bytes as recv_bytes,
)
from .task_side import (
    sparse_vs_dense_read as sparse_vs_dense_read,
)
from .task_side import (
    train_in_graph as train_in_graph,
)
from .task_side import (
    tutorial_worker as tutorial_worker,
)
from .task_side import (
    uneven_mlp as uneven_mlp,
)
from .task_side import (
    variable_bytes as variable_bytes,
)
