/* The products engine's shared internals: the session over a source, the
 * window loop and the exact primitives every product is built from. Only
 * the representation interface is used; no file format is known here. */
#ifndef QEM_PRODUCTS_PRODUCTS_H
#define QEM_PRODUCTS_PRODUCTS_H

#include "qem.h"
#include "qem_experimental.h"
#include <stdatomic.h>

#include "common/device_session.h"
#include "common/representation.h"

struct qem_products {
    qem_container *source;
    const qem_representation_ops *ops;
    void *impl;
    qem_container_info info;
    uint64_t scan_rows, scan_cols, det_rows, det_cols, scans, pixels;
    qem_product_data data;
    uint8_t *valid;   /* pixels bytes */
    uint64_t valid_count;
    float *dark;      /* float data: the mean-dark plane, or NULL */
    qem_products_options options;
    qem_products_path path; /* fast, or the dense reference (qem_experimental.h) */
    int threads;
    char *cache_dir;              /* options.cache_dir, copied; or NULL */
    _Atomic int sums_origin;      /* a qem_origin */
    _Atomic int last_origin;      /* of the last weighted sums: computed or recorded */
    qem_device_session *device;   /* options.device's session (not the CPU), or NULL */
};

/* The representation's own reductions, on options.device: the contracts
 * of its weighted_sums (use_tiles on) and pixel_sums. */
qem_status qem_prod_reduce_weighted(qem_products *p, uint64_t first, uint64_t count,
                                    const int32_t *const *weights, unsigned planes, int64_t *out,
                                    qem_error *error);
qem_status qem_prod_reduce_pixels(qem_products *p, uint64_t first, uint64_t count,
                                  uint64_t *sums, uint32_t *max, qem_error *error);

/* Each valid pixel's sum over every scan (integer data): recorded in the
 * file, kept from an earlier open (cache_dir), or a pass over the scans
 * (then kept). sums_origin says which. */
qem_status qem_prod_whole_sums(qem_products *p, uint64_t *sums, qem_error *error);
/* sums_cache.c: 1 when a kept entry for `id` passed every check (sums
 * filled); the store is best effort. */
int qem_prod_sums_cache_load(const qem_products *p, const uint8_t id[32], uint64_t *sums);
void qem_prod_sums_cache_store(const qem_products *p, const uint8_t id[32], const uint64_t *sums);
/* The default detector's image of `id` over the mask whose digest is
 * `mask_digest` (mask_pixels selected): 1 when kept and every check passed
 * (out filled, scans values); the store is best effort. */
int qem_prod_image_cache_load(const qem_products *p, const uint8_t id[32],
                              const uint8_t mask_digest[32], uint64_t mask_pixels, int64_t *out);
void qem_prod_image_cache_store(const qem_products *p, const uint8_t id[32],
                                const uint8_t mask_digest[32], uint64_t mask_pixels,
                                const int64_t *values);

/* Largest integer a count (or code) can take: from the working dtype. */
uint32_t qem_prod_max_value(const qem_products *p);

/* Reads scans [first, first + count) one bounded window at a time into a
 * buffer of the values products use (counts: working dtype; codes: raw u16
 * codes; float: float32) and calls `each` with (first scan, scans, rows).
 * Reports progress per window. */
typedef qem_status (*prod_window_fn)(void *user, uint64_t first, uint64_t count,
                                     const void *rows, qem_error *error);
qem_status qem_prod_for_windows(qem_products *p, uint64_t first, uint64_t count,
                                prod_window_fn each, void *user, qem_error *error);

/* Value of element k of a window as read by qem_prod_for_windows (integer). */
static inline uint32_t prod_int_at(const qem_products *p, const void *rows, uint64_t k)
{
    return p->info.working_dtype == QEM_DTYPE_UINT8 && p->data == QEM_DATA_COUNTS
               ? ((const uint8_t *)rows)[k]
               : ((const uint16_t *)rows)[k];
}

/* Neumaier (Kahan-Babuska) compensated float64 sum, for per-pixel sums
 * over many scans (mean and region patterns), rounded to float32 once at
 * the end: exact rounding steps, no fused multiply-add (the files are built
 * with -ffp-contract=off). A non-finite term propagates and resets the
 * compensation. engine.c keeps a float32 one for per-scan sums. */
typedef struct prod_neumaier64 {
    double sum, compensation;
} prod_neumaier64;

void qem_prod_neumaier64_add(prod_neumaier64 *n, double value);

/* Exact weighted sums through the fast path (or the reference path when
 * the session asks for it), in pieces of scans that merge by addition. */
qem_status qem_prod_weighted_sums(qem_products *p, uint64_t first, uint64_t count,
                                  const int32_t *const *weights, unsigned planes, int64_t *out,
                                  qem_error *error);

/* Float data: per-scan compensated sums of (value - dark) over mask pixels
 * in row-major pixel order, scans [first, first + count). */
qem_status qem_prod_float_masked_sums(qem_products *p, uint64_t first, uint64_t count,
                                      const uint8_t *mask, float *out, qem_error *error);

/* An image of the scan shape (2-D) or with `components` (3-D). */
qem_status qem_prod_image_new(qem_image *image, qem_dtype dtype, uint64_t rows, uint64_t cols,
                              uint64_t components, qem_error *error);

/* QEM_E_INVALID_ARGUMENT unless `size` bytes hold `count` items of `item`
 * bytes ("<what> needs N bytes, M given"). */
qem_status qem_prod_check_buffer(size_t size, uint64_t count, size_t item, const char *what,
                                 qem_error *error);

#endif
