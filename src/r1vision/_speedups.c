/* r1vision's compiled helpers, for the SGG rewards' hot loops (loaded through r1vision/compiled.py).
 *
 * scan_answer / scan_truth: the Python builders (parse._build_graph for model answers, matching.gt_graph
 * for ground truth) spend ~1 us of interpreter time per object and relation. These walk the same decoded
 * lists in C, but only accept the clean shape: when anything is unusual (a type, a key, whitespace to
 * strip, a duplicate id, an unknown id, a non-finite or inverted box, an integer beyond float range),
 * they return None and the caller runs its Python builder, which decides and reports the problem. So a
 * result, when there is one, is what the Python builder returns for that input.
 *
 * pair_geometry: batch._pair_geometry's numpy arithmetic for every (predicted, GT) pair in one loop,
 * operation for operation (compiled without fused multiply-adds, see setup.py), so values are equal.
 *
 * relation_hits: batch_relations' join of predicted and GT relations, row by row, with the same sums.
 *
 * has_long_digit_run: fastjson's test for integer literals orjson would turn into floats.
 *
 * The tests hold every function equal to its Python counterpart on clean, mutated and random inputs.
 * Memory safety: inputs are Python objects read through the C API with exact type checks before every
 * access, and buffers whose sizes are checked against each other; nothing here parses text.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <string.h>

static PyObject *k_id, *k_bbox, *k_box, *k_subject, *k_predicate, *k_object;

/* 1: a non-empty str whose first and last characters are not whitespace (str.strip() leaves it as is). */
static int clean_str(PyObject *s) {
    if (!PyUnicode_CheckExact(s)) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    if (n == 0) return 0;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    return !Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, 0)) &&
           !Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, n - 1));
}

/* A list of 4 exact ints/floats as doubles: 1 ok, 0 not clean, -1 error. ``checked``: also finite and
 * not inverted (x1 <= x2, y1 <= y2), as the answer parser requires. */
static int read_box(PyObject *box, double out[4], int checked) {
    if (box == NULL || !PyList_CheckExact(box) || PyList_GET_SIZE(box) != 4) return 0;
    for (Py_ssize_t i = 0; i < 4; i++) {
        PyObject *v = PyList_GET_ITEM(box, i);
        if (PyFloat_CheckExact(v)) {
            out[i] = PyFloat_AS_DOUBLE(v);
        } else if (PyLong_CheckExact(v)) {
            out[i] = PyLong_AsDouble(v); /* what float(int) does */
            if (out[i] == -1.0 && PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
                PyErr_Clear();
                return 0;
            }
        } else {
            return 0; /* bool, str, None, ...: the Python builder names the problem */
        }
    }
    if (checked) {
        for (int i = 0; i < 4; i++)
            if (!isfinite(out[i])) return 0;
        if (out[0] > out[2] || out[1] > out[3]) return 0;
    }
    return 1;
}

/* dict[key] as a borrowed reference; NULL with no error set when absent. */
static PyObject *get(PyObject *d, PyObject *key) { return PyDict_GetItemWithError(d, key); }

/* Floats for the integer coordinates models write most (0..4095): shared, immutable, never allocated per
 * box. A reward call otherwise allocates four floats per object of every answer it parses. */
#define SMALL_FLOATS 4096
static PyObject *small_float[SMALL_FLOATS];

/* The box tuple of ``float(x)`` for the four numbers of ``src`` (their values in ``v``): an exact float is
 * itself (as float(x) returns it), an integer's float is shared when small. */
static PyObject *float_tuple(PyObject *src, const double v[4]) {
    PyObject *t = PyTuple_New(4);
    if (t == NULL) return NULL;
    for (int i = 0; i < 4; i++) {
        PyObject *item = PyList_GET_ITEM(src, i), *f;
        if (PyFloat_CheckExact(item))
            f = Py_NewRef(item);
        else if (v[i] >= 0 && v[i] < SMALL_FLOATS) /* an int here, so v[i] is integral */
            f = Py_NewRef(small_float[(int)v[i]]);
        else
            f = PyFloat_FromDouble(v[i]);
        if (f == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, f);
    }
    PyObject_GC_UnTrack(t); /* floats only: no cycle can pass through it (see new_triple) */
    return t;
}

