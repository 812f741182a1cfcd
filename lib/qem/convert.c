/* Whole-file conversions of .qem files, one chunk of scans at a time so
 * that memory stays bounded by the window, never the dataset: re-saving a
 * .qem, exporting to .npy, and reading dark recipes. (Saving an
 * acquisition is the input layer's: lib/input/save.c.) */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/npy.h"
#include "common/json.h"
#include "common/options.h"
#include "common/sha256.h"
#include "qem/qem_internal.h"

typedef struct resave_source {
    qem_file *file;
    qem_output kind;
    int threads;
} resave_source;

static qem_status fill_from_qem(void *source, uint64_t first, uint64_t count, void *window,
                                qem_error *error)
{
    resave_source *s = source;
    size_t bytes = (size_t)(count * s->file->pixels * qem_output_item(s->file, s->kind));
    return qem_read_into(s->file, first, count, s->kind, window, bytes, s->threads, error);
}

/* The .qem being re-saved is the file qem_open validated, unchanged. */
static qem_status settle_qem(void *source, qem_writer *w, qem_error *error)
{
    (void)w;
    const resave_source *s = source;
    return qem_file_stamp_check(s->file->fd, &s->file->stamp, s->file->path, "saved", error);
}

static char *dump_member(const json_t *header, const char *key)
{
    const json_t *v = json_object_get(header, key);
    return v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
}

/* Re-saves a .qem file with its own codec, data and metadata. */
qem_status qem_resave_file(const char *source, const char *dest, const qem_save_options *options,
                           qem_error *error)
{
    qem_file *f = NULL;
    QEM_TRY(qem_open(source, NULL, &f, error));
    qem_save_options local = *options;
    char *kept[5] = {NULL};
    if (!local.scientific_metadata_json)
        local.scientific_metadata_json = kept[0] = dump_member(f->header, "scientific_metadata");
    if (!local.metadata_json)
        local.metadata_json = kept[1] = dump_member(f->header, "metadata");
    qem_dtype dtype = f->dtype;
    resave_source src = {f, QEM_OUTPUT_NATIVE, options->threads};
    if (f->codec == QEM_CODEC_INTEGER) {
        if (!local.valid)
            local.valid = f->valid;
    } else if (f->codec == QEM_CODEC_FLOAT32) {
        if (!local.empad_json)
            local.empad_json = kept[2] = dump_member(f->header, "empad");
    } else {
        dtype = QEM_DTYPE_UINT16;
        src.kind = QEM_OUTPUT_CODES;
        local.intensity_calibration_json = kept[3] = dump_member(f->header, "intensity_calibration");
        if (!local.attributes_json)
            local.attributes_json = kept[4] = dump_member(f->header, "attributes");
    }
    qem_writer *w = NULL;
    qem_status st = qem_writer_create(dest, dtype, f->shape, &local, &w, error);
    if (st == QEM_OK)
        st = qem_writer_pump(w, &src, fill_from_qem, settle_qem, 0, error);
    qem_writer_free(w);
    for (int i = 0; i < 5; i++)
        free(kept[i]);
    qem_close(f);
    return st;
}

qem_status qem_dark_from_npy(const char *path, uint64_t rows, uint64_t columns, float *plane,
                             size_t plane_size, char *identity, size_t identity_size,
                             qem_error *error)
{
    qem_error_clear(error);
    if (!path || !plane || !identity)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_dark_from_npy: NULL argument");
    if (identity_size < 65 || (rows && columns > plane_size / sizeof *plane / rows))
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                        "qem_dark_from_npy: the plane needs %llu bytes and the identity 65",
                        (unsigned long long)(rows * columns * sizeof *plane));
    qem_npy *npy = NULL;
    QEM_TRY(qem_npy_open(path, &npy, error));
    qem_npy_info info = *qem_npy_info_of(npy);
    const uint64_t P = rows * columns;
    const int stack = info.ndim == 3;
    qem_status st = QEM_OK;
    if ((info.ndim != 2 && info.ndim != 3) || info.shape[info.ndim - 2] != rows ||
        info.shape[info.ndim - 1] != columns || (stack && info.shape[0] == 0))
        st = qem_fail(error, QEM_E_NPY,
                      "dark '%s' must be a %llux%llu float32 plane or a stack of such frames",
                      path, (unsigned long long)rows, (unsigned long long)columns);
    else if (!stack && info.dtype != QEM_DTYPE_FLOAT32)
        st = qem_fail(error, QEM_E_NPY, "a dark plane must be float32, not %s", info.descr);
    if (st != QEM_OK) {
        qem_npy_close(npy);
        return st;
    }
    const size_t item = qem_dtype_size(info.dtype);
    const uint64_t frames = stack ? info.shape[0] : 0;
    double *sum = calloc((size_t)P, sizeof *sum);
    uint8_t *frame = malloc((size_t)(P * item));
    qem_sha256 *ctx = qem_sha256_new();
    if (!sum || !frame || !ctx)
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    /* The identity hashes the schema, a NUL, every frame, then the plane. */
    if (st == QEM_OK)
        qem_sha256_update(ctx, "empad-mean-dark/v1", sizeof "empad-mean-dark/v1");
    for (uint64_t k = 0; k < (stack ? frames : 1) && st == QEM_OK; k++) {
        st = qem_npy_read(npy, k * P, P, frame, (size_t)(P * item), error);
        if (st != QEM_OK)
            break;
        if (stack)
            qem_sha256_update(ctx, frame, (size_t)(P * item));
        for (uint64_t p = 0; p < P; p++)
            sum[p] += info.dtype == QEM_DTYPE_FLOAT32  ? ((const float *)frame)[p]
                      : info.dtype == QEM_DTYPE_UINT16 ? ((const uint16_t *)frame)[p]
                                                       : frame[p];
    }
    for (uint64_t p = 0; p < P && st == QEM_OK; p++) {
        plane[p] = (float)(sum[p] / (double)(stack ? frames : 1));
        if (!isfinite(plane[p]))
            st = qem_fail(error, QEM_E_NPY, "dark '%s' has a non-finite mean at pixel %llu", path,
                          (unsigned long long)p);
    }
    if (st == QEM_OK) {
        uint8_t digest[32];
        qem_sha256_update(ctx, plane, (size_t)(4 * P));
        qem_sha256_final(ctx, digest);
        qem_sha256_hex(digest, identity);
    }
    qem_sha256_free(ctx);
    free(sum);
    free(frame);
    qem_npy_close(npy);
    return st;
}

