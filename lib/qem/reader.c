/* Opening .qem files and reading decoded scans. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/error.h"
#include "common/fileio.h"
#include "common/json.h"
#include "common/large_alloc.h"
#include "common/options.h"
#include "common/sha256.h"
#include "common/threads.h"
#include "qem/detector_image.h"
#include "qem/packed_copy.h"
#include "qem/pixel_sums.h"
#include "qem/qem_internal.h"

void qem_open_options_init(qem_open_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->body_check = QEM_BODY_CHECK_ON_OPEN;
}

void qem_close(qem_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    free(f->path);
    free(f->header_text);
    json_decref(f->header);
    free(f->valid);
    free(f->block_sha);
    free(f->block_checked);
    free(atomic_load(&f->spare_buffer));
    if (f->resident_map)
        munmap(f->resident_area, f->resident_area_bytes);
    else
        free((uint8_t *)(uintptr_t)f->resident);
    free(f->resident_fill);
    free(f->chunk_checked);
    free(f->recorded_sums);
    free(f->recorded_image);
    free(f->recorded_image_mask);
    for (int k = 0; k < QEM_PATTERN_BLOCKS; k++)
        free(f->pattern_blocks[k].data);
    pthread_mutex_destroy(&f->pattern_lock);
    pthread_mutex_destroy(&f->check_lock);
    pthread_cond_destroy(&f->check_done);
    qem_select_plan_drop(f);
    pthread_mutex_destroy(&f->plan_lock);
    qem_column_cache_free(&f->columns); /* after the plan: it pins columns */
    qem_packed_copy_free(atomic_load(&f->packed));
    free(f->chunks);
    free(f->regions);
    free(f->dark);
    free(f);
}

static uint64_t block_bytes(const qem_file *f, uint64_t b)
{
    const uint64_t start = b * QEM_BODY_BLOCK_BYTES;
    return f->body_bytes - start < QEM_BODY_BLOCK_BYTES ? f->body_bytes - start
                                                        : QEM_BODY_BLOCK_BYTES;
}

/* One body block's SHA-256 against the table, read in pieces through `buf`
 * (or, while a resident open fills the body, straight into its place), or
 * hashed where a mapped body lies: the bytes its decoders will read. */
static qem_status check_body_block(qem_file *f, uint64_t b, uint8_t *buf, size_t piece_bytes,
                                   qem_sha256 *ctx, qem_error *error)
{
    const uint64_t start = b * QEM_BODY_BLOCK_BYTES;
    const uint64_t size = block_bytes(f, b);
    if (qem_sha256_reset(ctx) != 0)
        return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
    for (uint64_t done = 0; done < size;) {
        const size_t piece = size - done < piece_bytes ? (size_t)(size - done) : piece_bytes;
        if (f->resident_map) {
            buf = f->resident_map + f->body_start + start + done;
        } else {
            if (f->resident_fill)
                buf = f->resident_fill + start + done;
            QEM_TRY(qem_pread_full(f->fd, buf, piece, f->body_start + start + done,
                                   QEM_E_FILE_LENGTH, error));
        }
        if (qem_sha256_update(ctx, buf, piece) != 0)
            return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
        done += piece;
    }
    uint8_t digest[QEM_SHA256_BYTES];
    if (qem_sha256_final(ctx, digest) != 0)
        return qem_fail(error, QEM_E_IO, "SHA-256 computation failed");
    if (memcmp(digest, f->block_sha[b], QEM_SHA256_BYTES) != 0)
        return qem_fail(error, QEM_E_BODY_CHECKSUM,
                        "QEM body checksum mismatch in block %llu; recopy the file.",
                        (unsigned long long)b);
    return QEM_OK;
}

static qem_status body_check_claimed(qem_file *f, uint64_t begin, uint64_t end, int again,
                                     uint64_t *hashed, qem_progress_fn progress,
                                     void *progress_user, qem_error *error);

/* Marks block b checked (1) or not (0) after a hash, and wakes whoever
 * waits for it. */
static void block_settle(qem_file *f, uint64_t b, int ok)
{
    pthread_mutex_lock(&f->check_lock);
    atomic_store(&f->block_checked[b], (unsigned char)(ok ? 1 : 0));
    pthread_cond_broadcast(&f->check_done);
    pthread_mutex_unlock(&f->check_lock);
}

