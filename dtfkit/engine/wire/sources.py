"""The source of the code a call runs travels with it, so a task's tracebacks show it.

A function defined in a notebook cell lives in no file a task could read: IPython
keeps the cell's text in the kernel's ``linecache`` under a temporary file name. And
cloudpickle renames every code object it pickles ``<dynamic-code>`` (since
cloudpipe/cloudpickle#560, in 3.1.3; 3.0 kept the name).
So without help a remote traceback reads ``File "<dynamic-code>", line 3, in mine``
and no line of code.

Therefore ``pickle_call`` ships each code object with ``marshal`` (which keeps its file name; both
ends run the same Python, as cloudpickle's own code pickling needs too) and sends the lines
of its files along, named as tracebacks should name them (``Cell In[5]`` for a cell). In the
task, ``register`` puts them into ``linecache``, and ``format_exc``/``format_stack`` then read::

      Cell In[5], line 3, in mine
        raise ValueError("no")

Example::

    >>> import linecache
    >>> code = compile("def mine():\\n    raise ValueError('no')\\n", "<cell-5>", "exec")
    >>> linecache.cache["<cell-5>"] = (40, None, ["def mine():\\n", "    raise ValueError('no')\\n"], "<cell-5>")
    >>> namespace = {}
    >>> exec(code, namespace)
    >>> call = pickle_call(namespace["mine"], (), {})
    >>> call.sources["<cell-5>"][0]                  # outside IPython: the name itself
    '<cell-5>'
    >>> del linecache.cache["<cell-5>"]              # the task has never seen the cell
    >>> register(call.sources)
    >>> import cloudpickle
    >>> fn, args, kwargs = cloudpickle.loads(call.data)
    >>> try:
    ...     fn()
    ... except ValueError:
    ...     print(format_exc().splitlines()[-3:-1])
    ['  File "<cell-5>", line 2, in mine', "    raise ValueError('no')"]
"""

from __future__ import annotations

import functools
import io
import linecache
import marshal
import os
import sys
import sysconfig
import threading
import traceback
import types
from collections.abc import Callable
from typing import IO, Any, NamedTuple, Protocol

from dtfkit.engine.platform import notebook
from dtfkit.engine.wire import frames
from dtfkit.engine.wire.protocol import Sources

MAX_FILE_BYTES = 2_000_000  # a bigger file travels without its source
MAX_TOTAL_BYTES = 8_000_000  # and so do the files after this much in one call

# The task imports these itself (dtfkit, the standard library, installed packages).
_IMPORTABLE_DIRS = tuple(
    os.path.join(os.path.realpath(path), "")
    for path in {
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),  # dtfkit/
        *(sysconfig.get_paths().get(key) for key in ("stdlib", "purelib", "platlib")),
    }
    if path
)

# Task side: the display names registered so far, only those that differ from the file name.
_DISPLAY: dict[str, str] = {}


class PickledCall(NamedTuple):
    """``(fn, args, kwargs)`` pickled, and the source of the code in it."""

    data: bytes
    sources: Sources


# ------------------------------------------------------------------ owner side
def pickle_call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> PickledCall:
    """Pickle ``(fn, args, kwargs)`` with cloudpickle, keeping code file names, and
    gather the source of every file that code came from."""
    pickler_class = _pickler_class()
    buffer = io.BytesIO()
    pickler = pickler_class(buffer)
    pickler.dump((fn, args, kwargs))
    return PickledCall(buffer.getvalue(), collect(pickler.filenames))


def collect(filenames: set[str] | list[str]) -> Sources:
    """``{file name: (display name, lines)}`` for the files whose lines this process
    knows (``linecache``: IPython's cells, files read before), except files the task
    can import itself and files too big to send."""
    sources: Sources = {}
    total = 0
    for filename in sorted(filenames):
        if _importable(filename):
            continue
        lines = _lines(filename)
        size = _size(filename, lines)
        if not lines or size > MAX_FILE_BYTES or total + size > MAX_TOTAL_BYTES:
            continue
        total += size
        sources[filename] = (display_name(filename), lines)
    return sources


def display_name(filename: str) -> str:
    """How IPython names the file in a traceback (``Cell In[5]``), else the name itself."""
    return notebook.cell_name(filename) or filename


def _lines(filename: str) -> list[str]:
    """The file's lines as this process knows them: fresh if the file changed on disk,
    the remembered ones if it is gone (a cell's name, or a file deleted since)."""
    try:
        os.stat(filename)
    except (OSError, ValueError):
        pass  # no file: linecache.checkcache would forget the lines it has
    else:
        linecache.checkcache(filename)
    return linecache.getlines(filename)


