/*
 * labs.quant._kquants: the whole CPU quantizer of q4_k and q6_k, bit-exact with
 * llama.cpp's quantize_row_q4_K_ref / quantize_row_q6_K_ref (ggml/src/ggml-quants.c).
 *
 * Why a native kernel: the per-sub-block scale search (make_qkx2_quants: 22 candidate
 * scales, make_qx_quants: 19) accumulates its sums in C order, left to right in float32,
 * and each candidate depends on the best one before it. In eager torch that is ~100 small
 * ops per candidate and chunk; here it is one pass over the data per candidate, in
 * registers. labs/quant/formats/gguf_k.py is the reference (the torch pipeline that also
 * runs on CUDA and for the cases this kernel hands back); the tests compare the two byte
 * for byte and both against digests of llama.cpp's own C output.
 *
 * Bit-exactness with vector code: every lane of a vector is one sub-block, never a slice
 * of one. A lane runs exactly the C reference's sequence of float32 operations on its
 * own sub-block (same order, each operation rounded separately: built with
 * -ffp-contract=off, so no a*b+c becomes an FMA), so eight sub-blocks are searched at once
 * without reassociating any sum. Division and square root are IEEE correctly rounded.
 *
 * Scope: finite input only. A chunk holding NaN or Inf, or whose fp16 super-block scale
 * overflows, returns a status and the caller runs the torch pipeline, which implements
 * the library's nonfinite= policy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define QK_K 256
#define LANES 8
#define Q4_SUB 32
#define Q6_SUB 16
#define GROUP_MAX_EPS 1e-15f

enum { STATUS_OK = 0, STATUS_NONFINITE = 1, STATUS_FP16_OVERFLOW = 2, STATUS_NO_MEMORY = 3 };

/* On x86-64 the row kernels are built twice, for AVX2 and for the baseline, and the
 * loader picks the one the CPU runs (measured here: 4x faster with AVX2). AVX2 does not
 * imply FMA, and -ffp-contract=off forbids contraction anyway: both give the same bytes. */
#if defined(__x86_64__) && defined(__GNUC__)
#define ROW_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define ROW_KERNEL
#endif
/* Inlined into each build of the row kernels. */
#define LANE_KERNEL static inline __attribute__((always_inline))

