/* A genuine HDF5 file for a pack: a user block (filled in last with
 * prelude, manifest and index; 64 KiB unless the plan needs more), and
 * one group per shard under
 * /quantem_gpu/shards holding contiguous 1-D datasets whose absolute file
 * offsets the index records. */
#ifndef QEM_PACK_H5WRITE_H
#define QEM_PACK_H5WRITE_H

#include <stdint.h>

#include "qem.h"

/* The user block every upstream producer writes, and the largest one a
 * plan may take when the metadata of many shards needs more (libhdf5
 * takes powers of two of at least 512). */
#define PACK_USER_BLOCK 65536u
#define PACK_MAX_USER_BLOCK (16u << 20)

typedef struct pack_h5_writer pack_h5_writer;

/* Creates the HDF5 file in the open, empty file `fd` (an unnamed
 * O_TMPFILE until it is published) with a user block of `user_block`
 * bytes (a power of two) and the /quantem_gpu group and its attributes.
 * `fd` stays the caller's. */
qem_status qem_pack_h5_create(int fd, uint64_t user_block, const char *schema,
                              const char *identity_hex, const uint64_t shape[4],
                              const char *working_dtype, pack_h5_writer **out, qem_error *error);

/* Writes dataset /quantem_gpu/shards/NNN/`name` (created with the shard's
 * group on its first dataset) of `count` elements of 1 or 4 bytes
 * (little-endian u8 or u32), contiguous, and returns its absolute file
 * offset and byte size. */
qem_status qem_pack_h5_append(pack_h5_writer *w, uint64_t shard, const char *name, const void *data,
                              uint64_t count, unsigned item_bytes, uint64_t *offset,
                              uint64_t *bytes, qem_error *error);

/* One dataset of the prepared extensions, under /quantem_gpu/prepared. */
typedef struct pack_h5_dataset {
    const char *path;   /* below the group, e.g. "detector_products_v1/bf_mask_u8" */
    const void *data;   /* little-endian items */
    unsigned rank;      /* 1 or 2 */
    uint64_t dims[2];
    unsigned item_bytes; /* 1 or 4 */
    uint64_t offset;    /* out: absolute file offset */
} pack_h5_dataset;

/* Opens the complete pack HDF5 file in `fd` for writing and writes each
 * dataset (replacing one already at its path: the file keeps its space),
 * contiguous, allocated at once and 4-byte aligned (the moments must be);
 * flushes and closes. `fd` stays the caller's. */
qem_status qem_pack_h5_prepared(int fd, pack_h5_dataset *items, size_t count, qem_error *error);

/* Flushes and closes the file; the writer is freed either way. */
qem_status qem_pack_h5_close(pack_h5_writer *w, qem_error *error);

#endif
