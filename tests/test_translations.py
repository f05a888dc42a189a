"""The Chinese edition is in step with the English chapters, from one source (``edition/translate.py``, beside the package).

The English chapters are the source; each chapter's prose lives in a gettext catalog
(``notebooks/locale/zh_CN/LC_MESSAGES``) and ``notebooks/zh_CN`` is built from them. Here: no unit is
untranslated or fuzzy, every unit of prose has Chinese, the built notebooks are what ``build`` writes
now and carry the English code, the glossary's terms are rendered the same way everywhere, and the
catalog update does what a translator relies on (a changed English unit becomes fuzzy, a new one
untranslated, a removed one obsolete).
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from notebook_sections import CHECK_MARK, output_text, sanitize, sanitizer
from prose_figures import Outputs

from edition import translate
from edition.code_units import skeleton

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
GLOSSARY = NOTEBOOKS / "locale" / "zh_CN" / "glossary.md"


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def glossary() -> list[tuple[str, str]]:
    """The checked rows of the glossary: (English term, Chinese term)."""
    rows = []
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[2] == "checked" and cells[0] != "English":  # (not the header row)
            rows.append((cells[0], cells[1]))
    return rows


def term_pattern(english: str) -> re.Pattern:
    """The English term in prose, singular or plural, any case."""
    return re.compile(r"\b" + re.escape(english).replace(r"\ ", r"[\s-]+") + r"(?:s|es)?\b", re.IGNORECASE)


# Quoted English ("Example stragglers: ...", “...”): a log line, a message or a title, quoted as it is, not prose.
_QUOTED = re.compile(r'"[^"]*"|“[^”]*”')


def glossary_breaches(messages, rows) -> list[str]:
    """Units whose English prose uses a checked term and whose translation lacks its Chinese. Code,
    links and math are not prose, nor is quoted English (a log line, a paper's title): a translation
    keeps those as they are and needs no gloss of their words."""
    found = []
    for message in messages:
        prose = _QUOTED.sub(" ", translate._NOT_PROSE.sub(" ", message.msgid))
        if (message.msgctxt or "").endswith(translate.CODE):  # a code unit's {fields} are code, not words
            prose = re.sub(r"\{[^{}]*\}", " ", prose)
        for english, chinese in rows:
            if term_pattern(english).search(prose) and chinese not in message.msgstr:
                found.append(f"[{message.msgctxt}] {english!r} → {chinese!r}: {message.msgstr[:50]!r}")
    return found


def test_every_chapter_cuts_into_units_and_back_to_the_same_markdown():
    count = 0
    for chapter in translate.chapters():
        for cell in _cells(chapter):
            if cell["cell_type"] == "markdown":
                pieces = translate.split_markdown(_source(cell))
                assert "\n".join(p.render() for p in pieces) == _source(cell), (chapter.name, cell["id"])
                count += sum(p.unit for p in pieces)
    assert count > 500  # the units are there: a cut that found none would pass the line above


def test_the_chinese_edition_is_complete_and_in_step():
    assert translate.problems("zh_CN") == []


def test_each_chinese_chapter_has_its_english_chapters_code_and_cells():
    """Its code is the English program, comments and printed or drawn words aside (``code_units``)."""
    for chapter in translate.chapters():
        english, chinese = _cells(chapter), _cells(translate.built_path(chapter, "zh_CN"))
        # One cell more, the first: it sets dtfkit's language, so the feedback the chapter shows is Chinese.
        first, chinese = chinese[0], chinese[1:]
        assert first["id"] == translate.LANGUAGE_CELL_ID
        assert 'dtfkit.set_language("zh_CN")' in _source(first)
        assert [(c["id"], c["cell_type"]) for c in chinese] == [(c["id"], c["cell_type"]) for c in english]
        for ours, theirs in zip(chinese, english, strict=True):
            if theirs["cell_type"] == "code":
                # The same program: only comments and the words it prints or draws are translated.
                assert skeleton(_source(ours)) == skeleton(_source(theirs)), (chapter.name, theirs["id"])
            else:
                assert translate._CJK.search(_source(ours)) or not translate.has_prose(_source(theirs))


def test_the_glossary_terms_are_rendered_the_same_way_in_every_chapter():
    rows = glossary()
    assert len(rows) >= 15
    found = []
    for chapter in translate.chapters():
        catalog = translate.read_catalog(translate.catalog_path(chapter, "zh_CN"), "zh_CN")
        found += [f"{chapter.stem} {line}" for line in glossary_breaches(translate._messages(catalog), rows)]
    assert found == []


# In the library's messages, code is quoted ('cluster'), called (cluster.logs('{task}')) or a {field}.
_LIBRARY_CODE = re.compile(r"'[\w:./-]+'|\"[^\"]*\"|\b\w+(?:\.\w+)+(?:\([^)]*\))?|\{[^{}]*\}")


def test_the_glossary_terms_are_rendered_the_same_way_in_the_librarys_messages():
    from types import SimpleNamespace

    from dtfkit import i18n

    catalog = translate.read_catalog(i18n.catalog_path("zh_CN"))
    prose = [
        SimpleNamespace(msgctxt="dtfkit", msgid=_LIBRARY_CODE.sub(" ", m.msgid), msgstr=m.msgstr)
        for m in translate._messages(catalog)
    ]
    assert len(prose) > 500 and glossary_breaches(prose, glossary()) == []


def test_the_glossary_check_finds_a_term_rendered_otherwise():
    import polib

    rows = [("parameter server", "参数服务器"), ("gradient", "梯度")]
    good = polib.POEntry(
        msgid="Each worker sends its gradients to the parameter server.",
        msgstr="每个 worker 把梯度发给参数服务器。",
    )
    bad = polib.POEntry(
        msgid="The parameter-server holds the variables.", msgstr="参数节点保存变量。", msgctxt="x"
    )
    code = polib.POEntry(msgid="Call `parameter_server()` here.", msgstr="在这里调用 `parameter_server()`。")
    assert glossary_breaches([good, code], rows) == []
    assert glossary_breaches([bad], rows) == ["[x] 'parameter server' → '参数服务器': '参数节点保存变量。'"]


def test_the_glossary_check_skips_a_term_only_in_quoted_english():
    import polib

    rows = [("replica", "副本"), ("cluster", "集群")]
    quoted = polib.POEntry(
        msgid='The log says "Example stragglers: /job:worker/replica:0/task:1" and the “Replica Paper” agrees.',
        msgstr="日志写着“Example stragglers: /job:worker/replica:0/task:1”，“Replica Paper” 也这么说。",
        msgctxt="q",
    )
    unquoted = polib.POEntry(
        msgid='Each replica of the cluster logs "Waiting for 1/2 tasks to connect".',
        msgstr="集群的每个拷贝都记录“Waiting for 1/2 tasks to connect”。",
        msgctxt="u",
    )
    assert glossary_breaches([quoted], rows) == []
    assert glossary_breaches([unquoted], rows) == [
        "[u] 'replica' → '副本': '集群的每个拷贝都记录“Waiting for 1/2 tasks to connect”。'"
    ]


def _one_chapter(tmp_path: Path) -> Path:
    """A notebooks folder with chapter 9 alone, its catalog translated (every unit "译文")."""
    shutil.copy(NOTEBOOKS / "09_ps_vs_ring_allreduce.ipynb", tmp_path)
    translate.extract("zh_CN", tmp_path)
    entries = translate.todo("09", "zh_CN", tmp_path)
    for entry in entries:
        entry["string"] = "译文：" + entry["id"].replace("\n", " ")
    assert translate.fill("09", entries, "zh_CN", tmp_path) == len(entries) > 50
    translate.build("zh_CN", tmp_path)
    assert translate.problems("zh_CN", tmp_path) == []
    return tmp_path / "09_ps_vs_ring_allreduce.ipynb"


def test_a_changed_english_unit_becomes_fuzzy_a_new_one_untranslated_a_removed_one_obsolete(tmp_path):
    chapter = _one_chapter(tmp_path)
    notebook = json.loads(chapter.read_text(encoding="utf-8"))
    cell = next(c for c in notebook["cells"] if c["cell_type"] == "markdown")
    pieces = translate.split_markdown(_source(cell))
    paragraphs = [p for p in pieces if p.kind == "paragraph"]
    changed, removed = paragraphs[0], paragraphs[1]
    text = _source(cell).replace(changed.text, changed.text.replace("one thing", "exactly one thing"), 1)
    text = text.replace(removed.text, "A paragraph added after the catalog was translated.", 1)
    cell["source"] = text.splitlines(keepends=True)
    chapter.write_text(translate.notebook_text(notebook), encoding="utf-8")

    counts = translate.extract("zh_CN", tmp_path)["09_ps_vs_ring_allreduce"]
    assert counts[1:] == (1, 1)  # (units, untranslated, fuzzy)
    (fuzzy,) = [e for e in translate.todo("09", "zh_CN", tmp_path) if e["previous"]]
    assert fuzzy["previous"] == [changed.text] and "exactly one thing" in fuzzy["id"]
    assert fuzzy["string"].startswith("译文：")  # the old translation is kept for the translator to revise
    catalog = translate.read_catalog(translate.catalog_path(chapter, "zh_CN"), "zh_CN")
    assert [m.msgid for m in catalog.obsolete_entries()] == [removed.text]
    found = translate.problems("zh_CN", tmp_path)
    assert any("untranslated" in line and "A paragraph added" in line for line in found), found
    assert any("fuzzy" in line for line in found), found
    assert any("differs from what build writes" in line for line in found), found
    # A build leaves both in English until a translator has been there.
    built, missing = translate.build_notebook(chapter, "zh_CN")
    assert len(missing) == 2
    assert "exactly one thing" in "".join(built["cells"][1]["source"])


def test_check_finds_a_hand_edited_build_a_missing_one_and_a_missing_catalog(tmp_path):
    chapter = _one_chapter(tmp_path)
    built = translate.built_path(chapter, "zh_CN")
    built.write_text(built.read_text(encoding="utf-8").replace("译文", "译本", 1), encoding="utf-8")
    assert any("differs from what build writes" in line for line in translate.problems("zh_CN", tmp_path))
    built.unlink()
    assert any("not built" in line for line in translate.problems("zh_CN", tmp_path))
    translate.catalog_path(chapter, "zh_CN").unlink()
    assert any("no catalog" in line for line in translate.problems("zh_CN", tmp_path))
    from dtfkit.errors import DtfkitError

    with pytest.raises(DtfkitError, match="no catalog yet; python -m dtfkit translations extract writes it"):
        translate.build("zh_CN", tmp_path)


def test_check_finds_a_translation_without_chinese_of_its_own_and_lost_markup(tmp_path):
    chapter = _one_chapter(tmp_path)
    catalog_path = translate.catalog_path(chapter, "zh_CN")
    catalog = translate.read_catalog(catalog_path, "zh_CN")
    messages = translate._messages(catalog)
    copied = next(m for m in messages if translate.has_prose(m.msgid) and "分布式" in m.msgid)
    copied.msgstr = copied.msgid  # "translated" by copying English that quotes a Chinese title
    coded = next(m for m in messages if "`_Send`" in m.msgid)
    coded.msgstr = coded.msgstr.replace("`_Send`", "_Send", 1)
    translate.write_catalog(catalog, catalog_path)
    found = translate.problems("zh_CN", tmp_path)
    assert any("has no Chinese of its own" in line for line in found), found
    assert any("code span `_Send` is missing" in line for line in found), found


def test_check_finds_units_the_catalog_has_not_got(tmp_path):
    chapter = _one_chapter(tmp_path)
    notebook = json.loads(chapter.read_text(encoding="utf-8"))
    cell = next(c for c in notebook["cells"] if c["cell_type"] == "markdown")
    cell["source"] = [*cell["source"], "\n\nA paragraph nobody has extracted yet."]
    chapter.write_text(translate.notebook_text(notebook), encoding="utf-8")
    assert any(
        "1 unit(s) not in the catalog; run extract" in line for line in translate.problems("zh_CN", tmp_path)
    )


def test_an_obsolete_unit_that_comes_back_gets_its_translation_back(tmp_path):
    chapter = _one_chapter(tmp_path)
    original = chapter.read_text(encoding="utf-8")
    notebook = json.loads(original)
    cell = next(c for c in notebook["cells"] if c["cell_type"] == "markdown")
    gone = next(p for p in translate.split_markdown(_source(cell)) if p.kind == "paragraph")
    cell["source"] = _source(cell).replace(gone.text, "", 1).splitlines(keepends=True)
    chapter.write_text(translate.notebook_text(notebook), encoding="utf-8")
    translate.extract("zh_CN", tmp_path)
    catalog = translate.read_catalog(translate.catalog_path(chapter, "zh_CN"))
    assert gone.text in [m.msgid for m in catalog.obsolete_entries()]
    chapter.write_text(original, encoding="utf-8")
    assert translate.extract("zh_CN", tmp_path)["09_ps_vs_ring_allreduce"][1:] == (0, 0)


def test_the_cut_keeps_list_items_and_solution_markers_apart():
    source = (
        "1. First step.\n\n   More about it.\n2. Second step.\n\n### BEGIN SOLUTION\nanswer\n### END SOLUTION"
    )
    pieces = translate.split_markdown(source)
    assert [(p.kind, p.text) for p in pieces if p.unit] == [
        ("item", "First step."),
        ("paragraph", "More about it."),
        ("item", "Second step."),
        ("paragraph", "answer"),
    ]
    rendered = "\n".join(p.render("译") if p.unit else p.render() for p in pieces)
    assert rendered == "1. 译\n\n   译\n2. 译\n\n### BEGIN SOLUTION\n译\n### END SOLUTION"
    assert translate._one_folder_down("02_x.ipynb#goals", "zh_CN") == "02_x.ipynb#goals"
    assert translate._one_folder_down("./images/a.png", "zh_CN") == "../images/a.png"


def test_an_unknown_language_or_chapter_is_a_clear_error():
    from dtfkit.errors import DtfkitError

    with pytest.raises(DtfkitError, match="no translation of the course into 'fr'"):
        translate.extract("fr")
    with pytest.raises(DtfkitError, match="no chapter or document '14'"):
        translate.todo("14")


def test_the_translations_link_to_translations_and_find_the_images():
    readme = (NOTEBOOKS.parent / "README.zh-CN.md").read_text(encoding="utf-8")
    assert "](docs/teaching.zh-CN.md)" in readme and "](docs/teaching.md)" not in readme
    assert "](docs/nbgrader.md)" in readme  # a document with no translation: the English one
    lab = "".join(
        "".join(c["source"])
        for c in _cells(NOTEBOOKS / "zh_CN" / "08_sync_async_lab.ipynb")
        if c["cell_type"] == "markdown"
    )
    # the Chinese panel's screenshot (test_browser_lab's Chinese run takes it), not the English one
    assert "](../images/08_lab_panel.zh_CN.png)" in lab
    assert (NOTEBOOKS / "images" / "08_lab_panel.zh_CN.png").exists()


def test_an_image_with_a_version_in_the_language_is_linked_from_the_translation(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "panel.png").write_bytes(b"png")
    assert translate._one_folder_down("images/panel.png", "zh_CN", tmp_path) == "../images/panel.png"
    (tmp_path / "images" / "panel.zh_CN.png").write_bytes(b"png")
    assert translate._one_folder_down("images/panel.png", "zh_CN", tmp_path) == "../images/panel.zh_CN.png"
    assert translate._one_folder_down("images/other.png", "zh_CN", tmp_path) == "../images/other.png"


def test_jupyterlab_can_show_its_own_interface_in_chinese():
    """The notebooks extra installs JupyterLab's Chinese language pack (Settings → Language)."""
    from jupyterlab_server.translation_utils import get_language_packs

    packs, _ = get_language_packs("en")
    assert "zh_CN" in packs


FIGURE = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:[.,]\d+)*")


