"""The element encoders against torch's own float8 casts and against exact enumeration."""

import pytest
import torch

from labs.quant.minifloat import (
    E2M1,
    E2M3,
    E3M2,
    E4M3,
    E5M2,
    e8m0_floor,
    e8m0_inverse_fp32,
    e8m0_rceil,
    e8m0_to_fp32,
    exp2_int,
)


def every_fp16_as_fp32() -> torch.Tensor:
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    values = bits.view(torch.float16).float()
    return values[torch.isfinite(values)]


@pytest.mark.parametrize(("fmt", "dtype"), [(E4M3, torch.float8_e4m3fn), (E5M2, torch.float8_e5m2)])
def test_fp8_encode_matches_torch_cast_after_clamp(fmt, dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.cat(
        [
            every_fp16_as_fp32(),
            torch.randn(1 << 16, generator=gen) * 300,
            torch.randn(1 << 12, generator=gen) * 1e-3,
        ]
    )
    expected = x.clamp(-fmt.max_normal, fmt.max_normal).to(dtype).view(torch.uint8)
    assert torch.equal(fmt.encode_bits(x), expected)  # the integer path, code for code
    assert torch.equal(fmt.encode(x), expected)


@pytest.mark.parametrize(("fmt", "dtype"), [(E4M3, torch.float8_e4m3fn), (E5M2, torch.float8_e5m2)])
def test_fp8_decode_every_code(fmt, dtype):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ours = fmt.decode(codes)
    theirs = codes.view(dtype).float()
    assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
    finite = ~torch.isnan(ours)
    assert torch.equal(ours[finite], theirs[finite])


@pytest.mark.parametrize("fmt", [E2M1, E2M3, E3M2, E4M3, E5M2])
def test_encode_is_round_to_nearest_even_over_all_midpoints(fmt):
    values = torch.tensor(fmt.positive_values(), dtype=torch.float64)
    mids = (values[:-1] + values[1:]) / 2
    codes = fmt.encode(mids.float())
    assert torch.equal(codes, fmt.encode_bits(mids.float()))
    # A tie goes to the neighbour whose code is even (its lowest mantissa bit is zero).
    lower = torch.arange(len(mids))
    expected = torch.where(lower % 2 == 0, lower, lower + 1)
    assert codes.tolist() == expected.tolist()
    # Every representable value encodes to itself, and negatives mirror positives.
    exact = fmt.encode(values.float())
    assert exact.tolist() == list(range(len(values)))
    assert torch.equal(fmt.decode(fmt.encode(-values.float())), -values.float())


@pytest.mark.parametrize("fmt", [E2M1, E2M3, E3M2, E4M3, E5M2])
def test_encode_saturates_and_keeps_signed_zero(fmt):
    big = torch.tensor([fmt.max_normal * 1.01, 1e30, -1e30, float("inf"), -float("inf")])
    decoded = fmt.decode(fmt.encode(big))
    assert decoded.tolist() == [
        fmt.max_normal,
        fmt.max_normal,
        -fmt.max_normal,
        fmt.max_normal,
        -fmt.max_normal,
    ]
    zero = fmt.encode(torch.tensor([0.0, -0.0]))
    assert zero.tolist() == [0, fmt.sign_bit]


def test_limits_by_name():
    assert (E2M1.max_normal, E2M3.max_normal, E3M2.max_normal) == (6.0, 7.5, 28.0)
    assert (E4M3.max_normal, E5M2.max_normal) == (448.0, 57344.0)
    assert [f.emax for f in (E2M1, E2M3, E3M2, E4M3, E5M2)] == [2, 2, 4, 8, 15]


def test_exp2_int_is_exact_including_subnormals():
    e = torch.arange(-149, 128, dtype=torch.int32)
    assert torch.equal(exp2_int(e).double(), torch.pow(2.0, e.double()))


def test_e8m0_floor_reads_the_exponent_field():
    amax = torch.tensor([1.0, 6.0, 7.99, 8.0, 0.0, 1e-40, float("inf"), float("nan"), 3e38])
    codes = e8m0_floor(amax, emax_elem=2).tolist()
    assert codes == [125, 127, 127, 128, 0, 0, 255, 255, 127 + 127 - 2]


def test_e8m0_rceil_rounds_up_and_saturates():
    descale = torch.tensor(
        [1.0, 1.5, 2.0**-127, 1.5 * 2.0**-127, 0.0, 3e38, float("inf"), float("nan")]
    )
    assert e8m0_rceil(descale).tolist() == [127, 128, 0, 1, 0, 254, 254, 255]


def test_e8m0_decode_and_inverse():
    codes = torch.arange(255, dtype=torch.int32).to(torch.uint8)
    scale = e8m0_to_fp32(codes)
    assert torch.equal(scale.double(), torch.pow(2.0, codes.double() - 127))
    assert torch.equal(scale * e8m0_inverse_fp32(codes), torch.ones(255))
    assert torch.isnan(e8m0_to_fp32(torch.tensor([255], dtype=torch.uint8))).all()
