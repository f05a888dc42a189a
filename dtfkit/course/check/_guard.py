"""Keep dtfkit's own formulas, checks and ``diagnose`` out of a checked answer.

An exercise asks for the idea; dtfkit already holds most answers (``recipes.alpha_beta``,
``diagnose``, the checks' own references). An answer that calls them passes nothing: the
``exercise`` decorator refuses it, naming what it called, in two ways.

- **Before it runs** (:func:`reached_names`): the answer's code, its nested functions, the learner's
  helper functions it uses (followed through globals, closures and default arguments) are read for
  names of dtfkit's modules and functions: ``dtfkit.recipes.alpha_beta.alpha_beta_time``,
  ``from dtfkit import diagnose``, ``import dtfkit.course.check.ch12_recovery``, a global bound
  to a dtfkit function under another name, a ``functools.partial`` of one.
- **While it runs** (:class:`GuardedAnswer`): every call the answer makes is watched with
  ``sys.setprofile`` (Python 3.10–3.12); a call into a dtfkit module whose nearest caller outside
  the standard library and site-packages is the learner's code (not dtfkit itself) is recorded.
  This catches what no name shows: ``importlib.import_module("dtfkit...")``, ``getattr`` on a
  module, ``__import__``, ``sys.modules``. The answer travels to task processes wrapped, so the
  watch runs there too.

What an exercise legitimately uses (``dtfkit.this_task()``, a helper its cell imports) is on its
allow-list (``allowed`` of :func:`guarded`), on top of :data:`ALWAYS_ALLOWED`. Objects a check
hands the answer (stand-in ``tf`` modules, stand-in strategies) live in the check's own module
as methods or nested functions, and so do the watches a check's task side puts around the answer
(``course/task_side/chNN.py``); calling them is allowed, their modules' module-level functions are not.

Threads the answer starts are watched too (``threading.setprofile``). Not caught: a call made by
a function the answer returns, when the check (or TensorFlow) calls it after the answer has
returned, unless its code names dtfkit (the reading sees that); a call in a subprocess the answer
starts; copying dtfkit's source text into the answer. An answer that turns the watch off
(``sys.setprofile``, however reached) is refused for that.

Example::

    answer = guarded(sync_seconds, exercise="11.2")
    answer("ring", 3, 1e5, 1e-3, 1e-8)
    answer.violations            # ['dtfkit.recipes.alpha_beta.alpha_beta_time'] for a shortcut
"""

from __future__ import annotations

import dis
import functools
import inspect
import os
import re
import sys
import sysconfig
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any, TypeGuard

import dtfkit
from dtfkit.i18n import N_, _

ALWAYS_ALLOWED = (
    "dtfkit.this_task",
    "dtfkit.report",
    "dtfkit.TaskContext",
    "dtfkit.taskapi",
    "dtfkit.errors",
    "dtfkit.DtfkitError",
    "dtfkit.TaskFailed",
    "dtfkit.TaskExited",
    "dtfkit.TaskTimeout",
    "dtfkit.TaskNotRunning",
    "dtfkit.ClusterStartError",
)
"""What any answer may use: its task's identity, ``report()``, dtfkit's exception classes."""

_DTFKIT_DIR = os.path.dirname(os.path.abspath(dtfkit.__file__)) + os.sep
_LIBRARY_DIRS = tuple(
    {
        os.path.abspath(p) + os.sep
        for p in (
            sys.prefix,
            sys.base_prefix,
            sys.exec_prefix,
            sysconfig.get_paths().get("stdlib", sys.base_prefix),
            sysconfig.get_paths().get("purelib", sys.prefix),
            sysconfig.get_paths().get("platlib", sys.prefix),
        )
        if p
    }
)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"builtins", "importlib", "functools"}

DTFKIT, LIBRARY, LEARNER = "dtfkit", "library", "learner"


class AnswerReachedIntoDtfkit(Exception):
    """Raised where the answer ran, after it called into dtfkit; the check turns it into feedback."""


def _is_dtfkit_name(name: object) -> TypeGuard[str]:
    return isinstance(name, str) and (name == "dtfkit" or name.startswith("dtfkit."))


_SIDE = re.compile(r"\.(?:task_side|kernel_side)(?=\.|$)")


def public_name(name: str) -> str:
    """The name a learner reaches a recipe's function by: without the side module it lives in.

    >>> public_name("dtfkit.recipes.tf1.task_side.dense")
    'dtfkit.recipes.tf1.dense'
    """
    return _SIDE.sub("", name)


