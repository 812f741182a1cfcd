/* Sources the pack producer reads: a .npy array, a dense dataset inside
 * any HDF5 file, or a Dectris/Arina-style family (a master file whose
 * entry/data links name ordered data files of bitshuffle/LZ4 frames).
 * Every member is authenticated (SHA-256 of its bytes, file stat before
 * and after) and the source identity is framed as notes-pack-format §2.6
 * defines it; see doc/pack-producer.md. */
#ifndef QEM_PACK_SOURCE_H
#define QEM_PACK_SOURCE_H

#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "qem.h"
#include "common/fileio.h"

typedef struct pack_member {
    char *path;
    int is_master;   /* the master, or the single file of a one-file source */
    uint64_t bytes;
    uint8_t sha256[32];
    qem_file_stamp stamp; /* taken when the member was hashed */
} pack_member;

typedef struct pack_source_options {
    const char *dataset;    /* HDF5 dataset path, e.g. "/entry/data/data"; NULL = find it */
    uint64_t scan_shape[2]; /* rows, columns for a 3D frame stack; {0, 0} = from the file */
    qem_progress_fn progress; /* bytes of each member as it is hashed; cancels */
    void *progress_user;
} pack_source_options;

typedef struct pack_source {
    char kind[16];            /* "npy", "hdf5" or "arina" */
    uint64_t shape[4];        /* scan rows, scan columns, detector rows, detector columns */
    qem_dtype dtype;          /* stored dtype: uint16, or uint8 */
    pack_member *members;     /* the master (or single file) first, then data files in order */
    size_t member_count;
    uint32_t *bad_pixels;     /* ascending row-major indices: nonzero pixel_mask entries */
    uint64_t bad_count;
    uint8_t detector_mask_sha256[32]; /* the full LE u32 mask; without one, of 4 x pixels zero bytes */
    const char *mask_origin;  /* "source-little-endian-u32-mask" or "implicit-all-admitted-u32-mask" */
    uint8_t identity[32];     /* live4dstem.dataset/v0.1 framing over the member digests */
    uint64_t largest_compressed_chunk; /* largest stored HDF5 chunk in bytes, 0 if unknown */
    void *impl;
} pack_source;

/* Opens `path` (its kind recognised by signature), authenticates every
 * member and gathers shape, dtype, bad pixels, the mask digest and the
 * identity. Refuses what cannot be packed, saying why: other dtypes,
 * non-positive shapes, a 3D stack without a scan shape that divides it,
 * several candidate datasets without `dataset`, chunk layouts libhdf5
 * cannot read, a member that changes while it is hashed
 * (QEM_E_CHANGED). */
qem_status pack_source_inspect(const char *path, const pack_source_options *options,
                               pack_source **out, qem_error *error);

/* Hashes every member again; QEM_E_CHANGED when a digest or stat differs
 * from the inspection. */
qem_status pack_source_reauthenticate(pack_source *source, qem_progress_fn progress,
                                      void *progress_user, qem_error *error);

/* Stat only (cheap): QEM_E_CHANGED when any member's stat differs. */
qem_status pack_source_check_unchanged(const pack_source *source, qem_error *error);

/* Reads `count` frames (flat scan order) starting at `first`, widened to
 * uint16, into `out` (count * detector pixels values). */
qem_status pack_source_read(pack_source *source, uint64_t first, uint64_t count, uint16_t *out,
                            qem_error *error);

void pack_source_close(pack_source *source);

#endif