void qem_export_options_init(qem_export_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

static qem_status export_npy_body(qem_file *f, const char *dest, const qem_export_options *options,
                                  qem_error *error)
{
    qem_error_clear(error);
    if (!f || !dest)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_container_export_npy: NULL argument");
    qem_export_options local;
    qem_export_options_init(&local);
    QEM_TRY(qem_options_overlay(&local, sizeof local, options, "qem_export_options", error));
    QEM_TRY(qem_threads_check(local.threads, "qem_export_options.threads", error));
    options = &local;
    /* Scaled files export restored float32 values unless codes are asked for. */
    const qem_output kind = f->codec != QEM_CODEC_SCALED ? QEM_OUTPUT_NATIVE
                            : options->values == QEM_VALUES_RAW ? QEM_OUTPUT_CODES
                                                     : QEM_OUTPUT_VALUES;
    const qem_dtype dtype = kind == QEM_OUTPUT_CODES ? QEM_DTYPE_UINT16 : f->dtype;
    uint64_t largest = 0;
    for (uint64_t i = 0; i < f->chunk_count; i++)
        largest = f->chunks[i].scans > largest ? f->chunks[i].scans : largest;
    const uint64_t bytes = largest * f->pixels * qem_output_item(f, kind);
    uint8_t *buffer = malloc((size_t)bytes);
    qem_sha256 *logical = f->codec == QEM_CODEC_FLOAT32 ? qem_sha256_new() : NULL;
    if (!buffer || (f->codec == QEM_CODEC_FLOAT32 && !logical)) {
        free(buffer);
        qem_sha256_free(logical);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory for a %llu-byte chunk",
                        (unsigned long long)bytes);
    }
    qem_npy_writer *out = NULL;
    qem_status st = qem_npy_writer_create(dest, dtype, 4, f->shape, &out, error);
    const int threads = options->threads ? options->threads : f->threads;
    for (uint64_t i = 0; i < f->chunk_count && st == QEM_OK; i++) {
        const qem_chunk *c = &f->chunks[i];
        const size_t chunk_bytes = (size_t)(c->scans * f->pixels * qem_output_item(f, kind));
        st = qem_read_into(f, c->first, c->scans, kind, buffer, (size_t)bytes, threads, error);
        if (st == QEM_OK && logical && qem_sha256_update(logical, buffer, chunk_bytes) != 0)
            st = qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
        if (st == QEM_OK)
            st = qem_npy_writer_append(out, buffer, c->scans * f->pixels, error);
        if (st == QEM_OK && options->progress &&
            options->progress(options->progress_user, c->first + c->scans, f->scans))
            st = qem_fail(error, QEM_E_CANCELLED, "export cancelled; nothing was written");
    }
    /* Float bits are proven against logical_sha256 before anything appears. */
    if (st == QEM_OK && logical) {
        uint8_t digest[32];
        st = qem_sha256_final(logical, digest) == 0
                 ? qem_logical_digest_check(f, digest, error)
                 : qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
    }
    if (st == QEM_OK)
        st = qem_npy_writer_finish(out, error);
    qem_npy_writer_free(out);
    qem_sha256_free(logical);
    free(buffer);
    return st;
}

qem_status qem_file_export_npy(qem_file *f, const char *dest, const qem_export_options *options,
                               qem_error *error)
{
    const qem_status st = export_npy_body(f, dest, options, error);
    qem_error_name_destination(error, dest);
    return st;
}
