/* The representation interface: the seam between containers and whatever
 * consumes their data (the CLI, products). A container implements these
 * operations over its own still-encoded resident; consumers never learn
 * the format. A new container is a new implementation, not a new caller. */
#ifndef QEM_COMMON_REPRESENTATION_H
#define QEM_COMMON_REPRESENTATION_H

#include "qem.h"

/* What products compute on: exact counts, float32 values, or the scaled
 * codec's integer codes (calibrated once per sum). */
typedef enum qem_product_data {
    QEM_DATA_COUNTS = 1,
    QEM_DATA_FLOAT = 2,
    QEM_DATA_CODES = 3
} qem_product_data;

typedef struct qem_representation_ops {
    qem_file_kind kind;
    void (*describe)(const void *impl, qem_container_info *info);
    /* Scans [first, first + count) of `values` into `out`, C order. */
    qem_status (*read)(void *impl, uint64_t first, uint64_t count, qem_values values, void *out,
                       size_t out_size, int threads, qem_error *error);
    /* Largest window of scans worth reading at once (a chunk or shard). */
    uint64_t (*window)(const void *impl, uint64_t first);
    /* Optional: a whole-file export that can prove more than windows can
     * (a float .qem checks logical_sha256 before publishing). */
    qem_status (*export_npy)(void *impl, const char *dest, const qem_export_options *options,
                             qem_error *error);
    void (*close)(void *impl);
    /* Optional: the load phase (packs), with the open's options; NULL for
     * a format without one. */
    qem_status (*load)(void *impl, const qem_container_options *options, qem_error *error);
    /* Everything the format can prove; fills the report's counts and
     * summary (identity_checked is the caller's). */
    qem_status (*verify)(void *impl, const qem_container_options *options,
                         const qem_verify_options *verify, qem_verify_report *report,
                         qem_error *error);
    /* Optional: first-access timings (a benchmark hook). */
    qem_status (*time_first_access)(void *impl, qem_error *error);

    /* --- what products need ------------------------------------------- */
    qem_product_data (*data)(const void *impl);
    /* Detector pixels that take part (1) or never do (0): .qem validity,
     * pack admitted (not excluded) pixels. */
    void (*valid)(const void *impl, uint8_t *mask);
    /* Exact out[k * count + i] = sum over valid p of weights[k][p] * the
     * count (or code) of scan first + i at p, touching only pixels with a
     * nonzero weight; `use_tiles` lets .qem take whole spatial-sum tiles.
     * NULL for float data. */
    qem_status (*weighted_sums)(void *impl, uint64_t first, uint64_t count,
                                const int32_t *const *weights, unsigned planes, int use_tiles,
                                int64_t *out, int threads, qem_error *error);
    /* Optional, integer data: adds each valid pixel's sum over the scans
     * into sums[p] (and raises max[p], if given) without building rows. */
    qem_status (*pixel_sums)(void *impl, uint64_t first, uint64_t count, uint64_t *sums,
                             uint32_t *max, int threads, qem_error *error);
    /* Optional, integer data: each valid pixel's sum over every scan as
     * the file records it (checked when it was opened): 1 with `sums`
     * filled, else 0. */
    int (*recorded_pixel_sums)(const void *impl, uint64_t *sums);
    /* Optional, integer data: every plane of a weighted sum (as
     * weighted_sums) answered from per-scan values the file records and
     * authenticated at open (a pack's prepared extensions): 1 with `out`
     * filled, else 0 and nothing written. */
    int (*prepared_sums)(const void *impl, uint64_t first, uint64_t count,
                         const int32_t *const *weights, unsigned planes, int64_t *out);
    /* Optional: 32 bytes that differ whenever the values products read
     * could (the key of results kept between opens): 1, else 0 where the
     * file has no such cheap identity. */
    int (*content_identity)(const void *impl, uint8_t id[32]);
    /* Codes: value = code * scale + offset for scan `scan`. */
    void (*code_affine)(const void *impl, uint64_t scan, double *scale, double *offset);
    /* The float mean-dark plane (pixels floats): 1 if the file has one. */
    int (*dark)(const void *impl, float *plane);
    /* Detector calibration recorded in the file: 1 if present. */
    int (*detector_calibration)(const void *impl, qem_detector_calibration *calibration);
    /* Convergence semi-angle in mrad: 1 if the file states it. */
    int (*semiangle_mrad)(const void *impl, double *mrad);
    /* Bytes the open representation holds in memory. */
    uint64_t (*resident_bytes)(const void *impl);
    /* Device and inode of the open file (the same file opened twice). */
    void (*file_id)(const void *impl, uint64_t id[2]);

    /* --- what front-ends show ------------------------------------------ */
    /* The file's own JSON description (a .qem header, a pack manifest),
     * valid while the representation is open. */
    const char *(*header_json)(const void *impl, size_t *length);
    /* The summary `qem info --json` prints; qem_free'd by the caller. */
    char *(*summary_json)(const void *impl, qem_error *error);
    /* What only this format has, as a JSON object (qem_container_details_json);
     * qem_free'd by the caller. */
    char *(*details_json)(const void *impl, qem_error *error);
} qem_representation_ops;

struct qem_container {
    const qem_representation_ops *ops;
    void *impl;
    int threads;
    /* The open's options, for a later load (expect_sha256 copied). */
    qem_container_options options;
    char *expect_sha256;
};

/* The implementations, in lib/qem and lib/pack. */
extern const qem_representation_ops qem_file_representation;
extern const qem_representation_ops qem_pack_representation;

#endif
