# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side, task_side as task_side
from .kernel_side import (
    MACHINE as MACHINE,
    PARAMS as PARAMS,
    TERMS as TERMS,
    Fit as Fit,
    Link as Link,
    Priced as Priced,
    Step as Step,
    bucket_steps as bucket_steps,
    choices as choices,
    design as design,
    errors as errors,
    fastest_by_size as fastest_by_size,
    fit as fit,
    measure as measure,
    plain_alpha_beta as plain_alpha_beta,
    plot_by_size as plot_by_size,
    plot_predictions as plot_predictions,
    predict as predict,
    price as price,
    same_graph as same_graph,
    steps as steps,
    summary as summary,
    switch_points as switch_points,
)
from .task_side import (
    packs as packs,
    time_buckets as time_buckets,
    time_overlap as time_overlap,
    trace_algorithms as trace_algorithms,
)
