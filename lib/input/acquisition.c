/* What every family shares: recognising a file, members and their
 * authentication (hashing, stamps, the identity), reading with exact
 * narrowing, and the source metadata a writer records. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "input/input.h"

#define HASH_BUFFER_BYTES (1u << 20)
#define HEAD_BYTES 4096
#define SCRATCH_BYTES (8u << 20)
#define IDENTITY_SCHEMA "live4dstem.dataset/v0.1"

/* --- members ------------------------------------------------------------------ */

qem_status qem_input_add_member(acquisition *a, const char *path, int is_master, qem_error *error)
{
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(path, &fd, &sb, error));
    close(fd);
    input_member *grown = realloc(a->members, (a->member_count + 1) * sizeof *grown);
    if (!grown)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    a->members = grown;
    input_member *m = &a->members[a->member_count];
    memset(m, 0, sizeof *m);
    if (!(m->path = strdup(path)))
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    m->is_master = is_master;
    m->bytes = (uint64_t)sb.st_size;
    qem_file_stamp_from_stat(&sb, &m->stamp);
    a->member_count++;
    for (size_t i = 0; i + 1 < a->member_count; i++) {
        const input_member *o = &a->members[i];
        if (o->stamp.dev == m->stamp.dev && o->stamp.ino == m->stamp.ino)
            return strcmp(o->path, path) == 0
                       ? qem_fail(error, QEM_E_LAYOUT,
                                  "'%s' is named twice; every member of an acquisition must be "
                                  "a distinct file",
                                  path)
                       : qem_fail(error, QEM_E_LAYOUT,
                                  "'%s' and '%s' are the same file; every member of an "
                                  "acquisition must be a distinct file",
                                  o->path, path);
    }
    return QEM_OK;
}

/* SHA-256 of every byte of `path` between two stamps. A file that cannot
 * be opened is `open_status` (QEM_E_IO first, QEM_E_CHANGED later). */
