/* What the two HDF5 families (a dense dataset, hdf5.c; a Dectris/Arina
 * master with its data files, arina.c) share, defined in hdf5_util.c:
 * libhdf5 version shims, object lookups that never leave the file, dataset
 * checks, the Dectris pixel mask, and the family state, whose frames are
 * read from ordered parts. Neither family calls the other. */
#ifndef QEM_INPUT_HDF5_UTIL_H
#define QEM_INPUT_HDF5_UTIL_H

#include <hdf5.h>

#include "input/input.h"

#define MASK_BLOCK_ELEMENTS (1u << 18)
/* Chunk grids larger than this are not walked for their stored sizes
 * (largest_compressed_chunk is then reported as unknown, 0). */
#define MAX_CHUNK_CELLS (1ull << 24)
#define BITSHUFFLE_FILTER 32008
#define ARINA_GROUP "/entry/data"
#define DECTRIS_DETECTOR "/entry/instrument/detector"
#define ARINA_MASK DECTRIS_DETECTOR "/detectorSpecific/pixel_mask"

/* --- libhdf5 API differences (1.10 as Debian ships it, and 1.12+) ------- */

#if H5_VERSION_GE(1, 12, 0)
typedef H5O_info2_t src_oinfo;
typedef H5L_info2_t src_linfo;
static inline herr_t src_oget_info(hid_t object, src_oinfo *info)
{
    return H5Oget_info3(object, info, H5O_INFO_BASIC);
}
static inline herr_t src_lget_info(hid_t location, const char *name, src_linfo *info)
{
    return H5Lget_info2(location, name, info, H5P_DEFAULT);
}
#define SRC_OVISIT(object, callback, data)                                                         \
    H5Ovisit3(object, H5_INDEX_NAME, H5_ITER_INC, callback, data, H5O_INFO_BASIC)
#else
typedef H5O_info_t src_oinfo;
typedef H5L_info_t src_linfo;
static inline herr_t src_oget_info(hid_t object, src_oinfo *info)
{
    return H5Oget_info2(object, info, H5O_INFO_BASIC);
}
static inline herr_t src_lget_info(hid_t location, const char *name, src_linfo *info)
{
    return H5Lget_info(location, name, info, H5P_DEFAULT);
}
#define SRC_OVISIT(object, callback, data)                                                         \
    H5Ovisit2(object, H5_INDEX_NAME, H5_ITER_INC, callback, data, H5O_INFO_BASIC)
#endif

/* Frames [first, first + frames) of the acquisition live in `dataset` of
 * `file`. */
typedef struct h5_part {
    char *file;      /* the member holding these frames */
    char *dataset;   /* dataset path inside it */
    uint64_t first;  /* first flat frame */
    uint64_t frames;
} h5_part;

typedef struct h5_state {
    h5_part *parts;
    size_t part_count;
    int rank; /* of the HDF5 datasets: 3 (frames, rows, cols) or 4 */
    int frames_last; /* rank 3 stored (rows, cols, frames), as Velox writes */
    size_t open_part;
    hid_t file, dset;
} h5_state;

/* Shape, type and storage of a frame dataset. */
typedef struct ds_info {
    int rank;
    hsize_t dims[4];
    qem_dtype dtype;     /* NONE when `values` says what it holds */
    input_values values; /* signed, 64-bit or float64 (qem_h5_inspect_values_dataset) */
    uint64_t largest_chunk; /* stored bytes; 0 when contiguous or not walked */
} ds_info;

enum { OBJ_ABSENT = 0, OBJ_HERE = 1, OBJ_ELSEWHERE = 2 };

void qem_h5_close_id(hid_t id);
/* Records a failure of a libhdf5 call, adding libhdf5's innermost reason. */
qem_status qem_h5_fail(qem_error *error, qem_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether `path` names an object reachable without leaving `file` through
 * an external link: OBJ_ABSENT, OBJ_HERE or OBJ_ELSEWHERE. */
qem_status qem_h5_locate(hid_t file, const char *file_path, const char *path, int *where,
                         qem_error *error);
/* Opens `path` (located OBJ_HERE) and checks that it lives in `file`
 * itself and is of `type`. */
qem_status qem_h5_open_here(hid_t file, const char *file_path, const char *path, H5O_type_t type,
                            hid_t *out, qem_error *error);
/* The scan_shape attribute of the first of `paths` that carries one; two
 * that disagree are refused. */
qem_status qem_h5_scan_shape_from_file(hid_t file, const char *file_path, const char *const *paths,
                                       size_t path_count, int *found, uint64_t shape[2],
                                       char *found_on, size_t found_on_size, qem_error *error);
/* Refuses what cannot be read faithfully; `want_rank` 0 accepts 3 or 4. */
qem_status qem_h5_inspect_dataset(hid_t dset, const char *where, int want_rank, ds_info *d,
                                  qem_error *error);
/* The same, also taking signed and 64-bit integers and float64 (d->values,
 * for a->read_values); types that hold no real numbers are refused by
 * name. */
qem_status qem_h5_inspect_values_dataset(hid_t dset, const char *where, int want_rank, ds_info *d,
                                         qem_error *error);
/* Flagged pixels and the mask digest from the Dectris pixel_mask in
 * `file`, or the implicit all-admitted mask when it has none. */
qem_status qem_h5_read_mask(acquisition *a, hid_t file, const char *file_path, qem_error *error);
qem_status qem_h5_add_part(h5_state *im, const char *file, const char *dataset, uint64_t first,
                           uint64_t frames, qem_error *error);

/* --- the family entry points --------------------------------------------- */

/* Keeps `file`, the master a claim opened, for the describe that follows
 * (the family state is created in a->impl); on failure `file` is closed. */
qem_status qem_h5_keep_master(acquisition *a, hid_t file, qem_error *error);

/* A family's own description of the master `file` (open, at `path`): its
 * parts (qem_h5_add_part), shape, sample type and mask (qem_h5_read_mask). */
typedef qem_status (*h5_describe_file_fn)(acquisition *a, h5_state *im, hid_t file,
                                          const char *path, const input_options *o,
                                          qem_error *error);
/* An HDF5 family's describe: the master as member, the family state in
 * a->impl, the file opened for `describe_file` (the one a claim kept, or
 * opened now) and closed after it, libhdf5's own error printing off. */
qem_status qem_h5_describe(acquisition *a, const char *path, const input_options *o,
                           h5_describe_file_fn describe_file, qem_error *error);
/* An HDF5 family's read and release (input_family). */
qem_status qem_h5_read(acquisition *a, uint64_t first, uint64_t count, void *out, qem_error *error);
void qem_h5_release(acquisition *a);

#endif
