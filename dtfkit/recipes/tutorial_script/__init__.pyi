# The names of this recipe: type checkers and editors read them here; lazy_loader.attach_stub imports
# each from its side on first use (a task that unpickles a task-side function imports no kernel side).

from . import kernel_side as kernel_side
from .kernel_side import (
    PATH as PATH,
    echo_script_lines as echo_script_lines,
    print_steps as print_steps,
    printed_line_pattern as printed_line_pattern,
    show as show,
    source_lines as source_lines,
    worker_reports as worker_reports,
)
