# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from .kernel_side import (
    ORDERS as ORDERS,
)
from .kernel_side import (
    interleaving_fraction as interleaving_fraction,
)
from .kernel_side import (
    interleavings as interleavings,
)
from .kernel_side import (
    overlap_seconds as overlap_seconds,
)
from .kernel_side import (
    participation as participation,
)
from .kernel_side import (
    shares as shares,
)
from .kernel_side import (
    staleness as staleness,
)
from .kernel_side import (
    steady_time as steady_time,
)
from .kernel_side import (
    step_order as step_order,
)
from .kernel_side import (
    steps_per_sec as steps_per_sec,
)
from .kernel_side import (
    update_interval as update_interval,
)
from .kernel_side import (
    update_window as update_window,
)
