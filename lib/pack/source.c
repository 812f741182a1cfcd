/* Sources of the pack producer: a .npy array, a dense dataset inside any
 * HDF5 file, or a Dectris/Arina family (a master whose /entry/data links
 * data_000001, data_000002, ... name data files of frames). Every member is
 * hashed byte for byte between two stat snapshots; frames are read through
 * libhdf5 (so its filters, bitshuffle/LZ4 included, apply) one request at a
 * time. See doc/pack-sources.md for the rules this file implements.
 *
 * libhdf5 is not thread-safe in Debian's serial build: use one source from
 * one thread at a time, and do not call libhdf5 elsewhere concurrently. */
#include "pack/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hdf5.h>

#include "common/error.h"
#include "common/npy.h"
#include "common/fileio.h"
#include "common/sha256.h"
#include "pack/source_identity.h"

#define HASH_BUFFER_BYTES (1u << 20)
#define MASK_BLOCK_ELEMENTS (1u << 18)
/* Chunk grids larger than this are not walked for their stored sizes
 * (largest_compressed_chunk is then reported as unknown, 0). */
#define MAX_CHUNK_CELLS (1ull << 24)
#define BITSHUFFLE_FILTER 32008

#define ARINA_GROUP "/entry/data"
#define ARINA_MASK "/entry/instrument/detector/detectorSpecific/pixel_mask"
#define ORIGIN_SOURCE_MASK "source-little-endian-u32-mask"
#define ORIGIN_IMPLICIT_MASK "implicit-all-admitted-u32-mask"

/* --- libhdf5 API differences (1.10 as Debian ships it, and 1.12+) ------- */

#if H5_VERSION_GE(1, 12, 0)
typedef H5O_info2_t src_oinfo;
typedef H5L_info2_t src_linfo;
static herr_t src_oget_info(hid_t object, src_oinfo *info)
{
    return H5Oget_info3(object, info, H5O_INFO_BASIC);
}
static herr_t src_lget_info(hid_t location, const char *name, src_linfo *info)
{
    return H5Lget_info2(location, name, info, H5P_DEFAULT);
}
#define SRC_OVISIT(object, callback, data)                                                         \
    H5Ovisit3(object, H5_INDEX_NAME, H5_ITER_INC, callback, data, H5O_INFO_BASIC)
#else
typedef H5O_info_t src_oinfo;
typedef H5L_info_t src_linfo;
static herr_t src_oget_info(hid_t object, src_oinfo *info)
{
    return H5Oget_info2(object, info, H5O_INFO_BASIC);
}
static herr_t src_lget_info(hid_t location, const char *name, src_linfo *info)
{
    return H5Lget_info(location, name, info, H5P_DEFAULT);
}
#define SRC_OVISIT(object, callback, data)                                                         \
    H5Ovisit2(object, H5_INDEX_NAME, H5_ITER_INC, callback, data, H5O_INFO_BASIC)
#endif

static void h5_close_id(hid_t id)
{
    if (id < 0)
        return;
    switch (H5Iget_type(id)) {
    case H5I_FILE: H5Fclose(id); break;
    case H5I_GROUP: H5Gclose(id); break;
    case H5I_DATASET: H5Dclose(id); break;
    case H5I_DATASPACE: H5Sclose(id); break;
    case H5I_DATATYPE: H5Tclose(id); break;
    case H5I_ATTR: H5Aclose(id); break;
    case H5I_GENPROP_LST: H5Pclose(id); break;
    default: H5Oclose(id); break;
    }
}

static herr_t innermost_error(unsigned n, const H5E_error2_t *e, void *data)
{
    char *reason = data;
    if (n == 0 && e && e->desc)
        snprintf(reason, 200, "%s", e->desc);
    return 0;
}

/* Records a failure of a libhdf5 call, adding libhdf5's innermost reason. */
static qem_status h5_fail(qem_error *error, qem_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
static qem_status h5_fail(qem_error *error, qem_status status, const char *format, ...)
{
    char reason[200] = "";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_error, reason);
    char what[sizeof error->message];
    va_list args;
    va_start(args, format);
    vsnprintf(what, sizeof what, format, args);
    va_end(args);
    if (reason[0])
        return qem_fail(error, status, "%s (libhdf5: %s)", what, reason);
    return qem_fail(error, status, "%s", what);
}

/* --- the source's private state ----------------------------------------- */

typedef struct src_part {
    char *file;      /* the member holding these frames */
    char *dataset;   /* dataset path inside it */
    uint64_t first;  /* first flat frame */
    uint64_t frames;
} src_part;

typedef struct src_impl {
    qem_npy *npy;
    src_part *parts;
    size_t part_count;
    int rank; /* of the HDF5 datasets: 3 (frames, rows, cols) or 4 */
    size_t open_part;
    hid_t file, dset;
} src_impl;

static void impl_close_handles(src_impl *im)
{
    if (im->dset >= 0)
        H5Dclose(im->dset);
    if (im->file >= 0)
        H5Fclose(im->file);
    im->dset = im->file = -1;
}

static void impl_free(src_impl *im)
{
    if (!im)
        return;
    qem_npy_close(im->npy);
    if (im->file >= 0 || im->dset >= 0) {
        H5E_BEGIN_TRY
        {
            impl_close_handles(im);
        }
        H5E_END_TRY;
    }
    for (size_t i = 0; i < im->part_count; i++) {
        free(im->parts[i].file);
        free(im->parts[i].dataset);
    }
    free(im->parts);
    free(im);
}

void pack_source_close(pack_source *source)
{
    if (!source)
        return;
    for (size_t i = 0; i < source->member_count; i++)
        free(source->members[i].path);
    free(source->members);
    free(source->bad_pixels);
    impl_free(source->impl);
    free(source);
}

static qem_status add_part(src_impl *im, const char *file, const char *dataset, uint64_t first,
                           uint64_t frames, qem_error *error)
{
    src_part *grown = realloc(im->parts, (im->part_count + 1) * sizeof *grown);
    if (!grown)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    im->parts = grown;
    src_part *p = &im->parts[im->part_count];
    p->file = strdup(file);
    p->dataset = strdup(dataset);
    p->first = first;
    p->frames = frames;
    im->part_count++;
    if (!p->file || !p->dataset)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    return QEM_OK;
}

/* --- members: hashing and stat snapshots --------------------------------- */

/* SHA-256 of every byte of `path`, streamed; `snap` receives the stat
 * taken before and found again after. A file that cannot be opened is
 * `open_status` (QEM_E_IO while inspecting, QEM_E_CHANGED later).
 * `progress` hears of every buffer, so a large member can be cancelled. */
static qem_status hash_file(const char *path, qem_status open_status, uint8_t digest[32],
                            pack_member *snap, uint64_t *bytes, qem_progress_fn progress,
                            void *progress_user, qem_error *error)
{
    int fd = -1;
    struct stat before;
    qem_error opened;
    qem_error_clear(&opened);
    qem_status st = qem_open_input(path, &fd, &before, &opened);
    if (st != QEM_OK)
        return qem_fail(error, open_status, "%s", opened.message);
    uint8_t *buffer = NULL;
    qem_sha256 *ctx = NULL;
    uint64_t total = 0;
    buffer = malloc(HASH_BUFFER_BYTES);
    ctx = qem_sha256_new();
    if (!buffer || !ctx)
        st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
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
        qem_file_stamp_from_stat(&before, &snap->stamp);
        qem_error changed;
        if (qem_file_stamp_check(fd, &snap->stamp, path, "hashed", &changed) != QEM_OK ||
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

static qem_status add_member(pack_source *s, const char *path, int is_master,
                             const pack_source_options *o, qem_error *error)
{
    pack_member *grown = realloc(s->members, (s->member_count + 1) * sizeof *grown);
    if (!grown)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    s->members = grown;
    pack_member *m = &s->members[s->member_count];
    memset(m, 0, sizeof *m);
    m->path = strdup(path);
    if (!m->path)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    m->is_master = is_master;
    s->member_count++;
    QEM_TRY(hash_file(path, QEM_E_IO, m->sha256, m, &m->bytes, o ? o->progress : NULL,
                      o ? o->progress_user : NULL, error));
    for (size_t i = 0; i + 1 < s->member_count; i++) {
        if (s->members[i].stamp.dev == m->stamp.dev && s->members[i].stamp.ino == m->stamp.ino)
            return strcmp(s->members[i].path, path) == 0
                       ? qem_fail(error, QEM_E_LAYOUT,
                                  "the master links '%s' more than once; every member of a "
                                  "source must be a distinct file",
                                  path)
                       : qem_fail(error, QEM_E_LAYOUT,
                                  "'%s' and '%s' are the same file; every member of a source "
                                  "must be a distinct file",
                                  s->members[i].path, path);
    }
    return QEM_OK;
}

qem_status pack_source_check_unchanged(const pack_source *source, qem_error *error)
{
    if (!source)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "pack_source_check_unchanged: NULL source");
    for (size_t i = 0; i < source->member_count; i++) {
        const pack_member *m = &source->members[i];
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
                            "authenticated; inspect the source again",
                            m->path);
    }
    return QEM_OK;
}