static qem_status hash_file(const char *path, qem_status open_status, uint8_t digest[32],
                            qem_file_stamp *stamp, uint64_t *bytes, qem_progress_fn progress,
                            void *progress_user, qem_error *error)
{
    int fd = -1;
    struct stat before;
    qem_error opened;
    qem_error_clear(&opened);
    if (qem_open_input(path, &fd, &before, &opened) != QEM_OK)
        return qem_fail(error, open_status, "%s", opened.message);
    uint8_t *buffer = malloc(HASH_BUFFER_BYTES);
    qem_sha256 *ctx = qem_sha256_new();
    uint64_t total = 0;
    qem_status st = buffer && ctx ? QEM_OK : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    if (st == QEM_OK && progress && progress(progress_user, 0, (uint64_t)before.st_size))
        st = qem_fail(error, QEM_E_CANCELLED, "cancelled while hashing '%s'", path);
    while (st == QEM_OK) {
        ssize_t n = read(fd, buffer, HASH_BUFFER_BYTES);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            st = qem_fail(error, QEM_E_IO, "cannot read '%s': %s", path, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        if (qem_sha256_update(ctx, buffer, (size_t)n) != 0)
            st = qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 failed while hashing '%s'", path);
        total += (uint64_t)n;
        if (st == QEM_OK && progress && progress(progress_user, total, (uint64_t)before.st_size))
            st = qem_fail(error, QEM_E_CANCELLED, "cancelled while hashing '%s'", path);
    }
    if (st == QEM_OK) {
        qem_file_stamp_from_stat(&before, stamp);
        qem_error changed;
        if (qem_file_stamp_check(fd, stamp, path, "hashed", &changed) != QEM_OK ||
            total != (uint64_t)before.st_size)
            st = qem_fail(error, QEM_E_CHANGED,
                          "'%s' changed while it was being hashed; wait until the acquisition "
                          "has finished writing it, then retry",
                          path);
    }
    if (st == QEM_OK && qem_sha256_final(ctx, digest) != 0)
        st = qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 failed while hashing '%s'", path);
    if (st == QEM_OK)
        *bytes = total;
    qem_sha256_free(ctx);
    free(buffer);
    close(fd);
    return st;
}

qem_status qem_input_identity(const uint8_t *master_sha256, const uint8_t (*data_sha256)[32],
                              size_t data_count, uint8_t identity[32], qem_error *error)
{
    qem_sha256 *ctx = qem_sha256_new();
    if (!ctx)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    static const char schema[] = IDENTITY_SCHEMA; /* sizeof includes the NUL */
    static const uint8_t nul = 0;
    char hex[65];
    int bad = qem_sha256_update(ctx, schema, sizeof schema);
    if (master_sha256) {
        qem_sha256_hex(master_sha256, hex);
        bad |= qem_sha256_update(ctx, hex, 64);
    }
    for (size_t i = 0; i < data_count; i++) {
        qem_sha256_hex(data_sha256[i], hex);
        bad |= qem_sha256_update(ctx, &nul, 1);
        bad |= qem_sha256_update(ctx, hex, 64);
    }
    bad |= qem_sha256_final(ctx, identity);
    qem_sha256_free(ctx);
    return bad ? qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 of the source identity failed")
               : QEM_OK;
}

static qem_status compute_identity(acquisition *a, qem_error *error)
{
    uint8_t(*data)[32] = malloc((a->member_count ? a->member_count : 1) * sizeof *data);
    if (!data)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    size_t data_count = 0;
    const uint8_t *master = NULL;
    for (size_t i = 0; i < a->member_count; i++) {
        if (a->members[i].is_master)
            master = a->members[i].sha256;
        else
            memcpy(data[data_count++], a->members[i].sha256, 32);
    }
    qem_status st =
        qem_input_identity(master, (const uint8_t(*)[32])data, data_count, a->identity, error);
    free(data);
    if (st == QEM_OK)
        a->authenticated = 1;
    return st;
}

qem_status qem_input_authenticate(acquisition *a, qem_progress_fn progress, void *progress_user,
                                  qem_error *error)
{
    for (size_t i = 0; i < a->member_count; i++) {
        input_member *m = &a->members[i];
        qem_file_stamp stamp;
        uint64_t bytes = 0;
        QEM_TRY(hash_file(m->path, QEM_E_IO, m->sha256, &stamp, &bytes, progress, progress_user,
                          error));
        /* What was described must be what was hashed. */
        if (!qem_file_stamp_equal(&stamp, &m->stamp))
            return qem_fail(error, QEM_E_CHANGED,
                            "'%s' changed between being described and being hashed; wait until "
                            "the acquisition has finished writing it, then retry",
                            m->path);
        m->bytes = bytes;
        m->hashed = 1;
    }
    return compute_identity(a, error);
}

qem_status qem_input_reauthenticate(acquisition *a, qem_progress_fn progress, void *progress_user,
                                    qem_error *error)
{
    for (size_t i = 0; i < a->member_count; i++) {
        const input_member *m = &a->members[i];
        qem_file_stamp stamp;
        uint8_t digest[32];
        uint64_t bytes = 0;
        QEM_TRY(hash_file(m->path, QEM_E_CHANGED, digest, &stamp, &bytes, progress, progress_user,
                          error));
        if (memcmp(digest, m->sha256, 32) != 0 || bytes != m->bytes)
            return qem_fail(error, QEM_E_CHANGED,
                            "source member '%s' no longer has the SHA-256 it had when it was "
                            "inspected; its content changed, so inspect the source again",
                            m->path);
        if (!qem_file_stamp_equal(&stamp, &m->stamp))
            return qem_fail(error, QEM_E_CHANGED,
                            "source member '%s' was replaced or touched since it was inspected "
                            "(its stat differs); inspect the source again",
                            m->path);
    }
    return QEM_OK;
}

qem_status qem_input_check_unchanged(const acquisition *a, qem_error *error)
{
    for (size_t i = 0; i < a->member_count; i++) {
        const input_member *m = &a->members[i];
        struct stat sb;
        if (stat(m->path, &sb) != 0)
            return qem_fail(error, QEM_E_CHANGED,
                            "source member '%s' can no longer be read (%s) since it was "
                            "authenticated",
                            m->path, strerror(errno));
        qem_file_stamp now;
        qem_file_stamp_from_stat(&sb, &now);
        if (!qem_file_stamp_equal(&m->stamp, &now))
            return qem_fail(error, QEM_E_CHANGED,
                            "source member '%s' changed (size, time or file) since it was "
                            "read; nothing was written, so run again once it is complete",
                            m->path);
    }
    return QEM_OK;
}

qem_status qem_input_entry_present(const char *folder, const char *name, int *present,
                                   qem_error *error)
{
    const size_t size = strlen(folder) + strlen(name) + 2;
    char *full = malloc(size);
    if (!full)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    snprintf(full, size, "%s/%s", folder, name);
    struct stat ls;
    *present = lstat(full, &ls) == 0;
    free(full);
    return QEM_OK;
}

qem_status qem_input_companion_path(const input_companion *c, const char *name, char **member,
                                    qem_error *error)
{
    *member = NULL;
    int escapes = name[0] == '/';
    for (const char *p = name; !escapes && *p;) {
        const char *slash = strchr(p, '/');
        const size_t n = slash ? (size_t)(slash - p) : strlen(p);
        escapes = n == 2 && p[0] == '.' && p[1] == '.';
        p += n + (slash != NULL);
    }
    if (escapes)
        return qem_fail(error, QEM_E_LAYOUT, "%s '%s', outside %s; %s", c->subject, name,
                        c->folder, c->rule);
    char *dir = qem_path_dirname(c->owner);
    const size_t size = dir ? strlen(dir) + strlen(name) + 2 : 0;
    char *path = dir ? malloc(size) : NULL;
    if (!path) {
        free(dir);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    snprintf(path, size, "%s/%s", dir, name);
    char *real_dir = realpath(dir, NULL);
    const int dir_errno = errno;
    free(dir);
    if (!real_dir) {
        free(path);
        return qem_fail(error, QEM_E_IO, "cannot resolve the folder of '%s': %s", c->owner,
                        strerror(dir_errno));
    }
    qem_status st = QEM_OK;
    char *real = realpath(path, NULL);
    const size_t n = strlen(real_dir);
    struct stat sb;
    if (!real)
        st = qem_fail(error, QEM_E_IO, "%s '%s', which cannot be read (%s); %s", c->subject,
                      name, strerror(errno), c->keep);
    else if (strncmp(real, real_dir, n) != 0 ||
             !(real[n] == '/' || (n == 1 && real_dir[0] == '/')))
        st = qem_fail(error, QEM_E_LAYOUT, "%s '%s', which resolves to '%s', outside %s; %s",
                      c->subject, name, real, c->folder, c->rule);
    else if (stat(real, &sb) != 0 || !S_ISREG(sb.st_mode))
        st = qem_fail(error, QEM_E_LAYOUT, "%s '%s', which is not a regular file", c->subject,
                      name);
    free(real_dir);
    free(real);
    if (st != QEM_OK) {
        free(path);
        return st;
    }
    *member = path;
    return QEM_OK;
}

/* --- hashing while reading ---------------------------------------------------- */

qem_status qem_input_stream_begin(acquisition *a, qem_error *error)
{
    if (!a->family->reads_bytes)
        return qem_input_authenticate(a, NULL, NULL, error);
    for (size_t i = 0; i < a->member_count; i++) {
        input_member *m = &a->members[i];
        qem_sha256_free(m->stream);
        if (!(m->stream = qem_sha256_new()))
            return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        m->streamed = 0;
    }
    return QEM_OK;
}

/* Hashes member bytes [streamed, to) from `fd`. */
static qem_status stream_rest(input_member *m, int fd, uint64_t to, qem_error *error);

void qem_input_member_read(input_member *m, int fd, uint64_t offset, const void *data, size_t size)
{
    if (!m->stream)
        return;
    /* A skipped header (at most 16 MiB) is hashed now; a read elsewhere
     * leaves the rest to qem_input_stream_finish. */
    if (offset > m->streamed && offset - m->streamed <= (16u << 20) &&
        stream_rest(m, fd, offset, NULL) != QEM_OK)
        return;
    if (offset > m->streamed || offset + size <= m->streamed)
        return;
    const uint64_t skip = m->streamed - offset;
    if (qem_sha256_update(m->stream, (const uint8_t *)data + skip, size - (size_t)skip) == 0)
        m->streamed = offset + size;
}

static qem_status stream_rest(input_member *m, int fd, uint64_t to, qem_error *error)
{
    uint8_t *buffer = malloc(HASH_BUFFER_BYTES);
    if (!buffer)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_status st = QEM_OK;
    while (st == QEM_OK && m->streamed < to) {
        const size_t n = to - m->streamed < HASH_BUFFER_BYTES ? (size_t)(to - m->streamed)
                                                                : HASH_BUFFER_BYTES;
        st = qem_pread_full(fd, buffer, n, m->streamed, QEM_E_CHANGED, error);
        if (st == QEM_OK && qem_sha256_update(m->stream, buffer, n) != 0)
            st = qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 failed");
        if (st == QEM_OK)
            m->streamed += n;
    }
    free(buffer);
    return st;
}

qem_status qem_input_stream_finish(acquisition *a, qem_progress_fn progress, void *progress_user,
                                   qem_error *error)
{
    (void)progress;
    (void)progress_user;
    if (!a->family->reads_bytes)
        return qem_input_check_unchanged(a, error);
    for (size_t i = 0; i < a->member_count; i++) {
        input_member *m = &a->members[i];
        if (!m->stream)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT, "qem_input_stream_finish without begin");
        int fd = -1;
        struct stat sb;
        qem_error opened;
        qem_error_clear(&opened);
        if (qem_open_input(m->path, &fd, &sb, &opened) != QEM_OK)
            return qem_fail(error, QEM_E_CHANGED, "%s", opened.message);
        qem_status st = stream_rest(m, fd, m->bytes, error);
        if (st == QEM_OK)
            st = qem_file_stamp_check(fd, &m->stamp, m->path, "read", error);
        close(fd);
        QEM_TRY(st);
        if (qem_sha256_final(m->stream, m->sha256) != 0)
            return qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 failed");
        qem_sha256_free(m->stream);
        m->stream = NULL;
        m->hashed = 1;
    }
    return compute_identity(a, error);
}

/* --- shapes and masks ----------------------------------------------------------- */

qem_status qem_input_open_master(acquisition *a, const char *path, const char *format,
                                 const input_options *o, int *fd, uint64_t *size,
                                 qem_error *error)
{
    if (o->dataset)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s' is %s; --dataset only applies to HDF5 files", path, format);
    QEM_TRY(qem_input_add_member(a, path, 1, error));
    struct stat sb;
    QEM_TRY(qem_open_input(path, fd, &sb, error));
    QEM_TRY(qem_file_stamp_check(*fd, &a->members[a->member_count - 1].stamp, path,
                                 "described", error));
    *size = (uint64_t)sb.st_size;
    return QEM_OK;
}

qem_status qem_input_check_shape(const acquisition *a, const char *path, qem_error *error)
{
    uint64_t pixels, scans, total;
    for (int i = 0; i < 4; i++)
        if (a->shape[i] == 0)
            return qem_fail(error, QEM_E_LAYOUT,
                            "'%s' has an empty dimension (shape %llu x %llu x %llu x %llu)", path,
                            (unsigned long long)a->shape[0], (unsigned long long)a->shape[1],
                            (unsigned long long)a->shape[2], (unsigned long long)a->shape[3]);
    if (qem_mul_overflow_u64(a->shape[2], a->shape[3], &pixels) ||
        pixels > INPUT_MAX_DETECTOR_PIXELS)
        return qem_fail(error, QEM_E_LIMIT,
                        "'%s' describes a detector of %llu x %llu pixels; qem reads detectors of "
                        "at most %llu pixels (8192 x 8192)",
                        path, (unsigned long long)a->shape[2], (unsigned long long)a->shape[3],
                        (unsigned long long)INPUT_MAX_DETECTOR_PIXELS);
    if (qem_mul_overflow_u64(a->shape[0], a->shape[1], &scans) ||
        qem_mul_overflow_u64(scans, pixels, &total) || total > UINT64_MAX / 8)
        return qem_fail(error, QEM_E_LIMIT,
                        "'%s' is too large: the array's byte count must fit 64 bits", path);
    return QEM_OK;
}

qem_status qem_input_scan_shape(const input_options *o, int have_file, const uint64_t file_shape[2],
                                const char *file_on, uint64_t frames, const char *path,
                                uint64_t out[2], qem_error *error)
{
    const int given = o && (o->scan_shape[0] || o->scan_shape[1]);
    if (given && (!o->scan_shape[0] || !o->scan_shape[1]))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the scan shape %llux%llu must have two positive values (rows, columns)",
                        (unsigned long long)o->scan_shape[0], (unsigned long long)o->scan_shape[1]);
    if (given && have_file &&
        (o->scan_shape[0] != file_shape[0] || o->scan_shape[1] != file_shape[1]))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the scan shape given (%llux%llu) contradicts the scan shape %llux%llu "
                        "that %s in '%s' states; omit the scan shape or correct the file",
                        (unsigned long long)o->scan_shape[0], (unsigned long long)o->scan_shape[1],
                        (unsigned long long)file_shape[0], (unsigned long long)file_shape[1],
                        file_on, path);
    if (given) {
        out[0] = o->scan_shape[0];
        out[1] = o->scan_shape[1];
    } else if (have_file) {
        out[0] = file_shape[0];
        out[1] = file_shape[1];
    } else if (frames == 1) {
        out[0] = out[1] = 1; /* one frame is one scan position */
    } else {
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' holds %llu frames and does not state its scan shape; give it "
                        "(--scan-shape ROWS,COLUMNS) with a product of %llu",
                        path, (unsigned long long)frames, (unsigned long long)frames);
    }
    uint64_t scans;
    if (qem_mul_overflow_u64(out[0], out[1], &scans) || scans != frames)
        return qem_fail(error, QEM_E_LAYOUT,
                        "the scan shape %llux%llu does not match the %llu frames of '%s'; give "
                        "rows and columns whose product is %llu",
                        (unsigned long long)out[0], (unsigned long long)out[1],
                        (unsigned long long)frames, path, (unsigned long long)frames);
    return QEM_OK;
}

