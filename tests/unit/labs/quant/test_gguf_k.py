"""q4_k and q6_k: bit-exact with llama.cpp's quantize_row_q4_K_ref / quantize_row_q6_K_ref.

gguf-py (0.19) can dequantize Q4_K and Q6_K but not quantize them, so the checks are:
our bytes read back by gguf-py's dequantizer give exactly our dequantize() (the layout);
the bytes of hand-worked blocks (the arithmetic, step by step); and SHA-256 digests of the
bytes that llama.cpp's C reference produces for fixed inputs (the whole search, every
float32 rounding). A test fails when an installed gguf-py gains a quantizer for them.
"""

import hashlib
import math
import struct

import numpy as np
import pytest
import torch

from labs.quant import FORMATS, bits_per_value, quantize
from labs.quant.formats import gguf_k
from labs.quant.matmul import quantized_matmul

gguf = pytest.importorskip("gguf", reason="gguf (gguf-py) is a dev dependency: pip install gguf")
from gguf import GGMLQuantizationType as GGMLType  # noqa: E402

GGUF_TYPES = {"q4_k": GGMLType.Q4_K, "q6_k": GGMLType.Q6_K}
TYPE_SIZES = {"q4_k": 144, "q6_k": 210}
KEYS = sorted(GGUF_TYPES)


def f16_le(value: float) -> bytes:
    return struct.pack("<e", value)


def gguf_dequantize(data: bytes, key: str, rows: int) -> np.ndarray:
    raw = np.frombuffer(data, dtype=np.uint8).reshape(rows, -1)
    return gguf.quants.dequantize(raw, GGUF_TYPES[key])


def distributions() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(4321)
    normal = torch.randn(16, 512, generator=gen)
    outliers = normal.clone()
    outliers[::3, ::37] *= 80
    signs = torch.randn(16, 512, generator=gen).sign()
    laplace = torch.empty(16, 512).exponential_(generator=gen) * signs
    special = normal[:8].clone()
    special[0, :256] = 0.0  # an all-zero super-block
    special[1, :32] = 1.5  # constant sub-blocks, positive and negative
    special[1, 32:64] = -2.25
    special[2] = -special[2].abs() - 0.5  # negative only
    special[3, 100:116] = 0.0
    return {
        "normal": normal,
        "uniform": torch.rand(8, 512, generator=gen) * 2 - 1,
        "heavy_tailed": torch.randn(8, 512, generator=gen)
        / (torch.rand(8, 512, generator=gen) + 0.01),
        "laplace": laplace,
        "outliers": outliers,
        "special": special,
        "tiny": torch.randn(4, 256, generator=gen) * 1e-5,
        "mixed_scales": normal[:8] * torch.logspace(-6, 3, 512)[None],
        "3d": torch.randn(2, 3, 256, generator=gen) * 7,
    }