qem_status pack_source_reauthenticate(pack_source *source, qem_progress_fn progress,
                                      void *progress_user, qem_error *error)
{
    if (!source)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "pack_source_reauthenticate: NULL source");
    for (size_t i = 0; i < source->member_count; i++) {
        const pack_member *m = &source->members[i];
        pack_member now;
        memset(&now, 0, sizeof now);
        uint8_t digest[32];
        uint64_t bytes = 0;
        QEM_TRY(hash_file(m->path, QEM_E_CHANGED, digest, &now, &bytes, progress, progress_user,
                          error));
        if (memcmp(digest, m->sha256, 32) != 0 || bytes != m->bytes)
            return qem_fail(error, QEM_E_CHANGED,
                            "source member '%s' no longer has the SHA-256 it had when it was "
                            "inspected; its content changed, so inspect the source again",
                            m->path);
        if (!qem_file_stamp_equal(&now.stamp, &m->stamp))
            return qem_fail(error, QEM_E_CHANGED,
                            "source member '%s' was replaced or touched since it was inspected "
                            "(its stat differs); inspect the source again",
                            m->path);
    }
    return QEM_OK;
}

/* --- identity and mask digest ------------------------------------------- */

qem_status pack_source_identity(const uint8_t *master_sha256, const uint8_t (*data_sha256)[32],
                                size_t data_count, uint8_t identity[32], qem_error *error)
{
    qem_sha256 *ctx = qem_sha256_new();
    if (!ctx)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    static const char schema[] = PACK_SOURCE_IDENTITY_SCHEMA; /* sizeof includes the NUL */
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

static qem_status compute_identity(pack_source *s, qem_error *error)
{
    size_t data_count = 0;
    uint8_t(*data)[32] = malloc((s->member_count ? s->member_count : 1) * sizeof *data);
    if (!data)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    const uint8_t *master = NULL;
    for (size_t i = 0; i < s->member_count; i++) {
        if (s->members[i].is_master)
            master = s->members[i].sha256;
        else
            memcpy(data[data_count++], s->members[i].sha256, 32);
    }
    qem_status st = pack_source_identity(master, (const uint8_t(*)[32])data, data_count,
                                         s->identity, error);
    free(data);
    return st;
}

/* No mask in the source: SHA-256 of 4 * pixels zero bytes. */
static qem_status implicit_mask(pack_source *s, uint64_t pixels, qem_error *error)
{
    static const uint8_t zeros[4096];
    qem_sha256 *ctx = qem_sha256_new();
    if (!ctx)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    int bad = 0;
    for (uint64_t left = 4 * pixels; left;) {
        size_t n = left < sizeof zeros ? (size_t)left : sizeof zeros;
        bad |= qem_sha256_update(ctx, zeros, n);
        left -= n;
    }
    bad |= qem_sha256_final(ctx, s->detector_mask_sha256);
    qem_sha256_free(ctx);
    s->mask_origin = ORIGIN_IMPLICIT_MASK;
    return bad ? qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 of the implicit mask failed") : QEM_OK;
}

/* --- recognising the kind of a file -------------------------------------- */

typedef enum { SIG_UNKNOWN, SIG_NPY, SIG_HDF5, SIG_PACK, SIG_QEM } sig_kind;

static qem_status detect_kind(const char *path, sig_kind *kind, qem_error *error)
{
    static const uint8_t hdf5_sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    *kind = SIG_UNKNOWN;
    int fd = -1;
    struct stat sb;
    QEM_TRY(qem_open_input(path, &fd, &sb, error));
    qem_status st = QEM_OK;
    uint8_t head[8] = {0};
    if (sb.st_size >= 8) {
        st = qem_pread_full(fd, head, 8, 0, QEM_E_IO, error);
    }
    const uint64_t size = st == QEM_OK ? (uint64_t)sb.st_size : 0;
    if (st == QEM_OK && size >= 6 && memcmp(head, "\x93NUMPY", 6) == 0) {
        *kind = SIG_NPY;
    } else if (st == QEM_OK && size >= 8 && memcmp(head, "QGPUH5\0\x01", 8) == 0) {
        *kind = SIG_PACK;
    } else if (st == QEM_OK && size >= 8 && memcmp(head, "QEMDATA1", 8) == 0) {
        *kind = SIG_QEM;
    } else if (st == QEM_OK) {
        /* The HDF5 superblock sits at 0 or after a user block of 512 * 2^k. */
        for (uint64_t off = 0; st == QEM_OK && off + 8 <= size; off = off ? 2 * off : 512) {
            uint8_t sig[8];
            st = qem_pread_full(fd, sig, 8, off, QEM_E_IO, error);
            if (st == QEM_OK && memcmp(sig, hdf5_sig, 8) == 0) {
                *kind = SIG_HDF5;
                break;
            }
        }
    }
    close(fd);
    return st;
}

/* --- small HDF5 helpers -------------------------------------------------- */

enum { OBJ_ABSENT = 0, OBJ_HERE = 1, OBJ_ELSEWHERE = 2 };

/* Whether `path` names an object reachable without leaving `file` through
 * an external link: OBJ_ABSENT, OBJ_HERE or OBJ_ELSEWHERE. */
static qem_status locate(hid_t file, const char *file_path, const char *path, int *where,
                         qem_error *error)
{
    *where = OBJ_ABSENT;
    size_t len = strlen(path);
    char *prefix = malloc(len + 2);
    if (!prefix)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    /* Always absolute, without a trailing slash. */
    size_t n = 0;
    if (path[0] != '/')
        prefix[n++] = '/';
    memcpy(prefix + n, path, len + 1);
    n += len;
    while (n > 1 && prefix[n - 1] == '/')
        prefix[--n] = '\0';
    qem_status st = QEM_OK;
    if (n <= 1) {
        *where = OBJ_HERE; /* the root group */
        free(prefix);
        return st;
    }
    for (size_t i = 1; i <= n && st == QEM_OK; i++) {
        if (i < n && prefix[i] != '/')
            continue;
        char saved = prefix[i];
        prefix[i] = '\0';
        htri_t exists = H5Lexists(file, prefix, H5P_DEFAULT);
        if (exists < 0) {
            st = h5_fail(error, QEM_E_IO, "cannot look up '%s' in '%s'", prefix, file_path);
        } else if (exists == 0) {
            prefix[i] = saved;
            free(prefix);
            return QEM_OK; /* absent */
        } else {
            src_linfo info;
            if (src_lget_info(file, prefix, &info) < 0)
                st = h5_fail(error, QEM_E_IO, "cannot inspect link '%s' in '%s'", prefix,
                             file_path);
            else if (info.type == H5L_TYPE_EXTERNAL || info.type >= H5L_TYPE_UD_MIN) {
                *where = OBJ_ELSEWHERE;
                free(prefix);
                return QEM_OK;
            }
        }
        prefix[i] = saved;
    }
    if (st == QEM_OK)
        *where = OBJ_HERE;
    free(prefix);
    return st;
}

/* Opens `path` (already located OBJ_HERE) and checks that it lives in
 * `file` itself and is of `type`. */
static qem_status open_here(hid_t file, const char *file_path, const char *path, H5O_type_t type,
                            hid_t *out, qem_error *error)
{
    *out = -1;
    hid_t obj = H5Oopen(file, path, H5P_DEFAULT);
    if (obj < 0)
        return h5_fail(error, QEM_E_IO, "cannot open '%s' in '%s'", path, file_path);
    src_oinfo fi, oi;
    if (src_oget_info(file, &fi) < 0 || src_oget_info(obj, &oi) < 0) {
        qem_status st = h5_fail(error, QEM_E_IO, "cannot inspect '%s' in '%s'", path, file_path);
        H5Oclose(obj);
        return st;
    }
    if (oi.fileno != fi.fileno) {
        H5Oclose(obj);
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' in '%s' lives in another file (reached through a link); qem "
                        "authenticates only the files it reads, so give that file itself",
                        path, file_path);
    }
    if (oi.type != type) {
        H5Oclose(obj);
        return qem_fail(error, QEM_E_LAYOUT, "'%s' in '%s' is not a %s", path, file_path,
                        type == H5O_TYPE_DATASET ? "dataset" : "group");
    }
    *out = obj;
    return QEM_OK;
}

