"""Card figures: SVGs drawn by code from the library's own numbers.

``FIGURES`` names every figure and the function giving its data (``labs.viz.cards.data``,
torch- and matplotlib-free: the web process imports this package to build each figure's
table and to check that a committed SVG is current). ``labs.viz.cards.draw`` renders them
with matplotlib in the colours of ``labs.viz.theme``; ``lowbit content figures`` writes
them to ``content/figures/<name>.svg``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

from labs.viz.cards.data import FigureData, block_layouts, e2m1_grid, kv_page, roofline

#: Every card figure by name: the function that gives its data.
FIGURES: MappingProxyType[str, Callable[[], FigureData]] = MappingProxyType(
    {
        "e2m1-grid": e2m1_grid,
        "block-bytes": block_layouts,
        "roofline": roofline,
        "kv-page": kv_page,
    }
)

#: The attribute on a figure's root <svg> that holds its data fingerprint.
FINGERPRINT_ATTR = "data-lowbit-data"
#: The attribute that names the matplotlib that drew it: the tests compare bytes only
#: when the same version redraws (another version may lay the same numbers out anew).
DRAWN_WITH_ATTR = "data-lowbit-drawn-with"

__all__ = ["DRAWN_WITH_ATTR", "FIGURES", "FINGERPRINT_ATTR", "FigureData"]
