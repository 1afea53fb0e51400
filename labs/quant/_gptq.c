/*
 * labs.quant._gptq: GPTQ's column loop (labs/quant/gptq.py, ``gptq``) for CPU tensors.
 *
 * Why a native kernel: within a block of columns GPTQ is sequential, column after
 * column: round the column to its grid, then subtract its error, weighted by a row of
 * the inverse Hessian's Cholesky factor, from every column after it in the block. Each
 * column is ~10 tiny torch ops, so the loop's cost is their dispatch (60-100 us a column
 * measured here, with the interpreter lock held between ops): 0.4 of the 2.5 s of a
 * quant-algorithms run. Here a column is one pass over its out values with no lock held,
 * so the sets a layer gives the chunk threads (labs.quant.parallel) run side by side.
 *
 * Bit for bit the torch loop's numbers: the same float32 operations on the same values,
 * each rounded separately (built with -ffp-contract=off, so the update's product and
 * subtraction never fuse into an FMA, as torch's outer product then ``sub_`` do not),
 * round half to even (nearbyintf, torch.round's rounding), clamp and bucketize with the
 * comparisons torch makes (NaN goes through as it does there). The group grids, the
 * lazy batch update of the columns after the block and the loss stay in torch; the
 * tests compare both loops on every format.
 *
 * Layout, as gptq.py keeps it: the block's weights transposed, ``w [k, out]`` (a column
 * of W is a contiguous row), ``hinv [k, k]`` the block's part of the upper Cholesky
 * factor of H^-1, and per column the grid's scale, offset and 1/scale, each [k, out].
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>

/* How a column is rounded (gptq.py picks it from the format's element table). */
enum {
    ROUND_SYMMETRIC = 0, /* elements are consecutive integers, no offset: w/s rounded */
    ROUND_SHIFTED = 1,   /* consecutive integers with offsets: (w - o)/s rounded */
    ROUND_TABLE = 2,     /* any sorted table: the nearest element, ties to the lower */
};

/* torch.bucketize(u, table) (right=False): the first index whose element is >= u, with
 * torch's comparison (a NaN u runs to the end). */
static Py_ssize_t bucketize(float u, const float *table, Py_ssize_t n) {
    Py_ssize_t start = 0, end = n;
    while (start < end) {
        const Py_ssize_t mid = start + ((end - start) >> 1);
        if (!(table[mid] >= u))
            start = mid + 1;
        else
            end = mid;
    }
    return start;
}

/* gptq.py's round_to_grid for one value. */
static float nearest_in_table(float w, float s, float o, const float *table, Py_ssize_t n) {
    const float safe = s == 0.0f ? 1.0f : s;
    const float u = (w - o) / safe;
    Py_ssize_t idx = bucketize(u, table, n);
    idx = idx < 1 ? 1 : (idx > n - 1 ? n - 1 : idx);
    const float lo = table[idx - 1], hi = table[idx];
    const float e = (u - lo) <= (hi - u) ? lo : hi;
    if (s == 0.0f) return o;
    const float scaled = e * s;
    return scaled + o;
}

static float clamp(float v, float lo, float hi) {
    /* torch's clamp: max with lo, then min with hi; a NaN stays NaN. */
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return v;
}

/* Columns a..b-1 of the block: quantize column i into q[i], its scaled error into e[i],
 * then w[j] -= hinv[i, j] * e[i] for every j >= i. */
