/* The qem._qem extension: CPython and numpy C APIs over libqem. Shared
 * declarations of its parts: errors and progress (module.c), opened files
 * and their products (container.c), detector sessions (session.c), the
 * streaming writer (writer.c), acquisitions, convert and pack
 * production (acquire.c), and live recording (record.c). Every call into
 * libqem that can take time runs with the GIL released. */
#ifndef QEM_EXT_H
#define QEM_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL qem_ext_ARRAY_API
#ifndef QEM_EXT_MODULE
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include "qem.h"
#include "qem_experimental.h"

/* --- errors (module.c) ---------------------------------------------------- */

/* Raises the qem.Error subclass of e->status with e->message; returns NULL. */
PyObject *ext_raise(const qem_error *e);
int ext_errors_init(void);

/* --- progress and Ctrl-C (module.c) --------------------------------------- */

/* One long call's progress: a Python callable (or None) called with
 * (done, total), and Ctrl-C seen through PyErr_CheckSignals. Either one
 * raising cancels the call; the exception is kept and raised again when
 * the call returns (ext_progress_raise). The library may call from any of
 * its threads: the GIL is taken for each call. */
typedef struct ext_progress {
    PyObject *callback; /* borrowed; NULL: signals only */
    PyObject *exc_type, *exc_value, *exc_tb;
} ext_progress;

void ext_progress_init(ext_progress *p, PyObject *callback);
int ext_progress_fn(void *user, uint64_t done, uint64_t total);
/* After a call: 1 with the kept exception raised (and *p cleared), else 0. */
int ext_progress_raise(ext_progress *p);
void ext_progress_clear(ext_progress *p);

/* --- helpers (module.c) ---------------------------------------------------- */

/* A numpy dtype number of a qem dtype (-1 for none). */
int ext_npy_type(qem_dtype dtype);
/* A qem_image as a numpy array that owns its buffer (the image is moved). */
PyObject *ext_image_array(qem_image *image);
/* A contiguous uint8 mask of the detector's shape from any array-like
 * (bool or 0/1 integers of that shape) or from the path (str or bytes) of
 * a .npy mask, read by the library as the CLI reads one; a new reference
 * or NULL. */
PyArrayObject *ext_mask_array(PyObject *mask, uint64_t rows, uint64_t columns, const char *what);
/* A Python str from a library string returned for qem_free. */
PyObject *ext_take_string(char *text, const qem_error *e);

/* PyArg "O&" converters for integer arguments: the "K", "I" and "i"
 * formats would wrap a negative or too large value around (or truncate
 * it) on its way into the library; these refuse it instead. The package
 * names each argument and its range before calling (qem/_args.py); these
 * are the extension's own guard. */
int ext_u64_arg(PyObject *obj, void *out);     /* uint64_t */
int ext_u32_arg(PyObject *obj, void *out);     /* unsigned int, at most UINT32_MAX */
int ext_threads_arg(PyObject *obj, void *out); /* int, 0 to QEM_MAX_THREADS */

/* --- types ------------------------------------------------------------------ */

typedef struct ext_container {
    PyObject_HEAD
    qem_container *container;
    qem_container_info info;
    PyObject *path;
    int threads;
    char *cache_dir; /* products' cache_dir, or NULL */
    qem_origin sums_origin; /* of the last product that needed whole-file sums */
    qem_origin last_origin; /* of the sums behind the last product (recorded: prepared values) */
    qem_values values;
    int busy; /* calls in flight (the GIL released); close waits for none */
} ext_container;

extern PyTypeObject ext_container_type;
extern PyTypeObject ext_session_type;
extern PyTypeObject ext_writer_type;

/* Marks a call in flight (0), or raises if the file was closed (-1). */
int ext_container_enter(ext_container *c);
void ext_container_leave(ext_container *c);
/* A products handle over `c` for one call; NULL with the error raised. */
qem_products *ext_products_open(ext_container *c, ext_progress *progress);

/* Module-level functions of acquire.c. */
PyObject *ext_save_file(PyObject *self, PyObject *args, PyObject *kwargs);
/* record.c: a detector's live stream into a .qem. */
PyObject *ext_record(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *ext_inspect(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *ext_pack_inspect(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *ext_pack_produce(PyObject *self, PyObject *args, PyObject *kwargs);
/* writer.c: the two halves of a distributed save's encoding. */
PyObject *ext_save_chunks(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *ext_encode_scans(PyObject *self, PyObject *args, PyObject *kwargs);

#endif
