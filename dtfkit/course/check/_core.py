"""What every exercise check shares: the result object, the decorator, a bounded cluster.

A chapter module defines one function per exercise::

    @exercise("2.1", "Fix the non-chief hang")
    def device_filters(session_config, *, hidden=False):
        ...                       # run the answer for real
        return passed("worker:1 trained alone after worker:0 exited")

The decorator turns a stub (``raise NotImplementedError()``) into "not attempted" without
starting anything, turns any exception into a failed result naming it, and records every
result (``results()``, ``summary()``).
"""

from __future__ import annotations

import dis
import functools
import html
import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from dtfkit.course import classroom
from dtfkit.course.check._guard import (
    REFUSAL_HINT,
    AnswerReachedIntoDtfkit,
    GuardedAnswer,
    Policy,
    refusal,
    refused_names,
)
from dtfkit.errors import TaskExited, TaskFailed, TaskTimeout
from dtfkit.i18n import N_, _

# Kept in English in the result (tests and nbgrader read them); shown through _().
PASSED, FAILED, NOT_ATTEMPTED = N_("passed"), N_("failed"), N_("not attempted yet")
_MARK = {PASSED: "✔", FAILED: "✘", NOT_ATTEMPTED: "…"}
_COLOUR = {PASSED: "#2e7d32", FAILED: "#c62828", NOT_ATTEMPTED: "#757575"}
_RESULTS: list[CheckResult] = []
# A check's variant source: a hidden variant draws its numbers from it (None: a fresh one).
Rng = random.Random | None


@dataclass
class CheckResult:
    """The outcome of one check: ``status`` is "passed", "failed" or "not attempted yet".

    ``message`` says what happened, ``hint`` what to look at. ``bool(result)`` is True only
    when it passed; ``require()`` raises ``AssertionError`` otherwise (for nbgrader).

    Example::

        result = check.ch03.backup_workers(sync_options)
        print(result)   # ✔ exercise 3.1 (Backup workers) passed: ...
    """

    status: str
    message: str
    hint: str = ""
    exercise: str = ""
    title: str = ""
    details: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __bool__(self) -> bool:
        return self.passed

    def headline(self) -> str:
        return _("{mark} exercise {number} ({title}) {status}: {message}").format(
            mark=_MARK[self.status],
            number=self.exercise,
            title=_(self.title),
            status=_(self.status),
            message=self.message,
        )

    def __str__(self) -> str:
        lines = [self.headline()]
        if self.hint:
            lines.append(f"  → {self.hint}")
        lines += [f"  {d}" for d in self.details]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = _COLOUR[self.status]
        heading = _("{mark} exercise {number} — {title}: {status}").format(
            mark=_MARK[self.status], number=self.exercise, title=_(self.title), status=_(self.status)
        )
        body = f"<b>{html.escape(heading)}</b><br>{html.escape(self.message)}"
        if self.hint:
            body += f"<br>→ {html.escape(self.hint)}"
        if self.details:
            body += "<pre style='margin:4px 0 0 0'>" + html.escape("\n".join(self.details)) + "</pre>"
        return f"<div style='border-left:6px solid {colour};padding:4px 10px;margin:2px 0'>{body}</div>"

    def require(self) -> CheckResult:
        """Raise ``AssertionError`` with the feedback unless the check passed (nbgrader grades on it)."""
        if not self.passed:
            raise AssertionError(str(self))
        return self


def passed(message: str, *details: str) -> CheckResult:
    """A passing result (keep ``message`` deterministic: no timings, pids or losses)."""
    return CheckResult(PASSED, message, details=list(details))


def failed(message: str, hint: str = "", *details: str) -> CheckResult:
    """A failing result: ``message`` says what happened (name the task), ``hint`` what to look at."""
    return CheckResult(FAILED, message, hint, details=list(details))


def results() -> list[CheckResult]:
    """Every check result of this session, in order."""
    return list(_RESULTS)


def summary() -> str:
    """One line per exercise: its latest result."""
    latest: dict[str, CheckResult] = {}
    for r in _RESULTS:
        latest[r.exercise] = r
    return "\n".join(latest[k].headline() for k in sorted(latest, key=_exercise_key))


def _exercise_key(number: str) -> tuple[int, ...]:
    return tuple(int(p) for p in number.split(".") if p.isdigit())


_STUB_OPS = {
    "RESUME",
    "NOP",
    "CACHE",
    "PUSH_NULL",
    "LOAD_GLOBAL",
    "LOAD_NAME",
    "LOAD_CONST",
    "PRECALL",
    "CALL",
    "CALL_FUNCTION",
    "RAISE_VARARGS",
    "RETURN_CONST",
    "RETURN_VALUE",
}


