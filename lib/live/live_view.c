/* The live view's journal and the representation over it (live_view.h). */
#include "live/live_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/representation.h"

#define LIVE_WINDOW_SCANS 64u

qem_status qem_live_journal_open(live_journal *j, const char *dir, const char *dest,
                                 const uint64_t shape[4], qem_dtype dtype, qem_error *error)
{
    char *owned = dir ? NULL : qem_path_dirname(dest);
    const qem_status st = qem_scratch_open(dir ? dir : owned, &j->fd, error);
    free(owned);
    QEM_TRY(st);
    memcpy(j->shape, shape, sizeof j->shape);
    j->dtype = dtype;
    j->frame_bytes = (size_t)(shape[2] * shape[3] * qem_dtype_size(dtype));
    __atomic_store_n(&j->frames, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&j->ready, 1, __ATOMIC_RELEASE);
    return QEM_OK;
}

qem_status qem_live_journal_append(live_journal *j, uint64_t first, const void *frames,
                                   uint64_t count, qem_error *error)
{
    return qem_pwrite_full(j->fd, frames, (size_t)(count * j->frame_bytes),
                           first * j->frame_bytes, error);
}

void qem_live_journal_published(live_journal *j, uint64_t count)
{
    __atomic_store_n(&j->frames, count, __ATOMIC_RELEASE);
}

int qem_live_journal_ready(const live_journal *j)
{
    return __atomic_load_n(&j->ready, __ATOMIC_ACQUIRE);
}

void qem_live_journal_close(live_journal *j)
{
    if (j->fd >= 0)
        close(j->fd);
    j->fd = -1;
}

/* --- the representation ------------------------------------------------------------- */

typedef struct live_file {
    live_journal *j;
    uint8_t *valid;
    char *header; /* what `qem info` shows of a recording */
} live_file;

static void describe(const void *impl, qem_container_info *info)
{
    const live_file *f = impl;
    info->kind = QEM_KIND_QEM;
    memcpy(info->shape, f->j->shape, sizeof info->shape);
    info->scans = f->j->shape[0] * f->j->shape[1];
    info->pixels = f->j->shape[2] * f->j->shape[3];
    info->working_dtype = f->j->dtype;
}

/* Received scans from the journal, the rest zeros. */
static qem_status read_scans(void *impl, uint64_t first, uint64_t count, qem_values values,
                             void *out, size_t out_size, int threads, qem_error *error)
{
    (void)threads;
    const live_file *f = impl;
    const uint64_t scans = f->j->shape[0] * f->j->shape[1];
    if (values != QEM_VALUES_WORKING)
        return qem_fail(error, QEM_E_NOT_RECORDED,
                        "a recording in progress has only its working values");
    if (first > scans || count > scans - first)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "scans [%llu, +%llu) are outside the %llu "
                        "of the recording", (unsigned long long)first,
                        (unsigned long long)count, (unsigned long long)scans);
    if (out_size / f->j->frame_bytes < count)
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL, "the buffer holds fewer than %llu scans",
                        (unsigned long long)count);
    const uint64_t have = __atomic_load_n(&f->j->frames, __ATOMIC_ACQUIRE);
    const uint64_t from_journal = first >= have ? 0 : (have - first < count ? have - first : count);
    if (from_journal)
        QEM_TRY(qem_pread_full(f->j->fd, out, (size_t)(from_journal * f->j->frame_bytes),
                               first * f->j->frame_bytes, QEM_E_IO, error));
    memset((uint8_t *)out + from_journal * f->j->frame_bytes, 0,
           (size_t)((count - from_journal) * f->j->frame_bytes));
    return QEM_OK;
}

static uint64_t window(const void *impl, uint64_t first)
{
    const live_file *f = impl;
    const uint64_t left = f->j->shape[0] * f->j->shape[1] - first;
    return left < LIVE_WINDOW_SCANS ? left : LIVE_WINDOW_SCANS;
}