/* An instance of a tuple subclass (a NamedTuple without __dict__) from 3 new references, as
 * tuple.__new__(cls, items). Its items are strs and tuples of floats, which cannot reach it back, so it
 * is untracked by the cyclic GC, as CPython untracks plain tuples of such items: a reward call builds
 * thousands of them, and tracked ones would make every young-generation collection walk them. */
static PyObject *new_triple(PyTypeObject *cls, PyObject *a, PyObject *b, PyObject *c) {
    PyObject *t = cls->tp_alloc(cls, 3);
    if (t == NULL) {
        Py_DECREF(a);
        Py_DECREF(b);
        Py_DECREF(c);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, a);
    PyTuple_SET_ITEM(t, 1, b);
    PyTuple_SET_ITEM(t, 2, c);
    if (PyObject_GC_IsTracked(t)) PyObject_GC_UnTrack(t);
    return t;
}

/* The subject, predicate and object of a clean relation (borrowed): 1, or 0 / -1 (error). ``answer``:
 * the parser's rule (non-empty strs that need no stripping), else any strs (the ground truth's). */
static int read_relation(PyObject *raw, int answer, PyObject **s, PyObject **p, PyObject **o) {
    if (!PyDict_CheckExact(raw)) return 0;
    *s = get(raw, k_subject);
    if (*s == NULL) return PyErr_Occurred() ? -1 : 0;
    *p = get(raw, k_predicate);
    if (*p == NULL) return PyErr_Occurred() ? -1 : 0;
    *o = get(raw, k_object);
    if (*o == NULL) return PyErr_Occurred() ? -1 : 0;
    if (!answer)
        return PyUnicode_CheckExact(*s) && PyUnicode_CheckExact(*p) && PyUnicode_CheckExact(*o);
    return clean_str(*s) && clean_str(*p) && clean_str(*o);
}

/* Index of ``key`` in ``index`` (id -> int) or -1 when absent; -2 on error. */
static Py_ssize_t index_of(PyObject *index, PyObject *key) {
    PyObject *v = get(index, key);
    if (v == NULL) return PyErr_Occurred() ? -2 : -1;
    return PyLong_AsSsize_t(v);
}

/* One object of a decoded list: checks it, reads its box into ``box`` and records id -> ``i`` in
 * ``index``. ``answer``: the answer parser's rules (ids need no stripping; "bbox", else "box"; boxes finite
 * and not inverted), else the ground truth's ("bbox" only, any float values). Repeated ids are never clean.
 * Returns 1 (clean; ``*id_out`` and the box list ``*box_out`` borrowed), 0 (not clean) or -1 (error). */
static int read_object(PyObject *raw, Py_ssize_t i, PyObject *index, int answer, double box[4],
                       PyObject **id_out, PyObject **box_out) {
    if (!PyDict_CheckExact(raw)) return 0;
    PyObject *id = get(raw, k_id);
    if (id == NULL) return PyErr_Occurred() ? -1 : 0;
    if (answer ? !clean_str(id) : !PyUnicode_CheckExact(id)) return 0;
    PyObject *raw_box = get(raw, k_bbox);
    if (raw_box == NULL && PyErr_Occurred()) return -1;
    if (raw_box == NULL && answer) {
        raw_box = get(raw, k_box);
        if (raw_box == NULL && PyErr_Occurred()) return -1;
    }
    int ok = read_box(raw_box, box, answer);
    if (ok <= 0) return ok;
    int dup = PyDict_Contains(index, id);
    if (dup != 0) return dup < 0 ? -1 : 0;
    PyObject *pos = PyLong_FromSsize_t(i);
    if (pos == NULL) return -1;
    int err = PyDict_SetItem(index, id, pos);
    Py_DECREF(pos);
    if (err < 0) return -1;
    *id_out = id;
    *box_out = raw_box;
    return 1;
}

