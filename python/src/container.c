/* qem._qem.Container: an opened .qem file or pack (qem_container), its
 * description, bounded reads of any scans and detector crop, and every
 * product. One Container serves several Python threads: libqem's read
 * handles are thread-safe, each product call opens its own products
 * handle, and close() refuses while calls are in flight. */
#include "ext.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Scans read per library call in a gather, and the gap between wanted
 * scans that is read through rather than decoded again in a new call. */
#define GATHER_WINDOW_BYTES (64u << 20)
#define GATHER_GAP_SCANS 256

int ext_container_enter(ext_container *c)
{
    if (!c->container) {
        PyErr_SetString(PyExc_ValueError, "the qem file is closed");
        return -1;
    }
    c->busy++;
    return 0;
}

void ext_container_leave(ext_container *c)
{
    c->busy--;
}

qem_products *ext_products_open(ext_container *c, ext_progress *progress)
{
    qem_products_options po;
    qem_products_options_init(&po);
    po.threads = c->threads;
    po.cache_dir = c->cache_dir;
    po.progress = ext_progress_fn;
    po.progress_user = progress;
    qem_products *p = NULL;
    qem_error e = {0};
    if (qem_products_open(c->container, &po, &p, &e) != QEM_OK) {
        ext_raise(&e);
        return NULL;
    }
    return p;
}

/* --- life ------------------------------------------------------------------------ */

static int container_init(ext_container *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"path",     "threads",  "verify",    "raw", "expect_sha256",
                         "progress", "resident", "cache_dir", NULL};
    PyObject *cache_obj = NULL;
    PyObject *path_obj = NULL, *progress = Py_None;
    int threads = 0, verify = 1, raw = 0, resident = 0;
    const char *expect = NULL;
    if (self->container) {
        PyErr_SetString(PyExc_RuntimeError, "Container is already open");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|O&ppzOiO&:Container", kw,
                                     PyUnicode_FSConverter, &path_obj, ext_threads_arg, &threads,
                                     &verify, &raw, &expect, &progress, &resident,
                                     PyUnicode_FSConverter, &cache_obj))
        return -1;
    free(self->cache_dir);
    self->cache_dir = NULL;
    if (cache_obj) {
        self->cache_dir = strdup(PyBytes_AS_STRING(cache_obj));
        Py_DECREF(cache_obj);
        if (!self->cache_dir) {
            Py_DECREF(path_obj);
            PyErr_NoMemory();
            return -1;
        }
    }
    qem_container_options o;
    qem_container_options_init(&o);
    o.threads = threads;
    o.expect_sha256 = expect;
    o.body_check = verify ? QEM_BODY_CHECK_ON_OPEN : QEM_BODY_CHECK_ON_READ;
    o.resident = resident;
    ext_progress pr;
    ext_progress_init(&pr, progress);
    o.progress = ext_progress_fn;
    o.progress_user = &pr;
    qem_error e = {0};
    qem_container *c = NULL;
    qem_status st;
    const char *path = PyBytes_AS_STRING(path_obj);
    Py_BEGIN_ALLOW_THREADS
    st = qem_container_open(path, &o, &c, &e);
    Py_END_ALLOW_THREADS
    if (ext_progress_raise(&pr) || (st != QEM_OK && !ext_raise(&e))) {
        qem_container_close(c);
        Py_DECREF(path_obj);
        return -1;
    }
    self->info.struct_size = sizeof self->info;
    qem_container_get_info(c, &self->info, NULL);
    self->values = raw ? QEM_VALUES_RAW : QEM_VALUES_WORKING;
    if (raw && !self->info.has_raw) {
        /* The library's own reason, from a one-scan raw read. */
        const size_t bytes = (size_t)qem_container_read_bound(c, QEM_VALUES_RAW, 1);
        void *one = malloc(bytes ? bytes : 1);
        st = one ? qem_container_read(c, 0, 1, QEM_VALUES_RAW, one, bytes, &e) : QEM_E_NO_MEMORY;
        free(one);
        if (st == QEM_OK) {
            e.status = QEM_E_NOT_RECORDED;
            snprintf(e.message, sizeof e.message, "raw values are not available in this file");
        }
        qem_container_close(c);
        Py_DECREF(path_obj);
        ext_raise(&e);
        return -1;
    }
    self->container = c;
    self->threads = threads;
    self->path = PyUnicode_DecodeFSDefaultAndSize(PyBytes_AS_STRING(path_obj),
                                                  PyBytes_GET_SIZE(path_obj));
    Py_DECREF(path_obj);
    return self->path ? 0 : -1;
}

static PyObject *container_close(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the qem file is in use by another thread; close it when that call ends");
        return NULL;
    }
    qem_container_close(self->container);
    self->container = NULL;
    Py_RETURN_NONE;
}

