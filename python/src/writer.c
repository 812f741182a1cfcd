/* qem._qem.Writer: the streaming .qem writer (qem_writer). Python hands it
 * blocks of whole scans; the library holds one window of scans and its
 * encoding, and the file appears complete at finish() or not at all. One
 * call at a time: while one runs (the GIL released), a call from another
 * thread, abort() included, raises instead of reaching the library. */
#include "ext.h"

#include <string.h>

typedef struct ext_writer {
    PyObject_HEAD
    qem_writer *writer;
    qem_dtype dtype;
    uint64_t pixels, scans, appended;
    ext_progress progress;
    PyObject *progress_callback;
    PyObject *kept; /* the options' buffers, alive while the writer is */
    int busy;       /* a call in flight (the GIL released); every other call refuses */
} ext_writer;

/* Refuses a call while another thread's is in flight: aborting or
 * finishing then would free the writer the library is encoding into, and
 * a qem_writer serves one call at a time. */
static int writer_idle(ext_writer *self, const char *what)
{
    if (self->busy) {
        PyErr_Format(PyExc_RuntimeError,
                     "the writer is in use by another thread; %s it when that call ends", what);
        return -1;
    }
    return 0;
}

static qem_dtype dtype_of(const char *name)
{
    return !strcmp(name, "uint8")     ? QEM_DTYPE_UINT8
           : !strcmp(name, "uint16")  ? QEM_DTYPE_UINT16
           : !strcmp(name, "float32") ? QEM_DTYPE_FLOAT32
                                      : QEM_DTYPE_NONE;
}

/* An optional UTF-8 string option, kept alive in `kept`. */
static int text_option(PyObject *obj, const char *name, const char **out, PyObject *kept)
{
    *out = NULL;
    if (!obj || obj == Py_None)
        return 0;
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str", name);
        return -1;
    }
    *out = PyUnicode_AsUTF8(obj);
    return *out && PyList_Append(kept, obj) == 0 ? 0 : -1;
}

static int writer_init(ext_writer *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"dest",          "dtype",           "shape",
                         "chunk_scans",   "threads",         "valid",
                         "dark",          "calibration",     "metadata",
                         "source_metadata", "scientific_metadata", "source_format",
                         "progress",      NULL};
    PyObject *dest_obj = NULL, *valid = Py_None, *dark = Py_None, *calibration = Py_None,
             *metadata = Py_None, *source_metadata = Py_None, *scientific = Py_None,
             *source_format = Py_None, *progress = Py_None;
    const char *dtype_name;
    uint64_t shape[4];
    unsigned int chunk_scans = 0;
    int threads = 0;
    if (writer_idle(self, "start") < 0)
        return -1;
    if (self->writer) {
        PyErr_SetString(PyExc_RuntimeError, "Writer is already started");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&s(O&O&O&O&)|O&O&OOOOOOOO:Writer", kw,
                                     PyUnicode_FSConverter, &dest_obj, &dtype_name, ext_u64_arg,
                                     &shape[0], ext_u64_arg, &shape[1], ext_u64_arg, &shape[2],
                                     ext_u64_arg, &shape[3], ext_u32_arg, &chunk_scans,
                                     ext_threads_arg, &threads, &valid, &dark, &calibration,
                                     &metadata, &source_metadata, &scientific, &source_format,
                                     &progress))
        return -1;
    int rc = -1;
    PyArrayObject *valid_a = NULL, *dark_a = NULL;
    self->kept = PyList_New(0);
    const qem_dtype dtype = dtype_of(dtype_name);
    qem_save_options o;
    qem_save_options_init(&o);
    if (!self->kept)
        goto done;
    if (dtype == QEM_DTYPE_NONE) {
        PyErr_Format(PyExc_ValueError, "dtype must be uint8, uint16 or float32, not %s",
                     dtype_name);
        goto done;
    }
    o.chunk_scans = chunk_scans;
    o.threads = threads;
    if (valid != Py_None) {
        if (!(valid_a = ext_mask_array(valid, shape[2], shape[3], "valid")))
            goto done;
        o.valid = PyArray_DATA(valid_a);
    }
    if (dark != Py_None) {
        dark_a = (PyArrayObject *)PyArray_FROM_OTF(dark, NPY_FLOAT32,
                                                   NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED |
                                                       NPY_ARRAY_FORCECAST);
        if (!dark_a)
            goto done;
        if (PyArray_NDIM(dark_a) != 2 || (uint64_t)PyArray_DIM(dark_a, 0) != shape[2] ||
            (uint64_t)PyArray_DIM(dark_a, 1) != shape[3]) {
            PyErr_Format(PyExc_ValueError, "dark must be a (%llu, %llu) plane",
                         (unsigned long long)shape[2], (unsigned long long)shape[3]);
            goto done;
        }
        o.dark = PyArray_DATA(dark_a);
    }
    if (text_option(calibration, "calibration", &o.calibration_json, self->kept) < 0 ||
        text_option(metadata, "metadata", &o.metadata_json, self->kept) < 0 ||
        text_option(source_metadata, "source_metadata", &o.source_metadata_json, self->kept) < 0 ||
        text_option(scientific, "scientific_metadata", &o.scientific_metadata_json, self->kept) < 0 ||
        text_option(source_format, "source_format", &o.source_format, self->kept) < 0)
        goto done;
    self->progress_callback = Py_NewRef(progress);
    ext_progress_init(&self->progress, progress);
    o.progress = ext_progress_fn;
    o.progress_user = &self->progress;
    const uint64_t s[4] = {shape[0], shape[1], shape[2], shape[3]};
    qem_error e = {0};
    qem_status st;
    const char *dest = PyBytes_AS_STRING(dest_obj);
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    st = qem_writer_create(dest, dtype, s, &o, &self->writer, &e);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (st != QEM_OK) {
        self->writer = NULL;
        ext_raise(&e);
        goto done;
    }
    self->dtype = dtype;
    self->pixels = s[2] * s[3];
    self->scans = s[0] * s[1];
    if ((valid_a && PyList_Append(self->kept, (PyObject *)valid_a) < 0) ||
        (dark_a && PyList_Append(self->kept, (PyObject *)dark_a) < 0))
        goto done;
    rc = 0;