def figures_lost(messages, of_the_english_run=lambda figure: False) -> list[str]:
    """Units whose translation lacks a number the English states (as often as the English states it),
    but for a unit that states the English run's figures (``of_the_english_run`` says so of one it lost)."""
    from collections import Counter

    found = []
    for message in messages:
        lost = Counter(FIGURE.findall(message.msgid)) - Counter(FIGURE.findall(message.msgstr))
        if lost and not any(of_the_english_run(figure) for figure in lost):
            found.append(f"[{message.msgctxt}] {sorted(lost)}: {message.msgstr[:60]!r}")
    return found


def test_every_figure_of_the_english_is_in_its_translation():
    """The English chapters' prose states only figures their outputs show (tests/test_prose_figures.py);
    a translation keeps every figure of its unit, but for one of the English run: a number the English
    chapter's outputs show and the Chinese chapter's do not. The Chinese chapter ran on its own, and
    states its own run's figure there (test_prose_figures.py holds it to the Chinese outputs)."""

    found = []
    for source in translate.sources("zh_CN"):
        catalog = translate.read_catalog(source.catalog, "zh_CN")
        english, chinese = (
            (Outputs(_cells(source.english)), Outputs(_cells(source.built)))
            if source.is_chapter
            else (None, None)
        )

        def run_figure(figure: str, english=english, chinese=chinese) -> bool:
            return english is not None and english.shows(figure) and not chinese.shows(figure)

        # Prose only: a code unit's figures are printed by the code itself, in both runs.
        prose = [m for m in translate._messages(catalog) if not (m.msgctxt or "").endswith(translate.CODE)]
        found += [f"{source.name} {line}" for line in figures_lost(prose, run_figure)]
    assert found == []


