"""What dtfkit shows a learner, in the learner's language (``dtfkit.i18n``; fast tier).

English unless ``dtfkit.set_language`` or ``DTFKIT_LANG`` say otherwise; the words come from the
library's gettext catalog (``dtfkit/locale/zh_CN/LC_MESSAGES/dtfkit.po``), which
``tests/test_translations.py`` keeps complete. The sync/async lab's panel is the first to speak Chinese.
"""

from __future__ import annotations

import polib
import pytest

import dtfkit
from dtfkit import i18n
from dtfkit.course import translate
from dtfkit.errors import DtfkitError


@pytest.fixture(autouse=True)
def english_after(monkeypatch):
    monkeypatch.delenv(i18n.LANGUAGE_ENV, raising=False)
    yield
    dtfkit.set_language(None)


def test_english_unless_asked_otherwise(monkeypatch):
    assert i18n.language() == "en" and i18n._("Run") == "Run"
    monkeypatch.setenv(i18n.LANGUAGE_ENV, "zh_CN")
    assert i18n.language() == "zh_CN" and i18n._("Run") == "运行"
    dtfkit.set_language("en")  # the call wins over the environment
    assert i18n._("Run") == "Run"
    dtfkit.set_language(None)
    assert i18n._("Run") == "运行"
    assert i18n._("words nobody marked") == "words nobody marked"


def test_an_unknown_language_is_a_clear_error():
    with pytest.raises(DtfkitError, match="dtfkit speaks en and zh_CN, not 'fr'"):
        dtfkit.set_language("fr")


def test_the_lab_panel_speaks_chinese():
    from dtfkit.lab import Lab

    dtfkit.set_language("zh_CN")
    with Lab() as lab:
        panel = lab.panel()
        words = [panel.run_button.description, panel.stop_button.description, panel.status.value]
        assert words == ["运行", "停止", "空闲"]
        assert panel.learning_rate.description == "学习率"
    dtfkit.set_language("en")
    with Lab() as lab:
        assert lab.panel().run_button.description == "Run"


def test_every_marked_string_is_in_the_catalog():
    marked = {entry.msgid for entry in translate.library_template()}
    assert {"Run", "Stop", "idle", "learning rate"} <= marked
    catalog = polib.pofile(str(i18n.catalog_path("zh_CN")))
    assert marked <= {entry.msgid for entry in catalog if not entry.obsolete}


def test_a_fuzzy_translation_is_not_shown(tmp_path, monkeypatch):
    catalog = polib.POFile()
    catalog.metadata = {"Content-Type": "text/plain; charset=utf-8"}
    catalog.append(polib.POEntry(msgid="Run", msgstr="运行"))
    catalog.append(polib.POEntry(msgid="Stop", msgstr="旧的译文", flags=["fuzzy"]))
    (tmp_path / "zh_CN" / "LC_MESSAGES").mkdir(parents=True)
    catalog.save(str(tmp_path / "zh_CN" / "LC_MESSAGES" / "dtfkit.po"))
    monkeypatch.setattr(i18n, "LOCALE", tmp_path)
    i18n._translations.cache_clear()
    try:
        dtfkit.set_language("zh_CN")
        assert (i18n._("Run"), i18n._("Stop")) == ("运行", "Stop")
    finally:
        i18n._translations.cache_clear()
