/* Acquisitions from Python: qem.convert (qem_save_file from any detector
 * file), qem.inspect, qem.pack.inspect and qem.pack.produce. Options come
 * as keywords with the CLI's meanings. */
#include "ext.h"

#include <stdlib.h>
#include <string.h>

/* The acquisition keywords every call here takes. */
typedef struct acquisition_args {
    const char *dataset;
    PyObject *scan_shape, *raw_shape;
    const char *raw_dtype;
    uint64_t raw_offset, raw_frame_header;
} acquisition_args;

static int shape_arg(PyObject *obj, uint64_t *out, Py_ssize_t n, const char *name)
{
    if (obj == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(obj, "");
    if (!seq || PySequence_Fast_GET_SIZE(seq) != n) {
        Py_XDECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s must be %zd positive integers", name, n);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        const unsigned long long v = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, k));
        if (PyErr_Occurred() || v == 0) {
            Py_DECREF(seq);
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s must be %zd positive integers", name, n);
            return -1;
        }
        out[k] = v;
    }
    Py_DECREF(seq);
    return 0;
}

/* `hashing` sees the bytes of every member hashed: the caller's callback
 * where it reports hashing, else a record that only watches for Ctrl-C,
 * so that hashing a large source stays interruptible. */
static int acquisition_options(const acquisition_args *a, qem_acquisition_options *o,
                               ext_progress *hashing)
{
    qem_acquisition_options_init(o);
    o->dataset = a->dataset;
    if (shape_arg(a->scan_shape, o->scan_shape, 2, "scan_shape") < 0 ||
        shape_arg(a->raw_shape, o->raw_shape, 4, "raw_shape") < 0)
        return -1;
    if ((a->raw_shape != Py_None) != (a->raw_dtype != NULL)) {
        PyErr_SetString(PyExc_ValueError, "raw binary needs both raw_shape and raw_dtype");
        return -1;
    }
    o->raw_dtype = a->raw_dtype;
    o->raw_offset = a->raw_offset;
    o->raw_frame_header = a->raw_frame_header;
    o->progress = ext_progress_fn;
    o->progress_user = hashing;
    return 0;
}

/* After a call watched by two records: the first kept exception is raised
 * (1), the other dropped; 0 when neither kept one. */
static int raise_kept(ext_progress *first, ext_progress *second)
{
    const int raised = ext_progress_raise(first) || ext_progress_raise(second);
    ext_progress_clear(first);
    ext_progress_clear(second);
    return raised;
}

#define ACQUISITION_KW "dataset", "scan_shape", "raw_shape", "raw_dtype", "raw_offset", \
                       "raw_frame_header"
#define ACQUISITION_FMT "zOOzO&O&"
#define ACQUISITION_REFS(a) &(a).dataset, &(a).scan_shape, &(a).raw_shape, &(a).raw_dtype, \
                            ext_u64_arg, &(a).raw_offset, ext_u64_arg, &(a).raw_frame_header
#define ACQUISITION_INIT {NULL, Py_None, Py_None, NULL, 0, 0}

/* save_file(src, dest, *, acquisition keywords, chunk_scans, threads,
 * calibration, metadata, progress) */
PyObject *ext_save_file(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kw[] = {"src",         "dest",    "dataset",     "scan_shape",
                         "raw_shape",   "raw_dtype", "raw_offset", "raw_frame_header",
                         "chunk_scans", "threads", "calibration", "metadata",
                         "progress",    NULL};
    PyObject *src = NULL, *dest = NULL, *progress = Py_None;
    acquisition_args a = ACQUISITION_INIT;
    unsigned int chunk_scans = 0;
    int threads = 0;
    const char *calibration = NULL, *metadata = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&O&|$" ACQUISITION_FMT "O&O&zzO:save_file",
                                     kw, PyUnicode_FSConverter, &src, PyUnicode_FSConverter, &dest,
                                     ACQUISITION_REFS(a), ext_u32_arg, &chunk_scans,
                                     ext_threads_arg, &threads, &calibration, &metadata,
                                     &progress))
        goto fail;
    /* The caller's progress is per scan; hashing a source that is
     * authenticated before it is read (HDF5) only watches for Ctrl-C. */
    ext_progress pr, hashing;
    ext_progress_init(&pr, progress);
    ext_progress_init(&hashing, NULL);
    qem_acquisition_options ao;
    if (acquisition_options(&a, &ao, &hashing) < 0)
        goto fail;
    qem_save_options so;
    qem_save_options_init(&so);
    so.chunk_scans = chunk_scans;
    so.threads = threads;
    so.calibration_json = calibration;
    so.metadata_json = metadata;
    so.input = &ao;
    so.progress = ext_progress_fn;
    so.progress_user = &pr;
    qem_error e = {0};
    qem_status st;
    const char *s = PyBytes_AS_STRING(src), *d = PyBytes_AS_STRING(dest);
    Py_BEGIN_ALLOW_THREADS
    st = qem_save_file(s, d, &so, &e);
    Py_END_ALLOW_THREADS
    Py_DECREF(src);
    Py_DECREF(dest);
    if (raise_kept(&pr, &hashing))
        return NULL;
    return st == QEM_OK ? Py_NewRef(Py_None) : ext_raise(&e);
fail:
    Py_XDECREF(src);
    Py_XDECREF(dest);
    return NULL;
}

/* inspect / pack_inspect(src, *, acquisition keywords) -> JSON text: the
 * authenticated acquisition, or what a pack of it would be. */