def test_the_figures_check_finds_a_changed_number():
    import polib

    kept = polib.POEntry(
        msgid="2 ps + 3 workers, 1.5× faster in 2026", msgstr="2 个 ps + 3 个 worker，2026 年快 1.5×"
    )
    changed = polib.POEntry(msgid="about 30 s on 2 cores", msgstr="在 2 核上大约 40 s", msgctxt="c")
    assert figures_lost([kept]) == []
    assert figures_lost([changed]) == ["[c] ['30']: '在 2 核上大约 40 s'"]


def test_check_finds_an_untranslated_word_of_the_library(tmp_path, monkeypatch):
    import polib

    from dtfkit import i18n

    catalog = polib.pofile(str(i18n.catalog_path("zh_CN")))
    catalog.find("Run").msgstr = ""
    path = tmp_path / "dtfkit.po"
    catalog.save(str(path))
    monkeypatch.setattr(translate, "_library_catalog", lambda lang: path)
    assert [line for line in translate.problems("zh_CN") if line.startswith("dtfkit ")] == [
        "dtfkit [] 'Run': untranslated"
    ]


def test_a_checked_cell_prints_the_same_facts_in_both_editions():
    """A checked cell's facts are the same in the Chinese run as in the English one: the same numbers, in the
    same order, after nbval's own replacements (its sentences are translated, its figures are not; a
    translation that dropped or added a claim's number shows here). A cell with no Chinese prints exactly
    what the English prints (TensorFlow's words, addresses)."""

    rules, compared, different = sanitizer(), 0, []
    for chapter in translate.chapters():
        english = {c["id"]: c for c in _cells(chapter)}
        for cell in _cells(translate.built_path(chapter, "zh_CN")):
            if cell["cell_type"] != "code" or CHECK_MARK not in _source(cell) or cell["id"] not in english:
                continue
            ours = sanitize(output_text(cell), rules)
            theirs = sanitize(output_text(english[cell["id"]]), rules)
            compared += 1
            if translate._CJK.search(ours):
                # every number of the English line is in the Chinese one (which may write a word as a digit:
                # "ones" is 全 1)
                lost = Counter(_FACT_NUMBER.findall(theirs)) - Counter(_FACT_NUMBER.findall(ours))
                ours, theirs = sorted(lost.elements()), []
            if ours != theirs:
                different.append(f"{chapter.stem} {cell['id']}: {str(ours)[:120]} vs {str(theirs)[:120]}")
    assert compared >= 80 and different == [], different  # every checked cell of the twelve chapters


