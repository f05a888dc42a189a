"""The language of what dtfkit shows a learner: English, or Simplified Chinese.

``dtfkit.set_language("zh_CN")`` in a notebook (or ``DTFKIT_LANG=zh_CN`` in the kernel's
environment) switches the words the library shows there; ``set_language(None)`` goes back to
the environment's choice, English by default. Words are marked in the source with ``_()``; their
translations are a gettext catalog, ``dtfkit/locale/<lang>/LC_MESSAGES/dtfkit.po``, compiled in
memory when first needed. ``python -m dtfkit translations extract`` adds every ``_()`` and ``N_()``
string of ``dtfkit/`` (and every exercise's title) to it, as it does the chapters' prose. What is
translated: what a learner reads from the library (exercise feedback and hints, ``diagnose``'s
findings, the sync/async lab). The engine's errors stay in English, as TensorFlow's do.

The choice reaches the processes the kernel starts afterwards (a cluster's tasks, where an exercise's
answer runs): ``set_language`` writes it to ``DTFKIT_LANG`` in this process's environment.

Example::

    >>> from dtfkit.i18n import _, set_language
    >>> set_language("zh_CN")
    >>> _("Run")
    '运行'
    >>> set_language(None)
    >>> _("Run")
    'Run'
"""

from __future__ import annotations

import functools
import gettext
import io
import os
from collections.abc import Iterable
from pathlib import Path

from dtfkit.errors import DtfkitError

LANGUAGE_ENV = "DTFKIT_LANG"
LANGUAGES = ("en", "zh_CN")
# The id of a translated chapter's first cell, which calls ``set_language`` (``edition/translate.py`` writes it).
LANGUAGE_CELL_ID = "dtfkit-language"
LOCALE = Path(__file__).resolve().parent / "locale"
_chosen: str | None = None


def set_language(lang: str | None) -> None:
    """Show dtfkit's words in ``lang`` ("en" or "zh_CN") in this process; None: as the environment
    (``DTFKIT_LANG``) says, English when it says nothing.

    Example::

        dtfkit.set_language("zh_CN")     # the first cell of a Chinese chapter
    """
    global _chosen
    if lang is not None and lang not in LANGUAGES:
        raise DtfkitError(
            f"dtfkit speaks {' and '.join(LANGUAGES)}, not {lang!r}: set_language('zh_CN'), say"
        )
    if lang is None and _chosen is not None:
        _restore_environment()
    elif lang is not None:
        if _chosen is None:
            _environment_before.append(os.environ.get(LANGUAGE_ENV))
        os.environ[LANGUAGE_ENV] = lang
    _chosen = lang
    if language() != "en":
        _draw_figures_in_the_language()


def _draw_figures_in_the_language() -> None:
    """A chapter's own figures (its code's ``plt`` calls) draw the language's words too: a font with its
    glyphs after matplotlib's default (``dtfkit.fonts``); nothing where matplotlib is not installed."""
    try:
        from dtfkit import fonts

        fonts.draw_in_the_language(language())
    except ImportError:
        pass


_environment_before: list[str | None] = []  # DTFKIT_LANG as it was before set_language changed it


def _restore_environment() -> None:
    before = _environment_before.pop() if _environment_before else None
    if before is None:
        os.environ.pop(LANGUAGE_ENV, None)
    else:
        os.environ[LANGUAGE_ENV] = before


def language() -> str:
    """The language dtfkit's words are shown in now."""
    lang = _chosen or os.environ.get(LANGUAGE_ENV) or "en"
    return lang if lang in LANGUAGES else "en"


def catalog_path(lang: str) -> Path:
    return LOCALE / lang / "LC_MESSAGES" / "dtfkit.po"


@functools.cache
def _translations(lang: str) -> gettext.NullTranslations:
    path = catalog_path(lang)
    if lang == "en" or not path.exists():
        return gettext.NullTranslations()
    import polib

    catalog = polib.pofile(str(path))
    for entry in catalog:  # a fuzzy translation waits for a translator, as msgfmt leaves it out
        if "fuzzy" in entry.flags:
            entry.msgstr = ""
    return gettext.GNUTranslations(io.BytesIO(catalog.to_binary()))


def in_language(message: str, lang: str) -> str:
    """``message`` in ``lang``, whatever language dtfkit speaks now (to read back what it wrote in another).

    Example::

        >>> in_language("Run", "en")
        'Run'
    """
    return _translations(lang).gettext(message) if message else message  # gettext("") is the catalog's header


def _(message: str) -> str:
    """``message`` in the language dtfkit speaks now (itself where it has no translation)."""
    return in_language(message, language())


# How a language lists things: items of a list, and clauses of a sentence.
_SEPARATORS = {"en": (", ", "; "), "zh_CN": ("、", "；")}


def joined(items: Iterable[str], *, clauses: bool = False) -> str:
    """``items`` as the language dtfkit speaks now lists them: ``a, b`` (``a; b`` for ``clauses``) in English,
    ``a、b`` (``a；b``) in Chinese.

    Example::

        >>> joined(["worker:0", "worker:1"])
        'worker:0, worker:1'
    """
    return _SEPARATORS[language()][1 if clauses else 0].join(items)


def N_(message: str) -> str:
    """``message`` itself, marked for the catalog: a constant translated where it is shown, ``_(X)``."""
    return message
