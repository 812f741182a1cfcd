/* The image of the file's default detector, recorded by qem's writer in
 * scientific_metadata.extensions (QEM_DETECTOR_IMAGE_KEY) of integer-codec
 * files, so that a viewer's first image of a file qem wrote needs no pass
 * over the body (whose blocks can then be authenticated after it). Other
 * readers ignore the key; qem checks every rule below while opening,
 * answers a weighted sum from it only when its one plane is exactly the
 * recorded mask, and `qem verify` recomputes it.
 *
 *   {"schema": "qem.detector-image/v1", "detector": "bf",
 *    "center_px": [row, column], "radius_px": r, "scans": N, "pixels": P,
 *    "mask": base64 of ceil(P / 8) bytes, pixel p at bit p % 8 of byte
 *            p / 8,
 *    "dtype": "<u2" | "<u4" | "<u8" (the smallest that holds every value),
 *    "body_digest": as qem.pixel_sums, "data": base64 of N little-endian
 *    values, each scan's sum of its counts over the mask}
 *
 * The default detector is the one the products resolve for a plain BF
 * request: the recorded detector calibration, else the estimate from the
 * recorded pixel sums; its mask follows the one geometry rule
 * (common/calibration_estimate.h).
 *
 * Rules: the schema, scans and pixels equal the file's; the centre and
 * radius are finite (the radius positive); the mask decodes to exactly
 * ceil(P / 8) bytes, sets no invalid pixel and no bit past P; the dtype is
 * one of the three and data decodes to exactly N values of it; no value
 * exceeds the mask's pixel count times the dtype's maximum count;
 * body_digest names this file's body. Recorded only with the pixel sums,
 * for at most QEM_DETECTOR_IMAGE_MAX_SCANS scans and where the record
 * weighs at most 1/64 of the body: the header grows by at most
 * 4 * ceil((8 N + ceil(P / 8)) / 3) + 600 bytes. */
#ifndef QEM_QEM_DETECTOR_IMAGE_H
#define QEM_QEM_DETECTOR_IMAGE_H

#include <jansson.h>
#include <stdint.h>

#include "qem.h"

#define QEM_DETECTOR_IMAGE_KEY "qem.detector_image"
#define QEM_DETECTOR_IMAGE_SCHEMA "qem.detector-image/v1"
#define QEM_DETECTOR_IMAGE_MAX_SCANS (1u << 22)

struct qem_file;

/* Removes any record from `scientific` (a re-save must never pass an old
 * one on). */
void qem_detector_image_drop(json_t *scientific);

/* Computes the default detector's image of `written` (a file whose body
 * the caller has just hashed, its header carrying the pixel sums) and
 * records it in `scientific`; records nothing (QEM_OK) where the file
 * has no recorded sums, no disk resolves or the record would not pay. */
qem_status qem_detector_image_record(json_t *scientific, struct qem_file *written, int threads,
                                     qem_error *error);

/* Reads and checks the file's record, if any, into the file. */
qem_status qem_detector_image_load(struct qem_file *file, qem_error *error);

/* 1 with `out` (count values) filled from the record when `planes` is 1
 * and that plane weighs exactly the recorded mask's valid pixels 1 and
 * every other valid pixel 0; else 0, nothing written. */
int qem_detector_image_answer(const struct qem_file *file, uint64_t first, uint64_t count,
                              const int32_t *const *weights, unsigned planes, int64_t *out);

/* `qem verify`: the record against the counts; QEM_E_METADATA naming the
 * first scan that differs. */
qem_status qem_detector_image_verify(struct qem_file *file, int threads, qem_error *error);

#endif