qem_status qem_input_implicit_mask(acquisition *a, qem_error *error)
{
    static const uint8_t zeros[4096];
    /* The digest's work grows with the detector: a shape that would be
     * refused (an empty axis, an absurd detector) is refused first. */
    QEM_TRY(
        qem_input_check_shape(a, a->member_count ? a->members[0].path : "the acquisition", error));
    qem_sha256 *ctx = qem_sha256_new();
    if (!ctx)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    int bad = 0;
    for (uint64_t left = 4 * a->shape[2] * a->shape[3]; left;) {
        const size_t n = left < sizeof zeros ? (size_t)left : sizeof zeros;
        bad |= qem_sha256_update(ctx, zeros, n);
        left -= n;
    }
    bad |= qem_sha256_final(ctx, a->detector_mask_sha256);
    qem_sha256_free(ctx);
    a->mask_origin = INPUT_ORIGIN_IMPLICIT_MASK;
    return bad ? qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 of the implicit mask failed") : QEM_OK;
}

void qem_input_fact(acquisition *a, const char *key, json_t *value)
{
    if (!a->facts)
        a->facts = json_object();
    if (a->facts && value)
        json_object_set_new(a->facts, key, value);
    else
        json_decref(value);
}

/* --- recognising ------------------------------------------------------------------ */

