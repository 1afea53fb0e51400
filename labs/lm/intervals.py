"""95 % intervals over evaluation windows, and paired comparisons on the same windows.

The unit is the window, not the token: tokens inside one window share their context
and their errors are strongly correlated, so a per-token standard error (what
llama.cpp's ``llama-perplexity`` prints after ``±``) is too narrow. Windows are
consecutive non-overlapping stretches of text and close to independent.

Method: the standard error of the mean over windows with Student's t critical value
(``n − 1`` degrees of freedom), not a bootstrap. The default runs have 4 to 8
windows: a percentile bootstrap over 4 windows has only 35 distinct resamples and
covers far less than 95 % (it ignores that the spread is itself estimated), and even
1.96 · SE covers only about 88 % with 5 windows, while the t interval is exact for
normal window means, which each window mean of 255 tokens nearly is.

A **paired** comparison of two configurations evaluated on the same windows (two
formats, two methods, quantized vs baseline) takes the per-window difference, whose
spread is far smaller than either series' own (a hard window is hard for both), and
says the difference is inside the noise when its interval contains 0.

Pure Python: no torch, no scipy (the t quantile for integer degrees of freedom has a
closed-form distribution function, Abramowitz & Stegun 26.7.3-4, inverted by bisection).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

LEVEL = 0.95
METHOD = (
    "Student t interval of the mean over windows (standard error of the per-window "
    "values, n − 1 degrees of freedom)"
)


def t_two_sided(t: float, df: int) -> float:
    """P(|T| ≤ t) for Student's t with ``df`` (integer ≥ 1) degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:  # odd: (2/π)[θ + sinθ cosθ (1 + 2/3 cos²θ + 2·4/(3·5) cos⁴θ + …)]
        term = series = 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            series += term
        return 2 / math.pi * (theta + s * math.cos(theta) * series)
    term = series = 1.0  # even: sinθ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + …)
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        series += term
    return s * series


@cache
def t_critical(df: int, level: float = LEVEL) -> float:
    """The t with P(|T| ≤ t) = ``level``: 12.706 for 1 degree of freedom, 1.96 in the limit."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    lo, hi = 0.0, 1.0
    while t_two_sided(hi, df) < level:
        hi *= 2
    for _ in range(80):  # far below float resolution of t
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_two_sided(mid, df) < level else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Interval:
    """A mean over windows with its ``level`` interval (low == high with one window)."""

    estimate: float
    low: float
    high: float
    windows: int
    level: float = LEVEL

    def as_list(self) -> list[float]:
        return [self.low, self.high]

    def map(self, fn: Callable[[float], float]) -> Interval:
        """The interval of a monotone increasing function of the mean (``math.exp``)."""
        return Interval(fn(self.estimate), fn(self.low), fn(self.high), self.windows, self.level)


def mean_interval(
    values: Sequence[float],
    *,
    level: float = LEVEL,
    lower: float | None = None,
    upper: float | None = None,
) -> Interval:
    """Mean of ``values`` (one per window) with its t interval, clipped to
    ``[lower, upper]`` where the quantity cannot go (KL ≥ 0, a share within [0, 1])."""
    n = len(values)
    if n == 0:
        raise ValueError("no windows")
    mean = math.fsum(values) / n
    if n < 2:
        return Interval(mean, mean, mean, n, level)
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    half = t_critical(n - 1, level) * math.sqrt(var / n)
    low, high = mean - half, mean + half
    if lower is not None:
        low = max(low, lower)
    if upper is not None:
        high = min(high, upper)
    return Interval(mean, low, high, n, level)


@dataclass(frozen=True)
class Difference:
    """Mean per-window difference ``a − b`` with its interval."""

    mean: float
    low: float
    high: float
    windows: int
    level: float = LEVEL

    @property
    def inside_noise(self) -> bool:
        """True when the interval contains 0: these windows cannot tell ``a`` from ``b``
        (always with one window, which gives no measure of the noise)."""
        return self.windows < 2 or self.low <= 0.0 <= self.high

    def as_dict(self) -> dict[str, float | int | bool]:
        return {
            "difference": self.mean,
            "low": self.low,
            "high": self.high,
            "windows": self.windows,
            "inside_noise": self.inside_noise,
        }


def paired_difference(
    a: Sequence[float], b: Sequence[float], *, level: float = LEVEL
) -> Difference:
    """The paired comparison of two series measured on the same windows, in order."""
    if len(a) != len(b):
        raise ValueError(f"paired series need the same windows: {len(a)} vs {len(b)} values")
    iv = mean_interval([x - y for x, y in zip(a, b, strict=True)], level=level)
    return Difference(iv.estimate, iv.low, iv.high, iv.windows, level)