def _module_kind(name: object, file: object) -> str:
    if isinstance(file, str) and os.path.abspath(file).startswith(_DTFKIT_DIR):
        return DTFKIT  # dtfkit's task bootstrap runs as __main__
    if _is_dtfkit_name(name):
        return DTFKIT
    if isinstance(name, str) and name.split(".")[0] in _STDLIB:
        return LIBRARY
    if not isinstance(file, str) and isinstance(name, str) and name != "__main__":
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
    if isinstance(file, str) and os.path.abspath(file).startswith(_LIBRARY_DIRS):
        return LIBRARY
    return LEARNER


_KIND_BY_CODE: dict[types.CodeType, str] = {}


def _frame_kind(frame: types.FrameType) -> str:
    code = frame.f_code
    kind = _KIND_BY_CODE.get(code)
    if kind is None:
        g = frame.f_globals
        kind = _module_kind(g.get("__name__"), g.get("__file__"))
        _KIND_BY_CODE[code] = kind
    return kind


def _callee_name(frame: types.FrameType) -> str:
    code = frame.f_code
    qualname = getattr(code, "co_qualname", None)  # Python 3.11+
    if qualname is None:  # 3.10: a module-level function is the module's own name for this code
        module_level = getattr(frame.f_globals.get(code.co_name), "__code__", None) is code
        qualname = code.co_name if module_level or code.co_name == "<module>" else f"<local>.{code.co_name}"
    return public_name(f"{frame.f_globals.get('__name__', '?')}.{qualname}")


def _object_name(obj: Any) -> str | None:
    """``dtfkit.x.y`` for a dtfkit module, function, class or method; None for anything else."""
    if isinstance(obj, types.ModuleType):
        name = getattr(obj, "__name__", None)
        return public_name(name) if _is_dtfkit_name(name) else None
    if isinstance(obj, types.MethodType | staticmethod | classmethod):
        return _object_name(obj.__func__)
    if isinstance(obj, functools.partial):
        return _object_name(obj.func)
    if callable(obj) and isinstance(getattr(obj, "__module__", None), str):
        if _is_dtfkit_name(obj.__module__) and not isinstance(obj, GuardedAnswer):
            qualname = getattr(obj, "__qualname__", None) or getattr(type(obj), "__qualname__", "?")
            return public_name(f"{obj.__module__}.{qualname}")
    return None


class Policy:
    """What one exercise's answer may call: the allow-list and the check's own module."""

    def __init__(self, exercise: str, allowed: Iterable[str] = (), check_module: str | None = None):
        self.exercise = exercise
        self.allowed = tuple(allowed) + ALWAYS_ALLOWED
        self.check_module = check_module

    def allows(self, name: str, *, importing: bool = False) -> bool:
        """True for an allowed name, anything inside an allowed module or class, or (``importing``)
        a module an allowed name lies in."""
        if any(name == a or name.startswith(a + ".") for a in self.allowed):
            return True
        if importing and any(a.startswith(name + ".") for a in self.allowed):
            return True
        for module in self._stand_in_modules():
            if name.startswith(module + "."):
                rest = name[len(module) + 1 :]
                return "." in rest  # a method or nested function of a stand-in the check hands over
        return False

    def _stand_in_modules(self) -> tuple[str, ...]:
        """The check's module, and its chapter's task side as names show it (``public_name`` drops
        ``task_side``): ``dtfkit.course.check.ch07`` and ``dtfkit.course.ch07``."""
        if not self.check_module:
            return ()
        task_side = self.check_module.replace(".course.check.", ".course.", 1)
        return (self.check_module,) if task_side == self.check_module else (self.check_module, task_side)

    def allows_call(self, name: str) -> bool:
        last = name.rsplit(".", 1)[-1]
        if last in ("<module>", "__getattr__", "__dir__"):
            return True  # importing a module or looking a name up calls nothing of the answer's
        if "<genexpr>" in name or "<listcomp>" in name or "<lambda>" in name:
            owner = name.split(".<", 1)[0]
            return self.allows(owner) or self.allows(name)
        return self.allows(name)


# ------------------------------------------------------------------ reading the answer's code
_TRANSPARENT = {"CACHE", "PRECALL", "PUSH_NULL", "EXTENDED_ARG", "NOP", "COPY_FREE_VARS", "KW_NAMES"}


def _is_learner_function(obj: Any) -> bool:
    return (
        isinstance(obj, types.FunctionType)
        and _module_kind(obj.__globals__.get("__name__"), obj.__globals__.get("__file__")) == LEARNER
    )