def is_stub(fn: Any) -> bool:
    """True when ``fn`` is still a student copy's stub: its body only raises ``NotImplementedError``,
    or its source still holds the generator's ``# YOUR CODE HERE`` + ``raise NotImplementedError()``."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    if (
        set(code.co_names) == {"NotImplementedError"}
        and {i.opname for i in dis.get_instructions(code)} <= _STUB_OPS
    ):
        return True
    try:
        lines = [line.strip() for line in inspect.getsource(fn).splitlines()]
    except (OSError, TypeError):
        return False
    return any((a, b) == classroom.STUB for a, b in zip(lines, lines[1:], strict=False))


def _not_attempted(name: str) -> CheckResult:
    return CheckResult(
        NOT_ATTEMPTED,
        _(
            "replace `raise NotImplementedError()` in {name} with your answer, run that cell, then this one"
        ).format(name=name),
    )


def _from_exception(exc: BaseException, name: str) -> CheckResult:
    if isinstance(exc, NotImplementedError) or (
        isinstance(exc, TaskFailed) and exc.exc_type == "NotImplementedError"
    ):
        return _not_attempted(name)
    if isinstance(exc, AnswerReachedIntoDtfkit):
        return failed(str(exc), _(REFUSAL_HINT))
    if isinstance(exc, TaskFailed) and exc.exc_type == AnswerReachedIntoDtfkit.__name__:
        return failed(
            _("in {task}, {remote_message}").format(
                task=exc.task, remote_message=exc.remote_message.strip()[:300]
            ),
            _(REFUSAL_HINT),
        )
    if isinstance(exc, TaskFailed):
        tail = [line for line in exc.remote_traceback.strip().splitlines() if line.strip()][-4:]
        return failed(
            _("{task} raised {exc_type} while running {name}: {remote_message}").format(
                task=exc.task,
                exc_type=exc.exc_type,
                name=name,
                remote_message=exc.remote_message.strip()[:300],
            ),
            _("read the last lines of the task's traceback below"),
            *tail,
        )
    if isinstance(exc, TaskTimeout):
        first = str(exc).strip().splitlines()[0][:300]
        return failed(
            _("{name} did not finish in time: {first}").format(name=name, first=first),
            _("a task is waiting for something; see its stack"),
            *_stack_tails(exc.stacks),
        )
    if isinstance(exc, TaskExited):
        return failed(
            _("a task exited while running {name}: {str_exc_300}").format(
                name=name, str_exc_300=str(exc)[:300]
            )
        )
    return failed(
        _("{name} raised {__name__}: {str_exc_300}").format(
            name=name, __name__=type(exc).__name__, str_exc_300=str(exc)[:300]
        ),
        _("fix the error and run the check again"),
    )


def _stack_tails(stacks: dict[str, str], lines: int = 8) -> list[str]:
    """The innermost ``lines`` lines of each stuck task's stack: where it waited, in the result itself (so
    that ``require()``'s error, the one nbgrader and CI keep, says it too)."""
    tails = []
    for task, stack in sorted(stacks.items()):
        kept = [line for line in stack.strip().splitlines() if line.strip()][-lines:]
        tails += [f"{task}:"] + [f"  {line}" for line in kept]
    return tails


