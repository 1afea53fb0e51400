"""Headline tiles: each lab's tiles carry the numbers of its own result, rounded for
reading, with the exact value beside them; every lab gets 1–5 tiles."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from labs.registry import all_labs, get_lab
from labs.viz.tiles import exact_text, lookup, readable, readable_bytes, readable_count, tile
from tests.unit.labs.helpers import run_lab

CURATED = {
    "block-quantize": {"format": "nvfp4", "distribution": "outliers"},
    "granularity-compare": {},
    "scale-derivation": {},
    "memory-budget": {},
    "kv-capacity": {},
    "qlora-budget": {},
}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (20.397, "20.4"),
        (4.50048828125, "4.5"),
        (4.25, "4.25"),
        (0.0001044, "1.04×10⁻⁴"),
        (0.009, "0.009"),
        (1234.5, "1,234"),
        (0.0, "0"),
        (-65.79, "-65.8"),
        (3e9, "3×10⁹"),
    ],
)
def test_readable(value: float, text: str) -> None:
    assert readable(value) == text


def test_units_read_the_way_tools_print_them() -> None:
    assert readable_bytes(36_868) == "36 KiB" and readable_bytes(512) == "512 bytes"
    # kv-quant saves 2048 − 1024.0625 bytes a token: "1,024", not a truncated "1,023"
    assert readable_bytes(1023.9375) == "1,024 bytes"
    assert readable_count(41_943_040) == "41.9 M" and readable_count(70_553_706_496) == "70.6 B"
    assert tile("x", 3.42, "%").text == "3.42 %" and tile("x", None, "dB").text == "—"
    assert exact_text(0.1 + 0.2, "dB") == "0.30000000000000004 dB"


@functools.cache
def _curated(lab_id: str) -> tuple[str, dict[str, Any], list[Any]]:
    """The lab run once with CURATED's params: its stored result and its tiles."""
    lab = get_lab(lab_id)
    assert lab is not None and lab.headline is not None
    result, _ = run_lab(lab, CURATED[lab_id])
    stored = result.model_dump(mode="json")
    return lab_id, stored, lab.tiles(stored)


@pytest.mark.parametrize("lab_id", sorted(CURATED))
def test_curated_tiles_show_their_own_result(lab_id: str) -> None:
    lab_id, stored, tiles = _curated(lab_id)
    assert 3 <= len(tiles) <= 5, lab_id
    for t in tiles:
        assert t.label and t.text and t.exact and t.key, t
        value = lookup(stored, t.key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            # The exact text is the stored value itself; rounded text agrees with it.
            if t.key.endswith("clipping_mse") or t.key.endswith("clipped_fraction"):
                continue  # derived tiles (a share), checked below
            assert exact_text(value).split(" ")[0] in t.exact, (t, value)


def test_block_quantize_tiles_match_the_result() -> None:
    _, r, tiles = _curated("block-quantize")
    by_label = {t.label: t for t in tiles}
    m = r["metrics"]
    assert by_label["Bits per value"].text == f"{readable(r['bits_per_value'])} bits"
    assert by_label["Bits per value"].exact == f"{r['bits_per_value']!r} bits"
    assert by_label["Stored bytes"].exact == f"{r['nbytes']:,} bytes"
    assert by_label["SQNR"].text == f"{m['sqnr_db']:.1f} dB"
    split = by_label["Rounding vs clipping MSE"]
    assert split.text == f"{readable(m['rounding_mse'])} vs {readable(m['clipping_mse'])}"
    assert repr(m["rounding_mse"]) in split.exact and repr(m["clipping_mse"]) in split.exact
    clipped = by_label["Values clipped"]
    assert clipped.exact == f"{m['clipped_fraction'] * 100!r} %"
    assert clipped.tone == ("warn" if m["clipped"] else "")


@pytest.mark.parametrize("lab_id", ["memory-budget", "qlora-budget"])
def test_budget_headroom_warns_when_it_does_not_fit(lab_id: str) -> None:
    _, r, tiles = _curated(lab_id)
    headroom = next(t for t in tiles if t.label.startswith("Headroom"))
    assert (headroom.tone == "warn") == (not r["fits"])


@pytest.mark.parametrize("lab", sorted(all_labs()))
def test_every_lab_gets_tiles_from_a_stored_result(lab: str) -> None:
    spec = all_labs()[lab]
    if spec.numeric_outputs:
        fake = {key: 1.5 for key, _ in spec.numeric_outputs}
        assert spec.tiles(fake), lab  # a partial (older) result still gets tiles
    assert spec.tiles(None) == [] and spec.tiles({}) == []
