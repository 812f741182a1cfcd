#include "pack/h5write.h"

#include <errno.h>
#include <hdf5.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "input/hdf5_module.h"

/* --- a file driver over an open descriptor ------------------------------ */

/* libhdf5's POSIX driver needs a path and resolves it, so it cannot write
 * into an unnamed O_TMPFILE. This small driver writes to a descriptor the
 * caller owns: the pack has no name until it is linked into place, and a
 * killed producer leaves nothing behind. */
/* After the first failed write (a full disk) the file is lost anyway:
 * later writes are discarded and reported as done so that libhdf5 can
 * still close the file and release it. Left open, libhdf5 closes it again
 * at process exit and crashes there. The writer keeps the failure. */
typedef struct fd_file {
    H5FD_t pub; /* must come first */
    int fd;
    haddr_t eoa, eof;
    int *failed; /* the writer's: errno of the first failed write, or 0 */
} fd_file;

typedef struct fd_fapl {
    int fd;
    int *failed;
} fd_fapl;

static H5FD_t *fd_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr)
{
    (void)name;
    (void)flags;
    (void)maxaddr;
    const fd_fapl *info = H5Pget_driver_info(fapl);
    if (!info)
        return NULL;
    fd_file *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->fd = dup(info->fd);
    struct stat sb;
    if (f->fd < 0 || fstat(f->fd, &sb) != 0) {
        if (f->fd >= 0)
            close(f->fd);
        free(f);
        return NULL;
    }
    f->eof = (haddr_t)sb.st_size;
    f->failed = info->failed;
    return &f->pub;
}

static herr_t fd_close(H5FD_t *file)
{
    fd_file *f = (fd_file *)file;
    int rc = close(f->fd);
    free(f);
    return rc == 0 ? 0 : -1;
}

static herr_t fd_query(const H5FD_t *file, unsigned long *flags)
{
    (void)file;
    /* As the POSIX driver, minus the path-based handle. */
    *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA |
             H5FD_FEAT_DATA_SIEVE | H5FD_FEAT_AGGREGATE_SMALLDATA;
    return 0;
}

static haddr_t fd_get_eoa(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const fd_file *)file)->eoa;
}

static herr_t fd_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr)
{
    (void)type;
    ((fd_file *)file)->eoa = addr;
    return 0;
}

static haddr_t fd_get_eof(const H5FD_t *file, H5FD_mem_t type)
{
    (void)type;
    return ((const fd_file *)file)->eof;
}

static herr_t fd_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                      void *buffer)
{
    (void)type;
    (void)dxpl;
    fd_file *f = (fd_file *)file;
    unsigned char *p = buffer;
    while (size > 0) {
        ssize_t got = pread(f->fd, p, size, (off_t)addr);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -1;
        if (got == 0) { /* reads past the end see zeros, as with the POSIX driver */
            memset(p, 0, size);
            break;
        }
        p += got;
        addr += (haddr_t)got;
        size -= (size_t)got;
    }
    return 0;
}

static herr_t fd_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                       const void *buffer)
{
    (void)type;
    (void)dxpl;
    fd_file *f = (fd_file *)file;
    if (*f->failed)
        return 0; /* discarded: see fd_file */
    const unsigned char *p = buffer;
    while (size > 0) {
        ssize_t put = pwrite(f->fd, p, size, (off_t)addr);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0) {
            *f->failed = put < 0 ? errno : ENOSPC;
            return -1;
        }
        p += put;
        addr += (haddr_t)put;
        size -= (size_t)put;
    }
    if (addr > f->eof)
        f->eof = addr;
    return 0;
}

static herr_t fd_truncate(H5FD_t *file, hid_t dxpl, hbool_t closing)
{
    (void)dxpl;
    (void)closing;
    fd_file *f = (fd_file *)file;
    if (*f->failed)
        return 0;
    if (f->eoa != f->eof) {
        if (ftruncate(f->fd, (off_t)f->eoa) != 0) {
            *f->failed = errno;
            return -1;
        }
        f->eof = f->eoa;
    }
    return 0;
}