def exercise(
    number: str,
    title: str,
    *,
    allowed: tuple[str, ...] = (),
    reads: tuple[str | None, ...] = (),
    varies: str = "",
) -> Callable[[Callable[..., CheckResult]], Callable[..., CheckResult]]:
    """Decorate a chapter's check: stubs, exceptions, numbering and recording are handled here.

    The answer reaches the check wrapped (``_guard.GuardedAnswer``): an answer whose code names
    dtfkit's modules or functions, or that calls into them while it runs (in the kernel or in a
    task), is refused with the name of what it called. ``allowed`` lists the dtfkit names this
    exercise's answers may use (a helper the exercise's cell imports, say), beyond
    ``_guard.ALWAYS_ALLOWED``; stand-ins the check hands over (methods and nested functions of
    the check's own module) are allowed too. ``reads`` and ``varies``, when given, are ``ignores``'
    ``names`` and ``role``: an answer that never reads a parameter the check varies fails before the
    check runs.

    Example::

        @exercise("3.1", "Backup workers")
        def backup_workers(sync_options, *, hidden=False):
            return passed("...")
    """

    def decorate(check: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
        def checked(watched: Any, *args: Any, **kwargs: Any) -> CheckResult:
            problem = ignores(watched, reads, varies) if reads else None
            return problem if problem is not None else check(watched, *args, **kwargs)

        @functools.wraps(check)
        def run(answer: Any, *args: Any, hidden: bool = False, **kwargs: Any) -> CheckResult:
            name = f"`{getattr(answer, '__name__', None) or _('your answer')}`"
            if not callable(answer):
                result = failed(
                    _("expected a function, got {__name__}").format(__name__=type(answer).__name__),
                    _("pass the function itself"),
                )
            elif is_stub(answer):
                result = _not_attempted(name)
            else:
                result = _guarded_check(
                    checked, answer, Policy(number, allowed, check.__module__), name, args, hidden, kwargs
                )
            result.exercise, result.title = number, title
            _RESULTS.append(result)
            return result

        run.exercise, run.allowed = number, tuple(allowed)  # type: ignore[attr-defined]
        return run

    return decorate


def _guarded_check(
    check: Callable[..., CheckResult],
    answer: Any,
    policy: Policy,
    name: str,
    args: tuple,
    hidden: bool,
    kwargs: dict[str, Any],
) -> CheckResult:
    """Run ``check`` on the answer, wrapped so that reaching into dtfkit is refused (see ``_guard``)."""
    refused = refused_names(answer, policy)
    if refused:
        return failed(refusal(policy.exercise, refused, "uses"), _(REFUSAL_HINT))
    watched = GuardedAnswer(answer, policy)
    try:
        result = check(watched, *args, hidden=hidden, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every mistake becomes feedback
        result = _from_exception(exc, name)
    if watched.violations:  # even where the check caught what the answer raised
        return failed(refusal(policy.exercise, watched.violations), _(REFUSAL_HINT))
    return result


def is_number(value: object) -> TypeGuard[int | float]:
    """True for an int or a float, not a bool (an answer's ``True`` is no number of bytes or seconds)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _reads(code: Any) -> set[str]:
    """Names a code object (and the functions, lambdas and comprehensions inside it) reads."""
    loads = ("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE")
    names: set[str] = set()
    for i in dis.get_instructions(code):
        if i.opname.startswith(loads):  # Python 3.13's LOAD_FAST_LOAD_FAST reads two names at once
            names.update(i.argval if isinstance(i.argval, tuple) else (i.argval,))
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _reads(const)
    return names


def unread_parameters(fn: Any, names: tuple[str | None, ...]) -> list[str | None]:
    """The parameters among ``names`` that ``fn`` never reads: an answer that ignores an argument
    the check varies gives the same result for every variant (a hard-coded answer).

    Only positional parameters count, by position, so a learner's own parameter names are fine.

    Example::

        unread_parameters(lambda tf, a, b: a, ("tf", "a", "b"))   # ['tf', 'b']
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    params = code.co_varnames[: code.co_argcount]
    read = _reads(code)
    return [want for want, have in zip(names, params, strict=False) if have not in read]


def ignores(fn: Any, names: tuple[str | None, ...], role: str) -> CheckResult | None:
    """A failed result when ``fn`` never reads one of the parameters the check varies, else None.

    ``names`` are the parameters in order (as the exercise names them; ``None`` for one an answer may
    ignore); ``role`` says what the check varies, for the message.

    Example::

        problem = ignores(build, ("tf", "variables_on", "compute_on"), "the devices")
    """
    unread = [n for n in unread_parameters(fn, names) if n not in ("tf", None)]
    if not unread:
        return None
    name = getattr(fn, "__name__", None) or _("your answer")
    listed = _(" and ").join(f"`{n}`" for n in unread)
    return failed(
        _(
            "{name} never reads {listed}: the check calls it with {role} the text does not name, so an answer written for the text's example alone gives a wrong result there"
        ).format(name=name, listed=listed, role=_(role)),
        (
            _("use the arguments {listed} instead of fixed values")
            if len(unread) > 1
            else _("use the argument {listed} instead of fixed values")
        ).format(listed=listed),
    )


def cluster(**layout: Any) -> Any:
    """A small, quiet, unnamed ``LocalCluster`` for one check (``LocalCluster`` arguments); use it in a ``with``
    block, which closes it.

    Example::

        with cluster(ps=1, workers=2) as c:
            c.run(fn, timeout=60)
    """
    from dtfkit.cluster import LocalCluster

    return LocalCluster(name="", **{"progress": False, **layout})


__all__ = [
    "CheckResult",
    "classroom",
    "cluster",
    "exercise",
    "failed",
    "ignores",
    "is_stub",
    "passed",
    "results",
    "summary",
    "unread_parameters",
]