/* The stored sample type: uint8 or uint16; everything else refused. */
static qem_status classify_type(hid_t dset, const char *where, qem_dtype *dtype, qem_error *error)
{
    hid_t type = H5Dget_type(dset);
    if (type < 0)
        return h5_fail(error, QEM_E_IO, "cannot read the type of %s", where);
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    H5T_sign_t sign = H5Tget_sign(type);
    H5Tclose(type);
    if (cls == H5T_INTEGER && sign == H5T_SGN_NONE && (size == 1 || size == 2)) {
        *dtype = size == 1 ? QEM_DTYPE_UINT8 : QEM_DTYPE_UINT16;
        return QEM_OK;
    }
    if (cls == H5T_INTEGER && sign == H5T_SGN_NONE && size == 4)
        return qem_fail(error, QEM_E_NOT_YET,
                        "%s holds uint32 counts, which qem does not pack yet; the pack format "
                        "records uint16 sources (convert counts that fit, or keep the original)",
                        where);
    if (cls == H5T_INTEGER)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "%s holds %s %zu-bit integers; packs hold unsigned uint8/uint16 counts "
                        "(convert with array.astype('<u2') after checking every value is "
                        "0..65535)",
                        where, sign == H5T_SGN_NONE ? "unsigned" : "signed", 8 * size);
    if (cls == H5T_FLOAT)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "%s holds %zu-bit floating-point values; packs hold exact uint8/uint16 "
                        "counts (float data go into a .qem file with the float codec)",
                        where, 8 * size);
    return qem_fail(error, QEM_E_UNSUPPORTED,
                    "%s does not hold numbers; packs hold uint8/uint16 detector counts", where);
}

/* Reads an optional `scan_shape` attribute (two positive integers). */
static qem_status read_scan_shape_attr(hid_t obj, const char *where, int *found,
                                       uint64_t shape[2], qem_error *error)
{
    *found = 0;
    htri_t exists = H5Aexists(obj, "scan_shape");
    if (exists < 0)
        return h5_fail(error, QEM_E_IO, "cannot look for a scan_shape attribute on %s", where);
    if (exists == 0)
        return QEM_OK;
    hid_t attr = H5Aopen(obj, "scan_shape", H5P_DEFAULT);
    if (attr < 0)
        return h5_fail(error, QEM_E_IO, "cannot open the scan_shape attribute of %s", where);
    hid_t space = H5Aget_space(attr), type = H5Aget_type(attr);
    qem_status st = QEM_OK;
    hssize_t points = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    if (space < 0 || type < 0) {
        st = h5_fail(error, QEM_E_IO, "cannot inspect the scan_shape attribute of %s", where);
    } else if (H5Tget_class(type) != H5T_INTEGER || points != 2) {
        st = qem_fail(error, QEM_E_METADATA,
                      "the scan_shape attribute of %s must hold two integers (rows, columns)",
                      where);
    } else if (H5Tget_sign(type) == H5T_SGN_NONE) {
        unsigned long long v[2] = {0, 0};
        if (H5Aread(attr, H5T_NATIVE_ULLONG, v) < 0)
            st = h5_fail(error, QEM_E_IO, "cannot read the scan_shape attribute of %s", where);
        shape[0] = v[0];
        shape[1] = v[1];
    } else {
        long long v[2] = {0, 0};
        if (H5Aread(attr, H5T_NATIVE_LLONG, v) < 0)
            st = h5_fail(error, QEM_E_IO, "cannot read the scan_shape attribute of %s", where);
        shape[0] = v[0] > 0 ? (uint64_t)v[0] : 0;
        shape[1] = v[1] > 0 ? (uint64_t)v[1] : 0;
    }
    if (st == QEM_OK && (shape[0] == 0 || shape[1] == 0))
        st = qem_fail(error, QEM_E_METADATA,
                      "the scan_shape attribute of %s must hold two positive integers", where);
    if (st == QEM_OK)
        *found = 1;
    h5_close_id(type);
    h5_close_id(space);
    H5Aclose(attr);
    return st;
}

/* The scan_shape attribute of the first of `paths` (inside `file`) that
 * carries one; two that disagree are refused. */
static qem_status scan_shape_from_file(hid_t file, const char *file_path, const char *const *paths,
                                       size_t path_count, int *found, uint64_t shape[2],
                                       char *found_on, size_t found_on_size, qem_error *error)
{
    *found = 0;
    for (size_t i = 0; i < path_count; i++) {
        int where;
        QEM_TRY(locate(file, file_path, paths[i], &where, error));
        if (where != OBJ_HERE)
            continue;
        hid_t obj = H5Oopen(file, paths[i], H5P_DEFAULT);
        if (obj < 0)
            return h5_fail(error, QEM_E_IO, "cannot open '%s' in '%s'", paths[i], file_path);
        char where_text[512];
        snprintf(where_text, sizeof where_text, "'%s' in '%s'", paths[i], file_path);
        int here = 0;
        uint64_t v[2] = {0, 0};
        qem_status st = read_scan_shape_attr(obj, where_text, &here, v, error);
        H5Oclose(obj);
        QEM_TRY(st);
        if (!here)
            continue;
        if (*found && (v[0] != shape[0] || v[1] != shape[1]))
            return qem_fail(error, QEM_E_METADATA,
                            "'%s' carries two scan_shape attributes that disagree (%llux%llu on "
                            "%s, %llux%llu on %s); fix the file or give the scan shape "
                            "(--scan-shape ROWS,COLUMNS)",
                            file_path, (unsigned long long)shape[0],
                            (unsigned long long)shape[1], found_on, (unsigned long long)v[0],
                            (unsigned long long)v[1], paths[i]);
        if (!*found)
            snprintf(found_on, found_on_size, "%s", paths[i]);
        shape[0] = v[0];
        shape[1] = v[1];
        *found = 1;
    }
    return QEM_OK;
}

/* The scan shape of a 3D stack of `frames`: the caller's, else the file's;
 * they must agree, and rows * columns must be the frame count. */