# --- the layout: gguf-py reads our bytes back ----------------------------------------------


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("name", sorted(distributions()))
def test_gguf_py_reads_our_bytes_as_our_dequantize(key, name):
    x = distributions()[name]
    q = quantize(x, key)
    data = q.to_bytes()
    n_super = x.numel() // 256
    assert len(data) == q.nbytes == n_super * TYPE_SIZES[key]
    assert q.padded == 0
    rows = x.numel() // x.shape[-1]
    theirs = gguf_dequantize(data, key, rows).reshape(x.shape)
    assert np.array_equal(q.dequantize().numpy(), theirs)


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("cols", [1, 5, 33, 100, 255, 300])
def test_padded_rows_are_completed_with_zero_sub_blocks(key, cols):
    x = torch.randn(3, cols, generator=torch.Generator().manual_seed(cols)) * 3
    q = quantize(x, key)
    sub = FORMATS[key].block_len_for(cols)
    assert q.padded == 3 * (-cols % sub)  # padding to the sub-block, as every format
    n_super = -(-cols // 256)
    assert q.nbytes == len(q.to_bytes()) == 3 * n_super * TYPE_SIZES[key]
    # The stored super-blocks are those of the row with its last value repeated to a
    # whole sub-block and then zeros up to 256: zero sub-blocks change no statistic.
    padded = -(-cols // sub) * sub
    full = torch.cat([x, x[:, -1:].expand(-1, padded - cols)], dim=1)
    full = torch.cat([full, torch.zeros(3, n_super * 256 - padded)], dim=1)
    assert q.to_bytes() == quantize(full, key).to_bytes()
    theirs = gguf_dequantize(q.to_bytes(), key, 3)
    assert np.array_equal(theirs[:, :cols], q.dequantize().numpy())
    assert not theirs[:, padded:].any()


@pytest.mark.parametrize("key", KEYS)
def test_gguf_py_has_no_quantizer_for_it_so_the_digests_stand_in(key):
    """The bytes are checked against llama.cpp's digests because the installed gguf-py
    cannot quantize q4_k/q6_k (only dequantize). An upgrade that adds the quantizer
    fails here: then compare quantize(x, key).to_bytes() with it, as test_gguf.py
    does for q8_0/q4_0/q4_1, and replace this test with that comparison."""
    x = distributions()["normal"].numpy()
    with pytest.raises(NotImplementedError):
        gguf.quants.quantize(x, GGUF_TYPES[key])
    # ...while the dequantizer the layout tests rely on is there
    data = quantize(distributions()["normal"], key).to_bytes()
    assert gguf_dequantize(data, key, x.shape[0]).shape == x.shape


# --- golden bytes from llama.cpp's C reference ----------------------------------------------


def _bits(n: int, seed: int) -> np.ndarray:
    """n pseudo-random 24-bit integers from a counter hash (SplitMix64 finaliser): pure
    integer arithmetic, so the inputs below are the same float32 values everywhere."""
    z = (np.arange(n, dtype=np.uint64) + np.uint64(seed)) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.int64)


def exact_inputs(rows: int = 8, cols: int = 512) -> dict[str, np.ndarray]:
    n = rows * cols
    u = [_bits(n, 1000 * k) for k in range(4)]
    uniform = ((u[0] - (1 << 23)).astype(np.float32) * np.float32(2.0**-23)).reshape(rows, cols)
    normalish = (u[0] + u[1] + u[2] + u[3] - (1 << 25)).astype(np.float32) * np.float32(2.0**-23)
    normalish = normalish.reshape(rows, cols)  # a sum of four uniforms
    positive = u[1].astype(np.float32) * np.float32(2.0**-24) + np.float32(0.05)
    heavy = normalish / positive.reshape(rows, cols)
    picked = (u[2] % 64 == 0).reshape(rows, cols)  # about 1 value in 64
    outliers = np.where(picked, normalish * np.float32(50), normalish)
    # Sub-blocks of 32 scaled by 2^-16 .. 2^7: many 6-bit / int8 sub-block scales round to
    # 0, and those sub-blocks keep the codes of their search (C's `if (!d) continue;`).
    sub_scales = np.float32(2.0) ** ((u[3][: n // 32] % 24) - 16).astype(np.float32)
    mixed = normalish * np.repeat(sub_scales, 32).reshape(rows, cols)
    special = normalish.copy()
    special[0, :256] = 0.0  # an all-zero super-block (q6_k: memset)
    special[1, :32] = np.float32(1.5)  # constant sub-blocks
    special[1, 32:64] = np.float32(-2.25)
    special[2] = -np.abs(special[2]) - np.float32(0.5)  # negative only
    special[3, 16:32] = 0.0  # a zero q6_k sub-block
    ties = ((u[2] % 129).astype(np.float32) - np.float32(64)) * np.float32(0.125)
    return {
        "uniform": uniform,
        "normal": normalish,
        "heavy": heavy,
        "outliers": outliers,
        "mixed_scales": mixed,
        "special": special,
        "ties": ties.reshape(rows, cols),
    }


# The first 32 hex digits of the SHA-256 of the bytes llama.cpp writes for exact_inputs():
# quantize_row_q4_K_ref / quantize_row_q6_K_ref with make_qkx2_quants, make_qx_quants,
# nearest_int and ggml's fp32 -> fp16 conversion transcribed from ggml-org/llama.cpp
# (ggml/src/ggml-quants.c, ggml-impl.h at commit 01243c587fec), compiled with gcc 12.2 -O2
# for x86-64 (no FMA, as ggml-base is built there). The same C code built with
# -march=native, where gcc contracts a*b + c into FMAs, gives other bytes for half of them.
EXACT_INPUTS_SHA256 = "2794481d94bf880d"  # of the inputs themselves, concatenated
C_REFERENCE_SHA256 = {
    ("uniform", "q4_k"): "628e5f1e0b1debbecb9950a93351e592",
    ("uniform", "q6_k"): "322f9feed23ea9d6c29e15f94568f61b",
    ("normal", "q4_k"): "1ef74f0f0406f2dc3ab8989db2cf0415",
    ("normal", "q6_k"): "6fb6f5d8ef73466c122ad063b02f753f",
    ("heavy", "q4_k"): "acc24b433959144cb464b643bb40e206",
    ("heavy", "q6_k"): "6e34b179ff887cbf890ab8cd3b47adc2",
    ("outliers", "q4_k"): "4d1e4edef7c50865ac233ff82310aa22",
    ("outliers", "q6_k"): "163f90fa4e5fbfb78d66050930c3610a",
    ("mixed_scales", "q4_k"): "37a4f9ff4e12b10eaf792738f6baf2bd",
    ("mixed_scales", "q6_k"): "792442f87b8e6cf64285ae14007d0a5e",
    ("special", "q4_k"): "af412c982da69279b4ac54ba552d8042",
    ("special", "q6_k"): "7a4e98aaff0ad3d4eddb36da03d881de",
    ("ties", "q4_k"): "668504010f9423ca5a73bc269aceb038",
    ("ties", "q6_k"): "46c9ab508be466bf36cacbb5162d2d34",
}


@pytest.fixture(params=["native", "torch"])
def pipeline(request, monkeypatch):
    """Each golden test runs on the native kernel (labs/quant/_kquants.c) and on the torch
    pipeline: both must write llama.cpp's bytes."""
    if request.param == "torch":
        monkeypatch.setattr(gguf_k, "KERNEL", None)
    elif gguf_k.KERNEL is None:
        pytest.fail("labs.quant._kquants is not built: `pip install -e .` needs a C compiler")
    return request.param


@pytest.mark.parametrize(("name", "key"), sorted(C_REFERENCE_SHA256))
def test_bytes_match_llama_cpp_c_reference(name, key, pipeline):
    x = torch.from_numpy(exact_inputs()[name])
    data = quantize(x, key).to_bytes()
    assert hashlib.sha256(data).hexdigest()[:32] == C_REFERENCE_SHA256[(name, key)]


def test_exact_inputs_are_what_the_digests_were_made_from():
    x = exact_inputs()
    assert x["normal"].dtype == np.float32 and x["normal"].shape == (8, 512)
    digest = hashlib.sha256(np.concatenate([v.reshape(-1) for v in x.values()]).tobytes())
    assert digest.hexdigest()[:16] == EXACT_INPUTS_SHA256


# --- hand-worked blocks ---------------------------------------------------------------------


Q4_K_SUB_SCALES = [1.0, 0.5, 2.0, 0.25, 1.0, 2.0, 0.5, 1.0]


def test_q4_k_block_by_hand():
    # Sub-block j holds s_j * k - j for k = i % 16 (each of 0..15 twice).
    # make_qkx2_quants: min = -j, max = 15 s_j - j, iscale = 15 / (15 s_j) = 1 / s_j
    # (exact: s_j is a power of two), L = k, and the initial weighted error is exactly 0,
    # so no step of the search (it needs a strictly smaller error) replaces it:
    # scale_j = s_j, the_min_j = j.
    # Super-block: max_scale = 2, max_min = 7. ls = nearest_int(63/2 * s_j):
    # 31.5 -> 32 (half to even), 15.75 -> 16, 63, 7.875 -> 8; lm = nearest_int(63/7 * j)
    # = 9 j. d = fp16(2/63) = 2^-5 * (1 + 16/1024) = 0x2810,
    # dmin = fp16(7/63) = 2^-4 * (1 + 796/1024) = 0x2F1C.
    # Codes: (x + dmin*lm) / (d*ls) = k * (1 + 1.5e-2) or k * (1 + 2.4e-4) minus < 0.002:
    # every code rounds back to k.
    s = Q4_K_SUB_SCALES
    x = torch.tensor([[s[j] * (i % 16) - j for j in range(8) for i in range(32)]])
    q = quantize(x, "q4_k")
    ls = [32, 16, 63, 8, 32, 63, 16, 32]
    lm = [9 * j for j in range(8)]
    assert q.fields["sub_scale_u6"][0].tolist() == ls
    assert q.fields["sub_min_u6"][0].tolist() == lm
    d, dmin = 2**-5 * (1 + 16 / 1024), 2**-4 * (1 + 796 / 1024)
    assert q.fields["scale_fp16"].tolist() == [d] and q.fields["min_fp16"].tolist() == [dmin]
    assert q.codes[0].tolist() == [i % 16 for _ in range(8) for i in range(32)]
    # scales[12] (get_scale_min_k4): bytes 0-3 ls[0..3] | (ls[4..7] >> 4) << 6, bytes 4-7
    # the same for lm, bytes 8-11 (ls[4..7] & 15) | (lm[4..7] & 15) << 4.
    packed = [160, 208, 127, 136, 128, 137, 210, 219, 64, 223, 96, 240]
    qs = bytes(0x11 * (i % 16) for _ in range(4) for i in range(32))  # k low, k high
    assert q.to_bytes() == f16_le(d) + f16_le(dmin) + bytes(packed) + qs
    # Decoded: each sub-block's scale d*ls and offset -dmin*lm, as dequantize_row_q4_K.
    assert q.scales.tolist() == [d * v for v in ls]
    assert q.zero_points is not None and q.zero_points.tolist() == [-dmin * v for v in lm]
    expected = [d * ls[j] * (i % 16) - dmin * lm[j] for j in range(8) for i in range(32)]
    assert q.dequantize()[0].tolist() == pytest.approx(expected, rel=1e-6)
    assert np.array_equal(gguf_dequantize(q.to_bytes(), "q4_k", 1)[0], q.dequantize()[0].numpy())


def test_q6_k_block_by_hand():
    # Sub-block j holds s_j * l for the 16 levels l below; -32 is the value of largest
    # magnitude, so make_qx_quants starts from iscale = -32 / (-32 s_j) = 1 / s_j and
    # L = l exactly; with weights x^2 the fit sum(w x l) / sum(w l^2) is s_j exactly (all
    # sums are integers times s_j^3 or s_j^2 below 2^24), and no other step can beat an
    # exact fit (Cauchy-Schwarz): scale_j = s_j.
    # Super-block: max_scale = 2 (the first of the largest), iscale = -128 / 2 = -64,
    # d = fp16(1 / -64) = -2^-6 = 0xA400, sc_j = nearest_int(-64 s_j) = -128, -64, -32,
    # -16, -8; codes nearest_int(x / (d sc_j)) = l, stored l + 32.
    levels = [-32, -20, -7, 0, 1, 5, 9, 13, 17, 21, 25, 31, -1, -13, 3, 30]
    s = [2, 1, 0.5, 0.25, 2, 1, 0.5, 0.25, 1, 1, 1, 1, 0.5, 0.5, 2, 0.125]
    x = torch.tensor([[s[j] * v for j in range(16) for v in levels]])
    q = quantize(x, "q6_k")
    sc = [int(-64 * v) for v in s]
    assert q.fields["sub_scale_i8"][0].tolist() == sc
    assert q.fields["scale_fp16"].tolist() == [-(2**-6)]
    stored = [v + 32 for v in levels]
    assert q.codes[0].tolist() == stored * 16
    # ql[l] = L[l] & 15 | (L[l + 64] & 15) << 4 and ql[l + 32] likewise for L[l + 32],
    # L[l + 96]; qh[l] = the top two bits of L[l], L[l + 32], L[l + 64], L[l + 96] in bits
    # 0-1, 2-3, 4-5, 6-7. Every sub-block repeats the same 16 codes, so each quarter of
    # 32 elements is `stored` twice.
    quarter = stored * 2
    ql = bytes((c & 15) * 0x11 for c in quarter) * 4
    qh = bytes((c >> 4) * 0x55 for c in quarter) * 2
    scales = bytes(v & 0xFF for v in sc)
    assert q.to_bytes() == ql + qh + scales + f16_le(-(2**-6))
    assert q.dequantize()[0].tolist() == x[0].tolist()  # exact: on the grid
    assert q.scales.tolist() == [-(2**-6) * v for v in sc]


def test_q6_k_all_zero_super_block_is_zero_bytes():
    # max_abs_scale < GROUP_MAX_EPS: memset(&y[i], 0, sizeof(block_q6_K)).
    x = torch.zeros(2, 256)
    x[1, 7] = 1e-20  # still below the 1e-15 threshold of make_qx_quants
    q = quantize(x, "q6_k")
    assert q.to_bytes() == bytes(2 * 210)
    assert torch.equal(q.dequantize(), torch.zeros(2, 256))


def test_q4_k_constant_negative_sub_block_is_exact_through_its_minimum():
    # All 32 values equal c < 0: min = max = c, so scale 0 and the_min = -c; the value
    # comes back from -dmin * lm alone (d * ls = 0 keeps the codes at 0).
    x = torch.full((1, 256), -3.0)
    q = quantize(x, "q4_k")
    # max_min = 3, lm = nearest_int(63/3 * 3) = 63, dmin = fp16(3/63) = 2^-5 * (1 + 536/1024).
    dmin = 2**-5 * (1 + 536 / 1024)
    assert q.fields["sub_scale_u6"].eq(0).all() and q.fields["sub_min_u6"].eq(63).all()
    assert q.fields["scale_fp16"].tolist() == [0.0] and q.fields["min_fp16"].tolist() == [dmin]
    assert q.codes.eq(0).all()
    assert torch.equal(q.dequantize(), torch.full((1, 256), -dmin * 63))


# --- accuracy, sizes, behaviour -------------------------------------------------------------


def test_error_ordering_and_bits():
    x = torch.randn(128, 1024, generator=torch.Generator().manual_seed(7))

    def rmse(key: str) -> float:
        return (quantize(x, key).dequantize() - x).pow(2).mean().sqrt().item()

    assert rmse("q6_k") < rmse("q4_k") < rmse("q4_0")
    assert rmse("q4_k") < rmse("q4_1")  # same 4-bit codes, better scales, fewer bits
    assert FORMATS["q4_k"].bits_per_value == 4.5 == bits_per_value("q4_k")
    assert FORMATS["q6_k"].bits_per_value == 6.5625 == bits_per_value("q6_k")
    assert FORMATS["q4_k"].block_size == FORMATS["q6_k"].block_size == 256
    assert bits_per_value("q4_k", shape=(2, 100)) == 8 * 2 * 144 / 200
    q = quantize(x, "q4_k")
    assert q.payload_nbytes == x.numel() // 2 and q.nbytes == x.numel() // 256 * 144
    q6 = quantize(x, "q6_k")
    assert q6.payload_nbytes == x.numel() * 6 // 8 and q6.nbytes == x.numel() // 256 * 210


@pytest.mark.parametrize("key", KEYS)
def test_scales_and_affine_are_per_sub_block(key):
    x = torch.randn(4, 512, generator=torch.Generator().manual_seed(3))
    q = quantize(x, key)
    sub = q.layout.block_len
    assert sub == {"q4_k": 32, "q6_k": 16}[key]
    assert q.scales.shape == (4 * 512 // sub,)
    aff = q.affine()
    rebuilt = aff.elements * aff.scale[:, None]
    if aff.offset is not None:
        rebuilt = rebuilt + aff.offset[:, None]
    assert torch.equal(q.unblock(rebuilt), q.dequantize())
    # The quantized matmul scales each sub-block inside the reduction.
    a = torch.randn(3, 512, generator=torch.Generator().manual_seed(4))
    y = quantized_matmul(a, q, out_dtype=torch.float64)
    assert torch.allclose(y, a.double() @ q.dequantize().double().T, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("key", KEYS)
def test_scale_overflow_is_a_clear_error(key):
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(5))
    x[1, 3] = 1e9  # d = max_scale / 63 (q4_k) or max_scale / 128 (q6_k) > 65504
    with pytest.raises(ValueError, match="too large for the format's scale type"):
        quantize(x, key)
    x[1, 3] = 1e5  # fine
    assert torch.isfinite(quantize(x, key).dequantize()).all()


@pytest.mark.parametrize("key", KEYS)
def test_nonfinite_propagate_poisons_its_super_block_only(key):
    x = torch.randn(2, 512, generator=torch.Generator().manual_seed(6))
    x[1, 300] = math.inf
    out = quantize(x, key, nonfinite="propagate").dequantize()
    assert torch.isnan(out[1, 256:]).all()
    assert torch.isfinite(out[0]).all() and torch.isfinite(out[1, :256]).all()


def test_the_scale_search_is_not_idempotent():
    # Requantizing a dequantized q6_k block can settle on a neighbouring scale (which is
    # why test_properties leaves the k-quants out of its idempotence property).
    x = torch.tensor([[1.5410]])
    once = quantize(x, "q6_k").dequantize()
    twice = quantize(once, "q6_k").dequantize()
    assert once.item() != twice.item()
    assert abs(once.item() - twice.item()) < 1e-3