/* MRC before EMPAD: an MRC whose NX is 60 starts with '<'. */
static const input_family *const families[] = {
    &qem_input_family_npy,   &qem_input_family_hdf5,  &qem_input_family_mib,
    &qem_input_family_blo,   &qem_input_family_mrc,   &qem_input_family_empad,
    &qem_input_family_dm,    &qem_input_family_tia,   &qem_input_family_csr,
    &qem_input_family_k2is,  &qem_input_family_frms6, &qem_input_family_tvips,
    &qem_input_family_seq,   &qem_input_family_raw};

/* Families of HDF5 files that claim theirs before the dataset family
 * (qem_input_family_hdf5) takes the rest. */
static const input_family *const hdf5_families[] = {&qem_input_family_arina, &qem_input_family_emd,
                                                    &qem_input_family_velox};

static qem_status hdf5_family_of(acquisition *a, const char *path, const input_family **family,
                                 qem_error *error)
{
    for (size_t k = 0; k < sizeof hdf5_families / sizeof hdf5_families[0]; k++) {
        int claimed = 0;
        QEM_TRY(hdf5_families[k]->claims_hdf5(a, path, &claimed, error));
        if (claimed) {
            *family = hdf5_families[k];
            return QEM_OK;
        }
    }
    *family = &qem_input_family_hdf5;
    return QEM_OK;
}