static void columns(float *w, float *q, float *e, const float *hinv, Py_ssize_t k,
                    Py_ssize_t out, Py_ssize_t a, Py_ssize_t b, const float *scale,
                    const float *offset, const float *inv, int mode, float lo, float hi,
                    const float *table, Py_ssize_t n_table) {
    for (Py_ssize_t i = a; i < b; i++) {
        const float *wc = w + i * out, *sc = scale + i * out, *oc = offset + i * out,
                    *ic = inv + i * out;
        float *qc = q + i * out, *ec = e + i * out;
        const float d = hinv[i * k + i];
        for (Py_ssize_t r = 0; r < out; r++) {
            float v;
            if (mode == ROUND_SYMMETRIC) {
                v = wc[r] * ic[r];
                v = clamp(nearbyintf(v), lo, hi);
                v = v * sc[r];
            } else if (mode == ROUND_SHIFTED) {
                v = wc[r] - oc[r];
                v = v * ic[r];
                v = clamp(nearbyintf(v), lo, hi);
                v = v * sc[r];
                v = v + oc[r];
            } else {
                v = nearest_in_table(wc[r], sc[r], oc[r], table, n_table);
            }
            qc[r] = v;
            const float diff = wc[r] - v;
            ec[r] = diff / d;
        }
        for (Py_ssize_t j = i; j < k; j++) {
            const float h = hinv[i * k + j];
            float *wj = w + j * out;
            for (Py_ssize_t r = 0; r < out; r++) {
                const float step = h * ec[r];
                wj[r] = wj[r] - step;
            }
        }
    }
}

static int check_buffer(const Py_buffer *b, Py_ssize_t floats, const char *name) {
    if (b->len != floats * (Py_ssize_t)sizeof(float)) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", name, b->len,
                     floats * (Py_ssize_t)sizeof(float));
        return 0;
    }
    return 1;
}

static PyObject *py_columns(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer w, q, e, hinv, scale, offset, inv, table;
    Py_ssize_t k, out, a, b;
    int mode;
    float lo, hi;
    if (!PyArg_ParseTuple(args, "w*w*w*y*nnnny*y*y*iffy*", &w, &q, &e, &hinv, &k, &out, &a, &b,
                          &scale, &offset, &inv, &mode, &lo, &hi, &table))
        return NULL;
    int ok = 0;
    const Py_ssize_t n_table = table.len / (Py_ssize_t)sizeof(float);
    if (k < 0 || out < 0 || a < 0 || b > k || a > b) {
        PyErr_SetString(PyExc_ValueError, "columns: need 0 <= a <= b <= k and out >= 0");
    } else if (mode < ROUND_SYMMETRIC || mode > ROUND_TABLE) {
        PyErr_Format(PyExc_ValueError, "columns: unknown rounding mode %d", mode);
    } else if (mode == ROUND_TABLE && n_table < 2) {
        PyErr_SetString(PyExc_ValueError, "columns: the table needs at least 2 elements");
    } else if (check_buffer(&w, k * out, "w") && check_buffer(&q, k * out, "q") &&
               check_buffer(&e, k * out, "e") && check_buffer(&hinv, k * k, "hinv") &&
               check_buffer(&scale, k * out, "scale") &&
               check_buffer(&offset, k * out, "offset") && check_buffer(&inv, k * out, "inv")) {
        Py_BEGIN_ALLOW_THREADS
        columns(w.buf, q.buf, e.buf, hinv.buf, k, out, a, b, scale.buf, offset.buf, inv.buf,
                mode, lo, hi, table.buf, n_table);
        Py_END_ALLOW_THREADS
        ok = 1;
    }
    PyBuffer_Release(&w);
    PyBuffer_Release(&q);
    PyBuffer_Release(&e);
    PyBuffer_Release(&hinv);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&offset);
    PyBuffer_Release(&inv);
    PyBuffer_Release(&table);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"columns", py_columns, METH_VARARGS,
     "columns(w, q, e, hinv, k, out, a, b, scale, offset, inv, mode, lo, hi, table)\n"
     "GPTQ's loop over columns a..b-1 of a block, in place: w, q, e [k, out] float32\n"
     "(weights, quantized, scaled errors; a column of W is a row), hinv [k, k], the grid's\n"
     "scale, offset and 1/scale [k, out]; mode 0: symmetric integers clamped to [lo, hi],\n"
     "1: integers with offsets, 2: nearest element of the sorted float32 table."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_gptq", "GPTQ's column loop (see _gptq.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__gptq(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "SYMMETRIC", ROUND_SYMMETRIC) < 0 ||
              PyModule_AddIntConstant(m, "SHIFTED", ROUND_SHIFTED) < 0 ||
              PyModule_AddIntConstant(m, "TABLE", ROUND_TABLE) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
