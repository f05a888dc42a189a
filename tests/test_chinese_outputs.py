"""The Chinese chapters as a Chinese learner reads them: no English sentence of dtfkit's or the course's in
what they print, and Chinese words on every figure.

TensorFlow's own lines stay as TensorFlow wrote them (its log, its exceptions' messages, gRPC's), and so do
code identifiers; everything else a zh_CN chapter shows was written by dtfkit or by the chapter's code, and
must be Chinese.

- **What counts as English of ours**: a run of three or more English words, outside quotes, with a word
  triple that appears in a message of dtfkit's source (an f-string, what it prints, warns or raises, a
  comment) or of the English chapter's code cells (what the chapter prints). TensorFlow's words are in neither, so its lines never count; a dtfkit
  message that missed the catalog always does. Text after ``SomeError:`` is the exception's own message.
- **Figures**: every figure a chapter draws is drawn by the chapter's code (its ``plt``/``ax`` calls, whose
  literals must be Chinese in the zh_CN chapter) or by a dtfkit plot function (whose literals must all go
  through ``_()``, so that the catalog's words are drawn).
"""

from __future__ import annotations

import ast
import functools
import html
import io
import json
import re
import tokenize
from pathlib import Path

import pytest

from dtfkit.course import listing
from edition import code_units, translate

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
ZH = NOTEBOOKS / "zh_CN"
CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
WORD = re.compile(r"[A-Za-z][a-z]+(?:'[a-z]+)?")
# Three English words or more in a row (a comma, colon or semicolon may follow a word).
RUN = re.compile(r"(?<![\w./'`\-])(?:[A-Za-z][a-z]+(?:'[a-z]+)?[,:;]? ){2,}[A-Za-z][a-z]+(?:'[a-z]+)?")
# TensorFlow's and absl's log lines, and gRPC's, after a "[task] " prefix or not.
TF_LINE = re.compile(
    r"^\s*(\[[\w:]+\] )?\s*("
    r"[IWEF]\d{4} \d\d:\d\d:\d\d[.\d]* |"  # absl / C++ logging: I0000 00:00:1795954089.514839
    r"(INFO|WARNING|ERROR|FATAL):(tensorflow|absl|root):|"
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|"
    r":?UNKNOWN:|Additional GRPC error information|"
    r"Traceback \(most recent call last\)|File \"|"
    r"\w+(Error|Exception|Warning)(\(\))?:"  # an exception's own line
    r")"
)
# Lines TensorFlow, Python or gRPC write that dtfkit also quotes (in its diagnosis patterns, its docs), so that
# their words are found in dtfkit's source too; each is theirs, from the phrase to the end of the line.
THEIRS = re.compile(
    r"("
    r"CreateSession still waiting for response from worker|Scanning workers for devices"  # master.cc
    r"|An error was raised\. This may be due to a preemption"  # training/monitored_session.py
    r"|The error could be from a previous operation"  # TF's eager context, after a failed op
    r"|Instructions for updating:"  # util/deprecation.py
    r"|Exception in thread "  # Python's threading
    r"|Failed to add port to server|recvmsg:Connection reset by peer|failed to connect to all addresses"  # gRPC
    r").*"
)
EXCEPTION_MESSAGE = re.compile(
    r"\b\w+(Error|Exception|Warning|Exit)\b(\(\))?[:：] ?.*"
)  # (a translated line says "：")
QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'|“[^”]*”|`[^`]*`")


def _triples(text: str) -> set[tuple[str, str, str]]:
    words = [w.lower() for w in WORD.findall(re.sub(r"\{[^{}]*\}|%[-\d.]*[sdfgr]", " | ", text))]
    return {tuple(words[i : i + 3]) for i in range(len(words) - 2)}


# Calls whose string arguments are a message a person reads: printed, warned, raised.
MESSAGE_CALLS = re.compile(r"^(print|warn|_|N_)$|(Error|Exception|Warning|Timeout|Exited|Failed|NotRunning)$")