done:
    Py_XDECREF(valid_a);
    Py_XDECREF(dark_a);
    Py_DECREF(dest_obj);
    return rc;
}

/* A call may go on: no other in flight, and the writer neither finished
 * nor aborted. */
static int writer_live(ext_writer *self, const char *what)
{
    if (writer_idle(self, what) < 0)
        return -1;
    if (!self->writer) {
        PyErr_SetString(PyExc_ValueError, "the writer is finished or aborted");
        return -1;
    }
    return 0;
}

/* Ends the writer without a file. */
static void writer_discard(ext_writer *self)
{
    qem_writer_free(self->writer);
    self->writer = NULL;
    ext_progress_clear(&self->progress);
}

static PyObject *writer_append(ext_writer *self, PyObject *args)
{
    PyObject *block_obj;
    if (!PyArg_ParseTuple(args, "O:append", &block_obj) || writer_live(self, "append to") < 0)
        return NULL;
    /* The caller converts; here only exactness is checked: the writer's
     * dtype, C order, whole scans. */
    PyArrayObject *block = (PyArrayObject *)PyArray_FROM_OF(
        block_obj, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
    if (!block)
        return NULL;
    PyObject *r = NULL;
    if (PyArray_TYPE(block) != ext_npy_type(self->dtype) || !PyArray_ISNOTSWAPPED(block)) {
        PyErr_Format(PyExc_TypeError, "append: blocks must be native %s",
                     qem_dtype_name(self->dtype));
    } else if ((uint64_t)PyArray_SIZE(block) % self->pixels) {
        PyErr_Format(PyExc_ValueError,
                     "append: a block holds whole scans (a multiple of %llu values), not %lld",
                     (unsigned long long)self->pixels, (long long)PyArray_SIZE(block));
    } else {
        const uint64_t n = (uint64_t)PyArray_SIZE(block) / self->pixels;
        if (n > self->scans - self->appended) {
            PyErr_Format(PyExc_ValueError, "append: %llu more scans than the shape holds",
                         (unsigned long long)(n - (self->scans - self->appended)));
        } else {
            qem_error e = {0};
            qem_status st;
            const void *data = PyArray_DATA(block);
            self->busy = 1;
            Py_BEGIN_ALLOW_THREADS
            st = qem_writer_append(self->writer, data, n, &e);
            Py_END_ALLOW_THREADS
            self->busy = 0;
            if (ext_progress_raise(&self->progress) || (st != QEM_OK && !ext_raise(&e))) {
                writer_discard(self); /* a failed writer publishes nothing */
            } else {
                self->appended += n;
                r = Py_NewRef(Py_None);
            }
        }
    }
    Py_DECREF(block);
    return r;
}

static PyObject *writer_append_encoded(ext_writer *self, PyObject *args)
{
    Py_buffer blob;
    uint64_t scans;
    if (!PyArg_ParseTuple(args, "y*O&:append_encoded", &blob, ext_u64_arg, &scans))
        return NULL;
    if (writer_live(self, "append to") < 0) {
        PyBuffer_Release(&blob);
        return NULL;
    }
    qem_error e = {0};
    qem_status st;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    st = qem_writer_append_encoded(self->writer, blob.buf, (size_t)blob.len, &e);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyBuffer_Release(&blob);
    if (ext_progress_raise(&self->progress)) {
        writer_discard(self);
        return NULL;
    }
    if (st != QEM_OK)
        return ext_raise(&e); /* a refused chunk leaves the writer as it was */
    self->appended += scans; /* the library checked it is its next chunk of that many */
    Py_RETURN_NONE;
}

static PyObject *writer_finish(ext_writer *self, PyObject *noargs)
{
    (void)noargs;
    if (writer_live(self, "finish") < 0)
        return NULL;
    if (self->appended != self->scans) {
        writer_discard(self);
        return PyErr_Format(PyExc_ValueError,
                            "the data held %llu scans, the shape says %llu; nothing was written",
                            (unsigned long long)self->appended, (unsigned long long)self->scans);
    }
    qem_error e = {0};
    qem_status st;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    st = qem_writer_finish(self->writer, &e);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    const int raised = ext_progress_raise(&self->progress) || (st != QEM_OK && !ext_raise(&e));
    writer_discard(self);
    return raised ? NULL : Py_NewRef(Py_None);
}

static PyObject *writer_abort(ext_writer *self, PyObject *noargs)
{
    (void)noargs;
    if (writer_idle(self, "abort") < 0)
        return NULL;
    writer_discard(self);
    Py_RETURN_NONE;
}

/* Never during a call: the call holds a reference to the writer. */
static void writer_dealloc(ext_writer *self)
{
    writer_discard(self);
    Py_XDECREF(self->progress_callback);
    Py_XDECREF(self->kept);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *writer_get_appended(ext_writer *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->appended);
}

static PyMethodDef writer_methods[] = {
    {"append", (PyCFunction)writer_append, METH_VARARGS,
     "append(block): whole scans in the writer's dtype, C order."},
    {"append_encoded", (PyCFunction)writer_append_encoded, METH_VARARGS,
     "append_encoded(blob, scans): the next chunk, from qem._qem.encode_scans."},
    {"finish", (PyCFunction)writer_finish, METH_NOARGS,
     "Encodes what remains and publishes the file atomically."},
    {"abort", (PyCFunction)writer_abort, METH_NOARGS, "Discards everything; no file appears."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef writer_getset[] = {
    {"appended", (getter)writer_get_appended, NULL, "Scans appended so far.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject ext_writer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qem._qem.Writer",
    .tp_basicsize = sizeof(ext_writer),
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The streaming .qem writer (use qem.save).",
    .tp_methods = writer_methods,
    .tp_getset = writer_getset,
    .tp_init = (initproc)writer_init,
    .tp_new = PyType_GenericNew,
};

/* The options both sides of a distributed save share. */
static int shared_options(PyObject *valid, unsigned int chunk_scans, int threads,
                          const uint64_t shape[4], qem_save_options *o, PyArrayObject **valid_a)
{
    qem_save_options_init(o);
    o->chunk_scans = chunk_scans;
    o->threads = threads;
    *valid_a = NULL;
    if (valid != Py_None) {
        if (!(*valid_a = ext_mask_array(valid, shape[2], shape[3], "valid")))
            return -1;
        o->valid = PyArray_DATA(*valid_a);
    }
    return 0;
}

PyObject *ext_save_chunks(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kw[] = {"dtype", "shape", "chunk_scans", "valid", NULL};
    const char *dtype_name;
    uint64_t shape[4];
    unsigned int chunk_scans = 0;
    PyObject *valid = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s(O&O&O&O&)|O&O:save_chunks", kw, &dtype_name,
                                     ext_u64_arg, &shape[0], ext_u64_arg, &shape[1], ext_u64_arg,
                                     &shape[2], ext_u64_arg, &shape[3], ext_u32_arg, &chunk_scans,
                                     &valid))
        return NULL;
    qem_save_options o;
    PyArrayObject *valid_a;
    if (shared_options(valid, chunk_scans, 0, shape, &o, &valid_a) < 0)
        return NULL;
    qem_error e = {0};
    size_t n = 0;
    PyObject *r = NULL;
    const qem_dtype dtype = dtype_of(dtype_name);
    if (qem_save_chunks(dtype, shape, &o, NULL, 0, &n, &e) == QEM_OK) {
        uint64_t *first = PyMem_Malloc((n ? n : 1) * sizeof *first);
        if (!first)
            r = PyErr_NoMemory();
        else if (qem_save_chunks(dtype, shape, &o, first, n, &n, &e) != QEM_OK)
            ext_raise(&e);
        else if ((r = PyList_New((Py_ssize_t)n)))
            for (size_t k = 0; k < n; k++)
                PyList_SET_ITEM(r, (Py_ssize_t)k, PyLong_FromUnsignedLongLong(first[k]));
        PyMem_Free(first);
    } else {
        ext_raise(&e);
    }
    Py_XDECREF(valid_a);
    return r;
}

PyObject *ext_encode_scans(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kw[] = {"dtype", "shape", "first_scan", "block", "chunk_scans", "valid",
                         "threads", NULL};
    const char *dtype_name;
    uint64_t shape[4], first;
    unsigned int chunk_scans = 0;
    int threads = 0;
    PyObject *block_obj, *valid = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s(O&O&O&O&)O&O|O&OO&:encode_scans", kw,
                                     &dtype_name, ext_u64_arg, &shape[0], ext_u64_arg, &shape[1],
                                     ext_u64_arg, &shape[2], ext_u64_arg, &shape[3], ext_u64_arg,
                                     &first, &block_obj, ext_u32_arg, &chunk_scans, &valid,
                                     ext_threads_arg, &threads))
        return NULL;
    const qem_dtype dtype = dtype_of(dtype_name);
    PyArrayObject *block = (PyArrayObject *)PyArray_FROM_OF(
        block_obj, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED);
    if (!block)
        return NULL;
    const uint64_t pixels = shape[2] * shape[3];
    if (dtype == QEM_DTYPE_NONE || PyArray_TYPE(block) != ext_npy_type(dtype) ||
        !PyArray_ISNOTSWAPPED(block) || !pixels || (uint64_t)PyArray_SIZE(block) % pixels) {
        Py_DECREF(block);
        PyErr_Format(PyExc_TypeError, "encode_scans: a block of whole scans of native %s",
                     dtype_name);
        return NULL;
    }
    qem_save_options o;
    PyArrayObject *valid_a;
    if (shared_options(valid, chunk_scans, threads, shape, &o, &valid_a) < 0) {
        Py_DECREF(block);
        return NULL;
    }
    void *blob = NULL;
    size_t size = 0;
    qem_error e = {0};
    qem_status st;
    const void *data = PyArray_DATA(block);
    const uint64_t count = (uint64_t)PyArray_SIZE(block) / pixels;
    Py_BEGIN_ALLOW_THREADS
    st = qem_encode_scans(dtype, shape, &o, first, data, count, &blob, &size, &e);
    Py_END_ALLOW_THREADS
    Py_DECREF(block);
    Py_XDECREF(valid_a);
    if (st != QEM_OK)
        return ext_raise(&e);
    PyObject *r = PyBytes_FromStringAndSize(blob, (Py_ssize_t)size);
    qem_free(blob);
    return r;
}
