"""What a reader reads in a code cell, as translation units: its comments, and the strings it prints or draws.

A chapter's code is one program in every language. What a learner reads of it is its comments and the
sentences it prints (``print``) or draws (a figure's title, axis labels, legend labels, notes); those are
cut out as units, translated in the chapter's catalog beside its prose, and put back where they were. Every
other token stays the English chapter's (``tests/test_translations.py`` compares them), so a translated
chapter runs the same program.

- A **comment** unit is the text after ``#`` (a whole-line or a trailing comment). Comments the tools read
  are left alone: ``# NBVAL_CHECK_OUTPUT``, nbgrader's ``### BEGIN SOLUTION`` markers, ``# YOUR CODE HERE``,
  ``# check exercise N.M``, ``# noqa``/``# type:`` and ``%%``/``!`` lines.
- A **string** unit is the body of a string literal (an f-string's placeholders included, which a translation
  must keep) that is an argument of ``print(...)`` or ``HTML(...)`` (an element of a list there too, a method
  called on it, the text a ``", ".join(...)`` joins), a function's docstring, of a figure's ``set_title``/``set_xlabel``/``set_ylabel``/
  ``suptitle``/``annotate``/``text``, or a ``label=``/``title=`` keyword, or a key of a ``{label: run}`` dict
  given to one of dtfkit's ``plot_...`` functions; a sentence that reaches such a call through a name
  that nothing else reads (assigned to the name or to an item of it, or an element of a literal list, tuple or
  dict that a ``for`` loop walks over, bound to a loop variable the loop only shows); also one joined with ``+``, chosen by
  ``if``/``else``, or formatted with ``.format(...)`` there. A literal without a letter is left alone.

Example::

    >>> [(u.kind, u.text) for u in code_units('print(f"{n} workers")  # the count')]
    [('string', '{n} workers'), ('comment', 'the count')]
    >>> translate_code('print(f"{n} workers")  # the count', {"{n} workers": "{n} 个 worker", "the count": "个数"})
    'print(f"{n} 个 worker")  # 个数'
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dtfkit.course.listing import docstrings, has_words, line_offsets, string_body

# Calls whose string arguments a reader sees: printed, or drawn on a figure.
SHOWN_CALLS = {
    "print",
    "HTML",
    "bar",
    "barh",
    "set_title",
    "set_xlabel",
    "set_ylabel",
    "suptitle",
    "annotate",
    "text",
    "set_text",
}
SHOWN_KEYWORDS = {"label", "title", "xlabel", "ylabel"}
# Comments a tool reads: never translated.
_TOOL_COMMENT = re.compile(
    r"^#+\s*(NBVAL_|BEGIN |END |YOUR CODE HERE|check exercise|noqa|type:|pragma|fmt:|ruff:)|^#!"
)


@dataclass(frozen=True)
class CodeUnit:
    """One unit of a code cell: ``kind`` "comment" or "string", the ``text`` a translator sees, and where
    its text lies in the cell (``start``, ``end``: offsets into the cell's source)."""

    kind: str
    text: str
    start: int
    end: int


def _call_name(call: ast.Call) -> str | None:
    """``f`` for ``f(...)``, ``m`` for ``x.m(...)``."""
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)