PyDoc_STRVAR(scan_answer_doc,
"scan_answer(objects, relations, object_type, relation_type, name_of) -> tuple | None\n\n"
"The objects and relations of a clean decoded answer, as parse._build_graph builds them:\n"
"(objects as object_type(id, name_of(id), box), relations as relation_type(s, p, o), the boxes packed as\n"
"float64 x1, y1, x2, y2 per object, the relations' subject and object indices packed as int64 pairs).\n"
"None when any object or relation is not clean; the caller then runs the Python builder.");

static PyObject *scan_answer(PyObject *self, PyObject *args) {
    PyObject *objects, *relations, *name_of;
    PyTypeObject *obj_type, *rel_type;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O:scan_answer", &PyList_Type, &objects, &PyList_Type,
                          &relations, &PyType_Type, &obj_type, &PyType_Type, &rel_type, &name_of))
        return NULL;
    if (!PyType_IsSubtype(obj_type, &PyTuple_Type) || !PyType_IsSubtype(rel_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "scan_answer: object_type and relation_type must be tuple types");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(objects), m = PyList_GET_SIZE(relations);
    PyObject *out_objs = PyList_New(n), *out_rels = PyList_New(m);
    PyObject *boxes = PyBytes_FromStringAndSize(NULL, n * 4 * (Py_ssize_t)sizeof(double));
    PyObject *links = PyBytes_FromStringAndSize(NULL, m * 2 * (Py_ssize_t)sizeof(long long));
    PyObject *index = PyDict_New();
    PyObject *result = NULL;
    if (!out_objs || !out_rels || !boxes || !links || !index) goto done;
    double *box_data = (double *)PyBytes_AS_STRING(boxes);
    long long *link_data = (long long *)PyBytes_AS_STRING(links);

    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objects) && i < n; i++) {
        PyObject *id = NULL, *box = NULL;
        double *v = box_data + 4 * i;
        int ok = read_object(PyList_GET_ITEM(objects, i), i, index, 1, v, &id, &box);
        if (ok < 0) goto done;
        if (!ok) goto unclean;
        Py_INCREF(id); /* held across name_of, which is Python code */
        PyObject *name = PyObject_CallOneArg(name_of, id);
        if (name == NULL) {
            Py_DECREF(id);
            goto done;
        }
        PyObject *tbox = float_tuple(box, v);
        if (tbox == NULL) {
            Py_DECREF(id);
            Py_DECREF(name);
            goto done;
        }
        PyObject *item = new_triple(obj_type, id, name, tbox);
        if (item == NULL) goto done;
        PyList_SET_ITEM(out_objs, i, item);
    }
    /* name_of is Python code: it cannot reach these lists, but check the sizes did not change anyway */
    if (PyList_GET_SIZE(objects) != n) goto unclean;

    for (Py_ssize_t j = 0; j < m && j < PyList_GET_SIZE(relations); j++) {
        PyObject *s, *p, *o;
        int ok = read_relation(PyList_GET_ITEM(relations, j), 1, &s, &p, &o);
        if (ok < 0) goto done;
        if (!ok) goto unclean;
        Py_ssize_t si = index_of(index, s), oi = index_of(index, o);
        if (si == -2 || oi == -2) goto done;
        if (si < 0 || oi < 0) goto unclean; /* unknown id: the parser drops it with an issue */
        link_data[2 * j] = (long long)si;
        link_data[2 * j + 1] = (long long)oi;
        Py_INCREF(s);
        Py_INCREF(p);
        Py_INCREF(o);
        PyObject *item = new_triple(rel_type, s, p, o);
        if (item == NULL) goto done;
        PyList_SET_ITEM(out_rels, j, item);
    }
    if (PyList_GET_SIZE(relations) != m) goto unclean;
    result = PyTuple_Pack(4, out_objs, out_rels, boxes, links);
    goto done;