/* Waits until no block of [first, last] is being hashed by another thread;
 * 1 when every one of them is then authenticated. */
static int blocks_wait(qem_file *f, uint64_t first, uint64_t last)
{
    int all = 1;
    pthread_mutex_lock(&f->check_lock);
    for (uint64_t b = first; b <= last; b++) {
        while (atomic_load(&f->block_checked[b]) == 2)
            pthread_cond_wait(&f->check_done, &f->check_lock);
        all &= atomic_load(&f->block_checked[b]) == 1;
    }
    pthread_mutex_unlock(&f->check_lock);
    return all;
}

/* Each 64 MiB body block has its own digest, so the blocks are hashed on
 * the file's threads (one stream each); the lowest failing block is the
 * one reported, whatever the thread count. A block another call is
 * hashing (the viewer's check after the start, beside a request) is
 * waited for, not hashed twice; one that call failed is hashed again
 * here, for this call's own error. */
qem_status qem_body_check_range(qem_file *f, uint64_t begin, uint64_t end, int again,
                                uint64_t *hashed, qem_progress_fn progress, void *progress_user,
                                qem_error *error)
{
    if (end <= begin)
        return QEM_OK;
    /* Every chunk load asks: blocks already authenticated cost no lock. */
    const uint64_t first = begin / QEM_BODY_BLOCK_BYTES, last = (end - 1) / QEM_BODY_BLOCK_BYTES;
    uint64_t b = first;
    while (!again && b <= last && atomic_load(&f->block_checked[b]) == 1)
        b++;
    if (b > last)
        return QEM_OK;
    for (;;) {
        const qem_status st =
            body_check_claimed(f, begin, end, again, hashed, progress, progress_user, error);
        if (st != QEM_OK || again || blocks_wait(f, first, last))
            return st;
    }
}

/* One pass: hashes the blocks of the range this call claims (0 -> 2);
 * those checked (1) or claimed elsewhere (2) are left. */
static qem_status body_check_claimed(qem_file *f, uint64_t begin, uint64_t end, int again,
                                     uint64_t *hashed, qem_progress_fn progress,
                                     void *progress_user, qem_error *error)
{
    enum { PIECE = 256 << 10 };
    const uint64_t first = begin / QEM_BODY_BLOCK_BYTES, last = (end - 1) / QEM_BODY_BLOCK_BYTES;
    uint64_t todo = 0, todo_bytes = 0;
    for (uint64_t b = first; b <= last; b++)
        if (again || atomic_load(&f->block_checked[b]) == 0) {
            todo++;
            todo_bytes += block_bytes(f, b);
        }
    if (todo == 0)
        return QEM_OK;
    int threads = 1;
#ifdef _OPENMP
    if (!omp_in_parallel())
        threads = qem_threads_resolve(f->threads);
#endif
    if ((uint64_t)threads > todo)
        threads = (int)todo;
    uint64_t failed = UINT64_MAX, count = 0;
    _Atomic uint64_t hashed_bytes = 0;
    atomic_int cancelled = 0;
    qem_status st = QEM_OK;
    qem_error first_error = {0};
#pragma omp parallel num_threads(qem_threads_resolve(threads)) reduction(+ : count)
    {
        uint8_t *buf = malloc(PIECE);
        qem_sha256 *ctx = qem_sha256_new();
        const int caller = omp_get_thread_num() == 0;
#pragma omp for schedule(dynamic, 1)
        for (uint64_t b = first; b <= last; b++) {
            unsigned char unchecked = 0;
            if (atomic_load(&cancelled) ||
                (!again && !atomic_compare_exchange_strong(&f->block_checked[b], &unchecked, 2)))
                continue;
            qem_error e = {0};
            const qem_status bst = buf && ctx ? check_body_block(f, b, buf, PIECE, ctx, &e)
                                              : qem_fail(&e, QEM_E_NO_MEMORY, "out of memory");
            if (!again || bst == QEM_OK)
                block_settle(f, b, bst == QEM_OK);
            if (bst == QEM_OK) {
                count++;
                const uint64_t done = atomic_fetch_add(&hashed_bytes, block_bytes(f, b)) +
                                      block_bytes(f, b);
                if (progress && caller && progress(progress_user, done, todo_bytes))
                    atomic_store(&cancelled, 1);
            } else {
#pragma omp critical(qem_body_check)
                if (b < failed) {
                    failed = b;
                    st = bst;
                    first_error = e;
                }
            }
        }
        free(buf);
        qem_sha256_free(ctx);
    }
    if (hashed)
        *hashed += count;
    if (st != QEM_OK && error)
        *error = first_error;
    if (st == QEM_OK && atomic_load(&cancelled))
        st = qem_fail(error, QEM_E_CANCELLED, "cancelled while checking the body of '%s'", f->path);
    return st;
}

