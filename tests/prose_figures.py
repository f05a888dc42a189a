"""The figures a chapter's markdown states, and whether the chapter's outputs show them.

A chapter's prose may state a figure about its own run (a time, a size, a ratio, a percentage,
"N× faster") or an ordering ("faster than", "slower than") only where the chapter's outputs show
it. Everything else a sentence may say with a figure is marked, so that a reader of the source
sees why it is not an output:

- ``> a blockquote``: a quotation (a log line, a paper, another project's documentation).
- ``$2(N-1)/N$`` or an inline code span: a formula or code, not a claim about the run.
- ``<!-- cite: TensorFlow's SessionManager -->``: the sentence cites a source (a default value in
  TensorFlow's code, a paper, another library), not this run.
- ``<!-- formula -->``: the figures of the sentence are arithmetic on the chapter's settings or a
  model's prediction (``4 × 400 kB / 12.5 MB/s ≈ 0.13 s``), not a measurement.
- ``<!-- setting: dtfkit/recipes/fault/task_side.py, step_ms=20 -->``: the figures of the sentence are settings
  of the run that the notebook's own code does not show (a recipe's default, the check's timeout), or
  what an exercise asks the learner to set.
- ``<!-- derived: 2098.9 / 421.5 = 5.0 -->``: a figure computed from outputs. Every operand must
  appear in the outputs and the expression must round to the figure after ``=``, which is then
  accepted in the sentence (several ``derived`` marks may follow one another).
- ``<!-- shown: ring all-reduce -->``: for an ordering, the text of the output that shows it
  (it must occur in some output of the chapter).

A mark covers the sentence it is written in; one written right after a sentence's full stop
belongs to that sentence. HTML comments render as nothing on GitHub and in JupyterLab.

A figure is *shown* when a number of some output rounds to it (``2099 ms`` for ``2098.9``;
``1,234`` and ``1234`` are one number; ``5.4 kB`` is not ``5357 B``); a time, a percentage or a
ratio must be printed with its unit (``30 s``, ``85%``, ``1.4x``), since a bare 30 of a table shows
no 30 seconds. After "about", "≈", "~", "more than", "at least" and the like, a figure is
approximate: an output within its last digit's half unit or 10 % shows it. A time or a rate that
the chapter's code sets (``straggler_ms=50``, ``{"step_ms": 20}``, ``delay="20ms"``,
``link="100mbit"``) is a setting of the run, not a result, and needs no mark in the same unit
(``50 ms``, ``100 Mbit/s``; not ``12.5 MB/s``, which is a formula); so does a figure whose number
the sentence's own code span sets (``every 1.5 s`` beside ``dump_traceback_later(1.5, ...)``). An ordering ("faster than")
rests on two times of its sentence, which must not say the opposite, or on a ratio ("1.4× the
time"), or on a ``shown`` mark. The notices of slow cells ("*The next cell takes about 30 s on 2
cores.*", in Chinese "*下一个单元格在 2 核上大约需要 30 s。*") are checked against the recorded durations by ``test_notebook_layout.py`` and skipped.

What this cannot see: a claim made in words alone ("the crossover lies between the sizes where the
order swaps") and whether a ``cite``/``formula``/``setting`` mark is honest; a reviewer reads those.

Example::

    findings(cells)   # ["cell 24: '5.0×' is in no output ...", ...] for a chapter's cells
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from typing import Any

from notebook_sections import source

_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d{1,3}(?: \d{3})+(?![\d.])|\d+(?:\.\d+)?"
_UNIT = (
    r"(?:ms|µs|s|sec|seconds?|min|minutes?|B|bytes|kB|KB|KiB|MB|MiB|GB|GiB|%"
    r"|Mbit/s|Gbit/s|MB/s|kB/s|global steps/s|steps/s)"
)
_RATIO_TAIL = (
    r"(?=\s*(?:$|[.,;:)!?]|faster\b|slower\b|more\b|fewer\b|less\b|larger\b|smaller\b|longer\b"
    r"|shorter\b|bigger\b|the\b|too\b|as\b|of\b|against\b|between\b|in\b|to\b))"
)
FIGURE = re.compile(
    rf"(?<![\w.$/])(?P<first>{_NUMBER})(?:\s*(?:–|-|to|→)\s*(?P<second>{_NUMBER}))?"
    # (a unit ends where a Latin word would go on: Chinese text may follow it directly; 倍 is "×")
    rf"(?:\s?(?P<unit>{_UNIT})(?![A-Za-z0-9_/])|\s?(?P<ratio>[×x]{_RATIO_TAIL}|倍))"
)
OUTPUT_NUMBER = re.compile(rf"(?<![\w.])(?:{_NUMBER})")
APPROXIMATE = re.compile(
    r"(?:about|around|roughly|nearly|almost|some|over|under|above|below|up to|at least|at most|"
    r"more than|less than|within|~|≈|<|>|≤|≥|大约|约|近|将近|超过|不到|至少|至多|多于|少于|高于|低于)\s*$",
    re.I,
)
ORDERING = re.compile(r"\b(?:faster|slower|quicker)\s+than\b|\d\s?[×x]\s+(?:faster|slower)\b", re.I)
MARK = re.compile(r"<!--\s*(cite|formula|setting|derived|shown)\b:?\s*(.*?)\s*-->", re.S)
SLOW_NOTICE = re.compile(
    r"\btakes about \d+(?:[–-]\d+)? ?(?:s|seconds|min|minutes)\b.*\bon 2 (?:CPU )?cores"
    # the Chinese edition's notice: *下一个单元格在 2 核上大约需要 30 s。*
    r"|2 核[^。]*?约需?要? ?\d+(?:[–-]\d+)? ?(?:s|秒|min|分钟)"
)
_SENTENCE_END = re.compile(
    r"(?:(?<=[.!?])|(?<=-->))\s+(?!<!--)(?=[A-Z*_(\[\"'`])"
    # a Chinese sentence ends at its full stop (no space follows); a mark right after it is its own
    r"|(?<=[。！？])(?!\s*<!--)|(?<=-->)(?!\s*<!--)(?=\s*[\u3400-\u9fff])"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Sentence:
    cell: int
    text: str  # the sentence as written, marks included
    marks: tuple[tuple[str, str], ...]

    @property
    def plain(self) -> str:
        """The sentence without marks, code spans, math and link targets: what states figures."""
        text = MARK.sub(" ", self.text)
        text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
        text = re.sub(r"`[^`]*`", " ", text)
        text = re.sub(r"\$[^$]*\$", " ", text)
        text = re.sub(r"\]\([^)]*\)", "]", text)
        return text


def to_number(text: str) -> float:
    return float(text.replace(",", "").replace(" ", ""))


def decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def sentences(cells: list[dict[str, Any]]) -> list[Sentence]:
    """Every sentence of the markdown cells, outside code fences and blockquotes."""
    found = []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        text = re.sub(r"```.*?```", "\n\n", source(cell), flags=re.S)
        blocks, current = [], []
        for line in text.splitlines():
            stripped = line.strip()
            new_block = not stripped or re.match(r"([-*+] |\d+\. |#|\|)", stripped)
            if new_block and current:
                blocks.append(" ".join(current))
                current = []
            if stripped.startswith(">"):  # a quotation, marked by its blockquote
                continue
            if stripped:
                current.append(stripped)
                if stripped.startswith(("#", "|")):
                    blocks.append(" ".join(current))
                    current = []
        if current:
            blocks.append(" ".join(current))
        for block in blocks:
            for piece in _SENTENCE_END.split(block):
                marks = tuple((m.group(1), m.group(2)) for m in MARK.finditer(piece))
                found.append(Sentence(index, piece, marks))
    return found


def output_texts(cells: list[dict[str, Any]]) -> list[str]:
    """What every code cell printed, returned or raised, as text."""
    texts = []
    for cell in cells:
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if out.get("output_type") == "stream":
                texts.append(source({"source": out.get("text", "")}))
            elif out.get("output_type") == "error":
                texts.append(_ANSI.sub("", "\n".join(out.get("traceback", []))))
                texts.append(f"{out.get('ename')}: {out.get('evalue')}")
            for kind in ("text/plain", "text/markdown", "text/html"):
                if kind in out.get("data", {}):
                    texts.append(source({"source": out["data"][kind]}))
    return texts


_SETTING_NAME = re.compile(
    r"\b(\w*?(?:ms|secs?|seconds|timeout|delay|_s))[\"']?\s*[=:]\s*(?:\{[^{}]*?[\"']\s*:\s*)?(\d[\d_]*(?:\.\d+)?)\b"
)
_SETTING_STRING = re.compile(r"[\"'](\d+(?:\.\d+)?)\s*(ms|s|mbit|gbit|kbit)[\"']", re.I)
_FAMILY = {"ms": "ms", "µs": "us", "s": "s", "sec": "s", "second": "s", "seconds": "s", "min": "min"}
_FAMILY |= {
    "minute": "min",
    "minutes": "min",
    "Mbit/s": "mbit",
    "Gbit/s": "gbit",
    "%": "%",
    "×": "x",
    "x": "x",
    "倍": "x",
}
_FAMILY |= {
    "B": "B",
    "bytes": "B",
    "kB": "kB",
    "KB": "kB",
    "KiB": "KiB",
    "MB": "MB",
    "MiB": "MiB",
    "GB": "GB",
}
_FAMILY |= {"GiB": "GiB", "MB/s": "MB/s", "kB/s": "kB/s", "global steps/s": "steps/s", "steps/s": "steps/s"}
STRICT_UNITS = {"ms", "us", "s", "min", "%", "x"}
# (an output in Chinese prints 倍 for "x", and may go on in Chinese right after a unit: "23.3 ms（回环）")
OUTPUT_FIGURE = re.compile(rf"(?<![\w.])({_NUMBER})\s?(?:{_UNIT}|[×x倍])(?![A-Za-z0-9_/])")


def code_settings(cells: list[dict[str, Any]]) -> set[tuple[float, str]]:
    """``(value, unit)`` of every time or rate the chapter's code sets: ``straggler_ms=150`` is
    ``(150, "ms")``, ``delay="20ms"`` ``(20, "ms")``, ``link="100mbit"`` ``(100, "mbit")``."""
    settings = set()
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        text = source(cell)
        for name, value in _SETTING_NAME.findall(text):
            unit = "ms" if re.search(r"ms$|_ms_|ms_", name) else "s"
            settings.add((float(value.replace("_", "")), unit))
        for value, unit in _SETTING_STRING.findall(text):
            settings.add((float(value), unit.lower()))
    return settings


class Outputs:
    """The numbers and the text of a chapter's outputs."""

    def __init__(self, cells: list[dict[str, Any]]):
        self.texts = output_texts(cells)
        self.joined = re.sub(r"\s+", " ", "\n".join(self.texts))
        self.numbers = sorted({to_number(m.group(0)) for t in self.texts for m in OUTPUT_NUMBER.finditer(t)})
        self.settings = code_settings(cells)
        self.figures = {
            (to_number(m.group(1)), _FAMILY.get(m.group(0)[len(m.group(1)) :].strip()))
            for t in self.texts
            for m in OUTPUT_FIGURE.finditer(t)
        }

    def shows(self, written: str, approximate: bool = False, unit: str | None = None) -> bool:
        """Whether some output number rounds to the figure as written (``"2099"``, ``"0.29"``).
        A time, a percentage or a ratio must be printed with its unit (``30 s``, ``85%``,
        ``1.4x``): small numbers are everywhere in outputs, a bare 30 shows no 30 seconds."""
        value = to_number(written)
        tolerance = 0.5 * 10 ** -decimals(written) + 1e-9
        if approximate:
            trailing = len(written) - len(written.rstrip("0")) if "." not in written else 0
            tolerance = max(tolerance, 0.5 * 10**trailing if trailing else 0, 0.1 * abs(value))
        if unit in STRICT_UNITS:
            candidates = [number for number, family in self.figures if family == unit]
        else:
            candidates = self.numbers
        return any(abs(number - value) <= tolerance for number in candidates)

    def has_text(self, text: str) -> bool:
        return re.sub(r"\s+", " ", text.strip()) in self.joined


