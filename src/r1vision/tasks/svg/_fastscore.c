/* The SVG score's image filters in C (loaded by score.py, inside the render workers; see setup.py).
 *
 * Each function computes what score.py's numpy/scipy code computes, element for element and operation for
 * operation, in the same floating-point types (compiled without fused multiply-adds, see setup.py), so the
 * results are equal bit for bit; tests/tasks/svg/test_score.py holds each one equal to its numpy path on
 * random and rendered images. They are faster because each output is produced in one pass over memory that
 * stays in cache, where numpy makes a full-page pass (and a temporary) per tap and operation.
 *
 * - levels: score._levels (ink in grey levels from RGB uint8);
 * - blur_levels: score._blur's separable Gaussian of the inked box (float32 sums of mirrored pairs) of
 *   the ink as float32, read straight from the grey levels (score._blurred_ink);
 * - box: scipy.ndimage.uniform_filter(x, size) of a float32 image, 'reflect' border: scipy's running
 *   sums (since scipy 1.0) in double per line, axis 0 first, the float32 intermediate scipy's output is;
 * - ssim_map: score.score's SSIM arithmetic over those box filters, operation for operation in float32;
 * - edges: score._edges (ink steps to the right or downwards neighbour above a grey-level threshold);
 * - dilate: score._dilate, a square binary dilation clipped at the borders.
 *
 * Memory safety: every array arrives through the buffer protocol, C-contiguous, and its byte length is
 * checked against the dimensions passed with it before anything is read or written.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int check_len(Py_buffer *b, Py_ssize_t n, Py_ssize_t item, const char *name) {
    if (b->len != n * item) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", name, b->len, n * item);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(levels_doc, "levels(rgb, out, h, w, b0, b1, b2, dead): ink grey levels of RGB uint8 into int16 out.");

static inline uint8_t absdiff(uint8_t a, uint8_t b) { return a > b ? a - b : b - a; }

/* The kernels take their sizes by value: a size whose address went to PyArg_ParseTuple could, for the
 * compiler, be changed by any byte store, and then no loop over it is vectorised. */
static void levels_kernel(const uint8_t *restrict p, int16_t *restrict o, Py_ssize_t h, Py_ssize_t w, uint8_t b0,
                          uint8_t b1, uint8_t b2, uint8_t dead) {
    /* in bytes (|a - b| of two bytes is a byte); the stride-3 reads keep this loop scalar */
    for (Py_ssize_t i = 0; i < h * w; i++) {
        uint8_t a = absdiff(p[3 * i], b0), b = absdiff(p[3 * i + 1], b1), c = absdiff(p[3 * i + 2], b2);
        uint8_t m = a > b ? a : b;
        m = m > c ? m : c;
        o[i] = (int16_t)(m > dead ? m - dead : 0);
    }
    /* the outer pixel ring is never ink (score._levels) */
    memset(o, 0, (size_t)w * sizeof(int16_t));
    memset(o + (h - 1) * w, 0, (size_t)w * sizeof(int16_t));
    for (Py_ssize_t y = 0; y < h; y++) o[y * w] = o[y * w + w - 1] = 0;
}

