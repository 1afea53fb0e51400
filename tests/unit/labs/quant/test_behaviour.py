"""Contract behaviour shared by every format: shapes, dtypes, padding, options, sizes,
non-finite input."""

import math

import pytest
import torch

from labs.quant import FORMAT_LIMITS, FORMATS, bits_per_value, quantize

KEYS = sorted(FORMATS)


def test_registry_keys_are_the_contract():
    assert set(FORMATS) == {
        "int8", "int4", "fp8_e4m3", "fp8_e5m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3",
        "mxfp6_e3m2", "mxfp4", "nvfp4", "nf4", "q8_0", "q4_0", "q4_1", "q4_k", "q6_k",
    }  # fmt: skip


def test_block_sizes_and_bits_per_value():
    expected = {
        "q4_0": (32, 4.5), "q4_1": (32, 5.0), "q8_0": (32, 8.5), "mxfp4": (32, 4.25),
        "mxfp6_e2m3": (32, 6.25), "mxfp6_e3m2": (32, 6.25), "mxfp8_e4m3": (32, 8.25),
        "mxfp8_e5m2": (32, 8.25), "nvfp4": (16, 4.5), "nf4": (64, 4.5), "int4": (128, 4.25),
        "int8": (None, 8.0), "fp8_e4m3": (None, 8.0), "fp8_e5m2": (None, 8.0),
        "q4_k": (256, 4.5), "q6_k": (256, 6.5625),
    }  # fmt: skip
    for key, (block, bits) in expected.items():
        assert FORMATS[key].block_size == block, key
        assert FORMATS[key].bits_per_value == bits, key


def test_bits_per_value_function():
    assert bits_per_value("int4", granularity=128) == 4.25
    assert bits_per_value("int4", granularity=128, zero_point=True) == 4 + 36 / 128
    assert bits_per_value("int8", granularity=32) == 9.0
    assert bits_per_value("nf4", double_quant=True) == 4 + 8 / 64 + 32 / (64 * 256)
    # With a shape, per-tensor and per-row values count too.
    assert bits_per_value("nvfp4", shape=(16, 16)) == 8 * (128 + 16 + 4) / 256
    assert bits_per_value("int8", shape=(4, 1024), granularity="channel") == 8 + 32 / 1024
    assert bits_per_value("fp8_e4m3", shape=(10, 10)) == 8 * (100 + 4) / 100


def test_fp16_scales_are_the_gptq_awq_size():
    assert bits_per_value("int4", granularity=128, scale_dtype="fp16") == 4.125
    assert bits_per_value("int4", granularity=128, scale_dtype="fp16", zero_point=True) == (
        4 + 20 / 128
    )
    assert bits_per_value("int8", granularity=32, scale_dtype="fp16") == 8.5
    assert FORMATS["int4"].configure(scale_dtype="fp16").bits_per_value == 4.125
    assert FORMATS["int4"].scale_dtype == "fp32"  # the default is unchanged
    # What labs and docs show as the stored scale type follows the option.
    assert FORMATS["int4"].stored_scale == "fp32"
    assert FORMATS["int4"].configure(scale_dtype="fp16").stored_scale == "fp16"
    assert FORMATS["mxfp4"].stored_scale == "E8M0"
    x = torch.randn(8, 256)
    for g, n_scales in (("tensor", 1), ("channel", 8), (128, 16)):
        q = quantize(x, "int4", granularity=g, scale_dtype="fp16")
        assert q.nbytes == 8 * 256 // 2 + 2 * n_scales == len(q.to_bytes())
        q_zp = quantize(x, "int8", granularity=g, scale_dtype="fp16", zero_point=True)
        assert q_zp.nbytes == 8 * 256 + 3 * n_scales == len(q_zp.to_bytes())


