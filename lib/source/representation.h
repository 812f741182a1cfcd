/* The representation interface: the seam between containers and whatever
 * consumes their data (the CLI, products). A container implements these
 * operations over its own still-encoded resident; consumers never learn
 * the format. A new container is a new implementation, not a new caller. */
#ifndef QEM_SOURCE_REPRESENTATION_H
#define QEM_SOURCE_REPRESENTATION_H

#include "qem.h"

typedef struct qem_representation_ops {
    qem_source_kind kind;
    void (*describe)(const void *impl, qem_source_info *info);
    /* Scans [first, first + count) of `values` into `out`, C order. */
    qem_status (*read)(void *impl, uint64_t first, uint64_t count, qem_values values, void *out,
                       size_t out_size, int threads, qem_error *error);
    /* Largest window of scans worth reading at once (a chunk or shard). */
    uint64_t (*window)(const void *impl, uint64_t first);
    /* Optional: a whole-file export that can prove more than windows can
     * (a float .qem checks logical_sha256 before publishing). */
    qem_status (*export_npy)(void *impl, const char *dest, qem_values values, int threads,
                             qem_progress_fn progress, void *progress_user, qem_error *error);
    void (*close)(void *impl);
} qem_representation_ops;

struct qem_source {
    const qem_representation_ops *ops;
    void *impl;
    int threads;
};

/* The implementations, in lib/qem and lib/pack. */
extern const qem_representation_ops qem_file_representation;
extern const qem_representation_ops qem_pack_representation;

#endif
