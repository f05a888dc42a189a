"""Exceptions raised by dtfkit. Each names the task, the cause and the next step."""

from __future__ import annotations

import sys
from collections.abc import Callable


class DtfkitError(Exception):
    """Base class of every error dtfkit raises on purpose."""


class ClusterStartError(DtfkitError):
    """A task did not come up: it crashed, timed out, or could not bind its port."""


class TaskNotRunning(DtfkitError):
    """Work was sent to a task that is not running (killed, crashed or closed)."""


class TaskFailed(DtfkitError):
    """A function raised inside a task.

    Attributes:
        task: the task's name, e.g. ``"worker:1"``.
        exc_type: the remote exception's class name, e.g. ``"ValueError"``.
        remote_traceback: the traceback as the task printed it.
        others: what happened to the other tasks of the same call.

    ``headlines`` are the message's first line and the traceback's title, to be formatted with
    ``task``, ``exc_type`` and ``message``, in the language the person chose (the engine passes them
    translated: this module is below ``dtfkit.i18n``).
    """

    def __init__(
        self,
        task: str,
        exc_type: str,
        message: str,
        remote_traceback: str,
        others: str = "",
        headlines: tuple[str, str] = (
            "{task} raised {exc_type}: {message}",
            "--- remote traceback ({task}) ---",
        ),
    ):
        self.task = task
        self.exc_type = exc_type
        self.remote_message = message
        self.remote_traceback = remote_traceback
        self.others = others
        first, traceback_title = headlines
        text = first.format(task=task, exc_type=exc_type, message=message)
        text += "\n\n" + traceback_title.format(task=task) + "\n"
        text += remote_traceback.rstrip()
        if others:
            text += "\n\n" + others
        super().__init__(text)


class TaskExited(DtfkitError):
    """A task process exited while it was running a function or starting."""


class TaskTimeout(DtfkitError):
    """A function did not return in time; the stuck tasks were killed.

    Attributes:
        stacks: each stuck task's Python stacks when the time was up, by task name. A
            task whose Python could not answer (TensorFlow's C++ held the interpreter) is
            ended with SIGABRT and its stacks are ``faulthandler``'s, after a note saying
            so (``dtfkit.engine.wire.dumps``); ``"(no stack received)"`` when there are none
            (a task on another machine).
        stopped: the tasks whose process was stopped (SIGSTOP, Ctrl-Z), not stuck.

    The message shows all of it.
    """

    def __init__(self, message: str, stacks: dict[str, str] | None = None, stopped: list[str] | None = None):
        super().__init__(message)
        self.stacks = dict(stacks or {})
        self.stopped = list(stopped or [])


def exit_code(program: str, stopped: str, run: Callable[[], int]) -> int:
    """A command's exit code: ``run()``'s; a ``DtfkitError`` is printed as ``program: error: ...``
    (2), Ctrl-C as ``program: interrupted; <stopped>`` (130), on standard error.

    Example::

        >>> def bad() -> int:
        ...     raise DtfkitError("no such script")
        >>> exit_code("dtfkit", "every task was stopped", bad)
        2
    """
    try:
        return run()
    except DtfkitError as exc:
        print(f"{program}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{program}: interrupted; {stopped}", file=sys.stderr)
        return 130