unclean:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(out_objs);
    Py_XDECREF(out_rels);
    Py_XDECREF(boxes);
    Py_XDECREF(links);
    Py_XDECREF(index);
    return result;
}

PyDoc_STRVAR(scan_truth_doc,
"scan_truth(objects, relationships) -> tuple | None\n\n"
"Ground-truth columns (decoded lists) of the clean shape: unique str ids, 4-number bboxes, relations of\n"
"three strs naming known ids. Returns (ids tuple, boxes as a bytearray of float64 x1, y1, x2, y2 per\n"
"object, (subject, predicate, object) tuples, subject indices, object indices); None otherwise (the\n"
"caller then runs the Python conversion, which handles or reports the rest).");

static PyObject *scan_truth(PyObject *self, PyObject *args) {
    PyObject *objects, *relations;
    if (!PyArg_ParseTuple(args, "O!O!:scan_truth", &PyList_Type, &objects, &PyList_Type, &relations))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(objects), m = PyList_GET_SIZE(relations);
    PyObject *ids = PyTuple_New(n), *triplets = PyTuple_New(m);
    PyObject *si_t = PyTuple_New(m), *oi_t = PyTuple_New(m);
    PyObject *boxes = PyByteArray_FromStringAndSize(NULL, n * 4 * (Py_ssize_t)sizeof(double));
    PyObject *index = PyDict_New();
    PyObject *result = NULL;
    if (!ids || !triplets || !si_t || !oi_t || !boxes || !index) goto done;
    double *box_data = (double *)PyByteArray_AS_STRING(boxes);

    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *id = NULL, *box = NULL;
        int ok = read_object(PyList_GET_ITEM(objects, i), i, index, 0, box_data + 4 * i, &id, &box);
        if (ok < 0) goto done;
        if (!ok) goto unclean; /* repeated GT ids too: the Python conversion keeps its last-index rule */
        PyTuple_SET_ITEM(ids, i, Py_NewRef(id));
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *s, *p, *o;
        int ok = read_relation(PyList_GET_ITEM(relations, j), 0, &s, &p, &o);
        if (ok < 0) goto done;
        if (!ok) goto unclean;
        PyObject *sv = get(index, s), *ov = sv ? get(index, o) : NULL;
        if (ov == NULL) {
            if (PyErr_Occurred()) goto done;
            goto unclean; /* a relation naming an unknown id: the Python conversion filters it */
        }
        PyObject *t = PyTuple_Pack(3, s, p, o);
        if (t == NULL) goto done;
        PyObject_GC_UnTrack(t); /* strs only (see new_triple) */
        PyTuple_SET_ITEM(triplets, j, t);
        PyTuple_SET_ITEM(si_t, j, Py_NewRef(sv));
        PyTuple_SET_ITEM(oi_t, j, Py_NewRef(ov));
    }
    result = PyTuple_Pack(5, ids, boxes, triplets, si_t, oi_t);
    goto done;
unclean:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(ids);
    Py_XDECREF(triplets);
    Py_XDECREF(si_t);
    Py_XDECREF(oi_t);
    Py_XDECREF(boxes);
    Py_XDECREF(index);
    return result;
}

/* numpy's maximum/minimum: a NaN operand is returned (the first when both are NaN). */
static inline double np_max(double a, double b) { return isnan(a) ? a : (isnan(b) ? b : (a >= b ? a : b)); }
static inline double np_min(double a, double b) { return isnan(a) ? a : (isnan(b) ? b : (a <= b ? a : b)); }

PyDoc_STRVAR(pair_geometry_doc,
"pair_geometry(pred, gt, gt_area, cp, cg, pcode, gcode, phead, ghead, w_label, w_giou, w_l1, credit)\n\n"
"The matching geometry of every (predicted, GT) object pair of a chunk of rows, pred-major within a row,\n"
"with the IEEE operations of batch._pair_geometry's numpy version in the same order (identical values):\n"
"returns (label_sim, iou, l1, cost) as bytearrays of float64 and ``same`` as a bytearray of bools.\n"
"pred: (P x 4) float64 boxes already clipped and normalised; gt: (G x 4) float64 normalised GT boxes and\n"
"gt_area their areas; cp/cg: int64 objects per row; pcode/gcode: int64 label codes; phead/ghead: int64\n"
"head-noun codes, or None when ``credit`` is 0.");