typedef float vf __attribute__((vector_size(LANES * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(LANES * sizeof(int32_t))));

/* mask ? a : b, lane by lane (mask lanes are all ones or all zeros). */
LANE_KERNEL vf vsel(vi mask, vf a, vf b) { return (vf)(((vi)a & mask) | ((vi)b & ~mask)); }

LANE_KERNEL vf vsplat(float v) { return (vf){0} + v; }

/* ggml's nearest_int: the low 23 bits of v + 1.5*2^23, minus 2^22. */
LANE_KERNEL vi vnearest_int(vf v) {
    vi bits = (vi)(v + 12582912.f);
    return (bits & 0x007fffff) - 0x00400000;
}

LANE_KERNEL int nearest_int(float v) {
    float shifted = v + 12582912.f;
    int32_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

/* MAX(lo, MIN(hi, l)) as float (exact: small integers). */
LANE_KERNEL vf vclamp_codes(vi l, int32_t lo, int32_t hi) {
    vi over = l > hi;
    l = (l & ~over) | (hi & over);
    vi under = l < lo;
    l = (l & ~under) | (lo & under);
    return __builtin_convertvector(l, vf);
}

LANE_KERNEL vf vabs(vf v) { return (vf)((vi)v & 0x7fffffff); }

/* IEEE binary16 from float32, round to nearest even (as GGML_FP32_TO_FP16 and torch). */
LANE_KERNEL uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000) return sign | 0x7c00 | (ax > 0x7f800000 ? 0x200 : 0);
    if (ax >= 0x477ff000) return sign | 0x7c00; /* 65520 and up round to infinity */
    if (ax < 0x38800000) {                      /* below 2^-14: a subnormal half or 0 */
        uint32_t exponent = ax >> 23;
        if (exponent < 102) return sign; /* below 2^-25: rounds to zero */
        uint32_t mantissa = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - exponent; /* value * 2^24 = mantissa * 2^-shift */
        uint32_t h = mantissa >> shift;
        uint32_t rem = mantissa & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return sign | (uint16_t)h;
    }
    uint32_t h = (ax - 0x38000000) >> 13; /* exponent rebiased 127 -> 15 */
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

LANE_KERNEL float fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    uint32_t bits;
    if (exponent == 0) {
        float v = (float)mantissa * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exponent == 31) bits = sign | 0x7f800000 | (mantissa << 13);
    else bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Load up to LANES sub-blocks of n values, transposed (t[i][lane] = sub-block lane's
 * element i); missing lanes are zero (a flat sub-block, never written back). Returns 0
 * when a value is not finite. */
LANE_KERNEL int load_lanes(const float *x, int n, int lanes, vf *t) {
    uint32_t all_exponents = 0;
    for (int i = 0; i < n; ++i) t[i] = vsplat(0.f);
    for (int k = 0; k < lanes; ++k) {
        for (int i = 0; i < n; ++i) {
            float v = x[k * n + i];
            uint32_t bits;
            memcpy(&bits, &v, sizeof bits);
            all_exponents |= ((bits >> 23) & 0xff) == 0xff;
            t[i][k] = v;
        }
    }
    return !all_exponents;
}

/* make_qkx2_quants(32, 15, x, weights = av_x + |x|, L, &the_min, Laux, -1.f, 0.1f, 20,
 * false) on LANES sub-blocks at once: scale, -min and the codes of each. */
LANE_KERNEL int q4_k_search(const float *x, int lanes, float *scale_out, float *neg_min_out,
                       uint8_t *codes_out) {
    vf xv[Q4_SUB], w[Q4_SUB], laux[Q4_SUB];
    if (!load_lanes(x, Q4_SUB, lanes, xv)) return STATUS_NONFINITE;

    vf sum_x2 = vsplat(0.f);
    for (int i = 0; i < Q4_SUB; ++i) sum_x2 += xv[i] * xv[i];
    vf mean = sum_x2 / 32.f, av_x;
    for (int k = 0; k < LANES; ++k) av_x[k] = sqrtf(mean[k]);
    for (int i = 0; i < Q4_SUB; ++i) w[i] = av_x + vabs(xv[i]);

    vf min = xv[0], max = xv[0], sum_w = w[0], sum_x = w[0] * xv[0];
    for (int i = 1; i < Q4_SUB; ++i) {
        min = vsel(xv[i] < min, xv[i], min);
        max = vsel(xv[i] > max, xv[i], max);
        sum_w += w[i];
        sum_x += w[i] * xv[i];
    }
    min = vsel(min > 0.f, vsplat(0.f), min);
    vi searching = ~(max == min);

    vf iscale = 15.f / (max - min);
    vf scale = 1.f / iscale;
    vf best_mad = vsplat(0.f);
    for (int i = 0; i < Q4_SUB; ++i) {
        vf l = vclamp_codes(vnearest_int(iscale * (xv[i] - min)), 0, 15);
        vf diff = scale * l + min - xv[i];
        diff = diff * diff;
        best_mad += w[i] * diff;
    }
    vf code_iscale = iscale, code_min = min; /* the codes are recomputed from these */
    for (int is = 0; is <= 20; ++is) {
        const float numerator = -1.f + 0.1f * (float)is + 15.f;
        iscale = numerator / (max - min);
        vf sum_l = vsplat(0.f), sum_l2 = vsplat(0.f), sum_xl = vsplat(0.f);
        for (int i = 0; i < Q4_SUB; ++i) {
            vf l = vclamp_codes(vnearest_int(iscale * (xv[i] - min)), 0, 15);
            laux[i] = l;
            vf wl = w[i] * l;
            sum_l += wl;
            sum_l2 += wl * l;
            sum_xl += wl * xv[i];
        }
        vf det = sum_w * sum_l2 - sum_l * sum_l;
        vf this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
        vf this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        vi positive = this_min > 0.f;
        this_min = vsel(positive, vsplat(0.f), this_min);
        this_scale = vsel(positive, sum_xl / sum_l2, this_scale);
        vf mad = vsplat(0.f);
        for (int i = 0; i < Q4_SUB; ++i) {
            vf diff = this_scale * laux[i] + this_min - xv[i];
            diff = diff * diff;
            mad += w[i] * diff;
        }
        vi better = (det > 0.f) & (mad < best_mad) & searching;
        best_mad = vsel(better, mad, best_mad);
        scale = vsel(better, this_scale, scale);
        code_iscale = vsel(better, iscale, code_iscale);
        code_min = vsel(better, min, code_min);
        min = vsel(better, this_min, min);
    }
    for (int i = 0; i < Q4_SUB; ++i) {
        vf l = vclamp_codes(vnearest_int(code_iscale * (xv[i] - code_min)), 0, 15);
        laux[i] = vsel(searching, l, vsplat(0.f));
    }
    scale = vsel(searching, scale, vsplat(0.f));
    for (int k = 0; k < lanes; ++k) {
        scale_out[k] = scale[k];
        neg_min_out[k] = -min[k];
        for (int i = 0; i < Q4_SUB; ++i) codes_out[k * Q4_SUB + i] = (uint8_t)laux[i][k];
    }
    return STATUS_OK;
}

/* make_qx_quants(16, 32, x, L, rmse_type = 1, NULL) on LANES sub-blocks at once: the
 * scale and the codes l + 32 of each (0 and zeros for an all-zero sub-block). */
LANE_KERNEL int q6_k_search(const float *x, int lanes, float *scale_out, uint8_t *codes_out) {
    vf xv[Q6_SUB], w[Q6_SUB], wx[Q6_SUB];
    if (!load_lanes(x, Q6_SUB, lanes, xv)) return STATUS_NONFINITE;
    vf amax = vsplat(0.f), max = vsplat(0.f);
    for (int i = 0; i < Q6_SUB; ++i) {
        vf ax = vabs(xv[i]);
        vi larger = ax > amax;
        amax = vsel(larger, ax, amax);
        max = vsel(larger, xv[i], max);
        w[i] = xv[i] * xv[i];
        wx[i] = w[i] * xv[i];
    }
    vi zero = amax < GROUP_MAX_EPS;

    vf iscale = -32.f / max;
    vf sumlx = vsplat(0.f), suml2 = vsplat(0.f);
    for (int i = 0; i < Q6_SUB; ++i) {
        vf l = vclamp_codes(vnearest_int(iscale * xv[i]), -32, 31);
        sumlx += wx[i] * l;
        suml2 += w[i] * l * l;
    }
    vf scale = vsel(suml2 != 0.f, sumlx / suml2, vsplat(0.f));
    vf best = scale * sumlx;
    vf code_iscale = iscale;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(32.f + 0.1f * (float)is) / max;
        sumlx = vsplat(0.f);
        suml2 = vsplat(0.f);
        for (int i = 0; i < Q6_SUB; ++i) {
            vf l = vclamp_codes(vnearest_int(iscale * xv[i]), -32, 31);
            sumlx += wx[i] * l;
            suml2 += w[i] * l * l;
        }
        vi better = (suml2 > 0.f) & (sumlx * sumlx > best * suml2);
        vf this_scale = sumlx / suml2;
        code_iscale = vsel(better, iscale, code_iscale);
        scale = vsel(better, this_scale, scale);
        best = vsel(better, this_scale * sumlx, best);
    }
    for (int k = 0; k < lanes; ++k) scale_out[k] = zero[k] ? 0.f : scale[k];
    for (int i = 0; i < Q6_SUB; ++i) {
        vf l = vclamp_codes(vnearest_int(code_iscale * xv[i]), -32, 31) + 32.f;
        l = vsel(zero, vsplat(0.f), l);
        for (int k = 0; k < lanes; ++k) codes_out[k * Q6_SUB + i] = (uint8_t)l[k];
    }
    return STATUS_OK;
}