static qem_status resolve_scan_shape(const pack_source_options *o, int have_attr,
                                     const uint64_t attr[2], const char *attr_on, uint64_t frames,
                                     const char *path, uint64_t out[2], qem_error *error)
{
    const int given = o && (o->scan_shape[0] || o->scan_shape[1]);
    if (given && (!o->scan_shape[0] || !o->scan_shape[1]))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the scan shape %llux%llu must have two positive values (rows, columns)",
                        (unsigned long long)o->scan_shape[0], (unsigned long long)o->scan_shape[1]);
    if (given && have_attr && (o->scan_shape[0] != attr[0] || o->scan_shape[1] != attr[1]))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "the scan shape given (%llux%llu) contradicts the scan_shape attribute "
                        "%llux%llu on %s in '%s'; omit the scan shape or correct the file",
                        (unsigned long long)o->scan_shape[0], (unsigned long long)o->scan_shape[1],
                        (unsigned long long)attr[0], (unsigned long long)attr[1], attr_on, path);
    if (given) {
        out[0] = o->scan_shape[0];
        out[1] = o->scan_shape[1];
    } else if (have_attr) {
        out[0] = attr[0];
        out[1] = attr[1];
    } else {
        return qem_fail(error, QEM_E_LAYOUT,
                        "'%s' is a stack of %llu frames with no scan_shape attribute; give the "
                        "scan shape (--scan-shape ROWS,COLUMNS) whose product is %llu",
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

/* --- one dataset of frames ------------------------------------------------ */

typedef struct ds_info {
    int rank;
    hsize_t dims[4];
    qem_dtype dtype;
    uint64_t largest_chunk; /* stored bytes; 0 when contiguous or not walked */
} ds_info;

static qem_status check_filters(hid_t dcpl, const char *where, qem_error *error)
{
    int nfilters = H5Pget_nfilters(dcpl);
    if (nfilters < 0)
        return h5_fail(error, QEM_E_IO, "cannot list the filters of %s", where);
    for (int i = 0; i < nfilters; i++) {
        unsigned flags = 0, config = 0, cd[16];
        size_t ncd = 16;
        char name[128] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof name, name,
                                         &config);
        if (id < 0)
            return h5_fail(error, QEM_E_IO, "cannot read filter %d of %s", i, where);
        htri_t avail = H5Zfilter_avail(id);
        unsigned info = 0;
        if (avail > 0 && H5Zget_filter_info(id, &info) < 0)
            info = 0;
        if (avail <= 0 || !(info & H5Z_FILTER_CONFIG_DECODE_ENABLED)) {
            if (id == BITSHUFFLE_FILTER)
                return qem_fail(error, QEM_E_UNSUPPORTED,
                                "%s is compressed with the bitshuffle/LZ4 HDF5 filter (id 32008), "
                                "which libhdf5 cannot load here; install the bitshuffle HDF5 "
                                "plugin (Debian package 'bitshuffle') or point HDF5_PLUGIN_PATH "
                                "at it",
                                where);
            return qem_fail(error, QEM_E_UNSUPPORTED,
                            "%s needs HDF5 filter %d (%s), which libhdf5 cannot decode here; "
                            "install its plugin (HDF5_PLUGIN_PATH) or repack the file without it "
                            "(h5repack)",
                            where, (int)id, name[0] ? name : "unnamed");
        }
    }
    return QEM_OK;
}

/* Refuses chunked datasets with unstored chunks and finds the largest
 * stored chunk. */
static qem_status chunk_stats(hid_t dset, hid_t dcpl, const ds_info *d, const char *where,
                              uint64_t *largest, qem_error *error)
{
    *largest = 0;
    hsize_t cdims[4] = {0, 0, 0, 0}, grid[4] = {1, 1, 1, 1};
    if (H5Pget_chunk(dcpl, d->rank, cdims) != d->rank)
        return h5_fail(error, QEM_E_IO, "cannot read the chunk shape of %s", where);
    uint64_t cells = 1;
    for (int i = 0; i < d->rank; i++) {
        if (cdims[i] == 0)
            return qem_fail(error, QEM_E_LAYOUT, "%s declares an empty chunk shape", where);
        grid[i] = (d->dims[i] + cdims[i] - 1) / cdims[i];
        if (qem_mul_overflow_u64(cells, grid[i], &cells))
            cells = UINT64_MAX;
    }
    if (cells > MAX_CHUNK_CELLS)
        return QEM_OK; /* too many to walk: the largest stays unknown */
    hid_t space = H5Dget_space(dset);
    hsize_t stored = 0;
    herr_t r = space >= 0 ? H5Dget_num_chunks(dset, space, &stored) : -1;
    h5_close_id(space);
    if (r < 0)
        return h5_fail(error, QEM_E_IO, "cannot count the stored chunks of %s", where);
    if (stored < cells)
        return qem_fail(error, QEM_E_LAYOUT,
                        "%s stores only %llu of its %llu chunks; the others would read as fill "
                        "values, which means the acquisition was not written completely; "
                        "recopy the complete file",
                        where, (unsigned long long)stored, (unsigned long long)cells);
    hsize_t index[4] = {0, 0, 0, 0}, offset[4];
    for (uint64_t c = 0; c < cells; c++) {
        for (int i = 0; i < d->rank; i++)
            offset[i] = index[i] * cdims[i];
        hsize_t bytes = 0;
        if (H5Dget_chunk_storage_size(dset, offset, &bytes) < 0)
            return h5_fail(error, QEM_E_IO, "cannot read the stored size of a chunk of %s",
                           where);
        if (bytes > *largest)
            *largest = bytes;
        for (int i = d->rank - 1; i >= 0; i--) {
            if (++index[i] < grid[i])
                break;
            index[i] = 0;
        }
    }
    return QEM_OK;
}

/* Shape, type and storage of a frame dataset; refuses what cannot be read
 * faithfully. `want_rank` 0 accepts 3 or 4. */
static qem_status inspect_dataset(hid_t dset, const char *where, int want_rank, ds_info *d,
                                  qem_error *error)
{
    memset(d, 0, sizeof *d);
    hid_t space = H5Dget_space(dset);
    if (space < 0)
        return h5_fail(error, QEM_E_IO, "cannot read the shape of %s", where);
    int simple = H5Sget_simple_extent_type(space) == H5S_SIMPLE;
    int rank = simple ? H5Sget_simple_extent_ndims(space) : -1;
    if (rank >= 3 && rank <= 4)
        H5Sget_simple_extent_dims(space, d->dims, NULL);
    H5Sclose(space);
    if (rank < 3 || rank > 4 || (want_rank && rank != want_rank))
        return qem_fail(error, QEM_E_LAYOUT,
                        "%s has %d dimensions; a source must be a 3D stack (frames, rows, "
                        "columns)%s",
                        where, rank, want_rank == 3 ? "" : " or a 4D array (scan rows, scan "
                                                            "columns, rows, columns)");
    d->rank = rank;
    for (int i = 0; i < rank; i++)
        if (d->dims[i] == 0)
            return qem_fail(error, QEM_E_LAYOUT, "%s has an empty dimension", where);
    QEM_TRY(classify_type(dset, where, &d->dtype, error));
    hid_t dcpl = H5Dget_create_plist(dset);
    if (dcpl < 0)
        return h5_fail(error, QEM_E_IO, "cannot read the storage properties of %s", where);
    qem_status st = QEM_OK;
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int externals = H5Pget_external_count(dcpl);
    if (layout == H5D_VIRTUAL || externals > 0)
        st = qem_fail(error, QEM_E_UNSUPPORTED,
                      "%s keeps its samples in other files (%s); qem authenticates only the "
                      "files it reads, so materialize it first (h5repack)",
                      where, layout == H5D_VIRTUAL ? "a virtual dataset" : "external storage");
    else if (layout < 0 || externals < 0)
        st = h5_fail(error, QEM_E_IO, "cannot read the storage layout of %s", where);
    if (st == QEM_OK)
        st = check_filters(dcpl, where, error);
    if (st == QEM_OK && layout == H5D_CHUNKED)
        st = chunk_stats(dset, dcpl, d, where, &d->largest_chunk, error);
    H5Pclose(dcpl);
    return st;
}

/* --- detector mask ------------------------------------------------------- */

/* Bad pixels and the mask digest from the Dectris pixel_mask in `file`,
 * or the implicit all-admitted mask when it has none. */
static qem_status read_mask(pack_source *s, hid_t file, const char *file_path, qem_error *error)
{
    const uint64_t rows = s->shape[2], cols = s->shape[3], pixels = rows * cols;
    int where = OBJ_ABSENT;
    if (file >= 0)
        QEM_TRY(locate(file, file_path, ARINA_MASK, &where, error));
    if (where == OBJ_ELSEWHERE)
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "%s in '%s' is an external link; the detector mask must be stored in "
                        "the file itself",
                        ARINA_MASK, file_path);
    if (where == OBJ_ABSENT)
        return implicit_mask(s, pixels, error);
    hid_t dset = -1, space = -1, type = -1, fspace = -1, mspace = -1;
    QEM_TRY(open_here(file, file_path, ARINA_MASK, H5O_TYPE_DATASET, &dset, error));
    void *block = NULL;
    uint8_t *le = NULL;
    qem_sha256 *ctx = NULL;
    uint32_t *bad = NULL;
    uint64_t bad_count = 0, bad_cap = 0;
    qem_status st = QEM_OK;
    hsize_t dims[2] = {0, 0};
    space = H5Dget_space(dset);
    type = H5Dget_type(dset);
    if (space < 0 || type < 0) {
        st = h5_fail(error, QEM_E_IO, "cannot inspect %s in '%s'", ARINA_MASK, file_path);
    } else if (H5Sget_simple_extent_ndims(space) != 2 ||
               H5Sget_simple_extent_dims(space, dims, NULL) != 2 || dims[0] != rows ||
               dims[1] != cols) {
        st = qem_fail(error, QEM_E_METADATA,
                      "%s in '%s' is not a %llux%llu plane like the detector frames; the mask "
                      "and the frames must describe the same detector",
                      ARINA_MASK, file_path, (unsigned long long)rows, (unsigned long long)cols);
    } else if (H5Tget_class(type) != H5T_INTEGER) {
        st = qem_fail(error, QEM_E_METADATA,
                      "%s in '%s' does not hold integers; Dectris masks are uint32", ARINA_MASK,
                      file_path);
    }
    const int is_signed = st == QEM_OK && H5Tget_sign(type) != H5T_SGN_NONE;
    const uint64_t block_rows = cols >= MASK_BLOCK_ELEMENTS ? 1 : MASK_BLOCK_ELEMENTS / cols;
    if (st == QEM_OK) {
        block = malloc((size_t)(block_rows * cols) * 8);
        le = malloc((size_t)(block_rows * cols) * 4);
        ctx = qem_sha256_new();
        fspace = H5Dget_space(dset);
        if (!block || !le || !ctx)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory for the detector mask");
        else if (fspace < 0)
            st = h5_fail(error, QEM_E_IO, "cannot inspect %s in '%s'", ARINA_MASK, file_path);
    }
    for (uint64_t r0 = 0; st == QEM_OK && r0 < rows; r0 += block_rows) {
        const uint64_t nr = rows - r0 < block_rows ? rows - r0 : block_rows;
        const hsize_t start[2] = {r0, 0}, count[2] = {nr, cols}, elems = nr * cols;
        mspace = H5Screate_simple(1, &elems, NULL);
        if (mspace < 0 ||
            H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            H5Dread(dset, is_signed ? H5T_NATIVE_LLONG : H5T_NATIVE_ULLONG, mspace, fspace,
                    H5P_DEFAULT, block) < 0) {
            st = h5_fail(error, QEM_E_IO, "cannot read %s in '%s'", ARINA_MASK, file_path);
            break;
        }
        H5Sclose(mspace);
        mspace = -1;
        for (uint64_t i = 0; st == QEM_OK && i < elems; i++) {
            uint64_t v;
            if (is_signed) {
                long long sv = ((const long long *)block)[i];
                v = sv < 0 ? UINT64_MAX : (uint64_t)sv;
            } else {
                v = ((const unsigned long long *)block)[i];
            }
            const uint64_t pixel = r0 * cols + i;
            if (v > UINT32_MAX) {
                st = qem_fail(error, QEM_E_METADATA,
                              "%s in '%s' holds a value outside 0..4294967295 at pixel %llu; "
                              "a detector mask is a little-endian u32 plane",
                              ARINA_MASK, file_path, (unsigned long long)pixel);
                break;
            }
            le[4 * i] = (uint8_t)v;
            le[4 * i + 1] = (uint8_t)(v >> 8);
            le[4 * i + 2] = (uint8_t)(v >> 16);
            le[4 * i + 3] = (uint8_t)(v >> 24);
            if (v == 0)
                continue;
            if (bad_count == bad_cap) {
                uint64_t cap = bad_cap ? 2 * bad_cap : 64;
                uint32_t *grown = realloc(bad, (size_t)cap * sizeof *grown);
                if (!grown) {
                    st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory for bad pixels");
                    break;
                }
                bad = grown;
                bad_cap = cap;
            }
            bad[bad_count++] = (uint32_t)pixel;
        }
        if (st == QEM_OK && qem_sha256_update(ctx, le, (size_t)elems * 4) != 0)
            st = qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 of the detector mask failed");
    }
    if (st == QEM_OK && bad_count >= pixels)
        st = qem_fail(error, QEM_E_METADATA,
                      "%s in '%s' marks every one of the %llu detector pixels bad; nothing "
                      "would remain to pack, so check the mask",
                      ARINA_MASK, file_path, (unsigned long long)pixels);
    if (st == QEM_OK && qem_sha256_final(ctx, s->detector_mask_sha256) != 0)
        st = qem_fail(error, QEM_E_NO_MEMORY, "SHA-256 of the detector mask failed");
    if (st == QEM_OK) {
        s->bad_pixels = bad;
        s->bad_count = bad_count;
        s->mask_origin = ORIGIN_SOURCE_MASK;
        bad = NULL;
    }
    free(bad);
    qem_sha256_free(ctx);
    free(le);
    free(block);
    h5_close_id(mspace);
    h5_close_id(fspace);
    h5_close_id(type);
    h5_close_id(space);
    H5Dclose(dset);
    return st;
}

