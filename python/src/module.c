/* qem._qem: the module, its errors, progress and Ctrl-C, and the small
 * conversions every part uses. */
#define QEM_EXT_MODULE
#include "ext.h"

#include <string.h>

/* --- errors ------------------------------------------------------------------ */

/* qem._errors.from_status(status, group, reason, message): the Python side
 * owns the classes and their mapping (one place, with docstrings). */
static PyObject *error_factory;

int ext_errors_init(void)
{
    PyObject *mod = PyImport_ImportModule("qem._errors");
    if (!mod)
        return -1;
    error_factory = PyObject_GetAttrString(mod, "from_status");
    Py_DECREF(mod);
    return error_factory ? 0 : -1;
}

PyObject *ext_raise(const qem_error *e)
{
    const qem_status st = e ? e->status : QEM_E_INVALID_ARGUMENT;
    const char *message = e && e->message[0] ? e->message : qem_strerror(st);
    PyObject *exc = PyObject_CallFunction(error_factory, "isss", (int)st,
                                          qem_status_group_name(qem_status_group_of(st)),
                                          qem_strerror(st), message);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* --- progress and Ctrl-C --------------------------------------------------------- */

void ext_progress_init(ext_progress *p, PyObject *callback)
{
    memset(p, 0, sizeof *p);
    p->callback = callback == Py_None ? NULL : callback;
}

int ext_progress_fn(void *user, uint64_t done, uint64_t total)
{
    ext_progress *p = user;
    PyGILState_STATE gil = PyGILState_Ensure();
    int stop = p->exc_type != NULL;
    if (!stop && PyErr_CheckSignals() < 0) {
        stop = 1;
    } else if (!stop && p->callback) {
        PyObject *r = PyObject_CallFunction(p->callback, "KK", (unsigned long long)done,
                                            (unsigned long long)total);
        if (r)
            Py_DECREF(r);
        else
            stop = 1;
    }
    if (stop && !p->exc_type && PyErr_Occurred())
        PyErr_Fetch(&p->exc_type, &p->exc_value, &p->exc_tb);
    PyGILState_Release(gil);
    return stop;
}

int ext_progress_raise(ext_progress *p)
{
    if (!p->exc_type)
        return 0;
    PyErr_Restore(p->exc_type, p->exc_value, p->exc_tb);
    p->exc_type = p->exc_value = p->exc_tb = NULL;
    return 1;
}

void ext_progress_clear(ext_progress *p)
{
    Py_CLEAR(p->exc_type);
    Py_CLEAR(p->exc_value);
    Py_CLEAR(p->exc_tb);
}

/* --- conversions ------------------------------------------------------------------ */

int ext_npy_type(qem_dtype dtype)
{
    switch (dtype) {
    case QEM_DTYPE_UINT8: return NPY_UINT8;
    case QEM_DTYPE_UINT16: return NPY_UINT16;
    case QEM_DTYPE_FLOAT32: return NPY_FLOAT32;
    case QEM_DTYPE_UINT32: return NPY_UINT32;
    case QEM_DTYPE_UINT64: return NPY_UINT64;
    case QEM_DTYPE_FLOAT64: return NPY_FLOAT64;
    default: return -1;
    }
}

static void image_capsule_free(PyObject *capsule)
{
    qem_image *im = PyCapsule_GetPointer(capsule, "qem.image");
    qem_image_free(im);
    PyMem_Free(im);
}

PyObject *ext_image_array(qem_image *image)
{
    npy_intp dims[3] = {0, 0, 0};
    for (unsigned k = 0; k < image->ndim && k < 3; k++)
        dims[k] = (npy_intp)image->shape[k];
    const int type = ext_npy_type(image->dtype);
    if (type < 0 || image->ndim < 1 || image->ndim > 3) {
        qem_image_free(image);
        PyErr_SetString(PyExc_RuntimeError, "qem: a product of an unknown type");
        return NULL;
    }
    if (!image->data) {
        qem_image_free(image);
        return PyArray_ZEROS((int)image->ndim, dims, type, 0);
    }
    qem_image *kept = PyMem_Malloc(sizeof *kept);
    if (!kept) {
        qem_image_free(image);
        return PyErr_NoMemory();
    }
    *kept = *image;
    image->data = NULL;
    PyObject *array = PyArray_SimpleNewFromData((int)kept->ndim, dims, type, kept->data);
    PyObject *capsule = array ? PyCapsule_New(kept, "qem.image", image_capsule_free) : NULL;
    if (!capsule) {
        Py_XDECREF(array);
        qem_image_free(kept);
        PyMem_Free(kept);
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)array, capsule) < 0) {
        Py_DECREF(array);
        return NULL;
    }
    return array;
}

