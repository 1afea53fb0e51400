"""Cross-checks against peer libraries on the CPU: torchao's emulated MX and NVFP4, and
bitsandbytes' NF4. Each is a dev-only dependency; a missing one skips with its reason."""

import warnings

import pytest
import torch

from labs.quant import quantize

SHAPES = [(64, 256), (8, 4, 96)]


def sample(shape, seed=0, scale=4.0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * scale
    x.view(-1)[::97] *= 20  # some outliers
    return x


# --- torchao --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torchao_mx():
    pytest.importorskip(
        "torchao", reason="torchao is a dev dependency: pip install torchao==0.18.0"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.prototype.mx_formats import constants, kernels, mx_tensor, nvfp4_tensor
    return constants, kernels, mx_tensor, nvfp4_tensor


MX_KEYS = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4"]


@pytest.mark.parametrize("key", MX_KEYS)
@pytest.mark.parametrize("rounding", ["floor", "rceil"])
@pytest.mark.parametrize("shape", SHAPES)
def test_mx_matches_torchao_to_mx(torchao_mx, key, rounding, shape):
    constants, kernels, mx_tensor, _ = torchao_mx
    elem_dtype = {
        "mxfp8_e4m3": torch.float8_e4m3fn,
        "mxfp8_e5m2": torch.float8_e5m2,
        "mxfp6_e2m3": constants.DTYPE_FP6_E2M3,
        "mxfp6_e3m2": constants.DTYPE_FP6_E3M2,
        "mxfp4": torch.float4_e2m1fn_x2,
    }[key]
    mode = {
        "floor": mx_tensor.ScaleCalculationMode.FLOOR,
        "rceil": mx_tensor.ScaleCalculationMode.RCEIL,
    }
    x = sample(shape)
    scale, data = mx_tensor.to_mx(x, elem_dtype, 32, mode[rounding])
    if key == "mxfp4":
        data = kernels.unpack_uint4(data.view(torch.uint8))
    q = quantize(x, key, scale_rounding=rounding)
    assert torch.equal(scale.view(torch.uint8).reshape(-1), q.fields["scale_e8m0"])
    assert torch.equal(data.view(torch.uint8).reshape(q.codes.shape), q.codes)
    # And the values agree with torchao's own dequantization.
    theirs = mx_tensor.to_dtype(
        data if key != "mxfp4" else kernels.pack_uint4(data), scale, elem_dtype, 32, torch.float32
    )
    assert torch.equal(theirs.reshape(x.shape), q.dequantize())


@pytest.mark.parametrize("shape", [(64, 256), (16, 64)])
def test_nvfp4_matches_torchao_two_level(torchao_mx, shape):
    _, kernels, _, nvfp4 = torchao_mx
    x = sample(shape, seed=3)
    per_tensor_scale = nvfp4.per_tensor_amax_to_scale(x.abs().amax())
    scale_fp8, packed = nvfp4.nvfp4_quantize(x, 16, per_tensor_scale)
    q = quantize(x, "nvfp4")
    assert q.tensor_scale is not None and q.tensor_scale.item() == per_tensor_scale.item()
    assert torch.equal(scale_fp8.view(torch.uint8).reshape(-1), q.fields["scale_fp8"])
    assert torch.equal(kernels.unpack_uint4(packed.view(torch.uint8)).reshape(x.shape), q.codes)
    # The packed payload is the same bytes too (element 2i in the low nibble).
    assert q.to_bytes()[: x.numel() // 2] == packed.view(torch.uint8).numpy().tobytes()


def test_nvfp4_zero_tensor_is_where_we_differ_from_torchao(torchao_mx):
    _, _, _, nvfp4 = torchao_mx
    x = torch.zeros(4, 32)
    scale_fp8, _ = nvfp4.nvfp4_quantize(x, 16, nvfp4.per_tensor_amax_to_scale(x.abs().amax()))
    assert torch.isnan(scale_fp8.float()).all()  # torchao: 0/0
    assert torch.equal(quantize(x, "nvfp4").dequantize(), x)  # labs.quant: exact zeros


# --- bitsandbytes ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bnb():
    pytest.importorskip(
        "bitsandbytes", reason="bitsandbytes is a dev dependency: pip install bitsandbytes"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import bitsandbytes.functional as functional
    return functional


@pytest.mark.parametrize("shape", [(64, 256), (7, 100), (1000,)])
def test_nf4_matches_bitsandbytes(bnb, shape):
    x = sample(shape, seed=5)
    packed, state = bnb.quantize_4bit(x, blocksize=64, quant_type="nf4")
    q = quantize(x, "nf4")
    assert torch.equal(state.absmax, q.scales)
    payload = -(-x.numel() // 2)
    assert (
        q.to_bytes()[:payload] == packed.view(torch.uint8).reshape(-1).numpy().tobytes()[:payload]
    )
    theirs = bnb.dequantize_4bit(packed, state)
    assert torch.equal(theirs.reshape(x.shape), q.dequantize())


def test_nf4_double_quant_agrees_with_bitsandbytes(bnb):
    x = sample((128, 512), seed=6)
    packed, state = bnb.quantize_4bit(x, blocksize=64, quant_type="nf4", compress_statistics=True)
    q = quantize(x, "nf4", double_quant=True)
    assert q.to_bytes()[: x.numel() // 2] == packed.view(torch.uint8).numpy().tobytes()
    # The mean of the absmax values is summed in float64 here (CPU and CUDA agree to the
    # bit), in float32 by bitsandbytes: the two can differ in the last bits.
    assert state.offset.item() == pytest.approx(
        q.tensor_fields["absmax_offset_fp32"].item(), rel=1e-6
    )
    assert torch.allclose(state.state2.absmax, q.tensor_fields["absmax2_fp32"], rtol=1e-6)
    # bitsandbytes' CPU search (BinSearch "Direct2", then a float32 distance check) does
    # not always return the nearest entry of the dynamic map; we take the exact nearest.
    # So a few absmax codes may differ, by one step of the map.
    theirs_codes = state.absmax.to(torch.int32)
    ours_codes = q.fields["absmax_code"].to(torch.int32)
    assert (theirs_codes != ours_codes).float().mean().item() < 0.01
    assert (theirs_codes - ours_codes).abs().max().item() <= 1
    theirs_absmax = bnb.dequantize_blockwise(state.absmax, state.state2) + state.offset
    step = state.state2.absmax.max().item() * 0.01
    assert (theirs_absmax - q.scales).abs().max().item() < step