/* Rows of row_len values (a multiple of the sub-block), each cut into super-blocks of
 * QK_K, the last one completed with all-zero sub-blocks. Output per super-block s:
 * d[s], dmin[s] (fp16 bits), ls/lm[s * 8 + j]; codes per value. */
ROW_KERNEL static int q4_k_rows(const float *x, Py_ssize_t n_rows, Py_ssize_t row_len, uint8_t *codes,
                     uint16_t *d_out, uint16_t *dmin_out, uint8_t *ls_out, uint8_t *lm_out) {
    const Py_ssize_t per_row = row_len / Q4_SUB, n_sub = n_rows * per_row;
    const Py_ssize_t supers = (per_row + 7) / 8;
    float *scales = malloc(sizeof(float) * 2 * (size_t)(n_sub > 0 ? n_sub : 1));
    if (!scales) return STATUS_NO_MEMORY;
    float *mins = scales + n_sub;
    int status = STATUS_OK;
    for (Py_ssize_t b = 0; b < n_sub && status == STATUS_OK; b += LANES) {
        int lanes = n_sub - b < LANES ? (int)(n_sub - b) : LANES;
        status = q4_k_search(x + b * Q4_SUB, lanes, scales + b, mins + b, codes + b * Q4_SUB);
    }
    for (Py_ssize_t r = 0; r < n_rows && status == STATUS_OK; ++r) {
        for (Py_ssize_t s = 0; s < supers; ++s) {
            const Py_ssize_t first = r * per_row + s * 8, out = r * supers + s;
            const int count = per_row - s * 8 < 8 ? (int)(per_row - s * 8) : 8;
            float max_scale = 0, max_min = 0;
            for (int j = 0; j < count; ++j) {
                if (scales[first + j] > max_scale) max_scale = scales[first + j];
                if (mins[first + j] > max_min) max_min = mins[first + j];
            }
            float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
            float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
            uint8_t *ls = ls_out + out * 8, *lm = lm_out + out * 8;
            for (int j = 0; j < 8; ++j) {
                ls[j] = lm[j] = 0;
                if (j >= count) continue;
                uint8_t l = (uint8_t)nearest_int(inv_scale * scales[first + j]);
                uint8_t m = (uint8_t)nearest_int(inv_min * mins[first + j]);
                ls[j] = l < 63 ? l : 63;
                lm[j] = m < 63 ? m : 63;
            }
            uint16_t d16 = fp32_to_fp16(max_scale / 63.f), dmin16 = fp32_to_fp16(max_min / 63.f);
            if ((d16 & 0x7c00) == 0x7c00 || (dmin16 & 0x7c00) == 0x7c00) {
                status = STATUS_FP16_OVERFLOW;
                break;
            }
            d_out[out] = d16;
            dmin_out[out] = dmin16;
            const float d_all = fp16_to_fp32(d16), dmin_all = fp16_to_fp32(dmin16);
            for (int j = 0; j < count; ++j) {
                const float d = d_all * (float)ls[j];
                if (!d) continue; /* keeps the codes of the search */
                const float dm = dmin_all * (float)lm[j];
                const float *xs = x + (first + j) * Q4_SUB;
                uint8_t *q = codes + (first + j) * Q4_SUB;
                for (int i = 0; i < Q4_SUB; ++i) {
                    int l = nearest_int((xs[i] + dm) / d);
                    q[i] = (uint8_t)(l < 0 ? 0 : l > 15 ? 15 : l);
                }
            }
        }
    }
    free(scales);
    return status;
}