/* The decode path asked for: the option, else QEM_RANS_PATH, else AUTO.
 * A path this CPU lacks, or a name qem does not know, is an error: a
 * forced path that quietly fell back would prove nothing. */
static qem_status requested_decode_path(qem_decode_path *path, qem_error *error)
{
    if (*path == QEM_DECODE_AUTO) {
        const char *env = getenv("QEM_RANS_PATH");
        if (env && *env && !qem_decode_path_from_name(env, path))
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "QEM_RANS_PATH is '%.32s'; it must be scalar, avx2, avx2-loads, "
                            "avx512 or auto (or unset)",
                            env);
    }
    if (!strcmp(qem_decode_path_name(*path), "auto") && *path != QEM_DECODE_AUTO)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "unknown decode path %d", (int)*path);
    if (!qem_decode_path_supported(*path))
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "the %s decode path was asked for, but this CPU cannot run it",
                        qem_decode_path_name(*path));
    return QEM_OK;
}

void qem_experimental_open_options_init(qem_experimental_open_options *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

qem_status qem_open(const char *path, const qem_open_options *options, qem_file **out,
                    qem_error *error)
{
    return qem_open_experimental(path, options, NULL, out, error);
}

/* Every page of a mapped body mapped now (advice: a kernel without it maps
 * them on first use), so that no later read faults. */
void qem_body_populate(qem_file *f)
{
#ifdef MADV_POPULATE_READ
    if (f->resident_map)
        madvise(f->resident_map, (size_t)f->file_size, MADV_POPULATE_READ);
#else
    (void)f;
#endif
}

void qem_body_release(qem_file *f, uint64_t begin, uint64_t end)
{
    if (!f->resident_map || end <= begin)
        return;
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    const uint64_t a = (f->body_start + begin + page - 1) / page * page;
    const uint64_t b = (f->body_start + end) / page * page;
    if (b > a)
        madvise(f->resident_map + a, (size_t)(b - a), MADV_DONTNEED);
}

/* Maps the whole file read-only, followed by anonymous zero pages for
 * the decoders' padding; 0 when it cannot be mapped (the caller copies).
 * With `populate`, every page is mapped now; otherwise the caller does so
 * when it checks the body (a cold file is then read there, not while
 * opening). */
static int body_map(qem_file *f, int populate)
{
    const size_t huge = (size_t)2 << 20, page = (size_t)sysconf(_SC_PAGESIZE);
    if (f->file_size > SIZE_MAX - 2 * huge - QEM_SPAN_PADDING)
        return 0;
    const size_t file_pages = ((size_t)f->file_size + page - 1) / page * page;
    const size_t total = huge + file_pages + (QEM_SPAN_PADDING + page - 1) / page * page;
    void *area = mmap(NULL, total, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED)
        return 0;
    /* The file's offset 0 on a 2 MiB boundary lets the kernel map the
     * page cache's 2 MiB folios whole: a detector move reads scattered
     * streams, and with 4 KiB entries most of them miss the TLB (moves
     * 1.6x slower here). */
    uint8_t *base = (uint8_t *)(((uintptr_t)area + huge - 1) & ~(uintptr_t)(huge - 1));
    if (mmap(base, (size_t)f->file_size, PROT_READ, MAP_SHARED | MAP_FIXED, f->fd, 0) ==
        MAP_FAILED) {
        munmap(area, total);
        return 0;
    }
    /* Advice only: huge entries where the folios allow; a kernel without
     * it maps 4 KiB pages. */
#ifdef MADV_HUGEPAGE
    madvise(base, (size_t)f->file_size, MADV_HUGEPAGE);
#endif
    f->resident_map = base;
    f->resident_area = area;
    f->resident_area_bytes = total;
    if (populate)
        qem_body_populate(f);
    return 1;
}

/* Holds the body: mapped (QEM_RESIDENT_MAPPED, where the file maps) or
 * read into memory, each 64 MiB block authenticated as it is hashed (the
 * check a default open makes anyway, so holding the body costs one pass
 * over it, not two). */
static qem_status body_make_resident(qem_file *f, const qem_open_options *options,
                                     qem_error *error)
{
    f->chunk_checked = calloc(f->chunk_count ? f->chunk_count : 1, sizeof *f->chunk_checked);
    if (!f->chunk_checked)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (options->resident == QEM_RESIDENT_MAPPED &&
        body_map(f, options->body_check != QEM_BODY_CHECK_ON_READ)) {
        /* Hashed through the mapping: no copy out of the page cache
         * (pread's cost 15-20 % of this open on Linux 6.18, whether the
         * page cache held the file in 2 MiB folios or 4 KiB pages). With
         * QEM_BODY_CHECK_ON_READ nothing is hashed here: each chunk load
         * checks the blocks it covers first (decode.c), and
         * qem_container_load checks the rest. */
        const qem_status st =
            options->body_check == QEM_BODY_CHECK_ON_READ
                ? QEM_OK
                : qem_body_check_range(f, 0, f->body_bytes, 0, NULL, options->progress,
                                       options->progress_user, error);
        if (st == QEM_OK)
            f->resident = f->resident_map + f->body_start;
        return st;
    }
    if (f->body_bytes > SIZE_MAX - QEM_SPAN_PADDING)
        return qem_fail(error, QEM_E_NO_MEMORY, "a %llu-byte body cannot be held in memory here",
                        (unsigned long long)f->body_bytes);
    f->resident_fill = qem_large_alloc((size_t)f->body_bytes + QEM_SPAN_PADDING);
    if (!f->resident_fill)
        return qem_fail(error, QEM_E_NO_MEMORY,
                        "out of memory holding the %llu-byte body of '%s' (open it without "
                        "resident)",
                        (unsigned long long)f->body_bytes, f->path);
    memset(f->resident_fill + f->body_bytes, 0, QEM_SPAN_PADDING);
    const qem_status st = qem_body_check_range(f, 0, f->body_bytes, 0, NULL, options->progress,
                                               options->progress_user, error);
    if (st == QEM_OK)
        f->resident = f->resident_fill;
    else
        free(f->resident_fill);
    f->resident_fill = NULL;
    return st;
}

/* The options as the library uses them: defaults overlaid by the caller's,
 * the thread count checked. */
static qem_status open_options_local(const qem_open_options *options,
                                     const qem_experimental_open_options *experimental,
                                     qem_open_options *local, qem_experimental_open_options *x,
                                     qem_error *error)
{
    qem_open_options_init(local);
    QEM_TRY(qem_options_overlay(local, sizeof *local, options, "qem_open_options", error));
    QEM_TRY(qem_threads_check(local->threads, "qem_open_options.threads", error));
    if (local->resident < QEM_RESIDENT_NONE || local->resident > QEM_RESIDENT_MAPPED)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_open_options.resident is %d; it must be 0 (read per use), 1 "
                        "(QEM_RESIDENT_COPY) or 2 (QEM_RESIDENT_MAPPED)",
                        local->resident);
    qem_experimental_open_options_init(x);
    return qem_options_overlay(x, sizeof *x, experimental, "qem_experimental_open_options",
                               error);
}

