/* record(url, dest, ...): qem_record_start, then this (the main) thread
 * waits in steps of a tenth of a second with the GIL released, so that
 * Ctrl-C and the caller's progress callable run here, in Python's main
 * thread; either one raising stops the recording, which publishes the
 * frames received before the exception is raised again. */
#include <time.h>

#include "ext.h"

static PyObject *progress_dict(const qem_record_progress *p)
{
    return Py_BuildValue("{s:K, s:K, s:K, s:K, s:K, s:d}", "expected",
                         (unsigned long long)p->expected, "received",
                         (unsigned long long)p->received, "encoded",
                         (unsigned long long)p->encoded, "queued", (unsigned long long)p->queued,
                         "spilled", (unsigned long long)p->spilled, "seconds", p->seconds);
}

static PyObject *result_dict(const char *dest, const qem_record_result *r)
{
    return Py_BuildValue("{s:s, s:O, s:O, s:K, s:K, s:K, s:(KKKK), s:d, s:d}", "path", dest,
                         "published", r->published ? Py_True : Py_False, "complete",
                         r->complete ? Py_True : Py_False, "expected",
                         (unsigned long long)r->expected, "received",
                         (unsigned long long)r->received, "spilled",
                         (unsigned long long)r->spilled, "shape", (unsigned long long)r->shape[0],
                         (unsigned long long)r->shape[1], (unsigned long long)r->shape[2],
                         (unsigned long long)r->shape[3], "seconds", r->seconds,
                         "publish_seconds", r->publish_seconds);
}

PyObject *ext_record(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self;
    static char *kw[] = {"url",         "dest",      "scan_shape",  "chunk_scans",
                         "threads",     "queue_bytes", "spill_dir", "connect_timeout_ms",
                         "idle_ms",     "calibration", "metadata",  "progress",
                         NULL};
    const char *url = NULL;
    PyObject *dest = NULL, *spill = Py_None, *progress = Py_None;
    unsigned long long rows = 0, columns = 0;
    unsigned int chunk_scans = 0;
    int threads = 0, connect_ms = 0, idle_ms = 0;
    uint64_t queue_bytes = 0;
    const char *calibration = NULL, *metadata = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO&|$(KK)O&O&O&OiizzO:record", kw, &url,
                                     PyUnicode_FSConverter, &dest, &rows, &columns, ext_u32_arg,
                                     &chunk_scans, ext_threads_arg, &threads, ext_u64_arg,
                                     &queue_bytes, &spill, &connect_ms, &idle_ms, &calibration,
                                     &metadata, &progress))
        return NULL;
    PyObject *spill_bytes = NULL;
    if (spill != Py_None && !PyUnicode_FSConverter(spill, &spill_bytes)) {
        Py_DECREF(dest);
        return NULL;
    }
    qem_record_options o;
    qem_record_options_init(&o);
    o.scan_shape[0] = rows;
    o.scan_shape[1] = columns;
    o.chunk_scans = chunk_scans;
    o.threads = threads;
    o.queue_bytes = queue_bytes;
    o.spill_dir = spill_bytes ? PyBytes_AS_STRING(spill_bytes) : NULL;
    o.connect_timeout_ms = connect_ms;
    o.idle_ms = idle_ms;
    o.calibration_json = calibration;
    o.metadata_json = metadata;
    const char *d = PyBytes_AS_STRING(dest);
    qem_error e = {0};
    qem_recorder *r = NULL;
    qem_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qem_record_start(url, d, &o, &r, &e);
    Py_END_ALLOW_THREADS
    Py_XDECREF(spill_bytes);
    if (st != QEM_OK) {
        Py_DECREF(dest);
        return ext_raise(&e);
    }
    PyObject *exc_type = NULL, *exc_value = NULL, *exc_tb = NULL;
    for (;;) {
        qem_record_progress p;
        Py_BEGIN_ALLOW_THREADS
        struct timespec pause = {0, 100 * 1000000L};
        nanosleep(&pause, NULL);
        qem_recorder_progress(r, &p);
        Py_END_ALLOW_THREADS
        if (!exc_type) {
            int stop = PyErr_CheckSignals() < 0;
            if (!stop && progress != Py_None) {
                PyObject *info = progress_dict(&p);
                PyObject *ret = info ? PyObject_CallOneArg(progress, info) : NULL;
                Py_XDECREF(info);
                stop = ret == NULL;
                Py_XDECREF(ret);
            }
            if (stop) {
                PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
                qem_recorder_stop(r);
            }
        }
        if (p.finished)
            break;
    }
    qem_record_result result = {.struct_size = sizeof result};
    Py_BEGIN_ALLOW_THREADS
    st = qem_recorder_wait(r, &result, &e);
    qem_recorder_free(r);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (exc_type)
        PyErr_Restore(exc_type, exc_value, exc_tb);
    else if (st != QEM_OK)
        ext_raise(&e);
    else
        out = result_dict(d, &result);
    Py_DECREF(dest);
    return out;
}
