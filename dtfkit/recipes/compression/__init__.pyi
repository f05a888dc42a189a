# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from . import task_side as task_side
from .kernel_side import (
    compare as compare,
)
from .kernel_side import (
    plot_tradeoff as plot_tradeoff,
)
from .kernel_side import (
    table as table,
)
from .task_side import (
    FEATURES as FEATURES,
)
from .task_side import (
    HIDDEN as HIDDEN,
)
from .task_side import (
    LEARNING_RATE as LEARNING_RATE,
)
from .task_side import (
    METHODS as METHODS,
)
from .task_side import (
    SPLIT_SEED as SPLIT_SEED,
)
from .task_side import (
    STEPS as STEPS,
)
from .task_side import (
    check_args as check_args,
)
from .task_side import (
    compress as compress,
)
from .task_side import (
    decompress as decompress,
)
from .task_side import (
    default_k as default_k,
)
from .task_side import (
    expected_compressed_bytes as expected_compressed_bytes,
)
from .task_side import (
    model_floats as model_floats,
)
from .task_side import (
    train_compressed as train_compressed,
)
from .task_side import (
    train_methods as train_methods,
)
