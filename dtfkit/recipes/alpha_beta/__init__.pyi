# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from .kernel_side import (
    METHODS as METHODS,
    alpha_beta_time as alpha_beta_time,
    comm_span_s as comm_span_s,
    communication as communication,
    crossover_size as crossover_size,
    fastest as fastest,
    measure as measure,
    model_terms as model_terms,
    plot_alpha_beta as plot_alpha_beta,
)