/* --- shape checks shared by every kind ----------------------------------- */

static qem_status finish_shape(pack_source *s, const char *path, qem_error *error)
{
    uint64_t pixels, scans, total;
    for (int i = 0; i < 4; i++)
        if (s->shape[i] == 0)
            return qem_fail(error, QEM_E_LAYOUT, "'%s' has an empty dimension (shape %llu x %llu "
                                                 "x %llu x %llu)",
                            path, (unsigned long long)s->shape[0],
                            (unsigned long long)s->shape[1], (unsigned long long)s->shape[2],
                            (unsigned long long)s->shape[3]);
    if (qem_mul_overflow_u64(s->shape[2], s->shape[3], &pixels) || pixels > UINT32_MAX ||
        qem_mul_overflow_u64(s->shape[0], s->shape[1], &scans) ||
        qem_mul_overflow_u64(scans, pixels, &total) || total > UINT64_MAX / 2)
        return qem_fail(error, QEM_E_LIMIT,
                        "'%s' is too large: detector pixels must fit 32-bit indices and the "
                        "array 64-bit byte counts",
                        path);
    return QEM_OK;
}

/* --- .npy ---------------------------------------------------------------- */

static qem_status inspect_npy(pack_source *s, src_impl *im, const char *path,
                              const pack_source_options *o, qem_error *error)
{
    snprintf(s->kind, sizeof s->kind, "npy");
    if (o && o->dataset)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s' is a .npy file; the dataset option only applies to HDF5 sources",
                        path);
    QEM_TRY(add_member(s, path, 1, o, error));
    QEM_TRY(qem_npy_open(path, &im->npy, error));
    qem_npy_info info = *qem_npy_info_of(im->npy);
    if (strstr(info.descr, "b1"))
        return qem_fail(error, QEM_E_NPY,
                        "'%s' holds booleans; packs hold uint8/uint16 detector counts", path);
    if (info.dtype != QEM_DTYPE_UINT8 && info.dtype != QEM_DTYPE_UINT16)
        return qem_fail(error, QEM_E_NPY,
                        "'%s' holds %s values; packs hold exact uint8/uint16 counts (float data "
                        "go into a .qem file with the float codec)",
                        path, info.descr);
    s->dtype = info.dtype;
    const int given = o && (o->scan_shape[0] || o->scan_shape[1]);
    if (info.ndim == 4) {
        if (given && (o->scan_shape[0] != info.shape[0] || o->scan_shape[1] != info.shape[1]))
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "'%s' is a 4D array with scan shape %llux%llu; the scan shape given "
                            "(%llux%llu) contradicts it, so omit it",
                            path, (unsigned long long)info.shape[0],
                            (unsigned long long)info.shape[1],
                            (unsigned long long)o->scan_shape[0],
                            (unsigned long long)o->scan_shape[1]);
        memcpy(s->shape, info.shape, sizeof s->shape);
    } else if (info.ndim == 3) {
        uint64_t scan[2];
        if (!given)
            return qem_fail(error, QEM_E_NPY,
                            "'%s' is a 3D stack of %llu frames; give the scan shape "
                            "(--scan-shape ROWS,COLUMNS) whose product is %llu, or save a 4D "
                            "array",
                            path, (unsigned long long)info.shape[0],
                            (unsigned long long)info.shape[0]);
        QEM_TRY(resolve_scan_shape(o, 0, NULL, NULL, info.shape[0], path, scan, error));
        s->shape[0] = scan[0];
        s->shape[1] = scan[1];
        s->shape[2] = info.shape[1];
        s->shape[3] = info.shape[2];
    } else {
        return qem_fail(error, QEM_E_NPY,
                        "'%s' has %u dimensions; a pack source is 4D (scan rows, scan columns, "
                        "detector rows, detector columns) or a 3D frame stack with a scan shape",
                        path, info.ndim);
    }
    QEM_TRY(finish_shape(s, path, error));
    s->largest_compressed_chunk = 0;
    return implicit_mask(s, s->shape[2] * s->shape[3], error);
}

/* --- plain HDF5 ---------------------------------------------------------- */

typedef struct candidates {
    char **names; /* 3D/4D integer datasets */
    size_t count;
    char **others; /* 3D/4D datasets of other types */
    size_t other_count;
    int failed;
} candidates;

static int push_name(char ***list, size_t *count, const char *name)
{
    char **grown = realloc(*list, (*count + 1) * sizeof *grown);
    if (!grown)
        return -1;
    *list = grown;
    size_t len = strlen(name);
    char *copy = malloc(len + 2);
    if (!copy)
        return -1;
    copy[0] = '/';
    memcpy(copy + 1, name, len + 1);
    grown[(*count)++] = copy;
    return 0;
}

static herr_t visit_candidate(hid_t obj, const char *name, const src_oinfo *info, void *data)
{
    candidates *c = data;
    if (info->type != H5O_TYPE_DATASET)
        return 0;
    hid_t dset = H5Dopen2(obj, name, H5P_DEFAULT);
    if (dset < 0)
        return 0;
    hid_t space = H5Dget_space(dset), type = H5Dget_type(dset);
    int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
    h5_close_id(type);
    h5_close_id(space);
    H5Dclose(dset);
    if (rank != 3 && rank != 4)
        return 0;
    int r = cls == H5T_INTEGER ? push_name(&c->names, &c->count, name)
                               : push_name(&c->others, &c->other_count, name);
    if (r != 0) {
        c->failed = 1;
        return -1;
    }
    return 0;
}

static void candidates_free(candidates *c)
{
    for (size_t i = 0; i < c->count; i++)
        free(c->names[i]);
    for (size_t i = 0; i < c->other_count; i++)
        free(c->others[i]);
    free(c->names);
    free(c->others);
}