# A number a checked line states (not a part of a name such as worker:0 or ps_1).
# ("2x" and "3s", a ratio and a plural of a number, are numbers too: Chinese writes "2 倍" and "全 3")
_FACT_NUMBER = re.compile(r"(?<![\w:.])(\d+(?:[.,]\d+)*)(?:[xs]\b|(?!\w))")


def test_a_translation_never_carries_the_english_runs_widget_state():
    """The saved widget state describes the widgets of one run's outputs: the English run's would stand
    for widgets the Chinese outputs do not have. A build keeps the translation's own (none until it is
    executed again with widgets saved)."""
    carried = []
    for chapter in translate.chapters():
        english = json.loads(chapter.read_text(encoding="utf-8"))["metadata"].get("widgets")
        built, _missing = translate.build_notebook(chapter, "zh_CN")
        if english and built["metadata"].get("widgets") == english:
            carried.append(chapter.name)
    assert carried == []


def test_a_code_cells_words_are_units_and_the_check_finds_a_broken_one(tmp_path):
    """A chapter's comments and printed words are translated in its catalog (keyed ``<cell id>:code``) and put
    back in the code; a translation that loses a ``{field}`` or closes the literal's quote is reported."""
    chapter = _one_chapter(tmp_path)
    built = _cells(translate.built_path(chapter, "zh_CN"))
    printed = [c for c in built if c["cell_type"] == "code" and "译文：" in _source(c)]
    assert printed, "no code cell of chapter 9 was translated"
    catalog_path = translate.catalog_path(chapter, "zh_CN")
    catalog = translate.read_catalog(catalog_path, "zh_CN")
    code = [m for m in translate._messages(catalog) if m.msgctxt.endswith(translate.CODE)]
    fielded = next(m for m in code if "{" in m.msgid and "译文" in m.msgstr)
    fielded.msgstr = "译文：没有字段"
    quoted = next(m for m in code if m is not fielded and "{" not in m.msgid and "code string" in m.comment)
    quoted.msgstr = "译文\"'完"  # both quotes: it closes the literal, whichever quote the code used
    translate.write_catalog(catalog, catalog_path)
    translate.build("zh_CN", tmp_path)
    found = translate.problems("zh_CN", tmp_path)
    assert any("{fields} are not the English's" in line for line in found), found
    assert any("does not parse" in line for line in found), found