qem_status qem_open_experimental(const char *path, const qem_open_options *options,
                                 const qem_experimental_open_options *experimental,
                                 qem_file **out, qem_error *error)
{
    qem_error_clear(error);
    if (!path || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_open: NULL argument");
    *out = NULL;
    qem_open_options local;
    qem_experimental_open_options x;
    QEM_TRY(open_options_local(options, experimental, &local, &x, error));
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(path, &fd, &sb, error));
    return qem_open_descriptor(path, fd, &sb, &local, &x, out, error);
}

/* The header text parsed and every rule checked, the writer's records
 * included. */
static qem_status header_load(qem_file *f, qem_error *error)
{
    QEM_TRY(qem_json_parse_object(f->header_text, (size_t)f->header_bytes, QEM_E_JSON, &f->header,
                                  error));
    QEM_TRY(qem_header_load(f, error));
    QEM_TRY(qem_pixel_sums_load(f, error));
    return qem_detector_image_load(f, error);
}

static qem_file *file_new(int fd, const char *path, int threads)
{
    qem_file *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->fd = fd;
    pthread_mutex_init(&f->pattern_lock, NULL);
    pthread_mutex_init(&f->plan_lock, NULL);
    qem_column_cache_init(&f->columns);
    pthread_mutex_init(&f->check_lock, NULL);
    pthread_cond_init(&f->check_done, NULL);
    f->path = strdup(path);
    f->threads = threads;
    if (!f->path) {
        f->fd = -1;
        qem_close(f);
        return NULL;
    }
    return f;
}