_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST, operands: list[str]) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, operands)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        operands.append(ast.unparse(node))
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left, operands), _evaluate(node.right, operands))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand, operands)
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError(f"only numbers, + - * / and parentheses: {ast.unparse(node)!r}")


def check_derived(mark: str, outputs: Outputs) -> tuple[str | None, str | None]:
    """``(figure, problem)`` of a ``derived: EXPR = FIGURE`` mark."""
    expression, _, figure = mark.rpartition("=")
    figure = figure.strip()
    if not expression or not re.fullmatch(_NUMBER, figure):
        return None, f"a derived mark is 'derived: EXPRESSION = FIGURE', not {mark!r}"
    operands: list[str] = []
    try:
        value = _evaluate(ast.parse(expression.replace("×", "*").strip(), mode="eval"), operands)
    except (SyntaxError, ValueError, ZeroDivisionError) as error:
        return None, f"derived mark {mark!r}: {error}"
    missing = [o for o in operands if not outputs.shows(o)]
    if missing:
        return None, f"derived mark {mark!r}: {', '.join(missing)} in no output"
    if abs(value - to_number(figure)) > 0.5 * 10 ** -decimals(figure) + 1e-9:
        return None, f"derived mark {mark!r}: the expression is {value:.4g}, not {figure}"
    return figure, None