def _names_in_code(
    code: types.CodeType, resolve: Callable[[str], Any], found: list[str], follow: list[Any]
) -> None:
    chain: str | None = None
    fromlist: Any = None
    imported: str | None = None
    previous_const: Any = None
    for ins in dis.get_instructions(code):
        op = ins.opname
        if op in _TRANSPARENT:
            continue
        if chain is not None and (op.startswith("LOAD_ATTR") or op == "LOAD_METHOD"):
            chain = f"{chain}.{ins.argval}"
            continue
        if chain is not None:
            _found(chain, found)
            chain = None
        if op in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_GLOBALS"):
            name = ins.argval
            obj = resolve(name)
            dotted = _object_name(obj)
            if dotted is not None:
                chain = dotted
            elif obj is not None:
                follow.append(obj)
        elif op == "IMPORT_NAME":
            imported, fromlist = ins.argval, previous_const
            if _is_dtfkit_name(imported) and (fromlist is None or fromlist == ("*",)):
                found.append(public_name(imported))
        elif op == "IMPORT_FROM" and imported is not None and fromlist is not None:
            if _is_dtfkit_name(imported):
                found.append(public_name(f"{imported}.{ins.argval}"))
        elif op == "LOAD_CONST":
            if isinstance(ins.argval, str) and _looks_like_dtfkit_path(ins.argval):
                found.append(ins.argval)
        previous_const = ins.argval if op == "LOAD_CONST" else None
    if chain is not None:
        _found(chain, found)
    for const in code.co_consts:
        if inspect.iscode(const):
            _names_in_code(const, resolve, found, follow)


def _found(chain: str, found: list[str]) -> None:
    """Record a dotted dtfkit name unless it is plain data (a module's constant, say: no code runs)."""
    if not _is_data(chain):
        found.append(chain)


