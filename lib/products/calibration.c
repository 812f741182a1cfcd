#include "products/calibration.h"

#include <math.h>
#include <stddef.h>

#include "common/error.h"

qem_status product_calibration_estimate(const float *mean, const uint8_t *valid, uint64_t rows,
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
    int found = 0;
    double maximum = 0;
    for (uint64_t i = 0; i < n; i++) {
        const double v = mean[i];
        if ((valid && !valid[i]) || !isfinite(v))
            continue;
        if (!found || v > maximum)
            maximum = v;
        found = 1;
    }
    if (!found)
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "calibration estimate: the mean pattern has no valid finite pixel");
    if (!(maximum > 0))
        return qem_fail(error, QEM_E_INVALID_ARGUMENT,
                        "calibration estimate: the mean pattern's maximum %g is not positive, so "
                        "there is no bright-field disk",
                        maximum);
    /* The half-maximum set is never empty: it holds the maximum itself. */
    const double half = 0.5 * maximum;
    double sum = 0, sum_row = 0, sum_col = 0;
    uint64_t count = 0;
    for (uint64_t r = 0, i = 0; r < rows; r++)
        for (uint64_t c = 0; c < cols; c++, i++) {
            const double v = mean[i];
            if ((valid && !valid[i]) || !isfinite(v) || v < half)
                continue;
            sum += v;
            sum_row += v * (double)r;
            sum_col += v * (double)c;
            count++;
        }
    out->center_row = sum_row / sum;
    out->center_col = sum_col / sum;
    out->radius = sqrt((double)count / M_PI);
    out->pixels = count;
    out->maximum = maximum;
    return QEM_OK;
}