static void close_live(void *impl)
{
    live_file *f = impl;
    free(f->valid);
    free(f->header);
    free(f);
}

static qem_status verify_live(void *impl, const qem_container_options *options,
                              const qem_verify_options *verify, qem_verify_report *report,
                              qem_error *error)
{
    (void)impl, (void)options, (void)verify, (void)report;
    return qem_fail(error, QEM_E_WRONG_CODEC,
                    "a recording in progress cannot be verified; verify the published file");
}

static qem_product_data data_of(const void *impl)
{
    (void)impl;
    return QEM_DATA_COUNTS;
}

static void valid_of(const void *impl, uint8_t *mask)
{
    const live_file *f = impl;
    memcpy(mask, f->valid, (size_t)(f->j->shape[2] * f->j->shape[3]));
}

static void code_affine(const void *impl, uint64_t scan, double *scale, double *offset)
{
    (void)impl, (void)scan;
    *scale = 1.0;
    *offset = 0.0;
}

static int none_float(const void *impl, float *plane)
{
    (void)impl, (void)plane;
    return 0;
}

static int none_calibration(const void *impl, qem_detector_calibration *c)
{
    (void)impl, (void)c;
    return 0;
}

static int none_semiangle(const void *impl, double *mrad)
{
    (void)impl, (void)mrad;
    return 0;
}

static uint64_t resident_of(const void *impl)
{
    (void)impl;
    return 0;
}

/* No device and inode: a journal is never the same file as another. */
static void file_id_of(const void *impl, uint64_t id[2])
{
    id[0] = 0;
    id[1] = (uint64_t)(uintptr_t)impl;
}

static const char *header_of(const void *impl, size_t *length)
{
    const live_file *f = impl;
    *length = strlen(f->header);
    return f->header;
}

static char *summary_of(const void *impl, qem_error *error)
{
    const live_file *f = impl;
    char *out = malloc(strlen(f->header) + 1);
    if (!out)
        qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    else
        strcpy(out, f->header);
    return out;
}

static const qem_representation_ops live_representation = {
    .kind = QEM_KIND_QEM,
    .describe = describe,
    .read = read_scans,
    .window = window,
    .close = close_live,
    .verify = verify_live,
    .data = data_of,
    .valid = valid_of,
    .code_affine = code_affine,
    .dark = none_float,
    .detector_calibration = none_calibration,
    .semiangle_mrad = none_semiangle,
    .resident_bytes = resident_of,
    .file_id = file_id_of,
    .header_json = header_of,
    .summary_json = summary_of,
    .details_json = summary_of,
};

qem_status qem_live_journal_container(live_journal *j, const acquisition *a, qem_container **out,
                                      qem_error *error)
{
    const uint64_t pixels = j->shape[2] * j->shape[3];
    live_file *f = calloc(1, sizeof *f);
    qem_container *c = calloc(1, sizeof *c);
    if (f) {
        f->j = j;
        f->valid = malloc((size_t)pixels);
        f->header = malloc(256);
    }
    if (!f || !c || !f->valid || !f->header) {
        if (f)
            close_live(f);
        free(c);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    memset(f->valid, 1, (size_t)pixels);
    if (j->dtype != QEM_DTYPE_FLOAT32)
        for (uint64_t k = 0; k < a->flagged_count; k++)
            f->valid[a->flagged[k]] = 0;
    snprintf(f->header, 256, "{\"live\":true,\"shape\":[%llu,%llu,%llu,%llu],\"dtype\":\"%s\"}",
             (unsigned long long)j->shape[0], (unsigned long long)j->shape[1],
             (unsigned long long)j->shape[2], (unsigned long long)j->shape[3],
             qem_dtype_name(j->dtype));
    c->ops = &live_representation;
    c->impl = f;
    qem_container_options_init(&c->options);
    *out = c;
    return QEM_OK;
}
