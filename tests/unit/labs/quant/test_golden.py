"""Golden vectors worked by hand from the specs: codes, scale bytes and packed bytes."""

import struct

import pytest
import torch

from labs.quant import FORMATS, quantize
from labs.quant.constants import NF4_TABLE
from labs.quant.formats.nf4 import nf4_midpoints
from labs.quant.minifloat import E2M1


def f16_le(value: float) -> bytes:
    return struct.pack("<e", value)


# --- NVFP4 ----------------------------------------------------------------------------------


def test_nvfp4_two_blocks_by_hand():
    # Block 0 carries the tensor amax 10.5, so tensor_scale = 10.5 / (448 * 6) = 2**-8.
    # Block 1 has amax 6: its block scale (6 / 6) / 2**-8 = 256 is exact in E4M3
    # (0 1111 000 = 0x78), so its elements are x * 1 and E2M1 rounding is seen directly.
    block0 = [10.5] + [0.0] * 15
    block1 = [
        0.0,
        0.25,
        0.75,
        1.25,
        1.75,
        2.5,
        3.5,
        5.0,
        6.0,
        -0.5,
        -1.0,
        -1.5,
        -3.0,
        -4.0,
        0.1,
        -0.0,
    ]
    x = torch.tensor([block0 + block1])
    q = quantize(x, "nvfp4")

    assert q.tensor_scale is not None and q.tensor_scale.item() == 2.0**-8
    # Block 0: (10.5 / 6) / 2**-8 = 448 = 1.75 * 2**8 -> 0 1111 110 = 0x7E.
    assert q.fields["scale_fp8"].tolist() == [0x7E, 0x78]
    assert q.scales.tolist() == [448.0, 256.0]
    # Ties go to the even code: 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2, 2.5->2, 3.5->4,
    # 5->4; 6 is the top code 7; negatives set bit 3; -0.0 keeps its sign (code 8).
    expected_block1 = [0, 0, 2, 2, 4, 4, 6, 6, 7, 9, 10, 11, 13, 14, 0, 8]
    assert q.codes[0, 16:].tolist() == expected_block1
    # 10.5 * (256 / 448) = 6.0000005 clamps to 6 (code 7).
    assert q.codes[0, :16].tolist() == [7] + [0] * 15

    payload = bytes([0x07, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x22, 0x44, 0x66, 0x97, 0xBA, 0xED, 0x80])
    assert q.to_bytes() == payload + bytes([0x7E, 0x78]) + struct.pack("<f", 2.0**-8)
    assert q.nbytes == 16 + 2 + 4

    expected = [10.5] + [0.0] * 15 + [0, 0, 1, 1, 2, 2, 4, 4, 6, -0.5, -1, -1.5, -3, -4, 0, -0.0]
    assert q.dequantize()[0].tolist() == expected
    assert torch.signbit(q.dequantize()[0, 31])


def test_nvfp4_all_zero_tensor_gives_exact_zeros():
    q = quantize(torch.zeros(4, 32), "nvfp4")
    out = q.dequantize()
    assert torch.equal(out, torch.zeros(4, 32))
    assert q.tensor_scale is not None and q.tensor_scale.item() == 0.0
    assert q.fields["scale_fp8"].eq(0).all()


def test_nvfp4_zero_block_inside_nonzero_tensor():
    x = torch.zeros(1, 32)
    x[0, 3] = 5.0
    q = quantize(x, "nvfp4")
    assert q.fields["scale_fp8"].tolist()[1] == 0
    assert torch.equal(q.dequantize(), x)


# --- MXFP4 ----------------------------------------------------------------------------------


MX_BLOCK = [
    *[0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.5, -1.0, -1.5, -3.0, -4.0, 0.1, -0.0],
    *[7.0, -7.0, 0.5, 1.5, 3.0, -2.0, -6.0, 0.3, 0.26, 0.24, 2.9, 4.9, 5.1, -5.1, 1.1, 0.0],
]