ROW_KERNEL static int q6_k_rows(const float *x, Py_ssize_t n_rows, Py_ssize_t row_len, uint8_t *codes,
                     uint16_t *d_out, int8_t *sc_out) {
    const Py_ssize_t per_row = row_len / Q6_SUB, n_sub = n_rows * per_row;
    const Py_ssize_t supers = (per_row + 15) / 16;
    float *scales = malloc(sizeof(float) * (size_t)(n_sub > 0 ? n_sub : 1));
    if (!scales) return STATUS_NO_MEMORY;
    int status = STATUS_OK;
    for (Py_ssize_t b = 0; b < n_sub && status == STATUS_OK; b += LANES) {
        int lanes = n_sub - b < LANES ? (int)(n_sub - b) : LANES;
        status = q6_k_search(x + b * Q6_SUB, lanes, scales + b, codes + b * Q6_SUB);
    }
    for (Py_ssize_t r = 0; r < n_rows && status == STATUS_OK; ++r) {
        for (Py_ssize_t s = 0; s < supers; ++s) {
            const Py_ssize_t first = r * per_row + s * 16, out = r * supers + s;
            const int count = per_row - s * 16 < 16 ? (int)(per_row - s * 16) : 16;
            float max_scale = 0, max_abs_scale = 0;
            for (int j = 0; j < count; ++j) {
                const float abs_scale = fabsf(scales[first + j]);
                if (abs_scale > max_abs_scale) {
                    max_abs_scale = abs_scale;
                    max_scale = scales[first + j];
                }
            }
            int8_t *sc = sc_out + out * 16;
            if (max_abs_scale < GROUP_MAX_EPS) { /* memset(&y[i], 0, sizeof(block_q6_K)) */
                d_out[out] = 0;
                memset(sc, 0, 16);
                memset(codes + first * Q6_SUB, 0, (size_t)count * Q6_SUB);
                continue;
            }
            const float iscale = -128.f / max_scale;
            const uint16_t d16 = fp32_to_fp16(1 / iscale);
            if ((d16 & 0x7c00) == 0x7c00) {
                status = STATUS_FP16_OVERFLOW;
                break;
            }
            d_out[out] = d16;
            for (int j = 0; j < 16; ++j) {
                int l = j < count ? nearest_int(iscale * scales[first + j]) : 0;
                sc[j] = (int8_t)(l < 127 ? l : 127);
            }
            const float d_all = fp16_to_fp32(d16);
            for (int j = 0; j < count; ++j) {
                const float d = d_all * (float)sc[j];
                if (!d) continue; /* keeps the codes of the search */
                const float *xs = x + (first + j) * Q6_SUB;
                uint8_t *q = codes + (first + j) * Q6_SUB;
                for (int i = 0; i < Q6_SUB; ++i) {
                    int l = nearest_int(xs[i] / d);
                    q[i] = (uint8_t)((l < -32 ? -32 : l > 31 ? 31 : l) + 32);
                }
            }
        }
    }
    free(scales);
    return status;
}

