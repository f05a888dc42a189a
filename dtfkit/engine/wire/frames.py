"""How a task's tracebacks and stacks show their frames: as a local traceback would.

Two things would otherwise give away that the code ran in a task, and on which machine:

- **dtfkit's own frames.** Every call a task runs starts in the engine
  (``task_main.py``'s ``_run_call``, under ``runpy`` for the process itself), and so
  would every remote traceback, before the learner's first line. IPython hides its
  own frames from a cell's traceback; ``trim`` does the same here: the *leading* frames
  of the engine and of ``runpy`` go, up to the first frame of other code. Frames of
  dtfkit the learner called on purpose stay: a recipe (``dtfkit/recipes/...``), the
  task API (``dtfkit/taskapi.py``), a check, since the learner chose to call them and
  can open them to read what went wrong. So does an engine frame *after* the learner's
  first one (the learner called into it; its line says what failed). A stack that is
  all engine (the task could not start) is kept whole.
- **The machine's paths.** ``short_path`` writes a file as Python finds it on its
  path: ``tensorflow/python/training/monitored_session.py`` for an installed package,
  ``threading.py`` for the standard library, ``dtfkit/recipes/fault/task_side.py`` (and
  ``notebooks/...``, ``tests/...``) for dtfkit's checkout, ``~/...`` under a home
  folder; the virtual environment, the Python installation and the home folder never
  show. ``shorten_paths`` applies it to every ``File "..."`` of a text: Python's
  tracebacks and stacks, faulthandler's dumps (as ``dumps`` formats them), and the
  ``defined at`` tracebacks TensorFlow puts in its error messages.

Every traceback or stack dtfkit shows passes through here, and so do the places warnings
name: dtfkit's own (``warn``) and TensorFlow's deprecation warnings in a task (``ShortCallLocations``).

Example::

    >>> short_path("/srv/venv/lib/python3.11/site-packages/tensorflow/python/ops/math_ops.py")
    'tensorflow/python/ops/math_ops.py'
    >>> short_path("/opt/py/lib/python3.11/threading.py")
    'threading.py'
    >>> short_path("/home/ada/course/train.py")
    '~/course/train.py'
    >>> short_path("<frozen runpy>")
    '<frozen runpy>'
    >>> print(shorten_paths('  File "/home/ada/x.py", line 3, in f'))
      File "~/x.py", line 3, in f
"""

from __future__ import annotations

import logging
import os
import re
import sys
import sysconfig
import traceback
import warnings
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, TypeVar, overload

from dtfkit.engine.platform import notebook

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # .../dtfkit
_PACKAGE_PATHS = (_PACKAGE_DIR, os.path.realpath(_PACKAGE_DIR))
_PACKAGE_DIRS = tuple({os.path.join(d, "") for d in _PACKAGE_PATHS})
_ENGINE_DIRS = tuple({os.path.join(d, "engine", "") for d in _PACKAGE_PATHS})
# The folder that holds the dtfkit package: a checkout (notebooks/, tests/ beside it) or site-packages.
_ROOT_DIRS = tuple({os.path.join(os.path.dirname(d), "") for d in _PACKAGE_PATHS})
_STDLIB_DIRS = tuple(
    {
        os.path.join(p, "")
        for key in ("stdlib", "platstdlib")
        if (path := sysconfig.get_paths().get(key))
        for p in (path, os.path.realpath(path))
    }
)
_HOME = os.path.join(os.path.expanduser("~"), "") if os.path.expanduser("~") not in ("", "/", "~") else None

# Any machine's layout, for paths written elsewhere (another task's machine, a dump):
# an installed package, a standard library, a home folder.
_PACKAGES_RE = re.compile(r"^/.*/(?:site|dist)-packages/")
_STDLIB_RE = re.compile(r"^/.*/lib/python3\.\d+/")
_HOME_RE = re.compile(r"^/(?:root|home/[^/]+|Users/[^/]+)/")
_RUNPY = {"<frozen runpy>", *(os.path.join(d, "runpy.py") for d in _STDLIB_DIRS)}

# `File "<path>"` in Python's tracebacks, faulthandler's dumps and TensorFlow's messages.
_FILE_RE = re.compile(r'(File ")([^"\n]+)(")')

Frame = TypeVar("Frame")


def short_path(path: str) -> str:
    """``path`` as Python finds it on its path, with no folder of this machine: see the
    module's docstring. A name that is no absolute path (``<frozen runpy>``,
    ``Cell In[5]``, ``<string>``) is returned as it is, and so is an absolute path
    outside every known folder (a file in ``/tmp``)."""
    if not path.startswith("/"):
        return path
    packages = _PACKAGES_RE.match(path)
    if packages:
        return path[packages.end() :]
    for prefixes in (_ROOT_DIRS, _STDLIB_DIRS):
        for prefix in prefixes:
            if path.startswith(prefix):
                return path[len(prefix) :]
    stdlib = _STDLIB_RE.match(path)
    if stdlib:
        return path[stdlib.end() :]
    if _HOME and path.startswith(_HOME):
        return "~/" + path[len(_HOME) :]
    home = _HOME_RE.match(path)
    if home:
        return "~/" + path[home.end() :]
    return path