def test_mxfp4_block_by_hand():
    q = quantize(torch.tensor([MX_BLOCK]), "mxfp4")
    # amax 7: floor(log2 7) = 2, emax(E2M1) = 2, so X = 2**0: E8M0 code 127.
    assert q.fields["scale_e8m0"].tolist() == [127]
    assert q.scales.tolist() == [1.0]
    first = [0, 0, 2, 2, 4, 4, 6, 6, 7, 9, 10, 11, 13, 14, 0, 8]
    # 7 and -7 saturate to +-6; 0.3 and 0.26 round up to 0.5, 0.24 down to 0; 2.9 -> 3;
    # 4.9 -> 4 and 5.1 -> 6 (midpoint 5); 1.1 -> 1.
    second = [7, 15, 1, 3, 5, 12, 15, 1, 1, 0, 5, 6, 7, 15, 2, 0]
    assert q.codes[0].tolist() == first + second
    codes = first + second
    payload = bytes(codes[i] | (codes[i + 1] << 4) for i in range(0, 32, 2))
    assert q.to_bytes() == payload + bytes([127])
    assert q.nbytes == 17


def test_mxfp4_rceil_rounds_the_scale_up():
    q = quantize(torch.tensor([MX_BLOCK]), "mxfp4", scale_rounding="rceil")
    # descale = 7 / 6 = 1.1667 rounds up to 2: code 128, so nothing saturates.
    assert q.fields["scale_e8m0"].tolist() == [128]
    assert q.dequantize().abs().max().item() == 8.0  # 7 / 2 = 3.5 -> 4 (tie to even) * 2


def test_mx_scale_uses_exponent_bits_not_float_log2():
    below_eight = torch.nextafter(torch.tensor(8.0), torch.tensor(0.0)).item()
    x = torch.zeros(1, 32)
    x[0, 0] = below_eight
    # floor(log2(7.9999995)) = 2; a float log2 rounds it to 3.0.
    assert torch.log2(torch.tensor(below_eight)).item() == 3.0
    q = quantize(x, "mxfp4")
    assert q.fields["scale_e8m0"].tolist() == [127]
    assert q.codes[0, 0].item() == 7  # 7.9999995 saturates to 6 under X = 1


def test_mx_zero_block_gives_smallest_scale_and_zeros():
    for key in ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4"):
        q = quantize(torch.zeros(2, 64), key)
        assert q.fields["scale_e8m0"].eq(0).all(), key  # 2**-127
        assert torch.equal(q.dequantize(), torch.zeros(2, 64)), key


def test_mx_element_saturation_is_a_clamp_not_inf():
    x = torch.zeros(2, 32)
    x[0, 0] = 500.0  # amax 500: X = 2**(8 - 8) = 1, and 500 > 448
    x[1, 0] = 65000.0  # amax 65000: X = 2**(15 - 15) = 1, and 65000 > 57344
    q8 = quantize(x[:1], "mxfp8_e4m3")
    assert q8.codes[0, 0].item() == 0x7E and q8.dequantize()[0, 0].item() == 448.0
    q5 = quantize(x[1:], "mxfp8_e5m2")
    assert q5.codes[0, 0].item() == 0x7B and q5.dequantize()[0, 0].item() == 57344.0


def test_mxfp6_packs_four_codes_in_three_bytes():
    x = torch.zeros(1, 32)
    x[0, :4] = torch.tensor([1.0, -1.0, 7.5, 0.125])  # amax 7.5 -> X = 2**(2 - 2) = 1
    q = quantize(x, "mxfp6_e2m3")
    codes = q.codes[0, :4].tolist()
    assert codes == [0b001000, 0b101000, 0b011111, 0b000001]
    word = codes[0] | codes[1] << 6 | codes[2] << 12 | codes[3] << 18
    assert q.to_bytes()[:3] == word.to_bytes(3, "little")
    assert q.nbytes == 24 + 1


# --- E2M1 ties ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.25, 1.0),
        (1.75, 2.0),
        (2.5, 2.0),
        (3.5, 4.0),
        (0.25, 0.0),
        (0.75, 1.0),
        (5.0, 4.0),
        (-2.5, -2.0),
    ],
)
def test_e2m1_rounds_half_to_even(value, expected):
    code = E2M1.encode(torch.tensor([value]))
    assert E2M1.decode(code).item() == expected


# --- GGUF -----------------------------------------------------------------------------------


