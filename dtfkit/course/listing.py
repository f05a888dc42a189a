"""Source code a chapter lists for its reader, with its comments and docstrings in the reader's language.

Chapters print parts of dtfkit's own code for the learner to read: the tutorial's MNIST script
(chapters 2 and 3) and the two hand-built all-reduces (chapter 9). The code is the code; what a
person reads of it, its comments and docstrings, goes through the library's catalog like every word
dtfkit shows (``python -m dtfkit translations extract`` collects them from the files of ``LISTED``).

Example::

    >>> print(in_the_language("x = 1  # one"))   # English, or the catalog's words for "one"
    x = 1  # one
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dtfkit.i18n import _

PACKAGE = Path(__file__).resolve().parents[1]
# The functions a chapter lists, by file (relative to the repository); their comments and docstrings are
# units of the library's catalog.
LISTED = {
    "dtfkit/examples/distributed_mnist.py": ("run_worker", "main"),  # chapters 2 and 3 (tutorial_script.show)
    "dtfkit/recipes/allreduce/task_side.py": ("build_ring", "build_ps"),  # chapter 9 (show_source)
    "dtfkit/recipes/failures/task_side.py": ("op_then_strategy",),  # chapter 12 (source_without_docstring)
}
_TOOL_COMMENT = re.compile(r"^#+\s*(noqa|type:|pragma|fmt:|ruff:)|^#!")


def listing_units(source: str, *, every: bool = False) -> list[tuple[int, int, str]]:
    """``(start, end, text)`` for each comment and docstring of ``source``: where its words lie in the
    source (offsets) and the text a translator sees (a docstring without its indentation). ``every``: also
    the comments without an English word (a translated one, say).

    Example::

        >>> listing_units("def f():\\n    'Add.'\\n    return 1  # one\\n")
        [(14, 18, 'Add.'), (36, 39, 'one')]
    """
    starts = line_offsets(source)
    at_docstrings = {d.lineno for d in docstrings(ast.parse(source))}
    units = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        begin = starts[token.start[0]] + token.start[1]
        if token.type == tokenize.COMMENT and not _TOOL_COMMENT.search(token.string):
            body = token.string.lstrip("#")
            text = body.strip()
            if text and (every or has_words(text)):
                offset = begin + len(token.string) - len(body) + (len(body) - len(body.lstrip()))
                units.append((offset, offset + len(text), text))
        elif token.type == tokenize.STRING and token.start[0] in at_docstrings:
            where = string_body(token.string)
            if where is not None:
                body = token.string[where[0] : where[1]]
                units.append((begin + where[0], begin + where[1], inspect.cleandoc(body)))
    return units


def in_the_language(source: str, *, docstrings: bool = True) -> str:
    """``source`` with each comment and docstring in the language dtfkit speaks here (``set_language``); the
    code as it is. A docstring's translated lines take the indentation its English lines had;
    ``docstrings=False`` keeps them English, and every line where it was (for a listing numbered as the file)."""
    out = source
    for start, end, text in sorted(listing_units(source), reverse=True):
        if not docstrings and source[start - 1] in "\"'":
            continue
        translated = _(text)
        if translated == text:
            continue
        original = source[start:end]
        if "\n" in original:
            indent = re.search(r"\n([ \t]*)\S", original)
            margin = indent.group(1) if indent else ""
            first, *rest = translated.split("\n")
            translated = "\n".join([first, *(margin + line if line else line for line in rest)])
            if original.endswith("\n" + margin):  # the closing quotes on a line of their own
                translated += "\n" + margin
        out = out[:start] + translated + out[end:]
    return out


def show_source(function: Callable[..., Any]) -> None:
    """Print a function's source as ``inspect.getsource`` gives it, its comments and docstring in the
    language dtfkit speaks here.

    Example::

        from dtfkit.recipes import allreduce
        show_source(allreduce.build_ring)
    """
    print(in_the_language(inspect.getsource(function)), end="")


def listed_messages() -> list[tuple[str, str]]:
    """``(text, "path:line")`` for each comment and docstring of the ``LISTED`` functions: the catalog's units."""
    found = []
    for relative, names in LISTED.items():
        source = (PACKAGE.parent / relative).read_text(encoding="utf-8")
        spans = [
            (node.lineno, node.end_lineno)
            for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef) and node.name in names
        ]
        for start, _end, text in listing_units(source):
            line = source.count("\n", 0, start) + 1
            if any(first <= line <= (last or first) for first, last in spans):
                found.append((text, f"{relative}:{line}"))
    return found


# ------------------------------------------------------- reading source (edition/code_units.py uses these too)
def line_offsets(source: str) -> list[int]:
    """The offset of each line's first character (lines numbered from 1, as ``ast`` and ``tokenize`` do)."""
    starts, total = [0, 0], 0
    for line in source.splitlines(keepends=True):
        total += len(line)
        starts.append(total)
    return starts


def docstrings(tree: ast.AST) -> list[ast.Constant]:
    """The docstrings of a parsed source: its module's, its classes' and its functions'.

    Example::

        >>> [d.value for d in docstrings(ast.parse("def f():\\n    'Add.'\\n    return 1"))]
        ['Add.']
    """
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    found.append(first.value)
    return found


def string_body(token_text: str) -> tuple[int, int] | None:
    """Where the body of one string token lies in it (after its prefix and opening quotes), or None."""
    match = re.match(r"(?i)([rbuf]{0,2})('''|\"\"\"|'|\")", token_text)
    if not match or "b" in match.group(1).lower():
        return None
    quote = match.group(2)
    start = match.end()
    end = len(token_text) - len(quote)
    return (start, end) if end >= start and token_text.endswith(quote) else None


# A word a reader reads: two letters or more, not part of a name such as ``worker:0``, ``ps_strategy`` or
# ``tf.Variable`` (a colon followed by a space ends a label, ``stuck:``; one followed by more is a name).
_WORD = re.compile(r"(?<![\w:./\-'`])[A-Za-z]{2,}(?![\w./(\-'`])(?!:\S)")


def has_words(text: str) -> bool:
    """True when ``text`` (placeholders left out) has a word to translate, not only names and numbers.

    Example::

        >>> has_words("{task}: ps:0 ->"), has_words("steps/s: {rate}"), has_words("the loss went down")
        (False, False, True)
    """
    return bool(_WORD.search(re.sub(r"\{[^{}]*\}", " ", text)))