@pytest.mark.parametrize("zero_point", [False, True])
def test_fp16_scales_are_rounded_before_use(zero_point):
    x = torch.randn(16, 256, generator=torch.Generator().manual_seed(2)) * 3
    q16 = quantize(x, "int4", scale_dtype="fp16", zero_point=zero_point)
    q32 = quantize(x, "int4", zero_point=zero_point)
    # The decoded scales are fp16 values, the fp32 scales rounded to nearest even.
    assert torch.equal(q16.scales, q32.scales.half().float())
    assert not torch.equal(q16.scales, q32.scales)
    # The codes come from the rounded scale: decoding them reproduces round(x / scale).
    scale, _ = q16.scale_offset()
    divided = x.reshape(-1, 128) / scale[:, None]
    if zero_point:
        assert q16.zero_points is not None
        expected = (divided.round() + q16.zero_points.float()[:, None]).clamp(0, 15)
    else:
        expected = divided.round().clamp(-7, 7)
    assert torch.equal(q16.qdata.float(), expected)
    # The stored bytes after the codes are the fp16 scales.
    raw = q16.to_bytes()[16 * 256 // 2 :][: 2 * q16.scales.numel()]
    assert raw == q16.scales.half().numpy().tobytes()


def test_fp16_scale_overflow_is_a_clear_error():
    big = 65504.0 * 7 * 1.01
    with pytest.raises(ValueError, match=r"scale_dtype='fp16' cannot store .*65504 · 7"):
        quantize(torch.tensor([[big, 1.0]]), "int4", scale_dtype="fp16")
    # fp32 scales store it, and a value just inside the fp16 range is fine.
    assert quantize(torch.tensor([[big, 1.0]]), "int4").scales.item() > 65504
    ok = quantize(torch.tensor([[65504.0 * 7, 1.0]]), "int4", scale_dtype="fp16")
    assert ok.scales.item() == 65504.0
    with pytest.raises(ValueError, match="scale_dtype"):
        quantize(torch.zeros(4), "int4", scale_dtype="bf16")
    with pytest.raises(ValueError, match="scale_dtype"):
        quantize(torch.zeros(4), "fp8_e4m3", scale_dtype="fp16")  # only the int formats


def test_limits_are_named():
    assert FORMAT_LIMITS["e4m3"]["max"] == 448.0
    assert FORMAT_LIMITS["e5m2"]["max"] == 57344.0
    assert FORMAT_LIMITS["e2m1"]["max"] == 6.0
    assert FORMAT_LIMITS["e2m3"]["max"] == 7.5
    assert FORMAT_LIMITS["e3m2"]["max"] == 28.0
    assert all(key in FORMAT_LIMITS for key in FORMATS)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_shape_dtype_and_nbytes(key, dtype):
    x = torch.randn(3, 5, 70).to(dtype)
    q = quantize(x, key)
    out = q.dequantize()
    assert out.shape == x.shape and out.dtype == torch.float32 and out.device == x.device
    assert q.codes.shape == x.shape and not q.codes.is_floating_point()
    assert q.scales.dtype == torch.float32 and q.scales.dim() == 1
    assert q.nbytes == len(q.to_bytes())
    assert q.dtype == dtype


@pytest.mark.parametrize("key", KEYS)
def test_scalar_and_1d_inputs(key):
    for x in (torch.tensor(1.5), torch.randn(33)):
        q = quantize(x, key)
        assert q.dequantize().shape == x.shape


@pytest.mark.parametrize("key", KEYS)
def test_padding_is_reported_and_harmless(key):
    x = torch.randn(4, 100)
    q = quantize(x, key)
    block = q.layout.block_len
    if FORMATS[key].layout_kind == "flat":
        assert q.padded == -x.numel() % block
    else:
        assert q.padded == 4 * (-100 % block)
    # Each row quantizes as it would with its last value repeated to fill the block.
    if q.padded and FORMATS[key].layout_kind == "rows":
        pad = -100 % block
        filled = torch.cat([x, x[:, -1:].expand(-1, pad)], dim=1)
        assert torch.equal(quantize(filled, key).dequantize()[:, :100], q.dequantize())


def test_granularity_options():
    x = torch.randn(8, 256)
    assert quantize(x, "int8", granularity="tensor").scales.shape == (1,)
    assert quantize(x, "int8", granularity="channel").scales.shape == (8,)
    assert quantize(x, "int8", granularity=64).scales.shape == (32,)
    assert quantize(x, "fp8_e4m3", granularity=32).scales.shape == (64,)
    assert quantize(x, "int4", granularity=96).padded == 8 * 32
    q = quantize(x, "int4", granularity="channel", zero_point=True)
    assert q.zero_points is not None
    assert q.zero_points.shape == (8,) and q.zero_points.dtype == torch.uint8


def test_int_zero_point_keeps_zero_exact_and_uses_the_full_range():
    x = torch.rand(4, 64) * 10 + 1  # all positive: min(x, 0) = 0 so zero stays exact
    x[:, 0] = 0.0
    q = quantize(x, "int8", granularity="channel", zero_point=True)
    assert q.zero_points is not None and q.zero_points.eq(0).all()
    assert q.codes.max().item() == 255
    assert torch.equal(q.dequantize()[:, 0], torch.zeros(4))


def test_unknown_format_and_option_errors_list_valid_ones():
    with pytest.raises(ValueError, match="valid formats are .*'nvfp4'"):
        quantize(torch.zeros(4), "fp3")
    with pytest.raises(
        ValueError, match=r"unknown option\(s\) \['block'\]; valid options are .*granularity"
    ):
        quantize(torch.zeros(4), "int8", block=32)
    with pytest.raises(ValueError, match="scale_rounding"):
        quantize(torch.zeros(32), "mxfp4", scale_rounding="up")
    with pytest.raises(ValueError, match="granularity"):
        quantize(torch.zeros(32), "int4", granularity=0)
    with pytest.raises(ValueError, match="nonfinite"):
        quantize(torch.zeros(32), "q8_0", nonfinite="ignore")
    with pytest.raises(ValueError, match="floating-point"):
        quantize(torch.zeros(32, dtype=torch.int32), "q8_0")
    with pytest.raises(ValueError, match="empty"):
        quantize(torch.zeros(0, 32), "q8_0")


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nonfinite_input_raises_with_the_first_bad_index(key, bad):
    x = torch.randn(6, 40)
    x[3, 17] = bad
    x[5, 2] = math.nan
    with pytest.raises(ValueError, match=rf"non-finite value {bad} at index \(3, 17\)"):
        quantize(x, key)


@pytest.mark.parametrize("key", KEYS)
def test_nonfinite_propagate_poisons_only_its_block(key):
    x = torch.randn(4, 128)
    x[1, 70] = math.nan
    q = quantize(x, key, nonfinite="propagate")
    out = q.dequantize()
    assert torch.isnan(out[1, 70])
    if "tensor_amax" in q.tensor_fields:  # a per-tensor scale (NVFP4's too) becomes NaN
        assert torch.isnan(out).all()
    elif FORMATS[key].layout_kind == "rows":  # per block or per row: other rows are intact
        assert torch.isfinite(out[0]).all() and torch.isfinite(out[2:]).all()


def test_scale_overflow_is_an_error_not_inf():
    x = torch.full((1, 32), 1e7)  # q8_0: d = 1e7 / 127 > 65504 does not fit fp16
    with pytest.raises(ValueError, match="too large for the format's scale type"):
        quantize(x, "q8_0")
    x = torch.full((1, 32), 1e38)  # int8 and the float formats handle float32's range
    for key in ("int8", "fp8_e4m3", "mxfp4", "nvfp4", "nf4"):
        assert torch.isfinite(quantize(x, key).dequantize()).all(), key


def test_tiny_values_stay_finite():
    x = torch.randn(4, 64) * 1e-38
    for key in KEYS:
        if key in ("q8_0", "q4_0", "q4_1"):
            continue  # fp16 scales flush such blocks to zero, like llama.cpp
        out = quantize(x, key).dequantize()
        assert torch.isfinite(out).all(), key
        assert (out - x).abs().max() <= x.abs().max(), key


def test_quantized_tensor_repr_and_fields():
    q = quantize(torch.randn(2, 32), "mxfp4")
    assert "mxfp4" in repr(q) and "nbytes=" in repr(q)
    assert q.fields["scale_e8m0"].dtype == torch.uint8
    assert q.tensor_scale is None
    mins = quantize(torch.randn(2, 32), "q4_1").zero_points
    assert mins is not None and mins.dtype == torch.float32


@pytest.mark.parametrize("key", KEYS)
def test_results_do_not_depend_on_the_chunk_size(key, monkeypatch):
    from labs.quant import core

    x = torch.randn(24, 200) * 3
    x[5, :64] = 0.0
    x[7, 3], x[7, 9] = 4.0, -4.0  # a signed tie for q4_0's first-largest rule
    x[7] = x[7].clamp(-4, 4)
    reference = quantize(x, key)
    monkeypatch.setattr(core, "CPU_CHUNK_ELEMENTS", 100)
    small = quantize(x, key)
    assert torch.equal(small.codes, reference.codes)
    assert small.to_bytes() == reference.to_bytes()
    assert torch.equal(small.dequantize(), reference.dequantize())


def test_inputs_that_require_grad_are_detached():
    x = torch.randn(4, 64, requires_grad=True)
    for key in KEYS:
        out = quantize(x, key).dequantize()
        assert not out.requires_grad, key
