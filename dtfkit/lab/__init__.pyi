# What dtfkit.lab hands out: type checkers and editors read it here; lazy_loader.attach_stub imports each
# name from its module on first use.

from .panel import Panel as Panel
from .runner import Lab as Lab, RunRecord as RunRecord, Settings as Settings
