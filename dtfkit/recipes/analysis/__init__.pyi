# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from .kernel_side import (
    ORDERS as ORDERS,
    interleaving_fraction as interleaving_fraction,
    interleavings as interleavings,
    overlap_seconds as overlap_seconds,
    participation as participation,
    shares as shares,
    staleness as staleness,
    steady_time as steady_time,
    step_order as step_order,
    steps_per_sec as steps_per_sec,
    update_interval as update_interval,
    update_window as update_window,
)