def _size(filename: str, lines: list[str]) -> int:
    """The file's size as ``linecache`` recorded it (cheaper than adding up long files)."""
    entry = linecache.cache.get(filename)
    return entry[0] if entry is not None and len(entry) == 4 and entry[2] is lines else sum(map(len, lines))


@functools.lru_cache(maxsize=4096)
def _importable(filename: str) -> bool:
    return os.path.realpath(filename).startswith(_IMPORTABLE_DIRS) if os.path.isabs(filename) else False


def _code_filenames(code: types.CodeType, into: set[str]) -> None:
    into.add(code.co_filename)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_filenames(const, into)


class _SourcePickler(Protocol):
    """What ``pickle_call`` uses of the pickler ``_pickler_class`` makes."""

    filenames: set[str]

    def dump(self, obj: object, /) -> None: ...


_PICKLER: Callable[[IO[bytes]], _SourcePickler] | None = None


def _pickler_class() -> Callable[[IO[bytes]], _SourcePickler]:
    """A cloudpickle Pickler that ships code objects with marshal (cloudpickle's own
    reducer renames their file ``<dynamic-code>``) and notes their file names.

    ``reducer_override`` sees every object first (cloudpickle's handles classes and
    functions); a ``dispatch_table`` entry would do too, but measured slower per call."""
    global _PICKLER
    if _PICKLER is None:
        import cloudpickle

        # cloudpickle ships no types: its Pickler is Any to mypy, a class all the same.
        class SourcePickler(cloudpickle.Pickler):  # type: ignore[misc]
            def __init__(self, file: IO[bytes]) -> None:
                super().__init__(file)
                self.filenames: set[str] = set()

            def reducer_override(self, obj: object) -> object:
                if type(obj) is types.CodeType:
                    return self._reduce_code(obj)
                return super().reducer_override(obj)

            def _reduce_code(self, code: types.CodeType) -> object:
                try:
                    data = marshal.dumps(code)
                except ValueError:  # a constant marshal cannot write: cloudpickle's way
                    return NotImplemented
                _code_filenames(code, self.filenames)
                return marshal.loads, (data,)

        _PICKLER = SourcePickler
    return _PICKLER


# ------------------------------------------------------------------- task side
def register(sources: Sources | None) -> None:
    """Put the shipped lines into ``linecache`` (no modification time: ``checkcache``
    keeps them) and remember the names tracebacks give their files."""
    for filename, (display, lines) in (sources or {}).items():
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
        if display != filename:
            _DISPLAY[filename] = display


def with_display_names(text: str) -> str:
    """``File "/tmp/ipykernel_1/2.py", line 3`` becomes ``Cell In[5], line 3``."""
    for filename, display in list(_DISPLAY.items()):  # the control thread formats stacks too
        text = text.replace(f'File "{filename}", line ', f"{display}, line ")
    return text


def format_exc() -> str:
    """``traceback.format_exc()`` as a learner reads it (``frames``: the engine's
    leading frames left out, paths shortened), with the display names of registered files."""
    exc = sys.exc_info()[1]
    return frames.format_exception(exc, with_display_names) if exc is not None else traceback.format_exc()


def install_excepthooks() -> None:
    """In a task: an exception nobody caught (in a thread, such as TensorFlow's queue
    runners, or in the task's main) prints as ``format_exc`` does, in Python's own words
    (``Exception in thread <name>:``), instead of with the machine's full paths."""
    sys.excepthook = _print_uncaught
    threading.excepthook = _print_uncaught_in_thread


def _print_uncaught(
    exc_type: type[BaseException], exc: BaseException | None, tb: types.TracebackType | None
) -> None:
    _print_exception("", exc_type, exc)


def _print_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is not SystemExit:  # as Python's own hook: a thread's SystemExit is quiet
        name = args.thread.name if args.thread is not None else threading.get_ident()
        _print_exception(f"Exception in thread {name}:\n", args.exc_type, args.exc_value)


def _print_exception(head: str, exc_type: type[BaseException], exc: BaseException | None) -> None:
    if sys.stderr is None:
        return
    text = frames.format_exception(exc, with_display_names) if exc is not None else f"{exc_type.__name__}\n"
    sys.stderr.write(head + text)
    sys.stderr.flush()


def format_stack(frame: types.FrameType) -> str:
    """``traceback.format_stack(frame)`` as one text, read likewise."""
    return frames.format_stack(frame, with_display_names)
