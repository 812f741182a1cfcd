/* Opening any source by its signature and serving it through the
 * representation interface. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/identify.h"
#include "common/options.h"
#include "common/threads.h"
#include "common/representation.h"
#include "pack/pack_internal.h"
#include "qem/packed_copy.h"
#include "qem/qem_internal.h"

void qem_container_options_init(qem_container_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

qem_status qem_container_open(const char *path, const qem_container_options *options,
                           qem_container **out, qem_error *error)
{
    qem_error_clear(error);
    if (!path || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_container_open: NULL argument");
    *out = NULL;
    qem_container_options o;
    qem_container_options_init(&o);
    QEM_TRY(qem_options_overlay(&o, sizeof o, options, "qem_container_options", error));
    QEM_TRY(qem_threads_check(o.threads, "qem_container_options.threads", error));
    if (o.load != QEM_LOAD_ON_OPEN && o.load != QEM_LOAD_LATER && o.load != QEM_LOAD_AWAITED)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_container_options.load must be QEM_LOAD_ON_OPEN, QEM_LOAD_LATER or "
                        "QEM_LOAD_AWAITED, not %d", (int)o.load);
    /* The path is opened once: identified, then read, through one
     * descriptor, so what was identified is what is read. */
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(path, &fd, &sb, error));
    qem_file_kind kind;
    qem_status st = qem_identify_fd(fd, (uint64_t)sb.st_size, &kind, error);
    if (st != QEM_OK) {
        close(fd);
        return st;
    }
    if (!qem_file_kind_is_container(kind)) {
        close(fd);
        return qem_fail(error, QEM_E_NOT_QEM,
                        "'%s' is neither a .qem file nor a Lossless Pack Format v1 file (it is %s)",
                        path,
                        kind == QEM_KIND_NPY    ? "a .npy array: qem save or qem pack produce it first"
                        : kind == QEM_KIND_HDF5 ? "an HDF5 file without a pack index: qem pack "
                                                  "produce it first"
                                                : "not a format qem reads");
    }
    qem_container *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    s->threads = o.threads;
    if (o.expect_sha256) {
        /* Kept for a later load; a malformed one is refused where it is checked. */
        if (!(s->expect_sha256 = strdup(o.expect_sha256))) {
            close(fd);
            free(s);
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        }
        o.expect_sha256 = s->expect_sha256;
    }
    s->options = o;
    if (kind == QEM_KIND_PACK) {
        qem_pack *p = NULL;
        st = qem_pack_open_descriptor(path, fd, &sb, &p, error);
        if (st == QEM_OK && o.load == QEM_LOAD_ON_OPEN)
            st = qem_pack_representation.load(p, &s->options, error);
        if (st == QEM_OK && o.load == QEM_LOAD_AWAITED)
            qem_pack_await_load(p);
        s->ops = &qem_pack_representation;
        s->impl = p;
        if (st != QEM_OK)
            qem_pack_close(p);
    } else {
        qem_file *f = NULL;
        qem_open_options oo;
        qem_open_options_init(&oo);
        oo.threads = o.threads;
        oo.expect_sha256 = o.expect_sha256;
        oo.body_check = o.body_check;
        oo.resident = o.resident;
        oo.column_cache_bytes = o.column_cache_bytes;
        oo.progress = o.progress;
        oo.progress_user = o.progress_user;
        st = qem_open_descriptor(path, fd, &sb, &oo, NULL, &f, error);
        s->ops = &qem_file_representation;
        s->impl = f;
    }
    if (st != QEM_OK) {
        free(s->expect_sha256);
        free(s);
        return st;
    }
    *out = s;
    return QEM_OK;
}

void qem_container_close(qem_container *s)
{
    if (!s)
        return;
    s->ops->close(s->impl);
    free(s->expect_sha256);
    free(s);
}

qem_status qem_container_get_info(const qem_container *s, qem_container_info *out, qem_error *error)
{
    qem_error_clear(error);
    if (!s)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_container_get_info: NULL source");
    qem_container_info info;
    memset(&info, 0, sizeof info);
    s->ops->describe(s->impl, &info);
    return qem_result_deliver(out, &info, sizeof info, "qem_container_info", error);
}

const char *qem_container_header_json(const qem_container *s, size_t *length)
{
    if (!s) {
        if (length)
            *length = 0;
        return NULL;
    }
    return s->ops->header_json(s->impl, length);
}

char *qem_container_summary_json(const qem_container *s, qem_error *error)
{
    qem_error_clear(error);
    if (!s) {
        qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_container_summary_json: NULL source");
        return NULL;
    }
    return s->ops->summary_json(s->impl, error);
}