static PyObject *inspect_as(PyObject *args, PyObject *kwargs, int pack)
{
    static char *kw[] = {"src", ACQUISITION_KW, "progress", NULL};
    PyObject *src = NULL, *progress = Py_None;
    acquisition_args a = ACQUISITION_INIT;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs,
            pack ? "O&|$" ACQUISITION_FMT "O:pack_inspect" : "O&|$" ACQUISITION_FMT "O:inspect",
            kw, PyUnicode_FSConverter, &src, ACQUISITION_REFS(a), &progress))
        return NULL;
    ext_progress pr;
    ext_progress_init(&pr, progress);
    qem_acquisition_options ao;
    if (acquisition_options(&a, &ao, &pr) < 0) {
        Py_DECREF(src);
        return NULL;
    }
    qem_error e = {0};
    char *text = NULL;
    const char *s = PyBytes_AS_STRING(src);
    Py_BEGIN_ALLOW_THREADS
    if (pack) {
        qem_pack_inspection *in = NULL;
        if (qem_pack_inspect(s, &ao, &in, &e) == QEM_OK)
            text = qem_pack_inspection_json(in, &e);
        qem_pack_inspection_free(in);
    } else {
        qem_acquisition *acq = NULL;
        if (qem_acquisition_open(s, &ao, &acq, &e) == QEM_OK &&
            qem_acquisition_authenticate(acq, &e) == QEM_OK)
            text = qem_acquisition_json(acq, &e);
        qem_acquisition_close(acq);
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(src);
    if (ext_progress_raise(&pr)) {
        qem_free(text);
        return NULL;
    }
    return ext_take_string(text, &e);
}

PyObject *ext_inspect(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    return inspect_as(args, kwargs, 0);
}

PyObject *ext_pack_inspect(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    return inspect_as(args, kwargs, 1);
}

/* pack_produce(src, dest, *, acquisition keywords, profile, exclude,
 * progress) -> None; the receipt lies beside the pack. */
PyObject *ext_pack_produce(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kw[] = {"src",       "dest",      "dataset", "scan_shape", "raw_shape",
                         "raw_dtype", "raw_offset", "raw_frame_header", "profile", "exclude",
                         "progress",  NULL};
    PyObject *src = NULL, *dest = NULL, *exclude = Py_None, *progress = Py_None;
    acquisition_args a = ACQUISITION_INIT;
    const char *profile = "u16-lz4";
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&O&|$" ACQUISITION_FMT "sOO:pack_produce",
                                     kw, PyUnicode_FSConverter, &src, PyUnicode_FSConverter,
                                     &dest, ACQUISITION_REFS(a), &profile, &exclude, &progress))
        goto fail;
    qem_pack_profile prof;
    if (!strcmp(profile, "u16-lz4") || !strcmp(profile, "exact-uint16-lz4")) {
        prof = QEM_PACK_UINT16_LZ4;
    } else if (!strcmp(profile, "u8-bitpacked") || !strcmp(profile, "exact-uint8-bitpacked")) {
        prof = QEM_PACK_UINT8_BITPACKED;
    } else {
        PyErr_Format(PyExc_ValueError, "profile must be 'u16-lz4' or 'u8-bitpacked', not '%s'",
                     profile);
        goto fail;
    }
    /* The caller's progress is per shard; hashing the source (inspection,
     * then again before the first shard) only watches for Ctrl-C. */
    ext_progress pr, hashing;
    ext_progress_init(&pr, progress);
    ext_progress_init(&hashing, NULL);
    qem_acquisition_options ao;
    if (acquisition_options(&a, &ao, &hashing) < 0)
        goto fail;
    qem_error e = {0};
    qem_pack_inspection *in = NULL;
    qem_status st;
    const char *s = PyBytes_AS_STRING(src), *d = PyBytes_AS_STRING(dest);
    Py_BEGIN_ALLOW_THREADS
    st = qem_pack_inspect(s, &ao, &in, &e);
    Py_END_ALLOW_THREADS
    if (raise_kept(&hashing, &pr) || (st != QEM_OK && !ext_raise(&e))) {
        qem_pack_inspection_free(in);
        goto fail;
    }
    PyArrayObject *mask = NULL;
    if (exclude != Py_None) {
        /* The detector shape, from the inspection's own description. */
        qem_acquisition *acq = NULL;
        qem_acquisition_info ai = {.struct_size = sizeof ai};
        if (qem_acquisition_open(s, &ao, &acq, &e) != QEM_OK ||
            qem_acquisition_get_info(acq, &ai, &e) != QEM_OK) {
            qem_acquisition_close(acq);
            qem_pack_inspection_free(in);
            ext_raise(&e);
            goto fail;
        }
        qem_acquisition_close(acq);
        mask = ext_mask_array(exclude, ai.shape[2], ai.shape[3], "exclude");
        if (!mask) {
            qem_pack_inspection_free(in);
            goto fail;
        }
    }
    qem_pack_plan_options po;
    qem_pack_plan_options_init(&po);
    po.profile = prof;
    po.destination = d;
    po.exclude = mask ? PyArray_DATA(mask) : NULL;
    qem_pack_produce_options pp;
    qem_pack_produce_options_init(&pp);
    pp.progress = ext_progress_fn;
    pp.progress_user = &pr;
    pp.hash_progress = ext_progress_fn;
    pp.hash_progress_user = &hashing;
    Py_BEGIN_ALLOW_THREADS
    st = qem_pack_produce(in, &po, d, &pp, &e);
    Py_END_ALLOW_THREADS
    qem_pack_inspection_free(in);
    Py_XDECREF(mask);
    Py_DECREF(src);
    Py_DECREF(dest);
    if (raise_kept(&pr, &hashing))
        return NULL;
    return st == QEM_OK ? Py_NewRef(Py_None) : ext_raise(&e);
fail:
    Py_XDECREF(src);
    Py_XDECREF(dest);
    return NULL;
}
