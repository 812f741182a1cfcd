#include "common/calibration_estimate.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "common/error.h"

static int usable(const float *mean, const uint8_t *valid, uint64_t i)
{
    return (!valid || valid[i]) && isfinite(mean[i]);
}

/* Median of the usable pixels of the 3x3 neighbourhood of (r, c), centre
 * included; NAN if none. */
static double median3(const float *mean, const uint8_t *valid, uint64_t rows, uint64_t cols,
                      uint64_t r, uint64_t c)
{
    double v[9];
    int n = 0;
    for (uint64_t rr = r ? r - 1 : 0; rr <= r + 1 && rr < rows; rr++)
        for (uint64_t cc = c ? c - 1 : 0; cc <= c + 1 && cc < cols; cc++) {
            const uint64_t i = rr * cols + cc;
            if (usable(mean, valid, i)) {
                int k = n++;
                while (k > 0 && v[k - 1] > mean[i]) {
                    v[k] = v[k - 1];
                    k--;
                }
                v[k] = mean[i];
            }
        }
    if (!n)
        return NAN;
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

qem_status qem_product_calibration_estimate(const float *mean, const uint8_t *valid, uint64_t rows,
                                            uint64_t cols, product_calibration *out,
                                            qem_error *error)
{
    qem_error_clear(error);
    if (!mean || !out)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "calibration estimate: the mean pattern and result must not be NULL");
    uint64_t n;
    if (rows == 0 || cols == 0 || qem_mul_overflow_u64(rows, cols, &n) || n > SIZE_MAX)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "calibration estimate: a %llux%llu detector is empty or too large",
                        (unsigned long long)rows, (unsigned long long)cols);
    /* An isolated hot pixel would otherwise be "the maximum": the level is
     * taken from the 3x3-median-filtered pattern, and a pixel joins the
     * disk only if both it and its neighbourhood median reach half of it.
     * A disk's own pixels (radius >= ~2 px) keep their median. */
    double *filtered = malloc((size_t)n * sizeof *filtered);
    if (!filtered)
        return qem_fail(error, QEM_E_NO_MEMORY, "out of memory");
    int found = 0;
    double maximum = 0;
    for (uint64_t r = 0, i = 0; r < rows; r++)
        for (uint64_t c = 0; c < cols; c++, i++) {
            filtered[i] = usable(mean, valid, i) ? median3(mean, valid, rows, cols, r, c) : NAN;
            if (isnan(filtered[i]))
                continue;
            if (!found || filtered[i] > maximum)
                maximum = filtered[i];
            found = 1;
        }
    if (!found) {
        free(filtered);
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "calibration estimate: the mean pattern has no valid finite pixel");
    }
    if (!(maximum > 0)) {
        free(filtered);
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "calibration estimate: the mean pattern's maximum %g is not positive, so "
                        "there is no bright-field disk",
                        maximum);
    }
    const double half = 0.5 * maximum;
    double sum = 0, sum_row = 0, sum_col = 0;
    uint64_t count = 0;
    for (uint64_t r = 0, i = 0; r < rows; r++)
        for (uint64_t c = 0; c < cols; c++, i++) {
            const double v = mean[i];
            if (!usable(mean, valid, i) || v < half || !(filtered[i] >= half))
                continue;
            sum += v;
            sum_row += v * (double)r;
            sum_col += v * (double)c;
            count++;
        }
    free(filtered);
    if (!count || !(sum > 0))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "calibration estimate: no bright-field disk stands above half the "
                        "maximum of the mean pattern");
    out->center_row = sum_row / sum;
    out->center_col = sum_col / sum;
    out->radius = sqrt((double)count / M_PI);
    out->pixels = count;
    out->maximum = maximum;
    return QEM_OK;
}

void qem_mean_from_sums(const uint64_t *sums, const uint8_t *valid, uint64_t pixels,
                        uint64_t scans, float *mean)
{
    for (uint64_t px = 0; px < pixels; px++)
        mean[px] = valid[px] ? (float)((double)sums[px] / (double)scans) : 0.0f;
}

uint64_t qem_ring_mask(uint64_t rows, uint64_t cols, double center_row, double center_col,
                       double lo2, double hi2, const uint8_t *valid, uint8_t *mask)
{
    uint64_t selected = 0;
    for (uint64_t row = 0; row < rows; row++)
        for (uint64_t col = 0; col < cols; col++) {
            const double dr = (double)row - center_row, dc = (double)col - center_col;
            const double d2 = dr * dr + dc * dc;
            const uint64_t px = row * cols + col;
            mask[px] = (uint8_t)(valid[px] && d2 >= lo2 && d2 <= hi2);
            selected += mask[px];
        }
    return selected;
}