static int has_hdf5_signature(int fd, uint64_t size)
{
    static const uint8_t sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    for (uint64_t off = 0; off + 8 <= size; off = off ? 2 * off : 512) {
        uint8_t got[8];
        if (qem_pread_full(fd, got, 8, off, QEM_E_IO, NULL) != QEM_OK)
            return 0;
        if (memcmp(got, sig, 8) == 0)
            return 1;
    }
    return 0;
}

/* Formats qem recognises but reads elsewhere: named in the refusal. */
static const char *foreign_format(const uint8_t *h, size_t n)
{
    /* A big-endian MRC file of 3 or 4 columns starts as DM3/DM4 do. */
    if (qem_input_family_mrc.recognises(h, n))
        return NULL;
    if (n >= 8 && !memcmp(h, "QGPUH5\0\x01", 8))
        return "a Lossless Pack Format v1 file; export it to .npy first, or use it as it is";
    if (n >= 8 && !memcmp(h, "QEMDATA1", 8))
        return "a .qem file; export it to .npy first";
    if (n >= 4 && ((h[0] == 0x49 && h[1] == 0x49 && h[2] == 0x2a && h[3] == 0) ||
                   (h[0] == 0x4d && h[1] == 0x4d && h[2] == 0 && h[3] == 0x2a)))
        return "a TIFF image; qem reads 4D acquisitions";
    return NULL;
}