const char *qem_file_kind_name(qem_file_kind kind)
{
    switch (kind) {
    case QEM_KIND_QEM: return "qem";
    case QEM_KIND_PACK: return "pack";
    case QEM_KIND_NPY: return "npy";
    case QEM_KIND_HDF5: return "hdf5";
    default: return "unknown";
    }
}

int qem_file_kind_is_container(qem_file_kind kind)
{
    return kind == QEM_KIND_QEM || kind == QEM_KIND_PACK;
}

const char *qem_file_kind_extensions(qem_file_kind kind)
{
    switch (kind) {
    case QEM_KIND_QEM: return "qem";
    case QEM_KIND_PACK:
    case QEM_KIND_HDF5: return "h5|hdf5";
    case QEM_KIND_NPY: return "npy";
    default: return "";
    }
}
/* The container is a .qem file (not a pack, nor a recording in progress,
 * whose representation also reports QEM_KIND_QEM). */
static int is_qem_file(const qem_container *s)
{
    return s && s->ops == &qem_file_representation;
}

qem_status qem_container_get_calibration(const qem_container *s, qem_calibration *out,
                                         qem_error *error)
{
    qem_error_clear(error);
    if (!s)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_container_get_calibration: NULL source");
    if (!is_qem_file(s))
        return qem_fail(error, QEM_E_NOT_RECORDED,
                        "a %s records no microscope calibration (a .qem file's scientific "
                        "metadata holds it)",
                        s->ops->kind == QEM_KIND_PACK ? qem_file_kind_name(s->ops->kind)
                                                      : "recording in progress");
    return qem_get_calibration(s->impl, out, error);
}

char *qem_container_details_json(const qem_container *s, qem_error *error)
{
    qem_error_clear(error);
    if (!s) {
        qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_container_details_json: NULL source");
        return NULL;
    }
    return s->ops->details_json(s->impl, error);
}

qem_status qem_container_load(qem_container *s, qem_error *error)
{
    qem_error_clear(error);
    if (!s)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_container_load: NULL source");
    return s->ops->load ? s->ops->load(s->impl, &s->options, error) : QEM_OK;
}

qem_status qem_container_verify(qem_container *s, const qem_verify_options *options,
                                qem_verify_report *out, qem_error *error)
{
    qem_error_clear(error);
    if (!s)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_container_verify: NULL source");
    qem_verify_options vo;
    qem_verify_options_init(&vo);
    QEM_TRY(qem_options_overlay(&vo, sizeof vo, options, "qem_verify_options", error));
    QEM_TRY(qem_threads_check(vo.threads, "qem_verify_options.threads", error));
    qem_verify_report report;
    memset(&report, 0, sizeof report);
    report.struct_size = sizeof report;
    QEM_TRY(s->ops->verify(s->impl, &s->options, &vo, &report, error));
    if (s->options.expect_sha256) {
        report.identity_checked = 1;
        const size_t used = strlen(report.summary);
        snprintf(report.summary + used, sizeof report.summary - used,
                 ", whole-file identity verified");
    }
    return out ? qem_result_deliver(out, &report, sizeof report, "qem_verify_report", error)
               : QEM_OK;
}

qem_status qem_container_time_first_access(qem_container *s, qem_error *error)
{
    qem_error_clear(error);
    if (!s)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_container_time_first_access: NULL source");
    if (!s->ops->time_first_access)
        return qem_fail(error, QEM_E_WRONG_CODEC,
                        "first-access timings apply to formats with a load phase (packs)");
    return s->ops->time_first_access(s->impl, error);
}

void qem_container_pattern_cache_stats(const qem_container *s, uint64_t *hits, uint64_t *misses)
{
    const qem_file *f = is_qem_file(s) ? s->impl : NULL;
    *hits = f ? atomic_load(&f->pattern_hits) : 0;
    *misses = f ? atomic_load(&f->pattern_misses) : 0;
}