def shorten_paths(text: str) -> str:
    """Every ``File "<path>"`` of ``text`` with ``short_path(path)`` (what else the text
    says is left as it is)."""
    return _FILE_RE.sub(lambda m: m.group(1) + short_path(m.group(2)) + m.group(3), text)


def is_plumbing(filename: str) -> bool:
    """Whether a frame of this file is dtfkit's engine running a task (its own code, or
    ``runpy`` starting it), which a learner's traceback leaves out."""
    return filename in _RUNPY or filename.startswith(_ENGINE_DIRS)


def _summary_file(frame: traceback.FrameSummary) -> str:
    return frame.filename


@overload
def trim(frames: Sequence[traceback.FrameSummary]) -> list[traceback.FrameSummary]: ...
@overload
def trim(frames: Sequence[Frame], filename: Callable[[Frame], str]) -> list[Frame]: ...
def trim(frames: Sequence[Any], filename: Callable[[Any], str] = _summary_file) -> list[Any]:
    """``frames`` (outermost first) without the leading frames of the engine; all of
    them when every one is the engine's (a task that failed to start). ``filename``
    reads a frame's file (default: a ``traceback.FrameSummary``'s)."""
    for index, frame in enumerate(frames):
        if not is_plumbing(filename(frame)):
            return list(frames[index:])
    return list(frames)


def format_exception(exc: BaseException, rename: Callable[[str], str] = str) -> str:
    """``traceback.format_exception(exc)``, its causes and contexts too, with the
    engine's leading frames trimmed, then ``rename`` applied to the text (the files'
    display names: ``Cell In[5]``), then the paths shortened."""
    exception = traceback.TracebackException.from_exception(exc)
    _trim_chain(exception)
    return shorten_paths(rename("".join(exception.format())))


def format_stack(frame: FrameType, rename: Callable[[str], str] = str) -> str:
    """``traceback.format_stack(frame)`` as one text, trimmed, renamed and shortened likewise."""
    stack = traceback.StackSummary.from_list(trim(traceback.extract_stack(frame)))
    return shorten_paths(rename("".join(stack.format())))


def _trim_chain(exception: traceback.TracebackException) -> None:
    seen: set[int] = set()
    todo: list[traceback.TracebackException | None] = [exception]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        current.stack = traceback.StackSummary.from_list(trim(current.stack))
        todo += [current.__cause__, current.__context__, *(getattr(current, "exceptions", None) or ())]


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """Warn, naming the first caller outside dtfkit (the learner's cell, a test) as a
    traceback names it: ``Cell In[4]:2: UserWarning: ...`` in a notebook (the plain
    ``warnings.warn`` names the kernel's temporary file, ``/tmp/ipykernel_<pid>/<n>.py``),
    else its file's ``short_path``. Filters and "once per place" work as for ``warnings.warn``.

    Example::

        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn("dtfkit: careful")
        >>> caught[0].message.args[0], caught[0].filename
        ('dtfkit: careful', '<doctest dtfkit.engine.wire.frames.warn[0]>')
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIRS):
        frame = frame.f_back
    if frame is None:  # called from dtfkit alone (its command line)
        warnings.warn(message, category, stacklevel=2)
        return
    filename = frame.f_code.co_filename
    where = frame.f_globals
    warnings.warn_explicit(
        message,
        category,
        notebook.cell_name(filename) or short_path(filename),
        frame.f_lineno,
        module=where.get("__name__", "<unknown>"),
        registry=where.setdefault("__warningregistry__", {}),
    )


class ShortCallLocations(logging.Filter):
    """On TensorFlow's logger: the caller its deprecation warnings name (``From %s: ...``,
    ``%s`` being ``file:line``, from ``tensorflow/python/util/deprecation.py``'s
    ``_call_location``) with the file as ``short_path`` writes it. Other records pass unchanged.

    Example::

        >>> record = logging.LogRecord("tensorflow", logging.WARNING, "", 0,
        ...     "From %s: %s is deprecated", ("/home/ada/venv/lib/python3.11/site-packages/x/y.py:12", "f"), None)
        >>> ShortCallLocations().filter(record) and record.getMessage()
        'From x/y.py:12: f is deprecated'
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if (
            isinstance(record.msg, str)
            and record.msg.startswith("From %s")
            and isinstance(args, tuple)
            and args
        ):
            file, colon, line = str(args[0]).rpartition(":")
            if colon and line.isdigit():
                record.args = (f"{short_path(file)}:{line}", *args[1:])
        return True


def shorten_tensorflow_call_locations() -> None:
    """In a task: put ``ShortCallLocations`` on TensorFlow's logger (``tensorflow``; no
    TensorFlow import needed: it takes the same logger object when it starts)."""
    logger = logging.getLogger("tensorflow")
    if not any(isinstance(f, ShortCallLocations) for f in logger.filters):
        logger.addFilter(ShortCallLocations())