def test_a_code_unit_is_found_after_non_ascii_text_on_its_line():
    """ast counts columns in UTF-8 bytes, tokenize in characters: after a Chinese (or α–β) word on the same
    line, the literal printed is still the one cut out, and a dictionary key beside it is not."""
    from edition.code_units import code_units

    line = 'print("梯度：", x, "-> 总和", r["task"])'
    assert [u.text for u in code_units(line, every=True)] == ["梯度：", "-> 总和"]
    assert [u.text for u in code_units('print("α–β model", r["task"], "the sum")')] == [
        "α–β model",
        "the sum",
    ]


def test_a_sentence_that_reaches_print_through_a_name_is_a_unit_but_a_key_is_not():
    """Printed through a loop variable or a name that nothing else reads: a unit. Read as data too (a key
    looked up, a value compared): left alone, so that both editions run the same program."""
    from edition.code_units import code_units

    shown = (
        'spans = {"both workers, until one was killed": (0, 1)}\n'
        "for what, (since, until) in spans.items():\n"
        '    print(f"{what}: {until - since}")\n'
        'too_late = "no error"\n'
        "print(too_late)\n"
    )
    assert [u.text for u in code_units(shown)] == [  # (the f-string has no word of its own)
        "both workers, until one was killed",
        "no error",
    ]
    data = (
        'for way in ("sparse read", "dense read"):\n'
        "    print(way, moved[way])\n"
        'label = "whole cluster"\n'
        "outcome[label] = 1\n"
        "print(label)\n"
    )
    assert [u.text for u in code_units(data)] == []
