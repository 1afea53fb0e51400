"""Numbers with their 95 % interval, worded the way the field prints them
("17.8 ± 0.4"), and the words for a paired difference. Torch-free: the web process
builds tiles from stored results with these."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from labs.viz.tiles import Tile, exact_text, readable

# Significant digits of the ± half-width: two, as llama-perplexity prints its error.
HALF_WIDTH_DIGITS = 2
# An interval whose wide side is this many times its narrow side is shown as its two
# ends, not as ± the wide side (perplexity over two windows: 24, 95 % 0.2 to 2,600).
LOPSIDED = 1.5


def half_width(value: float, low: float, high: float) -> float:
    """The larger side of the interval around ``value``: an interval clipped at a bound
    (KL ≥ 0, a share ≤ 1) is lopsided, and the wider side is the honest ±."""
    return max(value - low, high - value, 0.0)


def _decimals(h: float) -> int:
    """Decimals that show ``h`` to HALF_WIDTH_DIGITS significant digits."""
    if h <= 0 or not math.isfinite(h):
        return 0
    return max(0, HALF_WIDTH_DIGITS - 1 - math.floor(math.log10(h)))


def pm(value: float, interval: Sequence[float] | None, unit: str = "", scale: float = 1.0) -> str:
    """``value ± half-width`` rounded to the interval's precision: (17.83, [17.4, 18.2])
    → '17.83 ± 0.42'; without an interval (or a zero-width one) the value alone; a
    negative number (a difference) with a true minus sign. ``scale`` multiplies both
    (100 for a share shown in %)."""
    return _pm(value, interval, unit, scale).replace("-", "−")


def _pm(value: float, interval: Sequence[float] | None, unit: str = "", scale: float = 1.0) -> str:
    """pm() before the minus signs."""
    v = value * scale
    suffix = f" {unit}" if unit and unit != "%" else (" %" if unit == "%" else "")
    if not interval or len(interval) != 2:
        return f"{readable(v)}{suffix}"
    low, high = interval[0] * scale, interval[1] * scale
    h = half_width(v, low, high)
    if h <= 0:
        return f"{readable(v)}{suffix}"
    if min(v - low, high - v) * LOPSIDED < h:  # exp of a wide NLL interval, a clipped KL
        return f"{readable(v)}{suffix} (95 % {readable(low)} to {readable(high)})"
    d = _decimals(h)
    if abs(v) >= 1e-3 or d <= 6:
        return f"{v:,.{d}f} ± {h:,.{d}f}{suffix}"
    return f"{readable(v)} ± {readable(h, HALF_WIDTH_DIGITS)}{suffix}"


def interval_tile(
    label: str,
    result: Mapping[str, Any],
    key: str,
    unit: str = "",
    *,
    means: str = "",
    scale: float = 1.0,
    tone: str = "",
) -> Tile:
    """A tile for ``result[key]`` with its interval ``result[key + '_interval']``."""
    value = float(result[key])
    iv = result.get(key + "_interval")
    shown_unit = "%" if scale == 100 else unit
    return Tile(
        label=label,
        text=pm(value, iv, shown_unit, scale),
        exact=exact_text(value, unit) + (f" (95 % interval {iv[0]!r} to {iv[1]!r})" if iv else ""),
        means=means,
        key=key,
        tone=tone,
        value=value * scale,
        unit=shown_unit,
    )


def noise_phrase(diff: Mapping[str, Any]) -> str:
    """'inside the noise of 8 paired windows' (or 'outside …') for a stored
    ``labs.lm.intervals.Difference.as_dict()``."""
    n = int(diff["windows"])
    if n < 2:
        return "not measurable against the noise with one window"
    return f"{'inside' if diff['inside_noise'] else 'outside'} the noise of {n} paired windows"


def noise_words(diff: Mapping[str, Any] | None, what: str = "the difference") -> str:
    """'the difference is inside the noise of 8 paired windows'."""
    return f"{what} is {noise_phrase(diff)}" if diff else ""


def relative(a: float, b: float) -> str:
    """``a`` against ``b`` as a signed percentage: '−24 %', '+3.1 %'."""
    if b == 0:
        return "—"
    change = 100 * (a / b - 1)
    sign = "+" if change > 0 else "−" if change < 0 else "±"
    return f"{sign}{readable(abs(change), 2)} %"
