# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from . import task_side as task_side
from .kernel_side import (
    MACHINE as MACHINE,
)
from .kernel_side import (
    PARAMS as PARAMS,
)
from .kernel_side import (
    TERMS as TERMS,
)
from .kernel_side import (
    Fit as Fit,
)
from .kernel_side import (
    Link as Link,
)
from .kernel_side import (
    Priced as Priced,
)
from .kernel_side import (
    Step as Step,
)
from .kernel_side import (
    bucket_steps as bucket_steps,
)
from .kernel_side import (
    choices as choices,
)
from .kernel_side import (
    design as design,
)
from .kernel_side import (
    errors as errors,
)
from .kernel_side import (
    fastest_by_size as fastest_by_size,
)
from .kernel_side import (
    fit as fit,
)
from .kernel_side import (
    measure as measure,
)
from .kernel_side import (
    plain_alpha_beta as plain_alpha_beta,
)
from .kernel_side import (
    plot_by_size as plot_by_size,
)
from .kernel_side import (
    plot_predictions as plot_predictions,
)
from .kernel_side import (
    predict as predict,
)
from .kernel_side import (
    price as price,
)
from .kernel_side import (
    same_graph as same_graph,
)
from .kernel_side import (
    steps as steps,
)
from .kernel_side import (
    summary as summary,
)
from .kernel_side import (
    switch_points as switch_points,
)
from .task_side import (
    packs as packs,
)
from .task_side import (
    time_buckets as time_buckets,
)
from .task_side import (
    time_overlap as time_overlap,
)
from .task_side import (
    trace_algorithms as trace_algorithms,
)