/* "a, b, c" clipped to fit a message. */
static void join_names(char *const *names, size_t count, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < count; i++) {
        int n = snprintf(out + used, size - used, "%s%s", i ? ", " : "", names[i]);
        if (n < 0 || (size_t)n >= size - used) {
            if (size > 4)
                snprintf(out + (size > 5 ? size - 5 : 0), 5, "...");
            return;
        }
        used += (size_t)n;
    }
}

static qem_status choose_dataset(hid_t file, const char *path, const pack_source_options *o,
                                 char **chosen, qem_error *error)
{
    *chosen = NULL;
    candidates c;
    memset(&c, 0, sizeof c);
    qem_status st = QEM_OK;
    if (SRC_OVISIT(file, visit_candidate, &c) < 0)
        st = c.failed ? qem_fail(error, QEM_E_NO_MEMORY, "out of memory")
                      : h5_fail(error, QEM_E_IO, "cannot list the datasets of '%s'", path);
    char list[200];
    if (st == QEM_OK && o && o->dataset) {
        int where;
        st = locate(file, path, o->dataset, &where, error);
        if (st == QEM_OK && where == OBJ_ABSENT) {
            join_names(c.names, c.count, list, sizeof list);
            st = qem_fail(error, QEM_E_INVALID_ARGUMENT,
                          "'%s' has no dataset '%s'%s%s", path, o->dataset,
                          c.count ? "; its 3D/4D integer datasets are: " : "", list);
        } else if (st == QEM_OK && where == OBJ_ELSEWHERE) {
            st = qem_fail(error, QEM_E_UNSUPPORTED,
                          "'%s' reaches '%s' through an external link; qem authenticates only "
                          "the files it reads, so give the linked file itself",
                          path, o->dataset);
        } else if (st == QEM_OK) {
            size_t len = strlen(o->dataset);
            *chosen = malloc(len + 2);
            if (!*chosen)
                st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
            else
                snprintf(*chosen, len + 2, "%s%s", o->dataset[0] == '/' ? "" : "/", o->dataset);
        }
    } else if (st == QEM_OK && c.count == 1) {
        *chosen = strdup(c.names[0]);
        if (!*chosen)
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    } else if (st == QEM_OK && c.count > 1) {
        join_names(c.names, c.count, list, sizeof list);
        st = qem_fail(error, QEM_E_LAYOUT,
                      "'%s' holds several 3D/4D integer datasets (%s); choose one with the "
                      "dataset option",
                      path, list);
    } else if (st == QEM_OK) {
        join_names(c.others, c.other_count, list, sizeof list);
        st = qem_fail(error, QEM_E_LAYOUT,
                      "'%s' holds no 3D (frames, rows, columns) or 4D integer dataset%s%s%s",
                      path, c.other_count ? " (found " : "", list,
                      c.other_count ? ", which do not hold integer counts)" : "");
    }
    candidates_free(&c);
    return st;
}

static qem_status inspect_hdf5(pack_source *s, src_impl *im, hid_t file, const char *path,
                               const pack_source_options *o, qem_error *error)
{
    snprintf(s->kind, sizeof s->kind, "hdf5");
    char *name = NULL;
    QEM_TRY(choose_dataset(file, path, o, &name, error));
    hid_t dset = -1;
    char where[600];
    snprintf(where, sizeof where, "dataset '%s' of '%s'", name, path);
    qem_status st = open_here(file, path, name, H5O_TYPE_DATASET, &dset, error);
    ds_info d;
    if (st == QEM_OK)
        st = inspect_dataset(dset, where, 0, &d, error);
    h5_close_id(dset);
    if (st == QEM_OK) {
        s->dtype = d.dtype;
        s->largest_compressed_chunk = d.largest_chunk;
        im->rank = d.rank;
    }
    if (st == QEM_OK && d.rank == 4) {
        const int given = o && (o->scan_shape[0] || o->scan_shape[1]);
        if (given && (o->scan_shape[0] != d.dims[0] || o->scan_shape[1] != d.dims[1]))
            st = qem_fail(error, QEM_E_INVALID_ARGUMENT,
                          "%s is 4D with scan shape %llux%llu; the scan shape given (%llux%llu) "
                          "contradicts it, so omit it",
                          where, (unsigned long long)d.dims[0], (unsigned long long)d.dims[1],
                          (unsigned long long)o->scan_shape[0],
                          (unsigned long long)o->scan_shape[1]);
        for (int i = 0; i < 4; i++)
            s->shape[i] = d.dims[i];
    } else if (st == QEM_OK) {
        /* The dataset's own attribute, then its parent group's. */
        char *parent = strdup(name);
        if (!parent) {
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        } else {
            char *slash = strrchr(parent, '/');
            if (slash == parent)
                parent[1] = '\0';
            else if (slash)
                *slash = '\0';
            const char *paths[2] = {name, parent};
            int found = 0;
            uint64_t attr[2] = {0, 0}, scan[2];
            char on[300] = "";
            st = scan_shape_from_file(file, path, paths, 2, &found, attr, on, sizeof on, error);
            if (st == QEM_OK)
                st = resolve_scan_shape(o, found, attr, on, d.dims[0], path, scan, error);
            if (st == QEM_OK) {
                s->shape[0] = scan[0];
                s->shape[1] = scan[1];
                s->shape[2] = d.dims[1];
                s->shape[3] = d.dims[2];
            }
            free(parent);
        }
    }
    if (st == QEM_OK)
        st = finish_shape(s, path, error);
    if (st == QEM_OK)
        st = add_part(im, path, name, 0, s->shape[0] * s->shape[1], error);
    if (st == QEM_OK)
        st = read_mask(s, file, path, error);
    free(name);
    return st;
}

/* --- Dectris/Arina family ------------------------------------------------ */

typedef struct arina_link {
    unsigned number;
    char *file;    /* as the link stores it */
    char *dataset; /* object path inside the data file */
} arina_link;

static void links_free(arina_link *links, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        free(links[i].file);
        free(links[i].dataset);
    }
    free(links);
}

static int link_number(const char *name, unsigned *number)
{
    if (strncmp(name, "data_", 5) != 0 || strlen(name) != 11)
        return 0;
    unsigned v = 0;
    for (int i = 5; i < 11; i++) {
        if (name[i] < '0' || name[i] > '9')
            return 0;
        v = v * 10 + (unsigned)(name[i] - '0');
    }
    *number = v;
    return 1;
}

/* The data_NNNNNN links of /entry/data: external ones into `links`, and
 * how many other links carry such a name. Links are visited in name order,
 * which for six zero-padded digits is numeric order. */
static qem_status list_data_links(hid_t file, const char *path, arina_link **out, size_t *count,
                                  size_t *internal, qem_error *error)
{
    *out = NULL;
    *count = *internal = 0;
    int where;
    QEM_TRY(locate(file, path, ARINA_GROUP, &where, error));
    if (where != OBJ_HERE)
        return QEM_OK;
    src_oinfo info;
    hid_t group = H5Oopen(file, ARINA_GROUP, H5P_DEFAULT);
    if (group < 0)
        return h5_fail(error, QEM_E_IO, "cannot open %s in '%s'", ARINA_GROUP, path);
    if (src_oget_info(group, &info) < 0 || info.type != H5O_TYPE_GROUP) {
        H5Oclose(group);
        return QEM_OK; /* not a group: not a master */
    }
    H5G_info_t ginfo;
    qem_status st = QEM_OK;
    arina_link *links = NULL;
    size_t n = 0;
    char *value = NULL;
    if (H5Gget_info(group, &ginfo) < 0)
        st = h5_fail(error, QEM_E_IO, "cannot list %s in '%s'", ARINA_GROUP, path);
    for (hsize_t i = 0; st == QEM_OK && i < ginfo.nlinks; i++) {
        char name[32];
        ssize_t len = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name,
                                         sizeof name, H5P_DEFAULT);
        if (len < 0) {
            st = h5_fail(error, QEM_E_IO, "cannot list %s in '%s'", ARINA_GROUP, path);
            break;
        }
        unsigned number;
        if ((size_t)len >= sizeof name || !link_number(name, &number))
            continue;
        src_linfo li;
        if (src_lget_info(group, name, &li) < 0) {
            st = h5_fail(error, QEM_E_IO, "cannot inspect link %s/%s in '%s'", ARINA_GROUP, name,
                         path);
            break;
        }
        if (li.type != H5L_TYPE_EXTERNAL) {
            (*internal)++;
            continue;
        }
        free(value);
        value = malloc(li.u.val_size ? li.u.val_size : 1);
        unsigned flags = 0;
        const char *target_file = NULL, *target_object = NULL;
        if (!value) {
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
        } else if (H5Lget_val(group, name, value, li.u.val_size, H5P_DEFAULT) < 0 ||
                   H5Lunpack_elink_val(value, li.u.val_size, &flags, &target_file,
                                       &target_object) < 0 ||
                   !target_file || !target_object || !target_file[0] || !target_object[0]) {
            st = h5_fail(error, QEM_E_LAYOUT, "cannot decode the external link %s/%s in '%s'",
                         ARINA_GROUP, name, path);
        } else {
            arina_link *grown = realloc(links, (n + 1) * sizeof *grown);
            if (!grown) {
                st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
            } else {
                links = grown;
                links[n].number = number;
                links[n].file = strdup(target_file);
                links[n].dataset = strdup(target_object);
                n++;
                if (!links[n - 1].file || !links[n - 1].dataset)
                    st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
            }
        }
    }
    free(value);
    H5Oclose(group);
    if (st != QEM_OK) {
        links_free(links, n);
        return st;
    }
    *out = links;
    *count = n;
    return QEM_OK;
}