static PyObject *levels(PyObject *self, PyObject *args) {
    Py_buffer in, out;
    Py_ssize_t h, w;
    int b0, b1, b2, dead;
    if (!PyArg_ParseTuple(args, "y*w*nniiii:levels", &in, &out, &h, &w, &b0, &b1, &b2, &dead)) return NULL;
    PyObject *result = NULL;
    if (h < 1 || w < 1 || !check_len(&in, h * w, 3, "rgb") || !check_len(&out, h * w, 2, "out")) goto done;
    if (b0 < 0 || b0 > 255 || b1 < 0 || b1 > 255 || b2 < 0 || b2 > 255 || dead < 0 || dead > 255) {
        PyErr_SetString(PyExc_ValueError, "levels: background and dead zone must be grey levels (0-255)");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    levels_kernel(in.buf, out.buf, h, w, (uint8_t)b0, (uint8_t)b1, (uint8_t)b2, (uint8_t)dead);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result;
}

/* The reflected index of j in [0, n) ('reflect': d c b a | a b c d); |excess| <= n. */
static inline Py_ssize_t reflect(Py_ssize_t j, Py_ssize_t n) {
    if (j < 0) return -j - 1;
    if (j >= n) return 2 * n - 1 - j;
    return j;
}

/* The separable blur of an n x m box: x (row stride xs) into o (row stride os), rows then columns, each
 * output x*k0 plus, tap by tap, (forward + backward) * k[i] in float32, reflect border at the box's edges
 * (score._mirror_sums twice). tmp holds n x m floats. */
static void blur_kernel(const float *restrict x, Py_ssize_t xs, float *restrict o, Py_ssize_t os, Py_ssize_t n,
                        Py_ssize_t m, const float *restrict k, Py_ssize_t r, float *restrict tmp) {
    for (Py_ssize_t j = 0; j < n; j++) {
        float *restrict t = tmp + j * m;
        const float *row = x + j * xs;
        for (Py_ssize_t c = 0; c < m; c++) t[c] = row[c] * k[0];
        for (Py_ssize_t i = 1; i <= r; i++) {
            const float *a = x + reflect(j + i, n) * xs, *b = x + reflect(j - i, n) * xs;
            const float ki = k[i];
            for (Py_ssize_t c = 0; c < m; c++) {
                float s = a[c] + b[c];
                s = s * ki;
                t[c] = t[c] + s;
            }
        }
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        const float *restrict t = tmp + j * m;
        float *restrict dst = o + j * os;
        for (Py_ssize_t c = 0; c < m; c++) dst[c] = t[c] * k[0];
        for (Py_ssize_t i = 1; i <= r; i++) {
            const float ki = k[i];
            Py_ssize_t lo = i < m ? i : m, hi = m - i > lo ? m - i : lo; /* c - i >= 0 from lo, c + i < m below hi */
            for (Py_ssize_t c = 0; c < lo; c++) {
                float s = t[reflect(c + i, m)] + t[reflect(c - i, m)];
                s = s * ki;
                dst[c] = dst[c] + s;
            }
            for (Py_ssize_t c = lo; c < hi; c++) {
                float s = t[c + i] + t[c - i];
                s = s * ki;
                dst[c] = dst[c] + s;
            }
            for (Py_ssize_t c = hi; c < m; c++) {
                float s = t[reflect(c + i, m)] + t[reflect(c - i, m)];
                s = s * ki;
                dst[c] = dst[c] + s;
            }
        }
    }
}

PyDoc_STRVAR(blur_levels_doc,
             "blur_levels(levels, out, h, w, k, scale): blur(levels * scale as float32) over the inked box "
             "(nonzero levels) and len(k) - 1 pixels around it, into zeroed out; score._blur(_as_float(levels)).");

static PyObject *blur_levels(PyObject *self, PyObject *args) {
    Py_buffer in, out, kb;
    Py_ssize_t h, w, r;
    float scale;
    if (!PyArg_ParseTuple(args, "y*w*nny*f:blur_levels", &in, &out, &h, &w, &kb, &scale)) return NULL;
    PyObject *result = NULL;
    float *buf = NULL;
    if (h < 1 || w < 1 || !check_len(&in, h * w, 2, "levels") || !check_len(&out, h * w, 4, "out")) goto done;
    if (kb.len % (Py_ssize_t)sizeof(float) || kb.len < (Py_ssize_t)sizeof(float)) {
        PyErr_SetString(PyExc_ValueError, "blur_levels: the taps must be float32, at least one");
        goto done;
    }
    r = kb.len / (Py_ssize_t)sizeof(float) - 1;
    if (h <= 2 * r + 1 || w <= 2 * r + 1) {
        PyErr_SetString(PyExc_ValueError, "blur_levels: the image must be wider than the kernel");
        goto done;
    }
    const int16_t *l = in.buf;
    Py_ssize_t top = h, bottom = -1, left = w, right = -1;
    for (Py_ssize_t y = 0; y < h; y++) {
        const int16_t *row = l + y * w;
        Py_ssize_t x0 = 0, x1 = w - 1;
        while (x0 < w && row[x0] == 0) x0++;
        if (x0 == w) continue;
        while (row[x1] == 0) x1--;
        top = top < y ? top : y;
        bottom = y;
        left = left < x0 ? left : x0;
        right = right > x1 ? right : x1;
    }
    if (bottom < 0) { /* no ink: the blur is zero */
        result = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t r0 = top - r > 0 ? top - r : 0, r1 = bottom + r + 1 < h ? bottom + r + 1 : h;
    Py_ssize_t c0 = left - r > 0 ? left - r : 0, c1 = right + r + 1 < w ? right + r + 1 : w;
    Py_ssize_t n = r1 - r0, m = c1 - c0;
    if (!(buf = malloc((size_t)2 * n * m * sizeof(float)))) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    float *restrict x = buf;
    for (Py_ssize_t j = 0; j < n; j++) /* what _as_float gives: float32(level) * float32(1/255) */
        for (Py_ssize_t c = 0; c < m; c++) x[j * m + c] = (float)l[(r0 + j) * w + c0 + c] * scale;
    blur_kernel(x, m, (float *)out.buf + r0 * w + c0, w, n, m, kb.buf, r, buf + n * m);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    free(buf);
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    PyBuffer_Release(&kb);
    return result;
}

PyDoc_STRVAR(box_doc, "box(x, out, h, w, size): scipy.ndimage.uniform_filter(x, size) of float32 x, into out.");

/* One uniform_filter1d pass along axis 0 of src (h x w) into dst, as scipy computes each column: the sum of
 * the first `size` values of the extended line in order, then a running update by (entering - leaving),
 * each output that sum / size rounded to float32. Columns are independent, so they advance
 * together (one row at a time) and the sums live in `acc`. */
static void box_axis0(const float *src, float *dst, Py_ssize_t h, Py_ssize_t w, Py_ssize_t size, double *acc) {
    const Py_ssize_t s1 = size / 2;
    const double fs = (double)size;
    for (Py_ssize_t c = 0; c < w; c++) acc[c] = 0.0;
    for (Py_ssize_t l = 0; l < size; l++) {
        const float *row = src + reflect(l - s1, h) * w;
        for (Py_ssize_t c = 0; c < w; c++) acc[c] += (double)row[c];
    }
    for (Py_ssize_t c = 0; c < w; c++) dst[c] = (float)(acc[c] / fs);
    for (Py_ssize_t y = 1; y < h; y++) {
        const float *in_row = src + reflect(y + size - 1 - s1, h) * w;
        const float *out_row = src + reflect(y - 1 - s1, h) * w;
        float *d = dst + y * w;
        for (Py_ssize_t c = 0; c < w; c++) {
            acc[c] += (double)in_row[c] - (double)out_row[c];
            d[c] = (float)(acc[c] / fs);
        }
    }
}

/* The same pass along axis 1: one line per row, the extended line read through reflect(). */
static void box_axis1(const float *src, float *dst, Py_ssize_t h, Py_ssize_t w, Py_ssize_t size) {
    const Py_ssize_t s1 = size / 2;
    const double fs = (double)size;
    for (Py_ssize_t y = 0; y < h; y++) {
        const float *line = src + y * w;
        float *d = dst + y * w;
        double acc = 0.0;
        for (Py_ssize_t l = 0; l < size; l++) acc += (double)line[reflect(l - s1, w)];
        d[0] = (float)(acc / fs);
        for (Py_ssize_t x = 1; x < w; x++) {
            Py_ssize_t a = x + size - 1 - s1, b = x - 1 - s1;
            double fa = (double)line[a < w ? a : reflect(a, w)], fb = (double)line[b >= 0 ? b : reflect(b, w)];
            acc += fa - fb;
            d[x] = (float)(acc / fs);
        }
    }
}

/* A size-wide window reflects at most once at each border (what box_axis0/1 assume). */
static int window_fits(Py_ssize_t h, Py_ssize_t w, Py_ssize_t size, const char *name) {
    if (size < 1 || size / 2 > h || size / 2 > w || size - size / 2 - 1 > h || size - size / 2 - 1 > w) {
        PyErr_Format(PyExc_ValueError, "%s: window larger than the image", name);
        return 0;
    }
    return 1;
}

static PyObject *box(PyObject *self, PyObject *args) {
    Py_buffer in, out;
    Py_ssize_t h, w, size;
    if (!PyArg_ParseTuple(args, "y*w*nnn:box", &in, &out, &h, &w, &size)) return NULL;
    PyObject *result = NULL;
    float *mid = NULL;
    double *acc = NULL;
    if (h < 1 || w < 1 || !check_len(&in, h * w, 4, "x") || !check_len(&out, h * w, 4, "out")) goto done;
    if (!window_fits(h, w, size, "box")) goto done;
    mid = malloc((size_t)h * w * sizeof(float));
    acc = malloc((size_t)w * sizeof(double));
    if (!mid || !acc) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    box_axis0(in.buf, mid, h, w, size, acc);
    box_axis1(mid, out.buf, h, w, size);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    free(mid);
    free(acc);
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result;
}

PyDoc_STRVAR(ssim_map_doc,
             "ssim_map(gt_small, gt_mean, gt_var, small, ratio, var_b, h, w, size, c1, c2): score.score's SSIM "
             "ratio per pixel (num / den, float32) and the prediction's local variance, for the 7x7 window.");

/* score.score's SSIM arithmetic, each operation in float32 in numpy's order (x * x, the box filters, the
 * moments, num and den); one pass per pixel instead of a page-sized temporary per operation. */
static void ssim_kernel(const float *restrict gs, const float *restrict gm, const float *restrict gv,
                        const float *restrict x, float *restrict ratio, float *restrict var_b, Py_ssize_t h,
                        Py_ssize_t w, Py_ssize_t size, float c1, float c2, float *restrict mean_b,
                        float *restrict prod, float *restrict mid, double *restrict acc) {
    const Py_ssize_t n = h * w;
    box_axis0(x, mid, h, w, size, acc);
    box_axis1(mid, mean_b, h, w, size);
    for (Py_ssize_t i = 0; i < n; i++) prod[i] = x[i] * x[i];
    box_axis0(prod, mid, h, w, size, acc);
    box_axis1(mid, var_b, h, w, size);
    for (Py_ssize_t i = 0; i < n; i++) var_b[i] = var_b[i] - mean_b[i] * mean_b[i];
    for (Py_ssize_t i = 0; i < n; i++) prod[i] = gs[i] * x[i];
    box_axis0(prod, mid, h, w, size, acc);
    box_axis1(mid, ratio, h, w, size); /* the local mean of gt * pred, for now */
    for (Py_ssize_t i = 0; i < n; i++) {
        float cov = ratio[i] - gm[i] * mean_b[i];
        float num = 2.0f * gm[i];
        num = num * mean_b[i];
        num = num + c1;
        float t = 2.0f * cov;
        t = t + c2;
        num = num * t;
        float den = gm[i] * gm[i];
        den = den + mean_b[i] * mean_b[i];
        den = den + c1;
        float v = gv[i] + var_b[i];
        v = v + c2;
        den = den * v;
        ratio[i] = num / den;
    }
}

static PyObject *ssim_map(PyObject *self, PyObject *args) {
    Py_buffer gs, gm, gv, x, ratio, var_b;
    Py_ssize_t h, w, size;
    float c1, c2;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*nnnff:ssim_map", &gs, &gm, &gv, &x, &ratio, &var_b, &h, &w, &size,
                          &c1, &c2))
        return NULL;
    PyObject *result = NULL;
    float *work = NULL;
    double *acc = NULL;
    if (h < 1 || w < 1 || !check_len(&gs, h * w, 4, "gt_small") || !check_len(&gm, h * w, 4, "gt_mean") ||
        !check_len(&gv, h * w, 4, "gt_var") || !check_len(&x, h * w, 4, "small") ||
        !check_len(&ratio, h * w, 4, "ratio") || !check_len(&var_b, h * w, 4, "var_b"))
        goto done;
    if (!window_fits(h, w, size, "ssim_map")) goto done;
    work = malloc((size_t)3 * h * w * sizeof(float));
    acc = malloc((size_t)w * sizeof(double));
    if (!work || !acc) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    ssim_kernel(gs.buf, gm.buf, gv.buf, x.buf, ratio.buf, var_b.buf, h, w, size, c1, c2, work, work + h * w,
                work + 2 * h * w, acc);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    free(work);
    free(acc);
    PyBuffer_Release(&gs);
    PyBuffer_Release(&gm);
    PyBuffer_Release(&gv);
    PyBuffer_Release(&x);
    PyBuffer_Release(&ratio);
    PyBuffer_Release(&var_b);
    return result;
}