/* An HDF5 object name as libhdf5 (and h5py) read it: runs of '/' are one
 * separator ("//g//d" is "/g/d"). */
static char *hdf5_name(const char *name)
{
    char *out = malloc(strlen(name) + 1);
    if (!out)
        return NULL;
    size_t n = 0;
    for (const char *p = name; *p; p++)
        if (*p != '/' || n == 0 || out[n - 1] != '/')
            out[n++] = *p;
    out[n] = '\0';
    return out;
}

static qem_status open_family(const char *path, const input_options *options, acquisition **out,
                              qem_error *error);

qem_status qem_input_open(const char *path, const input_options *options, acquisition **out,
                          qem_error *error)
{
    *out = NULL;
    input_options local;
    memset(&local, 0, sizeof local);
    if (options)
        local = *options;
    char *dataset = NULL;
    if (local.dataset && !(local.dataset = dataset = hdf5_name(local.dataset)))
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const qem_status st = open_family(path, &local, out, error);
    free(dataset);
    return st;
}

static qem_status open_family(const char *path, const input_options *options, acquisition **out,
                              qem_error *error)
{
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(path, &fd, &sb, error));
    uint8_t head[HEAD_BYTES];
    const size_t n = (uint64_t)sb.st_size < sizeof head ? (size_t)sb.st_size : sizeof head;
    qem_status st = qem_pread_full(fd, head, n, 0, QEM_E_IO, error);
    const int hdf5 = st == QEM_OK && has_hdf5_signature(fd, (uint64_t)sb.st_size);
    close(fd);
    QEM_TRY(st);
    const char *foreign = hdf5 ? NULL : foreign_format(head, n);
    if (foreign && !qem_input_raw_requested(options))
        return qem_fail(error, QEM_E_UNSUPPORTED, "'%s' is %s", path, foreign);
    acquisition *a = calloc(1, sizeof *a);
    if (!a)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    a->mask_origin = INPUT_ORIGIN_IMPLICIT_MASK;
    /* Raw options name the family; otherwise the content does: an HDF5
     * file is a Dectris master when the Arina family claims it, else a
     * dataset. */
    const input_family *family = NULL;
    if (qem_input_raw_requested(options))
        family = &qem_input_family_raw;
    else if (hdf5)
        st = hdf5_family_of(a, path, &family, error);
    for (size_t k = 0; st == QEM_OK && !family && k < sizeof families / sizeof families[0]; k++)
        if (families[k]->recognises && families[k]->recognises(head, n))
            family = families[k];
    if (st == QEM_OK && !family)
        st = qem_fail(error, QEM_E_UNSUPPORTED,
                      "'%s' is not a detector file qem recognises (.npy, HDF5, Dectris/Arina, "
                      "EMD, Velox .emd, Merlin .mib, EMPAD .xml, DM3/DM4, TIA .ser/.emi, "
                      "NanoMegas .blo, MRC, TVIPS, StreamPix .seq, K2 IS .bin, FRMS6, "
                      "raw_csr .toml); for other raw binary give --raw-shape and --raw-dtype",
                      path);
    if (st == QEM_OK) {
        a->family = family;
        st = family->describe(a, path, head, n, options, error);
    }
    if (st == QEM_OK)
        st = qem_input_check_shape(a, path, error);
    if (st == QEM_OK && a->read_values != INPUT_VALUES_AS_STORED)
        st = qem_input_settle_values(a, path, error);
    if (st != QEM_OK) {
        qem_input_close(a);
        return st;
    }
    *out = a;
    return QEM_OK;
}

