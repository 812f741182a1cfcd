/* The upstream's optional prepared extensions of a pack (pack notes 2.7):
 * `prepared_dpc_moments` (exact per-scan total, row and column moments of
 * every admitted pixel) and, for the uint8 profile, `prepared_detector_
 * products` (BF, ABF and ADF masks and their per-scan sums about the
 * recorded calibration). The uint16 profile has no upstream products;
 * qem writes the same member under its own key and schema there
 * (`qem_prepared_detector_products`, bound to `working_logical_sha256`),
 * which other readers ignore as an unknown key. Readers refuse any broken
 * rule while opening (QEM_E_PACK_PREPARED); products then answer matching
 * requests from them without decoding. */
#ifndef QEM_PACK_PREPARED_H
#define QEM_PACK_PREPARED_H

#include <jansson.h>
#include <stdint.h>

#include "qem.h"

typedef struct qem_pack qem_pack;

#define PREPARED_DPC_KEY "prepared_dpc_moments"
#define PREPARED_PRODUCTS_KEY "prepared_detector_products"
#define PREPARED_DPC_SCHEMA_U8 "quantem.gpu.prepared-dpc-moments/v1"
#define PREPARED_DPC_SCHEMA_U16 "quantem.gpu.prepared-dpc-moments/v2"
#define PREPARED_PRODUCTS_SCHEMA "quantem.gpu.prepared-detector-products/v1"
#define PREPARED_PRODUCTS_KEY_U16 "qem_prepared_detector_products"
#define PREPARED_PRODUCTS_SCHEMA_U16 "qem.prepared-detector-products/v1"
#define PREPARED_DIGEST_ENCODING "canonical-json-numbers-as-f64be-hex/v1"
#define PREPARED_PRODUCT_COUNT 3

typedef struct pack_prepared_product {
    double inner, outer; /* px about the calibrated centre */
    uint64_t selected;
    uint64_t mask_offset, values_offset;
    uint8_t mask_sha256[32], values_sha256[32];
    uint8_t *mask;    /* pixels bytes, 0/1, once authenticated */
    uint32_t *values; /* scans */
} pack_prepared_product;

typedef struct pack_prepared {
    int has_moments;
    uint64_t moments_offset;
    uint8_t moments_sha256[32];
    uint64_t *moments; /* scans x 3: total, row moment, column moment */
    int has_products;
    pack_prepared_product products[PREPARED_PRODUCT_COUNT];
} pack_prepared;

extern const char *const qem_prepared_product_names[PREPARED_PRODUCT_COUNT]; /* bf, abf, adf */

/* The products member's key, schema, and the manifest's working-value
 * identity it repeats (manifest key, member key), for p's profile. */
typedef struct pack_products_names {
    const char *key, *schema, *manifest_working, *member_working;
} pack_products_names;
pack_products_names qem_pack_products_names(const qem_pack *p);

/* Validates both extensions of the open pack's manifest (every rule of the
 * notes), that their ranges lie inside the file and overlap nothing else,
 * then reads, authenticates (SHA-256) and checks their contents.
 * `metadata_end` is where the user block's prelude, manifest and index end. */
qem_status qem_pack_prepared_check(qem_pack *p, uint64_t metadata_end, qem_error *error);
void qem_pack_prepared_free(pack_prepared *prepared);

/* The largest working value, and the moment bounds of the notes over the
 * admitted pixels. */
uint32_t qem_pack_prepared_max_value(const qem_pack *p);
void qem_pack_prepared_bounds(const qem_pack *p, uint64_t *total, uint64_t *row, uint64_t *col);

/* The inner and outer radius of product k (bf, abf, adf) for radius r. */
void qem_pack_prepared_geometry(unsigned k, double r, double *inner, double *outer);
/* The inclusive mask rule: admitted pixels whose distance from the centre
 * lies within [inner, outer]; returns the count selected. */
uint64_t qem_pack_prepared_mask(const qem_pack *p, double center_row, double center_col,
                                double inner, double outer, uint8_t *mask);

/* SHA-256 of the canonical calibration JSON: every number as
 * "f64be:<16 hex>", sorted keys, no whitespace, ASCII with \u escapes.
 * 0 when `value` holds something JSON cannot (out of memory). */
int qem_pack_calibration_digest(const json_t *value, uint8_t digest[32]);

/* The values from the loaded pack's data: every scan's moments as 8
 * little-endian u32 words (caller frees), and the three products' masks
 * about the recorded calibration with their sums (little-endian u32;
 * caller frees both buffers of each, also on failure). */
typedef struct pack_product_data {
    uint8_t *mask;
    uint8_t *values;
    uint64_t selected;
} pack_product_data;
qem_status qem_pack_prepared_moments(const qem_pack *p, int threads, uint8_t **words,
                                     qem_error *error);
qem_status qem_pack_prepared_products(const qem_pack *p, int threads,
                                      pack_product_data d[PREPARED_PRODUCT_COUNT], qem_error *error);
/* qem verify: the recorded values equal those computed from the loaded
 * data (QEM_E_PACK_PREPARED naming the first scan that differs). */
qem_status qem_pack_prepared_verify(const qem_pack *p, int threads, qem_error *error);

/* Answers every plane of a weighted sum over admitted pixels from the
 * prepared values: 1 with out[k * count + i] filled, else 0 (nothing is
 * written). Planes it recognises: 1 on every admitted pixel (totals), the
 * detector row or column index on every admitted pixel (moments), and a
 * prepared product's mask. */
int qem_pack_prepared_sums(const qem_pack *p, uint64_t first, uint64_t count,
                           const int32_t *const *weights, unsigned planes, int64_t *out);

#endif