static void container_dealloc(ext_container *self)
{
    qem_container_close(self->container);
    free(self->cache_dir);
    Py_XDECREF(self->path);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* --- description ---------------------------------------------------------------------- */

static const char *dtype_str(qem_dtype d)
{
    return d == QEM_DTYPE_NONE ? NULL : qem_dtype_name(d);
}

static PyObject *container_info(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    if (ext_container_enter(self) < 0)
        return NULL;
    ext_container_leave(self);
    const qem_container_info *i = &self->info;
    const qem_dtype read_dtype = self->values == QEM_VALUES_RAW ? i->raw_dtype : i->working_dtype;
    PyObject *d = Py_BuildValue(
        "{s:s, s:(KKKK), s:K, s:K, s:z, s:z, s:z, s:O}", "format",
        qem_file_kind_name(i->kind), "shape", (unsigned long long)i->shape[0],
        (unsigned long long)i->shape[1], (unsigned long long)i->shape[2],
        (unsigned long long)i->shape[3], "scans", (unsigned long long)i->scans, "pixels",
        (unsigned long long)i->pixels, "dtype", dtype_str(read_dtype), "working_dtype",
        dtype_str(i->working_dtype), "raw_dtype", dtype_str(i->raw_dtype), "has_raw",
        i->has_raw ? Py_True : Py_False);
    if (!d)
        return NULL;
    /* What only the format has comes from the library as JSON, decoded by
     * Python's json module; chunks become (first, end) tuples. */
    qem_error e = {0};
    char *text = qem_container_details_json(self->container, &e);
    if (!text) {
        Py_DECREF(d);
        return ext_raise(&e);
    }
    PyObject *json = PyImport_ImportModule("json");
    PyObject *extra = json ? PyObject_CallMethod(json, "loads", "s", text) : NULL;
    Py_XDECREF(json);
    qem_free(text);
    PyObject *listed = extra ? PyDict_GetItemString(extra, "chunks") : NULL; /* borrowed */
    PyObject *chunks = listed ? PyList_New(PyList_GET_SIZE(listed)) : NULL;
    for (Py_ssize_t k = 0; chunks && k < PyList_GET_SIZE(listed); k++) {
        PyObject *t = PyList_AsTuple(PyList_GET_ITEM(listed, k));
        if (!t)
            Py_CLEAR(chunks);
        else
            PyList_SET_ITEM(chunks, k, t);
    }
    if (!chunks || PyDict_DelItemString(extra, "chunks") < 0 || PyDict_Update(d, extra) < 0 ||
        PyDict_SetItemString(d, "chunks", chunks) < 0) {
        Py_XDECREF(chunks);
        Py_XDECREF(extra);
        Py_DECREF(d);
        return NULL;
    }
    Py_DECREF(extra);
    Py_DECREF(chunks);
    return d;
}

static PyObject *container_header(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    if (ext_container_enter(self) < 0)
        return NULL;
    ext_container_leave(self);
    size_t n = 0;
    const char *text = qem_container_header_json(self->container, &n);
    return PyUnicode_FromStringAndSize(text, (Py_ssize_t)n);
}

static PyObject *container_summary(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    if (ext_container_enter(self) < 0)
        return NULL;
    ext_container_leave(self);
    qem_error e = {0};
    char *text = qem_container_summary_json(self->container, &e);
    return ext_take_string(text, &e);
}

static PyObject *quantity(const qem_quantity *q)
{
    if (q->source == QEM_CALIBRATION_ABSENT)
        Py_RETURN_NONE;
    return Py_BuildValue("{s:d, s:s, s:s}", "value", q->value, "unit", q->unit, "source",
                         q->source == QEM_CALIBRATION_OVERRIDE ? "override" : "recorded");
}

static PyObject *container_calibration(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    if (ext_container_enter(self) < 0)
        return NULL;
    ext_container_leave(self);
    if (!self->info.has_calibration)
        return PyDict_New(); /* the file records no microscope calibration (a pack) */
    qem_calibration c = {.struct_size = sizeof c};
    qem_error e = {0};
    if (qem_container_get_calibration(self->container, &c, &e) != QEM_OK)
        return ext_raise(&e);
    const struct {
        const char *name;
        const qem_quantity *q;
    } items[] = {{"scan_step_row", &c.scan_step[0]},
                 {"scan_step_column", &c.scan_step[1]},
                 {"detector_step_row", &c.detector_step[0]},
                 {"detector_step_column", &c.detector_step[1]},
                 {"voltage", &c.voltage},
                 {"semiangle", &c.semiangle},
                 {"dwell", &c.dwell},
                 {"camera_length", &c.camera_length}};
    PyObject *d = PyDict_New();
    for (size_t k = 0; d && k < sizeof items / sizeof items[0]; k++) {
        PyObject *v = quantity(items[k].q);
        if (!v || PyDict_SetItemString(d, items[k].name, v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *valid_array(ext_container *self)
{
    npy_intp dims[2] = {(npy_intp)self->info.shape[2], (npy_intp)self->info.shape[3]};
    PyArrayObject *out = (PyArrayObject *)PyArray_ZEROS(2, dims, NPY_BOOL, 0);
    if (!out)
        return NULL;
    ext_progress pr;
    ext_progress_init(&pr, NULL);
    qem_products *p = ext_products_open(self, &pr);
    if (!p) {
        Py_DECREF(out);
        return NULL;
    }
    qem_error e = {0};
    const qem_status st = qem_products_valid(p, PyArray_DATA(out), (size_t)self->info.pixels, &e);
    qem_products_close(p);
    if (st != QEM_OK) {
        Py_DECREF(out);
        return ext_raise(&e);
    }
    return (PyObject *)out;
}

static PyObject *container_valid(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    if (ext_container_enter(self) < 0)
        return NULL;
    PyObject *r = valid_array(self);
    ext_container_leave(self);
    return r;
}

/* --- reads ------------------------------------------------------------------------------ */

typedef struct gather_plan {
    const int64_t *scans; /* ascending (repeats allowed) */
    const int64_t *slots; /* output position of each */
    npy_intp n;
    const npy_intp *rows, *cols; /* detector rows and columns wanted */
    npy_intp nrows, ncols;
    uint8_t *out;
    size_t item;
} gather_plan;

static int is_identity(const npy_intp *v, npy_intp n, uint64_t full)
{
    if ((uint64_t)n != full)
        return 0;
    for (npy_intp k = 0; k < n; k++)
        if (v[k] != k)
            return 0;
    return 1;
}

/* One scan's pattern in `frame` into output slot `slot`, cropped. */
static void put_frame(const gather_plan *g, uint64_t det_cols, const uint8_t *frame, int64_t slot)
{
    const size_t item = g->item;
    uint8_t *dst = g->out + (size_t)slot * (size_t)g->nrows * (size_t)g->ncols * item;
    const int contiguous = g->ncols > 0 && g->cols[g->ncols - 1] - g->cols[0] == g->ncols - 1;
    for (npy_intp r = 0; r < g->nrows; r++) {
        const uint8_t *src = frame + (size_t)g->rows[r] * det_cols * item;
        if (contiguous) {
            memcpy(dst, src + (size_t)g->cols[0] * item, (size_t)g->ncols * item);
        } else {
            for (npy_intp c = 0; c < g->ncols; c++)
                memcpy(dst + (size_t)c * item, src + (size_t)g->cols[c] * item, item);
        }
        dst += (size_t)g->ncols * item;
    }
}

static PyObject *container_gather(ext_container *self, PyObject *args)
{
    PyArrayObject *scans_a, *slots_a, *rows_a, *cols_a, *out_a;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!:gather", &PyArray_Type, &scans_a, &PyArray_Type,
                          &slots_a, &PyArray_Type, &rows_a, &PyArray_Type, &cols_a,
                          &PyArray_Type, &out_a))
        return NULL;
    if (ext_container_enter(self) < 0)
        return NULL;
    PyObject *result = NULL;
    const qem_container_info *info = &self->info;
    const qem_dtype dtype = self->values == QEM_VALUES_RAW ? info->raw_dtype : info->working_dtype;
    const int need = NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED;
    if (PyArray_TYPE(scans_a) != NPY_INT64 || PyArray_TYPE(slots_a) != NPY_INT64 ||
        PyArray_TYPE(rows_a) != NPY_INTP || PyArray_TYPE(cols_a) != NPY_INTP ||
        !PyArray_CHKFLAGS(scans_a, need) || !PyArray_CHKFLAGS(slots_a, need) ||
        !PyArray_CHKFLAGS(rows_a, need) || !PyArray_CHKFLAGS(cols_a, need) ||
        PyArray_SIZE(scans_a) != PyArray_SIZE(slots_a)) {
        PyErr_SetString(PyExc_TypeError, "gather: index arrays of the wrong kind");
        goto done;
    }
    if (PyArray_TYPE(out_a) != ext_npy_type(dtype) ||
        !PyArray_CHKFLAGS(out_a, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_WRITEABLE | NPY_ARRAY_ALIGNED)) {
        PyErr_Format(PyExc_ValueError, "out must be a writable C-contiguous %s array",
                     qem_dtype_name(dtype));
        goto done;
    }
    gather_plan g = {PyArray_DATA(scans_a), PyArray_DATA(slots_a), PyArray_SIZE(scans_a),
                     PyArray_DATA(rows_a),  PyArray_DATA(cols_a),  PyArray_SIZE(rows_a),
                     PyArray_SIZE(cols_a),  PyArray_DATA(out_a),   qem_dtype_size(dtype)};
    const uint64_t scan_bytes = info->pixels * g.item;
    /* The caller's index arrays are checked here, once: every later step
     * trusts them. */
    npy_intp outputs = PyArray_SIZE(out_a) / (g.nrows * g.ncols > 0 ? g.nrows * g.ncols : 1);
    for (npy_intp k = 0; k < g.n; k++)
        if (g.scans[k] < 0 || (uint64_t)g.scans[k] >= info->scans || (k && g.scans[k] < g.scans[k - 1]) ||
            g.slots[k] < 0 || g.slots[k] >= outputs) {
            PyErr_SetString(PyExc_IndexError, "gather: scan positions out of range or unsorted");
            goto done;
        }
    for (npy_intp k = 0; k < g.nrows; k++)
        if (g.rows[k] < 0 || (uint64_t)g.rows[k] >= info->shape[2]) {
            PyErr_SetString(PyExc_IndexError, "gather: detector row out of range");
            goto done;
        }
    for (npy_intp k = 0; k < g.ncols; k++)
        if (g.cols[k] < 0 || (uint64_t)g.cols[k] >= info->shape[3]) {
            PyErr_SetString(PyExc_IndexError, "gather: detector column out of range");
            goto done;
        }
    if ((uint64_t)PyArray_NBYTES(out_a) < (uint64_t)outputs * g.nrows * g.ncols * g.item ||
        (g.nrows * g.ncols > 0 && PyArray_SIZE(out_a) % (g.nrows * g.ncols))) {
        PyErr_SetString(PyExc_ValueError, "gather: out has the wrong size");
        goto done;
    }
    const int whole = is_identity(g.rows, g.nrows, info->shape[2]) &&
                      is_identity(g.cols, g.ncols, info->shape[3]);
    const uint64_t window = scan_bytes > GATHER_WINDOW_BYTES ? scan_bytes : GATHER_WINDOW_BYTES;
    uint8_t *buf = g.n ? malloc((size_t)window) : NULL;
    if (g.n && !buf) {
        PyErr_NoMemory();
        goto done;
    }
    qem_error e = {0};
    qem_status st = QEM_OK;
    int interrupted = 0;
    Py_BEGIN_ALLOW_THREADS
    for (npy_intp i = 0; i < g.n && st == QEM_OK && !interrupted;) {
        const int64_t a = g.scans[i];
        npy_intp j = i;
        while (j + 1 < g.n && (uint64_t)(g.scans[j + 1] - a + 1) * scan_bytes <= window &&
               g.scans[j + 1] - g.scans[j] <= GATHER_GAP_SCANS)
            j++;
        const uint64_t span = (uint64_t)(g.scans[j] - a + 1);
        /* Whole patterns of consecutive scans into consecutive slots go
         * straight into the caller's array. */
        int direct = whole && span == (uint64_t)(j - i + 1);
        for (npy_intp k = i + 1; direct && k <= j; k++)
            direct = g.slots[k] == g.slots[i] + (k - i);
        if (direct) {
            st = qem_container_read(self->container, (uint64_t)a, span, self->values,
                                    g.out + (size_t)g.slots[i] * scan_bytes, (size_t)(span * scan_bytes),
                                    &e);
        } else {
            st = qem_container_read(self->container, (uint64_t)a, span, self->values, buf,
                                    (size_t)window, &e);
            for (npy_intp k = i; st == QEM_OK && k <= j; k++)
                put_frame(&g, info->shape[3], buf + (size_t)(g.scans[k] - a) * scan_bytes,
                          g.slots[k]);
        }
        i = j + 1;
        if (i < g.n) {
            Py_BLOCK_THREADS
            interrupted = PyErr_CheckSignals() < 0;
            Py_UNBLOCK_THREADS
        }
    }
    Py_END_ALLOW_THREADS
    free(buf);
    if (interrupted)
        goto done;
    if (st != QEM_OK) {
        ext_raise(&e);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    ext_container_leave(self);
    return result;
}

/* --- products ------------------------------------------------------------------------------- */

/* The shape of a product call: enter, a products handle, the call with
 * the GIL released, close, raise or return the image. */
typedef qem_status (*product_call)(qem_products *p, void *args, qem_image *image, qem_error *e);

static PyObject *run_product(ext_container *self, product_call call, void *args)
{
    if (ext_container_enter(self) < 0)
        return NULL;
    ext_progress pr;
    ext_progress_init(&pr, NULL);
    qem_products *p = ext_products_open(self, &pr);
    PyObject *r = NULL;
    if (p) {
        qem_image im = {0};
        qem_error e = {0};
        qem_status st;
        Py_BEGIN_ALLOW_THREADS
        st = call(p, args, &im, &e);
        Py_END_ALLOW_THREADS
        if (qem_products_sums_origin(p) != QEM_ORIGIN_NONE)
            self->sums_origin = qem_products_sums_origin(p);
        self->last_origin = qem_products_last_origin(p);
        qem_products_close(p);
        if (ext_progress_raise(&pr))
            qem_image_free(&im);
        else if (st != QEM_OK)
            qem_image_free(&im), ext_raise(&e);
        else
            r = ext_image_array(&im);
    }
    ext_container_leave(self);
    return r;
}

static qem_status call_mean(qem_products *p, void *args, qem_image *im, qem_error *e)
{
    (void)args;
    return qem_products_mean(p, im, e);
}

static PyObject *container_mean(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    return run_product(self, call_mean, NULL);
}

static PyObject *container_sums_origin(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    return PyUnicode_FromString(qem_origin_name(self->sums_origin));
}

static PyObject *container_last_origin(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    return PyUnicode_FromString(qem_origin_name(self->last_origin));
}

static qem_status call_frame(qem_products *p, void *args, qem_image *im, qem_error *e)
{
    return qem_products_frame(p, *(const uint64_t *)args, im, e);
}

static PyObject *container_frame(ext_container *self, PyObject *args)
{
    uint64_t scan;
    if (!PyArg_ParseTuple(args, "O&:frame", ext_u64_arg, &scan))
        return NULL;
    return run_product(self, call_frame, &scan);
}

typedef struct region_args {
    uint64_t r0, r1, c0, c1;
    int reduce;
} region_args;

static qem_status call_region(qem_products *p, void *args, qem_image *im, qem_error *e)
{
    const region_args *a = args;
    return qem_products_region(p, a->r0, a->r1, a->c0, a->c1, (qem_reduce)a->reduce, im, e);
}

static PyObject *container_region(ext_container *self, PyObject *args)
{
    uint64_t r0, r1, c0, c1;
    int reduce;
    if (!PyArg_ParseTuple(args, "O&O&O&O&i:region", ext_u64_arg, &r0, ext_u64_arg, &r1,
                          ext_u64_arg, &c0, ext_u64_arg, &c1, &reduce))
        return NULL;
    region_args a = {r0, r1, c0, c1, reduce};
    return run_product(self, call_region, &a);
}

/* A detector mask argument (None allowed where `optional`). */
static int mask_arg(ext_container *self, PyObject *obj, int optional, PyArrayObject **out)
{
    *out = NULL;
    if (obj == Py_None) {
        if (optional)
            return 0;
        PyErr_SetString(PyExc_TypeError, "a detector mask is required");
        return -1;
    }
    *out = ext_mask_array(obj, self->info.shape[2], self->info.shape[3], "mask");
    return *out ? 0 : -1;
}

static qem_status call_virtual(qem_products *p, void *args, qem_image *im, qem_error *e)
{
    return qem_products_virtual(p, args, im, e);
}

static PyObject *container_virtual(ext_container *self, PyObject *args)
{
    PyObject *mask_obj;
    PyArrayObject *mask;
    if (!PyArg_ParseTuple(args, "O:virtual", &mask_obj) || mask_arg(self, mask_obj, 0, &mask) < 0)
        return NULL;
    PyObject *r = run_product(self, call_virtual, PyArray_DATA(mask));
    Py_DECREF(mask);
    return r;
}

typedef struct com_args {
    const uint8_t *mask;
    int subtract_mean;
} com_args;

static qem_status call_com(qem_products *p, void *args, qem_image *im, qem_error *e)
{
    const com_args *a = args;
    return qem_products_com(p, a->mask, a->subtract_mean, im, e);
}

static PyObject *container_com(ext_container *self, PyObject *args)
{
    PyObject *mask_obj;
    int subtract;
    PyArrayObject *mask;
    if (!PyArg_ParseTuple(args, "Op:com", &mask_obj, &subtract) ||
        mask_arg(self, mask_obj, 1, &mask) < 0)
        return NULL;
    com_args a = {mask ? PyArray_DATA(mask) : NULL, subtract};
    PyObject *r = run_product(self, call_com, &a);
    Py_XDECREF(mask);
    return r;
}

static PyObject *container_dpc(ext_container *self, PyObject *args)
{
    PyObject *mask_obj;
    double rotation;
    PyArrayObject *mask;
    if (!PyArg_ParseTuple(args, "Od:dpc", &mask_obj, &rotation) ||
        mask_arg(self, mask_obj, 1, &mask) < 0)
        return NULL;
    if (ext_container_enter(self) < 0) {
        Py_XDECREF(mask);
        return NULL;
    }
    ext_progress pr;
    ext_progress_init(&pr, NULL);
    qem_products *p = ext_products_open(self, &pr);
    PyObject *r = NULL;
    if (p) {
        qem_dpc_result d = {.struct_size = sizeof d};
        qem_error e = {0};
        qem_status st;
        const uint8_t *m = mask ? PyArray_DATA(mask) : NULL;
        Py_BEGIN_ALLOW_THREADS
        st = qem_products_dpc(p, m, rotation, &d, &e);
        Py_END_ALLOW_THREADS
        qem_products_close(p);
        if (!ext_progress_raise(&pr) && (st == QEM_OK || ext_raise(&e))) {
            PyObject *com = ext_image_array(&d.com);
            PyObject *aligned = com ? ext_image_array(&d.aligned) : NULL;
            PyObject *phase = aligned ? ext_image_array(&d.phase) : NULL;
            if (phase)
                r = Py_BuildValue("{s:d, s:O, s:K, s:N, s:N, s:N}", "rotation_degrees",
                                  d.rotation_degrees, "exchanged",
                                  d.components_exchanged ? Py_True : Py_False, "ffts",
                                  (unsigned long long)d.ffts, "com", com, "aligned", aligned,
                                  "idpc", phase);
            else
                Py_XDECREF(com), Py_XDECREF(aligned);
        }
        qem_dpc_result_free(&d);
    }
    ext_container_leave(self);
    Py_XDECREF(mask);
    return r;
}

static PyObject *calibration_dict(const qem_detector_calibration *c)
{
    PyObject *d = Py_BuildValue("{s:(dd), s:d, s:s}", "center", c->center_row, c->center_column,
                                "radius", c->bright_field_radius, "method", c->method);
    if (d && c->has_dpc) {
        PyObject *rot = PyFloat_FromDouble(c->dpc_rotation_degrees);
        if (!rot || PyDict_SetItemString(d, "dpc_rotation_degrees", rot) < 0 ||
            PyDict_SetItemString(d, "dpc_components_exchanged",
                                 c->dpc_component_order_exchanged ? Py_True : Py_False) < 0)
            Py_CLEAR(d);
        Py_XDECREF(rot);
    }
    return d;
}

/* estimate_calibration() -> dict; file_calibration() -> dict or None. */
static PyObject *detector_calibration(ext_container *self, int estimate)
{
    if (ext_container_enter(self) < 0)
        return NULL;
    ext_progress pr;
    ext_progress_init(&pr, NULL);
    qem_products *p = ext_products_open(self, &pr);
    PyObject *r = NULL;
    if (p) {
        qem_detector_calibration c = {.struct_size = sizeof c};
        qem_error e = {0};
        qem_status st;
        Py_BEGIN_ALLOW_THREADS
        st = estimate ? qem_products_estimate_calibration(p, &c, &e)
                      : qem_products_file_calibration(p, &c, &e);
        Py_END_ALLOW_THREADS
        const int found = st != QEM_E_NOT_RECORDED;
        if (!found)
            st = QEM_OK;
        qem_products_close(p);
        if (ext_progress_raise(&pr))
            r = NULL;
        else if (st != QEM_OK)
            ext_raise(&e);
        else
            r = found ? calibration_dict(&c) : Py_NewRef(Py_None);
    }
    ext_container_leave(self);
    return r;
}

static PyObject *container_estimate_calibration(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    return detector_calibration(self, 1);
}

static PyObject *container_file_calibration(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    return detector_calibration(self, 0);
}

static PyObject *container_semiangle(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    if (ext_container_enter(self) < 0)
        return NULL;
    ext_progress pr;
    ext_progress_init(&pr, NULL);
    qem_products *p = ext_products_open(self, &pr);
    PyObject *r = NULL;
    if (p) {
        double mrad = 0;
        r = qem_products_semiangle(p, &mrad, NULL) == QEM_OK ? PyFloat_FromDouble(mrad)
                                                              : Py_NewRef(Py_None);
        qem_products_close(p);
    }
    ext_container_leave(self);
    return r;
}

/* resolve_detector(detector, center_row, center_column, radius, inner,
 * outer, unit_mrad, semiangle) -> (mask, resolution); NaN = resolved. */
static PyObject *container_resolve_detector(ext_container *self, PyObject *args)
{
    qem_detector_request q;
    qem_detector_request_init(&q);
    int detector, mrad;
    if (!PyArg_ParseTuple(args, "idddddpd:resolve_detector", &detector, &q.center_row,
                          &q.center_column, &q.radius, &q.inner, &q.outer, &mrad,
                          &q.semiangle_mrad))
        return NULL;
    q.detector = (qem_detector)detector;
    q.unit_mrad = mrad;
    if (ext_container_enter(self) < 0)
        return NULL;
    npy_intp dims[2] = {(npy_intp)self->info.shape[2], (npy_intp)self->info.shape[3]};
    PyArrayObject *mask = (PyArrayObject *)PyArray_ZEROS(2, dims, NPY_BOOL, 0);
    ext_progress pr;
    ext_progress_init(&pr, NULL);
    qem_products *p = mask ? ext_products_open(self, &pr) : NULL;
    PyObject *r = NULL;
    if (p) {
        qem_detector_resolution res = {.struct_size = sizeof res};
        qem_error e = {0};
        qem_status st;
        uint8_t *m = PyArray_DATA(mask);
        const size_t n = (size_t)self->info.pixels;
        Py_BEGIN_ALLOW_THREADS
        st = qem_products_resolve_detector(p, &q, m, n, &res, &e);
        Py_END_ALLOW_THREADS
        qem_products_close(p);
        if (ext_progress_raise(&pr))
            r = NULL;
        else if (st != QEM_OK)
            ext_raise(&e);
        else
            r = Py_BuildValue("(O{s:(dd), s:O, s:s, s:s, s:K})", mask, "center", res.center_row,
                              res.center_column, "radius",
                              isnan(res.radius) ? Py_None : PyFloat_FromDouble(res.radius),
                              "unit", res.unit_mrad ? "mrad" : "px", "origin", res.origin,
                              "mask_pixels", (unsigned long long)res.mask_pixels);
    }
    Py_XDECREF(mask);
    ext_container_leave(self);
    return r;
}

/* weighted_sums(first, count, weights[planes, pixels] int32) -> int64[planes, count] */
static PyObject *container_weighted_sums(ext_container *self, PyObject *args)
{
    uint64_t first, count;
    PyObject *w_obj;
    if (!PyArg_ParseTuple(args, "O&O&O:weighted_sums", ext_u64_arg, &first, ext_u64_arg, &count,
                          &w_obj))
        return NULL;
    PyArrayObject *w = (PyArrayObject *)PyArray_FROM_OTF(
        w_obj, NPY_INT32, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
    if (!w)
        return NULL;
    if (PyArray_NDIM(w) != 2 || (uint64_t)PyArray_DIM(w, 1) != self->info.pixels ||
        PyArray_DIM(w, 0) < 1 || PyArray_DIM(w, 0) > 64) {
        Py_DECREF(w);
        PyErr_SetString(PyExc_ValueError,
                        "weights must be int32 of shape (planes, detector pixels), 1..64 planes");
        return NULL;
    }
    if (ext_container_enter(self) < 0) {
        Py_DECREF(w);
        return NULL;
    }
    const unsigned planes = (unsigned)PyArray_DIM(w, 0);
    npy_intp dims[2] = {(npy_intp)planes, (npy_intp)count};
    PyArrayObject *out = (PyArrayObject *)PyArray_ZEROS(2, dims, NPY_INT64, 0);
    const int32_t *rows[64];
    for (unsigned k = 0; k < planes; k++)
        rows[k] = (const int32_t *)PyArray_GETPTR2(w, k, 0);
    ext_progress pr;
    ext_progress_init(&pr, NULL);
    qem_products *p = out ? ext_products_open(self, &pr) : NULL;
    PyObject *r = NULL;
    if (p) {
        qem_error e = {0};
        qem_status st;
        int64_t *o = PyArray_DATA(out);
        const size_t bytes = (size_t)PyArray_NBYTES(out);
        Py_BEGIN_ALLOW_THREADS
        st = qem_products_weighted_sums(p, first, count, rows, planes, o, bytes, &e);
        Py_END_ALLOW_THREADS
        qem_products_close(p);
        if (!ext_progress_raise(&pr) && (st == QEM_OK || ext_raise(&e)))
            r = Py_NewRef((PyObject *)out);
    }
    Py_XDECREF(out);
    Py_DECREF(w);
    ext_container_leave(self);
    return r;
}

/* pixel_sums(first, count) -> uint64[pixels] */
static PyObject *container_pixel_sums(ext_container *self, PyObject *args)
{
    uint64_t first, count;
    if (!PyArg_ParseTuple(args, "O&O&:pixel_sums", ext_u64_arg, &first, ext_u64_arg, &count))
        return NULL;
    if (ext_container_enter(self) < 0)
        return NULL;
    npy_intp dims[1] = {(npy_intp)self->info.pixels};
    PyArrayObject *out = (PyArrayObject *)PyArray_ZEROS(1, dims, NPY_UINT64, 0);
    ext_progress pr;
    ext_progress_init(&pr, NULL);
    qem_products *p = out ? ext_products_open(self, &pr) : NULL;
    PyObject *r = NULL;
    if (p) {
        qem_error e = {0};
        qem_status st;
        uint64_t *o = PyArray_DATA(out);
        const size_t bytes = (size_t)PyArray_NBYTES(out);
        Py_BEGIN_ALLOW_THREADS
        st = qem_products_pixel_sums(p, first, count, o, bytes, &e);
        Py_END_ALLOW_THREADS
        qem_products_close(p);
        if (!ext_progress_raise(&pr) && (st == QEM_OK || ext_raise(&e)))
            r = Py_NewRef((PyObject *)out);
    }
    Py_XDECREF(out);
    ext_container_leave(self);
    return r;
}

/* --- partitioned products (qem.dask) ------------------------------------------------ */

typedef struct part_args {
    const uint8_t *mask;
    uint64_t first, count;
    int kind; /* 0 virtual, 1 com */
} part_args;

static qem_status call_part(qem_products *p, void *args, qem_image *im, qem_error *e)
{
    const part_args *a = args;
    return a->kind == 0 ? qem_products_virtual_part(p, a->mask, a->first, a->count, im, e)
                        : qem_products_com_part(p, a->mask, a->first, a->count, im, e);
}

/* virtual_part(mask, first, count) / com_part(mask or None, first, count) */
static PyObject *part_product(ext_container *self, PyObject *args, int kind)
{
    PyObject *mask_obj;
    uint64_t first, count;
    PyArrayObject *mask;
    if (!PyArg_ParseTuple(args, "OO&O&", &mask_obj, ext_u64_arg, &first, ext_u64_arg, &count) ||
        mask_arg(self, mask_obj, kind == 1, &mask) < 0)
        return NULL;
    part_args a = {mask ? PyArray_DATA(mask) : NULL, first, count, kind};
    PyObject *r = run_product(self, call_part, &a);
    Py_XDECREF(mask);
    return r;
}

static PyObject *container_virtual_part(ext_container *self, PyObject *args)
{
    return part_product(self, args, 0);
}

static PyObject *container_com_part(ext_container *self, PyObject *args)
{
    return part_product(self, args, 1);
}

/* patterns_part(first, count, with_max) -> (sum, max or None) */
static PyObject *container_patterns_part(ext_container *self, PyObject *args)
{
    uint64_t first, count;
    int with_max;
    if (!PyArg_ParseTuple(args, "O&O&p:patterns_part", ext_u64_arg, &first, ext_u64_arg, &count,
                          &with_max) ||
        ext_container_enter(self) < 0)
        return NULL;
    ext_progress pr;
    ext_progress_init(&pr, NULL);
    qem_products *p = ext_products_open(self, &pr);
    PyObject *r = NULL;
    if (p) {
        qem_image sum = {0}, max = {0};
        qem_error e = {0};
        qem_status st;
        Py_BEGIN_ALLOW_THREADS
        st = qem_products_patterns_part(p, first, count, &sum, with_max ? &max : NULL, &e);
        Py_END_ALLOW_THREADS
        qem_products_close(p);
        if (ext_progress_raise(&pr) || (st != QEM_OK && !ext_raise(&e))) {
            qem_image_free(&sum);
            qem_image_free(&max);
        } else {
            PyObject *s = ext_image_array(&sum);
            PyObject *m = !s ? NULL : with_max ? ext_image_array(&max) : Py_NewRef(Py_None);
            if (s && m)
                r = Py_BuildValue("(NN)", s, m);
            else
                Py_XDECREF(s);
        }
    }
    ext_container_leave(self);
    return r;
}

/* The packed copy's state: None, or a dict of its bytes and build time. */
static PyObject *packed_copy_dict(qem_container *c)
{
    qem_packed_copy_stats s = {.struct_size = sizeof s};
    qem_error e = {0};
    if (qem_container_packed_copy_stats(c, &s, &e) != QEM_OK)
        return ext_raise(&e);
    if (!s.ready)
        Py_RETURN_NONE;
    return Py_BuildValue("{s:K, s:d}", "bytes", (unsigned long long)s.bytes, "build_s",
                         s.build_ms / 1e3);
}

static PyObject *container_build_packed_copy(ext_container *self, PyObject *args)
{
    unsigned long long limit;
    PyObject *progress;
    if (!PyArg_ParseTuple(args, "KO:build_packed_copy", &limit, &progress) ||
        ext_container_enter(self) < 0)
        return NULL;
    ext_progress pr;
    ext_progress_init(&pr, progress);
    qem_error e = {0};
    qem_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qem_container_build_packed_copy(self->container, limit, self->threads, ext_progress_fn,
                                         &pr, &e);
    Py_END_ALLOW_THREADS
    PyObject *r = NULL;
    if (!ext_progress_raise(&pr) && (st == QEM_OK || ext_raise(&e)))
        r = packed_copy_dict(self->container);
    ext_container_leave(self);
    return r;
}

static PyObject *container_packed_copy(ext_container *self, PyObject *noargs)
{
    (void)noargs;
    if (ext_container_enter(self) < 0)
        return NULL;
    PyObject *r = packed_copy_dict(self->container);
    ext_container_leave(self);
    return r;
}

static PyObject *container_get_path(ext_container *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->path ? self->path : Py_None);
}

static PyObject *container_get_closed(ext_container *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->container == NULL);
}

static PyObject *container_get_raw(ext_container *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->values == QEM_VALUES_RAW);
}

static PyMethodDef container_methods[] = {
    {"close", (PyCFunction)container_close, METH_NOARGS, "Closes the file."},
    {"info", (PyCFunction)container_info, METH_NOARGS, "A dict describing the file."},
    {"build_packed_copy", (PyCFunction)container_build_packed_copy, METH_VARARGS,
     "build_packed_copy(limit_bytes, progress): builds the .qem packed copy."},
    {"packed_copy", (PyCFunction)container_packed_copy, METH_NOARGS,
     "The packed copy's bytes and build time, or None."},
    {"header", (PyCFunction)container_header, METH_NOARGS,
     "The .qem header or the pack manifest, as JSON text."},
    {"summary", (PyCFunction)container_summary, METH_NOARGS, "qem info --json, as text."},
    {"calibration", (PyCFunction)container_calibration, METH_NOARGS,
     "The effective microscope calibration (.qem)."},
    {"valid", (PyCFunction)container_valid, METH_NOARGS, "The detector validity mask."},
    {"gather", (PyCFunction)container_gather, METH_VARARGS,
     "gather(scans, slots, rows, cols, out): reads scans (ascending) into out[slots]."},
    {"mean", (PyCFunction)container_mean, METH_NOARGS, "The mean pattern."},
    {"last_origin", (PyCFunction)container_last_origin, METH_NOARGS,
     "origin of the exact sums behind the last product"},
    {"sums_origin", (PyCFunction)container_sums_origin, METH_NOARGS,
     "Where the last whole-file pixel sums came from."},
    {"frame", (PyCFunction)container_frame, METH_VARARGS, "frame(scan): one pattern."},
    {"region", (PyCFunction)container_region, METH_VARARGS,
     "region(r0, r1, c0, c1, reduce): a reduction over a scan rectangle."},
    {"virtual", (PyCFunction)container_virtual, METH_VARARGS, "virtual(mask): a virtual image."},
    {"com", (PyCFunction)container_com, METH_VARARGS, "com(mask, subtract_mean)."},
    {"dpc", (PyCFunction)container_dpc, METH_VARARGS, "dpc(mask, rotation or NaN)."},
    {"estimate_calibration", (PyCFunction)container_estimate_calibration, METH_NOARGS,
     "The mean-diffraction-half-maximum estimate."},
    {"file_calibration", (PyCFunction)container_file_calibration, METH_NOARGS,
     "The detector calibration the file records, or None."},
    {"semiangle", (PyCFunction)container_semiangle, METH_NOARGS,
     "The convergence semi-angle the file states (mrad), or None."},
    {"resolve_detector", (PyCFunction)container_resolve_detector, METH_VARARGS,
     "A named detector's mask and what was used."},
    {"weighted_sums", (PyCFunction)container_weighted_sums, METH_VARARGS,
     "Exact weighted sums of a scan range (integer data)."},
    {"pixel_sums", (PyCFunction)container_pixel_sums, METH_VARARGS,
     "Exact per-pixel sums over a scan range (integer data)."},
    {"virtual_part", (PyCFunction)container_virtual_part, METH_VARARGS,
     "virtual_part(mask, first, count): the virtual image of a scan range."},
    {"com_part", (PyCFunction)container_com_part, METH_VARARGS,
     "com_part(mask or None, first, count): absolute CoM of a scan range."},
    {"patterns_part", (PyCFunction)container_patterns_part, METH_VARARGS,
     "patterns_part(first, count, with_max): per-pixel sums (and max) of a range."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef container_getset[] = {
    {"path", (getter)container_get_path, NULL, "The path it was opened from.", NULL},
    {"closed", (getter)container_get_closed, NULL, "True once closed.", NULL},
    {"raw", (getter)container_get_raw, NULL, "True when reads give raw values.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject ext_container_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qem._qem.Container",
    .tp_basicsize = sizeof(ext_container),
    .tp_dealloc = (destructor)container_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An opened .qem file or pack (use qem.open).",
    .tp_methods = container_methods,
    .tp_getset = container_getset,
    .tp_init = (initproc)container_init,
    .tp_new = PyType_GenericNew,
};
