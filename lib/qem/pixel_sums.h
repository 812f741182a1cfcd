/* Each detector pixel's exact sum over every scan, recorded by qem's writer
 * in scientific_metadata.extensions (QEM_PIXEL_SUMS_KEY) of integer-codec
 * files, so that the mean pattern and the calibration estimate of a file
 * qem wrote need no pass over its scans. Other readers ignore the key (the
 * format's extensions are namespaced additions); qem checks every rule
 * below while opening and `qem verify` recomputes the sums.
 *
 *   {"schema": "qem.pixel-sums/v1", "scans": N, "pixels": P,
 *    "dtype": "<u8", "body_digest": hex SHA-256 of the body block digests
 *    (32 bytes each, in order), "data": base64 of P little-endian u64}
 *
 * Rules: the schema, scans and pixels equal the file's; data decodes to
 * exactly 8P bytes; invalid pixels sum to 0; no sum exceeds N times the
 * dtype's maximum; body_digest names this file's body (a record pasted
 * onto another body is refused). The header grows by at most 11 P + 400
 * bytes, recorded only up to QEM_PIXEL_SUMS_MAX_PIXELS pixels (1.4 MiB)
 * and only where that is at most 1/64 of the body: a small file, whose
 * pass over every scan is quick anyway, keeps its size. */
#ifndef QEM_QEM_PIXEL_SUMS_H
#define QEM_QEM_PIXEL_SUMS_H

#include <jansson.h>
#include <stdint.h>

#include "qem.h"

#define QEM_PIXEL_SUMS_KEY "qem.pixel_sums"
#define QEM_PIXEL_SUMS_SCHEMA "qem.pixel-sums/v1"
#define QEM_PIXEL_SUMS_MAX_PIXELS (1u << 17)

struct qem_file;

/* 1 where a record of `pixels` sums is small enough beside the body. */
static inline int qem_pixel_sums_worth_recording(uint64_t pixels, uint64_t body_bytes)
{
    return pixels <= QEM_PIXEL_SUMS_MAX_PIXELS && 11 * pixels + 400 <= body_bytes / 64;
}

/* The body identity a record carries: SHA-256 over `count` block digests. */
qem_status qem_pixel_sums_body_digest(const uint8_t (*digests)[32], uint64_t count,
                                      char hex[65], qem_error *error);

/* Sets the record in `scientific` (its extensions object, made if absent),
 * or, with sums NULL, removes any record it carries (a re-save of data
 * qem could not sum must not keep an old one). */
qem_status qem_pixel_sums_put(json_t *scientific, const uint64_t *sums, uint64_t scans,
                              uint64_t pixels, const char *body_digest_hex, qem_error *error);

/* Reads and checks the file's record, if any, into file->recorded_sums. */
qem_status qem_pixel_sums_load(struct qem_file *file, qem_error *error);

/* What the writer's records (this one, detector_image.h) share. */
/* The record `key` of the file's scientific_metadata.extensions, or NULL. */
const json_t *qem_record_get(const struct qem_file *file, const char *key);
/* `scientific`'s extensions object, made if absent; NULL (QEM_OK) where
 * it is not an object (the validator refuses such metadata before this). */
qem_status qem_record_extensions(json_t *scientific, json_t **ext, qem_error *error);
/* QEM_E_METADATA: "the file was altered after qem wrote it", naming the
 * record and `why`. */
qem_status qem_record_refuse(const struct qem_file *file, const char *key, const char *why,
                             qem_error *error);
/* 1 when `v` is the non-negative integer `want`. */
int qem_record_integer_equals(const json_t *v, uint64_t want);
/* The rules every record starts with: an object of schema `schema`, in
 * an integer-codec file, counting its scans and pixels, recorded for this
 * body (body_digest). */
qem_status qem_record_check_head(const struct qem_file *file, const json_t *record,
                                 const char *key, const char *schema, qem_error *error);

#endif
