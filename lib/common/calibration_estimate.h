/* Detector calibration estimated from the mean diffraction pattern: the
 * bright-field disk's centre and radius, as the "mean-diffraction-half-
 * maximum" label promises (upstream only ever used the label); and the
 * detector geometry rule every mask follows. Pure arithmetic, below the
 * formats, so that the products and the .qem writer (which records the
 * default detector's image) resolve the same disk from the same sums. */
#ifndef QEM_COMMON_CALIBRATION_ESTIMATE_H
#define QEM_COMMON_CALIBRATION_ESTIMATE_H

#include <stdint.h>

#include "qem.h"

typedef struct product_calibration {
    double center_row, center_col; /* detector pixels, pixel (r,c) at coordinate (r,c), no +0.5 */
    double radius;                 /* bright-field radius, px */
    uint64_t pixels;               /* pixels at or above half maximum */
    double maximum;                /* maximum of the 3x3-median-filtered mean pattern */
} product_calibration;

#define PRODUCT_CALIBRATION_METHOD "mean-diffraction-half-maximum"

/* From the mean diffraction pattern (rows x cols float32, C order) and an
 * optional validity mask (nonzero = valid, NULL = all): the pixels at or
 * above half the maximum (valid, finite pixels only); centre = their
 * intensity-weighted centroid; radius = sqrt(count / pi). Accumulates in
 * double. Isolated hot pixels are kept out by a 3x3 median: the maximum is
 * the median-filtered pattern's, and a pixel counts only where its
 * neighbourhood median also reaches half of it. Fails (QEM_E_INVALID_ARGUMENT) when no valid finite pixel exists
 * or the maximum is <= 0. */
qem_status qem_product_calibration_estimate(const float *mean, const uint8_t *valid, uint64_t rows,
                                            uint64_t cols, product_calibration *out,
                                            qem_error *error);

/* The mean pattern of `scans` scans from each pixel's exact sum, as the
 * products compute it: (float)(sum / scans) in double, invalid pixels 0. */
void qem_mean_from_sums(const uint64_t *sums, const uint8_t *valid, uint64_t pixels,
                        uint64_t scans, float *mean);

/* The one geometry rule of detector masks: pixel (row, col) is selected
 * when valid and its squared distance from the centre, in double
 * precision, lies in [lo2, hi2] (both ends inclusive). Returns how many. */
uint64_t qem_ring_mask(uint64_t rows, uint64_t cols, double center_row, double center_col,
                       double lo2, double hi2, const uint8_t *valid, uint8_t *mask);

#endif
