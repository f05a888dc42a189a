# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import task_side as task_side
from .task_side import (
    NUM_CLASSES as NUM_CLASSES,
)
from .task_side import (
    NUM_FEATURES as NUM_FEATURES,
)
from .task_side import (
    Barrier as Barrier,
)
from .task_side import (
    Classifier as Classifier,
)
from .task_side import (
    accuracy_of as accuracy_of,
)
from .task_side import (
    classifier as classifier,
)
from .task_side import (
    container_name as container_name,
)
from .task_side import (
    dense as dense,
)
from .task_side import (
    join_queue_runner_threads as join_queue_runner_threads,
)
from .task_side import (
    mlp as mlp,
)
from .task_side import (
    num_replicas as num_replicas,
)
from .task_side import (
    on_ps as on_ps,
)
from .task_side import (
    peer_barrier as peer_barrier,
)
from .task_side import (
    quiet_queue_runner_cancel as quiet_queue_runner_cancel,
)
from .task_side import (
    read_test_accuracy as read_test_accuracy,
)
from .task_side import (
    run_scope as run_scope,
)
from .task_side import (
    session_config as session_config,
)
from .task_side import (
    task_shard as task_shard,
)
from .task_side import (
    train_between_graph as train_between_graph,
)
from .task_side import (
    train_shard as train_shard,
)
from .task_side import (
    training_session as training_session,
)
from .task_side import (
    wait_for_chief_init as wait_for_chief_init,
)
from .task_side import (
    wait_for_peers as wait_for_peers,
)
from .task_side import (
    worker_rank as worker_rank,
)
