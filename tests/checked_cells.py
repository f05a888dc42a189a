"""Can a checked cell fail? Run its source, without TensorFlow, on wrong stand-ins for what earlier cells computed.

A cell whose first line is ``# NBVAL_CHECK_OUTPUT`` is compared by nbval with its committed output, so it
checks something only if a wrong result upstream changes what it prints or makes it raise. This module
runs such a cell's source alone, in a namespace where every name it reads but does not bind (``result``,
``cluster``, ``summaries``, a function an earlier cell defined) is a ``Wrong``: a stand-in whose
attributes, items, calls and arithmetic are ``Wrong`` again, whose ``repr`` is ``<wrong:name>``, and whose
comparisons and truth are all ``True`` in one run and all ``False`` in the other (``x == x`` stays
``True``: a tautology is not fooled). Imports of dtfkit, TensorFlow, Keras, IPython and matplotlib give a
``Wrong`` too, so nothing starts and the library cannot compute the expected value for the cell.

The verdict, from both runs:

- ``fails``: in some run the cell raised ``AssertionError`` (or an exception of its own ``raise``), or
  printed something else than its committed output. A wrong upstream result is seen.
- ``cannot fail``: in both runs it printed exactly its committed output: what it prints does not depend on
  what came before (a constant after asserts that always hold, or no assert at all).
- ``inconclusive``: it crashed on the stand-in itself (a ``TypeError`` from ``", ".join(...)`` of a
  ``Wrong``) in a way that says nothing about a wrong value. ``WRONG_VALUES`` in the test then gives the
  cell concrete wrong values (a count off by one, a byte count of another size) for the names that matter.

Each assert alone (``asserts_that_cannot_fail``): the cell runs with every other assert left out and
every comparison true, so that the assert is reached, and the assert's own test once with comparisons
false and once true. An assert that holds both times is a tautology over the run's values (``x == x``,
``len(x) >= 0``) or vacuous on an empty result, and checks nothing however many real asserts surround it.
An assert that reads nothing from earlier cells or imports at all is found statically (``constant_asserts``).

What this cannot see: an expected value computed by the same library as the value checked, when both
come from earlier cells (``report["tf2_partitions"] == [3]`` where the recipe returns the partitioner's
own argument). ``WRONG_VALUES`` in the test encodes such holes as concrete wrong results where it can;
the others are a reviewer's.

Example::

    verdict(cell_source, committed_output)            # Verdict("fails", "AssertionError at line 3 ...")
    verdict(src, out, wrong={"summaries": {...}})      # with concrete wrong values for some names
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import os
from dataclasses import dataclass
from typing import Any

STUBBED_MODULES = ("dtfkit", "tensorflow", "keras", "tf_keras", "IPython", "matplotlib", "ipywidgets")


class Wrong:
    """A wrong stand-in for any upstream value (see the module's docstring)."""

    truth = False  # what every comparison and bool() answers in the current run
    _ints = 0

    def __init__(self, label: str):
        object.__setattr__(self, "_label", label)

    def __getattr__(self, name: str) -> Wrong:
        if name.startswith("__"):
            raise AttributeError(name)
        return Wrong(f"{self._label}.{name}")

    def __setattr__(self, name: str, value: Any) -> None:
        pass

    def __getitem__(self, key: Any) -> Wrong:
        return Wrong(f"{self._label}[{key!r}]")

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Wrong:
        return Wrong(f"{self._label}()")

    def __iter__(self):
        return iter([Wrong(f"{self._label}[0]"), Wrong(f"{self._label}[1]")])

    def __len__(self) -> int:
        # 0 when comparisons are false (an empty result), 3 when true; never the 2 of the pairs it iterates
        return 3 if Wrong.truth else 0

    def __index__(self) -> int:
        return 2

    def __int__(self) -> int:  # a new number each time: int(a) == int(b) is not true by chance
        Wrong._ints += 1
        return 1_000_003 + Wrong._ints

    def __float__(self) -> float:
        return float("nan")

    def __bool__(self) -> bool:
        return Wrong.truth

    def __eq__(self, other: Any) -> bool:
        return other is self or Wrong.truth

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    def __lt__(self, other: Any) -> bool:
        return Wrong.truth

    __le__ = __gt__ = __ge__ = __lt__

    def __contains__(self, item: Any) -> bool:
        return Wrong.truth

    def __instancecheck__(self, instance: Any) -> bool:  # isinstance(x, dtfkit.TaskTimeout)
        return Wrong.truth

    def __subclasscheck__(self, cls: Any) -> bool:
        return Wrong.truth

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<wrong:{self._label}>"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __enter__(self) -> Wrong:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def _same(self, *args: Any) -> Wrong:
        return Wrong(f"({self._label} op)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _same
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __abs__ = _same
    __and__ = __rand__ = __or__ = __ror__ = __round__ = __pos__ = __invert__ = _same


@dataclass(frozen=True)
class Verdict:
    kind: str  # "fails", "cannot fail" or "inconclusive"
    why: str


def body(source: str) -> str:
    """The cell's Python: its marker line kept as a comment, IPython magics and shell lines left out."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def upstream_names(source: str) -> set[str]:
    """Names the cell reads but never binds: what earlier cells (or the kernel) gave it."""
    tree = ast.parse(body(source))
    loaded, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            bound |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        elif isinstance(node, ast.Lambda):
            bound |= {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound - set(dir(builtins))


def _open_for_reading(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
    """``open`` for a cell run on stand-ins: a path, read only (never a file descriptor a ``Wrong`` could
    turn into through ``__index__``, never a write)."""
    if not isinstance(file, (str, os.PathLike)) or any(c in mode for c in "wax+"):
        raise TypeError(
            f"a checked cell run on stand-ins opens paths for reading only, not {file!r} ({mode})"
        )
    return builtins.open(file, mode, *args, **kwargs)


def _own_builtins(real: tuple[str, ...]) -> dict[str, Any]:
    return dict(
        vars(builtins), __import__=_importer(real), open=_open_for_reading, display=lambda *a, **k: print(*a)
    )


def _importer(real: tuple[str, ...]):
    """``__import__`` that gives a ``Wrong`` for the stubbed modules, except the ``real`` ones."""

    def load(name: str, globals_=None, locals_=None, fromlist=(), level=0):
        if name.split(".")[0] in STUBBED_MODULES and not name.startswith(real or ("\0",)):
            return Wrong(name)
        return builtins.__import__(name, globals_, locals_, fromlist, level)

    return load


def _own_raise(tree: ast.AST, error: BaseException) -> bool:
    """Whether the cell itself raises this exception's class (``raise ValueError(...)``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id == type(error).__name__:
                return True
    return False


def run(
    source: str, truth: bool, wrong: dict[str, Any] | None = None, real: tuple[str, ...] = ()
) -> tuple[str, BaseException | None]:
    """``(printed, exception)`` of the cell run on ``Wrong`` stand-ins (``wrong`` overrides some;
    modules named in ``real``, e.g. ``("dtfkit.kube",)``, are imported for real)."""
    Wrong.truth = truth
    names = {name: Wrong(name) for name in upstream_names(source)}
    names.update(wrong or {})
    printed = io.StringIO()
    own_builtins = _own_builtins(real)
    namespace = {"__builtins__": own_builtins, "__name__": "__checked_cell__", **names}
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
            exec(compile(body(source), "<checked cell>", "exec"), namespace)
    except Exception as error:  # the verdict says which
        return printed.getvalue(), error
    return printed.getvalue(), None


def verdict(
    source: str, committed: str, wrong: dict[str, Any] | None = None, real: tuple[str, ...] = ()
) -> Verdict:
    """Whether wrong upstream values make the cell fail (see the module's docstring). A missing key
    or index (``LookupError``) is a failure too: the cell looked for something the result lacks."""
    tree = ast.parse(body(source))
    crashes = []
    for truth in (False, True):
        printed, error = run(source, truth, wrong, real)
        if error is not None and (
            isinstance(error, (AssertionError, LookupError)) or _own_raise(tree, error)
        ):
            line = error.__traceback__.tb_next.tb_lineno if error.__traceback__.tb_next else "?"
            return Verdict("fails", f"{type(error).__name__} at line {line} (comparisons {truth})")
        if error is None and printed != committed:
            return Verdict("fails", f"prints other text (comparisons {truth}): {printed[:80]!r}")
        if error is not None:
            crashes.append(f"{type(error).__name__}: {str(error)[:80]} (comparisons {truth})")
    if not crashes:
        return Verdict("cannot fail", "prints its committed output whatever the upstream values")
    return Verdict("inconclusive", "; ".join(crashes))


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def constant_asserts(source: str) -> list[str]:
    """The cell's asserts that read nothing from earlier cells or imports, even through its own
    variables: ``assert 2 * 3 == 6``, or ``n = 3`` then ``assert n > 0``. They hold whatever the run did."""
    tree = ast.parse(body(source))
    tainted = set(upstream_names(source))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            tainted |= {(a.asname or a.name).split(".")[0] for a in node.names}
    changed = True
    while changed:
        changed = False
        for node in ast.walk(tree):
            pairs: list[tuple[ast.AST, ast.AST]] = []
            if isinstance(node, ast.Assign):
                pairs = [(target, node.value) for target in node.targets]
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                pairs = [(node.target, node.value)]
            elif isinstance(node, (ast.For, ast.comprehension)):
                pairs = [(node.target, node.iter)]
            elif isinstance(node, ast.FunctionDef) and _names(node) & tainted and node.name not in tainted:
                tainted.add(node.name)
                changed = True
            for target, value in pairs:
                new = _names(target) - tainted if _names(value) & tainted else set()
                if new:
                    tainted |= new
                    changed = True
    return [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert) and not _names(node.test) & tainted
    ]


class _IsolateAssert(ast.NodeTransformer):
    """Keeps assert number ``k`` (in source order) alone, its test the only code that sees comparisons
    answer ``truth``; the other asserts are left out (they only check, and each gets its own turn)."""

    def __init__(self, k: int, truth: bool):
        self.k, self.seen, self.truth = k, 0, truth

    def visit_Assert(self, node: ast.Assert) -> Any:
        index, self.seen = self.seen, self.seen + 1
        if index != self.k:
            return ast.Pass()
        raised = ast.parse("raise AssertionError('isolated')").body[0]
        return ast.parse(f"__wrong_reached(); __wrong_truth({self.truth})").body + [
            ast.If(test=ast.UnaryOp(op=ast.Not(), operand=node.test), body=[raised], orelse=[]),
            *ast.parse("__wrong_truth(True)").body,
        ]


def asserts_that_cannot_fail(source: str, wrong: dict[str, Any] | None = None) -> list[str]:
    """The cell's asserts that hold whatever the upstream values: each assert is run alone, the rest of
    the cell with every comparison true (so that the assert is reached), and its own test once with every
    comparison false and once with every comparison true (a negated check, ``x != y`` or ``not any(...)``,
    fails on the second). An assert that holds both times is a tautology over the run's values
    (``x == x``, ``len(x) >= 0``, ``a or not a``)."""
    tree = ast.parse(body(source))
    asserts = sorted(
        (node for node in ast.walk(tree) if isinstance(node, ast.Assert)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    holding = []
    for k, node in enumerate(asserts):
        outcomes = []
        for truth in (False, True):
            isolated = ast.fix_missing_locations(_IsolateAssert(k, truth).visit(ast.parse(body(source))))
            reached: list[bool] = []
            _, error = _run_tree(isolated, source, wrong, reached)
            outcomes.append(error if reached else "not reached")
        if all(outcome is None for outcome in outcomes):
            holding.append(ast.unparse(node))
    return holding


def _run_tree(
    tree: ast.AST, source: str, wrong: dict[str, Any] | None, reached: list[bool]
) -> tuple[str, BaseException | None]:
    def set_truth(value: bool) -> None:
        Wrong.truth = value

    Wrong.truth = True
    names = {name: Wrong(name) for name in upstream_names(source)}
    names.update(wrong or {})
    own_builtins = _own_builtins(())
    namespace = {
        "__builtins__": own_builtins,
        "__name__": "__checked_cell__",
        "__wrong_truth": set_truth,
        "__wrong_reached": lambda: reached.append(True),
        **names,
    }
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
            exec(compile(tree, "<checked cell>", "exec"), namespace)
    except Exception as error:  # the caller tells which
        return printed.getvalue(), error
    return printed.getvalue(), None
