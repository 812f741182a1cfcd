/* qem._qem.Session: a detector session over one or more opened files (a
 * tilt or time series). set_mask() updates every file's virtual image by
 * signed deltas (integer data), all or none. One thread at a time: a
 * session holds images that each update replaces. */
#include "ext.h"

#include <stdlib.h>

typedef struct ext_session {
    PyObject_HEAD
    qem_detector_session *session;
    qem_products **products;
    PyObject *containers; /* tuple of ext_container, kept open while the session lives */
    Py_ssize_t count;
    uint64_t rows, columns;
    int busy;
    ext_progress progress;
} ext_session;

static void session_release(ext_session *self)
{
    qem_detector_session_free(self->session);
    self->session = NULL;
    for (Py_ssize_t k = 0; self->products && k < self->count; k++) {
        qem_products_close(self->products[k]);
        ext_container *c = (ext_container *)PyTuple_GET_ITEM(self->containers, k);
        ext_container_leave(c);
    }
    free(self->products);
    self->products = NULL;
    self->count = 0;
}

static int session_init(ext_session *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"files", "keep_mib", NULL};
    PyObject *files;
    unsigned long long keep_mib = 0;
    if (self->session) {
        PyErr_SetString(PyExc_RuntimeError, "Session is already started");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|K:Session", kw, &files, &keep_mib))
        return -1;
    if (keep_mib > (1ull << 20)) {
        PyErr_SetString(PyExc_ValueError, "keep_mib must be 0 to 1048576");
        return -1;
    }
    PyObject *tuple = PySequence_Tuple(files);
    if (!tuple)
        return -1;
    const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    if (n < 1) {
        Py_DECREF(tuple);
        PyErr_SetString(PyExc_ValueError, "a session needs at least one file");
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        if (!PyObject_TypeCheck(PyTuple_GET_ITEM(tuple, k), &ext_container_type)) {
            Py_DECREF(tuple);
            PyErr_SetString(PyExc_TypeError, "a session takes opened qem files");
            return -1;
        }
    self->containers = tuple;
    self->products = calloc((size_t)n, sizeof *self->products);
    if (!self->products)
        return PyErr_NoMemory(), -1;
    ext_progress_init(&self->progress, NULL);
    /* Each file stays marked in use while the session holds its products. */
    for (Py_ssize_t k = 0; k < n; k++) {
        ext_container *c = (ext_container *)PyTuple_GET_ITEM(tuple, k);
        if (ext_container_enter(c) < 0)
            goto fail;
        self->count = k + 1;
        if (!(self->products[k] = ext_products_open(c, &self->progress)))
            goto fail;
    }
    ext_container *first = (ext_container *)PyTuple_GET_ITEM(tuple, 0);
    self->rows = first->info.shape[2];
    self->columns = first->info.shape[3];
    qem_error e = {0};
    if (qem_detector_session_create(self->products, (size_t)n, &self->session, &e) != QEM_OK ||
        qem_detector_session_keep(self->session, (uint64_t)keep_mib << 20, &e) != QEM_OK) {
        ext_raise(&e);
        goto fail;
    }
    return 0;
fail:
    session_release(self);
    return -1;
}

static int session_live(ext_session *self)
{
    if (!self->session) {
        PyErr_SetString(PyExc_ValueError, "the session is closed");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the session is in use by another thread");
        return -1;
    }
    return 0;
}

static PyObject *images(ext_session *self)
{
    PyObject *list = PyList_New(self->count);
    for (Py_ssize_t k = 0; list && k < self->count; k++) {
        qem_image im = {0};
        qem_error e = {0};
        PyObject *a = qem_detector_session_image(self->session, (size_t)k, &im, &e) == QEM_OK
                          ? ext_image_array(&im)
                          : ext_raise(&e);
        if (!a) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, k, a);
    }
    return list;
}

static PyObject *session_set_mask(ext_session *self, PyObject *args)
{
    PyObject *mask_obj;
    if (!PyArg_ParseTuple(args, "O:set_mask", &mask_obj) || session_live(self) < 0)
        return NULL;
    PyArrayObject *mask = ext_mask_array(mask_obj, self->rows, self->columns, "mask");
    if (!mask)
        return NULL;
    self->busy = 1;
    qem_error e = {0};
    qem_status st;
    const uint8_t *m = PyArray_DATA(mask);
    Py_BEGIN_ALLOW_THREADS
    st = qem_detector_session_set_mask(self->session, m, &e);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    Py_DECREF(mask);
    if (ext_progress_raise(&self->progress))
        return NULL;
    if (st != QEM_OK)
        return ext_raise(&e);
    return images(self);
}

static PyObject *session_images(ext_session *self, PyObject *noargs)
{
    (void)noargs;
    return session_live(self) < 0 ? NULL : images(self);
}

static PyObject *session_stats(ext_session *self, PyObject *noargs)
{
    (void)noargs;
    if (session_live(self) < 0)
        return NULL;
    qem_session_stats s = {.struct_size = sizeof s};
    qem_error e = {0};
    if (qem_detector_session_stats(self->session, &s, &e) != QEM_OK)
        return ext_raise(&e);
    return Py_BuildValue("{s:K, s:K, s:K, s:O, s:K, s:O, s:O, s:K, s:O}", "sources",
                         (unsigned long long)s.sources, "resident_bytes",
                         (unsigned long long)s.resident_bytes, "pixels_changed",
                         (unsigned long long)s.pixels_changed, "full_recomputation",
                         s.full_recomputation ? Py_True : Py_False, "ffts",
                         (unsigned long long)s.ffts, "from_kept",
                         s.from_kept ? Py_True : Py_False, "from_recorded",
                         s.from_recorded ? Py_True : Py_False, "complement_sources",
                         (unsigned long long)s.complement_sources, "from_cached",
                         s.from_cached ? Py_True : Py_False);
}

static PyObject *session_close(ext_session *self, PyObject *noargs)
{
    (void)noargs;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the session is in use by another thread");
        return NULL;
    }
    session_release(self);
    Py_RETURN_NONE;
}

static void session_dealloc(ext_session *self)
{
    session_release(self);
    ext_progress_clear(&self->progress);
    Py_XDECREF(self->containers);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef session_methods[] = {
    {"set_mask", (PyCFunction)session_set_mask, METH_VARARGS,
     "set_mask(mask) -> [image per file], all files updated or none."},
    {"images", (PyCFunction)session_images, METH_NOARGS, "The current images."},
    {"stats", (PyCFunction)session_stats, METH_NOARGS, "Counters of the last update."},
    {"close", (PyCFunction)session_close, METH_NOARGS, "Releases the session."},
    {NULL, NULL, 0, NULL}};

PyTypeObject ext_session_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "qem._qem.Session",
    .tp_basicsize = sizeof(ext_session),
    .tp_dealloc = (destructor)session_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A detector session (use File.session or qem.session).",
    .tp_methods = session_methods,
    .tp_init = (initproc)session_init,
    .tp_new = PyType_GenericNew,
};
