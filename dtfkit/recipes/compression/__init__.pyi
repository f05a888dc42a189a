# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side, task_side as task_side
from .kernel_side import (
    compare as compare,
    plot_tradeoff as plot_tradeoff,
    table as table,
)
from .task_side import (
    FEATURES as FEATURES,
    HIDDEN as HIDDEN,
    LEARNING_RATE as LEARNING_RATE,
    METHODS as METHODS,
    SPLIT_SEED as SPLIT_SEED,
    STEPS as STEPS,
    check_args as check_args,
    compress as compress,
    decompress as decompress,
    default_k as default_k,
    expected_compressed_bytes as expected_compressed_bytes,
    model_floats as model_floats,
    train_compressed as train_compressed,
    train_methods as train_methods,
)
