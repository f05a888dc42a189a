# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import task_side as task_side
from .task_side import (
    NUM_CLASSES as NUM_CLASSES,
    NUM_FEATURES as NUM_FEATURES,
    Barrier as Barrier,
    Classifier as Classifier,
    accuracy_of as accuracy_of,
    classifier as classifier,
    container_name as container_name,
    dense as dense,
    join_queue_runner_threads as join_queue_runner_threads,
    mlp as mlp,
    num_replicas as num_replicas,
    on_ps as on_ps,
    peer_barrier as peer_barrier,
    quiet_queue_runner_cancel as quiet_queue_runner_cancel,
    read_test_accuracy as read_test_accuracy,
    run_scope as run_scope,
    session_config as session_config,
    task_shard as task_shard,
    train_between_graph as train_between_graph,
    train_shard as train_shard,
    training_session as training_session,
    wait_for_chief_init as wait_for_chief_init,
    wait_for_peers as wait_for_peers,
    worker_rank as worker_rank,
)