def sentence_findings(sentence: Sentence, outputs: Outputs) -> list[str]:
    """Why this sentence states a figure or an ordering the outputs do not show (empty: it is fine)."""
    kinds = {kind for kind, _ in sentence.marks}
    plain = sentence.plain
    if kinds & {"cite", "formula", "setting"} or SLOW_NOTICE.search(plain):
        return []
    problems, derived = [], set()
    for kind, body in sentence.marks:
        if kind == "derived":
            figure, problem = check_derived(body, outputs)
            problems += [problem] if problem else []
            derived |= {to_number(figure)} if figure else set()
        elif kind == "shown" and not outputs.has_text(body.strip("\"'")):
            problems.append(f"shown mark {body!r}: no output contains this text")
    stated = []
    in_code = {
        to_number(n)
        for span in re.findall(r"`([^`]*)`", sentence.text)
        for n in re.findall(r"\d+(?:\.\d+)?", span)
    }
    for match in FIGURE.finditer(plain):
        approximate = bool(APPROXIMATE.search(plain[: match.start()][-14:]))
        for key in ("first", "second"):
            written = match.group(key)
            if written is None:
                continue
            stated.append(written)
            value = to_number(written)
            unit = _FAMILY.get(match.group("unit") or match.group("ratio") or "")
            if value in in_code:  # the sentence shows the code that sets it: `dump_traceback_later(1.5, ...)`
                continue
            if (
                outputs.shows(written, approximate, unit)
                or (value, unit) in outputs.settings
                or value in derived
            ):
                continue
            problems.append(f"'{match.group(0)}' is in no output")
            break  # one finding per figure, even for a range
    if ORDERING.search(plain) and not _backs_an_ordering(plain) and not kinds & {"shown", "derived"}:
        problems.append(
            "an ordering that neither two times nor a ratio of the sentence backs (give the outputs' times, "
            "or a 'shown' mark with the output that states the order)"
        )
    problems += _contradicted_ordering(plain)
    return problems


