# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from .kernel_side import (
    PHASES as PHASES,
    TRACE_FORM as TRACE_FORM,
    check_chrome_trace as check_chrome_trace,
    to_chrome_trace as to_chrome_trace,
    write_chrome_trace as write_chrome_trace,
)