void qem_input_close(acquisition *a)
{
    if (!a)
        return;
    if (a->family && a->family->release)
        a->family->release(a);
    for (size_t i = 0; i < a->member_count; i++) {
        free(a->members[i].path);
        qem_sha256_free(a->members[i].stream);
    }
    free(a->members);
    free(a->flagged);
    json_decref(a->facts);
    json_decref(a->calibration);
    json_decref(a->values);
    free(a);
}

/* --- reading ------------------------------------------------------------------------ */

const char *qem_input_read_as_name(const acquisition *a)
{
    return a->read_values != INPUT_VALUES_AS_STORED ? qem_input_values_name(a->read_values)
                                                    : qem_dtype_name(a->sample_type);
}

qem_dtype qem_input_stored_dtype(const acquisition *a)
{
    return a->sample_type == QEM_DTYPE_UINT32 ? QEM_DTYPE_UINT16 : a->sample_type;
}

/* uint32 frames [first, first + count) in `src` into uint16 `dst`. */
static qem_status narrow_u32(acquisition *a, const uint8_t *is_flagged, uint64_t first,
                             uint64_t count, const uint32_t *src, uint16_t *dst, qem_error *error)
{
    const uint64_t pixels = a->shape[2] * a->shape[3];
    for (uint64_t f = 0; f < count; f++) {
        /* Without flagged pixels, a frame whose largest value fits is
         * copied branch-free; others take the pixel-by-pixel path below. */
        if (!is_flagged) {
            uint32_t top = 0;
            for (uint64_t p = 0; p < pixels; p++) {
                const uint32_t v = src[f * pixels + p];
                top = v > top ? v : top;
                dst[f * pixels + p] = (uint16_t)v;
            }
            if (top <= 65535) {
                if (top > a->max_admitted)
                    a->max_admitted = top;
                continue;
            }
        }
        for (uint64_t p = 0; p < pixels; p++) {
            const uint32_t v = src[f * pixels + p];
            if (v <= 65535) {
                dst[f * pixels + p] = (uint16_t)v;
                if ((!is_flagged || !is_flagged[p]) && v > a->max_admitted)
                    a->max_admitted = v;
                continue;
            }
            if (is_flagged && is_flagged[p]) {
                dst[f * pixels + p] = 65535; /* a flagged pixel's sentinel */
                a->flagged_clipped++;
                continue;
            }
            const uint64_t scan = first + f;
            return qem_fail(error, QEM_E_VALUE_RANGE,
                            "scan position (%llu, %llu), detector pixel (%llu, %llu) holds %u, "
                            "which does not fit the uint16 storage of a uint32 acquisition; "
                            "nothing was written (counts are never clipped)",
                            (unsigned long long)(scan / a->shape[1]),
                            (unsigned long long)(scan % a->shape[1]),
                            (unsigned long long)(p / a->shape[3]),
                            (unsigned long long)(p % a->shape[3]), v);
        }
    }
    return QEM_OK;
}