qem_status qem_open_written(const char *path, const char *header_text, size_t header_bytes,
                            int body_fd, uint64_t body_bytes, int threads, qem_file **out,
                            qem_error *error)
{
    *out = NULL;
    const int fd = dup(body_fd);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0)
            close(fd);
        return qem_fail(error, QEM_E_IO, "cannot reopen the body just written");
    }
    qem_file *f = file_new(fd, path, threads);
    if (!f) {
        close(fd);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    qem_file_stamp_from_stat(&sb, &f->stamp);
    f->file_size = body_bytes; /* the body alone: it starts at offset 0 */
    f->rans_path = qem_rans_path_resolve(QEM_DECODE_AUTO);
    f->header_text = malloc(header_bytes + 1);
    qem_status st = f->header_text ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK) {
        memcpy(f->header_text, header_text, header_bytes);
        f->header_text[header_bytes] = 0;
        f->header_bytes = header_bytes;
        st = header_load(f, error);
    }
    if (st == QEM_OK) {
        /* Hashed by the writer as it wrote them. */
        for (uint64_t b = 0; b < f->block_count; b++)
            atomic_store(&f->block_checked[b], 1);
    }
    if (st != QEM_OK) {
        qem_close(f);
        return st;
    }
    *out = f;
    return QEM_OK;
}