/* A data link may only name a regular file inside the master's own folder,
 * symlinks resolved: an absolute target, a ".." component or a symlink
 * leading out would let a crafted master read any file on the machine. */
static qem_status check_link_target(const char *master, const char *dir, const arina_link *l,
                                    const char *member, qem_error *error)
{
    int escapes = l->file[0] == '/';
    for (const char *p = l->file; !escapes && *p;) {
        const char *slash = strchr(p, '/');
        const size_t n = slash ? (size_t)(slash - p) : strlen(p);
        escapes = n == 2 && p[0] == '.' && p[1] == '.';
        p += n + (slash != NULL);
    }
    if (escapes)
        return qem_fail(error, QEM_E_LAYOUT,
                        "master '%s' links data_%06u to '%s', outside the master's folder; data "
                        "files must lie beside their master",
                        master, l->number, l->file);
    char *real_dir = realpath(dir, NULL), *real_member = NULL;
    qem_status st = QEM_OK;
    if (!real_dir) {
        st = qem_fail(error, QEM_E_IO, "cannot resolve the folder of '%s': %s", master,
                      strerror(errno));
    } else if (!(real_member = realpath(member, NULL))) {
        st = qem_fail(error, QEM_E_IO,
                      "master '%s' links data_%06u to '%s', which cannot be read (%s); keep the "
                      "master and every data file of the acquisition together",
                      master, l->number, member, strerror(errno));
    } else {
        const size_t n = strlen(real_dir);
        const int inside = strncmp(real_member, real_dir, n) == 0 &&
                           (real_member[n] == '/' || (n == 1 && real_dir[0] == '/'));
        struct stat sb;
        if (!inside)
            st = qem_fail(error, QEM_E_LAYOUT,
                          "master '%s' links data_%06u to '%s', which resolves to '%s', outside "
                          "the master's folder; data files must lie beside their master",
                          master, l->number, l->file, real_member);
        else if (stat(real_member, &sb) != 0 || !S_ISREG(sb.st_mode))
            st = qem_fail(error, QEM_E_LAYOUT,
                          "master '%s' links data_%06u to '%s', which is not a regular file",
                          master, l->number, l->file);
    }
    free(real_dir);
    free(real_member);
    return st;
}

static qem_status inspect_arina(pack_source *s, src_impl *im, hid_t master, const char *path,
                                const pack_source_options *o, arina_link *links, size_t count,
                                qem_error *error)
{
    snprintf(s->kind, sizeof s->kind, "arina");
    for (size_t i = 0; i < count; i++) {
        if (links[i].number != i + 1)
            return qem_fail(error, QEM_E_LAYOUT,
                            "master '%s' links data_%06u but not data_%06zu; its data links must "
                            "run data_000001, data_000002, ... without a gap (a data file of "
                            "the acquisition is missing)",
                            path, links[i].number, i + 1);
        if (o && o->dataset) {
            const char *a = o->dataset[0] == '/' ? o->dataset + 1 : o->dataset;
            const char *b = links[i].dataset[0] == '/' ? links[i].dataset + 1 : links[i].dataset;
            if (strcmp(a, b) != 0)
                return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                                "'%s' is a Dectris/Arina master whose frames come from its "
                                "data_NNNNNN links (to '%s'); omit the dataset option",
                                path, links[i].dataset);
        }
    }
    char *dir = qem_path_dirname(path);
    if (!dir)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    qem_status st = QEM_OK;
    uint64_t frames = 0;
    char *member = NULL;
    for (size_t i = 0; st == QEM_OK && i < count; i++) {
        const arina_link *l = &links[i];
        free(member);
        size_t size = strlen(dir) + strlen(l->file) + 2;
        member = malloc(size);
        if (!member) {
            st = qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
            break;
        }
        snprintf(member, size, "%s/%s", dir, l->file);
        st = check_link_target(path, dir, l, member, error);
        if (st != QEM_OK)
            break;
        st = add_member(s, member, 0, o, error);
        if (st != QEM_OK)
            break;
        hid_t file = H5Fopen(member, H5F_ACC_RDONLY, H5P_DEFAULT);
        if (file < 0) {
            st = h5_fail(error, QEM_E_IO, "cannot open data file '%s' (data_%06u of '%s')",
                         member, l->number, path);
            break;
        }
        int where;
        hid_t dset = -1;
        char what[600];
        snprintf(what, sizeof what, "'%s' in data file '%s'", l->dataset, member);
        st = locate(file, member, l->dataset, &where, error);
        if (st == QEM_OK && where == OBJ_ABSENT)
            st = qem_fail(error, QEM_E_LAYOUT,
                          "data file '%s' has no dataset '%s', which master '%s' links as "
                          "data_%06u",
                          member, l->dataset, path, l->number);
        else if (st == QEM_OK && where == OBJ_ELSEWHERE)
            st = qem_fail(error, QEM_E_UNSUPPORTED,
                          "%s is itself a link to another file; data files must hold their "
                          "frames",
                          what);
        if (st == QEM_OK)
            st = open_here(file, member, l->dataset, H5O_TYPE_DATASET, &dset, error);
        ds_info d;
        if (st == QEM_OK)
            st = inspect_dataset(dset, what, 3, &d, error);
        h5_close_id(dset);
        H5Fclose(file);
        if (st != QEM_OK)
            break;
        if (i == 0) {
            s->dtype = d.dtype;
            s->shape[2] = d.dims[1];
            s->shape[3] = d.dims[2];
        } else if (d.dtype != s->dtype || d.dims[1] != s->shape[2] || d.dims[2] != s->shape[3]) {
            st = qem_fail(error, QEM_E_LAYOUT,
                          "data file '%s' holds %llux%llu %s frames but data_000001 holds "
                          "%llux%llu %s frames; every data file must describe the same detector",
                          member, (unsigned long long)d.dims[1], (unsigned long long)d.dims[2],
                          qem_dtype_name(d.dtype), (unsigned long long)s->shape[2],
                          (unsigned long long)s->shape[3], qem_dtype_name(s->dtype));
            break;
        }
        if (d.largest_chunk > s->largest_compressed_chunk)
            s->largest_compressed_chunk = d.largest_chunk;
        st = add_part(im, member, l->dataset, frames, d.dims[0], error);
        if (st == QEM_OK && qem_add_overflow_u64(frames, d.dims[0], &frames))
            st = qem_fail(error, QEM_E_LIMIT, "the data files of '%s' hold too many frames",
                          path);
    }
    free(member);
    free(dir);
    QEM_TRY(st);
    im->rank = 3;
    /* The scan shape: the caller's, else the master's scan_shape attribute
     * (on /entry/data/data when the master has such a dataset, or on the
     * /entry/data group). */
    static const char *const paths[2] = {ARINA_GROUP "/data", ARINA_GROUP};
    int found = 0;
    uint64_t attr[2] = {0, 0}, scan[2];
    char on[300] = "";
    QEM_TRY(scan_shape_from_file(master, path, paths, 2, &found, attr, on, sizeof on, error));
    QEM_TRY(resolve_scan_shape(o, found, attr, on, frames, path, scan, error));
    s->shape[0] = scan[0];
    s->shape[1] = scan[1];
    QEM_TRY(finish_shape(s, path, error));
    return read_mask(s, master, path, error);
}

static qem_status inspect_h5_file(pack_source *s, src_impl *im, const char *path,
                                  const pack_source_options *o, qem_error *error)
{
    QEM_TRY(add_member(s, path, 1, o, error));
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0)
        return h5_fail(error, QEM_E_IO, "cannot open '%s' as HDF5", path);
    arina_link *links = NULL;
    size_t count = 0, internal = 0;
    qem_status st = list_data_links(file, path, &links, &count, &internal, error);
    if (st == QEM_OK && count && internal)
        st = qem_fail(error, QEM_E_LAYOUT,
                      "'%s' mixes external data_NNNNNN links with %zu stored ones under %s; a "
                      "Dectris/Arina master links every data file externally",
                      path, internal, ARINA_GROUP);
    else if (st == QEM_OK && count)
        st = inspect_arina(s, im, file, path, o, links, count, error);
    else if (st == QEM_OK)
        st = inspect_hdf5(s, im, file, path, o, error);
    links_free(links, count);
    H5Fclose(file);
    return st;
}