def _backs_an_ordering(plain: str) -> bool:
    """Whether the sentence gives what an ordering rests on: two times, or a ratio ("1.4× the time")."""
    units = [m.group("unit") or m.group("ratio") for m in FIGURE.finditer(plain)]
    times = [u for u in units if _FAMILY.get(u or "") in ("ms", "s", "us", "min")]
    return len(times) >= 2 or any(_FAMILY.get(u or "") == "x" for u in units)


def _contradicted_ordering(plain: str) -> list[str]:
    """'A (x s) is faster than B (y s)' with x ≥ y: the two times the sentence gives contradict it."""
    match = re.search(r"\b(faster|slower)\s+than\b", plain, re.I)
    if not match:
        return []
    times = [
        to_number(m.group("first")) * (1000 if m.group("unit") in ("s", "sec", "seconds", "second") else 1)
        for m in FIGURE.finditer(plain)
        if m.group("unit") in ("ms", "s", "sec", "seconds", "second") and not m.group("second")
    ]
    if len(times) != 2:
        return []
    faster = match.group(1).lower() == "faster"
    if (times[0] < times[1]) != faster:
        return [f"says '{match.group(0)}' of its own figures, which show the opposite order"]
    return []


def findings(cells: list[dict[str, Any]]) -> list[str]:
    """Every figure or ordering of a chapter's markdown that its outputs do not show, by cell."""
    outputs = Outputs(cells)
    found = []
    for sentence in sentences(cells):
        for problem in sentence_findings(sentence, outputs):
            found.append(f"cell {sentence.cell}: {problem}: {sentence.plain.strip()[:160]}")
    return found