/* A C-contiguous buffer of ``count`` items of ``size`` bytes, or an error naming ``what``. */
static int check_len(Py_buffer *b, Py_ssize_t count, Py_ssize_t size, const char *what) {
    if (b->len != count * size) {
        PyErr_Format(PyExc_ValueError, "pair_geometry: %s has %zd bytes, expected %zd", what, b->len,
                     count * size);
        return 0;
    }
    return 1;
}

static PyObject *pair_geometry(PyObject *self, PyObject *args) {
    Py_buffer pred = {0}, gt = {0}, gt_area = {0}, cp = {0}, cg = {0}, pcode = {0}, gcode = {0};
    PyObject *phead_obj, *ghead_obj;
    Py_buffer phead = {0}, ghead = {0};
    double w_label, w_giou, w_l1, credit;
    PyObject *result = NULL, *out[5] = {NULL, NULL, NULL, NULL, NULL};
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*OOdddd:pair_geometry", &pred, &gt, &gt_area, &cp, &cg,
                          &pcode, &gcode, &phead_obj, &ghead_obj, &w_label, &w_giou, &w_l1, &credit))
        return NULL;
    int heads = phead_obj != Py_None;
    if (heads && (PyObject_GetBuffer(phead_obj, &phead, PyBUF_SIMPLE) < 0 ||
                  PyObject_GetBuffer(ghead_obj, &ghead, PyBUF_SIMPLE) < 0))
        goto done;
    Py_ssize_t rows = cp.len / (Py_ssize_t)sizeof(long long);
    if (!check_len(&cg, rows, sizeof(long long), "cg")) goto done;
    const long long *np_ = cp.buf, *ng_ = cg.buf;
    Py_ssize_t total_p = 0, total_g = 0, cells = 0;
    for (Py_ssize_t k = 0; k < rows; k++) {
        if (np_[k] < 0 || ng_[k] < 0 || np_[k] > (1 << 20) || ng_[k] > (1 << 20)) {
            PyErr_SetString(PyExc_ValueError, "pair_geometry: bad row sizes");
            goto done;
        }
        total_p += np_[k];
        total_g += ng_[k];
        cells += np_[k] * ng_[k];
        if (cells > PY_SSIZE_T_MAX / 16) {
            PyErr_SetString(PyExc_ValueError, "pair_geometry: too many pairs");
            goto done;
        }
    }
    if (!check_len(&pred, total_p * 4, sizeof(double), "pred") ||
        !check_len(&gt, total_g * 4, sizeof(double), "gt") ||
        !check_len(&gt_area, total_g, sizeof(double), "gt_area") ||
        !check_len(&pcode, total_p, sizeof(long long), "pcode") ||
        !check_len(&gcode, total_g, sizeof(long long), "gcode") ||
        (heads && (!check_len(&phead, total_p, sizeof(long long), "phead") ||
                   !check_len(&ghead, total_g, sizeof(long long), "ghead"))))
        goto done;
    for (int i = 0; i < 4; i++) {
        out[i] = PyByteArray_FromStringAndSize(NULL, cells * (Py_ssize_t)sizeof(double));
        if (out[i] == NULL) goto done;
    }
    out[4] = PyByteArray_FromStringAndSize(NULL, cells);
    if (out[4] == NULL) goto done;
    double *o_sim = (double *)PyByteArray_AS_STRING(out[0]), *o_iou = (double *)PyByteArray_AS_STRING(out[1]);
    double *o_l1 = (double *)PyByteArray_AS_STRING(out[2]), *o_cost = (double *)PyByteArray_AS_STRING(out[3]);
    char *o_same = PyByteArray_AS_STRING(out[4]);
    const double *P = pred.buf, *G = gt.buf, *GA = gt_area.buf;
    const long long *pc = pcode.buf, *gc = gcode.buf;
    const long long *ph = heads ? phead.buf : NULL, *gh = heads ? ghead.buf : NULL;
    Py_ssize_t pbase = 0, gbase = 0, c = 0;
    for (Py_ssize_t k = 0; k < rows; k++) {
        for (long long i = 0; i < np_[k]; i++) {
            const double *a = P + 4 * (pbase + i);
            double ax1 = a[0], ay1 = a[1], ax2 = a[2], ay2 = a[3];
            double area_a = (ax2 - ax1) * (ay2 - ay1);
            long long code = pc[pbase + i], head = heads ? ph[pbase + i] : 0;
            for (long long j = 0; j < ng_[k]; j++, c++) {
                const double *b = G + 4 * (gbase + j);
                double bx1 = b[0], by1 = b[1], bx2 = b[2], by2 = b[3];
                double inter = np_max(np_min(ax2, bx2) - np_max(ax1, bx1), 0.0) *
                               np_max(np_min(ay2, by2) - np_max(ay1, by1), 0.0);
                double uni = area_a + GA[gbase + j] - inter;
                /* 0 / d is inter itself (a signed zero) for every d the denominator can be: skip the
                 * division for the many pairs that do not overlap */
                double iou = inter == 0.0 ? inter : inter / (uni > 0 ? uni : INFINITY);
                double hull = (np_max(ax2, bx2) - np_min(ax1, bx1)) * (np_max(ay2, by2) - np_min(ay1, by1));
                double giou = iou - (hull - uni) / (hull > 0 ? hull : INFINITY);
                double l1 = fabs(ax1 - bx1) + fabs(ay1 - by1) + fabs(ax2 - bx2) + fabs(ay2 - by2);
                int same = code == gc[gbase + j];
                double sim = same ? 1.0 : ((heads && head == gh[gbase + j] && head >= 0) ? credit : 0.0);
                /* w * x with w == 1.0 is x exactly, so the numpy version's skipped products agree */
                double cost = w_label * (1.0 - sim);
                cost = cost + w_giou * (1.0 - giou);
                cost = cost + w_l1 * l1;
                if (!isfinite(cost)) cost = isnan(cost) ? 1e6 : (cost > 0 ? 1e6 : -DBL_MAX); /* nan_to_num */
                o_sim[c] = sim;
                o_iou[c] = iou;
                o_l1[c] = l1;
                o_cost[c] = cost;
                o_same[c] = (char)same;
            }
        }
        pbase += np_[k];
        gbase += ng_[k];
    }
    result = PyTuple_Pack(5, out[0], out[1], out[2], out[3], out[4]);