def _shown_literals(tree: ast.AST) -> list[ast.Constant | ast.JoinedStr]:
    """The string literals a reader sees: arguments of the calls in ``SHOWN_CALLS`` (and ``label=`` ...)."""
    found: list[ast.Constant | ast.JoinedStr] = []

    def take(node: ast.AST) -> None:
        if isinstance(node, ast.JoinedStr) or (
            isinstance(node, ast.Constant) and isinstance(node.value, str)
        ):
            found.append(node)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            take(node.left)
            take(node.right)
        elif isinstance(node, ast.IfExp):
            take(node.body)
            take(node.orelse)
        elif isinstance(node, ast.BoolOp):  # x or "no known mistake"
            for value in node.values:
                take(value)
        elif isinstance(node, (ast.List, ast.Tuple)):  # ax.barh(["sparse lookup", "dense read"], ...)
            for element in node.elts:
                take(element)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            # "x".format(...), "variable".ljust(16); ", ".join(f"{t} in {w}" for ...): the joined text too
            take(node.func.value)
            if (
                node.func.attr == "join"
                and node.args
                and isinstance(node.args[0], (ast.GeneratorExp, ast.ListComp))
            ):
                take(node.args[0].elt)

    def shown_calls(where: ast.AST) -> list[ast.Call]:
        return [n for n in ast.walk(where) if isinstance(n, ast.Call) and _call_name(n) in SHOWN_CALLS]

    def names_read(calls: list[ast.Call]) -> set[str]:
        return {n.id for call in calls for a in call.args for n in ast.walk(a) if isinstance(n, ast.Name)}

    def only_shown(where: Sequence[ast.AST]) -> set[str]:
        """The names read in ``where`` only by shown calls: a name also read elsewhere is data (a key, a
        value compared), whose literals must stay as they are."""

        def shown_as_text(node: ast.AST) -> list[ast.AST]:
            # the name itself, an item of it (outcomes[name]: the items are shown, name is a key), or either in
            # an f-string's {...}: shown as text, not used as a key or an argument
            if isinstance(node, ast.Name):
                return [node]
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                return [node.value]
            if isinstance(node, ast.JoinedStr):
                return [
                    n
                    for v in node.values
                    if isinstance(v, ast.FormattedValue)
                    for n in shown_as_text(v.value)
                ]
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                return shown_as_text(node.left) + shown_as_text(node.right)
            return []

        inside = {id(n) for w in where for c in shown_calls(w) for a in c.args for n in shown_as_text(a)}
        # outcomes[name] = "...": an item stored, not the name read
        inside |= {
            id(n.value)
            for w in where
            for n in ast.walk(w)
            if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store)
        }
        loads = [
            n for w in where for n in ast.walk(w) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        ]
        return {n.id for n in loads} - {n.id for n in loads if id(n) not in inside}

    def take_sentences(node: ast.AST) -> None:
        # Through a name, only sentences (two words in a row): a single word there is too often a key.
        before = len(found)
        take(node)
        found[before:] = [n for n in found[before:] if _SENTENCE.search(_literal_text(n))]

    # A literal that reaches a shown call through a name that nothing else reads: assigned to it (or to an
    # item of it), or an element of a literal container a loop walks over to show its loop variable.
    shown_only = only_shown([tree])
    containers: dict[str, ast.AST] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                base = target.value if isinstance(target, ast.Subscript) else target
                if isinstance(base, ast.Name) and base.id in shown_only:
                    take_sentences(node.value)
                if isinstance(target, ast.Name) and isinstance(node.value, (ast.Dict, ast.List, ast.Tuple)):
                    containers[target.id] = node.value
    for node in ast.walk(tree):
        if not isinstance(node, ast.For):
            continue
        shown_here = only_shown(node.body)
        walked: ast.AST = node.iter
        method: str | None = None
        if isinstance(walked, ast.Call) and isinstance(walked.func, ast.Attribute) and not walked.args:
            method = walked.func.attr
            walked = walked.func.value
        if isinstance(walked, ast.Name):
            walked = containers.get(walked.id, walked)
        # (the loop variable an element is bound to, the element)
        if isinstance(walked, ast.Dict) and method in (None, "keys", "items"):
            key_target = node.target
            if method == "items" and isinstance(node.target, ast.Tuple) and len(node.target.elts) == 2:
                key_target = node.target.elts[0]
            bound = [(key_target, key) for key in walked.keys if key is not None]
        elif isinstance(walked, (ast.List, ast.Tuple)) and method is None:
            bound = []
            for element in walked.elts:
                if isinstance(element, ast.Tuple) and isinstance(node.target, ast.Tuple):
                    bound += list(zip(node.target.elts, element.elts, strict=False))
                else:
                    bound.append((node.target, element))
        else:
            bound = []
        for target, element in bound:
            if isinstance(target, ast.Name) and target.id in shown_here:
                if isinstance(element, (ast.Constant, ast.JoinedStr)):
                    take_sentences(element)

    for docstring in docstrings(tree):  # a function's docstring: what the learner reads of an exercise's stub
        take(docstring)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        if name in SHOWN_CALLS:
            for argument in node.args:
                take(argument)
        elif name and name.startswith("plot_"):  # dtfkit's plots draw a {label: run} argument's labels
            for argument in node.args:
                if isinstance(argument, ast.Dict):
                    for key in argument.keys:
                        if key is not None:
                            take(key)
        for keyword in node.keywords:
            if keyword.arg in SHOWN_KEYWORDS or (name in SHOWN_CALLS and keyword.arg is None):
                take(keyword.value)
    return found


_SENTENCE = re.compile(r"[A-Za-z]{2,}[ ,;:]+[A-Za-z]{2,}|[\u3400-\u9fff]")  # (a translated sentence too)


