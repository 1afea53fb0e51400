"""labs.viz.charts and labs.viz.theme: small, labelled, self-contained SVG safe to inline."""

from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET

import pytest

from labs.viz import charts, theme

SVG_NS = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> str:
    root = ET.fromstring(svg)
    return " ".join("".join(t.itertext()) for t in root.iter(f"{SVG_NS}text"))


def _assert_safe(svg: str) -> None:
    assert svg.startswith("<svg")
    assert len(svg.encode()) < charts.MAX_SVG_BYTES
    lowered = svg.lower()
    for forbidden in (
        "<script",
        "<!doctype",
        "<?xml",
        "<style",
        "<foreignobject",
        " onload=",
        "<metadata",
    ):
        assert forbidden not in lowered
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', svg))


def test_bar_chart_is_labelled_text():
    svg = charts.bar_chart(
        ["embedding", "attn_q"], [2.1, 10.7], title="Bytes by kind", value_label="GB (1e9 bytes)"
    )
    _assert_safe(svg)
    text = _texts(svg)
    assert "Bytes by kind" in text and "GB (1e9 bytes)" in text and "attn_q" in text


def test_histogram_size_does_not_grow_with_the_sample():
    rng = random.Random(0)
    svg = charts.histogram(
        [rng.gauss(0, 1) for _ in range(200_000)], title="errors", value_label="error (units)"
    )
    _assert_safe(svg)
    assert "error (units)" in _texts(svg)


def test_line_chart_with_limit_line_and_log_axis():
    svg = charts.line_chart(
        {"bf16": ([1, 2, 4], [30.0, 31.0, 33.0]), "fp8": ([1, 2, 4], [16.0, 17.0, 19.0])},
        title="step time",
        x_label="batch",
        y_label="ms",
        hlines={"latency target": 25.0},
        log_x=True,
    )
    _assert_safe(svg)
    text = _texts(svg)
    assert "latency target" in text and "fp8" in text


def test_two_charts_on_one_page_do_not_share_ids():
    a = charts.bar_chart(["x"], [1.0], title="a", value_label="GB")
    b = charts.bar_chart(["x"], [2.0], title="b", value_label="GB")
    ids_a = set(re.findall(r'\bid="([^"]+)"', a))
    ids_b = set(re.findall(r'\bid="([^"]+)"', b))
    assert ids_a and not ids_a & ids_b
    # Every in-document reference still resolves inside its own chart.
    assert {h[1:] for h in re.findall(r'href="(#[^"]+)"', a)} <= ids_a


def test_sanitize_strips_active_content():
    dirty = (
        '<?xml version="1.0"?><!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://x/svg11.dtd">'
        '<svg onload="alert(1)"><script>alert(1)</script><style>*{}</style>'
        '<a xlink:href="https://evil.example/">x</a><use xlink:href="#m1"/></svg>'
    )
    assert theme.sanitize_svg(dirty) == '<svg><a>x</a><use xlink:href="#m1"/></svg>'


def test_mismatched_bar_lengths_are_rejected():
    with pytest.raises(ValueError, match="differ"):
        charts.bar_chart(["a", "b"], [1.0], title="t", value_label="GB")


def test_charts_follow_the_colour_scheme_and_stay_inline_safe():
    """Colours are CSS variables (with a light fallback) and the background is clear,
    so a chart shown as an <img> follows dark mode through the stylesheet `themed` adds;
    the stored SVG itself still has no <style>."""
    svg = charts.bar_chart(["a", "b"], [1.0, 2.0], title="t", value_label="v")
    _assert_safe(svg)
    assert "var(--c1, " in svg and "var(--fg, " in svg
    assert not any(sentinel in svg for sentinel, _, _ in theme.THEME.values())
    assert "#ffffff" not in svg.lower()  # transparent: the page's background shows
    served = theme.themed(svg)
    assert served.startswith("<svg") and served.count("<style>") == 1
    assert "@media (prefers-color-scheme: dark)" in served


def test_teaching_figures_are_small_and_labelled():
    grid = charts.value_grid(
        [-6, -4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 6],
        [0.2, -2.6, 7.0],
        [0.0, -3.0, 6.0],
        title="Block 0 on the E2M1 grid",
    )
    split = charts.error_split_bars(["tensor", "block 32"], [1.0, 0.03], [0.5, 0.0], title="s")
    hist = charts.binned_histogram(
        [0, 1, 2, 3], [1000, 3, 1], title="h", x_label="value", note="2 values beyond"
    )
    mem = charts.memory_bars({"per GPU": [("weights", 60.0), ("KV", 30.0)]}, 80.0, title="m")
    for svg in (grid, split, hist, mem):
        _assert_safe(svg)
    assert "your value" in _texts(grid) and "stored as" in _texts(grid)
    assert "33% clipping" in _texts(split)
    assert "2 values beyond" in _texts(hist) and "values (log scale)" in _texts(hist)
    assert "over by 10 GB" in _texts(mem)