qem_status qem_open_descriptor(const char *path, int fd, const struct stat *sb,
                               const qem_open_options *options,
                               const qem_experimental_open_options *experimental,
                               qem_file **out, qem_error *error)
{
    *out = NULL;
    qem_open_options local;
    qem_experimental_open_options x;
    qem_status st = open_options_local(options, experimental, &local, &x, error);
    qem_file *f = st == QEM_OK ? file_new(fd, path, local.threads) : NULL;
    if (!f) {
        close(fd);
        return st != QEM_OK ? st : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    options = &local;
    qem_file_stamp_from_stat(sb, &f->stamp);
    f->file_size = (uint64_t)sb->st_size;
    qem_decode_path requested = x.decode_path;
    st = requested_decode_path(&requested, error);
    if (st != QEM_OK)
        goto fail;
    f->rans_path = qem_rans_path_resolve(requested);

    st = qem_envelope_read(f->fd, f->file_size, &f->header_text, &f->header_bytes, error);
    if (st != QEM_OK)
        goto fail;
    f->body_start = QEM_PREFIX_BYTES + f->header_bytes;
    st = header_load(f, error);
    if (st == QEM_OK && f->codec != QEM_CODEC_FLOAT32 &&
        !qem_column_cache_start(&f->columns, f->pixels, f->scans, options->column_cache_bytes))
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory for the decoded-column cache");
    if (st == QEM_OK && options->expect_sha256)
        st = qem_file_digest_check(f->fd, f->file_size, options->expect_sha256, path,
                                   options->progress, options->progress_user, error);
    if (st == QEM_OK && options->resident)
        st = body_make_resident(f, options, error);
    else if (st == QEM_OK && options->body_check == QEM_BODY_CHECK_ON_OPEN)
        st = qem_body_check_range(f, 0, f->body_bytes, 0, NULL, options->progress,
                                  options->progress_user, error);
    if (st != QEM_OK)
        goto fail;
    /* The file must not have changed while it was validated. */
    st = qem_file_stamp_check(f->fd, &f->stamp, path, "validated", error);
    if (st != QEM_OK)
        goto fail;
    *out = f;
    return QEM_OK;
fail:
    qem_close(f);
    return st;
}

qem_status qem_get_info(const qem_file *f, qem_file_info *out, qem_error *error)
{
    qem_error_clear(error);
    if (!f)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_get_info: NULL file");
    qem_file_info info;
    memset(&info, 0, sizeof info);
    info.codec = f->codec;
    info.dtype = f->dtype;
    memcpy(info.shape, f->shape, sizeof info.shape);
    info.scans = f->scans;
    info.pixels = f->pixels;
    info.file_bytes = f->file_size;
    info.header_bytes = f->header_bytes;
    info.body_bytes = f->body_bytes;
    info.logical_bytes = f->scans * f->pixels * qem_dtype_size(f->dtype);
    info.chunk_count = f->chunk_count;
    info.valid_pixels = f->valid_count;
    info.spatial_fields = f->codec == QEM_CODEC_INTEGER ? f->geometry.fields : 0;
    info.has_dark = f->dark != NULL;
    info.region_count = f->region_count;
    return qem_result_deliver(out, &info, sizeof info, "qem_file_info", error);
}

qem_status qem_get_calibration(const qem_file *f, qem_calibration *out, qem_error *error)
{
    qem_error_clear(error);
    if (!f)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_get_calibration: NULL file");
    qem_calibration calibration;
    qem_metadata_calibration(json_object_get(f->header, "scientific_metadata"), &calibration);
    return qem_result_deliver(out, &calibration, sizeof calibration, "qem_calibration", error);
}

qem_status qem_get_dark(const qem_file *f, float *plane, size_t plane_size, qem_error *error)
{
    qem_error_clear(error);
    if (!f || !plane)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_get_dark: NULL argument");
    if (!f->dark)
        return qem_fail(error, QEM_E_NOT_RECORDED, "'%s' records no mean-dark plane",
                        f->path);
    if (plane_size / sizeof *plane < f->pixels)
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                        "qem_get_dark: the plane needs %llu bytes, %zu given",
                        (unsigned long long)(f->pixels * sizeof *plane), plane_size);
    memcpy(plane, f->dark, (size_t)f->pixels * sizeof *plane);
    return QEM_OK;
}

const char *qem_header_json(const qem_file *f, size_t *length)
{
    if (length)
        *length = (size_t)f->header_bytes;
    return f->header_text;
}

qem_status qem_get_valid_mask(const qem_file *f, uint8_t *mask, size_t size, qem_error *error)
{
    qem_error_clear(error);
    if (!f || !mask)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_get_valid_mask: NULL argument");
    if (size < f->pixels)
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                        "qem_get_valid_mask: the mask needs %llu bytes, %zu given",
                        (unsigned long long)f->pixels, size);
    memcpy(mask, f->valid, (size_t)f->pixels);
    return QEM_OK;
}

qem_status qem_get_chunk(const qem_file *f, uint64_t index, uint64_t *first, uint64_t *scans,
                         qem_error *error)
{
    qem_error_clear(error);
    if (!f)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_get_chunk: NULL file");
    if (index >= f->chunk_count)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "chunk %llu of %llu does not exist",
                        (unsigned long long)index, (unsigned long long)f->chunk_count);
    if (first)
        *first = f->chunks[index].first;
    if (scans)
        *scans = f->chunks[index].scans;
    return QEM_OK;
}

uint64_t qem_read_scans_bound(const qem_file *f, uint64_t scans)
{
    return qem_bytes_bound(scans, f->pixels, qem_dtype_size(f->dtype));
}

uint64_t qem_chunk_index_of(const qem_file *f, uint64_t scan)
{
    uint64_t lo = 0, hi = f->chunk_count;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (f->chunks[mid].first <= scan)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

qem_decode_path qem_file_decode_path(const qem_file *f)
{
    return f->rans_path;
}
