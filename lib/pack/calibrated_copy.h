/* A calibrated copy of a Lossless Pack Format v1 file: the same file with
 * the manifest's source-bound detector_calibration set. Only the user
 * block changes; the original is never written. */
#ifndef QEM_PACK_CALIBRATED_COPY_H
#define QEM_PACK_CALIBRATED_COPY_H

#include <stddef.h>

#include "pack/prepared_write.h"
#include "qem.h"

typedef struct pack_calibration_in {
    double center_row, center_col, radius; /* px */
    const char *method;                    /* e.g. PRODUCT_CALIBRATION_METHOD */
    int has_dpc;                           /* optional pair, both or neither */
    double dpc_rotation_degrees;
    int dpc_component_order_exchanged;
} pack_calibration_in;

#define PACK_CALIBRATION_SCHEMA "quantem.gpu.detector-calibration/v1"

/* Copies pack `src` to `dest` (never overwriting; atomic: an unnamed
 * temporary in dest's folder, linked only when complete and reopened
 * cleanly), with the manifest's `detector_calibration` set (replaced if
 * present) to the specification's schema, bound to the file's
 * source_identity_sha256, and the prepared extensions written for it
 * (qem_pack_write_prepared; `report`, or NULL, says which). Every other
 * manifest member keeps its exact bytes, the index is unchanged, and the
 * HDF5 body is the source's with only the prepared datasets added, so
 * every shard range stays valid. The source is opened and validated with
 * qem_pack_open first. Refuses (QEM_E_INVALID_ARGUMENT) non-finite or
 * out-of-range values (centre outside the detector, radius <= 0 or beyond
 * the detector diagonal, blank method), a manifest that no longer fits
 * the user block (QEM_E_LIMIT), unknown bytes in the user block
 * (QEM_E_UNSUPPORTED), and a source that changes while it is copied
 * (QEM_E_CHANGED). */
qem_status qem_pack_write_calibrated_copy(const char *src, const char *dest,
                                          const pack_calibration_in *cal,
                                          pack_prepared_report *report, qem_error *error);

/* The manifest text `s` with member `key` replaced by `member_text` (a
 * whole `"key":value`), or inserted before the first key that sorts after
 * it (a sorted manifest stays sorted), or removed when `member_text` is
 * NULL. Every other member keeps its bytes. Caller frees `out`. */
qem_status qem_pack_manifest_splice(const char *s, size_t n, const char *key,
                                   const char *member_text, char **out, size_t *out_bytes,
                                   qem_error *error);

#endif
