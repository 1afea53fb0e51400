"""Property tests (hypothesis) over every format: rounding error bounds, idempotence,
shapes and the byte count."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labs.quant import FORMATS, quantize
from labs.quant.constants import NF4_TABLE, QK4_0
from labs.quant.minifloat import MiniFloat

KEYS = sorted(FORMATS)
PROPERTY_SETTINGS = settings(
    max_examples=12, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


GGUF_KEYS = ("q8_0", "q4_0", "q4_1", "q4_k", "q6_k")
# The k-quants search for their scales (make_qkx2_quants, make_qx_quants), and the search
# is not a projection: requantizing a dequantized block can settle on a neighbouring
# scale (test_gguf_k shows one), so they are left out of the idempotence property.
SEARCHED_SCALE_KEYS = ("q4_k", "q6_k")
# fp16 block scales hold |d| <= 65504: keep GGUF inputs well inside (an overflowing scale
# is a ValueError, tested in test_behaviour).
GGUF_MAX_LOG10 = 2.0


@st.composite
def tensors(draw, max_rows=4, max_cols=80, max_log10=6.0):
    rows = draw(st.integers(1, max_rows))
    cols = draw(st.integers(1, max_cols))
    seed = draw(st.integers(0, 2**31 - 1))
    log_scale = draw(st.floats(-6, max_log10))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen) * 10.0**log_scale
    kind = draw(st.sampled_from(["plain", "zeros", "outlier", "repeat", "integers"]))
    if kind == "zeros":
        x[:, ::3] = 0.0
    elif kind == "outlier":
        x.view(-1)[seed % x.numel()] *= 100
    elif kind == "repeat":
        x[:] = x[0, 0]
    elif kind == "integers":
        x = x.round()
    return x


def element_grid(key: str) -> torch.Tensor:
    """Every element value the quantizer can produce, sorted (float64)."""
    fmt = FORMATS[key]
    elem = getattr(fmt, "elem", None)
    if isinstance(elem, MiniFloat):
        positive = elem.positive_values()
        values = sorted({*positive, *(-v for v in positive)})
    elif key == "nf4":
        values = list(NF4_TABLE)
    else:
        lo, hi = fmt.element_range()
        values = list(range(int(lo), int(hi) + 1))
    return torch.tensor(values, dtype=torch.float64)


def half_gap_around(grid: torch.Tensor, elements: torch.Tensor) -> torch.Tensor:
    """For each element value, half of the larger gap to its neighbours on the grid."""
    idx = torch.searchsorted(grid, elements.double()).clamp(0, len(grid) - 1)
    gaps = torch.diff(grid)
    left = torch.where(idx > 0, gaps[(idx - 1).clamp(min=0)], 0.0)
    right = torch.where(idx < len(gaps), gaps[idx.clamp(max=len(gaps) - 1)], 0.0)
    return torch.maximum(left, right) / 2


@pytest.mark.parametrize("key", KEYS)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_error_is_at_most_half_a_step_inside_the_range(key, data):
    x = data.draw(tensors(max_log10=GGUF_MAX_LOG10 if key in GGUF_KEYS else 6.0))
    q = quantize(x, key)
    aff = q.affine()
    elements = q.unblock(aff.elements)
    block_len = q.layout.block_len
    scale = q.unblock(aff.scale[:, None].expand(-1, block_len)).double().abs()
    lo, hi = q.block_bounds()
    lo = q.unblock(lo[:, None].expand(-1, block_len))
    hi = q.unblock(hi[:, None].expand(-1, block_len))
    inside = (x >= lo) & (x <= hi)
    half_step = half_gap_around(element_grid(key), elements)
    bound = half_step * scale
    if key in GGUF_KEYS:
        # Codes use the float32 d; the stored d is its fp16 rounding: 2**-11 relative, or
        # half the fp16 subnormal step (2**-25) for tiny scales. The rounding moves both the
        # decoded value (element × the difference) and the half-step boundary the code was
        # chosen against (half a step × the difference).
        fp16_rounding = torch.clamp(scale * 2.0**-11, min=2.0**-25)
        bound = bound + (elements.double().abs() + half_step) * fp16_rounding
        if aff.offset is not None:  # q4_1 stores its block minimum in fp16 too
            offset = q.unblock(aff.offset[:, None].expand(-1, block_len)).double().abs()
            bound = bound + torch.clamp(offset * 2.0**-11, min=2.0**-25)
    err = (q.dequantize().double() - x.double()).abs()
    slack = 1e-6 * x.double().abs() + 1e-30
    assert (err[inside] <= bound[inside] * (1 + 1e-6) + slack[inside]).all()


@pytest.mark.parametrize("key", [k for k in KEYS if k not in SEARCHED_SCALE_KEYS])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_requantizing_representable_values_is_idempotent(key, data):
    x = data.draw(tensors(max_log10=GGUF_MAX_LOG10 if key in GGUF_KEYS else 6.0))
    q = quantize(x, key)
    representable = q.dequantize()
    again = quantize(representable, key)
    assert torch.allclose(again.dequantize(), representable, rtol=1e-6, atol=0)
    assert torch.allclose(again.scales, q.scales, rtol=1e-6, atol=0)
    # Codes too, except in blocks whose stored scale underflowed to zero (a tiny GGUF
    # block: its codes are then arbitrary, its values all zero).
    scale, _ = q.scale_offset()
    live = q.unblock((scale != 0)[:, None].expand(-1, q.layout.block_len))
    assert torch.equal(again.codes[live], q.codes[live])


@pytest.mark.parametrize("key", KEYS)
@PROPERTY_SETTINGS
@given(
    x=tensors(max_rows=3, max_log10=GGUF_MAX_LOG10),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
)
def test_shape_dtype_device_and_nbytes(key, x, dtype):
    x = x.to(dtype)
    q = quantize(x, key)
    out = q.dequantize()
    assert out.shape == x.shape and out.dtype == torch.float32 and out.device == x.device
    assert q.codes.shape == x.shape
    assert q.nbytes == len(q.to_bytes()) == expected_nbytes(key, tuple(x.shape))


def expected_nbytes(key: str, shape: tuple[int, ...]) -> int:
    """The storage formula written out independently of the library."""
    fmt = FORMATS[key]
    rows, cols = math.prod(shape[:-1]), shape[-1]
    numel = rows * cols
    if key == "nf4":
        blocks = -(-numel // 64)
        return blocks * 32 + blocks * 4
    if key in ("int8", "fp8_e4m3", "fp8_e5m2"):  # default granularity: channel / tensor
        n_scales = rows if key == "int8" else 1
        return numel + 4 * n_scales
    block = fmt.block_size
    assert block is not None
    blocks = rows * -(-cols // block)
    per_block_bits = block * fmt.bits_per_value
    extra = 4 if key == "nvfp4" else 0
    return blocks * int(per_block_bits) // 8 + extra


def test_q4_0_block_size_constant():
    assert FORMATS["q4_0"].block_size == QK4_0
