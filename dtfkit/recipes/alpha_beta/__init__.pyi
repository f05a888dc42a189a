# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from .kernel_side import (
    METHODS as METHODS,
)
from .kernel_side import (
    alpha_beta_time as alpha_beta_time,
)
from .kernel_side import (
    comm_span_s as comm_span_s,
)
from .kernel_side import (
    communication as communication,
)
from .kernel_side import (
    crossover_size as crossover_size,
)
from .kernel_side import (
    fastest as fastest,
)
from .kernel_side import (
    measure as measure,
)
from .kernel_side import (
    model_terms as model_terms,
)
from .kernel_side import (
    plot_alpha_beta as plot_alpha_beta,
)