done:
    for (int i = 0; i < 5; i++) Py_XDECREF(out[i]);
    PyBuffer_Release(&pred);
    PyBuffer_Release(&gt);
    PyBuffer_Release(&gt_area);
    PyBuffer_Release(&cp);
    PyBuffer_Release(&cg);
    PyBuffer_Release(&pcode);
    PyBuffer_Release(&gcode);
    if (phead.obj) PyBuffer_Release(&phead);
    if (ghead.obj) PyBuffer_Release(&ghead);
    return result;
}

PyDoc_STRVAR(relation_hits_doc,
"relation_hits(n_pred, ps, po, pcode, n_gt, rs, ro, gcode, g, gt_offsets, pair_begins, match, quality, ok,\n"
"              kp, gm, copies) -> list[tuple[float, float]]\n\n"
"batch_relations.relation_scores' join for a group of rows: per row, (soft sum, hard count) over its GT\n"
"relations, in GT order. n_pred/n_gt: int64 relations per row; ps/po/pcode: int64 predicted subject and\n"
"object indices (within the row) and predicate codes; rs/ro/gcode: the same for the GT relations; g:\n"
"int64 GT objects per row; gt_offsets/pair_begins: int64 starts of each row in match/quality (float64)\n"
"and ok (bool, pred-major object pairs); kp/gm: float64 distinct predicates on each predicted / GT\n"
"relation's pair. A same-predicate candidate is worth min(1, gm[j] / kp[i]); soft adds the best worth of\n"
"the candidates that join the GT relation's matched ends times quality[s] * quality[o]; hard adds the best\n"
"worth of those that join two objects passing ``ok`` times copies[s] * copies[o] (float64, indexed like\n"
"quality: each GT object's share among predicted copies of it).");