static const H5FD_class_t fd_class = {
    .name = "qem_fd",
    .maxaddr = (haddr_t)INT64_MAX,
    .fc_degree = H5F_CLOSE_WEAK,
    .fapl_size = sizeof(fd_fapl),
    .open = fd_open,
    .close = fd_close,
    .query = fd_query,
    .get_eoa = fd_get_eoa,
    .set_eoa = fd_set_eoa,
    .get_eof = fd_get_eof,
    .read = fd_read,
    .write = fd_write,
    .truncate = fd_truncate,
    .fl_map = {H5FD_MEM_SUPER, H5FD_MEM_SUPER, H5FD_MEM_SUPER, H5FD_MEM_SUPER, H5FD_MEM_SUPER,
               H5FD_MEM_SUPER, H5FD_MEM_SUPER},
};

/* --- the writer ------------------------------------------------------------ */

struct pack_h5_writer {
    hid_t driver;
    hid_t file;
    hid_t shards;      /* /quantem_gpu/shards */
    hid_t shard;       /* the current shard's group */
    uint64_t shard_no; /* its ordinal, or UINT64_MAX */
    int failed;        /* errno of the first failed write, or 0 */
};

/* libhdf5 prints its error stack unless told not to; the try block saves
 * and restores the handler around each call sequence. */
#define H5_FAIL(what)                                                                              \
    (w && w->failed ? qem_fail(error, QEM_E_IO, "HDF5 could not %s: %s", what, strerror(w->failed)) \
                    : qem_fail(error, QEM_E_IO, "HDF5 could not %s", what))

static int set_string_attribute(hid_t object, const char *name, const char *value)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(value) + 1);
    H5Tset_strpad(type, H5T_STR_NULLTERM);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    int ok = attr >= 0 && H5Awrite(attr, type, value) >= 0;
    if (attr >= 0)
        H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
    return ok;
}

/* Groups and datasets carry no modification times: a pack's bytes depend
 * on its content alone, not on when (or on how many threads) it was made. */
static hid_t group_create(hid_t parent, const char *name)
{
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    hid_t g = gcpl >= 0 && H5Pset_obj_track_times(gcpl, 0) >= 0
                  ? H5Gcreate2(parent, name, H5P_DEFAULT, gcpl, H5P_DEFAULT)
                  : -1;
    if (gcpl >= 0)
        H5Pclose(gcpl);
    return g;
}

qem_status qem_h5_pack_create(int fd, uint64_t user_block, const char *schema,
                              const char *identity_hex, const uint64_t shape[4],
                              const char *working_dtype, pack_h5_writer **out, qem_error *error)
{
    pack_h5_writer *w = calloc(1, sizeof *w);
    if (!w)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    w->driver = w->file = w->shards = w->shard = -1;
    w->shard_no = UINT64_MAX;
    int ok = 0;
    H5E_BEGIN_TRY
    {
        /* Registered per file and released on close: no lasting state. */
        w->driver = H5FDregister(&fd_class);
        hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = H5Pcreate(H5P_FILE_ACCESS);
        const fd_fapl info = {fd, &w->failed};
        if (w->driver >= 0 && fcpl >= 0 && fapl >= 0 &&
            H5Pset_userblock(fcpl, (hsize_t)user_block) >= 0 &&
            H5Pset_driver(fapl, w->driver, &info) >= 0)
            w->file = H5Fcreate("qem-pack", H5F_ACC_TRUNC, fcpl, fapl);
        if (fcpl >= 0)
            H5Pclose(fcpl);
        if (fapl >= 0)
            H5Pclose(fapl);
        hid_t root = w->file >= 0 ? group_create(w->file, "/quantem_gpu")
                                  : -1;
        if (root >= 0) {
            hsize_t four = 4;
            hid_t space = H5Screate_simple(1, &four, NULL);
            hid_t attr = H5Acreate2(root, "source_shape", H5T_STD_U64LE, space, H5P_DEFAULT,
                                    H5P_DEFAULT);
            ok = attr >= 0 && H5Awrite(attr, H5T_NATIVE_UINT64, shape) >= 0 &&
                 set_string_attribute(root, "schema", schema) &&
                 set_string_attribute(root, "source_identity_sha256", identity_hex) &&
                 set_string_attribute(root, "source_dtype", "uint16") &&
                 set_string_attribute(root, "working_dtype", working_dtype);
            if (attr >= 0)
                H5Aclose(attr);
            H5Sclose(space);
            w->shards = group_create(root, "shards");
            ok = ok && w->shards >= 0;
            H5Gclose(root);
        }
    }
    H5E_END_TRY;
    if (!ok) {
        const int failed = w->failed;
        qem_h5_pack_close(w, NULL);
        return failed ? qem_fail(error, QEM_E_IO, "HDF5 could not create the pack file: %s",
                                 strerror(failed))
                      : qem_fail(error, QEM_E_IO, "HDF5 could not create the pack file");
    }
    *out = w;
    return QEM_OK;
}