def _literal_text(node: ast.AST) -> str:
    """A literal's words, an f-string's placeholders left out."""
    if isinstance(node, ast.JoinedStr):
        return " ".join(
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def as_python(source: str) -> str | None:
    """A code cell as Python: its IPython line magics blanked with a comment of the same length (offsets stay);
    None for a cell that is not Python at all (a ``%%`` cell magic, a ``!`` shell line first).

    Example::

        >>> as_python("%matplotlib inline") == "#" + " " * 17, as_python("%%bash") is None
        (True, True)
    """
    if source.lstrip().startswith(("%%", "!")):
        return None
    return "\n".join(
        "#" + " " * (len(line) - 1) if line.lstrip().startswith(("%", "!")) else line
        for line in source.split("\n")
    )


def code_units(source: str, *, every: bool = False) -> list[CodeUnit]:
    """The units of one code cell, in the order they appear; [] for a cell that is not Python (a ``%%`` cell
    magic) or does not parse. ``every``: also the comments and shown literals without a word to translate
    (in any language: what ``skeleton`` blanks).

    Example::

        >>> [u.text for u in code_units('ax.set_title("loss")\\nx = "not shown"')]
        ['loss']
    """
    runnable = as_python(source)
    if runnable is None:
        return []
    try:
        tree = ast.parse(runnable)
        tokens = list(tokenize.generate_tokens(io.StringIO(runnable).readline))
    except (SyntaxError, tokenize.TokenError, IndentationError):
        return []
    starts = line_offsets(runnable)
    lines = runnable.split("\n")

    def column(line: int, byte_offset: int) -> int:
        # ast counts a column in UTF-8 bytes, tokenize in characters (a Chinese word is 3 bytes a character).
        return len(lines[line - 1].encode("utf-8")[:byte_offset].decode("utf-8", errors="ignore"))

    shown = set()
    for n in _shown_literals(tree):
        assert n.end_lineno is not None and n.end_col_offset is not None  # ast.parse sets both on every expr
        shown.add(
            (n.lineno, column(n.lineno, n.col_offset), n.end_lineno, column(n.end_lineno, n.end_col_offset))
        )
    units: list[CodeUnit] = []
    for token in tokens:
        begin = starts[token.start[0]] + token.start[1]
        if token.type == tokenize.COMMENT:
            if _TOOL_COMMENT.search(token.string):
                continue
            body = token.string.lstrip("#")
            text = body.strip()
            if every or has_words(text):
                offset = begin + len(token.string) - len(body) + (len(body) - len(body.lstrip()))
                units.append(CodeUnit("comment", text, offset, offset + len(text)))
        elif token.type == tokenize.STRING:
            inside = any(
                (line, col) <= token.start and token.end <= (end_line, end_col)
                for line, col, end_line, end_col in shown
            )
            where = string_body(token.string) if inside else None
            if where is None:
                continue
            text = token.string[where[0] : where[1]]
            if every or has_words(text):
                units.append(CodeUnit("string", text, begin + where[0], begin + where[1]))
    return units


def skeleton(source: str) -> str:
    """The cell with every comment and every shown literal's body blanked (``…``, the literal's ``{fields}``
    kept): what a translation must leave as it is. Two editions of a cell run the same program when their skeletons are equal.

    Example::

        >>> skeleton('print(f"{n} workers")  # count') == skeleton('print(f"{n} 个 worker")  # 个数')
        True
    """
    out = source
    for unit in sorted(code_units(source, every=True), key=lambda u: u.start, reverse=True):
        kept = "".join(sorted(placeholders(unit.text))) if unit.kind == "string" else ""
        out = out[: unit.start] + "…" + kept + out[unit.end :]
    return out


def translate_code(source: str, translations: Mapping[str, str]) -> str:
    """The cell with each unit that has a translation replaced by it; the rest as it was.

    Example::

        >>> translate_code('print("done")', {"done": "完成"})
        'print("完成")'
    """
    out = source
    for unit in sorted(code_units(source), key=lambda u: u.start, reverse=True):
        translated = translations.get(unit.text)
        if translated:
            out = out[: unit.start] + translated + out[unit.end :]
    return out


def placeholders(text: str) -> list[str]:
    """An f-string body's ``{...}`` fields, in order (a translation must keep every one).

    Example::

        >>> placeholders("{n} workers, {rate:.1f} steps/s")
        ['{n}', '{rate:.1f}']
    """
    return re.findall(r"(?<!\{)\{[^{}]+\}(?!\})", text)