static PyObject *relation_hits(PyObject *self, PyObject *args) {
    Py_buffer b[17];
    memset(b, 0, sizeof(b));
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*y*y*y*y*y*y*:relation_hits", &b[0], &b[1], &b[2], &b[3],
                          &b[4], &b[5], &b[6], &b[7], &b[8], &b[9], &b[10], &b[11], &b[12], &b[13], &b[14],
                          &b[15], &b[16]))
        return NULL;
    const Py_ssize_t L = sizeof(long long);
    const long long *n_pred = b[0].buf, *ps = b[1].buf, *po = b[2].buf, *pcode = b[3].buf;
    const long long *n_gt = b[4].buf, *rs = b[5].buf, *ro = b[6].buf, *gcode = b[7].buf;
    const long long *g = b[8].buf, *gt_off = b[9].buf, *pair_begin = b[10].buf, *match = b[11].buf;
    const double *quality = b[12].buf, *kp = b[14].buf, *gm = b[15].buf, *copies = b[16].buf;
    const char *ok = b[13].buf;
    Py_ssize_t rows = b[0].len / L, total_p = 0, total_g = 0;
    Py_ssize_t n_match = b[11].len / L, n_ok = b[13].len;
    if (!check_len(&b[4], rows, L, "n_gt") || !check_len(&b[8], rows, L, "g") ||
        !check_len(&b[9], rows, L, "gt_offsets") || !check_len(&b[10], rows, L, "pair_begins") ||
        !check_len(&b[12], n_match, sizeof(double), "quality") ||
        !check_len(&b[16], n_match, sizeof(double), "copies"))
        goto done;
    for (Py_ssize_t k = 0; k < rows; k++) {
        if (n_pred[k] < 0 || n_gt[k] < 0) {
            PyErr_SetString(PyExc_ValueError, "relation_hits: bad row sizes");
            goto done;
        }
        total_p += n_pred[k];
        total_g += n_gt[k];
    }
    if (!check_len(&b[1], total_p, L, "ps") || !check_len(&b[2], total_p, L, "po") ||
        !check_len(&b[3], total_p, L, "pcode") || !check_len(&b[5], total_g, L, "rs") ||
        !check_len(&b[6], total_g, L, "ro") || !check_len(&b[7], total_g, L, "gcode") ||
        !check_len(&b[14], total_p, sizeof(double), "kp") || !check_len(&b[15], total_g, sizeof(double), "gm"))
        goto done;
    /* every index is checked before use: a wrong one is an error, never a read out of bounds */
    Py_ssize_t pb = 0, gb = 0;
    for (Py_ssize_t k = 0; k < rows; k++) {
        long long gk = g[k], off = gt_off[k], begin = pair_begin[k];
        /* compared without products, so no check can overflow */
        if (gk < 0 || off < 0 || begin < 0 || off > n_match || gk > n_match - off || begin > n_ok)
            goto bad_index;
        long long blocks = gk ? (n_ok - begin) / gk : 0; /* whole predicted blocks after ``begin`` */
        for (Py_ssize_t j = gb; j < gb + n_gt[k]; j++)
            if (rs[j] < 0 || ro[j] < 0 || rs[j] >= gk || ro[j] >= gk) goto bad_index;
        for (Py_ssize_t i = pb; i < pb + n_pred[k] && n_gt[k]; i++)
            if (ps[i] < 0 || po[i] < 0 || ps[i] >= blocks || po[i] >= blocks) goto bad_index;
        pb += n_pred[k];
        gb += n_gt[k];
    }
    result = PyList_New(rows);
    if (result == NULL) goto done;
    pb = gb = 0;
    for (Py_ssize_t k = 0; k < rows; k++) {
        long long gk = g[k], off = gt_off[k], begin = pair_begin[k];
        double soft = 0.0, hard = 0.0;
        for (Py_ssize_t j = gb; j < gb + n_gt[k]; j++) {
            long long ms = match[off + rs[j]], mo = match[off + ro[j]];
            double best_soft = 0.0, best_hard = 0.0;
            for (Py_ssize_t i = pb; i < pb + n_pred[k] && !(best_soft == 1.0 && best_hard == 1.0); i++) {
                if (pcode[i] != gcode[j]) continue;
                double worth = gm[j] / kp[i]; /* several predicates on one pair share the pair's credit */
                if (worth > 1.0) worth = 1.0;
                /* an unmatched end (-1) equals no index */
                if (ps[i] == ms && po[i] == mo && worth > best_soft) best_soft = worth;
                if (ok[begin + ps[i] * gk + rs[j]] && ok[begin + po[i] * gk + ro[j]] && worth > best_hard)
                    best_hard = worth;
            }
            soft += best_soft * quality[off + rs[j]] * quality[off + ro[j]];
            hard += best_hard * copies[off + rs[j]] * copies[off + ro[j]];
        }
        PyObject *pair = Py_BuildValue("(dd)", soft, hard);
        if (pair == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, k, pair);
        pb += n_pred[k];
        gb += n_gt[k];
    }
    goto done;