qem_status qem_container_column_cache_stats(const qem_container *s, qem_column_cache_stats *out,
                                            qem_error *error)
{
    qem_error_clear(error);
    if (!s || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_container_column_cache_stats: NULL argument");
    qem_column_cache_stats stats;
    memset(&stats, 0, sizeof stats);
    qem_file *f = is_qem_file(s) ? s->impl : NULL;
    if (f)
        qem_column_cache_read_stats(&f->columns, &stats.hits, &stats.misses, &stats.columns,
                                    &stats.bytes, &stats.limit);
    return qem_result_deliver(out, &stats, sizeof stats, "qem_column_cache_stats", error);
}

qem_status qem_container_build_packed_copy(qem_container *s, uint64_t limit_bytes, int threads,
                                           qem_progress_fn progress, void *progress_user,
                                           qem_error *error)
{
    qem_error_clear(error);
    if (!s)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_container_build_packed_copy: NULL argument");
    if (!is_qem_file(s))
        return qem_fail(error, QEM_E_WRONG_CODEC,
                        "only .qem sources have a packed copy (a pack's resident is one)");
    return qem_packed_copy_build(s->impl, limit_bytes, threads, progress, progress_user, error);
}

qem_status qem_container_packed_copy_stats(const qem_container *s, qem_packed_copy_stats *out,
                                           qem_error *error)
{
    qem_error_clear(error);
    if (!s || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_container_packed_copy_stats: NULL argument");
    qem_packed_copy_stats stats;
    memset(&stats, 0, sizeof stats);
    const qem_packed_copy *c = is_qem_file(s) ? qem_packed_copy_of(s->impl) : NULL;
    if (c) {
        stats.ready = 1;
        stats.bytes = c->bytes;
        stats.build_ms = c->build_ms;
    }
    return qem_result_deliver(out, &stats, sizeof stats, "qem_packed_copy_stats", error);
}

qem_file *qem_container_file(qem_container *s)
{
    return is_qem_file(s) ? s->impl : NULL;
}

qem_pack *qem_container_pack(qem_container *s)
{
    return s && s->ops->kind == QEM_KIND_PACK ? s->impl : NULL;
}

uint64_t qem_container_read_bound(const qem_container *s, qem_values values, uint64_t scans)
{
    qem_container_info info;
    memset(&info, 0, sizeof info);
    s->ops->describe(s->impl, &info);
    return qem_bytes_bound(scans, info.pixels,
                           qem_dtype_size(values == QEM_VALUES_RAW ? info.raw_dtype
                                                                   : info.working_dtype));
}

qem_status qem_container_read(qem_container *s, uint64_t first, uint64_t count, qem_values values,
                           void *out, size_t out_size, qem_error *error)
{
    qem_error_clear(error);
    if (!s)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_container_read: NULL source");
    return s->ops->read(s->impl, first, count, values, out, out_size, s->threads, error);
}

static qem_status export_npy_body(qem_container *s, const char *dest,
                                  const qem_export_options *options, qem_error *error)
{
    qem_error_clear(error);
    if (!s || !dest)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_container_export_npy: NULL argument");
    qem_export_options o;
    qem_export_options_init(&o);
    QEM_TRY(qem_options_overlay(&o, sizeof o, options, "qem_export_options", error));
    QEM_TRY(qem_threads_check(o.threads, "qem_export_options.threads", error));
    if (o.values != QEM_VALUES_WORKING && o.values != QEM_VALUES_RAW)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_export_options.values must be QEM_VALUES_WORKING or QEM_VALUES_RAW");
    if (!o.threads)
        o.threads = s->threads;
    if (s->ops->export_npy)
        return s->ops->export_npy(s->impl, dest, &o, error);
    const qem_values values = o.values;
    qem_container_info info;
    memset(&info, 0, sizeof info);
    s->ops->describe(s->impl, &info);
    const qem_dtype dtype = values == QEM_VALUES_RAW ? info.raw_dtype : info.working_dtype;
    if (values == QEM_VALUES_RAW && !info.has_raw) {
        /* Let the container say why, before any file exists. */
        uint8_t probe[8];
        QEM_TRY(s->ops->read(s->impl, 0, 0, values, probe, 0, o.threads, error));
    }
    uint64_t largest = 0;
    for (uint64_t at = 0; at < info.scans;) {
        uint64_t n = s->ops->window(s->impl, at);
        largest = n > largest ? n : largest;
        at += n;
    }
    const size_t bytes = (size_t)(largest * info.pixels * qem_dtype_size(dtype));
    uint8_t *buffer = malloc(bytes ? bytes : 1);
    if (!buffer)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %zu-byte window", bytes);
    qem_npy_writer *w = NULL;
    qem_status st = qem_npy_writer_create(dest, dtype, 4, info.shape, &w, error);
    for (uint64_t at = 0; st == QEM_OK && at < info.scans;) {
        const uint64_t n = s->ops->window(s->impl, at);
        st = s->ops->read(s->impl, at, n, values, buffer, bytes, o.threads, error);
        if (st == QEM_OK)
            st = qem_npy_writer_append(w, buffer, n * info.pixels, error);
        at += n;
        if (st == QEM_OK && o.progress && o.progress(o.progress_user, at, info.scans))
            st = qem_fail(error, QEM_E_CANCELLED, "export cancelled; nothing was written");
    }
    if (st == QEM_OK)
        st = qem_npy_writer_finish(w, error);
    qem_npy_writer_free(w);
    free(buffer);
    return st;
}

qem_status qem_container_export_npy(qem_container *s, const char *dest,
                                    const qem_export_options *options, qem_error *error)
{
    const qem_status st = export_npy_body(s, dest, options, error);
    qem_error_name_destination(error, dest);
    return st;
}
