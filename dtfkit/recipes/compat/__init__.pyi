# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from . import task_side as task_side
from .kernel_side import (
    ATTEMPTS as ATTEMPTS,
)
from .kernel_side import (
    TRAINER_TITLES as TRAINER_TITLES,
)
from .kernel_side import (
    Cell as Cell,
)
from .kernel_side import (
    CompatTable as CompatTable,
)
from .kernel_side import (
    cluster_layout as cluster_layout,
)
from .kernel_side import (
    compatibility_table as compatibility_table,
)
from .kernel_side import (
    first_error_line as first_error_line,
)
from .kernel_side import (
    installed_versions as installed_versions,
)
from .kernel_side import (
    run_cell as run_cell,
)
from .task_side import (
    FEATURES as FEATURES,
)
from .task_side import (
    LOCAL_REPLICAS as LOCAL_REPLICAS,
)
from .task_side import (
    STRATEGIES as STRATEGIES,
)
from .task_side import (
    TRAINERS as TRAINERS,
)
from .task_side import (
    NotInstalled as NotInstalled,
)
from .task_side import (
    train as train,
)
