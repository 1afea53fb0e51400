"""block-quantize: the clipping split comes from labs.quant.metrics."""

from __future__ import annotations

import pytest

from labs import block_quantize as lab
from tests.unit.labs.helpers import run_lab


@pytest.mark.parametrize("fmt", ["int4", "int8", "fp8_e4m3", "fp8_e5m2", "nf4"])
def test_absmax_formats_report_no_clipping_on_normal_data(fmt: str) -> None:
    # Before the metric had a tolerance, int4 (block 128) flagged values clipped by one
    # float32 ulp of the scale.
    m = run_lab(lab, {"format": fmt, "distribution": "normal"})[0].metrics
    assert m.clipped == 0 and m.clipping_mse == 0 and m.clipped_fraction == 0


def test_a_floor_scale_still_clips() -> None:
    # One MXFP4 block with amax 7.5: the OCP floor scale is 1 and 7.5 is clipped to 6.
    values = [7.5] + [0.5] * 31
    result, _ = run_lab(lab, {"format": "mxfp4", "distribution": "custom", "values": values})
    m = result.metrics
    assert m.clipped == 1 and m.clipping_mse == pytest.approx(1.5**2 / 32)


@pytest.mark.parametrize("fmt", ["q4_k", "q6_k"])
def test_k_quants_show_how_each_sub_block_scale_is_stored(fmt: str) -> None:
    import re

    result, events = run_lab(lab, {"format": fmt, "shape": [2, 512], "seed": 3})
    for block in result.first_blocks:
        assert block.stored is not None
        d, k = re.match(r"d (\S+) × (-?\d+)", block.stored).groups()  # type: ignore[union-attr]
        # The effective scale is the fp16 super-block scale times the integer one.
        assert block.effective_scale == pytest.approx(float(d) * int(k), rel=1e-4)
    assert ("dmin" in result.first_blocks[0].stored) == (fmt == "q4_k")
    table = next(
        data for kind, data in events if kind == "table" and data["title"] == "first blocks"
    )
    assert table["rows"][0][1] == result.first_blocks[0].stored
    plain, _ = run_lab(lab, {"format": "q4_0", "shape": [2, 64]})
    assert all(b.stored is None for b in plain.first_blocks)


def test_the_block_view_describes_the_whole_block() -> None:
    # Issue 20 item 6: int4's default block is 128 values; the table showed the first 32
    # and called them the block ("block 0: 32 values", with their absmax, not the block's).
    import torch

    result, events = run_lab(lab, {"format": "int4", "shape": [4, 256], "seed": 0})
    block = result.first_blocks[0]
    x = lab._tensor(lab.BlockQuantizeParams(format="int4", shape=[4, 256], seed=0), "cpu")
    whole = x[0, :128]
    assert block.size == 128 and len(block.values) == 32
    assert block.absmax == pytest.approx(float(whole.abs().max()))
    assert block.absmax > max(abs(v) for v in block.values)  # the block's max lies beyond 32
    assert block.effective_scale == pytest.approx(block.absmax / 7, rel=1e-6)
    title = next(d["title"] for k, d in events if k == "table" and d["title"].startswith("block 0"))
    from labs.viz.tiles import readable

    assert title == (
        f"block 0: 128 values (the first 32 shown), scale {readable(block.scale)}, "
        f"absmax {readable(block.absmax)}"
    )
    assert torch.equal(torch.tensor(block.values), whole[:32])