def test_q8_0_block_bytes_by_hand():
    # amax 127 -> d = 1.0 (fp16 0x3C00), id = 1: codes are roundf(x), halves away from 0.
    values = [0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, 127.0, -127.0, 3.2, -3.7]
    values += [float(i) for i in range(22)]
    q = quantize(torch.tensor([values]), "q8_0")
    codes = [1, -1, 2, 3, -3, 0, 127, -127, 3, -4] + list(range(22))
    assert q.codes[0].tolist() == codes
    assert q.to_bytes() == f16_le(1.0) + bytes(c & 0xFF for c in codes)
    assert q.nbytes == 34


def test_q4_0_block_bytes_by_hand():
    # -8 comes first among the two values of magnitude 8, so max = -8, d = -8 / -8 = 1.
    first = [
        -8.0,
        8.0,
        0.0,
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.49,
        7.0,
        7.5,
        -7.5,
        3.0,
        -3.0,
        0.49,
        -0.51,
        6.6,
    ]
    second = [
        1.0,
        2.0,
        3.0,
        4.0,
        5.0,
        6.0,
        7.0,
        -1.0,
        -2.0,
        -3.0,
        -4.0,
        -5.0,
        -6.0,
        -7.0,
        0.25,
        -0.25,
    ]
    q = quantize(torch.tensor([first + second]), "q4_0")
    # code = min(15, trunc(x + 8.5)): 8 -> 16 -> 15 (clipped to 7), 0.5 -> 9, -0.5 -> 8.
    codes_first = [0, 15, 8, 9, 8, 10, 7, 10, 15, 15, 1, 11, 5, 8, 7, 15]
    codes_second = [9, 10, 11, 12, 13, 14, 15, 7, 6, 5, 4, 3, 2, 1, 8, 8]
    assert q.codes[0].tolist() == codes_first + codes_second
    packed = bytes(lo | (hi << 4) for lo, hi in zip(codes_first, codes_second, strict=True))
    assert q.to_bytes() == f16_le(1.0) + packed
    assert q.dequantize()[0, 1].item() == 7.0  # +8 is outside [-8d, 7d]: clipped


def test_q4_0_positive_first_flips_the_sign_of_d():
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 1] = 8.0, -8.0  # +8 first: max = 8, d = -1
    q = quantize(x, "q4_0")
    assert q.to_bytes()[:2] == f16_le(-1.0)
    assert q.codes[0, :2].tolist() == [0, 15]  # -8 * -1 + 8.5 = 16.5 -> 15: clipped
    assert q.dequantize()[0, :2].tolist() == [8.0, -7.0]


def test_q4_1_block_bytes_by_hand():
    # min -1, max 14: d = 15 / 15 = 1, m = -1; code = min(15, trunc(x + 1 + 0.5)).
    values = [-1.0, 14.0, 0.0, 0.5, -0.5, 6.4, 6.6] + [2.0] * 25
    q = quantize(torch.tensor([values]), "q4_1")
    codes = [0, 15, 1, 2, 1, 7, 8] + [3] * 25
    assert q.codes[0].tolist() == codes
    packed = bytes(codes[j] | (codes[j + 16] << 4) for j in range(16))
    assert q.to_bytes() == f16_le(1.0) + f16_le(-1.0) + packed
    assert q.nbytes == 20


# --- NF4 ------------------------------------------------------------------------------------


def test_nf4_midpoint_ties_take_the_lower_code():
    mids = nf4_midpoints()
    # absmax 1 (the first value), so the normalised value is x itself.
    values = [1.0, *mids, -1.0, 0.0]
    above = [torch.nextafter(torch.tensor(m), torch.tensor(2.0)).item() for m in mids]
    values += above
    values += [0.0] * (64 - len(values))
    q = quantize(torch.tensor(values), "nf4")
    codes = q.codes.tolist()
    assert codes[0] == 15
    assert codes[1:16] == list(range(15))  # midpoint i, between codes i and i+1 -> i
    assert codes[16:18] == [0, 7]
    assert codes[18:33] == list(range(1, 16))  # one ulp above -> the upper code
    assert q.dequantize()[1:16].tolist() == pytest.approx(list(NF4_TABLE[:15]))