def _message_texts(source: str) -> list[str]:
    """What of one Python source is a message: the literals of f-strings (dtfkit builds its messages so), the
    arguments of ``print``, ``warn``, ``_()`` and exception constructors, and the comments. Plain literals
    elsewhere are left out: dtfkit quotes TensorFlow's own log lines in its diagnosis patterns, and those are
    TensorFlow's words, not ours."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    texts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            texts += [
                v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
            ]
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if MESSAGE_CALLS.search(name):
                for argument in node.args:
                    texts += [
                        n.value
                        for n in ast.walk(argument)
                        if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    ]
    texts += [
        t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT
    ]
    return texts


@functools.lru_cache(maxsize=1)
def ours() -> frozenset[tuple[str, str, str]]:
    """Every word triple dtfkit or an English chapter's code could print: their literals and comments,
    and the comments and docstrings of the functions the chapters list."""
    found: set[tuple[str, str, str]] = set()
    for path in sorted((REPO / "dtfkit").rglob("*.py")):
        for text in _message_texts(path.read_text(encoding="utf-8")):
            found |= _triples(text)
    for text, _where in listing.listed_messages():
        found |= _triples(text)
    for chapter in translate.chapters():
        for cell in json.loads(chapter.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                python = code_units.as_python("".join(cell["source"]))
                if python is not None:
                    for text in _message_texts(python):
                        found |= _triples(text)
    return frozenset(found)


def _output_text(output: dict) -> str:
    if output.get("output_type") == "error":
        return "\n".join([f"{output.get('ename')}: {output.get('evalue')}", *output.get("traceback", [])])
    if "text" in output:
        return "".join(output["text"])
    data = output.get("data", {})
    if "text/html" in data:
        markup = "".join(data["text/html"])
        return html.unescape(re.sub(r"<[^>]+>", "\n", markup))
    return "".join(data.get("text/plain", ""))


def english_of_ours(text: str) -> list[str]:
    """The lines of ``text`` with an English sentence that dtfkit or the course wrote (see the module's doc)."""
    found = []
    for line in re.sub(r"\x1b\[[\d;]*m", "", text).splitlines():
        if TF_LINE.match(line):
            continue
        prose = QUOTED.sub(" ", EXCEPTION_MESSAGE.sub(" ", THEIRS.sub(" ", line)))
        if any(_triples(run) & ours() for run in RUN.findall(prose)):
            found.append(line.strip())
    return found


def english_lines(chapter: Path) -> list[str]:
    found = []
    for cell in json.loads(chapter.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            found += [
                f"{chapter.name[:2]} {cell.get('id')}: {line[:160]}"
                for line in english_of_ours(_output_text(output))
            ]
    return found


def test_the_check_finds_a_message_of_dtfkits_and_a_line_of_the_course_but_not_tensorflows():
    assert english_of_ours(
        "worker:0 did not return from train_sync within 20 s. The stuck task(s) were killed"
    )
    assert english_of_ours("all workers finished in 2.3 s (ps:0: ended by the launcher)")
    assert english_of_ours("both workers' MonitoredSession caught the ps failure")  # a chapter's own print
    assert not english_of_ours(
        "[worker:1] I0000 00:00:1795954089.514839 10866 master.cc:278] CreateSession still waiting"
    )
    assert not english_of_ours(
        "worker:0 抛出了 RuntimeError: Collective ops must be configured at program startup"
    )
    assert not english_of_ours("[chief:0] ERROR:tensorflow:Worker /job:worker/replica:0/task:1 failed with")
    assert not english_of_ours("全部 worker 都已结束，用时 2.3 s")


@pytest.mark.parametrize("chapter", sorted(ZH.glob("[01]*.ipynb")), ids=lambda p: p.name[:2])
def test_a_chinese_chapter_prints_no_english_sentence_of_ours(chapter):
    assert english_lines(chapter) == []


# ---------------------------------------------------------------------------------------------- figures
# Words that are names in both editions: the roles of a task (the course keeps them English) and units.
NAMES = re.compile(r"\b(ps|worker|chief|evaluator|KiB|MiB|GiB|ms)\b")
# matplotlib's calls that draw text: those the translation cuts out, and pyplot's own
DRAWN_CALLS = (code_units.SHOWN_CALLS - {"print", "HTML"}) | {"title", "xlabel", "ylabel"}


def text_parts(node: ast.AST) -> list[ast.Constant]:
    """The literals that make up a text argument: itself, an f-string's words, both sides of ``+``, both
    branches of ``if``/``else``, what ``.format`` formats (not a subscript's key: ``r["step"]`` is data)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, ast.JoinedStr):
        return [v for v in node.values if isinstance(v, ast.Constant)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return text_parts(node.left) + text_parts(node.right)
    if isinstance(node, ast.IfExp):
        return text_parts(node.body) + text_parts(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return text_parts(node.func.value)
    return []


def drawn_literals(tree: ast.AST) -> list[ast.Constant]:
    """The string literals a figure draws: text arguments of the drawing calls, ``label=``/``title=`` values."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        values = (
            (list(node.args[2:3]) if name == "text" else list(node.args[:1])) if name in DRAWN_CALLS else []
        )
        values += [k.value for k in node.keywords if k.arg in ("label", "title", "xlabel", "ylabel")]
        for value in values:
            found += text_parts(value)
    return found


def untranslated_drawing_in_the_library() -> list[str]:
    """Each literal with words that dtfkit draws without ``_()`` around it."""
    found = []
    for path in sorted((REPO / "dtfkit").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        marked = {
            id(arg)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and translate._marked_message(node) is not None
            for arg in node.args
        }
        for literal in drawn_literals(tree):
            if id(literal) not in marked and code_units.has_words(literal.value):
                found.append(f"{path.relative_to(REPO)}:{literal.lineno}: {literal.value!r}")
    return found


def test_every_word_dtfkit_draws_on_a_figure_goes_through_the_catalog():
    assert untranslated_drawing_in_the_library() == []


@pytest.mark.parametrize("chapter", sorted(ZH.glob("[01]*.ipynb")), ids=lambda p: p.name[:2])
def test_every_figure_of_a_chinese_chapter_has_chinese_words(chapter):
    """A cell that drew a figure draws Chinese: each literal with words its drawing calls take has Chinese,
    and it drew Chinese words where dtfkit drew it (the library's check above)."""
    figures, english = 0, []
    for cell in json.loads(chapter.read_text(encoding="utf-8"))["cells"]:
        if not any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
            continue
        figures += 1
        python = code_units.as_python("".join(cell["source"]))
        for literal in drawn_literals(ast.parse(python or "")):
            if code_units.has_words(NAMES.sub(" ", literal.value)) and not CJK.search(literal.value):
                english.append(f"{cell['id']}: {literal.value!r}")
    assert english == [], f"{figures} figures"
