"""Named limits of every number format labs.quant knows, with the spec each comes from.

Nothing in the quantization math uses a bare number: it uses these names. Other code
(labs, content checks) reads them too, for example ``ELEMENT_LIMITS["e4m3"]``, or
``labs.quant.FORMAT_LIMITS["fp8_e4m3"]`` by format key.

Sources:
- OCP Microscaling Formats (MX) Specification v1.0, section 5 (element types) and
  section 5.4 (E8M0 scale): https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf
- OCP 8-bit Floating Point Specification (OFP8) rev 1.0 (E4M3 and E5M2).
- NVIDIA, "NVFP4" (cuBLAS 1D block scaling; Blackwell PTX ``cvt`` to e2m1x2 / ue4m3).
- Dettmers et al., "QLoRA" (arXiv:2305.14314), appendix E: the NF4 table; bitsandbytes
  ``functional.get_4bit_type("nf4")`` holds the same float32 values.
- llama.cpp ``ggml/src/ggml-common.h`` (block structs) and ``ggml-quants.c``
  (``quantize_row_q8_0_ref``, ``quantize_row_q4_0_ref``, ``quantize_row_q4_1_ref``, and
  the k-quants ``quantize_row_q4_K_ref`` / ``quantize_row_q6_K_ref`` with their helpers
  ``nearest_int``, ``make_qkx2_quants`` and ``make_qx_quants``).
"""

from __future__ import annotations

from types import MappingProxyType

# --- IEEE binary32 / binary16 bit layout -------------------------------------------------
F32_MANTISSA_BITS = 23
F32_EXPONENT_BITS = 8
F32_EXPONENT_BIAS = 127
F32_EXPONENT_MASK = 0xFF  # after shifting the mantissa away
F32_MANTISSA_MASK = (1 << F32_MANTISSA_BITS) - 1
F32_SIGN_MASK = 0x7FFFFFFF  # clears the sign bit when AND-ed
F32_MIN_SUBNORMAL_EXPONENT = -149  # 2**-149 is the smallest positive float32
F32_MIN_NORMAL_EXPONENT = -126
F16_MAX = 65504.0  # largest finite IEEE binary16; GGUF stores its block scales in fp16

# --- Element minifloats (OCP MX v1.0 section 5.3, OFP8) -----------------------------------
F4_BITS = 4  # E2M1
F6_BITS = 6  # E2M3, E3M2
F8_BITS = 8  # E4M3, E5M2
F4_E2M1_MAX = 6.0
F4_E2M1_EXPONENT_BIAS = 1
F6_E2M3_MAX = 7.5
F6_E2M3_EXPONENT_BIAS = 1
F6_E3M2_MAX = 28.0
F6_E3M2_EXPONENT_BIAS = 3
F8_E4M3_MAX = 448.0  # E4M3 "fn": S.1111.111 is NaN, so the top normal is 1.75 * 2**8
F8_E4M3_EXPONENT_BIAS = 7
F8_E5M2_MAX = 57344.0  # E5M2 is IEEE-like: exponent 31 holds Inf and NaN
F8_E5M2_EXPONENT_BIAS = 15

# emax_elem: the exponent of the largest power of two an element type holds (MX table 1).
F4_E2M1_EMAX = 2
F6_E2M3_EMAX = 2
F6_E3M2_EMAX = 4
F8_E4M3_EMAX = 8
F8_E5M2_EMAX = 15

# --- E8M0 shared scale (OCP MX v1.0 section 5.4) -----------------------------------------
E8M0_EXPONENT_BIAS = 127
E8M0_NAN = 0xFF  # the only special value; there is no zero and no infinity
E8M0_MAX_FINITE = 0xFE  # 2**127
E8M0_MIN_EXPONENT = -127  # code 0 is 2**-127

# --- Block sizes ---------------------------------------------------------------------------
MX_BLOCK_SIZE = 32  # OCP MX v1.0: k = 32 for every concrete MX format
NVFP4_BLOCK_SIZE = 16
NF4_BLOCK_SIZE = 64  # QLoRA / bitsandbytes default blocksize
NF4_DOUBLE_QUANT_BLOCK_SIZE = 256  # QLoRA: absmax values quantized in blocks of 256
QK8_0 = 32  # ggml-common.h: #define QK8_0 32
QK4_0 = 32  # ggml-common.h: #define QK4_0 32
QK4_1 = 32  # ggml-common.h: #define QK4_1 32
QK_K = 256  # ggml-common.h: #define QK_K 256, the k-quant super-block
Q4_K_SUB_BLOCK = 32  # q4_K: 8 sub-blocks of 32, each with a 6-bit scale and a 6-bit min
Q6_K_SUB_BLOCK = 16  # q6_K: 16 sub-blocks of 16, each with an int8 scale
K_SCALE_SIZE = 12  # ggml-common.h: bytes of q4_K's packed 6-bit scales and mins

