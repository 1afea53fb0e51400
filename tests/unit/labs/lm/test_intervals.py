"""Intervals over windows and paired comparisons, on distributions whose answer is known."""

from __future__ import annotations

import math
import random

import pytest

from labs.lm.intervals import (
    mean_interval,
    paired_difference,
    t_critical,
    t_two_sided,
)


@pytest.mark.parametrize(
    ("df", "table"),
    [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (7, 2.365), (10, 2.228), (30, 2.042)],
)
def test_t_critical_matches_the_published_table(df: int, table: float) -> None:
    assert t_critical(df) == pytest.approx(table, abs=5e-4)


def test_t_distribution_in_closed_form() -> None:
    assert t_two_sided(1.0, 1) == pytest.approx(0.5)  # Cauchy: P(|T| <= 1) = 1/2
    for t in (0.3, 1.0, 2.5, 9.0):  # 2 degrees of freedom: t / sqrt(2 + t^2)
        assert t_two_sided(t, 2) == pytest.approx(t / math.sqrt(2 + t * t), rel=1e-12)
    assert t_critical(5000) == pytest.approx(1.95996, abs=5e-4)  # the normal limit
    with pytest.raises(ValueError):
        t_two_sided(1.0, 0)


def coverage(draw, n: int, truth: float, trials: int = 4000) -> float:
    rng = random.Random(0)
    hits = 0
    for _ in range(trials):
        iv = mean_interval([draw(rng) for _ in range(n)])
        hits += iv.low <= truth <= iv.high
    return hits / trials


def test_95_percent_of_intervals_cover_the_mean_with_few_windows() -> None:
    # Five windows, as a default run has: 1.96 standard errors would cover only ~88 %.
    assert 0.935 <= coverage(lambda r: r.gauss(3.0, 0.4), 5, 3.0) <= 0.965
    assert 0.935 <= coverage(lambda r: r.gauss(3.0, 0.4), 2, 3.0) <= 0.965


def test_skewed_window_values_are_still_covered_with_many_windows() -> None:
    # Per-window KL is positive and skewed; with 40 windows the mean is near normal.
    assert coverage(lambda r: r.expovariate(1 / 0.004), 40, 0.004) >= 0.93


def test_bounds_clip_what_cannot_be() -> None:
    iv = mean_interval([0.0, 0.0, 0.0001, 0.02], lower=0.0)
    assert iv.low == 0.0 and iv.high > iv.estimate
    top = mean_interval([1.0, 1.0, 0.9], lower=0.0, upper=1.0)
    assert top.high == 1.0
    one = mean_interval([0.7])
    assert (one.low, one.estimate, one.high, one.windows) == (0.7, 0.7, 0.7, 1)
    with pytest.raises(ValueError):
        mean_interval([])


def paired_series(rng: random.Random, n: int, delta: float) -> tuple[list[float], list[float]]:
    """Two configurations on the same windows: a shared difficulty per window (large)
    plus each configuration's own noise (small)."""
    hard = [rng.gauss(0.0, 1.0) for _ in range(n)]
    a = [h + delta + rng.gauss(0.0, 0.05) for h in hard]
    b = [h + rng.gauss(0.0, 0.05) for h in hard]
    return a, b


def test_paired_difference_is_inside_the_noise_when_there_is_none() -> None:
    rng = random.Random(1)
    inside = sum(paired_difference(*paired_series(rng, 8, 0.0)).inside_noise for _ in range(2000))
    assert 0.93 <= inside / 2000 <= 0.97


def test_pairing_sees_a_difference_separate_intervals_cannot() -> None:
    rng = random.Random(2)
    a, b = paired_series(rng, 8, 0.2)
    d = paired_difference(a, b)
    assert not d.inside_noise and d.low > 0
    assert d.low <= 0.2 <= d.high
    assert d.mean == pytest.approx(sum(a) / 8 - sum(b) / 8)
    ia, ib = mean_interval(a), mean_interval(b)
    assert ia.low < ib.high and ib.low < ia.high  # the unpaired intervals overlap
    assert d.as_dict()["inside_noise"] is False


def test_one_window_cannot_show_a_difference() -> None:
    d = paired_difference([0.5], [0.1])
    assert d.inside_noise and d.windows == 1
    with pytest.raises(ValueError, match="same windows"):
        paired_difference([1.0, 2.0], [1.0])
