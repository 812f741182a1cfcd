/* .npy acquisitions: 4D (scan rows, scan columns, detector rows, detector
 * columns), or a 3D frame stack with a scan shape; uint8, uint16, uint32
 * or float32 in either byte order. Frames are read by pread of the file's
 * own bytes, so a save can hash them as it reads. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/npy.h"
#include "input/input.h"
#include "input/swap.h"

typedef struct npy_state {
    qem_npy *npy;
    int fd;
    uint64_t data_offset;
    int big_endian;
} npy_state;

static int npy_recognises(const uint8_t *head, size_t n)
{
    return n >= 6 && memcmp(head, "\x93NUMPY", 6) == 0;
}

static qem_status npy_describe(acquisition *a, const char *path, const uint8_t *head, size_t n,
                               const input_options *o, qem_error *error)
{
    (void)head;
    (void)n;
    if (o->dataset)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "'%s' is a .npy file; --dataset only applies to HDF5 files", path);
    npy_state *s = calloc(1, sizeof *s);
    if (!s)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    s->fd = -1;
    a->impl = s;
    QEM_TRY(qem_input_add_member(a, path, 1, error));
    QEM_TRY(qem_npy_open_acquisition(path, &s->npy, error));
    const qem_npy_info *info = qem_npy_info_of(s->npy);
    if (strstr(info->descr, "b1"))
        return qem_fail(error, QEM_E_NPY,
                        "'%s' holds booleans, not counts; if they are counts, save them as "
                        "array.astype('u1') first",
                        path);
    a->sample_type = info->dtype;
    s->big_endian = info->descr[0] == '>';
    s->data_offset = info->data_offset;
    s->fd = qem_npy_descriptor(s->npy);
    if (info->ndim == 4) {
        const int given = o->scan_shape[0] || o->scan_shape[1];
        if (given && (o->scan_shape[0] != info->shape[0] || o->scan_shape[1] != info->shape[1]))
            return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                            "'%s' is a 4D array with scan shape %llux%llu; the scan shape given "
                            "(%llux%llu) contradicts it, so omit it",
                            path, (unsigned long long)info->shape[0],
                            (unsigned long long)info->shape[1],
                            (unsigned long long)o->scan_shape[0],
                            (unsigned long long)o->scan_shape[1]);
        memcpy(a->shape, info->shape, sizeof a->shape);
    } else if (info->ndim == 3) {
        uint64_t scan[2];
        QEM_TRY(qem_input_scan_shape(o, 0, NULL, NULL, info->shape[0], path, scan, error));
        a->shape[0] = scan[0];
        a->shape[1] = scan[1];
        a->shape[2] = info->shape[1];
        a->shape[3] = info->shape[2];
    } else {
        return qem_fail(error, QEM_E_NPY,
                        "'%s' has %u dimensions; an acquisition is 4D (scan_row, scan_column, "
                        "detector_row, detector_column) or a 3D frame stack with "
                        "--scan-shape ROWS,COLUMNS",
                        path, info->ndim);
    }
    qem_input_fact(a, "descr", json_string(info->descr));
    qem_input_fact(a, "fortran_order", json_false());
    char version[16];
    snprintf(version, sizeof version, "%u.%u", info->version_major, info->version_minor);
    qem_input_fact(a, "format_version", json_string(version));
    json_t *shape = json_array();
    for (unsigned i = 0; i < info->ndim; i++)
        json_array_append_new(shape, json_integer((json_int_t)info->shape[i]));
    qem_input_fact(a, "shape", shape);
    return qem_input_implicit_mask(a, error);
}

static qem_status npy_read(acquisition *a, uint64_t first, uint64_t count, void *out,
                           qem_error *error)
{
    npy_state *s = a->impl;
    const size_t item = qem_dtype_size(a->sample_type);
    const uint64_t pixels = a->shape[2] * a->shape[3];
    const uint64_t offset = s->data_offset + first * pixels * item;
    const size_t bytes = (size_t)(count * pixels * item);
    QEM_TRY(qem_pread_full(s->fd, out, bytes, offset, QEM_E_CHANGED, error));
    qem_input_member_read(&a->members[0], s->fd, offset, out, bytes);
    if (s->big_endian)
        input_swap(out, (size_t)(count * pixels), item);
    return QEM_OK;
}

static void npy_release(acquisition *a)
{
    npy_state *s = a->impl;
    if (s)
        qem_npy_close(s->npy);
    free(s);
    a->impl = NULL;
}

const input_family qem_input_family_npy = {
    "npy", npy_recognises, npy_describe, npy_read, npy_release, 1, NULL};
