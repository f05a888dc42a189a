"""The course in another language from one source: gettext catalogs of the chapters' prose.

The English chapters (``notebooks/*.ipynb``) are the source. Their markdown is cut into units
small enough to review one at a time (a heading, a paragraph, a list item, a table row, a
quote; code blocks stay as they are) and kept in one gettext catalog per chapter and language,
``notebooks/locale/<lang>/LC_MESSAGES/<chapter>.po``: the format Poedit, Weblate and Crowdin
read. A unit is keyed by its cell's id (``msgctxt``) and its English text (``msgid``), so when
the English changes, ``extract`` marks the unit *fuzzy* and keeps the old English beside it
(``#| msgid``: what changed); a new unit comes in *untranslated*; a removed one becomes
obsolete (``#~``), as ``msgmerge`` does (Babel's ``Catalog.update`` merges). The catalogs are read
and written with polib (their text as it was), the chapters with nbformat.

``build`` writes ``notebooks/<lang>/<chapter>.ipynb``: the English chapter's cells, its code
and outputs as they are, every markdown unit in translation. The course's documents for
learners and teachers (``README.md``, ``docs/teaching.md``) are kept the same way
(``docs/locale/<lang>/LC_MESSAGES/``, built as ``README.zh-CN.md``, ``docs/teaching.zh-CN.md``),
their units keyed by the section they stand in. ``check`` lists what is not in
step: untranslated or fuzzy units, a built notebook that differs from what ``build`` writes now,
a translated unit of prose without a word of the language.

Example::

    python -m dtfkit translations extract      # the catalogs, up to date with the English
    python -m dtfkit translations build        # notebooks/zh_CN/*.ipynb from them
    python -m dtfkit translations check        # what needs a translator; exit 1 if anything

    >>> [(p.prefix, p.text) for p in split_markdown("## Goals\\n\\n- one\\n- two") if p.unit]
    [('## ', 'Goals'), ('- ', 'one'), ('- ', 'two')]
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import nbformat
import polib
from babel.messages.catalog import Catalog

from dtfkit.course import listing
from dtfkit.errors import DtfkitError
from dtfkit.i18n import LANGUAGE_CELL_ID
from edition.code_units import as_python, code_units, placeholders, translate_code

LANGUAGES = {"zh_CN": "简体中文"}
HEADER = """{language} translation of the dtfkit course, {chapter}.
The English chapter is the source: `python -m dtfkit translations extract` brings this file up to
date with it (a changed English unit becomes fuzzy, a new one untranslated); `python -m dtfkit
translations build` writes the chapter from it. Terms: notebooks/locale/{lang}/glossary.md."""
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
# Documents translated with the chapters, relative to the repository (the folder above notebooks/).
DOCUMENTS = ("README.md", "docs/teaching.md")
_LINK = re.compile(r"(\]\()([^)\s]+)")

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_HEADING = re.compile(r"^(#{1,6}[ \t]+)(.*)$")
_ITEM = re.compile(r"^([ \t]*(?:[-*+]|\d{1,3}[.)])[ \t]+)(\S.*)$")
_QUOTE = re.compile(r"^(>[ \t]?)(.*)$")
# Lines kept as they are, never part of a unit: nbgrader's solution markers (student copies look for
# them), and setext underlines or thematic breaks ("=====", "---").
_VERBATIM = re.compile(r"^\s*(?:#{3} (?:BEGIN|END) (?:SOLUTION|HIDDEN TESTS)|=+|-{3,}|\*{3,}|_{3,})\s*$")
_ORDERED = re.compile(r"^([ \t]*)(\d{1,3})[.)][ \t]")
_TABLE = re.compile(r"^[ \t]*\|")
_TABLE_RULE = re.compile(r"^[ \t|:\-]+$")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")  # (full-width punctuation too)
# What is not prose in a unit: code spans, links' targets, URLs, inline math, HTML tags.
_NOT_PROSE = re.compile(r"`[^`]*`|\]\([^)]*\)|https?://\S+|\$[^$]*\$|<[^>]+>")


@dataclass(frozen=True)
class Piece:
    """A run of lines of a markdown cell: a unit to translate, or lines kept as they are."""

    text: str  # a unit's text without its markup prefix; else the lines verbatim
    unit: bool = False
    kind: str = ""  # heading | paragraph | item | quote | row
    prefix: str = ""  # before a unit's first line: "## ", "- ", "  1. ", "> "
    indents: tuple[str, ...] = ()  # before each further line of a unit

    def render(self, text: str | None = None) -> str:
        """The piece as markdown; a unit with ``text`` in place of its own."""
        if not self.unit:
            return self.text
        lines = (self.text if text is None else text).split("\n")
        more = self.indents or (self.prefix_indent,)
        out = [self.prefix + lines[0]]
        for number, line in enumerate(lines[1:]):
            out.append((more[number] if number < len(more) else more[-1]) + line)
        return "\n".join(out)

    @property
    def prefix_indent(self) -> str:
        if self.kind == "quote":
            return "> "
        return " " * len(self.prefix) if self.kind == "item" else self.prefix


def _starts_block(line: str) -> bool:
    return bool(
        _FENCE.match(line) or _HEADING.match(line) or _ITEM.match(line) or _QUOTE.match(line)
    ) or bool(_TABLE.match(line))


def split_markdown(source: str) -> list[Piece]:
    """A markdown cell as pieces, in order; ``"\\n".join(p.render() for p in pieces) == source``.

    Example::

        >>> pieces = split_markdown("A paragraph\\non two lines.\\n\\n| a | b |\\n|---|---|\\n| 1 | 2 |")
        >>> [(p.kind, p.text) for p in pieces if p.unit]
        [('paragraph', 'A paragraph\\non two lines.'), ('row', '| a | b |'), ('row', '| 1 | 2 |')]
    """
    lines = source.split("\n")
    pieces: list[Piece] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            end = i + 1
            while end < len(lines) and not lines[end].strip().startswith(fence.group(1)):
                end += 1
            pieces.append(Piece("\n".join(lines[i : end + 1])))
            i = end + 1
            continue
        if not line.strip() or _VERBATIM.match(line):
            pieces.append(Piece(line))
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            pieces.append(Piece(heading.group(2), True, "heading", heading.group(1)))
            i += 1
            continue
        if _TABLE.match(line):
            if _TABLE_RULE.match(line):
                pieces.append(Piece(line))
            else:
                pieces.append(Piece(line, True, "row"))
            i += 1
            continue
        item, quote = _ITEM.match(line), _QUOTE.match(line)
        if item:
            kind, prefix, first = "item", item.group(1), item.group(2)
        elif quote:
            kind, prefix, first = "quote", quote.group(1), quote.group(2)
        else:
            stripped = line.lstrip(" \t")
            kind, prefix, first = "paragraph", line[: len(line) - len(stripped)], stripped
        texts, indents = [first], []
        i += 1
        while i < len(lines) and lines[i].strip():
            more = lines[i]
            if kind == "quote":
                follow = _QUOTE.match(more)
                if not follow:
                    break
                indents.append(follow.group(1))
                texts.append(follow.group(2))
            else:
                if _VERBATIM.match(more):
                    break
                ordered = _ORDERED.match(more)
                # CommonMark: a list that does not start at 1 cannot interrupt a paragraph: such a line
                # indented as the text is that text going on ("... steps 60 and\n   120)"); indented
                # less, it is the next item of a list around the text.
                inside = ordered is not None and len(ordered.group(1)) >= len(
                    prefix if kind == "item" else prefix
                )
                if _starts_block(more) and not (ordered and ordered.group(2) != "1" and inside):
                    break
                stripped = more.lstrip(" \t")
                indents.append(more[: len(more) - len(stripped)])
                texts.append(stripped)
            i += 1
        pieces.append(Piece("\n".join(texts), True, kind, prefix, tuple(indents)))
    return pieces


def units(source: str, cell_id: str) -> list[tuple[str, Piece]]:
    """The units of one markdown cell, each with its key (the cell id; ``id#2`` for the second
    unit of the same text in the cell)."""
    return [(key, piece) for key, piece in _keyed(split_markdown(source), cell_id) if key]


def _keyed(pieces: list[Piece], cell_id: str) -> list[tuple[str, Piece]]:
    """Each piece with its unit's key ("" for lines kept as they are)."""
    seen: dict[str, int] = {}
    out = []
    for piece in pieces:
        key = ""
        if piece.unit:
            seen[piece.text] = seen.get(piece.text, 0) + 1
            key = cell_id if seen[piece.text] == 1 else f"{cell_id}#{seen[piece.text]}"
        out.append((key, piece))
    return out