bad_index:
    PyErr_SetString(PyExc_ValueError, "relation_hits: an index is out of range");
done:
    for (int i = 0; i < 17; i++)
        if (b[i].obj) PyBuffer_Release(&b[i]);
    return result;
}

PyDoc_STRVAR(has_long_digit_run_doc,
"has_long_digit_run(text, n) -> bool\n\nWhether ``text`` (str) holds ``n`` or more consecutive ASCII digits.");

static PyObject *has_long_digit_run(PyObject *self, PyObject *args) {
    PyObject *text;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "Un:has_long_digit_run", &text, &n)) return NULL;
    Py_ssize_t len = PyUnicode_GET_LENGTH(text), run = 0;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    if (kind == PyUnicode_1BYTE_KIND) { /* the usual case: a tight byte loop */
        const unsigned char *p = data;
        for (Py_ssize_t i = 0; i < len; i++) {
            run = ((unsigned)(p[i] - '0') < 10u) ? run + 1 : 0;
            if (run >= n) Py_RETURN_TRUE;
        }
        Py_RETURN_FALSE;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        Py_UCS4 ch = PyUnicode_READ(kind, data, i);
        run = (ch >= '0' && ch <= '9') ? run + 1 : 0;
        if (run >= n) Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

static PyMethodDef methods[] = {
    {"scan_answer", scan_answer, METH_VARARGS, scan_answer_doc},
    {"scan_truth", scan_truth, METH_VARARGS, scan_truth_doc},
    {"pair_geometry", pair_geometry, METH_VARARGS, pair_geometry_doc},
    {"relation_hits", relation_hits, METH_VARARGS, relation_hits_doc},
    {"has_long_digit_run", has_long_digit_run, METH_VARARGS, has_long_digit_run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "r1vision's compiled helpers (see r1vision/compiled.py and the C source).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    k_id = PyUnicode_InternFromString("id");
    k_bbox = PyUnicode_InternFromString("bbox");
    k_box = PyUnicode_InternFromString("box");
    k_subject = PyUnicode_InternFromString("subject");
    k_predicate = PyUnicode_InternFromString("predicate");
    k_object = PyUnicode_InternFromString("object");
    if (!k_id || !k_bbox || !k_box || !k_subject || !k_predicate || !k_object) return NULL;
    for (int i = 0; i < SMALL_FLOATS; i++)
        if ((small_float[i] = PyFloat_FromDouble((double)i)) == NULL) return NULL;
    return PyModule_Create(&module);
}