PyDoc_STRVAR(edges_doc, "edges(levels, out, h, w, t): bool out, where int16 levels (0-255) step by more than t to "
                        "the right or downwards neighbour.");

static void edges_kernel(const int16_t *restrict l, uint8_t *restrict o, Py_ssize_t h, Py_ssize_t w, int16_t t) {
    for (Py_ssize_t y = 0; y < h; y++) {
        const int16_t *restrict row = l + y * w;
        uint8_t *restrict d = o + y * w;
        /* levels are 0-255, so the steps fit int16: 8 pixels per vector */
        for (Py_ssize_t x = 0; x + 1 < w; x++) {
            int16_t s = (int16_t)(row[x + 1] - row[x]);
            d[x] = (s > t) | (s < -t);
        }
        d[w - 1] = 0;
        if (y + 1 < h) {
            const int16_t *restrict below = row + w;
            for (Py_ssize_t x = 0; x < w; x++) {
                int16_t s = (int16_t)(below[x] - row[x]);
                d[x] |= (s > t) | (s < -t);
            }
        }
    }
}

static PyObject *edges(PyObject *self, PyObject *args) {
    Py_buffer in, out;
    Py_ssize_t h, w;
    int t;
    if (!PyArg_ParseTuple(args, "y*w*nni:edges", &in, &out, &h, &w, &t)) return NULL;
    PyObject *result = NULL;
    if (h < 1 || w < 1 || !check_len(&in, h * w, 2, "levels") || !check_len(&out, h * w, 1, "out")) goto done;
    if (t < 0 || t > 255) {
        PyErr_SetString(PyExc_ValueError, "edges: the threshold must be a grey level (0-255)");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    edges_kernel(in.buf, out.buf, h, w, (int16_t)t);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result;
}

PyDoc_STRVAR(dilate_doc, "dilate(mask, out, h, w, radius): a (2 radius + 1) square binary dilation of bool mask.");

static void dilate_kernel(const uint8_t *restrict m, uint8_t *restrict rows, uint8_t *restrict o, Py_ssize_t h,
                          Py_ssize_t w, Py_ssize_t radius) {
    /* along axis 0: OR of the rows within radius */
    for (Py_ssize_t y = 0; y < h; y++) {
        Py_ssize_t lo = y - radius > 0 ? y - radius : 0, hi = y + radius < h - 1 ? y + radius : h - 1;
        uint8_t *restrict d = rows + y * w;
        memcpy(d, m + lo * w, (size_t)w);
        for (Py_ssize_t yy = lo + 1; yy <= hi; yy++) {
            const uint8_t *restrict s = m + yy * w;
            for (Py_ssize_t x = 0; x < w; x++) d[x] |= s[x];
        }
    }
    /* along axis 1 */
    for (Py_ssize_t y = 0; y < h; y++) {
        const uint8_t *restrict s = rows + y * w;
        uint8_t *restrict d = o + y * w;
        memcpy(d, s, (size_t)w);
        for (Py_ssize_t k = 1; k <= radius && k < w; k++) {
            for (Py_ssize_t x = k; x < w; x++) d[x] |= s[x - k];
            for (Py_ssize_t x = 0; x + k < w; x++) d[x] |= s[x + k];
        }
    }
}

static PyObject *dilate(PyObject *self, PyObject *args) {
    Py_buffer in, out;
    Py_ssize_t h, w, radius;
    if (!PyArg_ParseTuple(args, "y*w*nnn:dilate", &in, &out, &h, &w, &radius)) return NULL;
    PyObject *result = NULL;
    uint8_t *rows = NULL;
    if (h < 1 || w < 1 || radius < 0 || !check_len(&in, h * w, 1, "mask") || !check_len(&out, h * w, 1, "out"))
        goto done;
    rows = malloc((size_t)h * w);
    if (!rows) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    dilate_kernel(in.buf, rows, out.buf, h, w, radius);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    free(rows);
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"levels", levels, METH_VARARGS, levels_doc},
    {"blur_levels", blur_levels, METH_VARARGS, blur_levels_doc},
    {"box", box, METH_VARARGS, box_doc},
    {"ssim_map", ssim_map, METH_VARARGS, ssim_map_doc},
    {"edges", edges, METH_VARARGS, edges_doc},
    {"dilate", dilate, METH_VARARGS, dilate_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastscore", "The SVG score's image filters in C (see score.py and the C source).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastscore(void) { return PyModule_Create(&module); }