/* --- Python bindings -------------------------------------------------------------------- */

static int check_buffer(Py_buffer *view, Py_ssize_t needed, const char *name) {
    if (view->len < needed) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, need %zd", name, view->len, needed);
        return 0;
    }
    return 1;
}

static int check_shape(Py_ssize_t n_rows, Py_ssize_t row_len, int sub) {
    if (n_rows < 0 || row_len <= 0 || row_len % sub != 0) {
        PyErr_Format(PyExc_ValueError, "rows of %zd values: need a positive multiple of %d",
                     row_len, sub);
        return 0;
    }
    return 1;
}

/* A kernel's status as the call's result: -1 means an exception is already set. */
static PyObject *call_result(int status) {
    if (status < 0) return NULL;
    if (status == STATUS_NO_MEMORY) return PyErr_NoMemory();
    return PyLong_FromLong(status);
}

static PyObject *py_q4_k(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer x, codes, d, dmin, ls, lm;
    Py_ssize_t n_rows, row_len;
    if (!PyArg_ParseTuple(args, "y*nnw*w*w*w*w*", &x, &n_rows, &row_len, &codes, &d, &dmin, &ls,
                          &lm))
        return NULL;
    int status = -1;
    if (check_shape(n_rows, row_len, Q4_SUB)) {
        const Py_ssize_t values = n_rows * row_len,
                         supers = n_rows * ((row_len / Q4_SUB + 7) / 8);
        if (check_buffer(&x, values * 4, "x") && check_buffer(&codes, values, "codes") &&
            check_buffer(&d, supers * 2, "d") && check_buffer(&dmin, supers * 2, "dmin") &&
            check_buffer(&ls, supers * 8, "ls") && check_buffer(&lm, supers * 8, "lm")) {
            Py_BEGIN_ALLOW_THREADS
            status = q4_k_rows(x.buf, n_rows, row_len, codes.buf, d.buf, dmin.buf, ls.buf, lm.buf);
            Py_END_ALLOW_THREADS
        }
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&d);
    PyBuffer_Release(&dmin);
    PyBuffer_Release(&ls);
    PyBuffer_Release(&lm);
    return call_result(status);
}

static PyObject *py_q6_k(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer x, codes, d, sc;
    Py_ssize_t n_rows, row_len;
    if (!PyArg_ParseTuple(args, "y*nnw*w*w*", &x, &n_rows, &row_len, &codes, &d, &sc)) return NULL;
    int status = -1;
    if (check_shape(n_rows, row_len, Q6_SUB)) {
        const Py_ssize_t values = n_rows * row_len,
                         supers = n_rows * ((row_len / Q6_SUB + 15) / 16);
        if (check_buffer(&x, values * 4, "x") && check_buffer(&codes, values, "codes") &&
            check_buffer(&d, supers * 2, "d") && check_buffer(&sc, supers * 16, "sc")) {
            Py_BEGIN_ALLOW_THREADS
            status = q6_k_rows(x.buf, n_rows, row_len, codes.buf, d.buf, sc.buf);
            Py_END_ALLOW_THREADS
        }
    }
    PyBuffer_Release(&x);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&d);
    PyBuffer_Release(&sc);
    return call_result(status);
}

static PyMethodDef methods[] = {
    {"q4_k", py_q4_k, METH_VARARGS,
     "q4_k(x, n_rows, row_len, codes, d, dmin, ls, lm) -> status\n"
     "Quantize n_rows rows of row_len float32 values (a multiple of 32) into the given\n"
     "buffers: codes (one byte per value), fp16 d and dmin per super-block, 8 sub-block\n"
     "scales and mins per super-block. Status 0: done; 1: a value is not finite; 2: an\n"
     "fp16 scale overflows (the buffers then hold partial results)."},
    {"q6_k", py_q6_k, METH_VARARGS,
     "q6_k(x, n_rows, row_len, codes, d, sc) -> status\n"
     "As q4_k for q6_k: rows a multiple of 16, codes l + 32, fp16 d and 16 int8\n"
     "sub-block scales per super-block."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kquants", "Native q4_k and q6_k quantizers (see _kquants.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kquants(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "OK", STATUS_OK) < 0 ||
              PyModule_AddIntConstant(m, "NONFINITE", STATUS_NONFINITE) < 0 ||
              PyModule_AddIntConstant(m, "FP16_OVERFLOW", STATUS_FP16_OVERFLOW) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
