"""labs.quant.spec is the one table of formats: the classes, the labs and the docs agree
with it, and it imports no torch."""

import subprocess
import sys
import typing
from pathlib import Path

import pytest
import torch

from labs.quant import FORMATS, quantize
from labs.quant.formats import registry
from labs.quant.spec import FORMAT_LIMITS, SPECS, FormatKey
from labs.quant.spec_table import TABLE_HEADER, table_row

ROOT = Path(__file__).resolve().parents[4]
SHAPES = [(1,), (7,), (3, 5), (2, 33), (4, 128), (3, 300), (2, 257), (5, 16, 48)]


def test_spec_and_the_library_import_no_torch():
    code = (
        "import sys\n"
        "import labs.quant.spec, labs.quant\n"
        "from labs.quant import FORMATS\n"
        "FORMATS['nvfp4'].bits_per_value\n"
        "bad = sorted({'torch', 'numpy'} & set(sys.modules))\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_one_row_and_one_class_per_key_in_display_order():
    assert tuple(SPECS) == tuple(FormatKey)
    assert tuple(FORMATS) == tuple(k.value for k in FormatKey)
    assert set(registry()) == set(FormatKey)
    assert all(SPECS[key].key == key for key in FormatKey)
    assert FormatKey.NVFP4 == "nvfp4" and repr(FormatKey.NVFP4) == "'nvfp4'"


@pytest.mark.parametrize("key", list(FormatKey))
def test_the_class_derives_its_sizes_from_its_row(key):
    fmt, row = FORMATS[key], SPECS[key]
    assert fmt.spec == row
    assert fmt.block_size == row.block_size
    assert fmt.bits_per_value == row.bits_per_value
    assert fmt.element_range() == (row.element_min, row.element_max)
    assert fmt.stored_scale == fmt.scale_type == row.scale_type
    assert (fmt.element, fmt.reference) == (row.element, row.reference)
    for shape in SHAPES:
        layout = fmt.layout_for(shape)
        assert fmt.storage_bytes(layout) == row.storage_bytes(layout.n_rows, layout.row_len)


MINIFLOAT_KEYS = [key for key in FormatKey if hasattr(FORMATS[key], "elem")]


@pytest.mark.parametrize("key", MINIFLOAT_KEYS)
def test_minifloat_elements_agree_with_the_row(key):
    elem, row = FORMATS[key].elem, SPECS[key]
    assert (elem.bits, elem.max_normal) == (row.element_bits, row.element_max)
    assert FORMAT_LIMITS[row.element.lower()]["max"] == row.element_max


def test_format_limits_by_key_come_from_the_rows():
    assert FORMAT_LIMITS["q4_0"] == {"max": 8.0, "bits": 4, "scale_max": 65504.0}
    assert FORMAT_LIMITS["nvfp4"]["scale_max"] == 448.0
    assert all(FORMAT_LIMITS[key]["bits"] == SPECS[key].element_bits for key in FormatKey)


@pytest.mark.parametrize("key", list(FormatKey))
def test_stored_bytes_are_what_the_row_counts(key):
    gen = torch.Generator().manual_seed(3)
    for shape in [(3, 300), (2, 512)]:
        q = quantize(torch.randn(shape, generator=gen), key)
        n_rows, row_len = (1, q.layout.numel) if SPECS[key].flat else (shape[0], shape[1])
        assert q.nbytes == len(q.to_bytes()) == SPECS[key].storage_bytes(n_rows, row_len)


def test_configured_rows_follow_the_options():
    int4 = FORMATS["int4"]
    assert int4.configure(scale_dtype="fp16").spec.bits_per_value == 4 + 16 / 128
    assert int4.configure(zero_point=True).spec.bits_per_value == 4 + 36 / 128
    assert int4.configure(zero_point=True).spec.element_min == 0
    assert int4.configure(granularity="tensor").spec.scale_scope == "tensor"
    assert FORMATS["fp8_e4m3"].configure(granularity=32).spec.bits_per_value == 8 + 32 / 32
    nf4_dq = FORMATS["nf4"].configure(double_quant=True).spec
    assert nf4_dq.bits_per_value == 4 + 8 / 64 + 32 / (64 * 256)


def test_gguf_rows_are_gguf_py_block_sizes():
    gguf = pytest.importorskip("gguf", reason="gguf (gguf-py) is a dev dependency")
    sizes, types = gguf.constants.GGML_QUANT_SIZES, gguf.GGMLQuantizationType
    for key, qtype in [
        (FormatKey.Q8_0, types.Q8_0),
        (FormatKey.Q4_0, types.Q4_0),
        (FormatKey.Q4_1, types.Q4_1),
        (FormatKey.Q4_K, types.Q4_K),
        (FormatKey.Q6_K, types.Q6_K),
    ]:
        assert SPECS[key].block_bytes == sizes[qtype], key
    assert SPECS[FormatKey.Q4_0].block_bytes_text == "2 + 16"


def _choices(annotation: object) -> tuple[object, ...]:
    return typing.get_args(annotation)


def test_labs_offer_format_keys():
    from labs import block_quantize, dot_product_scales, granularity_compare, scale_derivation

    assert block_quantize.FORMAT_KEYS == tuple(k.value for k in FormatKey)
    assert block_quantize.BlockQuantizeParams.model_fields["format"].annotation is FormatKey
    for subset in (
        scale_derivation.FormatChoice,
        dot_product_scales.FormatChoice,
        granularity_compare.GranularFormatKey,
    ):
        keys = _choices(subset)
        assert keys and all(isinstance(k, FormatKey) for k in keys), subset


def _table(path: Path) -> list[tuple[str, ...]]:
    """The rows of the formats table in a Markdown file (the one with TABLE_HEADER)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = "| " + " | ".join(TABLE_HEADER) + " |"
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(tuple(cell.strip() for cell in line.strip().strip("|").split(" | ")))
    return rows


@pytest.mark.parametrize("doc", ["README.md", "docs/quant.md"])
def test_the_docs_tables_are_the_spec_row_by_row(doc):
    rows = _table(ROOT / doc)
    expected = [tuple(cell.strip() for cell in table_row(row)) for row in SPECS.values()]
    assert [r[0] for r in rows] == [e[0] for e in expected], "keys or their order differ"
    for got, want in zip(rows, expected, strict=True):
        assert got == want, f"{doc}: regenerate with labs.quant.spec_table.markdown_table()"