/* A .npy mask file, by the library's rules (bool or uint8, 0/1 only). */
static PyArrayObject *mask_from_npy(PyObject *path, uint64_t rows, uint64_t columns)
{
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(path, &bytes))
        return NULL;
    npy_intp dims[2] = {(npy_intp)rows, (npy_intp)columns};
    PyArrayObject *out = (PyArrayObject *)PyArray_ZEROS(2, dims, NPY_UINT8, 0);
    if (out) {
        qem_error e = {0};
        qem_status st;
        const char *p = PyBytes_AS_STRING(bytes);
        uint8_t *m = PyArray_DATA(out);
        Py_BEGIN_ALLOW_THREADS
        st = qem_npy_read_mask(p, rows, columns, m, (size_t)(rows * columns), &e);
        Py_END_ALLOW_THREADS
        if (st != QEM_OK) {
            Py_CLEAR(out);
            ext_raise(&e);
        }
    }
    Py_DECREF(bytes);
    return out;
}

PyArrayObject *ext_mask_array(PyObject *mask, uint64_t rows, uint64_t columns, const char *what)
{
    if (PyUnicode_Check(mask) || PyBytes_Check(mask))
        return mask_from_npy(mask, rows, columns);
    PyArrayObject *in = (PyArrayObject *)PyArray_FROM_OF(mask, NPY_ARRAY_ALIGNED);
    if (!in)
        return NULL;
    const int type = PyArray_TYPE(in);
    if (type != NPY_BOOL && !PyTypeNum_ISINTEGER(type)) {
        /* Say what is taken: "not numpy.str_" alone (a path made an
         * array) does not. */
        PyErr_Format(PyExc_TypeError,
                     "%s must be booleans or 0/1 integers of the detector's shape (%llu, %llu), "
                     "not an array of %s",
                     what, (unsigned long long)rows, (unsigned long long)columns,
                     PyArray_DESCR(in)->typeobj->tp_name);
        Py_DECREF(in);
        return NULL;
    }
    if (PyArray_NDIM(in) != 2 || (uint64_t)PyArray_DIM(in, 0) != rows ||
        (uint64_t)PyArray_DIM(in, 1) != columns) {
        PyErr_Format(PyExc_ValueError, "%s must have the detector's shape (%llu, %llu)", what,
                     (unsigned long long)rows, (unsigned long long)columns);
        Py_DECREF(in);
        return NULL;
    }
    PyArrayObject *out = (PyArrayObject *)PyArray_FROM_OTF((PyObject *)in, NPY_UINT8,
                                                           NPY_ARRAY_C_CONTIGUOUS |
                                                               NPY_ARRAY_FORCECAST |
                                                               NPY_ARRAY_ENSURECOPY);
    if (out && type != NPY_BOOL) {
        /* 0/1 only: a weight of 2 is not a detector mask. */
        PyArrayObject *flat = (PyArrayObject *)PyArray_FROM_OTF((PyObject *)in, NPY_INT64,
                                                                NPY_ARRAY_C_CONTIGUOUS |
                                                                    NPY_ARRAY_FORCECAST);
        const int64_t *v = flat ? PyArray_DATA(flat) : NULL;
        for (npy_intp k = 0; v && k < PyArray_SIZE(flat); k++)
            if (v[k] != 0 && v[k] != 1) {
                PyErr_Format(PyExc_ValueError,
                             "%s holds %lld at pixel (%lld, %lld); a mask holds 0 and 1 only",
                             what, (long long)v[k], (long long)(k / (npy_intp)columns),
                             (long long)(k % (npy_intp)columns));
                Py_CLEAR(out);
                break;
            }
        if (!flat)
            Py_CLEAR(out);
        Py_XDECREF(flat);
    }
    Py_DECREF(in);
    return out;
}

static int index_of(PyObject *obj, PyObject **out)
{
    if (PyBool_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "an integer is required, not a bool");
        return 0;
    }
    *out = PyNumber_Index(obj);
    return *out != NULL;
}

int ext_u64_arg(PyObject *obj, void *out)
{
    PyObject *n;
    if (!index_of(obj, &n))
        return 0;
    const unsigned long long v = PyLong_AsUnsignedLongLong(n); /* OverflowError if < 0 */
    Py_DECREF(n);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return 0;
    *(uint64_t *)out = v;
    return 1;
}

int ext_u32_arg(PyObject *obj, void *out)
{
    uint64_t v;
    if (!ext_u64_arg(obj, &v))
        return 0;
    if (v > UINT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "%llu is more than %lu", (unsigned long long)v,
                     (unsigned long)UINT32_MAX);
        return 0;
    }
    *(unsigned int *)out = (unsigned int)v;
    return 1;
}