def _is_data(dotted: str) -> bool:
    """True when ``dotted`` names a loaded module's attribute that is neither code nor a module.
    Read from the modules' own ``__dict__``: a module's ``__getattr__`` (lazy imports) never runs."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        obj: Any = module
        for attr in parts[cut:]:
            if not isinstance(obj, types.ModuleType) or attr not in vars(obj):
                return False
            obj = vars(obj)[attr]
        return not (callable(obj) or isinstance(obj, types.ModuleType))
    return False


def _looks_like_dtfkit_path(text: str) -> bool:
    parts = text.split(".")
    return parts[0] == "dtfkit" and len(parts) > 1 and all(p.isidentifier() for p in parts)


def _resolver(fn: types.FunctionType) -> Callable[[str], Any]:
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False))
    builtins = fn.__globals__.get("__builtins__", {})
    builtins = builtins if isinstance(builtins, dict) else vars(builtins)

    def resolve(name: str) -> Any:
        if name in cells:
            try:
                return cells[name].cell_contents
            except ValueError:  # an empty cell: assigned later
                return None
        if name in fn.__globals__:
            return fn.__globals__[name]
        return builtins.get(name)

    return resolve


def reached_names(answer: Any) -> list[str]:
    """The dtfkit names the answer's code reaches (its own code, nested functions, and the learner's
    functions and classes it uses), in order of first appearance.

    Example::

        from dtfkit.recipes.alpha_beta import alpha_beta_time
        reached_names(lambda *a: alpha_beta_time(*a))   # ['dtfkit.recipes.alpha_beta.alpha_beta_time']
    """
    found: list[str] = []
    seen: set[int] = set()
    todo: list[Any] = [answer.answer if isinstance(answer, GuardedAnswer) else answer]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        dotted = _object_name(obj)
        if dotted is not None:
            found.append(dotted)
            continue
        if isinstance(obj, functools.partial):
            todo += [obj.func, *obj.args, *obj.keywords.values()]
        elif isinstance(obj, types.MethodType):
            todo.append(obj.__func__)
        elif _is_learner_function(obj):
            follow: list[Any] = []
            _names_in_code(obj.__code__, _resolver(obj), found, follow)
            follow += list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
            todo += [f for f in follow if _worth_following(f)]
        elif isinstance(obj, type) and _module_kind(obj.__module__, None) == LEARNER:
            todo += [v for v in vars(obj).values() if _worth_following(v)]
        elif isinstance(obj, staticmethod | classmethod):
            todo.append(obj.__func__)
        elif isinstance(obj, list | tuple | set | frozenset) and len(obj) <= 64:
            todo += [v for v in obj if _worth_following(v)]
        elif isinstance(obj, dict) and len(obj) <= 64:
            todo += [v for v in obj.values() if _worth_following(v)]
    return list(dict.fromkeys(found))


def _worth_following(obj: Any) -> bool:
    return (
        _object_name(obj) is not None
        or _is_learner_function(obj)
        or isinstance(obj, functools.partial | types.MethodType | staticmethod | classmethod | type)
        or (isinstance(obj, list | tuple | set | frozenset | dict) and 0 < len(obj) <= 64)
    )


def refused_names(answer: Any, policy: Policy) -> list[str]:
    """The names :func:`reached_names` finds that ``policy`` does not allow."""
    return [n for n in reached_names(answer) if not policy.allows(n, importing=True)]


# ------------------------------------------------------------------ watching the answer run
TURNS_OFF_THE_WATCH = "sys.setprofile (which turns off the check's watch)"


class _Watch:
    """A ``sys.setprofile`` hook: records calls from learner code into dtfkit in ``violations``
    (shared with the :class:`GuardedAnswer`, so a thread the answer started still reports)."""

    def __init__(self, policy: Policy, previous: Any, violations: list[str]):
        self.policy = policy
        self.previous = previous
        self.violations = violations

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call" and _frame_kind(frame) == DTFKIT:
            self._judge(frame)
        elif event == "c_call" and arg is sys.setprofile and _frame_kind(frame) == LEARNER:
            if TURNS_OFF_THE_WATCH not in self.violations:  # however it was reached: the call is seen
                self.violations.append(TURNS_OFF_THE_WATCH)
        if self.previous is not None:
            self.previous(frame, event, arg)

    def _judge(self, frame: types.FrameType) -> None:
        caller = frame.f_back
        while caller is not None:
            kind = _frame_kind(caller)
            if kind == DTFKIT:
                return  # dtfkit calling itself: an allowed function's insides, or the check
            if kind == LEARNER:
                break
            caller = caller.f_back
        if caller is None:
            return
        name = _callee_name(frame)
        if not self.policy.allows_call(name) and name not in self.violations:
            self.violations.append(name)


_ACTIVE = threading.local()


class GuardedAnswer:
    """The learner's answer, watched while it runs (in the kernel or, pickled, in a task).

    Calls go through to ``answer``; afterwards, if it called into dtfkit beyond ``policy``,
    :class:`AnswerReachedIntoDtfkit` is raised (the names are in ``violations``). Attributes the
    checks read (``__code__``, ``__name__``, ``__defaults__``...) are the answer's.
    """

    def __init__(self, answer: Callable[..., Any], policy: Policy):
        self.answer = answer
        self.policy = policy
        self.violations: list[str] = []
        functools.update_wrapper(self, answer, updated=())
        for attr in ("__code__", "__defaults__", "__kwdefaults__", "__globals__", "__closure__"):
            if hasattr(answer, attr):
                setattr(self, attr, getattr(answer, attr))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(_ACTIVE, "watch", None) is not None:
            return self.answer(*args, **kwargs)  # an outer call of the answer watches already
        before = len(self.violations)
        previous, previous_threads = sys.getprofile(), threading.getprofile()
        watch = _Watch(self.policy, previous, self.violations)
        _ACTIVE.watch = watch
        threading.setprofile(_Watch(self.policy, previous_threads, self.violations))  # threads it starts
        sys.setprofile(watch)
        try:
            return self.answer(*args, **kwargs)
        finally:
            sys.setprofile(previous)
            threading.setprofile(previous_threads)
            _ACTIVE.watch = None
            if len(self.violations) > before:
                raise AnswerReachedIntoDtfkit(refusal(self.policy.exercise, self.violations[before:]))

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        return self if instance is None else types.MethodType(self, instance)

    def __getstate__(self) -> dict[str, Any]:
        return {"answer": self.answer, "policy": self.policy}

    def __setstate__(self, state: dict[str, Any]) -> None:
        GuardedAnswer.__init__(self, state["answer"], state["policy"])


def refusal(exercise: str, names: list[str], verb: str = "called") -> str:
    """The message for an answer that ``verb`` (called, or uses in its code) ``names`` (two named).

    Example::

        refusal("11.2", ["dtfkit.recipes.alpha_beta.alpha_beta_time"])
    """
    shown = _(" and ").join(_public_name(n) for n in names[:2])
    more = _(" (and {count} more)").format(count=len(names) - 2) if len(names) > 2 else ""
    return _(_REFUSALS[verb]).format(names=shown + more, exercise=exercise)


_REFUSALS = {
    "called": N_(
        "your answer called {names}: dtfkit's own code is not part of an answer to exercise {exercise}"
    ),
    "uses": N_("your answer uses {names}: dtfkit's own code is not part of an answer to exercise {exercise}"),
}


def _public_name(name: str) -> str:
    full = "dtfkit.diagnosis.diagnose"
    return "dtfkit.diagnose" if name == full or name.startswith(full + ".") else name


REFUSAL_HINT = N_(
    "write it yourself from the chapter's text: recipes, checks and diagnose are dtfkit's answers, not yours"
)


def guarded(
    answer: Callable, exercise: str, allowed: Iterable[str] = (), check_module: str | None = None
) -> GuardedAnswer:
    """Wrap ``answer`` for exercise ``exercise``: it may call ``allowed`` (and :data:`ALWAYS_ALLOWED`)."""
    return GuardedAnswer(answer, Policy(exercise, allowed, check_module))


__all__ = [
    "ALWAYS_ALLOWED",
    "AnswerReachedIntoDtfkit",
    "GuardedAnswer",
    "Policy",
    "guarded",
    "reached_names",
    "refusal",
    "refused_names",
]