qem_status qem_input_read(acquisition *a, uint64_t first, uint64_t count, qem_dtype target,
                          void *out, size_t out_size, qem_error *error)
{
    const uint64_t scans = a->shape[0] * a->shape[1], pixels = a->shape[2] * a->shape[3];
    if (first > scans || count > scans - first)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "frames [%llu, +%llu) are outside the %llu of the acquisition",
                        (unsigned long long)first, (unsigned long long)count,
                        (unsigned long long)scans);
    const size_t item = qem_dtype_size(target), sample = qem_dtype_size(a->sample_type);
    uint64_t values;
    if (qem_mul_overflow_u64(count, pixels, &values) || values > SIZE_MAX / 8)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "qem_input_read: %llu frames of %llu pixels are more than one call reads",
                        (unsigned long long)count, (unsigned long long)pixels);
    if (out_size / item < values)
        return qem_fail(error, QEM_E_BUFFER_TOO_SMALL,
                        "qem_input_read: %llu frames need %llu bytes, %zu given",
                        (unsigned long long)count, (unsigned long long)(values * item), out_size);
    const int same = target == a->sample_type;
    const int widen = target == QEM_DTYPE_UINT16 && a->sample_type == QEM_DTYPE_UINT8;
    const int narrow = target == QEM_DTYPE_UINT16 && a->sample_type == QEM_DTYPE_UINT32;
    if (!same && !widen && !narrow)
        return qem_fail(error, QEM_E_WRONG_CODEC, "%s samples cannot be read as %s",
                        qem_dtype_name(a->sample_type), qem_dtype_name(target));
    if (count == 0)
        return QEM_OK;
    if (a->read_values != INPUT_VALUES_AS_STORED)
        return qem_input_read_values(a, first, count, out, error);
    if (same)
        return a->family->read(a, first, count, out, error);
    if (widen) {
        /* Into the upper half of `out`, then widened front to back
         * (element i goes to bytes 2i, 2i+1 <= n+i: never ahead of an unread
         * byte). */
        uint8_t *bytes = (uint8_t *)out + values;
        QEM_TRY(a->family->read(a, first, count, bytes, error));
        uint16_t *wide = out;
        for (uint64_t i = 0; i < values; i++)
            wide[i] = bytes[i];
        return QEM_OK;
    }
    /* uint32 -> uint16 a few frames at a time through bounded scratch. */
    uint64_t per = SCRATCH_BYTES / (pixels * sample);
    if (per == 0)
        per = 1;
    uint32_t *scratch = malloc((size_t)((per < count ? per : count) * pixels) * sample);
    uint8_t *is_flagged = a->flagged_count ? calloc((size_t)pixels, 1) : NULL;
    qem_status st = scratch && (is_flagged || !a->flagged_count)
                        ? QEM_OK
                        : qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    for (uint64_t k = 0; st == QEM_OK && is_flagged && k < a->flagged_count; k++)
        is_flagged[a->flagged[k]] = 1;
    for (uint64_t done = 0; st == QEM_OK && done < count;) {
        const uint64_t n = count - done < per ? count - done : per;
        st = a->family->read(a, first + done, n, scratch, error);
        if (st == QEM_OK)
            st = narrow_u32(a, is_flagged, first + done, n, scratch,
                            (uint16_t *)out + done * pixels, error);
        done += n;
    }
    free(is_flagged);
    free(scratch);
    return st;
}

/* --- what a writer records --------------------------------------------------------- */

json_t *qem_input_source_metadata(const acquisition *a)
{
    json_t *members = json_array();
    char hex[65];
    for (size_t i = 0; i < a->member_count; i++) {
        const input_member *m = &a->members[i];
        const char *slash = strrchr(m->path, '/');
        json_t *entry = json_pack("{s:s, s:s, s:I}", "role", m->is_master ? "master" : "data",
                                  "file", slash ? slash + 1 : m->path, "bytes",
                                  (json_int_t)m->bytes);
        if (m->hashed) {
            qem_sha256_hex(m->sha256, hex);
            json_object_set_new(entry, "sha256", json_string(hex));
        }
        json_array_append_new(members, entry);
    }
    json_t *out = json_pack("{s:s, s:s, s:s, s:o, s:I}", "family", a->family->name, "sample_type",
                            qem_input_read_as_name(a), "stored_as",
                            qem_dtype_name(qem_input_stored_dtype(a)), "members", members,
                            "flagged_pixels", (json_int_t)a->flagged_count);
    if (!out)
        return NULL;
    if (a->authenticated) {
        qem_sha256_hex(a->identity, hex);
        json_object_set_new(out, "identity_sha256", json_string(hex));
    }
    if (a->sample_type == QEM_DTYPE_UINT32)
        json_object_set_new(out, "narrowing",
                            json_pack("{s:s, s:I, s:I, s:s}", "rule",
                                      "uint32 stored as uint16 only when every admitted value "
                                      "fits; flagged pixels' values above 65535 stored as 65535",
                                      "max_admitted_value", (json_int_t)a->max_admitted,
                                      "flagged_values_stored_as_65535",
                                      (json_int_t)a->flagged_clipped, "checked", "while reading"));
    if (a->values)
        json_object_set(out, "values", a->values);
    /* Which facts became calibration (the rest stay facts, above). */
    json_t *quantities = a->calibration ? json_object_get(a->calibration, "quantities") : NULL;
    json_t *used = json_array();
    const char *key;
    json_t *value;
    json_object_foreach(quantities, key, value)
        json_array_append_new(used, json_string(key));
    if (!json_array_size(used)) {
        json_decref(used);
        used = json_string("none: the file states no calibration qem can take as certain");
    }
    json_object_set_new(out, "calibration_from_source", used);
    if (a->facts)
        json_object_set(out, a->family->name, a->facts);
    return out;
}