int ext_threads_arg(PyObject *obj, void *out)
{
    PyObject *n;
    if (!index_of(obj, &n))
        return 0;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(n, &overflow);
    Py_DECREF(n);
    if (v == -1 && PyErr_Occurred())
        return 0;
    if (overflow || v < 0 || v > QEM_MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "threads must be an integer from 0 to %d (0: every core)",
                     QEM_MAX_THREADS);
        return 0;
    }
    *(int *)out = (int)v;
    return 1;
}

PyObject *ext_take_string(char *text, const qem_error *e)
{
    if (!text)
        return ext_raise(e);
    PyObject *s = PyUnicode_FromString(text);
    qem_free(text);
    return s;
}

/* --- module functions -------------------------------------------------------------- */

static PyObject *ext_identify(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *path_obj;
    if (!PyArg_ParseTuple(args, "O&:identify", PyUnicode_FSConverter, &path_obj))
        return NULL;
    qem_error e = {0};
    qem_file_kind kind = QEM_KIND_UNKNOWN;
    qem_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qem_identify(PyBytes_AS_STRING(path_obj), &kind, &e);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    if (st != QEM_OK)
        return ext_raise(&e);
    static const char *const names[] = {"unknown", "qem", "pack", "npy", "hdf5"};
    return PyUnicode_FromString((unsigned)kind < 5 ? names[kind] : "unknown");
}

static PyObject *ext_version(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyUnicode_FromString(qem_version());
}

static PyObject *ext_strerror(PyObject *self, PyObject *args)
{
    (void)self;
    int status;
    if (!PyArg_ParseTuple(args, "i:strerror", &status))
        return NULL;
    return PyUnicode_FromString(qem_strerror((qem_status)status));
}

static PyMethodDef module_methods[] = {
    {"identify", ext_identify, METH_VARARGS,
     "identify(path) -> 'qem' | 'pack' | 'npy' | 'hdf5' | 'unknown', by signature."},
    {"version", ext_version, METH_NOARGS, "The version of the linked libqem."},
    {"strerror", ext_strerror, METH_VARARGS, "strerror(status) -> the status's description."},
    {"save_file", (PyCFunction)(void (*)(void))ext_save_file, METH_VARARGS | METH_KEYWORDS,
     "save_file(src, dest, **options): qem_save_file."},
    {"inspect", (PyCFunction)(void (*)(void))ext_inspect, METH_VARARGS | METH_KEYWORDS,
     "inspect(src, **options) -> JSON text describing any acquisition."},
    {"pack_inspect", (PyCFunction)(void (*)(void))ext_pack_inspect, METH_VARARGS | METH_KEYWORDS,
     "pack_inspect(src, **options) -> JSON text of the pack producer's inspection."},
    {"pack_produce", (PyCFunction)(void (*)(void))ext_pack_produce, METH_VARARGS | METH_KEYWORDS,
     "pack_produce(src, dest, **options): inspect, plan and produce a pack."},
    {"save_chunks", (PyCFunction)(void (*)(void))ext_save_chunks, METH_VARARGS | METH_KEYWORDS,
     "save_chunks(dtype, shape, chunk_scans=0, valid=None) -> first scan of every chunk."},
    {"encode_scans", (PyCFunction)(void (*)(void))ext_encode_scans, METH_VARARGS | METH_KEYWORDS,
     "encode_scans(dtype, shape, first_scan, block, ...) -> one encoded chunk (bytes)."},
    {"record", (PyCFunction)(void (*)(void))ext_record, METH_VARARGS | METH_KEYWORDS,
     "record(url, dest, **options) -> dict: qem_record_start and qem_recorder_wait."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "qem._qem",
    "The C extension of the qem package: libqem through the CPython and numpy C APIs. "
    "Use the qem package, not this module.",
    -1, module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__qem(void)
{
    import_array();
    if (ext_errors_init() < 0)
        return NULL;
    if (PyType_Ready(&ext_container_type) < 0 || PyType_Ready(&ext_session_type) < 0 ||
        PyType_Ready(&ext_writer_type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Container", (PyObject *)&ext_container_type) < 0 ||
        PyModule_AddObjectRef(m, "Session", (PyObject *)&ext_session_type) < 0 ||
        PyModule_AddObjectRef(m, "Writer", (PyObject *)&ext_writer_type) < 0 ||
        PyModule_AddStringConstant(m, "LIBRARY_VERSION", qem_version()) < 0 ||
        PyModule_AddIntConstant(m, "MAX_THREADS", QEM_MAX_THREADS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
