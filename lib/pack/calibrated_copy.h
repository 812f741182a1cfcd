/* A calibrated copy of a Lossless Pack Format v1 file: the same file with
 * the manifest's source-bound detector_calibration set. Only the user
 * block changes; the original is never written. */
#ifndef QEM_PACK_CALIBRATED_COPY_H
#define QEM_PACK_CALIBRATED_COPY_H

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
 * source_identity_sha256. Every other manifest member keeps its exact
 * bytes, the index is unchanged, and every byte after the user block is
 * copied as is; only the manifest bytes, its CRC-32 and the index position
 * are recomputed. The source is opened and validated with qem_pack_open
 * first. Refuses (QEM_E_INVALID_ARGUMENT) non-finite or out-of-range values
 * (centre outside the detector, radius <= 0 or beyond the detector
 * diagonal, blank method), a manifest that no longer fits the user block
 * (QEM_E_LIMIT), a source whose prepared detector products derive from its
 * present calibration (QEM_E_UNSUPPORTED), and a source that changes while
 * it is copied (QEM_E_CHANGED). */
qem_status qem_pack_write_calibrated_copy(const char *src, const char *dest,
                                          const pack_calibration_in *cal, qem_error *error);

#endif