/* Dataset `name` in `parent`, contiguous and allocated at once (so its
 * offset exists and holds), written from `data` of memory type `mem`;
 * its absolute file offset into `at`. 1 on success. */
static int write_contiguous(hid_t parent, const char *name, hid_t type, hid_t mem, int rank,
                            const hsize_t *dims, const void *data, haddr_t *at)
{
    hid_t space = H5Screate_simple(rank, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    int ok = space >= 0 && dcpl >= 0 && H5Pset_layout(dcpl, H5D_CONTIGUOUS) >= 0 &&
             H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) >= 0 &&
             H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0 &&
             H5Pset_obj_track_times(dcpl, 0) >= 0;
    hid_t dset = ok ? H5Dcreate2(parent, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT) : -1;
    ok = ok && dset >= 0 && H5Dwrite(dset, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
    *at = ok ? H5Dget_offset(dset) : HADDR_UNDEF;
    if (dset >= 0)
        H5Dclose(dset);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    return ok && *at != HADDR_UNDEF;
}

qem_status qem_h5_pack_append(pack_h5_writer *w, uint64_t shard, const char *name, const void *data,
                              uint64_t count, unsigned item_bytes, uint64_t *offset,
                              uint64_t *bytes, qem_error *error)
{
    int ok = 1;
    haddr_t at = HADDR_UNDEF;
    H5E_BEGIN_TRY
    {
        if (shard != w->shard_no) {
            if (w->shard >= 0)
                H5Gclose(w->shard);
            char group[32];
            snprintf(group, sizeof group, "%03llu", (unsigned long long)shard);
            w->shard = group_create(w->shards, group);
            w->shard_no = shard;
            ok = w->shard >= 0;
        }
        const hsize_t n = count;
        ok = ok && write_contiguous(w->shard, name, item_bytes == 4 ? H5T_STD_U32LE : H5T_STD_U8LE,
                                    item_bytes == 4 ? H5T_NATIVE_UINT32 : H5T_NATIVE_UINT8, 1, &n,
                                    data, &at);
    }
    H5E_END_TRY;
    if (!ok || at == HADDR_UNDEF)
        return qem_fail(error, QEM_E_IO, "HDF5 could not write dataset %03llu/%s%s%s",
                        (unsigned long long)shard, name, w->failed ? ": " : "",
                        w->failed ? strerror(w->failed) : "");
    *offset = (uint64_t)at;
    *bytes = count * item_bytes;
    return QEM_OK;
}

qem_status qem_h5_pack_close(pack_h5_writer *w, qem_error *error)
{
    if (!w)
        return QEM_OK;
    int ok = 1;
    H5E_BEGIN_TRY
    {
        if (w->shard >= 0)
            ok &= H5Gclose(w->shard) >= 0;
        if (w->shards >= 0)
            ok &= H5Gclose(w->shards) >= 0;
        if (w->file >= 0) {
            ok &= H5Fflush(w->file, H5F_SCOPE_GLOBAL) >= 0;
            ok &= H5Fclose(w->file) >= 0;
        }
        if (w->driver >= 0)
            H5FDunregister(w->driver);
    }
    H5E_END_TRY;
    /* A write that failed earlier fails the file, however the close went. */
    const int failed = w->failed;
    free(w);
    if (failed)
        return qem_fail(error, QEM_E_IO, "HDF5 could not finish the pack file: %s",
                        strerror(failed));
    return ok ? QEM_OK : qem_fail(error, QEM_E_IO, "HDF5 could not finish the pack file");
}

/* --- the prepared extensions ------------------------------------------------ */

/* Creates the groups on the way to `path` below `base`; the last
 * component is the dataset's name. Returns the parent group (caller
 * closes) or -1. */
static hid_t parent_group(hid_t base, const char *path, const char **name)
{
    hid_t g = H5Gopen2(base, ".", H5P_DEFAULT);
    const char *at = path;
    for (const char *slash; g >= 0 && (slash = strchr(at, '/')); at = slash + 1) {
        char part[128];
        const size_t n = (size_t)(slash - at);
        if (n == 0 || n >= sizeof part) {
            H5Gclose(g);
            return -1;
        }
        memcpy(part, at, n);
        part[n] = '\0';
        hid_t next = H5Lexists(g, part, H5P_DEFAULT) > 0
                         ? H5Gopen2(g, part, H5P_DEFAULT)
                         : group_create(g, part);
        H5Gclose(g);
        g = next;
    }
    *name = at;
    return g;
}

static int write_prepared(hid_t file, pack_h5_dataset *d)
{
    hid_t root = H5Gopen2(file, "/quantem_gpu", H5P_DEFAULT);
    hid_t prepared = root < 0 ? -1
                     : H5Lexists(root, "prepared", H5P_DEFAULT) > 0
                         ? H5Gopen2(root, "prepared", H5P_DEFAULT)
                         : group_create(root, "prepared");
    const char *name = NULL;
    hid_t parent = prepared >= 0 ? parent_group(prepared, d->path, &name) : -1;
    int ok = parent >= 0;
    /* A replaced dataset's space stays in the file, unreferenced. */
    if (ok && H5Lexists(parent, name, H5P_DEFAULT) > 0)
        ok = H5Ldelete(parent, name, H5P_DEFAULT) >= 0;
    const hsize_t dims[2] = {d->dims[0], d->dims[1]};
    /* The items are little-endian bytes already: stored as they are. */
    const hid_t type = d->item_bytes == 4 ? H5T_STD_U32LE : H5T_STD_U8LE;
    haddr_t at = HADDR_UNDEF;
    ok = ok && write_contiguous(parent, name, type, type, (int)d->rank, dims, d->data, &at);
    d->offset = (uint64_t)at;
    if (parent >= 0)
        H5Gclose(parent);
    if (prepared >= 0)
        H5Gclose(prepared);
    if (root >= 0)
        H5Gclose(root);
    return ok;
}

qem_status qem_h5_pack_prepared(int fd, pack_h5_dataset *items, size_t count, qem_error *error)
{
    int failed = 0, ok = 0;
    size_t done = 0;
    H5E_BEGIN_TRY
    {
        hid_t driver = H5FDregister(&fd_class);
        hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
        const fd_fapl info = {fd, &failed};
        hid_t file = -1;
        /* Every new allocation 4-byte aligned: moments are read as u32. */
        if (driver >= 0 && fapl >= 0 && H5Pset_driver(fapl, driver, &info) >= 0 &&
            H5Pset_alignment(fapl, 1, 4) >= 0)
            file = H5Fopen("qem-pack", H5F_ACC_RDWR, fapl);
        ok = file >= 0;
        while (ok && done < count && (ok = write_prepared(file, &items[done])))
            done++;
        if (file >= 0) {
            ok &= H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0;
            ok &= H5Fclose(file) >= 0;
        }
        if (fapl >= 0)
            H5Pclose(fapl);
        if (driver >= 0)
            H5FDunregister(driver);
    }
    H5E_END_TRY;
    if (failed)
        return qem_fail(error, QEM_E_IO, "HDF5 could not write the prepared values: %s",
                        strerror(failed));
    if (!ok)
        return qem_fail(error, QEM_E_IO, "HDF5 could not write the prepared values%s%s",
                        done < count ? " at " : "", done < count ? items[done].path : "");
    return QEM_OK;
}