/* --- inspection entry point ---------------------------------------------- */

static qem_status inspect(pack_source *s, src_impl *im, const char *path,
                          const pack_source_options *o, qem_error *error)
{
    sig_kind kind;
    QEM_TRY(detect_kind(path, &kind, error));
    switch (kind) {
    case SIG_NPY: QEM_TRY(inspect_npy(s, im, path, o, error)); break;
    case SIG_HDF5: QEM_TRY(inspect_h5_file(s, im, path, o, error)); break;
    case SIG_PACK:
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' is already a pack; give the original .npy or HDF5 source", path);
    case SIG_QEM:
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' is a .qem file; export it to .npy first (qem export) and pack that",
                        path);
    default:
        return qem_fail(error, QEM_E_UNSUPPORTED,
                        "'%s' is neither a .npy file nor an HDF5 file (recognised by signature, "
                        "not name); give a .npy, an HDF5 file or a Dectris/Arina master",
                        path);
    }
    QEM_TRY(compute_identity(s, error));
    /* What was read above must still be what was hashed. */
    return pack_source_check_unchanged(s, error);
}

qem_status pack_source_inspect(const char *path, const pack_source_options *options,
                               pack_source **out, qem_error *error)
{
    if (!path || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "pack_source_inspect: NULL argument");
    *out = NULL;
    pack_source *s = calloc(1, sizeof *s);
    src_impl *im = calloc(1, sizeof *im);
    if (!s || !im) {
        free(s);
        free(im);
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    }
    im->file = im->dset = -1;
    im->open_part = (size_t)-1;
    s->impl = im;
    s->mask_origin = ORIGIN_IMPLICIT_MASK;
    qem_status st;
    H5E_BEGIN_TRY
    {
        st = inspect(s, im, path, options, error);
    }
    H5E_END_TRY;
    if (st != QEM_OK) {
        pack_source_close(s);
        return st;
    }
    *out = s;
    return QEM_OK;
}

/* --- reading frames ------------------------------------------------------- */

static qem_status open_part(pack_source *s, src_impl *im, size_t index, qem_error *error)
{
    if (im->open_part == index && im->dset >= 0)
        return QEM_OK;
    impl_close_handles(im);
    im->open_part = (size_t)-1;
    const src_part *p = &im->parts[index];
    im->file = H5Fopen(p->file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (im->file < 0)
        return h5_fail(error, QEM_E_IO, "cannot open '%s'", p->file);
    im->dset = H5Dopen2(im->file, p->dataset, H5P_DEFAULT);
    if (im->dset < 0) {
        qem_status st = h5_fail(error, QEM_E_IO, "cannot open dataset '%s' of '%s'", p->dataset,
                                p->file);
        impl_close_handles(im);
        return st;
    }
    /* The dataset must still have the shape inspection found. */
    hsize_t dims[4] = {0, 0, 0, 0};
    hid_t space = H5Dget_space(im->dset);
    int rank = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    if (rank == im->rank)
        H5Sget_simple_extent_dims(space, dims, NULL);
    h5_close_id(space);
    const int same = rank == im->rank &&
                     (rank == 4 ? dims[0] == s->shape[0] && dims[1] == s->shape[1] &&
                                      dims[2] == s->shape[2] && dims[3] == s->shape[3]
                                : dims[0] == p->frames && dims[1] == s->shape[2] &&
                                      dims[2] == s->shape[3]);
    if (!same) {
        impl_close_handles(im);
        return qem_fail(error, QEM_E_CHANGED,
                        "dataset '%s' of '%s' no longer has the shape it had when the source "
                        "was inspected; inspect it again",
                        p->dataset, p->file);
    }
    im->open_part = index;
    return QEM_OK;
}

static qem_status read_slab(src_impl *im, const src_part *p, const hsize_t *start,
                            const hsize_t *count, uint64_t elements, uint16_t *out,
                            qem_error *error)
{
    hid_t fspace = H5Dget_space(im->dset);
    const hsize_t n = elements;
    hid_t mspace = H5Screate_simple(1, &n, NULL);
    qem_status st = QEM_OK;
    if (fspace < 0 || mspace < 0 ||
        H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
        H5Dread(im->dset, H5T_NATIVE_UINT16, mspace, fspace, H5P_DEFAULT, out) < 0)
        st = h5_fail(error, QEM_E_IO, "cannot read frames of dataset '%s' in '%s'", p->dataset,
                     p->file);
    h5_close_id(mspace);
    h5_close_id(fspace);
    return st;
}

static qem_status read_h5(pack_source *s, src_impl *im, uint64_t first, uint64_t count,
                          uint16_t *out, qem_error *error)
{
    const uint64_t pixels = s->shape[2] * s->shape[3];
    size_t part = 0;
    while (count) {
        while (part < im->part_count &&
               first >= im->parts[part].first + im->parts[part].frames)
            part++;
        if (part == im->part_count)
            return qem_fail(error, QEM_E_INVALID_ARGUMENT, "frame %llu is outside the source",
                            (unsigned long long)first);
        const src_part *p = &im->parts[part];
        QEM_TRY(open_part(s, im, part, error));
        uint64_t local = first - p->first;
        uint64_t n = p->first + p->frames - first;
        if (n > count)
            n = count;
        if (im->rank == 3) {
            const hsize_t start[3] = {local, 0, 0}, cnt[3] = {n, s->shape[2], s->shape[3]};
            QEM_TRY(read_slab(im, p, start, cnt, n * pixels, out, error));
        } else {
            /* Flat scans -> a partial first row, whole rows, a partial last row. */
            const uint64_t columns = s->shape[1];
            for (uint64_t done = 0; done < n;) {
                const uint64_t f = local + done, r = f / columns, c = f % columns;
                uint64_t rows = 1, cols = columns - c;
                if (c == 0 && n - done >= columns) {
                    rows = (n - done) / columns;
                    cols = columns;
                } else if (cols > n - done) {
                    cols = n - done;
                }
                const hsize_t start[4] = {r, c, 0, 0},
                              cnt[4] = {rows, cols, s->shape[2], s->shape[3]};
                QEM_TRY(read_slab(im, p, start, cnt, rows * cols * pixels,
                                  out + done * pixels, error));
                done += rows * cols;
            }
        }
        out += n * pixels;
        first += n;
        count -= n;
    }
    return QEM_OK;
}

static qem_status read_npy(pack_source *s, src_impl *im, uint64_t first, uint64_t count,
                           uint16_t *out, qem_error *error)
{
    const uint64_t pixels = s->shape[2] * s->shape[3], n = count * pixels;
    if (s->dtype == QEM_DTYPE_UINT16)
        return qem_npy_read(im->npy, first * pixels, n, out, (size_t)n * 2, error);
    /* uint8: read into the upper half of `out`, then widen front to back
     * (element i is written at bytes 2i, 2i+1 <= n+i, never ahead of an
     * unread byte). */
    uint8_t *bytes = (uint8_t *)out + n;
    QEM_TRY(qem_npy_read(im->npy, first * pixels, n, bytes, (size_t)n, error));
    for (uint64_t i = 0; i < n; i++)
        out[i] = bytes[i];
    return QEM_OK;
}

qem_status pack_source_read(pack_source *source, uint64_t first, uint64_t count, uint16_t *out,
                            qem_error *error)
{
    if (!source || !source->impl || (!out && count))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT, "pack_source_read: NULL argument");
    const uint64_t scans = source->shape[0] * source->shape[1];
    const uint64_t pixels = source->shape[2] * source->shape[3];
    uint64_t values;
    if (first > scans || count > scans - first)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "pack_source_read: frames [%llu, +%llu) are outside the %llu scans",
                        (unsigned long long)first, (unsigned long long)count,
                        (unsigned long long)scans);
    if (qem_mul_overflow_u64(count, pixels, &values) || values > SIZE_MAX / 2)
        return qem_fail(error, QEM_E_LIMIT, "pack_source_read: %llu frames are too many at once",
                        (unsigned long long)count);
    if (count == 0)
        return QEM_OK;
    src_impl *im = source->impl;
    if (im->npy)
        return read_npy(source, im, first, count, out, error);
    qem_status st;
    H5E_BEGIN_TRY
    {
        st = read_h5(source, im, first, count, out, error);
    }
    H5E_END_TRY;
    return st;
}
