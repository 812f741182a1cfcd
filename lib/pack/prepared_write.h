/* Writing a pack's prepared extensions (pack/prepared.h) into a complete,
 * not yet published pack: what `qem pack produce` and `qem calibrate -o`
 * add before they link the file into place. */
#ifndef QEM_PACK_PREPARED_WRITE_H
#define QEM_PACK_PREPARED_WRITE_H

#include <stdint.h>

#include "qem.h"

typedef struct pack_prepared_report {
    int moments_written, products_written;
    /* Why one was not written ("" when it was, or failed otherwise). */
    char moments_skipped[96], products_skipped[96];
} pack_prepared_report;

/* Loads the pack in `fd` (every shard digest checked), computes the exact
 * per-scan DPC moments and, for the uint8 profile with a recorded
 * calibration, the BF/ABF/ADF masks and sums, writes them as HDF5 datasets
 * under /quantem_gpu/prepared (replacing earlier ones), sets the manifest
 * members (replacing earlier ones; every other member keeps its bytes) in
 * a user block of `user_block` bytes, and reopens the result with every
 * reader rule. A file that cannot carry one (no working identity in its
 * manifest, uint16 profile for products, no calibration) is left without
 * it and the report says why. `label` names the file in messages.
 * `moments` (or NULL): the moment words already computed (the producer
 * sums them while each shard is in hand), so that a pack needing no
 * products is never loaded whole; `products` 0 leaves the products out
 * (the producer, when memory cannot hold the loaded pack). */
qem_status qem_pack_write_prepared(int fd, const char *label, uint64_t user_block, int threads,
                                   const uint8_t *moments, int products, pack_prepared_report *report,
                                   qem_error *error);

#endif
