"""Card figures: each committed SVG is exactly what the code draws today, every number it
draws is the library's, and the files are CSP-clean and follow the colour scheme."""

from __future__ import annotations

import re

import pytest

from app.settings import ROOT
from labs.catalog import facts
from labs.catalog.gpus import get_gpu
from labs.quant.spec import SPECS, FormatKey
from labs.viz.cards import DRAWN_WITH_ATTR, FIGURES, FINGERPRINT_ATTR
from labs.viz.cards.data import block_segments, kv_block_tokens, ridge_point
from labs.viz.cards.svg import read_root_attr
from labs.viz.theme import PALETTE

FIGURE_DIR = ROOT / "content" / "figures"


@pytest.mark.parametrize("name", list(FIGURES))
def test_committed_figure_is_what_the_code_draws(name: str) -> None:
    from labs.viz.cards.draw import drawn_with, render_svg

    path = FIGURE_DIR / f"{name}.svg"
    assert path.exists(), f"{path} missing: run `lowbit content figures`"
    committed = path.read_text(encoding="utf-8")
    if read_root_attr(committed, DRAWN_WITH_ATTR) != drawn_with():
        # the numbers are still checked (fingerprint test below); only the layout may differ
        pytest.skip(f"{name}.svg was drawn with another matplotlib than {drawn_with()}")
    assert committed == render_svg(name), f"{name}.svg is stale: run `lowbit content figures`"


@pytest.mark.parametrize("name", list(FIGURES))
def test_figure_is_csp_clean_and_follows_dark_mode(name: str) -> None:
    svg = (FIGURE_DIR / f"{name}.svg").read_text(encoding="utf-8")
    assert not re.search(r"<script|<foreignObject|<!DOCTYPE|<\?xml-stylesheet", svg, re.I)
    assert not re.search(r"\son[a-z]+\s*=", svg, re.I), "event handler attribute"
    assert not re.search(r"\sstyle\s*=", svg), "inline style attribute (CSP style-src)"
    assert not re.search(r'href="(?!#)', svg), "external reference"
    assert "url(" not in svg.replace("url(#", ""), "external url()"
    assert "@media (prefers-color-scheme: dark)" in svg
    # its own background, recoloured in dark mode: never dark ink on a dark page
    assert 'fill="#ffffff"' in svg and "f-bg" in svg
    assert f".f-bg{{fill:{PALETTE['bg'][1]}}}" in svg
    assert read_root_attr(svg, FINGERPRINT_ATTR) == FIGURES[name]().fingerprint
    assert len(svg.encode()) < 120_000


def test_e2m1_grid_is_the_element_type_of_nvfp4_and_mxfp4() -> None:
    import torch

    from labs.quant import quantize

    d = FIGURES["e2m1-grid"]()
    values = [d.numbers[f"value_{i}"] for i in range(int(d.numbers["count"]))]
    assert values == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    for key in (FormatKey.NVFP4, FormatKey.MXFP4):
        row = SPECS[key]
        assert row.element == "E2M1"
        assert len(values) == 2 ** (row.element_bits - 1)  # the codes without the sign bit
        assert max(values) == row.element_max == facts.dtype_max("fp4_e2m1")
    # every drawn value is one MXFP4 stores exactly (amax 6: the E8M0 scale is 1)
    grid = torch.tensor([*values, *(-v for v in values), *values, *(-v for v in values)])
    q = quantize(grid.reshape(1, 32), "mxfp4")
    assert torch.equal(q.dequantize().reshape(-1), grid)
    assert len(set(values) | {-v for v in values}) == 15


def test_block_bytes_are_the_spec_and_the_quantizer_bytes() -> None:
    import torch

    from labs.quant import quantize

    d = FIGURES["block-bytes"]()
    expected = {"q4_0": (2, 16), "q4_k": (2, 2, 12, 128), "nvfp4": (1, 8), "mxfp4": (1, 16)}
    for key, parts in expected.items():
        row = SPECS[FormatKey(key)]
        segs = block_segments(row)
        assert tuple(s.nbytes for s in segs) == parts
        assert d.numbers[f"{key}_block_bytes"] == sum(parts)
        assert d.numbers[f"{key}_bits_per_value"] == row.bits_per_value
        if row.block_bytes is not None:  # gguf-py's GGML_QUANT_SIZES: Q4_0 = (32, 2 + 16)
            assert row.block_bytes == (row.block_size, sum(parts))
        assert row.block_size is not None
        q = quantize(torch.randn(1, 256, generator=torch.Generator().manual_seed(0)), key)
        per_tensor = row.tensor_scale_bits // 8
        assert q.nbytes == 256 // row.block_size * sum(parts) + per_tensor
    assert d.numbers["q4_0_block_bytes"] == 18 == 2 + 16


def test_roofline_ridges_are_the_registry_flops_over_bandwidth() -> None:
    d = FIGURES["roofline"]()
    for gid in ("h100", "h200", "l4"):
        gpu = get_gpu(gid)
        ridge = gpu.dense_tflops["bf16"] * 1e12 / facts.gpu_bandwidth(gid)
        assert d.numbers[f"{gid}_ridge"] == pytest.approx(ridge, rel=1e-12)
        assert ridge_point(gid) == pytest.approx(ridge, rel=1e-12)
        assert d.numbers[f"{gid}_peak_tflops"] == gpu.dense_tflops["bf16"]
    # what the roofline-model card states
    assert round(d.numbers["h100_ridge"]) == 295 and round(d.numbers["h200_ridge"]) == 206


def test_kv_page_is_the_models_bytes_per_token_times_the_block() -> None:
    d = FIGURES["kv-page"]()
    n = d.numbers
    per_token = facts.kv_bytes_per_token("llama-3.1-8b", "bf16")
    assert n["block_tokens"] == kv_block_tokens() == 16
    assert n["bytes_per_token"] == per_token == 131_072
    assert n["block_bytes"] == 16 * per_token == 2 * 2**20
    assert n["layer_block_bytes"] * n["num_layers"] == n["block_bytes"]
    assert n["layer_block_bytes"] == 64 * 1024
    tokens = n["sequence_tokens"]
    assert n["sequence_blocks"] == -(-tokens // 16)
    assert (n["sequence_blocks"] - 1) * 16 + n["last_block_used"] == tokens


def test_figure_data_imports_neither_matplotlib_nor_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from labs.viz.cards import FIGURES\n"
        "[f() for f in FIGURES.values()]\n"
        "print(','.join(m for m in ('torch', 'matplotlib', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
