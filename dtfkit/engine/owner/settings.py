"""A cluster's settings, checked once, when made: ``ClusterSettings`` (the owner's process).

What every task of a cluster is started with besides its place in the layout: what the tasks do
(``mode``), their GPUs and environment, how long a start may take, the start-up display, the script
or ``setup`` they run. The front ends make one from their arguments; a bad value is refused there,
before a launcher is chosen or a process started, and the runtime takes the object as it is (it is
frozen: a cluster started again gets the same settings). ``admit(layout)`` is the one place that
refuses a cluster of more tasks than the machine or ``max_tasks`` allows.

Example::

    >>> settings = ClusterSettings(mode="noserve", start_timeout=60)
    >>> settings.serves, settings.start_timeout
    (False, 60.0)
    >>> ClusterSettings(start_timeout=0)
    Traceback (most recent call last):
    ...
    dtfkit.errors.DtfkitError: start_timeout must be a positive number of seconds, not 0
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from dtfkit.engine.owner.output import ProgressFactory
from dtfkit.engine.platform.admission import check_env, check_max_tasks, check_task_count
from dtfkit.engine.platform.gpu_plan import POLICIES
from dtfkit.engine.wire.layout import ClusterLayout
from dtfkit.engine.wire.protocol import CLUSTER_MODES
from dtfkit.engine.wire.sources import PickledCall
from dtfkit.errors import DtfkitError


@dataclass(frozen=True)
class Script:
    """What every task of a ``mode="script"`` cluster runs (see ``dtfkit.launch``)."""

    path: str
    args: tuple[str, ...] = ()
    linger: bool = False  # a finished worker keeps serving until the launcher ends the cluster


@dataclass(frozen=True)
class ClusterSettings:
    """How a cluster's tasks are started (see the module's docstring); refused when made if a value is bad."""

    mode: str = "serve"  # one of protocol.CLUSTER_MODES
    gpus: str = "auto"  # a gpu_plan policy
    env: Mapping[str, str] = field(default_factory=dict)
    show_tf_logs: bool = False
    start_timeout: float = 120.0
    progress: ProgressFactory | None = None  # the start-up display; None: none
    script: Script | None = None  # what every task runs when mode == "script"
    cwd: str | None = None  # the tasks' working folder; None: the owner's at the runtime's start
    setup_payload: PickledCall | None = None  # setup=, pickled once
    max_tasks: int | None = None  # None: what the machine allows

    def __post_init__(self) -> None:
        if self.mode not in CLUSTER_MODES:
            raise DtfkitError(f"unknown task mode {self.mode!r}")
        if (self.mode == "script") != (self.script is not None):
            raise DtfkitError("mode='script' needs script=Script(...), and only it does")
        if self.gpus not in POLICIES:
            raise DtfkitError(f"unknown gpus policy {self.gpus!r}: use one of {', '.join(POLICIES)}")
        timeout = self.start_timeout
        if isinstance(timeout, bool) or not (isinstance(timeout, (int, float)) and timeout > 0):
            raise DtfkitError(f"start_timeout must be a positive number of seconds, not {timeout!r}")
        if self.progress is not None and not callable(self.progress):
            raise DtfkitError(
                f"progress must be a function progress(task names, description) or None, not {self.progress!r}"
            )
        check_max_tasks(self.max_tasks)
        object.__setattr__(self, "start_timeout", float(timeout))
        env = dict(self.env) if isinstance(self.env, MappingProxyType) else self.env  # another's settings
        object.__setattr__(self, "env", MappingProxyType(check_env(env)))

    @property
    def serves(self) -> bool:
        """True when each task starts a TensorFlow server (``start_servers=True``)."""
        return self.mode == "serve"

    def admit(self, layout: ClusterLayout) -> None:
        """Refuse ``layout`` if it has more tasks than ``max_tasks``, or than the machine allows."""
        n = len(layout.tasks)
        check_task_count(n, self.max_tasks)
        if self.max_tasks is not None and n > self.max_tasks:
            raise DtfkitError(
                f"a cluster of {n} tasks is more than max_tasks={self.max_tasks} allows; "
                "ask for fewer tasks or raise max_tasks"
            )
