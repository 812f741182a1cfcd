/* Whole-file conversions between .npy and .qem, one chunk of scans at a
 * time so that memory stays bounded by the window, never the dataset. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/options.h"
#include "qem/qem_internal.h"

qem_status qem_save_npy(const char *source, const char *dest, const qem_save_options *options,
                        qem_error *error)
{
    qem_error_clear(error);
    if (!source || !dest)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_save_npy: NULL argument");
    qem_npy *npy = NULL;
    QEM_TRY(qem_npy_open(source, &npy, error));
    qem_npy_info info;
    qem_npy_get_info(npy, &info);
    qem_status st = QEM_OK;
    if (info.dtype == QEM_DTYPE_FLOAT32)
        st = qem_fail(error, QEM_E_NOT_YET,
                      "'%s' holds float32 values; saving float32 (float32-bit-lanes-rans-v1) is "
                      "not implemented yet. Exact uint8/uint16 counts are supported.",
                      source);
    else if (info.ndim != 4)
        st = qem_fail(error, QEM_E_NPY,
                      "'%s' has %u dimensions; qem saves 4D arrays (scan_row, scan_column, "
                      "detector_row, detector_column). Reshape a 3D frame stack with "
                      "array.reshape(rows, columns, height, width) first",
                      source, info.ndim);
    if (st != QEM_OK) {
        qem_npy_close(npy);
        return st;
    }
    qem_save_options local;
    qem_save_options_init(&local);
    st = qem_options_overlay(&local, sizeof local, options, "qem_save_options", error);
    if (st != QEM_OK) {
        qem_npy_close(npy);
        return st;
    }
    if (!local.source_format)
        local.source_format = "npy";
    qem_writer *w = NULL;
    st = qem_writer_create(dest, info.dtype, info.shape, &local, &w, error);
    const uint64_t pixels = info.shape[2] * info.shape[3];
    uint64_t next = 0;
    while (st == QEM_OK) {
        uint64_t room;
        void *window = qem_writer_window(w, &room);
        if (room == 0)
            break;
        st = qem_npy_read(npy, next * pixels, room * pixels, window, error);
        if (st == QEM_OK)
            st = qem_writer_commit(w, room, error);
        next += room;
    }
    if (st == QEM_OK)
        st = qem_writer_finish(w, error);
    qem_writer_free(w);
    qem_npy_close(npy);
    return st;
}

void qem_export_options_init(qem_export_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

qem_status qem_export_npy(qem_file *f, const char *dest, const qem_export_options *options,
                          qem_error *error)
{
    qem_error_clear(error);
    if (!f || !dest)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_export_npy: NULL argument");
    qem_export_options local;
    qem_export_options_init(&local);
    QEM_TRY(qem_options_overlay(&local, sizeof local, options, "qem_export_options", error));
    options = &local;
    if (f->codec != QEM_CODEC_INTEGER)
        return qem_fail(error, QEM_E_NOT_YET, "exporting %s is not implemented yet",
                        qem_codec_name(f->codec));
    uint64_t largest = 0;
    for (uint64_t i = 0; i < f->chunk_count; i++)
        largest = f->chunks[i].scans > largest ? f->chunks[i].scans : largest;
    const uint64_t bytes = qem_read_scans_bound(f, largest);
    uint8_t *buffer = malloc((size_t)bytes);
    if (!buffer)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %llu-byte chunk",
                        (unsigned long long)bytes);
    qem_npy_writer *out = NULL;
    qem_status st = qem_npy_writer_create(dest, f->dtype, 4, f->shape, &out, error);
    const int threads = options->threads ? options->threads : f->threads;
    for (uint64_t i = 0; i < f->chunk_count && st == QEM_OK; i++) {
        const qem_int_chunk *c = &f->chunks[i];
        st = qem_read_scans_threads(f, c->first, c->scans, buffer, (size_t)bytes, threads, error);
        if (st == QEM_OK)
            st = qem_npy_writer_append(out, buffer, c->scans * f->pixels, error);
        if (st == QEM_OK && options->progress &&
            options->progress(options->progress_user, c->first + c->scans, f->scans))
            st = qem_fail(error, QEM_E_CANCELLED, "export cancelled; nothing was written");
    }
    if (st == QEM_OK)
        st = qem_npy_writer_finish(out, error);
    qem_npy_writer_free(out);
    free(buffer);
    return st;
}