# --- Integer grids -------------------------------------------------------------------------
INT8_SYMMETRIC_MAX = 127  # symmetric absmax uses [-127, 127] so that -x is representable
INT4_SYMMETRIC_MAX = 7
Q8_0_MAX = 127  # ggml-quants.c: d = amax / ((1 << 7) - 1)
Q4_0_MAX_NEGATIVE = -8  # ggml-quants.c: d = max / -8
Q4_0_OFFSET = 8  # stored nibble = q + 8
Q4_0_ROUNDING_BIAS = 8.5  # ggml-quants.c: (int8_t)(x0 + 8.5f), truncating
Q4_1_LEVELS = 15  # ggml-quants.c: d = (max - min) / ((1 << 4) - 1)
Q4_1_ROUNDING_BIAS = 0.5  # ggml-quants.c: (int8_t)(x0 + 0.5f), truncating
# k-quants (ggml-quants.c quantize_row_q4_K_ref, quantize_row_q6_K_ref and helpers).
Q4_K_LEVELS = 15  # make_qkx2_quants(32, nmax = 15, ...): codes 0..15
Q4_K_SEARCH_RMIN = -1.0  # make_qkx2_quants(..., rmin = -1.f, rdelta = 0.1f, nstep = 20, ...)
Q4_K_SEARCH_RDELTA = 0.1
Q4_K_SEARCH_STEPS = 20  # is = 0..20: iscale = (rmin + rdelta*is + nmax) / (max - min)
K_SCALE_LEVELS = 63  # q4_K's 6-bit sub-block scales and mins: ls = nearest_int(63/max * s)
K_SCALE_BITS = 6
Q6_K_NMAX = 32  # make_qx_quants(16, nmax = 32, ...): codes l in [-32, 31], stored l + 32
Q6_K_BITS = 6  # stored as a low nibble (ql) and two high bits (qh)
Q6_K_HIGH_BITS = 2
Q6_K_SEARCH_STEPS = 9  # make_qx_quants: is = -9..9 (not 0), iscale = -(nmax + 0.1f*is)/max
Q6_K_SEARCH_RDELTA = 0.1
Q6_K_SCALE_MIN = -128  # quantize_row_q6_K_ref: iscale = -128.f / max_scale
Q6_K_SCALE_MAX = 127  # int8 sub-block scales: MIN(127, nearest_int(iscale * scale))
GROUP_MAX_EPS = 1e-15  # ggml-quants.c: a group with amax below this is all zero
# nearest_int(f): the low 23 bits of f + 1.5 * 2**23, minus 2**22 (round half to even for
# |f| < 2**22; beyond that, and for inf/NaN, the bits give what C gives).
NEAREST_INT_MAGIC = 12582912.0  # 1.5 * 2**23
NEAREST_INT_MANTISSA_MASK = 0x007FFFFF
NEAREST_INT_OFFSET = 0x00400000
UINT8_MASK = 0xFF  # C's conversion of an int to uint8_t / int8_t keeps the low byte
NIBBLE_MAX = 15
NIBBLE_BITS = 4
NIBBLE_MASK = 0x0F

# --- NF4 (QLoRA appendix E; bitsandbytes get_4bit_type("nf4")) ----------------------------
NF4_TABLE = (
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
)
# bitsandbytes clamps absmax to this before taking 1/absmax, so a zero block stays finite.
NF4_ABSMAX_FLOOR = 1e-38
NF4_NORMALIZED_MAX = 1.0

# --- Storage sizes -------------------------------------------------------------------------
BITS_PER_BYTE = 8
FP32_BYTES = 4
FP16_BYTES = 2
E8M0_BYTES = 1
E4M3_BYTES = 1

#: The largest finite magnitude and the number of bits of each element type, by element
#: name. ``labs.quant.FORMAT_LIMITS`` adds one entry per format key, from its spec row.
ELEMENT_LIMITS = MappingProxyType(
    {
        "e2m1": MappingProxyType({"max": F4_E2M1_MAX, "bits": F4_BITS, "emax": F4_E2M1_EMAX}),
        "e2m3": MappingProxyType({"max": F6_E2M3_MAX, "bits": F6_BITS, "emax": F6_E2M3_EMAX}),
        "e3m2": MappingProxyType({"max": F6_E3M2_MAX, "bits": F6_BITS, "emax": F6_E3M2_EMAX}),
        "e4m3": MappingProxyType({"max": F8_E4M3_MAX, "bits": F8_BITS, "emax": F8_E4M3_EMAX}),
        "e5m2": MappingProxyType({"max": F8_E5M2_MAX, "bits": F8_BITS, "emax": F8_E5M2_EMAX}),
        "e8m0": MappingProxyType({"max": 2.0**127, "bits": 8, "bias": E8M0_EXPONENT_BIAS}),
    }
)