def test_nf4_bytes_put_the_first_element_in_the_high_nibble():
    x = torch.zeros(64)
    x[0], x[1] = 1.0, -1.0
    q = quantize(x, "nf4")
    assert q.to_bytes()[0] == (15 << 4) | 0
    assert q.to_bytes()[1] == (7 << 4) | 7
    assert q.to_bytes()[32:] == struct.pack("<f", 1.0)


# --- every format: zeros --------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(FORMATS))
def test_all_zero_tensor_quantizes_to_exact_zeros(key):
    for shape in [(3, 64), (5, 7), (64,)]:
        q = quantize(torch.zeros(shape), key)
        out = q.dequantize()
        assert not torch.isnan(out).any()
        assert torch.equal(out, torch.zeros(shape)), (key, shape)


# --- int8, int4, fp8 ------------------------------------------------------------------------


def test_int8_per_tensor_by_hand():
    # amax 127 -> scale 1; round half to even: -63.5 -> -64, 0.5 -> 0, 1.5 -> 2, 2.5 -> 2.
    x = torch.tensor([[127.0, -63.5, 0.5, 1.5, 2.5, -0.5]])
    q = quantize(x, "int8", granularity="tensor")
    assert q.codes.tolist() == [[127, -64, 0, 2, 2, 0]]
    assert q.to_bytes() == bytes([127, 0xC0, 0, 2, 2, 0]) + struct.pack("<f", 1.0)
    assert q.nbytes == 6 + 4


def test_int4_block_by_hand():
    x = torch.tensor([[7.0, 3.5, -2.5, 0.5, 1.5, -7.0, 0.0, 6.5]])
    q = quantize(x, "int4", granularity=8)  # amax 7 -> scale 1
    assert q.codes.tolist() == [[7, 4, -2, 0, 2, -7, 0, 6]]
    # Two's complement nibbles, element 2i in the low nibble: (7,4) (-2,0) (2,-7) (0,6).
    assert q.to_bytes() == bytes([0x47, 0x0E, 0x92, 0x60]) + struct.pack("<f", 1.0)


def test_int8_zero_point_by_hand():
    # [lo, hi] = [-1, 2]: scale = 3 / 255, zero_point = round(1 / scale) = 85.
    q = quantize(torch.tensor([[-1.0, 2.0, 0.0]]), "int8", granularity="tensor", zero_point=True)
    assert q.zero_points is not None and q.zero_points.tolist() == [85]
    assert q.codes.tolist() == [[0, 255, 85]]
    assert q.dequantize()[0, 2].item() == 0.0  # zero is exact
    assert q.nbytes == 3 + 4 + 1


def test_fp8_e4m3_per_tensor_by_hand():
    # amax 448 -> scale 1. 300 lies between 288 and 320 (step 32): 288 = 0 1111 001.
    q = quantize(torch.tensor([[448.0, -1.0, 0.5, 300.0]]), "fp8_e4m3")
    assert q.codes.tolist() == [[0x7E, 0xB8, 0x30, 0x79]]
    assert q.to_bytes() == bytes([0x7E, 0xB8, 0x30, 0x79]) + struct.pack("<f", 1.0)


def test_fp8_e5m2_per_tensor_by_hand():
    # amax 57344 -> scale 1. 1e-5 is subnormal (step 2**-16 = 1.5e-5): rounds up to code 1.
    q = quantize(torch.tensor([[57344.0, 3.0, -0.0, 1e-5]]), "fp8_e5m2")
    assert q.codes.tolist() == [[0x7B, 0x42, 0x80, 0x01]]
    assert q.dequantize()[0].tolist() == [57344.0, 3.0, -0.0, 2.0**-16]


def test_mxfp6_e3m2_block_by_hand():
    x = torch.zeros(1, 32)
    x[0, :5] = torch.tensor([28.0, 0.0625, -1.0, 5.0, 0.03])
    q = quantize(x, "mxfp6_e3m2")  # amax 28: floor(log2 28) = 4 = emax -> X = 1
    assert q.fields["scale_e8m0"].tolist() == [127]
    # 28 = 0 111 11; 0.0625 is the smallest subnormal (code 1); -1 = 1 011 00;
    # 5 = 1.25 * 4 = 0 101 01; 0.03 < 0.0625 / 2 rounds to 0.
    assert q.codes[0, :5].tolist() == [0x1F, 0x01, 0x2C, 0x15, 0x00]