def _source(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def chapters(notebooks: Path = NOTEBOOKS) -> list[Path]:
    """The English chapters, in order."""
    return sorted(notebooks.glob("[0-9][0-9]_*.ipynb"))


def catalog_path(chapter: Path, lang: str) -> Path:
    return chapter.parent / "locale" / lang / "LC_MESSAGES" / f"{chapter.stem}.po"


def built_path(chapter: Path, lang: str) -> Path:
    return chapter.parent / lang / chapter.name


def _check_lang(lang: str) -> None:
    if lang not in LANGUAGES:
        raise DtfkitError(f"no translation of the course into {lang!r}; there is {', '.join(LANGUAGES)}")


def template(chapter: Path) -> list[polib.POEntry]:
    """The chapter's units as untranslated entries (what a ``.pot`` file holds), in order."""
    notebook = nbformat.read(chapter, as_version=4)
    entries = []
    for number, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "code":
            entries += _code_entries(chapter, number, cell)
            continue
        if cell["cell_type"] != "markdown":
            continue
        for key, piece in units(_source(cell), cell["id"]):
            entries.append(
                polib.POEntry(
                    msgctxt=key,
                    msgid=piece.text,
                    msgstr="",
                    comment=f"cell {number}, {piece.kind}",
                    occurrences=[(chapter.name, str(number))],
                )
            )
    return entries


Entries = dict[tuple[str | None, str], polib.POEntry]  # a catalog's units by (msgctxt, msgid)
CODE = ":code"  # a code cell's units are keyed by its id and this (``code_units``: comments, printed words)


def _code_entries(chapter: Path, number: int, cell: dict) -> list[polib.POEntry]:
    """The units a reader reads in a code cell (``code_units``), once per text."""
    seen: dict[str, str] = {}
    for unit in code_units(_source(cell)):
        seen.setdefault(unit.text, unit.kind)
    return [
        polib.POEntry(
            msgctxt=cell["id"] + CODE,
            msgid=text,
            msgstr="",
            comment=f"cell {number}, code {kind}"
            + (" (keep every {field} as it is)" if placeholders(text) else ""),
            occurrences=[(chapter.name, str(number))],
        )
        for text, kind in seen.items()
    ]


def translate_code_cell(source: str, cell_id: str, entries: Entries) -> tuple[str, list[str]]:
    """A code cell with its comments and printed words in translation (``entries``: a catalog's, by key),
    and the keys of the units that had none (left in English)."""
    translations, missing = {}, []
    for unit in code_units(source):
        entry = entries.get((cell_id + CODE, unit.text))
        if entry is not None and entry.msgstr and "fuzzy" not in entry.flags:
            translations[unit.text] = entry.msgstr
        elif cell_id + CODE not in missing:
            missing.append(cell_id + CODE)
    return translate_code(source, translations), missing


def read_catalog(path: Path, lang: str = "zh_CN") -> polib.POFile:
    if not path.exists():
        raise DtfkitError(f"{path}: no catalog yet; python -m dtfkit translations extract writes it")
    return polib.pofile(str(path), wrapwidth=0)


def write_catalog(catalog: polib.POFile, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    catalog.wrapwidth = 0
    path.write_text(str(catalog) + "\n", encoding="utf-8")


def merge(old: polib.POFile | None, fresh: list[polib.POEntry], header: str, lang: str) -> polib.POFile:
    """``fresh``'s units with ``old``'s translations, as ``msgmerge`` does it (Babel's ``Catalog.update``):
    a unit whose English is unchanged keeps its translation; a changed one gets the translation of the
    closest old English (difflib, as msgmerge), marked fuzzy, with that English as ``previous_msgid``; a
    new one stays untranslated; an old unit no longer in the English becomes obsolete, and an obsolete
    one whose English came back gets its translation back. The catalog's text stays polib's."""
    catalog = polib.POFile(wrapwidth=0)
    catalog.header = old.header if old is not None else header
    catalog.metadata = (
        dict(old.metadata)
        if old is not None
        else {
            "Project-Id-Version": "dtfkit course",
            "Language": lang,
            "MIME-Version": "1.0",
            "Content-Type": "text/plain; charset=utf-8",
            "Content-Transfer-Encoding": "8bit",
            "Plural-Forms": "nplurals=1; plural=0;",
        }
    )
    entries = list(old) if old is not None else []
    fresh_keys = _keys(fresh)
    long_gone = [e for e in entries if e.obsolete and _key(e) not in fresh_keys]
    known = [e for e in entries if not e.obsolete]
    live = _keys(known)
    known += [
        e
        for e in entries
        if e.obsolete and _key(e) in fresh_keys - live and e.msgstr and "fuzzy" not in e.flags
    ]
    previous, template = Catalog(), Catalog()
    for number, entry in enumerate(known):  # each old unit's place in ``known`` rides as a user comment
        previous.add(entry.msgid, entry.msgstr, context=entry.msgctxt, user_comments=[str(number)])
    for entry in fresh:
        template.add(entry.msgid, context=entry.msgctxt)
    previous.update(template)
    for entry in fresh:
        merged = previous.get(entry.msgid, entry.msgctxt)
        if merged is not None and merged.user_comments:
            source = known[int(merged.user_comments[0])]
            entry.msgstr, entry.tcomment = source.msgstr, source.tcomment
            if merged.previous_id:  # the closest old English, not this unit's own
                entry.flags, entry.previous_msgid = ["fuzzy"], source.msgid
                entry.previous_msgctxt = source.msgctxt if source.msgctxt != entry.msgctxt else None
            else:
                entry.flags = list(source.flags)
                entry.previous_msgid, entry.previous_msgctxt = source.previous_msgid, source.previous_msgctxt
        catalog.append(entry)
    for gone in previous.obsolete.values():
        source = known[int(gone.user_comments[0])]
        source.obsolete = True
        catalog.append(source)
    catalog.extend(long_gone)
    return catalog


LIBRARY = "dtfkit"  # the name of the library's own catalog (dtfkit/locale/<lang>/LC_MESSAGES/dtfkit.po)
PACKAGE = Path(__file__).resolve().parents[1] / "dtfkit"
# The classroom bench speaks the reader's language through dtfkit's catalog; it lives beside the package.
BESIDE_THE_PACKAGE = ("hubbench",)


def library_template() -> list[polib.POEntry]:
    """Every string dtfkit marks for translation, once, in source order: ``_("...")`` and
    ``N_("...")`` (``dtfkit.i18n``), and each exercise's title (``@exercise("3.1", "Backup workers")``);
    then the comments and docstrings of the code chapters list (``listing.LISTED``)."""
    found: dict[str, polib.POEntry] = {}
    sources = [*PACKAGE.rglob("*.py")] + [
        path for folder in BESIDE_THE_PACKAGE for path in (PACKAGE.parent / folder).rglob("*.py")
    ]
    for path in sorted(sources):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (message := _marked_message(node)) is not None:
                where = (path.relative_to(PACKAGE.parent).as_posix(), str(node.lineno))
                entry = found.setdefault(message, polib.POEntry(msgid=message, msgstr=""))
                entry.occurrences.append(where)
    for message, place in listing.listed_messages():
        entry = found.setdefault(message, polib.POEntry(msgid=message, msgstr=""))
        entry.occurrences.append(tuple(place.rsplit(":", 1)))
    return list(found.values())


def _marked_message(node: ast.Call) -> str | None:
    """The string a call marks for translation: ``_("…")``, ``N_("…")``, or ``exercise(number, "title")``."""
    if isinstance(node.func, ast.Name):
        name = node.func.id
    elif isinstance(node.func, ast.Attribute) and node.func.attr in ("_", "N_"):
        name = node.func.attr  # i18n._("..."), where a plain _ is taken (the tutorial's "_, loss = ...")
    else:
        return None
    position = {"_": 0, "N_": 0, "exercise": 1}.get(name)
    if position is None or len(node.args) != position + 1:
        return None
    argument = node.args[position]
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value
    return None


def _library_catalog(lang: str) -> Path:
    from dtfkit import i18n

    return i18n.catalog_path(lang)


def extract(lang: str = "zh_CN", notebooks: Path = NOTEBOOKS) -> dict[str, tuple[int, int, int]]:
    """Bring each chapter's and document's catalog up to date with the English; ``{name: (units,
    untranslated, fuzzy)}``. A new catalog starts with every unit untranslated."""
    _check_lang(lang)
    counts = {}
    for source in sources(lang, notebooks):
        old = read_catalog(source.catalog, lang) if source.catalog.exists() else None
        header = HEADER.format(language=LANGUAGES[lang], chapter=source.english.name, lang=lang)
        catalog = merge(old, _entries(source), header, lang)
        write_catalog(catalog, source.catalog)
        counts[source.name] = _counts(catalog)
    if notebooks == NOTEBOOKS:  # the library's words, with the course's own chapters only
        path = _library_catalog(lang)
        old = read_catalog(path, lang) if path.exists() else None
        header = HEADER.format(
            language=LANGUAGES[lang], chapter="the library's words (dtfkit.i18n)", lang=lang
        )
        catalog = merge(old, library_template(), header, lang)
        write_catalog(catalog, path)
        counts[LIBRARY] = _counts(catalog)
    return counts


def _messages(catalog: polib.POFile) -> list[polib.POEntry]:
    return [e for e in catalog if not e.obsolete and e.msgid]


def _counts(catalog: polib.POFile) -> tuple[int, int, int]:
    messages = _messages(catalog)
    untranslated = sum(1 for m in messages if not m.msgstr)
    fuzzy = sum(1 for m in messages if m.msgstr and "fuzzy" in m.flags)
    return len(messages), untranslated, fuzzy


def _lookup(catalog: polib.POFile) -> Entries:
    return {_key(e): e for e in _messages(catalog)}


def translate_markdown(source: str, cell_id: str, entries: Entries) -> tuple[str, list[str]]:
    """The cell in translation (``entries``: a catalog's, by key), and the keys of units that had
    none (left in English)."""
    return _render(_keyed(split_markdown(source), cell_id), entries)


def _render(keyed: list[tuple[str, Piece]], entries: Entries) -> tuple[str, list[str]]:
    """Keyed pieces as markdown, each unit in its translation, or in English where it has none (or a
    fuzzy one); and the keys of those left in English."""
    missing, out = [], []
    for key, piece in keyed:
        entry = entries.get((key, piece.text)) if key else None
        text = entry.msgstr if entry is not None and entry.msgstr and "fuzzy" not in entry.flags else None
        if key and text is None:
            missing.append(key)
        out.append(piece.render(text))
    return "\n".join(out), missing


def _one_folder_down(path: str, lang: str, notebooks: Path = NOTEBOOKS) -> str:
    """A chapter's link target as seen from ``notebooks/<lang>/``: a sibling chapter is translated
    too (same name); an image with a version in ``lang`` (``images/x.zh_CN.png`` beside ``images/x.png``, a
    screenshot of the Chinese interface, say) is that one; anything else is one folder up."""
    bare = path.removeprefix("./")
    if re.fullmatch(r"\d\d_[\w-]+\.ipynb", bare.split("#")[0]):
        return bare
    local = Path(bare).with_suffix(f".{lang}{Path(bare).suffix}")
    if Path(bare).suffix.lower() in (".png", ".svg", ".jpg") and (notebooks / local).is_file():
        return f"../{local.as_posix()}"
    return f"../{bare}"


# The first cell of a translated chapter: dtfkit's own words (feedback, findings, the lab) in its language.
LANGUAGE_CELL = {
    "zh_CN": "# 本章中 dtfkit 自己的话（练习的反馈与提示、diagnose 的诊断、实验面板）都用中文显示\n"
    'import dtfkit\n\ndtfkit.set_language("zh_CN")',
}


def build_notebook(chapter: Path, lang: str) -> tuple[dict, list[str]]:
    """The chapter in ``lang``, and the keys of the units left in English: its markdown from the
    catalog, its code the English chapter's, after a first cell that sets dtfkit's language.

    A code cell's outputs are those of the translated notebook already built, where that cell's code
    is the same (``jupyter nbconvert --execute`` ran it in ``lang``); otherwise the English chapter's,
    until the translated chapter is executed again. The saved widget state is the translation's own
    run's, if it saved one: the English run's describes other widgets than the translation's outputs."""
    built = nbformat.read(chapter, as_version=4)
    entries = _lookup(read_catalog(catalog_path(chapter, lang), lang))
    path = built_path(chapter, lang)  # the translation already built, if it is
    translated = nbformat.read(path, as_version=4) if path.exists() else nbformat.v4.new_notebook()
    executed = {c["id"]: c for c in translated["cells"] if c["cell_type"] == "code"}
    missing: list[str] = []
    for cell in built["cells"]:
        if cell["cell_type"] == "code":
            cell["source"], left = translate_code_cell(_source(cell), cell["id"], entries)
            missing += left
        if cell["cell_type"] == "markdown":
            text, left = translate_markdown(_source(cell), cell["id"], entries)
            # One folder down (notebooks/<lang>/): the same chapter names, everything else one level up.
            text = _relink(text, lambda path: _one_folder_down(path, lang, chapter.parent))
            cell["source"] = text
            missing += left
    built["cells"].insert(0, nbformat.v4.new_code_cell(LANGUAGE_CELL[lang], id=LANGUAGE_CELL_ID))
    for cell in built["cells"]:
        ran = executed.get(cell["id"])
        if cell["cell_type"] == "code" and ran is not None and _source(ran) == _source(cell):
            cell["outputs"], cell["execution_count"] = ran["outputs"], ran["execution_count"]
            cell["metadata"] = {**cell["metadata"], **_run_metadata(ran)}
    built["metadata"].pop("widgets", None)
    if "widgets" in translated["metadata"]:
        built["metadata"]["widgets"] = translated["metadata"]["widgets"]
    built["metadata"]["dtfkit_translation"] = {"language": lang, "source": f"../{chapter.name}"}
    return built, missing


def _run_metadata(cell: dict) -> dict:
    """What an execution wrote into a cell's metadata (its timings), kept with its outputs."""
    return {k: v for k, v in cell.get("metadata", {}).items() if k == "execution"}


def notebook_text(notebook: dict) -> str:
    """A notebook as the repository's notebooks are written (nbformat's layout)."""
    return nbformat.writes(nbformat.from_dict(notebook)) + "\n"


def build(lang: str = "zh_CN", notebooks: Path = NOTEBOOKS) -> dict[str, int]:
    """Write every chapter and document in ``lang``; ``{name: units left in English}``."""
    _check_lang(lang)
    left = {}
    for source in sources(lang, notebooks):
        text, missing = _built_text(source, lang)
        source.built.parent.mkdir(parents=True, exist_ok=True)
        source.built.write_text(text, encoding="utf-8")
        left[source.name] = len(missing)
    return left


@dataclass(frozen=True)
class Source:
    """One English source of the course (a chapter or a document) and where its translation lives."""

    name: str  # the chapter's file stem ("09_ps_vs_ring_allreduce"), or the document's ("README")
    english: Path
    catalog: Path
    built: Path
    is_chapter: bool
    repo: Path  # the folder above notebooks/


def sources(lang: str, notebooks: Path = NOTEBOOKS) -> list[Source]:
    """Every chapter, then every document of ``DOCUMENTS`` that the repository has."""
    repo = notebooks.parent
    found = [
        Source(c.stem, c, catalog_path(c, lang), built_path(c, lang), True, repo) for c in chapters(notebooks)
    ]
    for name in DOCUMENTS:
        document = repo / name
        if document.exists():
            catalog = repo / "docs" / "locale" / lang / "LC_MESSAGES" / f"{document.stem}.po"
            found.append(
                Source(document.stem, document, catalog, _translated_document(document, lang), False, repo)
            )
    return found


def _translated_document(document: Path, lang: str) -> Path:
    """Where a document's translation is built: ``README.md`` → ``README.zh-CN.md``, beside it."""
    return document.with_name(f"{document.stem}.{lang.replace('_', '-')}.md")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower())[:40].strip("-") or "section"


def document_units(text: str) -> list[tuple[str, Piece]]:
    """A document's units, each keyed by the section it stands in (its heading's words; ``#2`` for
    the second unit of the same text in a section)."""
    section, out = "top", []
    seen: dict[tuple[str, str], int] = {}
    for piece in split_markdown(text):
        if not piece.unit:
            out.append(("", piece))
            continue
        if piece.kind == "heading":
            section = _slug(piece.text)
        seen[(section, piece.text)] = seen.get((section, piece.text), 0) + 1
        number = seen[(section, piece.text)]
        out.append((section if number == 1 else f"{section}#{number}", piece))
    return out


def _entries(source: Source) -> list[polib.POEntry]:
    """The source's units as untranslated entries, in order."""
    if source.is_chapter:
        return template(source.english)
    return [
        polib.POEntry(
            msgctxt=key,
            msgid=piece.text,
            msgstr="",
            comment=f"section {key.split('#')[0]}, {piece.kind}",
            occurrences=[(source.english.name, "")],
        )
        for key, piece in document_units(source.english.read_text(encoding="utf-8"))
        if key
    ]


def _relink(text: str, target) -> str:
    """``text`` with each relative link's target replaced by ``target(path)``."""

    def swap(match: re.Match) -> str:
        path = match.group(2)
        if re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", path, re.I):
            return match.group(0)
        return match.group(1) + target(path)

    return _LINK.sub(swap, text)


def build_document(source: Source, lang: str) -> tuple[str, list[str]]:
    """The document in ``lang``, and the keys of its units left in English. Links to a document
    that is translated too lead to its translation."""
    english = source.english.read_text(encoding="utf-8")
    text, missing = _render(document_units(english), _lookup(read_catalog(source.catalog, lang)))
    repo = source.repo
    translated = {(repo / name).resolve(): _translated_document(repo / name, lang) for name in DOCUMENTS}

    def target(path: str) -> str:
        bare, _, anchor = path.partition("#")
        other = translated.get((source.english.parent / bare).resolve())
        if other is None:
            return path
        return os.path.relpath(other, source.english.parent) + (f"#{anchor}" if anchor else "")

    note = (
        f"<!-- Built by `python -m dtfkit translations build` from {source.english.name} and "
        f"{source.catalog.relative_to(repo).as_posix()}: edit those, not this file. -->\n"
    )
    return note + _relink(text, target), missing


def _built_text(source: Source, lang: str) -> tuple[str, list[str]]:
    if source.is_chapter:
        notebook, missing = build_notebook(source.english, lang)
        return notebook_text(notebook), missing
    return build_document(source, lang)


def _catalog_of(name: str, lang: str, notebooks: Path) -> Path:
    """The catalog of a chapter or document, or the library's own (``dtfkit``)."""
    return _library_catalog(lang) if name == LIBRARY else _find(name, lang, notebooks).catalog


def _find(name: str, lang: str, notebooks: Path) -> Source:
    everything = sources(lang, notebooks)
    found = [s for s in everything if s.name == name or s.name.startswith(f"{name}_")]
    if len(found) != 1:
        names = ", ".join(s.name for s in everything)
        raise DtfkitError(
            f"no chapter or document {name!r}: name one of {names}, {LIBRARY} (the library's words), "
            "or a chapter's number, 01 to 12"
        )
    return found[0]


def has_prose(text: str) -> bool:
    """True when ``text`` has words to translate besides code, links, math and markup."""
    return len(re.findall(r"[A-Za-z]{2,}", _NOT_PROSE.sub(" ", text))) >= 2


_CODE_SPAN = re.compile(
    r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S
)  # a run of backticks to the same run (CommonMark, rST)
_LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")


def markup_lost(english: str, translation: str) -> list[str]:
    """What of the English unit's code spans and link targets its translation does not have (each as
    often; a line break inside a code span counts as a space).

    Example::

        >>> markup_lost("Call `run()` ([docs](a.md)).", "调用 `run()`（[文档](b.md)）。")
        ['link target a.md is missing']
    """
    found = []
    for what, pattern in (("code span", _CODE_SPAN), ("link target", _LINK_TARGET)):
        ours = [" ".join(m.group(0).split()) for m in pattern.finditer(translation)]
        for item in [" ".join(m.group(0).split()) for m in pattern.finditer(english)]:
            if item in ours:
                ours.remove(item)
            else:
                found.append(f"{what} {item} is missing")
    return found


def problems(lang: str = "zh_CN", notebooks: Path = NOTEBOOKS) -> list[str]:
    """What is not in step between the English sources, the catalogs and the built translations."""
    _check_lang(lang)
    found = []
    repo = notebooks.parent
    for source in sources(lang, notebooks):
        if not source.catalog.exists():
            found.append(f"{source.name}: no catalog ({source.catalog.relative_to(repo)}); run extract")
            continue
        catalog = read_catalog(source.catalog, lang)
        stale = _keys(_entries(source)) - _keys(_messages(catalog))
        if stale:
            found.append(f"{source.name}: {len(stale)} unit(s) not in the catalog; run extract")
        found += _message_problems(source.name, catalog)
        expected, _ = _built_text(source, lang)
        if source.is_chapter:
            found += _broken_code(source.name, nbformat.reads(expected, as_version=4))
        if not source.built.exists():
            found.append(f"{source.name}: not built ({source.built.relative_to(repo)}); run build")
        elif source.built.read_text(encoding="utf-8") != expected:
            found.append(
                f"{source.name}: {source.built.relative_to(repo)} differs from what build writes; run build"
            )
    if notebooks == NOTEBOOKS:
        path = _library_catalog(lang)
        if not path.exists():
            found.append(f"{LIBRARY}: no catalog ({path}); run extract")
        else:
            catalog = read_catalog(path, lang)
            stale = {m.msgid for m in library_template()} - {m.msgid for m in _messages(catalog)}
            if stale:
                found.append(f"{LIBRARY}: {len(stale)} string(s) not in the catalog; run extract")
            found += _message_problems(LIBRARY, catalog)
            found += _placeholder_problems(LIBRARY, catalog)
    return found


def _broken_code(name: str, built: nbformat.NotebookNode) -> list[str]:
    """The code cells of a built chapter that no longer parse (a translation closed a quote of the literal
    it stands in, say)."""
    found = []
    for cell in built.cells:
        if cell.cell_type != "code":
            continue
        runnable = as_python(_source(cell))
        if runnable is None:
            continue
        try:
            ast.parse(runnable)
        except SyntaxError as error:
            found.append(
                f"{name} cell {cell.get('id')}: the translated code does not parse ({error.msg}, line {error.lineno})"
            )
    return found


def _placeholders(template: str) -> list[str]:
    """The ``str.format`` fields of a template, with their conversion and spec: ``["{n}", "{got!r}"]``."""
    import string

    fields = []
    for _text, name, spec, conversion in string.Formatter().parse(template):
        if name is not None:
            fields.append(
                "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
            )
    return sorted(fields)


def _placeholder_problems(name: str, catalog: polib.POFile) -> list[str]:
    """The library's translations whose ``{fields}`` are not the English's (the code fills them by name)."""
    found = []
    for message in _messages(catalog):
        if not message.msgstr:
            continue
        where = f"{name} {message.msgid[:60]!r}"
        try:
            wanted, got = _placeholders(message.msgid), _placeholders(message.msgstr)
        except ValueError as error:
            found.append(f"{where}: the translation is not a format template ({error})")
            continue
        if wanted != got:
            found.append(f"{where}: the translation's fields {got} are not the English's {wanted}")
    return found


def _message_problems(name: str, catalog: polib.POFile) -> list[str]:
    found = []
    for message in _messages(catalog):
        where = f"{name} [{message.msgctxt or ''}] {message.msgid[:60]!r}"
        if not message.msgstr:
            found.append(f"{where}: untranslated")
        elif "fuzzy" in message.flags:
            found.append(f"{where}: fuzzy (the English changed)")
        elif (message.msgctxt or "").endswith(CODE):
            if sorted(placeholders(message.msgid)) != sorted(placeholders(message.msgstr)):
                found.append(
                    f"{where}: the translation's {{fields}} are not the English's (the code fills them)"
                )
            elif "\n" in message.msgstr:
                found.append(f"{where}: the translation breaks a line of code (keep it on one line)")
        elif has_prose(message.msgid) and not set(_CJK.findall(message.msgstr)) - set(
            _CJK.findall(message.msgid)
        ):
            found.append(f"{where}: the translation has no Chinese of its own")
        else:
            found += [f"{where}: {line}" for line in markup_lost(message.msgid, message.msgstr)]
    return found


def _key(message: polib.POEntry) -> tuple[str | None, str]:
    return message.msgctxt, message.msgid


def _keys(messages: Iterable[polib.POEntry]) -> set[tuple[str | None, str]]:
    return {_key(m) for m in messages}


def todo(
    chapter_stem: str, lang: str = "zh_CN", notebooks: Path = NOTEBOOKS, *, everything: bool = False
) -> list[dict]:
    """The units of one chapter that need a translator, as plain data: ``context``, ``id`` (the
    English), ``kind``, ``previous`` (a fuzzy unit's old English) and ``string`` (its translation
    so far). A translator (or a tool) fills ``string`` and hands the list to ``fill``. ``everything``:
    the translated units too (for a review)."""
    catalog = read_catalog(_catalog_of(chapter_stem, lang, notebooks), lang)
    out = []
    for message in _messages(catalog):
        if message.msgstr and "fuzzy" not in message.flags and not everything:
            continue
        out.append(
            {
                "context": message.msgctxt,
                "id": message.msgid,
                "kind": message.comment.rsplit(", ", 1)[-1] if message.comment else "word",
                "previous": [message.previous_msgid] if message.previous_msgid else [],
                "string": message.msgstr,
            }
        )
    return out


def fill(chapter_stem: str, entries: list[dict], lang: str = "zh_CN", notebooks: Path = NOTEBOOKS) -> int:
    """Write translations (``todo``'s entries with ``string`` filled) into the chapter's catalog;
    each one written is no longer fuzzy. Returns how many were written; an entry that names no
    unit of the catalog is an error (its English changed since ``todo``: run ``todo`` again)."""
    path = _catalog_of(chapter_stem, lang, notebooks)
    catalog = read_catalog(path, lang)
    written = 0
    by_key = _lookup(catalog)
    for entry in entries:
        string = entry.get("string", "")
        if not string:
            continue
        message = by_key.get((entry["context"] or None, entry["id"]))
        if message is None:
            raise DtfkitError(
                f"{chapter_stem}: no unit [{entry['context']}] {entry['id'][:60]!r} in {path.name}; "
                "the English changed since: run `translations todo` again"
            )
        message.msgstr = string
        if "fuzzy" in message.flags:
            message.flags.remove("fuzzy")
        message.previous_msgid = message.previous_msgctxt = None
        written += 1
    write_catalog(catalog, path)
    return written
