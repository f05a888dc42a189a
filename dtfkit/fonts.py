"""Fonts that draw the reader's language in matplotlib's figures (its default font has no Chinese glyphs).

``draw_in_the_language()`` (called by every plot the kit draws, once the language is not English) adds an
installed font with the language's glyphs after matplotlib's default font: a character the first font lacks
is drawn with it. With no such font installed the text shows as boxes, as before; ``fonts-wqy-microhei``
(Debian) is one.

Example::

    from dtfkit import fonts
    from dtfkit.i18n import language
    fonts.draw_in_the_language(language())   # before drawing a figure whose words may be Chinese
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

# Fonts with Chinese glyphs, in the order tried (matplotlib's own DejaVu Sans has none).
CHINESE_FONTS = (
    "Noto Sans CJK SC",
    "Source Han Sans SC",
    "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei",
    "SimHei",
)


def draw_in_the_language(lang: str) -> None:
    """Let matplotlib draw ``lang``'s words (``dtfkit.i18n.language()``, say); nothing for English."""
    if lang != "en":
        _fall_back_on_a_font_for(lang)


def _add_system_fonts(font_manager, names: Sequence[str]) -> set[str]:
    """Add the system's fonts named ``names`` to matplotlib's list (its cache predates a font installed
    after matplotlib first ran); the names added."""
    added = set()
    for path in font_manager.findSystemFonts():
        try:
            name = font_manager.get_font(path).family_name
        except (OSError, RuntimeError):
            continue
        if name in names:
            font_manager.fontManager.addfont(path)
            added.add(name)
    return added


@functools.cache
def _fall_back_on_a_font_for(lang: str) -> None:
    """Let matplotlib draw the titles of ``lang`` with an installed font that has its glyphs, after
    its default font (for each character it lacks); none installed: the text shows as boxes, as before."""
    import matplotlib
    from matplotlib import font_manager

    installed = {font.name for font in font_manager.fontManager.ttflist}
    if not installed & set(CHINESE_FONTS):
        installed |= _add_system_fonts(font_manager, CHINESE_FONTS)
    fallback = [name for name in CHINESE_FONTS if name in installed]
    # A family after the first in font.family is where matplotlib looks for a glyph the first lacks.
    families = list(matplotlib.rcParams["font.family"])
    missing = [name for name in fallback if name not in families]
    if missing:
        matplotlib.rcParams["font.family"] = [*families, *missing]
